package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// runningJob inserts a River job in state running whose last attempt is by
// River client client, and returns its id.
func runningJob(t *testing.T, store *db.Store, kind, client string, attempt, maxAttempts int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, store.Pool().QueryRow(context.Background(), `INSERT INTO river_job
		(args, kind, max_attempts, queue, state, attempt, attempted_at, attempted_by, scheduled_at)
		VALUES ('{"mirror_id": 1}', $1, $2, 'default', 'running', $3, now(), ARRAY['an-older-client', $4], now())
		RETURNING id`, kind, maxAttempts, attempt, client).Scan(&id))
	return id
}

func jobState(t *testing.T, store *db.Store, id int64) (state string, errors int, finalized bool) {
	t.Helper()
	require.NoError(t, store.Pool().QueryRow(context.Background(),
		`SELECT state::text, coalesce(cardinality(errors), 0), finalized_at IS NOT NULL FROM river_job WHERE id = $1`, id).Scan(&state, &errors, &finalized))
	return state, errors, finalized
}

// TestBuryReplica: a replica whose lock connection is gone is listed as
// gone (a live one is not); burying it removes its row and rescues the
// River jobs its client left running (mirror runs completed, other jobs
// available again or discarded without attempts left, each with an error
// entry; run jobs waiting on its own queue completed), and leaves other
// clients' jobs alone; a row that changed since
// it was read is not buried. A replica that starts under the name of a
// dead one reports the dead one's River client, whose jobs are rescued.
func TestBuryReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	live := db.NewLockHolder("live-one", 10, store.Pool().Config().ConnConfig, discard())
	live.SetJobClientID("client-live")
	liveCtx, stopLive := context.WithCancel(ctx)
	go live.Run(liveCtx)
	t.Cleanup(func() { stopLive(); <-live.Done() })
	require.Eventually(t, func() bool {
		replicas, err := store.LiveReplicas(ctx)
		return err == nil && len(replicas) == 1
	}, 10*time.Second, 50*time.Millisecond)
	// A dead replica's row: its lock connection's pid has no session.
	_, err := store.Pool().Exec(ctx, `INSERT INTO replicas (name, lock_pid, mirror_workers, running, job_client_id)
		VALUES ('dead-one', 0, 10, 3, 'client-dead')`)
	require.NoError(t, err)

	run := runningJob(t, store, "mirror_run", "client-dead", 1, 1000)
	verify := runningJob(t, store, "mirror_verify", "client-dead", 1, 2)
	periodic := runningJob(t, store, "mirror_supervisor", "client-dead", 1, 1)
	other := runningJob(t, store, "mirror_run", "client-live", 1, 1000)
	var waiting int64
	require.NoError(t, store.Pool().QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		VALUES ('{"mirror_id": 2}', 'mirror_run', 1000, 'dead-one-queue', 'available', now()) RETURNING id`).Scan(&waiting))

	gone, err := store.GoneReplicas(ctx)
	require.NoError(t, err)
	require.Len(t, gone, 1)
	require.Equal(t, "dead-one", gone[0].Name)

	stale := gone[0]
	stale.SeenAt = stale.SeenAt.Add(-time.Second)
	_, buried, err := store.BuryReplica(ctx, stale, "mirror_run", "dead-one-queue")
	require.NoError(t, err)
	require.False(t, buried, "a row that changed since it was read is left alone")

	res, buried, err := store.BuryReplica(ctx, gone[0], "mirror_run", "dead-one-queue")
	require.NoError(t, err)
	require.True(t, buried)
	require.Equal(t, db.RescuedJobs{Finished: 2, Retried: 1, Discarded: 1}, res)
	for id, want := range map[int64]string{run: "completed", verify: "available", periodic: "discarded", waiting: "completed"} {
		state, errs, finalized := jobState(t, store, id)
		require.Equal(t, want, state)
		require.Equal(t, 1, errs, "the rescue leaves an error entry")
		require.Equal(t, want != "available", finalized)
	}
	state, _, _ := jobState(t, store, other)
	require.Equal(t, "running", state, "a live client's job is left alone")
	_, buried, err = store.BuryReplica(ctx, gone[0], "mirror_run", "dead-one-queue")
	require.NoError(t, err)
	require.False(t, buried, "buried once")
	gone, err = store.GoneReplicas(ctx)
	require.NoError(t, err)
	require.Empty(t, gone)

	// A process that starts under the name of a dead one.
	_, err = store.Pool().Exec(ctx, `INSERT INTO replicas (name, lock_pid, mirror_workers, job_client_id)
		VALUES ('restarted', 0, 10, 'client-old')`)
	require.NoError(t, err)
	old := runningJob(t, store, "mirror_verify", "client-old", 1, 2)
	again := db.NewLockHolder("restarted", 10, store.Pool().Config().ConnConfig, discard())
	again.SetJobClientID("client-new")
	againCtx, stopAgain := context.WithCancel(ctx)
	go again.Run(againCtx)
	t.Cleanup(func() { stopAgain(); <-again.Done() })
	var predecessors []string
	require.Eventually(t, func() bool {
		predecessors = append(predecessors, again.TakePredecessors()...)
		return len(predecessors) > 0
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, []string{"client-old"}, predecessors)
	res, err = store.RescueJobsOf(ctx, "client-old", "mirror_run")
	require.NoError(t, err)
	require.Equal(t, db.RescuedJobs{Retried: 1}, res)
	state, _, _ = jobState(t, store, old)
	require.Equal(t, "available", state)
}
