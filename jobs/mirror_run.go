package jobs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/cdc"
)

// MirrorRunWorker drives one mirror through setup, snapshot and CDC.
//
// Exactly one worker runs a mirror at a time: the worker holds the mirror's
// session advisory lock for the whole run (and the source's slot admits one
// consumer). A job that finds the lock taken ends at once. A run ends when
// the mirror is paused or deleted, when its run budget is used up (the job
// snoozes and comes straight back), or on a failure, which is recorded on the
// mirror and retried with exponential backoff by snoozing the job.
type MirrorRunWorker struct {
	river.WorkerDefaults[MirrorRunArgs]
	cfg Config
}

// NextRetry brings back a run job that ended with an error of its own (the
// catalog away for a moment, as the run's failures are recorded on the
// mirror and snoozed with the mirror's backoff) within runRetryMax: River's
// default (attempt^4 seconds) would leave the mirror for minutes with a
// waiting job, which keeps the other replicas from adopting it, while its
// status still says running.
func (w *MirrorRunWorker) NextRetry(job *river.Job[MirrorRunArgs]) time.Time {
	return time.Now().Add(runRetryDelay(job.Attempt))
}

// runRetryMax bounds the wait before a run job that errored runs again.
const runRetryMax = 5 * time.Second

// runRetryDelay is one second per attempt, at most runRetryMax.
func runRetryDelay(attempt int) time.Duration {
	return min(time.Duration(max(attempt, 1))*time.Second, runRetryMax)
}

// Timeout is long: a run bounds its CDC phase itself, and a snapshot may
// take hours. A job whose process died is taken over by the supervisor.
func (w *MirrorRunWorker) Timeout(*river.Job[MirrorRunArgs]) time.Duration {
	return 7 * 24 * time.Hour
}

// errRunBudget ends a run whose budget is used up; the job comes back at once.
var errRunBudget = errors.New("run budget used up")

// Work runs the mirror until it pauses, is deleted, fails or uses up its
// run budget. A job from this replica's adoption queue that would be
// snoozed or retried is replaced by a run job on the mirrors queue, due
// then, so that any replica may take the mirror over from there and the
// jobs waiting for a mirror are always on the mirrors queue (which is where
// the adoption checks look).
func (w *MirrorRunWorker) Work(ctx context.Context, job *river.Job[MirrorRunArgs]) error {
	handTo, ahead, err := w.run(ctx, job)
	if handTo != "" {
		defer w.cfg.balance.left(job.Args.MirrorID)
	}
	var snooze *rivertype.JobSnoozeError
	if handTo != "" && ahead && errors.As(err, &snooze) && snooze.Duration == 0 {
		// The receiver's job was enqueued when the run was asked to stop
		// and waits for the lock, released by now: nothing to requeue.
		w.cfg.balance.handedOver(job.Args.MirrorID, handTo)
		return nil
	}
	if handTo == "" && ctx.Err() != nil && w.cfg.balance != nil && errors.As(err, &snooze) && snooze.Duration == 0 {
		// Shutting down: straight to a live replica with room, which
		// takes it at once, rather than to the mirrors queue, whose
		// waiting jobs the others fetch at their next poll.
		handTo = w.cfg.balance.shutdownTarget()
	}
	if handTo != "" && errors.As(err, &snooze) && snooze.Duration == 0 {
		// Handed to a replica below its share: its adoption queue gets
		// the run job, announced by notification, so that it takes the
		// mirror at once (the lock is released by now).
		if w.requeue(ctx, job, adoptQueue(handTo), 0) {
			w.cfg.balance.handedOver(job.Args.MirrorID, handTo)
			return nil
		}
	}
	if err == nil || job.Queue == QueueMirrors {
		return err
	}
	delay := 5 * time.Second
	if errors.As(err, &snooze) {
		delay = snooze.Duration
	}
	if w.requeue(ctx, job, QueueMirrors, delay) {
		return nil
	}
	return err
}

// requeue replaces the job by a run job of the same mirror on queue, due
// after delay, and reports whether it could.
func (w *MirrorRunWorker) requeue(ctx context.Context, job *river.Job[MirrorRunArgs], queue string, delay time.Duration) bool {
	client, cerr := river.ClientFromContextSafely[pgx.Tx](ctx)
	if cerr != nil {
		return false
	}
	// Also while shutting down: the mirror is handed back at once.
	insertCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	opts := MirrorRunArgs{}.InsertOpts()
	opts.Queue = queue
	if delay > 0 {
		opts.ScheduledAt = time.Now().Add(delay)
	}
	if _, err := client.Insert(insertCtx, job.Args, &opts); err != nil {
		w.cfg.Logger.Debug("move the run job to another queue", "mirror_id", job.Args.MirrorID, "queue", queue, "error", err)
		return false
	}
	return true
}

// run is Work on the job as it comes. handTo is the replica the run handed
// its mirror to; ahead, that the receiver's job was enqueued already and
// waits for the lock.
func (w *MirrorRunWorker) run(ctx context.Context, job *river.Job[MirrorRunArgs]) (handTo string, ahead bool, err error) {
	store := w.cfg.runStore
	id := job.Args.MirrorID
	if w.cfg.runLocks.Running() >= w.cfg.MirrorWorkers {
		// This replica runs its SERVICE_MIRROR_WORKERS already (jobs of
		// both its queues count): the job ends, and a replica with room
		// adopts the mirror (balance.go).
		w.cfg.Logger.Debug("running as many mirrors as SERVICE_MIRROR_WORKERS allows; leaving the mirror to others", "mirror_id", id)
		return "", false, nil
	}
	if w.cfg.balance != nil && w.cfg.balance.draining.Load() {
		// Shutting down (handover.go): a mirror handed here lately goes on
		// to a live replica with room, or back to the others' adoption.
		if to := w.cfg.balance.shutdownTarget(); to != "" {
			return to, false, river.JobSnooze(0)
		}
		return "", false, nil
	}
	if w.cfg.balance != nil && job.Queue == QueueMirrors && w.cfg.balance.refusing() {
		// This replica runs its share while another runs less: the job
		// ends here, without a query, and the mirror is left to the
		// others: the adoption loop of a replica below its share
		// enqueues it again once it has no worker (balance.go). A job
		// snoozed instead would come back every few seconds and cost the
		// catalog a fetch, a read and a lock each time. Jobs on this
		// replica's own adoption queue were put there for it (by its
		// adoption, or by a replica that handed it the mirror, deciding
		// from the same shares): they run.
		w.cfg.Logger.Debug("leaving the mirror to a replica below its share", "mirror_id", id)
		return "", false, nil
	}
	if w.cfg.balance != nil && w.cfg.balance.hasRun(id) {
		// A run of the mirror goes on here without its lock, which it is
		// taking back after its lock connection died (catalog_outage.go);
		// meanwhile the mirror looked unattended, and a supervisor or an
		// adoption enqueued this job. Taking the lock here first would stop
		// that run and start the stream again for nothing.
		w.cfg.Logger.Debug("mirror is run by this replica, which is taking its lock back", "mirror_id", id)
		return "", false, nil
	}
	m, err := store.MirrorGetByID(ctx, id)
	if errors.Is(err, db.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if !m.WantsToRun() {
		w.cfg.Logger.Debug("mirror does not want to run; the job ends", "mirror", m.Name, "status", m.Status, "desired_state", m.DesiredState)
		return "", false, nil
	}
	lock, err := w.lockMirror(ctx, job)
	if err != nil || lock == nil {
		return "", false, err
	}
	r := &mirrorRun{cfg: w.cfg, store: store, mirrorID: id, name: m.Name, lock: lock, cdcBegun: make(chan struct{}, 1),
		logger: w.cfg.Logger.With("mirror", m.Name, "mirror_id", id),
		hold:   &runHold{store: store, mirrorID: id}}
	defer r.releaseLock()
	if w.cfg.balance != nil {
		defer w.cfg.balance.started(r)()
	}
	err = r.work(ctx)
	if to := r.handedTo(); to != "" {
		r.stopMu.Lock()
		asked := r.handoffAt
		ahead = r.handedAhead
		r.stopMu.Unlock()
		r.logger.Debug("the run stopped to hand the mirror over", "to", to, "took", time.Since(asked).Round(time.Millisecond).String())
		return to, ahead, err
	}
	return "", false, err
}

// hasRun reports whether a run of the mirror on this replica is under way
// (it holds the mirror's lock, or is taking it back).
func (b *balancer) hasRun(mirrorID int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[mirrorID] != nil
}

// mirrorRun is one run of one mirror by the worker holding its lock.
type mirrorRun struct {
	cfg      Config
	store    runStore
	mirrorID int64
	name     string // the mirror's name when the run started, for metrics
	logger   *slog.Logger

	// lock is the mirror's catalog lock; it is replaced when the run takes
	// it back after a catalog outage (catalog_outage.go).
	lockMu   sync.Mutex
	lock     *db.MirrorLock
	lockLost atomic.Bool // CDC goes on without the lock while the catalog is unreachable
	// lagWritten: the run's first lag measure is in the catalog; later
	// ones go through the replica's lag writer (status_writer.go).
	lagWritten atomic.Bool
	logs       logKeeper // log entries the catalog could not take yet

	stopMu     sync.Mutex
	cdcBegun   chan struct{} // signalled when a CDC phase begins: control is checked then
	cdcStop    chan struct{} // non-nil while the CDC phase runs
	stopReason stopReason
	handoffTo  string // the replica the run was handed to (handAway)
	// handedAhead: the receiver's run job was enqueued as the run was asked
	// to stop (MirrorRunArgs.HandedBy); the run's job ends without one.
	handedAhead bool
	handoffAt   time.Time      // when handAway asked the stream to stop
	copying     map[int64]bool // mirror tables being copied beside CDC
	// copyRestarts counts the copies that started over because a source
	// table's columns changed between the preparation and the snapshot.
	copyRestarts int

	// markWrites says that the destination user may use replication
	// origins: pgmirror's writes there are marked (engine/origin), checked
	// by every prepare.
	markWrites bool
	// loops keeps the run's origin filter: which mirrors' writes on the
	// source the stream leaves out (origin_loops.go).
	loopsOnce sync.Once
	loops     atomic.Pointer[originLoops]

	hold *runHold // a verification's hold on the CDC phase

	// steps times the start of the current iteration until it streams
	// (debug log "run start steps"); nil once it streams.
	steps *startSteps

	// ceiling bounds what the run's streams confirm to the slot beyond
	// the applied position (lost_changes.go); nil until the first
	// iteration sets it.
	ceiling atomic.Pointer[cdc.ConfirmCeiling]
}

func (r *mirrorRun) work(ctx context.Context) error {
	m, err := r.store.MirrorGetByID(ctx, r.mirrorID)
	if err != nil {
		return err
	}
	if !m.WantsToRun() {
		r.logger.Debug("mirror does not want to run; the run ends", "status", m.Status, "desired_state", m.DesiredState)
		return nil
	}
	if m.Status == db.StatusError && m.NextRetryAt != nil {
		if wait := time.Until(*m.NextRetryAt); wait > 0 {
			return river.JobSnooze(wait)
		}
	}
	if m.Status == db.StatusError {
		r.cfg.Metrics.MirrorRetried(m.Name)
	}

	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var watchers sync.WaitGroup
	watchers.Add(2)
	go func() {
		defer watchers.Done()
		r.watchControl(runCtx, cancel)
	}()
	go func() {
		defer watchers.Done()
		r.keepCeiling(runCtx)
	}()

	err = r.drive(runCtx)
	cause := context.Cause(runCtx)
	cancel(nil)
	watchers.Wait()

	switch {
	case err == nil:
		return nil
	case errors.Is(err, errRunBudget):
		return river.JobSnooze(0)
	case ctx.Err() != nil:
		// The process is shutting down: hand the mirror back to the queue
		// at once so that another replica takes it over.
		r.logger.Info("run interrupted by shutdown; handing the mirror back to the queue")
		return river.JobSnooze(0)
	case errors.Is(cause, errStopDeleted):
		return nil
	case errors.Is(cause, errStopPaused):
		return r.store.MirrorSetPausedIfRequested(ctx, r.mirrorID)
	case errors.Is(cause, errLostLock) || errors.Is(err, errLostLock):
		r.logger.Warn("lost the catalog connection that holds the mirror lock; stopping the run")
		return river.JobSnooze(time.Second)
	}
	return r.fail(ctx, err)
}

// Causes that end a run from outside.
var (
	errLostLock    = errors.New("lost the mirror lock connection")
	errStopDeleted = errors.New("mirror deleted")
	errStopPaused  = errors.New("mirror paused")
)

// stopReason is why the CDC phase was asked to stop at a batch boundary.
type stopReason string

// Reasons why the CDC phase was asked to stop at a batch boundary.
const (
	reasonPaused  stopReason = "paused"
	reasonDeleted stopReason = "deleted"
	reasonAction  stopReason = "action"
	reasonBudget  stopReason = "budget"
	// reasonLostLock: another worker took the mirror over while this run
	// was cut off from the catalog.
	reasonLostLock stopReason = "lost_lock"
)

// beginCDC returns the stop channel of a new CDC phase.
func (r *mirrorRun) beginCDC() chan struct{} {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.cdcStop = make(chan struct{})
	r.stopReason = ""
	select {
	case r.cdcBegun <- struct{}{}:
	default:
	}
	return r.cdcStop
}

// inCDC reports whether the CDC phase runs.
func (r *mirrorRun) inCDC() bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.cdcStop != nil
}

// stopping reports whether the CDC phase was asked to stop and has not
// ended yet.
func (r *mirrorRun) stopping() bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.cdcStop != nil && r.stopReason != ""
}

// endCDC ends the CDC phase and returns why it was stopped ("" if it was not).
func (r *mirrorRun) endCDC() stopReason {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.cdcStop = nil
	return r.stopReason
}

// handAway asks the running CDC phase to stop at a batch boundary so that
// the replica named to takes the mirror over (balance.go): the run ends as
// with a used-up budget, and its job is replaced by one on to's adoption
// queue, unless ahead says that job is enqueued already. It reports false
// when no CDC phase runs or it is stopping already.
func (r *mirrorRun) handAway(to string, ahead bool) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.cdcStop == nil || r.stopReason != "" {
		return false
	}
	r.stopReason, r.handoffTo, r.handoffAt, r.handedAhead = reasonBudget, to, time.Now(), ahead
	close(r.cdcStop)
	return true
}

// handedTo is the replica the run was handed to, if any.
func (r *mirrorRun) handedTo() string {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.handoffTo
}

// stopCDC asks the running CDC phase to stop at a batch boundary. It
// reports false when no CDC phase runs.
func (r *mirrorRun) stopCDC(reason stopReason) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	if r.cdcStop == nil {
		return false
	}
	if r.stopReason == "" {
		r.stopReason = reason
		close(r.cdcStop)
	}
	return true
}

// controlPollEvery is how often a run reads its mirror's desired state
// besides the control notifications, which the replica's lock connection
// receives and hands to the run (db.LockHolder.Subscribe).
const controlPollEvery = 5 * time.Minute

// watchControl follows control requests for the mirror: notifications, a
// check when the CDC phase begins, and a poll every controlPollEvery. When
// the lock's connection dies during CDC, the run goes on and takes the lock
// back once the catalog answers (catalog_outage.go); in other phases the
// run is cancelled: another worker may take the mirror over.
func (r *mirrorRun) watchControl(ctx context.Context, cancel context.CancelCauseFunc) {
	for ctx.Err() == nil {
		r.followControl(ctx, cancel)
		if ctx.Err() != nil {
			return
		}
		if !r.inCDC() {
			cancel(errLostLock)
			return
		}
		if !r.regainLock(ctx, cancel) {
			return
		}
	}
}

// followControl checks the mirror's desired state whenever a control
// request arrives, until the lock is lost or ctx ends.
func (r *mirrorRun) followControl(ctx context.Context, cancel context.CancelCauseFunc) {
	lost := r.currentLock().Lost()
	events, unsubscribe := r.cfg.runLocks.Subscribe(r.mirrorID)
	defer unsubscribe()
	tick := time.NewTicker(controlPollEvery)
	defer tick.Stop()
	r.checkControl(ctx, cancel) // a request may have come before the subscription
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-events:
		case <-r.cdcBegun:
		case <-tick.C:
		}
		r.checkControl(ctx, cancel)
	}
}

// checkControl reads the mirror's desired state. A delete or pause stops
// the run (CDC at a batch boundary, other phases at once); a control request
// stops the CDC phase so that the run carries it out.
func (r *mirrorRun) checkControl(ctx context.Context, cancel context.CancelCauseFunc) {
	if r.hold != nil && r.inCDC() {
		r.hold.refresh(ctx)
	}
	if l := r.loops.Load(); l != nil && r.inCDC() {
		l.refreshSoon(ctx)
	}
	m, err := r.store.MirrorGetByID(ctx, r.mirrorID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && m.DeletedAt != nil) {
		if !r.stopCDC(reasonDeleted) {
			cancel(errStopDeleted)
		}
		return
	}
	if err != nil {
		return
	}
	if m.DesiredState == db.DesiredPaused {
		if !r.stopCDC(reasonPaused) {
			cancel(errStopPaused)
		}
		return
	}
	if m.PendingAction != nil {
		r.stopCDC(reasonAction)
		return
	}
	tables, err := r.store.MirrorTables(ctx, r.mirrorID)
	if err != nil {
		return
	}
	for _, t := range tables {
		if r.isCopying(t.ID) || t.Status == db.TableStatusDropped {
			continue
		}
		if t.ResyncRequestedAt != nil || t.Status == db.TableStatusPending {
			r.stopCDC(reasonAction)
			return
		}
	}
}
