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
	var log lockedBuffer
	b.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
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
