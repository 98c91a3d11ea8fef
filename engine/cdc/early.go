package cdc

// This file applies a streamed transaction while the source still streams
// it (capture.StreamConfig.EarlyChanges): its changes go into a destination
// transaction of their own, on a second session, and that transaction
// commits at the source's commit, right after the batch of the transactions
// that committed before it. At the source's commit only what the applier
// still buffers remains to be written.
//
// The rules that keep it exactly once and whole:
//   - The early transaction is invisible until it commits, and it commits
//     with the mirror's applied position (its end LSN) in it, like a batch.
//   - Order: before an early change is written, the batch of the
//     transactions received before it is committed; at the source's commit
//     the open batch commits first. So the destination commits in the
//     source's commit order, and the early transaction never waits for a
//     row lock of the batch. The batch cannot wait for the early
//     transaction's row locks either: on the source, a transaction that
//     touched those rows would have waited for the large one to commit.
//     Against what the destination alone has (a unique index the source
//     lacks), the batch's session runs with a lock timeout while an early
//     transaction is open; a batch that times out restarts the run without
//     early apply.
//   - A subtransaction the source rolls back is rolled back in the early
//     transaction too, as PostgreSQL's parallel apply does it: a savepoint
//     at the first change of each subtransaction (what the applier buffers
//     is written first), and at the subtransaction's abort a rollback to
//     its savepoint, which also undoes the subtransactions begun within it
//     (their changes came after its first one). The capture gives up a
//     transaction with more than 64 of them (maxEarlySubtransactions).
//   - A plain truncate is written early too: its table lock is one the
//     source's transaction holds as well, so no source transaction commits
//     a write to that table before it (a batch that waits for it all the
//     same ends at the lock timeout above).
//   - Anything else but row changes (a truncate with CASCADE or RESTART
//     IDENTITY, a schema change, a table whose columns differ from those
//     recorded, a table being copied) gives the early transaction up, as
//     soon as the stream or the worker meets it: it is rolled back, and
//     the capture hands the transaction over whole at its commit from what
//     it staged, as without early apply, or has the run read it again from
//     the source when it outgrew the staging memory (capture.RereadError).
//   - A transaction the destination already has (sent again after a
//     restart) commits at a position below the mirror's: it is rolled back
//     and skipped as usual.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/session"
)

// earlyLockTimeout bounds a row lock wait of the batch session while an
// early transaction is open.
const earlyLockTimeout = "5s"

// errEarlyLocked: the batch waited for a lock while an early transaction
// was open; the run starts again without early apply.
var errEarlyLocked = errors.New("a batch waited for a lock while a streamed transaction was applied early")

// earlyApply is the run's session that applies a streamed transaction
// while it streams, and the one transaction it has open. The session is
// opened for each such transaction and closed when it ends.
type earlyApply struct {
	cfg     apply.Config // the run's applier configuration, with Early set
	marked  bool         // the run marks its writes with its origin: this session must too
	off     bool         // early apply is off for the run (the session could not be set up)
	conn    *pgx.Conn
	applier *apply.Applier // used on the worker's goroutine only (see work)
	origin  string         // the copy origin marking this session's writes
	// ops feeds the worker goroutine that writes the early changes, so
	// that the loop goes on with the transactions that commit meanwhile;
	// workerDone is closed when it ends.
	ops        *earlyQueue
	workerDone chan struct{}
	stopWorker context.CancelFunc // interrupts what the worker waits for
	// applyErr is the first error the worker met writing the open early
	// transaction's changes (read and reset through work).
	applyErr error
	// workerXid is the streamed transaction the worker writes (set through
	// work), and failed the last one whose writing failed, with why: the
	// stream asks for it (capture.StreamConfig.EarlyGivenUp) so that it
	// stops handing that transaction over at once, not at its commit.
	workerXid  uint32
	lastFailed atomic.Pointer[earlyFailure]

	xid     uint32 // the streamed transaction met last (0: none)
	failed  bool   // xid is not applied early: it comes whole at its commit
	open    bool   // xid's destination transaction is open
	changes int64
	started time.Time
	// subs are xid's subtransactions with a savepoint, in the order of
	// their first change, and subChanges the changes before each.
	subs       []uint32
	subChanges []int64
}

// earlyChange writes a change of a streamed transaction that is still open
// on the source into its early transaction.
func (r *runner) earlyChange(ctx context.Context, ev capture.Event) error {
	e := r.early
	if e.xid != ev.Xid {
		if e.open {
			r.earlyGiveUp(ctx, "another streamed transaction began")
		}
		e.xid, e.failed, e.changes = ev.Xid, false, 0
		e.subs, e.subChanges = e.subs[:0], e.subChanges[:0]
		if reason := r.earlyDeclined(); reason != "" {
			e.failed = true
			r.log.Debug("streamed transaction is applied at its commit", "xid", ev.Xid, "reason", reason)
		}
	}
	if e.failed {
		return nil
	}
	c := ev.Change
	if r.unmapped != nil && c.Relation != nil { // a truncate names its tables in Truncated
		r.noticeUnmapped(c.Relation.Table)
	}
	if !e.open {
		if err := r.earlyBegin(ctx); err != nil {
			return err
		}
		if e.failed {
			return nil
		}
	} else if r.applier.InBatch() {
		// The transactions received since the last early change go first.
		if err := r.commit(ctx); err != nil {
			return err
		}
	}
	if ev.Sub != ev.Xid && !slices.Contains(e.subs, ev.Sub) {
		// The first change of a subtransaction: a savepoint to roll back
		// to if the source rolls it back.
		e.subs, e.subChanges = append(e.subs, ev.Sub), append(e.subChanges, e.changes)
		e.savepoint(ev.Sub, false)
	}
	e.changes++
	e.ops.push(earlyOp{change: ev.Change, size: ev.Size})
	r.handedOver = true // the worker releases it
	return nil
}

// earlyOp is work for the early worker: a change to write (change, with
// the stream memory it holds, size), or fn to run with the applier to
// itself once the changes before it are written. It keeps only those of
// the event's fields, since a queue behind a slow destination holds a
// hundred thousand of them.
type earlyOp struct {
	change *change.Change
	size   int
	// fn runs with the worker's context, and its error goes to reply
	// unless reply is nil.
	fn    func(ctx context.Context) error
	reply chan error
}

// savepoint queues, after the changes queued before it, setting the
// savepoint of subtransaction sub in the early transaction, or with
// rollback rolling back to it. An error is kept for the commit (applyErr),
// as a change's is. (An op, not a field of earlyOp: the queue holds one
// op per change, 32 bytes each.)
func (e *earlyApply) savepoint(sub uint32, rollback bool) {
	name := fmt.Sprintf("pgmirror_sub_%d", sub)
	e.ops.push(earlyOp{fn: func(ctx context.Context) error {
		if e.applyErr != nil || !e.applier.InBatch() {
			return nil
		}
		var err error
		if rollback {
			err = e.applier.RollbackToSavepoint(ctx, name)
		} else {
			err = e.applier.Savepoint(ctx, name)
		}
		if err != nil {
			e.fail(err)
		}
		return nil
	}})
}

// earlyFailure is a streamed transaction whose early writing failed.
type earlyFailure struct {
	xid    uint32
	reason string
}

// fail keeps the first error met writing the open early transaction (on
// the worker) and tells the stream that its transaction is given up.
func (e *earlyApply) fail(err error) {
	e.applyErr = err
	e.lastFailed.Store(&earlyFailure{xid: e.workerXid, reason: err.Error()})
}

// givenUp says, for the stream's goroutine, why the early writing of
// streamed transaction xid failed, or "" (capture.StreamConfig.
// EarlyGivenUp).
func (e *earlyApply) givenUp(xid uint32) string {
	if f := e.lastFailed.Load(); f != nil && f.xid == xid {
		return f.reason
	}
	return ""
}

// earlyQueue is the early worker's queue. It has no bound of its own: the
// changes in it are bounded by the stream's MaxBufferedBytes until the
// worker releases them, so that a worker that waits (a row lock on the
// destination) does not stop the loop before the stream does.
type earlyQueue struct {
	mu     sync.Mutex
	ops    []earlyOp
	closed bool
	ready  chan struct{} // signalled when ops grow or the queue closes
}

func (q *earlyQueue) push(op earlyOp) {
	q.mu.Lock()
	wasEmpty := len(q.ops) == 0
	q.ops = append(q.ops, op)
	q.mu.Unlock()
	if !wasEmpty {
		return // the worker has not taken the queue yet: no need to wake it
	}
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *earlyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// take waits for queued ops and returns them all; none once closed. buf,
// the slice the caller took last time (cleared), becomes the queue's: the
// two trade places instead of copying, so that a long queue costs two
// arrays, not three.
func (q *earlyQueue) take(buf []earlyOp) []earlyOp {
	for {
		q.mu.Lock()
		if len(q.ops) > 0 {
			ops := q.ops
			q.ops = buf[:0]
			q.mu.Unlock()
			return ops
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil
		}
		<-q.ready
	}
}

// startWorker starts the goroutine that writes the early changes.
func (e *earlyApply) startWorker(ctx context.Context, stream *capture.Stream) {
	e.ops = &earlyQueue{ready: make(chan struct{}, 1)}
	e.workerDone = make(chan struct{})
	ctx, e.stopWorker = context.WithCancel(ctx)
	go func() {
		defer close(e.workerDone)
		var ops []earlyOp
		for {
			if ops = e.ops.take(ops); len(ops) == 0 {
				return
			}
			for i, op := range ops {
				e.do(ctx, stream, op)
				ops[i] = earlyOp{}
			}
		}
	}()
}

// do runs one op on the worker.
func (e *earlyApply) do(ctx context.Context, stream *capture.Stream, op earlyOp) {
	if op.fn != nil {
		err := op.fn(ctx)
		if op.reply != nil {
			op.reply <- err
		}
		return
	}
	if e.applyErr == nil && e.applier.InBatch() {
		if err := e.applier.Apply(ctx, op.change); err != nil {
			e.fail(err)
		}
	}
	stream.Release(capture.Event{Change: op.change, Size: op.size})
}

// work runs fn on the early worker once the changes queued before it are
// written, and returns its error. The loop waits meanwhile, so fn may use
// the runner's state as well as the applier.
func (e *earlyApply) work(fn func() error) error {
	reply := make(chan error, 1)
	e.ops.push(earlyOp{fn: func(context.Context) error { return fn() }, reply: reply})
	// Always waited for, also when ctx ends: fn may use the runner's state.
	// The worker's context ends with ctx, so what it waits for ends too.
	return <-reply
}

// earlyDeclined says why the run does not apply a streamed transaction
// early, or "".
func (r *runner) earlyDeclined() string {
	switch {
	case r.early.off:
		return "the second destination session could not be set up"
	case r.cfg.noEarly:
		return "early apply is off for this run"
	case r.cfg.StopAt != 0:
		return "the run stops at a position"
	case len(r.positions) > 0 || len(r.skip) > 0:
		return "tables are being copied or stand at their own position"
	}
	return ""
}

// noteDeclining publishes to the stream whether the run declines early
// apply now (earlyDeclined), so that the stream stages a streamed
// transaction from its start instead of handing its changes over.
func (r *runner) noteDeclining() {
	if r.early != nil {
		r.declining.Store(r.earlyDeclined() != "")
	}
}

// earlyBegin opens the early session and its transaction, after
// committing the open batch, and arms the batch session's lock timeout.
func (r *runner) earlyBegin(ctx context.Context) error {
	e := r.early
	if e.applier == nil {
		if err := r.earlyConnect(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			e.off, e.failed = true, true
			r.noteDeclining()
			r.log.Warn("cannot open the second destination session that applies large transactions while they stream; they are applied at their commit for the rest of this run",
				"error", err.Error())
			return nil
		}
	}
	if r.applier.InBatch() {
		if err := r.commit(ctx); err != nil {
			return err
		}
	}
	if err := r.batchLockTimeout(ctx, true); err != nil {
		return err
	}
	err := e.work(func() error {
		e.applyErr, e.workerXid = nil, e.xid
		return e.applier.Begin(ctx)
	})
	if err != nil {
		return err
	}
	e.open, e.started = true, time.Now()
	return nil
}

// earlyConnect opens the early session: search_path pinned, writes marked
// with one of the mirror's copy origins when the run's are marked.
func (r *runner) earlyConnect(ctx context.Context) error {
	e := r.early
	conn, err := session.Connect(ctx, r.cfg.Dest)
	if err != nil {
		return connectError("destination", err)
	}
	if e.marked {
		uid, _ := origin.MirrorUID(r.cfg.Origin)
		name, err := origin.SetupCopy(ctx, conn, uid)
		if err != nil {
			closeQuietly(conn)
			return err
		}
		e.origin = name
	}
	a, err := apply.New(ctx, conn, e.cfg)
	if err != nil {
		closeQuietly(conn)
		return err
	}
	e.conn, e.applier = conn, a
	e.startWorker(ctx, r.stream)
	return nil
}

// earlyEnd rolls back the early transaction when it is open (closing its
// session) and disarms the batch session's lock timeout (committing the
// open batch first: it holds whole transactions only).
func (r *runner) earlyEnd(ctx context.Context) error {
	e := r.early
	if !e.open {
		return nil
	}
	e.open = false
	r.earlyClose() // rolls the early transaction back
	if r.applier.InBatch() {
		if err := r.commit(ctx); err != nil {
			return err
		}
	}
	return r.batchLockTimeout(ctx, false)
}

// earlyGiveUp rolls the early transaction back: the streamed transaction
// comes whole at its commit.
func (r *runner) earlyGiveUp(ctx context.Context, reason string) {
	e := r.early
	e.failed = true
	r.log.Debug("streamed transaction is applied at its commit instead of while it streams", "xid", e.xid, "reason", reason)
	if err := r.earlyEnd(ctx); err != nil {
		r.log.Debug("ending the early transaction failed", "error", err.Error())
	}
}

// earlyAbort handles a rollback of streamed transaction ev.Xid or of one of
// its subtransactions.
func (r *runner) earlyAbort(ctx context.Context, ev capture.Event) error {
	e := r.early
	if e.xid != ev.Xid {
		return nil
	}
	if ev.Sub != ev.Xid {
		// Undo its changes, and those of the subtransactions that came
		// after its first change (begun within it: their aborts came
		// first, or they were released into it). One without a savepoint
		// had no change here.
		i := slices.Index(e.subs, ev.Sub)
		if e.failed || !e.open || i < 0 {
			return nil
		}
		r.log.Debug("a subtransaction rolled back on the source; rolling the early transaction back to its savepoint",
			"xid", ev.Xid, "subtransaction", ev.Sub, "changes_undone", e.changes-e.subChanges[i])
		e.changes = e.subChanges[i]
		e.subs, e.subChanges = e.subs[:i], e.subChanges[:i]
		e.savepoint(ev.Sub, true)
		return nil
	}
	e.xid, e.failed = 0, false
	return r.earlyEnd(ctx)
}

// earlyCommit handles the commit of a streamed transaction on the source:
// it commits the early transaction after the open batch and answers the
// capture whether it did.
func (r *runner) earlyCommit(ctx context.Context, ev capture.Event) (err error) {
	e := r.early
	applied := false
	defer func() { ev.Note.Answer(applied) }()
	mine := e.xid == ev.Xid && e.open && !e.failed
	if e.xid == ev.Xid {
		e.xid = 0
	}
	switch {
	case !mine:
		return r.earlyEnd(ctx)
	case ev.LSN < r.floor:
		// On the destination already (sent again after a restart).
		return r.earlyEnd(ctx)
	}
	r.source.received(ev.Note.End)
	if err := r.maybeHold(ctx, ev.LSN); err != nil {
		return err
	}
	if r.applier.InBatch() {
		if err := r.commit(ctx); err != nil {
			return err
		}
	}
	// Once the worker wrote every change: commit, unless it met an error
	// (then the transaction comes whole right after).
	var writeErr error
	err = e.work(func() error {
		if writeErr = e.applyErr; writeErr != nil {
			return nil
		}
		r.batchEnd, r.batchEndCommit, r.batchCommit = ev.Note.End, ev.CommitTime, ev.CommitTime
		r.changes, r.started, r.streamedBatch = e.changes, e.started, true
		return r.commitOn(ctx, e.applier)
	})
	if writeErr != nil {
		e.xid = ev.Xid
		r.earlyGiveUp(ctx, writeErr.Error())
		e.xid = 0
		return nil
	}
	e.open = false
	if err != nil {
		return err
	}
	applied = true
	r.log.Info("large transaction applied while the source streamed it", "xid", ev.Xid, "changes", e.changes,
		"streamed_for", time.Since(e.started).Round(time.Millisecond).String(),
		"after_source_commit", time.Since(ev.CommitTime).Round(time.Millisecond).String(), "lsn", ev.Note.End.String())
	r.earlyClose()
	return r.batchLockTimeout(ctx, false)
}

// batchLockTimeout arms (on) or disarms the batch session's lock timeout
// for the time an early transaction is open.
func (r *runner) batchLockTimeout(ctx context.Context, on bool) error {
	sql := "RESET lock_timeout"
	if on {
		sql = "SET lock_timeout = '" + earlyLockTimeout + "'"
	}
	if _, err := r.dest.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s on the destination: %w", sql, err)
	}
	return nil
}

// earlyLocked marks err, a failure of the batch session, with
// errEarlyLocked when it is a lock timeout met while an early transaction
// was open.
func (r *runner) earlyLocked(err error) error {
	var pgErr *pgconn.PgError
	if r.early == nil || !r.early.open || !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		return err
	}
	return fmt.Errorf("%w: %w", errEarlyLocked, err)
}

// earlyClose closes the early session (rolling back what it has open) and
// lets its copy origin go.
func (r *runner) earlyClose() {
	e := r.early
	if e == nil || e.conn == nil {
		return
	}
	e.open = false
	if e.ops != nil {
		// A worker that waits (a row lock on the destination) is
		// interrupted: its transaction is rolled back with its session.
		e.stopWorker()
		e.ops.close()
		<-e.workerDone
		e.ops = nil
	}
	if e.origin != "" && !e.conn.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if e.conn.PgConn().TxStatus() != 'I' {
			_, _ = e.conn.Exec(ctx, "ROLLBACK")
		}
		if err := origin.Release(ctx, e.conn, e.origin); err != nil {
			r.log.Debug("letting the early session's origin go failed; the next run takes it or the mirror's deletion drops it", "error", err.Error())
		}
		cancel()
	}
	closeQuietly(e.conn)
	e.conn, e.applier, e.origin = nil, nil, ""
}
