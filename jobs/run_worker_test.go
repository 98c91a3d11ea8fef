package jobs

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// A run job from a replica's adoption queue that would snooze (its mirror
// failed and waits for its retry) is replaced by a run job on the mirrors
// queue, due at the mirror's next_retry_at, so that any replica may take
// the mirror from there and the adoption checks see a waiting job. The
// job is worked with River's rivertest on a real catalog and lock holder.
func TestAdoptedRunJobBackToMirrorsQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	m := e.createMirror("m", []string{"items"}) // no replica: no job
	retryAt := time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)
	_, _, err := e.store.MirrorRecordFailure(ctx, m.ID, db.MirrorFailure{Message: "the destination was unreachable", RetryAt: retryAt, MaxFailures: 10})
	require.NoError(t, err)

	locks := db.NewLockHolder("a", 10, pgtest.ConnConfig(t, e.catalogURL), e.discard)
	locksCtx, stopLocks := context.WithCancel(ctx)
	go locks.Run(locksCtx)
	t.Cleanup(func() {
		stopLocks()
		<-locks.Done()
	})
	worker := &MirrorRunWorker{cfg: Config{Store: e.store, Locks: locks, Logger: e.discard}.withDefaults()}
	driver := riverpgxv5.New(e.pool)
	tw := rivertest.NewWorker(t, driver, &river.Config{Logger: e.discard}, worker)

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := tw.Work(ctx, t, tx, MirrorRunArgs{MirrorID: m.ID}, &river.InsertOpts{Queue: adoptQueue("a")})
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateCompleted, res.Job.State, "the adoption queue's job")
	require.NoError(t, tx.Commit(ctx))

	jobs := rivertest.RequireManyInserted(ctx, t, driver, []rivertest.ExpectedJob{
		{Args: &MirrorRunArgs{MirrorID: m.ID}, Opts: &rivertest.RequireInsertedOpts{Queue: adoptQueue("a"), State: rivertype.JobStateCompleted}},
		{Args: &MirrorRunArgs{MirrorID: m.ID}, Opts: &rivertest.RequireInsertedOpts{Queue: QueueMirrors, State: rivertype.JobStateScheduled}},
	})
	require.JSONEq(t, `{"mirror_id": `+strconv.FormatInt(m.ID, 10)+`}`, string(jobs[1].EncodedArgs))
	require.WithinDuration(t, retryAt, jobs[1].ScheduledAt, time.Second, "the run job on the mirrors queue is due at next_retry_at")
	require.Equal(t, 0, locks.Running(), "the mirror's lock after the job")
	got := e.mirror(m.ID)
	require.Equal(t, db.StatusError, got.Status)
	require.Equal(t, 1, got.ErrorCount, "the job did not record another failure")
}
