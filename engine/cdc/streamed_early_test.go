package cdc_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// TestStreamedSchemaChangeGivenUpAtOnce: a migration in one large streamed
// transaction (ALTER TABLE, then a backfill) cannot be applied while it
// streams, since the source's catalog shows the new columns to no other
// session before the commit. The run gives its early transaction up as
// soon as the stream describes the table with other columns, while the
// source is still writing the transaction, not at its commit: the
// transaction is then staged whole when that is still possible (the
// column added first), or read again from the source at once (the column
// added after rows the early transaction had taken). A table described
// for the first time in a run, after a column change committed before it,
// is given up at the early transaction's first failed write. Each time the
// schema change and every row arrive at the commit, once, and the
// destination never shows part of the transaction.
func TestStreamedSchemaChangeGivenUpAtOnce(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "big"))
	streamSmall(t, b)
	b.cfg.StageMemory = 64 << 10
	b.cfg.SchemaChanges = "apply"
	log := debugLog(b)
	dc := destConn(t, b)
	seen := newVisibleCounts()
	stop := watchCounts(t, b.dst, `SELECT count(*) FROM big`, seen)
	const (
		reread = "reading it again from the source"
		unfit  = "cannot be applied while it streams"
	)
	logged := func(what string, times int, msg string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Count(log.String(), what) >= times }, 60*time.Second, 5*time.Millisecond, msg)
	}

	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (0, 'described')`)
	seen.set(1)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)

	// The column added first: the stream describes big with it before the
	// first row, and the transaction is staged from there.
	tx := openTx(t, b.src)
	execOn(t, tx, `ALTER TABLE big ADD COLUMN w int NOT NULL DEFAULT 7;
		INSERT INTO big SELECT g, 'backfill', g FROM generate_series(1, 30000) g`)
	logged("table public.big described with other columns", 1, "the transaction was not given up while the source wrote it")
	seen.set(30001)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NotContains(t, log.String(), reread, "a transaction given up at its first row was not staged")

	// The column added after 30,000 rows went to the early transaction,
	// which outgrew the staging memory: read again from the source while
	// the source still has the transaction open.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'early', 1 FROM generate_series(100001, 130000) g`)
	require.Eventually(t, func() bool { return earlyWriting(t, dc, "public.big") }, 60*time.Second, 5*time.Millisecond,
		"the streamed transaction is not being applied while the source runs it")
	execOn(t, tx, `ALTER TABLE big ADD COLUMN u text DEFAULT 'u';
		UPDATE big SET u = 'set' WHERE id BETWEEN 100001 AND 110000;
		INSERT INTO big SELECT g, 'late', 2, 'late' FROM generate_series(130001, 135000) g`)
	logged(reread, 1, "the transaction was not read again while the source wrote it")
	seen.set(30001 + 35000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))

	// A column change committed while no run streamed; the next run's
	// stream describes big for the first time in a large transaction.
	pgtest.Exec(t, b.src, `ALTER TABLE big ADD COLUMN z int`)
	r = b.start(t)
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'after restart', 3, 'x', g FROM generate_series(200001, 230000) g`)
	logged("differ from those recorded", 1, "the early transaction's failed write did not give it up while the source wrote it")
	seen.set(30001 + 35000 + 30000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	stop()
	require.Contains(t, log.String(), unfit)
	require.Equal(t, change.Counts{Inserted: 1 + 30000 + 35000 + 30000, Updated: 10000},
		b.rep.totals()["public.big"], "each change applied once")
}

// debugLog sends b's run log at debug level to the buffer it returns.
func debugLog(b *testBundle) *lockedBuffer {
	log := &lockedBuffer{}
	b.cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return log
}

// destConn connects to b's destination database until the test ends.
func destConn(t *testing.T, b *testBundle) *pgx.Conn {
	t.Helper()
	dc, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	t.Cleanup(func() { dc.Close(context.Background()) })
	return dc
}

// chained returns a bundle that replicates b's destination into a new
// database on the destination cluster (created with ddl): a chain of
// mirrors, carrying what b applied, its origin included.
func chained(t *testing.T, b *testBundle, ddl string) *testBundle {
	t.Helper()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, ddl)
	return fromDest(t, b, dst, func(m change.Mapping) change.TableName { return m.Destination })
}

// TestStreamedChainAppliedEarly: a large transaction that one mirror
// applied (marked with its origin) streams from that mirror's destination
// to the next mirror of a chain, which applies it while it streams, as it
// does the source's own; a mirror in the opposite direction leaves it out.
// Every database ends equal and nothing comes back.
func TestStreamedChainAppliedEarly(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text)`
	ab := setup(t, ddl, ddl, same("public", "big"))
	ab.cfg.Origin = origin.Name(ab.cfg.MirrorUID)
	ba := reversed(t, ab)
	bc := chained(t, ab, ddl)
	bc.cfg.Origins = origin.NewFilter(nil) // carries every origin: a chain
	for _, u := range []struct{ url, uid string }{{ab.dst, ab.cfg.MirrorUID}, {ab.src, ba.cfg.MirrorUID}, {bc.dst, bc.cfg.MirrorUID}} {
		dropOrigins(t, u.url, u.uid)
	}
	streamSmall(t, ab)
	streamSmall(t, bc) // the middle database's transactions stream too
	log := debugLog(bc)
	rab, rba, rbc := ab.start(t), ba.start(t), bc.start(t)

	pgtest.Exec(t, ab.src, `INSERT INTO big SELECT g, 'bulk' FROM generate_series(1, 30000) g`)
	ab.waitEqual(t, rab, `SELECT * FROM big`, `SELECT * FROM big`)
	bc.waitEqual(t, rbc, `SELECT * FROM big`, `SELECT * FROM big`)
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), "large transaction applied while the source streamed it")
	}, 30*time.Second, 10*time.Millisecond,
		"the chain's second mirror did not apply the large transaction while it streamed")
	time.Sleep(2 * time.Second) // a transaction coming back would show by now
	require.NoError(t, rab.halt(t))
	require.NoError(t, rba.halt(t))
	require.NoError(t, rbc.halt(t))
	require.NotContains(t, log.String(), "reading it again")
	require.Equal(t, change.Counts{Inserted: 30000}, bc.rep.totals()["public.big"])
	require.Zero(t, allCounts(ba.rep)["public.big"], "the opposite mirror carried the transaction back")
}

// TestStreamedTruncateAppliedEarly: a reload in one large transaction
// (TRUNCATE, then the new rows) is applied while it streams, as PostgreSQL's
// parallel apply does: the early transaction empties the destination table
// and writes the new rows, a truncate rolled back with its savepoint is
// undone there, and transactions on other tables committed meanwhile are
// applied at once. Readers of the destination see the old rows, then all
// the new ones; nothing is read twice from the source.
func TestStreamedTruncateAppliedEarly(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text); CREATE TABLE public.small (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "big"), same("public", "small"))
	streamSmall(t, b)
	b.cfg.StageMemory = 64 << 10
	log := debugLog(b)
	dc := destConn(t, b)
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big SELECT g, 'old' FROM generate_series(1, 20000) g`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	seen := newVisibleCounts()
	seen.set(20000)
	stop := watchCounts(t, b.dst, `SELECT count(*) FROM big`, seen)

	tx := openTx(t, b.src)
	execOn(t, tx, `TRUNCATE big; INSERT INTO big SELECT g, 'new' FROM generate_series(1, 30000) g`)
	require.Eventually(t, func() bool { return earlyWriting(t, dc, "public.big") }, 60*time.Second, 5*time.Millisecond,
		"the reload is not being applied while the source runs it")
	pgtest.Exec(t, b.src, `INSERT INTO small VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM small`, `SELECT * FROM small`)
	execOn(t, tx, `SAVEPOINT s; TRUNCATE big; INSERT INTO big VALUES (-1, 'gone'); ROLLBACK TO SAVEPOINT s;
		INSERT INTO big SELECT g, 'new' FROM generate_series(30001, 35000) g`)
	seen.set(35000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	stop()
	require.Contains(t, log.String(), "large transaction applied while the source streamed it")
	require.NotContains(t, log.String(), "cannot be applied while it streams")
	require.NotContains(t, log.String(), "reading it again")
	require.Equal(t, change.Counts{Inserted: 20000 + 35000, Truncated: 1}, allCounts(b.rep)["public.big"], "each change applied once")
}
