package jobs

import (
	"context"
	"errors"
	"time"

	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
)

// A hand-off between replicas (balance.go, handover.go) enqueues the
// receiver's run job first and asks the giving run to stop only once the
// receiver has fetched it: the job waits for the mirror's lock while the
// giver streams on and finishes its batch, and takes the lock within
// handoffLockPoll of its release. The mirror goes without a worker for that
// moment only, instead of for the giver's re-enqueue, the notification and
// the receiver's fetch on top.
const (
	// handoffFetchWait is how long the giver streams on at most while the
	// receiver has not fetched its job (a loaded or slow receiver).
	handoffFetchWait = 3 * time.Second
	// handoffLockWait is how long a handed job waits for the lock: the
	// giver stops at its next batch boundary, normally well within a
	// second. A giver that does not let go by then keeps the mirror (its
	// job is not replaced), and a mirror left without a worker is adopted.
	handoffLockWait = 10 * time.Second
	// handoffLockPoll is how often a handed job tries the lock.
	handoffLockPoll = 100 * time.Millisecond
)

// lockMirror takes the mirror's lock for job, or returns nil when another
// worker holds it (a duplicate job ends). A job of a hand-off
// (MirrorRunArgs.HandedBy) waits for the giver to let go, up to
// handoffLockWait, and then checks again that the mirror wants to run.
func (w *MirrorRunWorker) lockMirror(ctx context.Context, job *river.Job[MirrorRunArgs]) (*db.MirrorLock, error) {
	id := job.Args.MirrorID
	deadline := time.Now().Add(handoffLockWait)
	waited := false
	for {
		lock, err := w.cfg.runLocks.TryLock(ctx, id)
		if err != nil {
			return nil, err
		}
		if lock != nil && waited {
			return w.stillWanted(ctx, id, lock)
		}
		if lock != nil {
			return lock, nil
		}
		if job.Args.HandedBy == "" || time.Now().After(deadline) {
			// A duplicate job (the mirror's worker runs it), or a giver
			// that did not let go: the job ends.
			w.cfg.Logger.Debug("mirror is run by another worker", "mirror_id", id, "handed_by", job.Args.HandedBy)
			return nil, nil
		}
		waited = true
		t := time.NewTimer(handoffLockPoll)
		select {
		case <-ctx.Done():
			// The giver cancelled the job (its run stopped for another
			// reason) or this replica stops: the job ends.
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

// stillWanted returns lock when the mirror still wants to run after the
// wait for it, and otherwise releases it and returns nil.
func (w *MirrorRunWorker) stillWanted(ctx context.Context, id int64, lock *db.MirrorLock) (*db.MirrorLock, error) {
	m, err := w.cfg.runStore.MirrorGetByID(ctx, id)
	if err == nil && m.WantsToRun() {
		return lock, nil
	}
	lock.Release()
	if err != nil && !errors.Is(err, db.ErrNotFound) {
		return nil, err
	}
	return nil, nil
}
