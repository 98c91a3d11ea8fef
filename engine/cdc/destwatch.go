package cdc

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// DestWatch shares, among the runs of one process, the work of following
// the destination's WAL flush (see durable.go): runs whose destinations are
// the same database as the same user share one connection, one read of the
// flush position (pg_current_wal_flush_lsn) and one forced flush, which
// flushes every session's asynchronous commits at once. A streaming mirror
// then holds one destination connection, the one it applies on, and a
// hundred mirrors of one destination cost one poll, not a hundred.
//
// Set Config.DestWatch to use it; without one a run follows the flush on a
// destination connection of its own. The zero value is not usable: use
// NewDestWatch.
type DestWatch struct {
	polls pollRegistry[*flushWatcher, *destSub, *sharedDest]
}

// NewDestWatch returns an empty DestWatch.
func NewDestWatch() *DestWatch {
	return &DestWatch{polls: newPollRegistry[*flushWatcher, *destSub, *sharedDest]()}
}

// Destinations is the number of destination databases being watched (one
// connection each).
func (w *DestWatch) Destinations() int {
	return w.polls.count()
}

// sharedDest follows the WAL flush of one destination database for the
// runs that joined it (the keys of subs; their destSub values are under
// mu).
type sharedDest struct {
	*sharedPoll[*flushWatcher, *destSub]

	wake chan struct{} // a run wants a flush (capacity 1)
}

// destSub is what the shared watcher knows of one run.
type destSub struct {
	target    flushTarget // zero when the run waits for nothing
	since     time.Time   // when the oldest unreached target came
	published change.LSN  // last flush position handed to the run
}

// join returns a flush watcher for a run on cfg's database that follows
// the shared watcher, starting it if this is its first run. conn is the
// run's apply connection: the watcher never queries it, but the run's
// last flush at stop does (see runner.finish), after stop.
func (w *DestWatch) join(cfg *pgx.ConnConfig, conn *pgx.Conn, mirrorUID string, log *slog.Logger) *flushWatcher {
	return w.polls.join(cfg, log,
		func(poll *sharedPoll[*flushWatcher, *destSub]) *sharedDest {
			return &sharedDest{sharedPoll: poll, wake: make(chan struct{}, 1)}
		},
		func(d *sharedDest) (*flushWatcher, *destSub) {
			return &flushWatcher{
				conn:    conn,
				mirror:  mirrorUID,
				shared:  d,
				flushed: make(chan change.LSN, 1),
				errs:    make(chan error, 1),
				quit:    make(chan struct{}),
				done:    make(chan struct{}),
			}, &destSub{}
		})
}

// want records that fw waits for the destination's WAL to be flushed to
// t.lsn. It never blocks. The poller is woken only when the run starts
// waiting (the poller may be idle) or starts waiting urgently (a shorter
// poll): a later target merges into what its next poll reads, so that a
// batch per transaction does not wake it each time.
func (d *sharedDest) want(fw *flushWatcher, t flushTarget) {
	d.mu.Lock()
	s := d.subs[fw]
	if s == nil {
		d.mu.Unlock()
		return
	}
	starts := s.target.lsn == 0
	if starts {
		s.since = time.Now()
	}
	wake := starts || t.urgent && !s.target.urgent
	s.target = merge(s.target, t)
	d.mu.Unlock()
	if !wake {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// pending reports what the runs wait for: whether any does, whether any
// waits urgently, whether one has waited past its patience for a position
// beyond flushed, and a mirror uid of a waiting run (for the forced
// flush's bookkeeping row).
func (d *sharedDest) pending(flushed change.LSN) (some, urgent, force bool, uid string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	for fw, s := range d.subs {
		if s.target.lsn == 0 {
			continue
		}
		some = true
		uid = fw.mirror
		patience := busyPatience
		if s.target.urgent {
			urgent = true
			patience = urgentPatience
		}
		if flushed < s.target.lsn && now.Sub(s.since) >= patience {
			force = true
		}
	}
	return some, urgent, force, uid
}

// publish hands flushed to every run it advances and clears the targets
// it reaches.
func (d *sharedDest) publish(flushed change.LSN) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for fw, s := range d.subs {
		if flushed > s.published {
			s.published = flushed
			// Replace a position not yet read: the latest covers it.
			select {
			case <-fw.flushed:
			default:
			}
			fw.flushed <- flushed
		}
		if s.target.lsn != 0 && flushed >= s.target.lsn {
			s.target = flushTarget{}
		}
	}
}

// fail hands err to every run that waits for a flush: its batches cannot
// be confirmed while the destination does not answer, so it ends as with a
// watcher of its own.
func (d *sharedDest) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for fw, s := range d.subs {
		if s.target.lsn == 0 {
			continue
		}
		select {
		case fw.errs <- err:
		default:
		}
	}
}

// run follows the flush until the last run leaves: it waits while no run
// waits for a flush, then reads the flush position every busyPoll
// (urgentPoll when a run's stream is dry) and forces a flush once a run
// has waited past its patience, as a run's own watcher does (durable.go).
// A failed connection is made again (at most every second).
func (d *sharedDest) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeQuietly(conn)
		}
	}()
	var lastConnect time.Time
	var flushed change.LSN
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if some, _, _, _ := d.pending(flushed); !some {
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
				continue
			}
		}
		if conn == nil {
			if wait := time.Second - time.Since(lastConnect); wait > 0 && !lastConnect.IsZero() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			lastConnect = time.Now()
			c, err := d.connect(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				d.fail(connectError("destination", err))
				continue
			}
			conn = c
		}
		var err error
		if flushed, err = d.step(ctx, conn); err != nil {
			if ctx.Err() != nil {
				return
			}
			d.fail(netError(err))
			closeQuietly(conn)
			conn = nil
			continue
		}
		d.publish(flushed)
		some, urgent, _, _ := d.pending(flushed)
		if !some {
			continue
		}
		// Wait for the next poll. Newer targets only merge in: a batch per
		// transaction must not cost a query each; a run whose stream ran
		// dry shortens the wait.
		poll := busyPoll
		if urgent {
			poll = urgentPoll
		}
		timer.Reset(poll)
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-d.wake:
				if _, nowUrgent, _, _ := d.pending(flushed); nowUrgent && !urgent {
					urgent = true
					timer.Reset(urgentPoll)
				}
			case <-timer.C:
				waiting = false
			}
		}
	}
}

// step reads the flush position and, when a run has waited past its
// patience, forces a flush.
func (d *sharedDest) step(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	stepCtx, cancel := statementContext(ctx, 10*time.Second)
	defer cancel()
	flushed, err := flushPosition(stepCtx, conn)
	if err != nil {
		return 0, err
	}
	if _, _, force, uid := d.pending(flushed); force {
		return positions.FlushWAL(stepCtx, conn, uid)
	}
	return flushed, nil
}
