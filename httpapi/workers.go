package httpapi

import (
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// WorkerInfo says which replica runs a mirror (see docs/status.md).
type WorkerInfo struct {
	Worker       *string    `json:"worker" doc:"The pgmirror replica running the mirror now (host:pid), which holds its lock; null when no replica runs it: between runs, waiting for a free worker, or because its replica died and no other took it over yet. A mirror whose status is running, initializing or snapshotting with worker null for more than a few seconds is not replicating."`
	WorkerSeenAt *time.Time `json:"worker_seen_at" doc:"When the worker last reported (every 5 s); null without a worker."`
}

// withWorker fills in the mirror's worker and its lag (db.Mirror.LagShown):
// for a mirror that should be streaming but has none, a lag that grows with
// the time since its last measure instead of the slot's view, unknown while
// this replica is unsure of the catalog; for one a replica runs, unknown
// while that replica has not reached the catalog lately.
func withWorker(m db.Mirror, workers map[int64]db.MirrorWorker, unsure bool, health *SlotHealth) WorkerInfo {
	w, ok := workers[m.ID]
	if !ok {
		health.LagSeconds = roundedLag(m.LagShown(nil, unsure, time.Now()))
		return WorkerInfo{}
	}
	health.LagSeconds = roundedLag(m.LagShown(&w, unsure, time.Now()))
	name, seen := w.Name, w.SeenAt
	return WorkerInfo{Worker: &name, WorkerSeenAt: &seen}
}
