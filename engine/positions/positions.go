// Package positions owns pgmirror's bookkeeping on a destination database:
// the schema _pgmirror and its tables. Exactly-once delivery rests on it,
// and nothing outside this package reads or writes those tables.
//
//   - _pgmirror.applied: one row per mirror (mirror_uid): the end LSN of the
//     last source transaction whose changes are on the destination, and the
//     id of the batch that applied it. A CDC batch records it inside its own
//     destination transaction (QueueApplied), so data and position commit
//     together; replication restarts there and skips what ends at or before
//     it.
//   - _pgmirror.table_positions: per mirror and source table whose data
//     stands at another position than the mirror's, because the table was
//     copied on its own (a table resync, a table added to the mirror) from
//     a snapshot at that position: its changes are applied only from there
//     on, and the entry goes once the table is level with the mirror.
//   - _pgmirror.flushes: one row per mirror, rewritten by FlushWAL to force
//     a WAL flush on the destination; no batch touches it.
//   - _pgmirror.source_columns: per mirror and mapped source table, its
//     columns by attnum as last known (SourceColumns): recorded when the
//     table is copied, and by the CDC batch that applies a change of them.
//
// The operations are named after what happened: a snapshot was taken
// (SnapshotTaken: the mirror stands at the snapshot's point and no table
// stands elsewhere, in one transaction), a slot was created without a copy
// (StartAt), tables are about to be copied (CopyStarting) or were copied
// (TableCopied), a batch moved tables (SetTables, inside the batch).
//
// Tables are stored by their source name as schema.table text; the API
// takes change.TableName.
package positions

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/session"
)

// DB is what the operations need: a *pgx.Conn, a pgx.Tx or a
// *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// TxDB is a DB that can open a transaction (a *pgx.Conn or a pool).
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

const ensureSQL = `CREATE SCHEMA IF NOT EXISTS _pgmirror;
CREATE TABLE IF NOT EXISTS _pgmirror.applied (
	mirror_uid text PRIMARY KEY,
	lsn pg_lsn NOT NULL,
	batch_id bigint NOT NULL,
	updated_at timestamptz
);
CREATE TABLE IF NOT EXISTS _pgmirror.table_positions (
	mirror_uid text NOT NULL,
	source_table text NOT NULL,
	lsn pg_lsn NOT NULL,
	PRIMARY KEY (mirror_uid, source_table)
);
CREATE TABLE IF NOT EXISTS _pgmirror.flushes (
	mirror_uid text PRIMARY KEY,
	flushed_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS _pgmirror.source_columns (
	mirror_uid text NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	attnum integer NOT NULL,
	name text NOT NULL,
	type_oid oid NOT NULL,
	typmod integer NOT NULL,
	PRIMARY KEY (mirror_uid, source_schema, source_table, attnum)
)`

// tables are the tables ensureSQL creates.
var tables = []string{"applied", "table_positions", "flushes", "source_columns"}

// presentSQL counts the tables of ensureSQL that exist.
const presentSQL = `SELECT count(*) FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
WHERE n.nspname OPERATOR(pg_catalog.=) '_pgmirror' AND c.relkind OPERATOR(pg_catalog.=) 'r'
  AND c.relname OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])`

// Ensure creates the schema _pgmirror and its tables when they are absent.
// It refuses (an error matching ownership.ErrForeignOwner) a _pgmirror, or
// an object in it, that a role other than the peer's user and not a
// superuser owns, before and after creating. When every table exists (every
// run after a mirror's first) it creates nothing: one query besides the
// owner check, instead of the DDL statements and a second check.
func Ensure(ctx context.Context, conn DB) error {
	if err := ownership.Check(ctx, conn); err != nil {
		return err
	}
	var present int
	if err := conn.QueryRow(ctx, presentSQL, tables).Scan(&present); err != nil {
		return fmt.Errorf("look for destination metadata tables in schema _pgmirror: %w", err)
	}
	if present == len(tables) {
		return nil
	}
	var err error
	for range 3 {
		_, err = conn.Exec(ctx, ensureSQL)
		var pgErr *pgconn.PgError
		// Two mirrors creating the schema at once race on the catalog's
		// unique indexes; the loser retries and then finds it.
		if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P06" || pgErr.Code == "42P07") {
			continue
		}
		break
	}
	if err != nil {
		return fmt.Errorf("create destination metadata tables in schema _pgmirror: %w", err)
	}
	return ownership.Check(ctx, conn)
}

// Applied reads the mirror's applied position: the end LSN of the last
// source transaction applied and the id of the batch that applied it.
// found is false when the mirror has none yet.
func Applied(ctx context.Context, conn DB, mirrorUID string) (lsn change.LSN, batchID int64, found bool, err error) {
	var text string
	err = conn.QueryRow(ctx, `SELECT lsn::text, batch_id FROM _pgmirror.applied WHERE mirror_uid = $1`, mirrorUID).Scan(&text, &batchID)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read applied position of mirror %s: %w", mirrorUID, err)
	}
	if lsn, err = change.ParseLSN(text); err != nil {
		return 0, 0, false, fmt.Errorf("read applied position of mirror %s: %w", mirrorUID, err)
	}
	return lsn, batchID, true, nil
}

// setAppliedSQL records the applied position: $1 mirror uid, $2 LSN as
// text, $3 batch id.
const setAppliedSQL = `INSERT INTO _pgmirror.applied (mirror_uid, lsn, batch_id, updated_at)
	VALUES ($1, $2::text::pg_lsn, $3::bigint, pg_catalog.now())
	ON CONFLICT (mirror_uid) DO UPDATE SET lsn = EXCLUDED.lsn, batch_id = EXCLUDED.batch_id, updated_at = EXCLUDED.updated_at`

// appliedStatement is the name of setAppliedSQL prepared on a session that
// applies CDC batches (PrepareApplied).
const appliedStatement = "pgmirror_set_applied"

// PrepareApplied prepares, on conn, the statement QueueApplied sends, so
// that the destination parses and plans it once per session instead of at
// every batch: an INSERT ... ON CONFLICT parsed and planned anew cost the
// destination more than the rest of a small transaction's batch (measured
// on PostgreSQL 18: about 190 µs of backend CPU per single-row batch, 85 µs
// with the statement prepared).
func PrepareApplied(ctx context.Context, conn *pgconn.PgConn) error {
	if err := session.Prepare(ctx, conn, appliedStatement, setAppliedSQL); err != nil {
		return fmt.Errorf("prepare the statement that records the applied position: %w", err)
	}
	return nil
}

// QueueApplied adds the statement that records the applied position to b,
// a batch that runs inside the destination transaction of a CDC batch, on
// a session where PrepareApplied ran.
func QueueApplied(b *pgconn.Batch, mirrorUID string, lsn change.LSN, batchID int64) {
	b.ExecPrepared(appliedStatement, [][]byte{[]byte(mirrorUID), []byte(lsn.String()), []byte(strconv.FormatInt(batchID, 10))}, nil, nil)
}

// SnapshotTaken records, in one transaction, that the mirror's tables were
// all copied from a snapshot at lsn: the mirror stands at lsn (with batch
// id batchID) and no table stands elsewhere.
func SnapshotTaken(ctx context.Context, conn TxDB, mirrorUID string, lsn change.LSN, batchID int64) error {
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, setAppliedSQL, mirrorUID, lsn.String(), batchID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `DELETE FROM _pgmirror.table_positions WHERE mirror_uid = $1`, mirrorUID)
		return err
	})
	if err != nil {
		return fmt.Errorf("record the snapshot position %s of mirror %s: %w", lsn, mirrorUID, err)
	}
	return nil
}

// StartAt records that the mirror starts at lsn when it has no applied
// position yet (a slot created without a copy), and reports whether it did.
func StartAt(ctx context.Context, conn DB, mirrorUID string, lsn change.LSN, batchID int64) (bool, error) {
	tag, err := conn.Exec(ctx, `INSERT INTO _pgmirror.applied (mirror_uid, lsn, batch_id, updated_at)
		VALUES ($1, $2::text::pg_lsn, $3::bigint, now()) ON CONFLICT (mirror_uid) DO NOTHING`, mirrorUID, lsn.String(), batchID)
	if err != nil {
		return false, fmt.Errorf("record the start position %s of mirror %s: %w", lsn, mirrorUID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Tables reads the mirror's per-table positions. A table without an entry
// stands at the mirror's applied position. Entries of tables not in known
// are returned in unknown (tables no longer mapped).
func Tables(ctx context.Context, conn DB, mirrorUID string, known []change.TableName) (positions map[change.TableName]change.LSN, unknown []string, err error) {
	byName := make(map[string]change.TableName, len(known))
	for _, t := range known {
		byName[t.String()] = t
	}
	rows, err := conn.Query(ctx, `SELECT source_table, lsn::text FROM _pgmirror.table_positions WHERE mirror_uid = $1`, mirrorUID)
	if err != nil {
		return nil, nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
	}
	defer rows.Close()
	positions = map[change.TableName]change.LSN{}
	for rows.Next() {
		var table, text string
		if err := rows.Scan(&table, &text); err != nil {
			return nil, nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
		}
		lsn, err := change.ParseLSN(text)
		if err != nil {
			return nil, nil, fmt.Errorf("read table position of %s in mirror %s: %w", table, mirrorUID, err)
		}
		if t, ok := byName[table]; ok {
			positions[t] = lsn
		} else {
			unknown = append(unknown, table)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
	}
	return positions, unknown, nil
}

// SetTables records, inside the open batch on conn, the positions in set
// and forgets those of the tables in forget.
func SetTables(ctx context.Context, conn DB, mirrorUID string, set map[change.TableName]change.LSN, forget []change.TableName) error {
	for table, lsn := range set {
		if err := TableCopied(ctx, conn, mirrorUID, table, lsn); err != nil {
			return err
		}
	}
	if len(forget) == 0 {
		return nil
	}
	return Forget(ctx, conn, mirrorUID, names(forget))
}

// TableCopied records that the destination copy of source table stands at
// lsn: its changes from transactions that committed before lsn are in it
// (it was copied from a snapshot taken at lsn).
func TableCopied(ctx context.Context, conn DB, mirrorUID string, table change.TableName, lsn change.LSN) error {
	_, err := conn.Exec(ctx, `INSERT INTO _pgmirror.table_positions (mirror_uid, source_table, lsn)
		VALUES ($1, $2, $3::text::pg_lsn)
		ON CONFLICT (mirror_uid, source_table) DO UPDATE SET lsn = EXCLUDED.lsn`, mirrorUID, table.String(), lsn.String())
	if err != nil {
		return fmt.Errorf("record position %s of table %s in mirror %s: %w", lsn, table, mirrorUID, err)
	}
	return nil
}

// CopyStarting forgets where tables stood: they are about to be copied
// again, which replaces whatever they held.
func CopyStarting(ctx context.Context, conn DB, mirrorUID string, tables []change.TableName) error {
	if len(tables) == 0 {
		return nil
	}
	return Forget(ctx, conn, mirrorUID, names(tables))
}

// Forget removes the per-table positions of the named source tables
// (schema.table, as Tables reports unknown ones).
func Forget(ctx context.Context, conn DB, mirrorUID string, tables []string) error {
	if len(tables) == 0 {
		return nil
	}
	_, err := conn.Exec(ctx, `DELETE FROM _pgmirror.table_positions WHERE mirror_uid = $1 AND source_table = ANY($2)`, mirrorUID, tables)
	if err != nil {
		return fmt.Errorf("forget table positions of mirror %s: %w", mirrorUID, err)
	}
	return nil
}

func names(tables []change.TableName) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.String()
	}
	return out
}

// FlushWAL makes the destination flush its WAL up to now and returns the
// flush position. Batches commit with synchronous_commit = off; a
// transaction that writes WAL and commits with synchronous_commit = on
// flushes all WAL before its commit record, other sessions' asynchronous
// commits included. (A transaction that only takes an xid is not enough:
// PostgreSQL commits it asynchronously when it wrote no WAL before its
// commit record.) It writes the mirror's row in _pgmirror.flushes, which no
// batch touches, so it never waits for an open batch.
func FlushWAL(ctx context.Context, conn *pgx.Conn, mirrorUID string) (change.LSN, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = on")
	b.Queue(`INSERT INTO _pgmirror.flushes (mirror_uid, flushed_at) VALUES ($1, now())
		ON CONFLICT (mirror_uid) DO UPDATE SET flushed_at = EXCLUDED.flushed_at`, mirrorUID)
	b.Queue("COMMIT")
	var text string
	b.Queue("SELECT pg_current_wal_flush_lsn()::text").QueryRow(func(row pgx.Row) error { return row.Scan(&text) })
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("flush the destination's WAL for mirror %s: %w", mirrorUID, err)
	}
	return change.ParseLSN(text)
}
