package jobs

import (
	"context"
	"time"
)

// A replica that shuts down (SIGTERM, a rolling deploy) hands its mirrors to
// the live replicas a few at a time rather than all at once:
//   - the process first leaves the replicas table (db.LockHolder.Retire),
//     so the others stop counting it and leave it nothing more;
//   - then Shutdown.HandOver asks runs to stop at their next batch
//     boundary, each handed to the live replica with the most room
//     (balancer.shutdownTarget), at most shutdownWave under way at once: a
//     handed run's job goes to the receiver's adoption queue, announced by
//     notification, and the next run is handed as soon as a receiver holds
//     one (or shutdownWaveWait after it was handed);
//   - meanwhile the replica takes no mirror: run jobs it fetches go on to a
//     live replica, adoption stops;
//   - what is left when the budget ends (runs copying tables, which stop
//     only when cancelled) is cancelled with River's jobs and handed over
//     in one go.
//
// So a mirror goes without a worker only for the moment its receiver takes
// to start it, and only shutdownWave at a time, instead of every mirror
// of the replica at once waiting for the others to start them together.
const (
	shutdownWave     = 4
	shutdownWaveWait = handoffFresh
	// shutdownPoll is how often HandOver looks whether the receivers hold
	// the mirrors under way.
	shutdownPoll = 100 * time.Millisecond
)

// Shutdown hands the mirrors of a replica that shuts down to the live
// replicas, a few at a time (see above). Pass a zero Shutdown in
// Config.Shutdown; NewClient binds it to the client's balancer.
type Shutdown struct {
	b *balancer
}

// HandOver hands this replica's running mirrors to the live replicas, at
// most shutdownWave under way at once, and returns
// when none is left to hand, no live replica has room or ctx ends. Call it
// after db.LockHolder.Retire and before River's client stops: the runs left
// then are cancelled and handed over together.
func (s *Shutdown) HandOver(ctx context.Context) {
	if s == nil || s.b == nil {
		return
	}
	s.b.drain(ctx)
}

// drain is Shutdown.HandOver: it keeps up to shutdownWave hand-offs under
// way, handing the next run as soon as a receiver holds one.
func (b *balancer) drain(ctx context.Context) {
	b.draining.Store(true)
	started := time.Now()
	handed := 0
	transit := map[int64]time.Time{} // handed, not yet held by the receiver
	for ctx.Err() == nil {
		if len(transit) > 0 {
			b.settleTransit(ctx, transit)
		}
		if room := shutdownWave - len(transit); room > 0 && b.readLoads(ctx) {
			now := time.Now()
			more := b.handWave(room)
			for _, id := range more {
				transit[id] = now
			}
			handed += len(more)
			if len(more) == 0 && len(transit) == 0 {
				break // nothing left to hand, or nobody to hand it to
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(shutdownPoll):
		}
	}
	if handed > 0 {
		b.cfg.Logger.Info("handed mirrors to the other replicas before stopping", "mirrors", handed,
			"left_to_cancel", b.cfg.Locks.Running(), "duration", time.Since(started).Round(time.Millisecond))
	}
}

// settleTransit removes from transit the mirrors their receiver holds, those
// whose run ended without handing them over, and those handed longer than
// shutdownWaveWait ago (the receiver is slow; the hand-off goes on).
func (b *balancer) settleTransit(ctx context.Context, transit map[int64]time.Time) {
	// This replica is out of the replicas table: the locks listed are the
	// live replicas'.
	workers, err := b.cfg.Store.MirrorWorkers(ctx)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, at := range transit {
		_, taken := workers[id]
		_, handed := b.handed[id]
		if taken || !(handed || b.leaving[id]) || time.Since(at) >= shutdownWaveWait {
			delete(transit, id)
		}
	}
}

// readLoads reads the live replicas into b.loads (this replica, retired,
// is not among them). It reports false when the catalog does not answer.
func (b *balancer) readLoads(ctx context.Context) bool {
	replicas, err := b.cfg.Store.LiveReplicas(ctx)
	if err != nil {
		b.cfg.Logger.Debug("read live replicas to hand mirrors to", "error", err)
		return false
	}
	me := b.cfg.Locks.Name()
	loads := make([]replicaLoad, 0, len(replicas))
	for _, r := range replicas {
		if r.Name != me {
			loads = append(loads, replicaLoad{Name: r.Name, Running: r.Running, Cap: r.MirrorWorkers})
		}
	}
	b.mu.Lock()
	b.loads = loads
	b.mu.Unlock()
	return true
}

// handWave asks up to n streaming runs to hand their mirror to a live
// replica with room and returns their mirror ids.
func (b *balancer) handWave(n int) []int64 {
	b.mu.Lock()
	var runs []*mirrorRun
	for _, r := range b.runs {
		if len(runs) == n {
			break
		}
		if r.inCDC() && !r.stopping() && !b.leaving[r.mirrorID] {
			runs = append(runs, r)
		}
	}
	b.mu.Unlock()
	var wave []int64
	for _, r := range runs {
		to := b.shutdownTarget()
		if to == "" {
			break // no live replica has room: the rest stop with River
		}
		if b.handRun(r, to) {
			wave = append(wave, r.mirrorID)
			r.logger.Info("handing the mirror to another replica before stopping", "to", to)
		}
	}
	return wave
}
