// Package cutover holds the database operations of a switch-over from a
// mirror's source to its destination that are not replication itself:
// making the source tables refuse writes, counting rows on both sides, and
// listing what would keep a reverse mirror from being created
// (ReverseProblems, which verifications call long before the cut-over).
// The order of the steps (drain, quiet check, sequences, constraints,
// verification) is the jobs package's; the drain itself is cdc.Run with
// Config.StopAt.
//
// # Read-only source tables
//
// MakeReadOnly locks the mapped source tables in EXCLUSIVE mode (reads go
// on; it waits for the transactions writing them to end and holds new
// writes back), and in the same transaction gives each table two triggers
// that refuse every write with an error naming the mirror: a row trigger
// for INSERT, UPDATE and DELETE (cloned to the partitions of a partitioned
// table) and a statement trigger for TRUNCATE. The trigger function lives
// in the schema _pgmirror on the source, created beforehand when missing.
// Writers blocked by the lock fail once it commits instead of writing
// behind the cut-over's back.
//
// # Locking without deadlocks
//
// The application's transactions may write the mirrored tables in any
// order, so a session that holds the lock of one table while it waits for
// another's closes a cycle sooner or later (it holds a and waits for b, a
// transaction holds b and waits for a), which PostgreSQL breaks with a
// deadlock error (40P01) in one of them; one LOCK statement for all tables
// waits the same way, whatever their order. MakeReadOnly never waits while
// it holds a lock the application may wait for: it makes the tables
// read-only one at a time (in one order, by schema and name), each in a
// transaction of its own that locks that table alone, and bounds that
// transaction's statements by a statement_timeout below half the server's
// deadlock_timeout (at most 500 ms), so that even the lock of a
// partitioned table (its partitions are locked one after the other) is
// given up before any session's deadlock check can fire. An attempt that
// gives up is tried again after a growing pause (50 ms doubling to 1 s,
// with jitter) until the caller's bound is spent; then MakeReadOnly makes
// the tables it had made read-only writable again and returns an error
// that wraps ErrLockBusy. A table made read-only refuses writes at once,
// so a transaction that wrote it and waits for another table fails and
// frees that table's lock for the next step; writes committed to a table
// before its turn are applied by the cut-over's drain that follows.
//
// Triggers do not fire for sessions with session_replication_role =
// replica: a reverse mirror's apply (engine/apply sets it when it may)
// writes into the read-only tables, the applications cannot.
// MakeWritable drops the triggers again (a cut-over that failed, or a
// roll-back to the source).
package cutover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// triggerRows and triggerTruncate name the triggers MakeReadOnly creates.
const (
	triggerRows     = "pgmirror_read_only"
	triggerTruncate = "pgmirror_read_only_truncate"
)

// ErrLockBusy is wrapped by the error of MakeReadOnly when the
// application's transactions kept a table busy for the whole bound.
var ErrLockBusy = errors.New("the table stayed busy")

// ErrLeftReadOnly is wrapped by the error of MakeReadOnly when it failed
// and could not make the tables it had made read-only writable again.
var ErrLeftReadOnly = errors.New("tables were left read-only")

// Bounds of MakeReadOnly's attempts (see the package documentation).
const (
	maxLockAttempt = 500 * time.Millisecond
	minLockAttempt = 10 * time.Millisecond
	firstLockPause = 50 * time.Millisecond
	maxLockPause   = time.Second
)

// MakeReadOnly makes tables refuse writes from now on (see the package
// documentation); note goes into the error writers get (for example "mirror
// orders_move was switched over to its destination"). It locks the tables
// one by one, each in a transaction of its own whose attempts are short
// enough that they cannot deadlock with the application's transactions,
// and tries again until bound is spent (at least one attempt per table).
// When a table stays busy it makes the tables it had made read-only
// writable again (those that were read-only before stay so) and returns an
// error wrapping ErrLockBusy; ErrLeftReadOnly when that failed. It needs
// PostgreSQL 12 or later (before 14, a read-only trigger already there is kept).
func MakeReadOnly(ctx context.Context, conn *pgx.Conn, tables []change.TableName, note string, bound time.Duration) error {
	if len(tables) == 0 {
		return nil
	}
	ordered := slices.Clone(tables)
	slices.SortFunc(ordered, func(a, b change.TableName) int {
		return cmp.Or(strings.Compare(a.Schema, b.Schema), strings.Compare(a.Name, b.Name))
	})
	ordered = slices.Compact(ordered)
	if err := ensureRefuseFunction(ctx, conn); err != nil {
		return err
	}
	attempt, err := lockAttempt(ctx, conn)
	if err != nil {
		return err
	}
	attempt = max(min(attempt, bound), minLockAttempt)
	deadline := time.Now().Add(bound)
	var made []change.TableName // read-only now, and not before
	for _, t := range ordered {
		before, err := IsReadOnly(ctx, conn, t)
		if err == nil {
			err = makeTableReadOnly(ctx, conn, t, note, attempt, deadline)
		}
		if err != nil {
			if len(made) > 0 {
				if uerr := MakeWritable(context.WithoutCancel(ctx), conn, made); uerr != nil {
					return fmt.Errorf("%v; and making the tables before it writable again failed: %w: %w", err, ErrLeftReadOnly, uerr)
				}
			}
			return err
		}
		if !before {
			made = append(made, t)
		}
	}
	return nil
}

// makeTableReadOnly makes table read-only, trying again after a growing
// pause while its attempts give up, until deadline (at least once).
func makeTableReadOnly(ctx context.Context, conn *pgx.Conn, table change.TableName, note string, attempt time.Duration, deadline time.Time) error {
	started := time.Now()
	pause := firstLockPause
	for n := 1; ; n++ {
		err := lockReadOnly(ctx, conn, table, note, attempt)
		if err == nil || !isLockBusy(err) || ctx.Err() != nil {
			return err
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("lock source table %s against writes: %w: transactions writing it held the lock back in %d attempts over %s (each gave up after %s, so as never to deadlock with them); the tables made read-only before it are writable again: stop the application's writes or end its long transactions, and request the cut-over again: %w",
				table, ErrLockBusy, n, time.Since(started).Round(time.Millisecond), attempt, err)
		}
		jitter := time.Duration(rand.Int64N(int64(pause)/2 + 1))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause + jitter):
		}
		pause = min(2*pause, maxLockPause)
	}
}

// lockAttempt returns how long one attempt to lock may wait: below half of
// the server's deadlock_timeout, at most maxLockAttempt.
func lockAttempt(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	var ms float64
	if err := conn.QueryRow(ctx, `SELECT setting::float8 FROM pg_catalog.pg_settings WHERE name = 'deadlock_timeout'`).Scan(&ms); err != nil {
		return 0, fmt.Errorf("read the source's deadlock_timeout: %w", err)
	}
	return min(time.Duration(ms*float64(time.Millisecond))/2, maxLockAttempt), nil
}

// isLockBusy reports an attempt that gave up waiting for a lock (its
// statement_timeout or a lock_timeout), or that PostgreSQL chose as a
// deadlock's victim: trying again later may succeed.
func isLockBusy(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "57014", "55P03", "40P01": // query_canceled, lock_not_available, deadlock_detected
		return true
	}
	return false
}

// ensureRefuseFunction creates the trigger function of read-only tables,
// before any table is locked.
func ensureRefuseFunction(ctx context.Context, conn *pgx.Conn) error {
	if err := ownership.Check(ctx, conn); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS _pgmirror`); err != nil {
		return fmt.Errorf("create schema _pgmirror on the source for the read-only trigger (the peer user needs CREATE on the database): %w", err)
	}
	if _, err := conn.Exec(ctx, `CREATE OR REPLACE FUNCTION _pgmirror.refuse_writes() RETURNS trigger
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
	if err := ownership.Check(ctx, conn); err != nil {
		return fmt.Errorf("make source tables read-only: %w", err)
	}
	return nil
}

// lockReadOnly is one attempt of makeTableReadOnly: one transaction whose
// every statement gives up after attempt, that locks table and creates its
// triggers. CREATE OR REPLACE TRIGGER needs no stronger lock than the
// EXCLUSIVE one held (DROP TRIGGER would need ACCESS EXCLUSIVE and wait for
// the readers).
func lockReadOnly(ctx context.Context, conn *pgx.Conn, t change.TableName, note string, attempt time.Duration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("make source table %s read-only: %w", t, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ms := strconv.FormatInt(max(attempt.Milliseconds(), 1), 10)
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('statement_timeout', $1, true), pg_catalog.set_config('lock_timeout', $1, true)`, ms); err != nil {
		return fmt.Errorf("make source table %s read-only: %w", t, err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+t.Quoted()+` IN EXCLUSIVE MODE`); err != nil {
		if isLockBusy(err) {
			return err
		}
		return fmt.Errorf("lock source table %s against writes (the peer user needs UPDATE on it): %w", t, err)
	}
	srv, err := pgversion.Read(ctx, tx)
	if err != nil {
		return fmt.Errorf("make source table %s read-only: %w", t, err)
	}
	// Before PostgreSQL 14 (no CREATE OR REPLACE TRIGGER) a trigger that
	// is there already is kept: DROP TRIGGER would need an ACCESS
	// EXCLUSIVE lock.
	create := "CREATE OR REPLACE TRIGGER "
	var have []string
	if !srv.ReplaceTrigger() {
		create = "CREATE TRIGGER "
		rows, err := tx.Query(ctx, `SELECT tgname::pg_catalog.text FROM pg_catalog.pg_trigger
			WHERE tgrelid OPERATOR(pg_catalog.=) $1::pg_catalog.regclass AND tgname OPERATOR(pg_catalog.=) ANY ($2::pg_catalog.name[])`, t.Quoted(), []string{triggerRows, triggerTruncate})
		if err == nil {
			have, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("make source table %s read-only: %w", t, err)
		}
	}
	var stmts []string
	if !slices.Contains(have, triggerRows) {
		stmts = append(stmts, create+triggerRows+` BEFORE INSERT OR UPDATE OR DELETE ON `+t.Quoted()+
			` FOR EACH ROW EXECUTE FUNCTION _pgmirror.refuse_writes(`+sqlquote.Literal(note)+`)`)
	}
	if !slices.Contains(have, triggerTruncate) {
		stmts = append(stmts, create+triggerTruncate+` BEFORE TRUNCATE ON `+t.Quoted()+
			` FOR EACH STATEMENT EXECUTE FUNCTION _pgmirror.refuse_writes(`+sqlquote.Literal(note)+`)`)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			if isLockBusy(err) {
				return err
			}
			return fmt.Errorf("make source table %s read-only (the peer user must own it or have TRIGGER on it): %w", t, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("make source table %s read-only: %w", t, err)
	}
	return nil
}

// MakeWritable drops the triggers MakeReadOnly created on tables. Tables
// that have neither are left alone, unlocked (DROP TRIGGER takes an ACCESS
// EXCLUSIVE lock, which would wait for the table's readers).
func MakeWritable(ctx context.Context, conn *pgx.Conn, tables []change.TableName) error {
	for _, t := range tables {
		var have []string
		rows, err := conn.Query(ctx, `SELECT tgname::text FROM pg_catalog.pg_trigger
			WHERE tgrelid = $1::pg_catalog.regclass AND tgname = ANY ($2::text[])`, t.Quoted(), []string{triggerRows, triggerTruncate})
		if err == nil {
			have, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("look up the read-only triggers of source table %s: %w", t, err)
		}
		for _, trigger := range have {
			if _, err := conn.Exec(ctx, `DROP TRIGGER IF EXISTS `+sqlquote.Ident(trigger)+` ON `+t.Quoted()); err != nil {
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
