package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// gcTuneSink keeps the test's live heap reachable.
var gcTuneSink [][]byte

// TestTuneGCFollowsTheLiveHeap checks the collector's pace: GOGC=200 with a
// memory limit of at least gcFloor, a limit that follows
// twice the live heap after a collection once it is large, and nothing
// changed when the operator set GOGC.
func TestTuneGCFollowsTheLiveHeap(t *testing.T) {
	before, beforeLimit := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	debug.SetGCPercent(before)

	untouched := tuneGC(func(k string) string {
		if k == "GOGC" {
			return "150"
		}
		return ""
	})
	if got := debug.SetGCPercent(-1); got != before {
		t.Errorf("with GOGC set, the GC percent became %d, want it left at %d", got, before)
	}
	debug.SetGCPercent(before)
	untouched()

	stop := tuneGC(func(string) string { return "" })
	if got := debug.SetGCPercent(gcPercent); got != gcPercent {
		t.Errorf("GC percent %d, want %d", got, gcPercent)
	}
	runtime.GC()
	if got := debug.SetMemoryLimit(-1); got < gcFloor || got == beforeLimit {
		t.Errorf("memory limit %d, want at least the floor %d", got, gcFloor)
	}

	// A live heap of 160 MB: the limit must follow it to at least twice
	// that after the next collections (the cleanup runs on its own
	// goroutine after the collection).
	const live = 160 << 20
	for range live / (1 << 20) {
		gcTuneSink = append(gcTuneSink, make([]byte, 1<<20))
	}
	deadline := time.Now().Add(10 * time.Second)
	var limit int64
	for time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
		if limit = debug.SetMemoryLimit(-1); limit >= 2*live {
			break
		}
	}
	if limit < 2*live {
		t.Errorf("memory limit %d MB with a live heap of %d MB, want at least twice the heap", limit>>20, live>>20)
	}
	gcTuneSink = nil

	stop()
	if got := debug.SetGCPercent(-1); got != before {
		t.Errorf("after stop the GC percent is %d, want %d back", got, before)
	}
	debug.SetGCPercent(before)
	if got := debug.SetMemoryLimit(-1); got != beforeLimit {
		t.Errorf("after stop the memory limit is %d, want %d back", got, beforeLimit)
	}
}
