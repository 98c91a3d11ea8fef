package cdc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
)

// With a ConfirmCeiling, an idle run confirms its applied changes but WAL
// with nothing to replicate only up to the ceiling: the slot stays there
// while Wanted shows how far the run would go, and moves on once the
// ceiling is raised.
func TestConfirmCeiling(t *testing.T) {
	t.Parallel()
	ceiling := cdc.NewConfirmCeiling(0, nil)
	b, r, conn, applied := ceilingRun(t, ceiling)
	ctx := context.Background()
	slot := func() change.LSN {
		st, err := capture.SlotState(ctx, conn, b.cfg.SlotName)
		require.NoError(t, err)
		return st.ConfirmedFlush
	}
	// The applied transaction is confirmed although the ceiling is 0.
	require.Eventually(t, func() bool { return slot() >= applied }, 20*time.Second, 100*time.Millisecond)

	// WAL with nothing of ours: the run wants to confirm past it, the slot
	// stays at the applied position.
	wal := otherWAL(t, b, conn, false)
	require.Eventually(t, func() bool { return ceiling.Wanted() >= wal }, 30*time.Second, 100*time.Millisecond)
	time.Sleep(3 * time.Second) // several status updates
	require.Equal(t, applied, slot(), "the slot moved past the applied position beyond the ceiling")

	// Raised: the slot follows.
	ceiling.Raise(ceiling.Wanted())
	require.Eventually(t, func() bool { return slot() >= wal }, 30*time.Second, 100*time.Millisecond)
	require.NoError(t, r.halt(t))
	require.LessOrEqual(t, slot(), max(ceiling.Limit(), applied), "the last status update kept the ceiling")
}

// A run that stops records the confirm ceiling its stream wants, so that
// its last status update confirms the WAL it read past its last
// transaction: the slot's confirmed position and its restart point move
// past that WAL, and the next run does not decode it again (a resume right
// after a catch-up read the whole catch-up a second time).
func TestStopSettlesCeiling(t *testing.T) {
	t.Parallel()
	var recorded atomic.Uint64
	ceiling := cdc.NewConfirmCeiling(0, func(_ context.Context, lsn change.LSN) error {
		recorded.Store(uint64(lsn))
		return nil
	})
	b, r, conn, applied := ceilingRun(t, ceiling)
	ctx := context.Background()
	slot := func() (confirmed, restart change.LSN) {
		var c, r string
		require.NoError(t, conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, restart_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			b.cfg.SlotName).Scan(&c, &r))
		confirmed, err := change.ParseLSN(c)
		require.NoError(t, err)
		restart, err = change.ParseLSN(r)
		require.NoError(t, err)
		return confirmed, restart
	}
	require.Eventually(t, func() bool { c, _ := slot(); return c >= applied }, 20*time.Second, 100*time.Millisecond)

	// WAL with nothing of ours, then a checkpoint, whose record of the
	// running transactions is a point the slot can restart from.
	wal := otherWAL(t, b, conn, true)
	// The stream confirmed past it; nothing raised the ceiling, so the slot
	// is still at the applied transaction.
	require.Eventually(t, func() bool { return ceiling.Wanted() >= wal }, 30*time.Second, 100*time.Millisecond)
	confirmed, restart := slot()
	require.Equal(t, applied, confirmed, "the slot moved past the applied position beyond the ceiling")
	require.Less(t, restart, wal)

	require.NoError(t, r.halt(t))
	require.GreaterOrEqual(t, change.LSN(recorded.Load()), wal, "the stop did not record the ceiling")
	confirmed, restart = slot()
	require.GreaterOrEqual(t, confirmed, wal, "the last status update did not confirm the WAL read past the last transaction")
	require.Greater(t, restart, applied, "the slot's restart point stayed before the WAL read past the last transaction")
}

// ceilingRun starts a run on a table t with ceiling and applies one
// transaction; it returns a connection to the source and the applied
// position.
func ceilingRun(t *testing.T, ceiling *cdc.ConfirmCeiling) (*testBundle, *running, *pgx.Conn, change.LSN) {
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	b.cfg.ConfirmCeiling = ceiling
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	require.Eventually(t, func() bool { return b.rep.count() > 0 }, 10*time.Second, 50*time.Millisecond)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return b, r, conn, b.rep.batches[len(b.rep.batches)-1].LSN
}

// otherWAL writes WAL with nothing for the run (in another database of
// the source cluster), then a checkpoint when asked, and returns the
// source's WAL position after it.
func otherWAL(t *testing.T, b *testBundle, conn *pgx.Conn, checkpoint bool) change.LSN {
	other := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, other, `CREATE TABLE x (v text); INSERT INTO x SELECT repeat('x', 100) FROM generate_series(1, 5000)`)
	if checkpoint {
		pgtest.Exec(t, b.src, `CHECKPOINT`)
	}
	var text string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&text))
	wal, err := change.ParseLSN(text)
	require.NoError(t, err)
	return wal
}
