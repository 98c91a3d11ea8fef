package cdc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// TestDestWatchShared: runs of one destination database share one
// connection that follows the WAL flush for all of them: each run's targets
// (asynchronous commits of its own) are reported flushed, urgent ones
// within a fraction of a second, busy ones forced within the busy patience;
// the connection closes with the last run.
func TestDestWatchShared(t *testing.T) {
	t.Parallel()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dst + "&application_name=shared_flush")
	require.NoError(t, err)
	setup, err := pgx.Connect(ctx, dst)
	require.NoError(t, err)
	defer setup.Close(ctx)
	require.NoError(t, positions.Ensure(ctx, setup))
	_, err = setup.Exec(ctx, `CREATE TABLE w (g int)`)
	require.NoError(t, err)

	// Each run commits asynchronously on an apply connection of its own,
	// as batches do.
	applyConn := func() *pgx.Conn {
		wcfg, err := pgx.ParseConfig(dst)
		require.NoError(t, err)
		wcfg.RuntimeParams["synchronous_commit"] = "off"
		c, err := pgx.ConnectConfig(ctx, wcfg)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(ctx) })
		return c
	}
	commit := func(c *pgx.Conn) change.LSN {
		var text string
		require.NoError(t, c.QueryRow(ctx, `INSERT INTO w VALUES (1) RETURNING pg_current_wal_insert_lsn()::text`).Scan(&text))
		lsn, err := change.ParseLSN(text)
		require.NoError(t, err)
		return lsn
	}
	w := NewDestWatch()
	connA, connB := applyConn(), applyConn()
	a := w.join(cfg, connA, "00000000-0000-0000-0000-00000000000a", nil)
	b := w.join(cfg, connB, "00000000-0000-0000-0000-00000000000b", nil)
	require.Equal(t, 1, w.Destinations())

	reported := map[*flushWatcher]change.LSN{}
	waitReported := func(fw *flushWatcher, target change.LSN, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for reported[fw] < target {
			select {
			case lsn := <-fw.flushed:
				require.Greater(t, lsn, reported[fw], "reported positions only move forward")
				reported[fw] = lsn
			case err := <-fw.errs:
				t.Fatal(err)
			case <-deadline:
				t.Fatalf("flushed position %s not reported within %s (last %s)", target, within, reported[fw])
			}
		}
	}

	// Bursts from both runs: every target is reported to its run.
	var lastA, lastB change.LSN
	for i := range 200 {
		lastA = commit(connA)
		a.want(lastA, i%50 == 49)
		lastB = commit(connB)
		b.want(lastB, false)
	}
	waitReported(a, lastA, 3*time.Second)
	waitReported(b, lastB, 3*time.Second)

	// Idle, then a dry stream's target: reported well within a second.
	time.Sleep(200 * time.Millisecond)
	lastB = commit(connB)
	b.want(lastB, true)
	waitReported(b, lastB, 700*time.Millisecond)
	// A busy target is forced within the busy patience.
	lastA = commit(connA)
	a.want(lastA, false)
	waitReported(a, lastA, 2*time.Second)

	conns := func() int64 {
		var n int64
		require.NoError(t, setup.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'shared_flush'`).Scan(&n))
		return n
	}
	require.EqualValues(t, 1, conns(), "one connection for both runs")

	// A run's last flush at stop goes on its apply connection.
	a.stop()
	require.Equal(t, 1, w.Destinations(), "the watch goes on for the other run")
	_, err = positions.FlushWAL(ctx, a.conn, "00000000-0000-0000-0000-00000000000a")
	require.NoError(t, err)
	lastB = commit(connB)
	b.want(lastB, true)
	waitReported(b, lastB, time.Second)
	b.stop()
	require.Equal(t, 0, w.Destinations())
	require.Eventually(t, func() bool { return conns() == 0 }, 5*time.Second, 50*time.Millisecond, "the last run closes the connection")
}

// TestDestWatchNewPassword: after the peer user's password changed, a run
// that joins brings the new one, and the shared flush watcher's next
// connection uses it: the new run's flushes are reported instead of the
// watcher failing to reconnect with the old password while the first run
// still holds on.
func TestDestWatchNewPassword(t *testing.T) {
	t.Parallel()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	ctx := context.Background()
	admin, role, withPassword := passwordRole(t, dst, "dwatch_pw")
	_, err := admin.Exec(ctx, `CREATE TABLE w (g int)`)
	require.NoError(t, err)
	// commit makes a flushed commit (synchronous_commit is on): the watcher
	// reports it at its first read, without forcing a flush.
	commit := func() change.LSN {
		var text string
		require.NoError(t, admin.QueryRow(ctx, `INSERT INTO w VALUES (1) RETURNING pg_current_wal_insert_lsn()::text`).Scan(&text))
		lsn, err := change.ParseLSN(text)
		require.NoError(t, err)
		return lsn
	}
	// flushes waits until fw is told of a flush at or past a new commit,
	// asking again after an error (the lost connection is reported to the
	// runs waiting then, as with a watcher of their own).
	flushes := func(fw *flushWatcher, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		target := commit()
		fw.want(target, true)
		var lastErr error
		for {
			select {
			case lsn := <-fw.flushed:
				if lsn >= target {
					return
				}
			case lastErr = <-fw.errs:
				target = commit()
				fw.want(target, true)
			case <-deadline:
				t.Fatalf("flush to %s not reported within %s (last error: %v)", target, within, lastErr)
			}
		}
	}
	conns := func() int64 {
		var n int64
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, role).Scan(&n))
		return n
	}

	w := NewDestWatch()
	a := w.join(withPassword("old-password-1"), admin, "00000000-0000-0000-0000-00000000000a", nil)
	defer a.stop()
	flushes(a, 5*time.Second)
	require.EqualValues(t, 1, conns(), "the shared watcher connects")

	_, err = admin.Exec(ctx, fmt.Sprintf(`ALTER ROLE %s PASSWORD 'new-password-2'`, role))
	require.NoError(t, err)
	b := w.join(withPassword("new-password-2"), admin, "00000000-0000-0000-0000-00000000000b", nil)
	defer b.stop()
	require.Equal(t, 1, w.Destinations())
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, role)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return conns() == 0 }, 5*time.Second, 20*time.Millisecond)

	flushes(b, 10*time.Second)
	require.EqualValues(t, 1, conns(), "the shared watcher reconnected with the new password")
}
