package jobs

import (
	"context"
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// A replica whose process died leaves its row in the replicas table and,
// in River, the jobs it was working in state running: River has no
// heartbeat, and its rescuer only moves them after RescueStuckJobsAfter
// (some 40 minutes here, as a mirror run job runs for up to RunBudget).
// Every replica's balancer therefore buries dead replicas itself, at each
// check:
//   - a replica whose lock connection has no session in the catalog any
//     more, with its row unchanged (same lock_pid and report time) for
//     deadAfter, is dead: a live replica whose connection dropped connects
//     again and reports within a second or two;
//   - its row is deleted and the River jobs whose last attempt is by its
//     River client (replicas.job_client_id, river_job.attempted_by) and
//     which are still running are rescued in the same transaction
//     (db.Store.BuryReplica): mirror run jobs are completed (their mirrors,
//     without a lock holder now, are adopted by the live replicas, see
//     balance.go), other jobs are made available again at once, or
//     discarded when they have no attempts left, each with an error entry
//     saying why, as River's rescuer would; run jobs waiting on its
//     adoption queue, which nobody else works, are completed;
//   - a replica that starts under the name of a dead one (a container
//     restarted with the same host name and pid) finds the dead process's
//     River client id in the row it takes over and rescues its jobs too.
const deadAfter = 5 * time.Second

// goneReplica is a replica seen without lock connection, and since when.
type goneReplica struct {
	row   db.GoneReplica
	since time.Time
}

// buryDead buries the replicas dead for deadAfter and rescues the jobs of
// earlier processes of this replica's name.
func (b *balancer) buryDead(ctx context.Context) {
	kind := MirrorRunArgs{}.Kind()
	b.predecessors = append(b.predecessors, b.cfg.Locks.TakePredecessors()...)
	for len(b.predecessors) > 0 {
		id := b.predecessors[0]
		res, err := b.cfg.Store.RescueJobsOf(ctx, id, kind)
		if err != nil {
			b.cfg.Logger.Debug("rescue the jobs of an earlier process of this replica", "river_client", id, "error", err)
			break // again at the next check
		}
		b.predecessors = b.predecessors[1:]
		if res.Total() > 0 {
			b.cfg.Logger.Info("rescued the River jobs an earlier process of this replica left running",
				"river_client", id, "run_jobs_finished", res.Finished, "jobs_retried", res.Retried, "jobs_discarded", res.Discarded)
		}
	}

	gone, err := b.cfg.Store.GoneReplicas(ctx)
	if err != nil {
		b.cfg.Logger.Debug("read gone replicas", "error", err)
		return
	}
	me := b.cfg.Locks.Name()
	now := time.Now()
	next := make(map[string]goneReplica, len(gone))
	for _, g := range gone {
		if g.Name == me {
			continue // its own lock connection, being made again
		}
		prev, ok := b.gone[g.Name]
		if !ok || !sameGone(prev.row, g) {
			// Seen gone from now on, or from when the catalog has settled
			// after an outage (catalogSettle), whichever is later: every
			// lock connection died with the catalog, and a replica whose
			// connection is slower to come back than this one's is not dead.
			since := now
			if settled := time.Unix(0, b.settleUntil.Load()); settled.After(since) {
				since = settled
			}
			next[g.Name] = goneReplica{row: g, since: since}
			continue
		}
		next[g.Name] = prev
		if now.Sub(prev.since) < deadAfter {
			continue
		}
		res, buried, err := b.cfg.Store.BuryReplica(ctx, g, kind, adoptQueue(g.Name))
		if err != nil {
			b.cfg.Logger.Debug("remove a dead replica", "replica", g.Name, "error", err)
			continue
		}
		if buried {
			delete(next, g.Name)
			b.cfg.Logger.Info("a replica died: removed it from the replicas table and rescued the River jobs it left running",
				"replica", g.Name, "last_seen", g.SeenAt, "run_jobs_finished", res.Finished, "jobs_retried", res.Retried,
				"jobs_discarded", res.Discarded)
		}
	}
	b.gone = next
}

// sameGone reports whether two sightings are of the same row, unchanged.
func sameGone(a, b db.GoneReplica) bool {
	samePID := (a.LockPID == nil) == (b.LockPID == nil) && (a.LockPID == nil || *a.LockPID == *b.LockPID)
	return samePID && a.SeenAt.Equal(b.SeenAt)
}
