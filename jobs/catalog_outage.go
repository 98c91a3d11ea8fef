package jobs

import (
	"context"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// A run keeps replicating through a catalog outage. Safety does not need the
// catalog: the source's slot admits one consumer at a time and the applied
// position lives on the destination, in the same transaction as the rows. So
// when the catalog connection that holds the mirror lock dies during CDC, the
// run goes on and tries to take the lock again every lockRetryEvery:
//   - the catalog answers and the lock is free: the run holds it again and
//     writes the log entries it kept meanwhile;
//   - another worker holds it (this replica was cut off, and the supervisor
//     handed the mirror to another): the run stops at the next batch
//     boundary, which frees the slot for the new holder.
//
// Outside CDC (setup, snapshot) a lost lock still ends the run: those phases
// write to the catalog as they go.
const (
	lockRetryEvery = time.Second
	// maxPendingLogs bounds the log entries kept while the catalog is
	// unreachable; beyond it the oldest are dropped (and counted).
	maxPendingLogs = 1000
)

// pendingLog is a mirror log entry that could not be written yet.
type pendingLog struct {
	at      time.Time
	level   db.LogLevel
	message string
	details any
}

// logKeeper writes a mirror's log entries and keeps those the catalog could
// not take, in order, to write them once it answers again.
type logKeeper struct {
	mu      sync.Mutex
	pending []pendingLog
	dropped int
}

// log writes an entry (after any kept ones, so the order stays), or keeps it.
func (r *mirrorRun) log(ctx context.Context, level db.LogLevel, message string, details any) {
	entry := pendingLog{at: time.Now(), level: level, message: message, details: details}
	k := &r.logs
	k.mu.Lock()
	defer k.mu.Unlock()
	// While the catalog is being reconnected the entry waits without a
	// try (see batchReporter.loop).
	if !r.catalogLost() && r.writePendingLocked(ctx) {
		err := r.store.LogInsert(ctx, r.mirrorID, level, message, details)
		if err == nil {
			return
		}
		r.logger.Warn("write mirror log entry; keeping it until the catalog answers", "message", message, "error", err)
	}
	if len(k.pending) >= maxPendingLogs {
		k.pending = k.pending[1:]
		k.dropped++
	}
	k.pending = append(k.pending, entry)
}

// writePendingLogs writes the kept entries, if any.
func (r *mirrorRun) writePendingLogs(ctx context.Context) {
	r.logs.mu.Lock()
	defer r.logs.mu.Unlock()
	r.writePendingLocked(ctx)
}

// writePendingLocked writes kept entries with their original times and
// reports whether none is left. The caller holds r.logs.mu.
func (r *mirrorRun) writePendingLocked(ctx context.Context) bool {
	k := &r.logs
	if k.dropped > 0 {
		err := r.store.LogInsert(ctx, r.mirrorID, db.LevelWarn, "Log entries dropped during a catalog outage",
			map[string]any{"dropped": k.dropped, "kept": len(k.pending),
				"reason": "the catalog was unreachable; pgmirror keeps at most 1000 entries per mirror meanwhile"})
		if err != nil {
			return false
		}
		k.dropped = 0
	}
	for len(k.pending) > 0 {
		e := k.pending[0]
		if err := r.store.LogInsertAt(ctx, r.mirrorID, e.at, e.level, e.message, e.details); err != nil {
			return false
		}
		k.pending = k.pending[1:]
	}
	k.pending = nil
	return true
}

// currentLock is the lock the run holds now.
func (r *mirrorRun) currentLock() *db.MirrorLock {
	r.lockMu.Lock()
	defer r.lockMu.Unlock()
	return r.lock
}

// releaseLock releases the lock the run holds at its end.
func (r *mirrorRun) releaseLock() {
	r.lockMu.Lock()
	defer r.lockMu.Unlock()
	if r.lock != nil {
		r.lock.Release()
		r.lock = nil
	}
}

// catalogLost reports whether the run is replicating without its catalog lock.
func (r *mirrorRun) catalogLost() bool { return r.lockLost.Load() }

// regainLock is called when the lock's connection died during CDC. It tries
// to take the lock again until it does (true), until another worker holds it
// or the CDC phase ends (false; the run is then stopped), or ctx ends.
func (r *mirrorRun) regainLock(ctx context.Context, cancel context.CancelCauseFunc) bool {
	lostAt := time.Now()
	r.lockLost.Store(true)
	defer r.lockLost.Store(false)
	r.logger.Warn("lost the catalog connection that holds the mirror lock; replication goes on (the source slot admits one consumer) while the catalog is reconnected")
	tick := time.NewTicker(lockRetryEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
		if !r.inCDC() {
			cancel(errLostLock)
			return false
		}
		tryCtx, tryCancel := context.WithTimeout(ctx, 5*time.Second)
		lock, err := r.cfg.runLocks.TryLock(tryCtx, r.mirrorID)
		tryCancel()
		if err != nil {
			r.logger.Debug("catalog still unreachable", "error", err)
			continue
		}
		if lock == nil {
			r.logger.Warn("another worker took the mirror over during the catalog outage; stopping this run")
			r.stopCDC(reasonLostLock)
			return false
		}
		r.lockMu.Lock()
		old := r.lock
		r.lock = lock
		r.lockMu.Unlock()
		old.Release()
		r.logger.Info("catalog reachable again; mirror lock taken back", "outage", time.Since(lostAt).Round(time.Millisecond))
		writeCtx, writeCancel := context.WithTimeout(ctx, 10*time.Second)
		r.writePendingLogs(writeCtx)
		writeCancel()
		return true
	}
}
