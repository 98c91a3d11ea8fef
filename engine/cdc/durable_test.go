package cdc

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// TestFlushWatcher: targets handed to the watcher (many at once, busy and
// urgent, and later one after it went idle) are all reported flushed, in
// order, without the runner ever blocking on the watcher.
func TestFlushWatcher(t *testing.T) {
	t.Parallel()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dst)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, positions.Ensure(ctx, conn))
	wcfg, err := pgx.ParseConfig(dst)
	require.NoError(t, err)
	wcfg.RuntimeParams["synchronous_commit"] = "off"
	writer, err := pgx.ConnectConfig(ctx, wcfg)
	require.NoError(t, err)
	defer writer.Close(ctx)
	_, err = writer.Exec(ctx, `CREATE TABLE w (g int)`)
	require.NoError(t, err)
	commit := func() change.LSN {
		var text string
		require.NoError(t, writer.QueryRow(ctx, `INSERT INTO w VALUES (1) RETURNING pg_current_wal_insert_lsn()::text`).Scan(&text))
		lsn, err := change.ParseLSN(text)
		require.NoError(t, err)
		return lsn
	}

	w := startFlushWatcher(ctx, conn, "00000000-0000-0000-0000-000000000001")
	defer w.stop()
	var reported change.LSN
	waitReported := func(target change.LSN, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for reported < target {
			select {
			case lsn := <-w.flushed:
				require.Greater(t, lsn, reported, "reported positions only move forward")
				reported = lsn
			case err := <-w.errs:
				t.Fatal(err)
			case <-deadline:
				t.Fatalf("flushed position %s not reported within %s (last %s)", target, within, reported)
			}
		}
	}

	// A burst of batches: each hands its target over without blocking.
	var last change.LSN
	start := time.Now()
	for i := range 300 {
		last = commit()
		w.want(last, i%50 == 49)
	}
	require.Less(t, time.Since(start), 10*time.Second)
	waitReported(last, 3*time.Second)

	// Idle, then one more: the watcher wakes for it. Busy targets are
	// reported within the busy patience (1 s) plus a poll.
	time.Sleep(200 * time.Millisecond)
	last = commit()
	w.want(last, false)
	waitReported(last, 2*time.Second)
	last = commit()
	w.want(last, true)
	waitReported(last, time.Second)
}

// TestFlushWatcherStopKeepsConnection: stopping the watcher while its forced
// flush waits on the destination does not break the connection; the run
// flushes on it right after (the final confirmation at a stop).
func TestFlushWatcherStopKeepsConnection(t *testing.T) {
	t.Parallel()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dst)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, positions.Ensure(ctx, conn))
	const uid = "00000000-0000-0000-0000-000000000002"
	_, err = positions.FlushWAL(ctx, conn, uid)
	require.NoError(t, err)

	// Another session holds the row the forced flush writes, so the
	// watcher's flush is in flight when it is stopped.
	locker, err := pgx.Connect(ctx, dst)
	require.NoError(t, err)
	defer locker.Close(ctx)
	tx, err := locker.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM _pgmirror.flushes WHERE mirror_uid = $1 FOR UPDATE`, uid)
	require.NoError(t, err)

	w := startFlushWatcher(ctx, conn, uid)
	w.want(change.LSN(1)<<62, true) // never reached: the watcher forces flushes
	require.Eventually(t, func() bool {
		var waiting bool
		err := locker.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`).Scan(&waiting)
		return err == nil && waiting
	}, 5*time.Second, 10*time.Millisecond, "the watcher's forced flush waits on the lock")

	stopped := make(chan struct{})
	go func() { w.stop(); close(stopped) }()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, tx.Rollback(ctx))
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not return after the flush went through")
	}
	select {
	case err := <-w.errs:
		t.Fatalf("watcher reported an error at stop: %v", err)
	default:
	}
	_, err = positions.FlushWAL(ctx, conn, uid)
	require.NoError(t, err, "the connection is usable after stop")
}
