package cdc

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// Batches commit on the destination with synchronous_commit = off, as
// PostgreSQL's own apply worker does: the commit returns before its WAL is
// flushed, so the apply loop never waits for a disk flush. A commit that is
// not yet flushed can be lost in a destination crash, so its source position
// is confirmed to the source only once the destination's WAL is flushed past
// the commit (pg_current_wal_flush_lsn() >= the WAL insert position read
// right after the commit). A commit lost in a crash was never confirmed: the
// source sends it again, and the applied position on the destination (lost
// with it) does not skip it.
//
// The flush watcher runs in its own goroutine, off the apply path, on a
// destination connection of its own, or, with Config.DestWatch, on one
// connection shared by the runs of the process that write the same
// destination database (destwatch.go): one read of the flush position and
// one forced flush then serve all of them. When a commit is not yet flushed it polls
// the flush position (the WAL writer flushes on its own every
// wal_writer_delay, or as WAL pages fill under load) and reports every
// advance; when that takes longer than its patience it forces a flush with a
// tiny synchronous commit, which flushes all WAL before it
// (positions.FlushWAL). It is patient (1 s) while changes keep coming and
// impatient (100 ms) once the stream is dry, so a caught-up mirror is
// confirmed within about a tenth of a second without adding flushes under
// load.

const (
	// urgentPoll and urgentPatience apply when the stream is dry (the
	// source sent everything it has): the watcher reads the flush position
	// every urgentPoll and forces a flush after urgentPatience, so the slot
	// is confirmed within about a tenth of a second once the mirror is
	// caught up (the target is half a second, native's pace). Shorter
	// cadences cost a live stream of small transactions, which is dry
	// after almost every one, a query every few milliseconds, a forced
	// (durable: fsynced) flush every few tens and a status update each.
	urgentPoll     = 25 * time.Millisecond
	urgentPatience = 100 * time.Millisecond
	// busyPoll and busyPatience apply while changes keep coming: the WAL
	// writer flushes on its own (every wal_writer_delay, or as pages fill),
	// so the watcher only reads the flush position every busyPoll and
	// forces a flush after busyPatience.
	busyPoll     = 50 * time.Millisecond
	busyPatience = time.Second
)

// pendingConfirm is a source position that may be confirmed once the
// destination's WAL is flushed to dest.
type pendingConfirm struct {
	dest change.LSN // destination WAL position that must be flushed
	src  change.LSN // source end LSN to confirm then
}

// flushTarget is a destination WAL position the runner waits to see
// flushed; urgent when the stream is dry.
type flushTarget struct {
	lsn    change.LSN
	urgent bool
}

// flushWatcher reports how far the destination's WAL is flushed, forcing a
// flush when the WAL writer is slow to do it.
type flushWatcher struct {
	conn    *pgx.Conn
	mirror  string           // the mirror's uid, for positions.FlushWAL
	shared  *sharedDest      // set when a DestWatch follows the flush for the run (destwatch.go)
	targets chan flushTarget // latest target (capacity 1)
	flushed chan change.LSN  // latest flushed position seen (capacity 1)
	errs    chan error       // the watcher's failure (capacity 1)
	quit    chan struct{}    // closed by stop
	once    sync.Once
	done    chan struct{}
}

// startFlushWatcher starts a watcher on conn, which it owns until stop.
//
// Stopping does not cancel a query in flight (pgx closes a connection whose
// query is cancelled, and the caller flushes on it after stop): the watcher
// ends after its current query, which the run's ctx still bounds.
func startFlushWatcher(ctx context.Context, conn *pgx.Conn, mirrorUID string) *flushWatcher {
	w := &flushWatcher{
		conn:    conn,
		mirror:  mirrorUID,
		targets: make(chan flushTarget, 1),
		flushed: make(chan change.LSN, 1),
		errs:    make(chan error, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go func() {
		defer close(w.done)
		if err := w.run(ctx); err != nil && ctx.Err() == nil && !w.stopped() {
			w.errs <- err
		}
	}()
	return w
}

// want asks the watcher to report once the destination WAL is flushed to
// at least lsn; urgent when the stream is dry. It never blocks: a newer
// target is merged with one not yet taken.
func (w *flushWatcher) want(lsn change.LSN, urgent bool) {
	t := flushTarget{lsn: lsn, urgent: urgent}
	if w.shared != nil {
		w.shared.want(w, t)
		return
	}
	for {
		select {
		case w.targets <- t:
			return
		default:
		}
		select {
		case old := <-w.targets:
			t = merge(t, old)
		default:
		}
	}
}

func merge(a, b flushTarget) flushTarget {
	return flushTarget{lsn: max(a.lsn, b.lsn), urgent: a.urgent || b.urgent}
}

// stop ends the watcher's goroutine and waits for it; the connection stays
// open for the caller (see positions.FlushWAL).
func (w *flushWatcher) stop() {
	w.once.Do(func() {
		close(w.quit)
		if w.shared != nil {
			w.shared.leave(w)
			close(w.done)
		}
	})
	<-w.done
}

// stopped reports whether stop was called.
func (w *flushWatcher) stopped() bool {
	select {
	case <-w.quit:
		return true
	default:
		return false
	}
}

// run waits for targets and reports every advance of the flush position
// until the target is reached, polling and, when the WAL writer takes
// longer than the patience allows, forcing a flush.
func (w *flushWatcher) run(ctx context.Context) error {
	var (
		target    flushTarget
		since     time.Time  // when the oldest unreached target came
		published change.LSN // last flush position reported
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if target.lsn == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-w.quit:
				return nil
			case target = <-w.targets:
				since = time.Now()
			}
		}
		poll, patience := busyPoll, busyPatience
		if target.urgent {
			poll, patience = urgentPoll, urgentPatience
		}
		stepCtx, cancel := statementContext(ctx, 10*time.Second)
		flushed, err := flushPosition(stepCtx, w.conn)
		if err == nil && flushed < target.lsn && time.Since(since) >= patience {
			flushed, err = positions.FlushWAL(stepCtx, w.conn, w.mirror)
		}
		cancel()
		if err != nil {
			return err
		}
		if flushed > published {
			published = flushed
			// Replace a position not yet read: the latest covers it.
			select {
			case <-w.flushed:
			default:
			}
			w.flushed <- flushed
		}
		if flushed >= target.lsn {
			target = flushTarget{}
			continue
		}
		// Wait for the next poll. Newer targets only merge in: a batch per
		// transaction must not cost a query each.
		timer.Reset(poll)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return nil
			case <-w.quit:
				return nil
			case t := <-w.targets:
				if t.urgent && !target.urgent {
					timer.Reset(urgentPoll)
				}
				target = merge(target, t)
			case <-timer.C:
				waiting = false
			}
		}
	}
}

// flushPosition reads the destination's WAL flush position.
func flushPosition(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&text); err != nil {
		return 0, fmt.Errorf("read destination WAL flush position: %w", err)
	}
	return change.ParseLSN(text)
}
