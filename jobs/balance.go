package jobs

import (
	"cmp"
	"context"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
)

// Every replica, not only River's leader, looks for mirrors without a
// worker and spreads the mirrors over the live replicas:
//   - every orphanCheckEvery (every handoffCheckEvery while it hands
//     mirrors away, at once when a run handed away has ended, and at once
//     when another replica's lock connection ended: watchDepartures) it
//     reads the live replicas (db.LiveReplicas, with the
//     mirrors each runs now) and the mirrors that want to run
//     (db.MirrorsWantingToRun), and decides (decideBalance, share.go): its
//     share, whether it refuses new mirrors, how many mirrors without a
//     worker it may adopt, and which of its runs to hand to which replica.
//     A refused run job ends at once, without touching the catalog (it is
//     not snoozed: snoozed jobs would be fetched again every few seconds
//     for as long as the replica refuses). A run handed away stops at its
//     next batch boundary, releases its lock, and its job is replaced by a
//     run job on the receiving replica's adoption queue (adoptQueue): River
//     announces the insert by notification, so the receiver takes the
//     mirror at once instead of at its next check;
//   - at the same checks it adopts mirrors that want to run and have
//     neither a lock holder nor a waiting job on the mirrors queue (a
//     replica died, or a replica at its share or its SERVICE_MIRROR_WORKERS
//     left the mirror to others), seen so for orphanGrace (a run handing
//     its mirror back is briefly in neither state; right after a replica
//     went from the live ones, at once: a handover caught in between only
//     makes a second job, which finds the lock taken and ends), as many as
//     the decision allows: it enqueues a run job on its own adoption queue,
//     which only it works, so the mirror goes to the replica that found it.
//     A takeover does not wait for River to elect a new leader when the
//     dead replica was the leader. Replicas take the mirrors they find in
//     different orders, so that two survivors do not both go for the same
//     ones;
//   - it buries replicas whose lock connection is gone for good (fleet.go):
//     their row leaves the replicas table and their River jobs still marked
//     running are rescued at once.
const (
	orphanCheckEvery  = 2 * time.Second
	handoffCheckEvery = 300 * time.Millisecond
	// orphanGrace is how long a mirror is seen without a worker before it
	// is adopted (unless a replica just went).
	orphanGrace = 1500 * time.Millisecond
	// handoffFresh is how long at most a mirror handed to a replica counts
	// as on its way there: until the receiver holds its lock, which it
	// usually does within a fraction of a second.
	handoffFresh = 3 * time.Second
)

// balancer spreads mirrors over replicas and takes over those of dead
// replicas (see above).
type balancer struct {
	cfg    Config
	client atomic.Pointer[river.Client[pgx.Tx]]
	queue  string // this replica's adoption queue (adoptQueue)

	mu     sync.Mutex
	runs   map[int64]*mirrorRun // the runs of this replica that hold their lock
	handed map[int64]handoff    // mirrors handed to another replica lately
	// leaving: runs asked to hand their mirror away whose job has not been
	// handed over yet (they may still hold their lock, or not any more).
	leaving map[int64]bool

	kick   chan struct{} // a hand-off is done: check again at once
	refuse atomic.Bool   // leave new mirrors to replicas below their share
	// draining: the process shuts down and hands its mirrors over
	// (handover.go): it takes none and decides nothing any more.
	draining atomic.Bool
	adopt    atomic.Int64 // mirrors without a worker it may adopt (loop only writes)

	// catalogLost: the last check could not read the catalog (loop
	// only); settleUntil: after the catalog came back, no replica counts
	// as gone and no mirror is adopted until then (catalogSettle).
	catalogLost bool
	settleUntil atomic.Int64 // unix nanoseconds

	orphans map[int64]time.Time // mirrors without worker, since when (loop only)
	live    map[string]bool     // the live replicas at the last check (loop only)
	// others: the other live replicas at the last check, for
	// watchDepartures.
	others atomic.Pointer[[]string]
	// departed: a replica that was live at the check before is gone (loop
	// only); its mirrors are adopted at their first sighting.
	departed bool
	shedding bool                   // handing mirrors away, down to the share (loop only)
	gone     map[string]goneReplica // replicas seen without lock connection (loop only)

	// loads: the other live replicas at the last check, with the mirrors
	// handed to each on shutdown since (shutdownTarget).
	loads []replicaLoad
	// predecessors: River client ids of earlier processes of this
	// replica's name whose jobs are still to be rescued (loop only).
	predecessors []string
}

// handoff is a mirror handed to another replica.
type handoff struct {
	to string
	at time.Time
}

func newBalancer(cfg Config) *balancer {
	return &balancer{cfg: cfg, queue: adoptQueue(cfg.Locks.Name()), runs: map[int64]*mirrorRun{}, handed: map[int64]handoff{},
		leaving: map[int64]bool{}, kick: make(chan struct{}, 1)}
}

// started records a run that holds its lock; the returned function forgets it.
func (b *balancer) started(r *mirrorRun) func() {
	b.mu.Lock()
	b.runs[r.mirrorID] = r
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		if b.runs[r.mirrorID] == r {
			delete(b.runs, r.mirrorID)
		}
		b.mu.Unlock()
	}
}

// handedOver records that the mirror's run job was replaced by one on
// replica to's adoption queue.
func (b *balancer) handedOver(mirrorID int64, to string) {
	b.mu.Lock()
	b.handed[mirrorID] = handoff{to: to, at: time.Now()}
	delete(b.leaving, mirrorID)
	b.mu.Unlock()
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// shutdownTarget picks the live replica to hand a run to as this process
// shuts down: the one with the most room left at the last check, counting
// the runs handed to each since. "" when there is none.
func (b *balancer) shutdownTarget() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	best := -1
	for i, l := range b.loads {
		if l.Running+l.Incoming >= l.Cap {
			continue
		}
		if best < 0 || l.Cap-l.Running-l.Incoming > b.loads[best].Cap-b.loads[best].Running-b.loads[best].Incoming {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	b.loads[best].Incoming++
	return b.loads[best].Name
}

// left forgets a run asked to hand its mirror away once its job ended
// (handed over or not).
func (b *balancer) left(mirrorID int64) {
	b.mu.Lock()
	delete(b.leaving, mirrorID)
	b.mu.Unlock()
}

// catalogSettle is how long after the catalog came back (as seen from this
// replica) the replicas' runs have to take their mirror locks back before
// a mirror without a lock counts as an orphan, and before a replica without
// a lock connection counts as dead (buryDead): lock connections are made
// again within a few seconds (each replica tries about every second), and
// runs retry their locks every lockRetryEvery.
const catalogSettle = 10 * time.Second

// settling reports whether the catalog came back lately (catalogSettle),
// as this replica's checks saw it or as its lock connection did (made again
// after it died; a check may have fallen between the outage's ends): nothing
// is adopted, by this replica's checks or its supervisor, and no run is
// handed away, since the counts of locks are not settled yet.
func (b *balancer) settling() bool {
	if b == nil {
		return false
	}
	now := time.Now()
	if now.UnixNano() < b.settleUntil.Load() {
		return true
	}
	back := b.cfg.Locks.BackSince()
	return !back.IsZero() && now.Sub(back) < catalogSettle
}

// refusing reports whether this replica leaves new mirrors to others now.
func (b *balancer) refusing() bool { return b.refuse.Load() || b.draining.Load() }

// loop runs the orphan checks and the balancing until done closes.
func (b *balancer) loop(done <-chan struct{}) {
	for {
		// Some jitter, so that replicas started together do not query in step.
		wait := orphanCheckEvery + time.Duration(rand.Int64N(int64(orphanCheckEvery/4)))
		if b.busy() {
			wait = handoffCheckEvery
		}
		select {
		case <-done:
			return
		case <-time.After(wait):
		case <-b.kick:
		}
		if b.draining.Load() {
			continue // handing its mirrors over (handover.go)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Balance first: a replica that died no longer counts, so that
		// the orphans' jobs are not refused here.
		b.balance(ctx)
		b.enqueueOrphans(ctx)
		b.buryDead(ctx)
		cancel()
	}
}

// departureCheckEvery is how often watchDepartures looks whether another
// replica's lock connection ended.
const departureCheckEvery = 500 * time.Millisecond

// watchDepartures wakes the loop as soon as a replica live at the last
// check has no lock connection any more (its process died, or it stops):
// the mirrors it ran are adopted at once instead of at the next check,
// up to orphanCheckEvery later; and as soon as a replica joins, so that
// hand-offs to it begin at once. One light query every
// departureCheckEvery, whatever the number of mirrors.
func (b *balancer) watchDepartures(done <-chan struct{}) {
	tick := time.NewTicker(departureCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		others := b.others.Load()
		if others == nil || b.draining.Load() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		names, err := b.cfg.Store.ConnectedReplicas(ctx)
		cancel()
		if err != nil {
			continue
		}
		if changedReplicas(*others, names, b.cfg.Locks.Name()) {
			select {
			case b.kick <- struct{}{}:
			default:
			}
		}
	}
}

// changedReplicas reports whether a replica of others has no lock
// connection any more (connected names those that have one), or one that
// is neither me nor among others has joined: either way the shares
// change, and the balance is checked at once.
func changedReplicas(others, connected []string, me string) bool {
	for _, name := range others {
		if !slices.Contains(connected, name) {
			return true
		}
	}
	for _, name := range connected {
		if name != me && !slices.Contains(others, name) {
			return true
		}
	}
	return false
}

// busy reports whether hand-offs of this replica are under way or to come.
func (b *balancer) busy() bool {
	if b.shedding {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, h := range b.handed {
		if time.Since(h.at) < handoffFresh {
			return true
		}
	}
	return len(b.leaving) > 0
}

// enqueueOrphans enqueues a run job for mirrors without a worker, as many
// as the last decision allows.
func (b *balancer) enqueueOrphans(ctx context.Context) {
	client := b.client.Load()
	if client == nil {
		return
	}
	ids, err := b.cfg.Store.MirrorsWithoutWorker(ctx, MirrorRunArgs{}.Kind(), QueueMirrors)
	if err != nil {
		b.cfg.Logger.Debug("look for mirrors without worker", "error", err)
		return
	}
	seen := b.orphans
	now := time.Now()
	b.orphans = make(map[int64]time.Time, len(ids))
	var due []int64
	for _, id := range ids {
		since, ok := seen[id]
		if !ok {
			since = now
		}
		b.orphans[id] = since
		if b.onItsWay(id) {
			// Handed to a live replica lately: its job waits on that
			// replica's adoption queue, which only it works; taking the
			// mirror back here would move it twice.
			continue
		}
		if b.departed || now.Sub(since) >= orphanGrace {
			due = append(due, id)
		}
	}
	room := min(int(b.adopt.Load()), b.cfg.MirrorWorkers-b.cfg.Locks.Running())
	if b.refusing() || room <= 0 || len(due) == 0 || b.settling() {
		return // left to the replicas below their share, or with room
	}
	// Each replica takes them in an order of its own, so that two that
	// adopt at once mostly take different mirrors.
	me := b.cfg.Locks.Name()
	slices.SortFunc(due, func(x, y int64) int { return cmp.Compare(adoptRank(me, x), adoptRank(me, y)) })
	opts := MirrorRunArgs{}.InsertOpts()
	opts.Queue = b.queue
	due = due[:min(room, len(due))]
	// One insert for all of them (a takeover adopts a dead replica's
	// mirrors in one go), announced by one notification.
	params := make([]river.InsertManyParams, len(due))
	for i, id := range due {
		params[i] = river.InsertManyParams{Args: MirrorRunArgs{MirrorID: id}, InsertOpts: &opts}
	}
	if _, err := client.InsertMany(ctx, params); err != nil {
		b.cfg.Logger.Debug("enqueue runs of mirrors without worker", "mirrors", len(due), "error", err)
		return
	}
	for _, id := range due {
		b.cfg.Logger.Info("mirror has no worker: adopting it", "mirror_id", id)
	}
}

// onItsWay reports whether this replica handed the mirror to a replica
// that is still live less than handoffFresh ago (loop only: it reads live).
func (b *balancer) onItsWay(mirrorID int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	h, ok := b.handed[mirrorID]
	return ok && time.Since(h.at) < handoffFresh && b.live[h.to]
}

// adoptRank orders the mirrors a replica adopts (a hash of both).
func adoptRank(replica string, mirrorID int64) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(replica))
	_, _ = h.Write([]byte(strconv.FormatInt(mirrorID, 10)))
	return h.Sum64()
}

// balance reads the live replicas and the mirrors that want to run,
// decides (decideBalance) and hands runs away as decided.
func (b *balancer) balance(ctx context.Context) {
	b.departed = false
	me := b.cfg.Locks.Name()
	replicas, err := b.cfg.Store.LiveReplicas(ctx)
	if err != nil {
		b.cfg.Logger.Debug("read live replicas", "error", err)
		b.catalogLost = true
		return
	}
	if b.catalogLost {
		// Back after the catalog was unreachable from here: every
		// replica's lock connection died with it and is being made again,
		// and their runs, which streamed on meanwhile, are taking their
		// locks back (catalog_outage.go). Until that settles, a replica
		// missing from the live ones is not gone, and a mirror without a
		// lock is not an orphan: adopting it would stop a run that is
		// about to retake it, and move the mirror for nothing.
		b.catalogLost = false
		b.settleUntil.Store(time.Now().Add(catalogSettle).UnixNano())
		b.gone = nil // replicas seen gone before count from the settling on (buryDead)
	}
	wanted, err := b.cfg.Store.MirrorsWantingToRun(ctx)
	if err != nil {
		b.cfg.Logger.Debug("count mirrors that want to run", "error", err)
		return
	}
	b.noteReplicas(replicas)

	incoming, stopping, inTransit := b.handoffsUnderWay(ctx)
	loads := make([]replicaLoad, 0, len(replicas))
	for _, r := range replicas {
		l := replicaLoad{Name: r.Name, Running: r.Running, Cap: r.MirrorWorkers, Incoming: incoming[r.Name]}
		if r.Name == me {
			l.Running = b.cfg.Locks.Running() // this replica's own count is exact
		}
		loads = append(loads, l)
	}
	otherLoads := make([]replicaLoad, 0, len(loads))
	for _, l := range loads {
		if l.Name != me {
			otherLoads = append(otherLoads, l)
		}
	}
	b.mu.Lock()
	b.loads = otherLoads
	b.mu.Unlock()
	d := decideBalance(balanceInput{Me: me, Replicas: loads, Wanted: wanted, Stopping: stopping, Shedding: b.shedding})
	if d.Shares == nil {
		// Not among the live replicas: adopt what it has room for.
		b.refuse.Store(false)
		b.adopt.Store(int64(b.cfg.MirrorWorkers))
		b.shedding = false
		return
	}
	b.refuse.Store(d.Refuse)
	b.adopt.Store(int64(d.Adopt))
	if len(d.Handoffs) > 0 && b.settling() {
		// The counts of locks are not settled yet: a run about to take its
		// lock back is missing from another replica's count.
		b.cfg.Logger.Debug("not handing runs away while the catalog settles", "handoffs", len(d.Handoffs))
		return
	}
	switch {
	case len(d.Handoffs) > 0:
		b.shedding = true
	case inTransit == 0:
		// Only with no hand-off under way is the count of its own runs
		// settled: it goes on down to its share.
		b.shedding = b.shedding && b.cfg.Locks.Running() > d.Share
	}
	if len(d.Handoffs) > 0 {
		b.handAway(d, wanted)
	}
}

// noteReplicas records the live replicas of this check: a replica live at
// the check before and gone now makes this check adopt at once (departed),
// unless the catalog came back lately (settling).
func (b *balancer) noteReplicas(replicas []db.Replica) {
	me := b.cfg.Locks.Name()
	settling := b.settling()
	live := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		live[r.Name] = true
	}
	for name := range b.live {
		// Not this replica: its lock connection may be down for a moment,
		// and its own runs take their locks back (catalog_outage.go).
		if !live[name] && name != me && !settling {
			b.departed = true
			b.cfg.Logger.Info("a replica is gone: adopting mirrors without a worker at once", "replica", name)
		}
	}
	b.live = live
	others := make([]string, 0, len(live))
	for name := range live {
		if name != me {
			others = append(others, name)
		}
	}
	b.others.Store(&others)
}

// handoffsUnderWay forgets the mirrors handed away that their receiver
// holds by now (or handed longer than handoffFresh ago) and returns the
// others by receiver, the runs asked to leave that have not been handed
// yet, and both together.
func (b *balancer) handoffsUnderWay(ctx context.Context) (incoming map[string]int, stopping, inTransit int) {
	b.mu.Lock()
	pending := len(b.handed)
	b.mu.Unlock()
	var workers map[int64]db.MirrorWorker
	if pending > 0 {
		// Which handed mirrors their receiver holds by now.
		var err error
		if workers, err = b.cfg.Store.MirrorWorkers(ctx); err != nil {
			b.cfg.Logger.Debug("read mirror workers", "error", err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	incoming = map[string]int{}
	for id, h := range b.handed {
		if _, taken := workers[id]; taken || time.Since(h.at) >= handoffFresh {
			delete(b.handed, id)
			continue
		}
		incoming[h.to]++
	}
	stopping = len(b.leaving)
	return incoming, stopping, stopping + len(b.handed)
}

// handAway asks as many streaming runs as the decision says to hand their
// mirror to the replicas it names.
func (b *balancer) handAway(d balanceDecision, wanted int) {
	b.mu.Lock()
	var runs []*mirrorRun
	runsHere := make([]int64, 0, len(b.runs))
	for _, r := range b.runs {
		runsHere = append(runsHere, r.mirrorID)
		if len(runs) == len(d.Handoffs) {
			continue
		}
		if r.inCDC() && !r.stopping() && !b.leaving[r.mirrorID] {
			runs = append(runs, r)
		}
	}
	b.mu.Unlock()
	slices.Sort(runsHere)
	for i, r := range runs {
		to := d.Handoffs[i]
		if b.handRun(r, to) {
			r.logger.Info("handing the mirror to a replica below its share", "to", to, "share", d.Share,
				"running_here", b.cfg.Locks.Running(), "mirrors_to_run", wanted,
				"locks_held", b.cfg.Locks.Held(), "runs_here", runsHere)
		}
	}
}

// handRun hands r's mirror to replica to (handoff_lock.go): it counts r as
// leaving at once, and in the background enqueues the receiver's run job,
// waits until the receiver fetched it, and asks r to stop at its next batch
// boundary. It reports false when r is leaving already.
func (b *balancer) handRun(r *mirrorRun, to string) bool {
	b.mu.Lock()
	if b.leaving[r.mirrorID] {
		b.mu.Unlock()
		return false
	}
	b.leaving[r.mirrorID] = true
	b.mu.Unlock()
	go b.handOff(r, to)
	return true
}

// handOff is handRun's background part. When the receiver's job cannot be
// enqueued, r's own job is replaced by one on to's adoption queue once r
// stopped; when the receiver does not fetch it within handoffFetchWait, r is
// asked to stop all the same (the job waits for the lock when it comes).
func (b *balancer) handOff(r *mirrorRun, to string) {
	ctx, cancel := context.WithTimeout(context.Background(), handoffFetchWait+5*time.Second)
	defer cancel()
	asked := time.Now()
	var jobID int64
	client := b.client.Load()
	if client != nil {
		opts := MirrorRunArgs{}.InsertOpts()
		opts.Queue = adoptQueue(to)
		res, err := client.Insert(ctx, MirrorRunArgs{MirrorID: r.mirrorID, HandedBy: b.cfg.Locks.Name()}, &opts)
		if err != nil {
			b.cfg.Logger.Debug("enqueue the receiver's run job of a hand-off", "mirror_id", r.mirrorID, "to", to, "error", err)
		} else {
			jobID = res.Job.ID
			b.waitFetched(ctx, jobID)
		}
	}
	if !r.handAway(to, jobID != 0) {
		// It stops for another reason, or stopped: the receiver's job
		// would wait for the lock in vain.
		b.left(r.mirrorID)
		if jobID != 0 {
			if _, err := client.JobCancel(ctx, jobID); err != nil {
				b.cfg.Logger.Debug("cancel the receiver's run job of a hand-off", "mirror_id", r.mirrorID, "error", err)
			}
		}
		return
	}
	r.logger.Debug("the receiver is ready: the run stops to hand the mirror over", "to", to, "waited", time.Since(asked).Round(time.Millisecond).String())
}

// waitFetched waits until River's job id is fetched by its worker, at most
// handoffFetchWait.
func (b *balancer) waitFetched(ctx context.Context, id int64) {
	deadline := time.Now().Add(handoffFetchWait)
	for time.Now().Before(deadline) {
		if fetched, err := b.cfg.Store.JobFetched(ctx, id); err != nil || fetched {
			return
		}
		t := time.NewTimer(handoffLockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
