package jobs

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
)

// Every replica, not only River's leader, looks for mirrors without a
// worker and spreads the mirrors over the live replicas:
//   - every orphanCheckEvery it adopts each mirror that wants to run and
//     has neither a lock holder nor a waiting job on the mirrors queue (a
//     replica died, or a replica at its share or its SERVICE_MIRROR_WORKERS
//     left the mirror to others) at two checks in a row (a run handing its
//     mirror back is briefly in neither state; right after a replica went
//     from the live ones, at the first: a handover caught in between
//     only makes a second job, which finds the lock taken and ends), as
//     long as it has room: it
//     enqueues a run job on its own adoption queue (adoptQueue), which only
//     it works, so the mirror goes to the replica that found it. A
//     takeover does not wait for River to elect a new leader when the dead
//     replica was the leader;
//   - as often, it reads the live replicas (db.LiveReplicas, with the
//     mirrors each runs now) and the fair share: the running mirrors
//     divided by the live replicas, rounded up. While this replica runs
//     its share or more and another live replica runs less than its share
//     (and has room under its SERVICE_MIRROR_WORKERS), it refuses: a run
//     job it fetches ends at once, without touching the catalog, and it
//     enqueues no orphans, so that the mirror is left to the replicas
//     below their share, whose adoption checks enqueue it again. A refused
//     job is not snoozed: snoozed jobs would be fetched again every few
//     seconds for as long as the replica refuses, each time a few catalog
//     transactions per mirror. More than one above its share (so that
//     mirrors between runs do not make replicas shed back and forth) a
//     replica hands the extra mirrors back at their next batch boundary, as
//     a run budget does.
const orphanCheckEvery = 2 * time.Second

// balancer spreads mirrors over replicas and takes over those of dead
// replicas (see above).
type balancer struct {
	cfg    Config
	client atomic.Pointer[river.Client[pgx.Tx]]
	queue  string // this replica's adoption queue (adoptQueue)

	mu   sync.Mutex
	runs map[int64]*mirrorRun // the runs of this replica that hold their lock

	refuse atomic.Bool // leave new mirrors to replicas below their share

	orphans map[int64]bool  // mirrors without worker at the last check (loop only)
	live    map[string]bool // the live replicas at the last check (loop only)
	// departed: a replica that was live at the check before is gone (loop
	// only); its mirrors are adopted at their first sighting.
	departed bool
}

func newBalancer(cfg Config) *balancer {
	return &balancer{cfg: cfg, queue: adoptQueue(cfg.Locks.Name()), runs: map[int64]*mirrorRun{}}
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

// refusing reports whether this replica leaves new mirrors to others now.
func (b *balancer) refusing() bool { return b.refuse.Load() }

// loop runs the orphan checks and the balancing until done closes.
func (b *balancer) loop(done <-chan struct{}) {
	for {
		// Some jitter, so that replicas started together do not query in step.
		wait := orphanCheckEvery + time.Duration(rand.Int64N(int64(orphanCheckEvery/4)))
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// Balance first: a replica that died no longer counts, so that
		// the orphans' jobs are not refused here.
		b.balance(ctx)
		b.enqueueOrphans(ctx)
		cancel()
	}
}

// enqueueOrphans enqueues a run job for every mirror without a worker.
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
	b.orphans = make(map[int64]bool, len(ids))
	refusing := b.refusing()
	room := b.cfg.MirrorWorkers - b.cfg.Locks.Running()
	opts := MirrorRunArgs{}.InsertOpts()
	opts.Queue = b.queue
	for _, id := range ids {
		b.orphans[id] = true
		if !seen[id] && !b.departed {
			continue // maybe between two runs: adopt at the next check
		}
		if refusing || room <= 0 {
			continue // left to the replicas below their share, or with room
		}
		room--
		b.cfg.Logger.Info("mirror has no worker: adopting it", "mirror_id", id)
		if _, err := client.Insert(ctx, MirrorRunArgs{MirrorID: id}, &opts); err != nil {
			b.cfg.Logger.Debug("enqueue run of mirror without worker", "mirror_id", id, "error", err)
			return
		}
	}
}

// balance computes the fair share and hands extra mirrors back.
func (b *balancer) balance(ctx context.Context) {
	b.departed = false
	replicas, err := b.cfg.Store.LiveReplicas(ctx)
	if err != nil {
		b.cfg.Logger.Debug("read live replicas", "error", err)
		return
	}
	live := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		live[r.Name] = true
	}
	for name := range b.live {
		// Not this replica: its lock connection may be down for a moment,
		// and its own runs take their locks back (catalog_outage.go).
		if !live[name] && name != b.cfg.Locks.Name() {
			b.departed = true
			b.cfg.Logger.Info("a replica is gone: adopting mirrors without a worker at once", "replica", name)
		}
	}
	b.live = live
	me := b.cfg.Locks.Name()
	mine := b.cfg.Locks.Running()
	total, others, found := 0, []db.Replica{}, false
	for _, r := range replicas {
		if r.Name == me {
			found = true
			total += r.Running
			mine = r.Running
			continue
		}
		total += r.Running
		others = append(others, r)
	}
	if !found || len(others) == 0 {
		b.refuse.Store(false)
		return
	}
	share := (total + len(replicas) - 1) / len(replicas)
	share = max(share, 1)
	// Another replica below its share with room for more?
	below := slices.ContainsFunc(others, func(r db.Replica) bool { return r.Running < share && r.Running < r.MirrorWorkers })
	b.refuse.Store(below && mine >= share)
	if !below || mine <= share+1 {
		return
	}
	extra := mine - share
	b.mu.Lock()
	var shed []*mirrorRun
	for _, r := range b.runs {
		if r.stopping() {
			extra-- // handed back already, still finishing its batch
		}
	}
	for _, r := range b.runs {
		if len(shed) >= extra {
			break
		}
		if r.inCDC() && !r.stopping() {
			shed = append(shed, r)
		}
	}
	b.mu.Unlock()
	for _, r := range shed {
		r.logger.Info("handing the mirror to a replica below its share", "share", share, "running_here", mine)
		r.stopCDC(reasonBudget)
	}
}
