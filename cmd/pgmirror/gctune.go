package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The garbage collector's pace. A replica streaming a catch-up allocates a
// few short-lived objects per change over a small live heap, so with Go's
// default (GOGC=100) it collects very often: a quarter to a third of the
// process's CPU went to the collector in profiles of durable catch-ups.
// GOGC=200 took 15-30 % off the process's CPU per change there, but let the
// peak resident memory through a million-row transaction grow from 187 to
// 271 MB. So the service collects at GOGC=200 pace while that costs at most
// gcFloor of memory, and at GOGC=100 pace above it: after every collection
// the memory limit is set to the larger of gcFloor and what GOGC=100 would
// let the process grow to (see limit). An operator's GOGC or GOMEMLIMIT
// turns this off.
const (
	gcPercent = 200
	gcFloor   = 128 << 20
)

// gcMetrics are the runtime/metrics samples limit reads.
var gcMetrics = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes",
}

// gcTuner sets the memory limit (see limit) after every collection.
type gcTuner struct {
	mu      sync.Mutex
	stopped bool
	samples []metrics.Sample
}

// gcSentinel is an object no one keeps: its cleanup runs after the
// collection that found it unreachable. Larger than the runtime's 16-byte
// tiny blocks, whose cleanups may never run.
type gcSentinel struct {
	_ *gcTuner
	_ [24]byte
}

// tuneGC sets the collector's pace (see gcPercent) unless getenv shows
// GOGC or GOMEMLIMIT, and returns the function that puts the runtime's
// settings back.
func tuneGC(getenv func(string) string) (stop func()) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	t := &gcTuner{samples: make([]metrics.Sample, len(gcMetrics))}
	for i, name := range gcMetrics {
		t.samples[i].Name = name
	}
	prevPercent := debug.SetGCPercent(gcPercent)
	prevLimit := debug.SetMemoryLimit(t.limit())
	t.arm()
	return func() {
		t.mu.Lock()
		t.stopped = true
		t.mu.Unlock()
		debug.SetGCPercent(prevPercent)
		debug.SetMemoryLimit(prevLimit)
	}
}

// arm registers the cleanup that sets the limit after the next collection
// and arms again.
func (t *gcTuner) arm() {
	runtime.AddCleanup(new(gcSentinel), func(t *gcTuner) {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.stopped {
			return
		}
		debug.SetMemoryLimit(t.limit())
		t.arm()
	}, t)
}

// limit reads the runtime's memory and returns the limit for the next
// cycle: GOGC=100's goal (twice the live heap, plus the runtime's memory
// that is neither heap objects nor free heap pages: stacks, metadata, the
// unused parts of spans), at least gcFloor. Free heap pages are left out:
// they count against the limit, so the runtime returns them to the OS
// rather than grow past what GOGC=100 would.
func (t *gcTuner) limit() int64 {
	metrics.Read(t.samples)
	v := func(i int) int64 {
		if t.samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(t.samples[i].Value.Uint64())
	}
	live, total, objects, released, free := v(0), v(1), v(2), v(3), v(4)
	other := max(total-released-objects-free, 0)
	return max(gcFloor, 2*live+other)
}
