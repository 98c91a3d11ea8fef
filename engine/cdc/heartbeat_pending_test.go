package cdc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestHeartbeatPending: a heartbeat written while the source has no WAL
// past the position the mirror has received says nothing is pending and
// does not count toward the lag while it is on its way (an idle mirror
// whose stream has just started shows 0); one written after other WAL
// (changes that may be pending) counts from when it was written, until a
// transaction received past it forgets it.
func TestHeartbeatPending(t *testing.T) {
	t.Parallel()
	// A cluster of its own: other tests' WAL would be news from the source.
	src := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	writer, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer writer.Close(ctx)
	position := func() change.LSN {
		var text string
		require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&text))
		lsn, err := change.ParseLSN(text)
		require.NoError(t, err)
		return lsn
	}

	p := watchSourcePosition(ctx, conn, 200*time.Millisecond, slog.New(slog.DiscardHandler))
	defer p.stop()
	p.begin(position())
	// None received (no stream here): each one's WAL is the source's only
	// news, so none counts.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.heartbeats) >= 4
	}, 10*time.Second, 20*time.Millisecond, "four heartbeats")
	require.True(t, p.oldestHeartbeat().IsZero(), "a heartbeat with nothing before it counts toward the lag")

	// A change the stream has not brought yet: the next heartbeat counts.
	changed := time.Now()
	_, err = writer.Exec(ctx, `CREATE TABLE pending (id int); INSERT INTO pending VALUES (1)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return !p.oldestHeartbeat().IsZero() }, 10*time.Second, 20*time.Millisecond,
		"a heartbeat written after a pending change")
	written := p.oldestHeartbeat()
	require.True(t, written.After(changed), "the lag counts from a heartbeat written before the change")
	require.WithinDuration(t, time.Now(), written, 5*time.Second)

	// Received past it: nothing counts any more.
	time.Sleep(200 * time.Millisecond)
	p.received(position() + 1)
	require.True(t, p.oldestHeartbeat().IsZero(), "a heartbeat received still counts")
}
