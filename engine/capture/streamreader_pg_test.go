package capture

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// A stream started on a connection from ConnectReplication tells the
// connection's socket reader that its consumer catches up, and the reader
// then keeps the socket's low-water mark raised between its reads however
// slowly the source sends; once the consumer has caught up, a quiet
// stream's socket keeps the mark at one byte. Observed on a real
// replication connection while the reader waits for its consumer (a tiny
// memory budget, events not taken).
func TestCatchingUpHushesTheReplicationSocket(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `CREATE TABLE hushed (id int PRIMARY KEY); CREATE PUBLICATION hush_pub FOR TABLE hushed`)
	repl, err := ConnectReplication(ctx, &pgtest.ConnConfig(t, url).Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	g := streamReaderOf(repl)
	require.NotNil(t, g, "ConnectReplication's connection carries its reader")
	sock, ok := repl.Conn().(*net.TCPConn)
	if !ok || g.hush == nil {
		t.Skipf("no low-water mark on this connection (%T)", repl.Conn())
	}
	info, err := CreateSlot(ctx, repl, "hush_slot", false)
	require.NoError(t, err)
	s, err := StartStream(ctx, repl, StreamConfig{Slot: "hush_slot", Publication: "hush_pub", StartLSN: info.ConsistentPoint,
		Buffer: 1, MaxBufferedBytes: 1})
	require.NoError(t, err)
	defer s.Close()
	require.Same(t, &s.catchingUp, g.catchingUp, "the connection's reader follows the stream's catching-up flag")

	next := 0
	insert := func() {
		for range 5 {
			next++
			pgtest.Exec(t, url, `INSERT INTO hushed VALUES ($1)`, next)
		}
	}
	mark := func() int { return lowWaterMarkOf(t, sock) }

	s.SetCatchingUp(true)
	insert()
	deadline := time.Now().Add(15 * time.Second)
	for mark() < hushBytes {
		require.True(t, time.Now().Before(deadline), "the socket's mark was never raised while catching up (mark %d)", mark())
		time.Sleep(10 * time.Millisecond)
	}

	// Caught up: take everything, let the reader read again, and block it
	// again on new changes.
	s.SetCatchingUp(false)
	drain(s, 500*time.Millisecond)
	insert()
	drain(s, 500*time.Millisecond)
	insert()
	time.Sleep(500 * time.Millisecond)
	require.LessOrEqual(t, mark(), 1, "the socket's mark after catching up, on a quiet stream")
	drain(s, 100*time.Millisecond)
}

// drain takes the stream's events for d.
func drain(s *Stream, d time.Duration) {
	end := time.After(d)
	for {
		select {
		case evs := <-s.Events():
			for _, ev := range evs {
				s.Release(ev)
			}
		case <-end:
			return
		}
	}
}

// The walsender sends a transaction's messages one by one, each flushed on
// its own, so a reader that keeps up often finds the socket empty between a
// transaction's BEGIN and its COMMIT. The stream hands a small transaction
// over whole all the same: the consumer wakes once per transaction of a
// live stream, not once per message. Observed on a real replication
// connection, one single-row transaction at a time.
func TestSmallTransactionHandedOverWhole(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `CREATE TABLE whole (id int PRIMARY KEY, v text); CREATE PUBLICATION whole_pub FOR TABLE whole`)
	repl, err := ConnectReplication(ctx, &pgtest.ConnConfig(t, url).Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	info, err := CreateSlot(ctx, repl, "whole_slot", false)
	require.NoError(t, err)
	s, err := StartStream(ctx, repl, StreamConfig{Slot: "whole_slot", Publication: "whole_pub", StartLSN: info.ConsistentPoint})
	require.NoError(t, err)
	defer s.Close()

	const transactions = 30
	for i := range transactions {
		pgtest.Exec(t, url, `INSERT INTO whole VALUES ($1, 'x')`, i)
		evs := awaitEvents(t, s)
		require.Equal(t, EventBegin, evs[0].Kind, "transaction %d: the first event handed over", i)
		require.Equal(t, EventCommit, evs[len(evs)-1].Kind, "transaction %d handed over in parts: %d events, the last of kind %d", i, len(evs), evs[len(evs)-1].Kind)
		for _, ev := range evs {
			s.Release(ev)
		}
	}
}

// awaitEvents returns the stream's next hand-over.
func awaitEvents(t *testing.T, s *Stream) []Event {
	t.Helper()
	select {
	case evs, ok := <-s.Events():
		if !ok {
			t.Fatalf("the stream ended: %v", s.Err())
		}
		return evs
	case <-time.After(30 * time.Second):
		t.Fatal("no events within 30 s")
		return nil
	}
}
