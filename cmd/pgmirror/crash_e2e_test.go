package main

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestDestinationCrash kills the destination (immediate shutdown: no
// checkpoint, WAL buffers that were not yet written are lost, like a power
// cut) three times under a write load. Batches commit with
// synchronous_commit off, so the last ones before each crash are lost on the
// destination; pgmirror must never have confirmed them to the source (the
// source would not send them again and they would be missing), and must not
// apply twice what the destination kept. In the end both load tables (one
// without a primary key, where a change applied twice shows as a duplicate
// row) are exactly equal.
func TestDestinationCrash(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstCluster := pgtest.NewCluster(t, false)
	dst := pgtest.NewDatabase(t, dstCluster)
	s := startLoadMirror(t, "crash", src, dst)
	checkLoadEqual(t, src, dst, 30*time.Second)

	l := startLoad(src)
	defer func() {
		if l != nil {
			l.end()
		}
	}()
	for round := 1; round <= 3; round++ {
		// Crash in the middle of the load, with batches being applied.
		waitStreaming(t, l, dst, 100, 30*time.Second)
		crashAt := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := dstCluster.StopImmediate(ctx); err != nil {
			cancel()
			t.Fatal(err)
		}
		cancel()
		// The run notices, closes its stream (sending a last status update)
		// and the mirror goes to error.
		s.waitMirror("crash", "status error after the crash", 30*time.Second, func(m fullStatus) bool { return m.Status == "error" })
		confirmed := slotConfirmed(t, src)
		restartCluster(t, dstCluster)
		// The first retry comes 5 s after the failure at the earliest: read
		// what the destination recovered before pgmirror applies anything.
		applied := appliedLSN(t, dst)
		if time.Since(crashAt) > 4*time.Second {
			t.Logf("round %d: the applied position was read %s after the crash; a retry may have moved it", round, time.Since(crashAt).Round(time.Millisecond))
		}
		// The slot may stand beyond the applied position when the source
		// wrote WAL with nothing of ours after it (other databases of the
		// cluster): only the final equality tells a lost transaction.
		t.Logf("round %d: slot confirmed %s, destination recovered applied position %s", round, confirmed, applied)
		// Skip the backoff (it doubles with every round).
		s.mustDo("POST", "/v1/mirrors/crash/retry", nil, 200, nil)
		s.waitMirror("crash", "running again", 60*time.Second, func(m fullStatus) bool { return m.Status == "running" })
	}
	waitStreaming(t, l, dst, 50, 30*time.Second)
	n := l.end()
	l = nil
	if n < 100 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	checkLoadEqual(t, src, dst, 60*time.Second)
}

// slotConfirmed reads the confirmed position of the only slot of the
// source database.
func slotConfirmed(t *testing.T, dbURL string) pglogrepl.LSN {
	t.Helper()
	return readLSN(t, dbURL, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE database = current_database()`)
}

// appliedLSN reads the mirror's applied position on the destination.
func appliedLSN(t *testing.T, dbURL string) pglogrepl.LSN {
	t.Helper()
	return readLSN(t, dbURL, `SELECT lsn::text FROM _pgmirror.applied`)
}

func readLSN(t *testing.T, dbURL, sql string) pglogrepl.LSN {
	t.Helper()
	var text string
	queryOne(t, dbURL, &text, sql)
	lsn, err := pglogrepl.ParseLSN(text)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}
