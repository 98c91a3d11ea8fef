package jobs

import (
	"context"
	"time"
)

// A replica that shuts down (SIGTERM, a rolling deploy) hands its mirrors to
// the live replicas in waves rather than all at once:
//   - the process first leaves the replicas table (db.LockHolder.Retire),
//     so the others stop counting it and leave it nothing more;
//   - then Shutdown.HandOver asks shutdownWave runs at a time to stop at
//     their next batch boundary, each handed to the live replica with the
//     most room (balancer.shutdownTarget); a handed run's job goes to the
//     receiver's adoption queue, announced by notification, and the next
//     wave starts when the receiver holds every mirror of this one (or
//     after shutdownWaveWait);
//   - meanwhile the replica takes no mirror: run jobs it fetches go on to a
//     live replica, adoption stops;
//   - what is left when the budget ends (runs copying tables, which stop
//     only when cancelled) is cancelled with River's jobs and handed over
//     in one go, as before.
//
// So a mirror goes without a worker only for the moment its receiver takes
// to start it, and only a wave's worth at a time, instead of every mirror
// of the replica at once waiting for the others to start them together.
const (
	shutdownWave     = 4
	shutdownWaveWait = handoffFresh
	// shutdownPoll is how often HandOver looks whether the receivers hold
	// the mirrors of the current wave.
	shutdownPoll = 100 * time.Millisecond
)

// Shutdown hands the mirrors of a replica that shuts down to the live
// replicas, a few at a time (see above). Pass a zero Shutdown in
// Config.Shutdown; NewClient binds it to the client's balancer.
type Shutdown struct {
	b *balancer
}

// HandOver hands this replica's running mirrors to the live replicas in
// waves of shutdownWave, each when the previous one is taken, and returns
// when none is left to hand, no live replica has room or ctx ends. Call it
// after db.LockHolder.Retire and before River's client stops: the runs left
// then are cancelled and handed over together.
func (s *Shutdown) HandOver(ctx context.Context) {
	if s == nil || s.b == nil {
		return
	}
	s.b.drain(ctx)
}

// drain is Shutdown.HandOver.
func (b *balancer) drain(ctx context.Context) {
	b.draining.Store(true)
	started := time.Now()
	handed := 0
	for ctx.Err() == nil {
		if !b.readLoads(ctx) {
			break
		}
		wave := b.handWave()
		if len(wave) == 0 {
			break
		}
		handed += len(wave)
		b.awaitTaken(ctx, wave)
	}
	if handed > 0 {
		b.cfg.Logger.Info("handed mirrors to the other replicas before stopping", "mirrors", handed,
			"left_to_cancel", b.cfg.Locks.Running(), "duration", time.Since(started).Round(time.Millisecond))
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

// handWave asks up to shutdownWave streaming runs to hand their mirror to a
// live replica with room and returns their mirror ids.
func (b *balancer) handWave() []int64 {
	b.mu.Lock()
	var runs []*mirrorRun
	for _, r := range b.runs {
		if len(runs) == shutdownWave {
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
		if r.handAway(to) {
			b.mu.Lock()
			b.leaving[r.mirrorID] = true
			b.mu.Unlock()
			wave = append(wave, r.mirrorID)
			r.logger.Info("handing the mirror to another replica before stopping", "to", to)
		}
	}
	return wave
}

// awaitTaken waits until every mirror of the wave is held by its receiver
// or its run ended without handing it over, for shutdownWaveWait at most.
func (b *balancer) awaitTaken(ctx context.Context, wave []int64) {
	ctx, cancel := context.WithTimeout(ctx, shutdownWaveWait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(shutdownPoll):
		}
		// This replica is out of the replicas table: the locks listed are
		// the live replicas'.
		workers, err := b.cfg.Store.MirrorWorkers(ctx)
		if err != nil {
			continue
		}
		b.mu.Lock()
		waiting := 0
		for _, id := range wave {
			_, taken := workers[id]
			_, handed := b.handed[id]
			if !taken && (handed || b.leaving[id]) {
				waiting++
			}
		}
		b.mu.Unlock()
		if waiting == 0 {
			return
		}
	}
}
