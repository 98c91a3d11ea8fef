package cdc

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestSourcePosition: the watcher follows the source's WAL end, so a commit
// read from the stream can be told to be far behind it (a catch-up) or at it.
func TestSourcePosition(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	p := watchSourcePosition(ctx, conn, 0, nil)
	defer p.stop()

	writer, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer writer.Close(ctx)
	var before string
	require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before))
	start, err := change.ParseLSN(before)
	require.NoError(t, err)
	_, err = writer.Exec(ctx, `CREATE TABLE w AS SELECT g, repeat('x', 500) AS pad FROM generate_series(1, 5000) g`)
	require.NoError(t, err)
	var after string
	require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&after))
	end, err := change.ParseLSN(after)
	require.NoError(t, err)
	require.Greater(t, uint64(end-start), uint64(catchUpBehind), "the test wrote too little WAL")

	deadline := time.Now().Add(5 * time.Second)
	for p.End() < end && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.GreaterOrEqual(t, p.End(), end, "the watcher did not see the source's new WAL end")
	require.GreaterOrEqual(t, p.behind(start), uint64(end-start))
	require.Zero(t, p.behind(p.End()+1), "past the WAL end is not behind")
}

// TestSourceWatchShared: runs of one source database share one connection
// that follows the WAL end and writes heartbeats for all of them; the poll
// stops with the last run.
func TestSourceWatchShared(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(src + "&application_name=shared_watch")
	require.NoError(t, err)
	w := NewSourceWatch()
	a := w.join(cfg, 200*time.Millisecond, nil)
	b := w.join(cfg, 200*time.Millisecond, nil)
	require.Equal(t, 1, w.Sources())
	a.begin(0) // the streams started: heartbeats may be written
	b.begin(0)

	writer, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer writer.Close(ctx)
	_, err = writer.Exec(ctx, `CREATE TABLE w AS SELECT g FROM generate_series(1, 1000) g`)
	require.NoError(t, err)
	var after string
	require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&after))
	end, err := change.ParseLSN(after)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.End() >= end && b.End() >= end }, 5*time.Second, 20*time.Millisecond,
		"both runs see the source's WAL end")
	require.Eventually(t, func() bool { return !a.oldestHeartbeat().IsZero() && !b.oldestHeartbeat().IsZero() }, 5*time.Second, 20*time.Millisecond,
		"both runs hear of the shared heartbeats")
	conns := func() int64 {
		var n int64
		require.NoError(t, writer.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'shared_watch'`).Scan(&n))
		return n
	}
	require.EqualValues(t, 1, conns(), "one connection for both runs")

	a.stop()
	require.Equal(t, 1, w.Sources(), "the poll goes on for the other run")
	b.stop()
	require.Equal(t, 0, w.Sources())
	require.Eventually(t, func() bool { return conns() == 0 }, 5*time.Second, 50*time.Millisecond, "the last run closes the connection")
}

// TestSourceWatchNewPassword: after the peer user's password changed, a run
// that joins brings the new one, and the shared poll's next connection uses
// it: the position keeps following the source instead of failing to
// reconnect with the old password while the first run still holds on.
func TestSourceWatchNewPassword(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	ctx := context.Background()
	admin, role, withPassword := passwordRole(t, src, "watch_pw")
	w := NewSourceWatch()
	a := w.join(withPassword("old-password-1"), 0, nil)
	defer a.stop()
	conns := func() int64 {
		var n int64
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, role).Scan(&n))
		return n
	}
	require.Eventually(t, func() bool { return conns() == 1 }, 5*time.Second, 20*time.Millisecond, "the shared poll connects")

	_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER ROLE %s PASSWORD 'new-password-2'`, role))
	require.NoError(t, err)
	b := w.join(withPassword("new-password-2"), 0, nil)
	defer b.stop()
	require.Equal(t, 1, w.Sources())
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, role)
	require.NoError(t, err)

	_, err = admin.Exec(ctx, `CREATE TABLE w AS SELECT g FROM generate_series(1, 1000) g`)
	require.NoError(t, err)
	var after string
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&after))
	end, err := change.ParseLSN(after)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.End() >= end && b.End() >= end }, 10*time.Second, 50*time.Millisecond,
		"the shared poll reconnected with the new password and follows the source")
}

// passwordRole creates, in the database at dbURL, a login role named
// prefix and a number, with the password 'old-password-1'. It returns a
// connection to dbURL as its owner (closed at the end of the test), the
// role's name, and a function that configures a connection as the role
// with a password; the connection's application_name is the role's name.
func passwordRole(t *testing.T, dbURL, prefix string) (*pgx.Conn, string, func(password string) *pgx.ConnConfig) {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano()%1_000_000_000)
	admin, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'old-password-1'`, role))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	withPassword := func(pw string) *pgx.ConnConfig {
		u.User = url.UserPassword(role, pw)
		q := u.Query()
		q.Set("application_name", role)
		u.RawQuery = q.Encode()
		cfg, err := pgx.ParseConfig(u.String())
		require.NoError(t, err)
		return cfg
	}
	return admin, role, withPassword
}

// TestStatementOutlivesStop: a poll's or heartbeat's statement that is in
// flight when its run stops finishes instead of being cancelled, since a
// cancelled statement is an ERROR line in the peer's server log; its own
// timeout still ends it.
func TestStatementOutlivesStop(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	conn, err := pgx.Connect(context.Background(), src)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	runCtx, stopRun := context.WithCancel(context.Background())
	qctx, cancel := statementContext(runCtx, 5*time.Second)
	defer cancel()
	time.AfterFunc(50*time.Millisecond, stopRun)
	var slept string
	require.NoError(t, conn.QueryRow(qctx, `SELECT pg_catalog.pg_sleep(0.3)::text`).Scan(&slept), "the run's stop cancelled the statement")

	short, cancelShort := statementContext(context.Background(), 50*time.Millisecond)
	defer cancelShort()
	_, err = conn.Exec(short, `SELECT pg_catalog.pg_sleep(5)`)
	require.Error(t, err, "the statement's own timeout ends it")
}
