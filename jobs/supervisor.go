package jobs

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/pgmirror/pgmirror/db"
)

// SupervisorArgs is the periodic job (leader only, every few seconds) that
// makes sure every live mirror that wants to run has a worker, and every
// deleted mirror a cleanup job.
type SupervisorArgs struct{}

// Kind is the River job kind.
func (SupervisorArgs) Kind() string { return "mirror_supervisor" }

// InsertOpts keeps at most one supervisor job waiting at a time (the
// periodic enqueuer uses periodicInsertOpts, which also keys by period).
func (SupervisorArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// periodicInsertOpts are the insert options of a periodic job enqueued every
// period: at most one waits or runs per period. The period is part of the
// unique key (UniqueOpts.ByPeriod) on purpose: a job that a killed process
// left "running" stays so until River rescues it (RescueStuckJobsAfter, some
// 40 minutes), and with a key of the kind alone it would block every later
// insert until then, so that no supervisor would take over the dead
// process's mirrors.
func periodicInsertOpts(period time.Duration) *river.InsertOpts {
	return &river.InsertOpts{
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{ByPeriod: period, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// SupervisorWorker enqueues run jobs for orphaned mirrors.
type SupervisorWorker struct {
	river.WorkerDefaults[SupervisorArgs]
	cfg Config
}

// Timeout bounds one supervisor pass.
func (w *SupervisorWorker) Timeout(*river.Job[SupervisorArgs]) time.Duration { return 30 * time.Second }

// Work looks for mirrors that nobody runs and enqueues a run job for each.
func (w *SupervisorWorker) Work(ctx context.Context, job *river.Job[SupervisorArgs]) error {
	client := river.ClientFromContext[pgxTx](ctx)
	var ids []int64
	var err error
	if w.cfg.balance.settling() {
		// The catalog just came back: the runs are taking their locks
		// back, and a mirror without one is not an orphan yet (balance.go).
		w.cfg.Logger.Debug("the catalog came back lately: leaving mirrors without a worker to the next pass")
	} else if ids, err = w.orphans(ctx); err != nil {
		return err
	}
	for _, id := range ids {
		w.cfg.Logger.Info("mirror has no worker: enqueueing a run job", "mirror_id", id)
		if _, err := client.Insert(ctx, MirrorRunArgs{MirrorID: id}, nil); err != nil {
			return fmt.Errorf("enqueue run of mirror %d: %w", id, err)
		}
	}
	deleted, err := w.cfg.Store.DeletedMirrorsWithoutCleanup(ctx, MirrorCleanupArgs{}.Kind())
	if err != nil {
		return err
	}
	for _, id := range deleted {
		if _, err := client.Insert(ctx, MirrorCleanupArgs{MirrorID: id}, nil); err != nil {
			return fmt.Errorf("enqueue cleanup of mirror %d: %w", id, err)
		}
	}
	return nil
}

// orphans returns the mirrors without a worker now and still orphanGrace
// later. A mirror handed from one replica to another has neither a lock
// holder nor a run job on the mirrors queue for a moment (its job waits on
// the receiver's adoption queue until the receiver takes it): a run job
// enqueued then would take it back from the receiver.
func (w *SupervisorWorker) orphans(ctx context.Context) ([]int64, error) {
	first, err := w.cfg.Store.MirrorsWithoutWorker(ctx, MirrorRunArgs{}.Kind(), QueueMirrors)
	if err != nil || len(first) == 0 {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(orphanGrace):
	}
	again, err := w.cfg.Store.MirrorsWithoutWorker(ctx, MirrorRunArgs{}.Kind(), QueueMirrors)
	if err != nil {
		return nil, err
	}
	var out []int64
	for _, id := range again {
		if slices.Contains(first, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// LogPruneArgs is the hourly job that deletes mirror log entries and
// history samples older than their retentions.
type LogPruneArgs struct{}

// Kind is the River job kind.
func (LogPruneArgs) Kind() string { return "mirror_log_prune" }

// LogPruneWorker deletes old mirror log entries and history samples.
type LogPruneWorker struct {
	river.WorkerDefaults[LogPruneArgs]
	cfg Config
}

// historyPruneBatches bounds one prune of the history: at most this many
// batches of db.HistoryPruneBatch rows; a larger backlog goes at the next
// prune.
const historyPruneBatches = 100

// Work deletes log entries and history samples older than their retentions.
func (w *LogPruneWorker) Work(ctx context.Context, job *river.Job[LogPruneArgs]) error {
	n, err := w.cfg.Store.LogPrune(ctx, time.Now().Add(-w.cfg.LogRetention))
	if err != nil {
		return err
	}
	if n > 0 {
		w.cfg.Logger.Info("pruned old mirror log entries", "deleted", n, "retention", w.cfg.LogRetention.String())
	}
	n, err = w.cfg.Store.MirrorHistoryPrune(ctx, time.Now().Add(-w.cfg.HistoryRetention), db.HistoryPruneBatch, historyPruneBatches)
	if err != nil {
		return err
	}
	if n > 0 {
		w.cfg.Logger.Info("pruned old mirror history samples", "deleted", n, "retention", w.cfg.HistoryRetention.String())
	}
	return nil
}
