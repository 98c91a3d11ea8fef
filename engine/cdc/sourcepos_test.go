package cdc

import (
	"context"
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
