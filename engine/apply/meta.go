package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// DB is what the metadata functions need: a *pgx.Conn, a pgx.Tx or a
// *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const ensureMetaSQL = `CREATE SCHEMA IF NOT EXISTS _pgmirror;
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
)`

// EnsureMeta creates the destination metadata schema _pgmirror and its
// tables when they are absent: _pgmirror.applied (one row per mirror: the
// end LSN of the last source transaction applied, and the last batch id),
// _pgmirror.flushes (one row per mirror, rewritten by FlushWAL) and
// _pgmirror.table_positions (per mirror and source table whose data stands
// at another position than the mirror's, after a table was copied on its own:
// changes of that table are applied only from that position on).
func EnsureMeta(ctx context.Context, conn DB) error {
	var err error
	for range 3 {
		_, err = conn.Exec(ctx, ensureMetaSQL)
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
	return nil
}

// AppliedPosition reads the mirror's applied position from the destination:
// the end LSN of the last source transaction applied and the id of the
// batch that applied it. found is false when the mirror has none yet.
func AppliedPosition(ctx context.Context, conn DB, mirrorUID string) (lsn change.LSN, batchID int64, found bool, err error) {
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
	VALUES ($1, $2::text::pg_lsn, $3::bigint, now())
	ON CONFLICT (mirror_uid) DO UPDATE SET lsn = EXCLUDED.lsn, batch_id = EXCLUDED.batch_id, updated_at = EXCLUDED.updated_at`

// SetAppliedPosition records the mirror's applied position (used after the
// snapshot, with the slot's consistent point and batch 0, and by every
// batch inside its own transaction).
func SetAppliedPosition(ctx context.Context, conn DB, mirrorUID string, lsn change.LSN, batchID int64) error {
	_, err := conn.Exec(ctx, setAppliedSQL, mirrorUID, lsn.String(), batchID)
	if err != nil {
		return fmt.Errorf("record applied position %s of mirror %s: %w", lsn, mirrorUID, err)
	}
	return nil
}

// TablePositions reads the mirror's per-table positions (key: source
// schema.table). A table without an entry stands at the mirror's applied
// position.
func TablePositions(ctx context.Context, conn *pgx.Conn, mirrorUID string) (map[string]change.LSN, error) {
	rows, err := conn.Query(ctx, `SELECT source_table, lsn::text FROM _pgmirror.table_positions WHERE mirror_uid = $1`, mirrorUID)
	if err != nil {
		return nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
	}
	out := map[string]change.LSN{}
	for rows.Next() {
		var table, text string
		if err := rows.Scan(&table, &text); err != nil {
			return nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
		}
		lsn, err := change.ParseLSN(text)
		if err != nil {
			return nil, fmt.Errorf("read table position of %s in mirror %s: %w", table, mirrorUID, err)
		}
		out[table] = lsn
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read table positions of mirror %s: %w", mirrorUID, err)
	}
	return out, nil
}

// SetTablePosition records that the destination copy of source table stands
// at lsn: the table's changes from transactions that committed before lsn
// are already in it (it was copied from a snapshot taken at lsn).
func SetTablePosition(ctx context.Context, conn DB, mirrorUID, table string, lsn change.LSN) error {
	_, err := conn.Exec(ctx, `INSERT INTO _pgmirror.table_positions (mirror_uid, source_table, lsn)
		VALUES ($1, $2, $3::text::pg_lsn)
		ON CONFLICT (mirror_uid, source_table) DO UPDATE SET lsn = EXCLUDED.lsn`, mirrorUID, table, lsn.String())
	if err != nil {
		return fmt.Errorf("record position %s of table %s in mirror %s: %w", lsn, table, mirrorUID, err)
	}
	return nil
}

// DeleteTablePositions forgets the per-table positions of the given source
// tables, or of every table of the mirror when tables is empty.
func DeleteTablePositions(ctx context.Context, conn DB, mirrorUID string, tables []string) error {
	_, err := conn.Exec(ctx, `DELETE FROM _pgmirror.table_positions
		WHERE mirror_uid = $1 AND (cardinality($2::text[]) = 0 OR source_table = ANY($2))`, mirrorUID, tables)
	if err != nil {
		return fmt.Errorf("forget table positions of mirror %s: %w", mirrorUID, err)
	}
	return nil
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
