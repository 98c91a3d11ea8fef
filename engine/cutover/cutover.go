// Package cutover holds the database operations of a switch-over from a
// mirror's source to its destination that are not replication itself:
// making the source tables refuse writes, and counting rows on both sides.
// The order of the steps (drain, quiet check, sequences, constraints,
// verification) is the jobs package's; the drain itself is cdc.Run with
// Config.StopAt.
//
// # Read-only source tables
//
// MakeReadOnly locks the mapped source tables in EXCLUSIVE mode (reads go
// on; it waits for the transactions writing them to end, up to a lock
// timeout, and holds new writes back), and in the same transaction gives
// each table two triggers that refuse every write with an error naming the
// mirror: a row trigger for INSERT, UPDATE and DELETE (cloned to the
// partitions of a partitioned table) and a statement trigger for
// TRUNCATE. The trigger function lives in the schema _pgmirror on the
// source, created when missing. Writers blocked by the lock fail once it
// commits instead of writing behind the cut-over's back.
//
// Triggers do not fire for sessions with session_replication_role =
// replica: a reverse mirror's apply (engine/apply sets it when it may)
// writes into the read-only tables, the applications cannot.
// MakeWritable drops the triggers again (a cut-over that failed, or a
// roll-back to the source).
package cutover

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
)

// triggerRows and triggerTruncate name the triggers MakeReadOnly creates.
const (
	triggerRows     = "pgmirror_read_only"
	triggerTruncate = "pgmirror_read_only_truncate"
)

// MakeReadOnly makes tables refuse writes from now on (see the package
// documentation); note goes into the error writers get (for example "mirror
// orders_move was switched over to its destination"). It waits at most
// lockTimeout for transactions that write the tables to end.
func MakeReadOnly(ctx context.Context, conn *pgx.Conn, tables []change.TableName, note string, lockTimeout time.Duration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = %d`, max(lockTimeout.Milliseconds(), 1))); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	for _, t := range tables {
		if _, err := tx.Exec(ctx, `LOCK TABLE `+t.Quoted()+` IN EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock source table %s against writes (the peer user needs UPDATE on it; a long transaction writing it holds the lock back): %w", t, err)
		}
	}
	if err := ownership.Check(ctx, tx); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS _pgmirror`); err != nil {
		return fmt.Errorf("create schema _pgmirror on the source for the read-only trigger (the peer user needs CREATE on the database): %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE OR REPLACE FUNCTION _pgmirror.refuse_writes() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	RAISE EXCEPTION 'table %.% is read-only: %', TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_ARGV[0]
		USING ERRCODE = 'read_only_sql_transaction',
		HINT = 'write to the new database; to write here again, drop the triggers pgmirror_read_only and pgmirror_read_only_truncate of this table';
END
$f$`); err != nil {
		return fmt.Errorf("create the read-only trigger function on the source: %w", err)
	}
	// Again: CREATE SCHEMA IF NOT EXISTS and CREATE OR REPLACE keep an
	// object another role created meanwhile, and its owner.
	if err := ownership.Check(ctx, tx); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	for _, t := range tables {
		stmts := []string{
			`DROP TRIGGER IF EXISTS ` + triggerRows + ` ON ` + t.Quoted(),
			`DROP TRIGGER IF EXISTS ` + triggerTruncate + ` ON ` + t.Quoted(),
			`CREATE TRIGGER ` + triggerRows + ` BEFORE INSERT OR UPDATE OR DELETE ON ` + t.Quoted() +
				` FOR EACH ROW EXECUTE FUNCTION _pgmirror.refuse_writes(` + quoteLiteral(note) + `)`,
			`CREATE TRIGGER ` + triggerTruncate + ` BEFORE TRUNCATE ON ` + t.Quoted() +
				` FOR EACH STATEMENT EXECUTE FUNCTION _pgmirror.refuse_writes(` + quoteLiteral(note) + `)`,
		}
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("make source table %s read-only (the peer user must own it or have TRIGGER on it): %w", t, err)
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	return nil
}

// MakeWritable drops the triggers MakeReadOnly created on tables (those
// that have none are left alone).
func MakeWritable(ctx context.Context, conn *pgx.Conn, tables []change.TableName) error {
	for _, t := range tables {
		for _, trigger := range []string{triggerRows, triggerTruncate} {
			if _, err := conn.Exec(ctx, `DROP TRIGGER IF EXISTS `+trigger+` ON `+t.Quoted()); err != nil {
				return fmt.Errorf("make source table %s writable again: %w", t, err)
			}
		}
	}
	return nil
}

// IsReadOnly reports whether MakeReadOnly's row trigger is on table.
func IsReadOnly(ctx context.Context, conn *pgx.Conn, table change.TableName) (bool, error) {
	var found bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
		WHERE tgrelid = $1::pg_catalog.regclass AND tgname = $2)`, table.Quoted(), triggerRows).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look up the read-only trigger of %s: %w", table, err)
	}
	return found, nil
}

// CountRows counts the rows of table.
func CountRows(ctx context.Context, conn *pgx.Conn, table change.TableName) (int64, error) {
	var n int64
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.count(*) FROM `+table.Quoted()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count the rows of %s: %w", table, err)
	}
	return n, nil
}

// quoteLiteral quotes s as an SQL string literal (trigger arguments cannot
// be parameters).
func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		if s[i] == 0 {
			continue
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
