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
		require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text))
		lsn, err := change.ParseLSN(text)
		require.NoError(t, err)
		return lsn
	}

	p := watchSourcePosition(ctx, conn, 200*time.Millisecond, slog.New(slog.DiscardHandler))
	stopped := false
	defer func() {
		if !stopped {
			p.stop()
		}
	}()
	p.begin(position())
	// None received (no stream here): each one's WAL is the source's only
	// news, so none counts.
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.heartbeats) >= 4
	}, 10*time.Second, 20*time.Millisecond, "four heartbeats")
	// (The server's own background records, a running-transactions
	// snapshot every 15 s, could make a later one count: look at the first
	// two.)
	p.mu.Lock()
	first, second := p.heartbeats[0], p.heartbeats[1]
	p.mu.Unlock()
	require.False(t, first.pending, "a heartbeat with nothing before it counts toward the lag")
	require.False(t, second.pending, "a heartbeat with only the previous heartbeat before it counts toward the lag")

	// A change the stream has not brought yet: the next heartbeat counts.
	changed := time.Now()
	_, err = writer.Exec(ctx, `CREATE TABLE pending (id int); INSERT INTO pending VALUES (1)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, h := range p.heartbeats {
			if h.pending && !h.at.Before(changed) {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "a heartbeat written after a pending change counts")
	written := p.oldestHeartbeat()
	require.WithinDuration(t, time.Now(), written, 30*time.Second)

	// Received past every heartbeat (the watcher stopped: no more of
	// them): nothing counts any more.
	p.stop()
	stopped = true
	var text string
	require.NoError(t, writer.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text))
	end, err := change.ParseLSN(text)
	require.NoError(t, err)
	p.received(end + 1)
	require.True(t, p.oldestHeartbeat().IsZero(), "a heartbeat received still counts")
}
