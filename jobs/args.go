package jobs

import (
	"fmt"
	"hash/fnv"

	"github.com/riverqueue/river"
)

// QueueMirrors is the River queue of the long-running mirror jobs (setup,
// snapshot, CDC). It has its own worker slots so that running mirrors never
// starve the short jobs of the default queue.
const QueueMirrors = "mirrors"

// adoptQueue is the River queue of the run jobs that the replica named
// replica enqueues for the mirrors it adopts (balance.go). Only that replica
// works it, so that the replica that found a mirror without a worker, and
// has room for it, runs it: on the mirrors queue any replica could fetch the
// job, also one at its fair share, which would only leave the mirror again.
// A run job taken from it that would be snoozed or retried goes back to the
// mirrors queue (MirrorRunWorker.Work).
func adoptQueue(replica string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(replica))
	return fmt.Sprintf("%s-adopt-%016x", QueueMirrors, h.Sum64())
}

// MirrorRunArgs enqueues the job that drives one mirror: setup, snapshot and
// CDC, following the mirror's desired state in the catalog. Any number of
// these may exist for one mirror; a session advisory lock per mirror lets
// exactly one of them work at a time and the others finish at once.
type MirrorRunArgs struct {
	MirrorID int64 `json:"mirror_id"`
	// HandedBy names the replica handing the mirror over (balance.go):
	// the job is enqueued as the giving run is asked to stop, and waits
	// for the mirror's lock (handoffLockWait) instead of ending when it is
	// still held, so the receiver takes the mirror the moment the giver
	// lets it go.
	HandedBy string `json:"handed_by,omitempty"`
}

// Kind is the River job kind.
func (MirrorRunArgs) Kind() string { return "mirror_run" }

// InsertOpts puts the job on the mirrors queue.
func (MirrorRunArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMirrors, MaxAttempts: 1000}
}

// MirrorCleanupArgs enqueues the job that finishes a mirror's deletion: it
// waits for the mirror's worker to stop, drops the replication slot and
// publication the mirror created on the source, then deletes the catalog row.
// It retries with backoff until the source lets it drop them.
type MirrorCleanupArgs struct {
	MirrorID int64 `json:"mirror_id"`
}

// Kind is the River job kind.
func (MirrorCleanupArgs) Kind() string { return "mirror_cleanup" }

// InsertOpts gives cleanup a generous retry budget: an orphan slot keeps WAL
// on the source forever, so it must be dropped eventually.
func (MirrorCleanupArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10000}
}
