package jobs

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// itemsTable creates public.items with n rows on the database.
func itemsTable(t *testing.T, dbURL string, n int) {
	t.Helper()
	exec(t, dbURL, `CREATE TABLE public.items (id bigint PRIMARY KEY, v text NOT NULL)`)
	exec(t, dbURL, `INSERT INTO public.items SELECT g, 'row ' || g FROM generate_series(1, $1::int) g`, n)
}

// insertItem inserts row id into public.items on the database.
func insertItem(t *testing.T, dbURL string, id int) {
	t.Helper()
	exec(t, dbURL, `INSERT INTO public.items VALUES ($1::bigint, 'row ' || $1::bigint)`, id)
}

// streaming starts a replica with a mirror of public.items (10 rows) and
// waits until the mirror copied them and streams.
func streaming(t *testing.T, e *lcEnv, name string, tweak func(*Config)) (*replica, db.Mirror) {
	t.Helper()
	itemsTable(t, e.srcURL, 10)
	r := e.startReplica(name, tweak)
	m := e.createMirror("m", []string{"items"})
	waitRows(t, e.dstURL, "items", 10, 60*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	insertItem(t, e.srcURL, 11)
	waitRows(t, e.dstURL, "items", 11, 30*time.Second)
	return r, m
}

// Pause stops the run at a batch boundary (nothing more reaches the
// destination, the slot stays), resume starts a new run that carries on
// from where the paused one stopped, and delete stops the run and drops
// the slot and publication the mirror created, then the mirror itself.
func TestRunPauseResumeDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m := streaming(t, e, "a", nil)

	e.pause(m.ID)
	waitFor(t, "the paused run to let go of the mirror", 30*time.Second, func() bool { return e.lockOwner(m.ID) == "" })
	require.Equal(t, db.StatusPaused, e.mirror(m.ID).Status)
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the pause")
	insertItem(t, e.srcURL, 12)
	holds(t, "a paused mirror applies nothing", 2*time.Second, func() bool { return rows(t, e.dstURL, "items") == 11 })
	require.True(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "a paused mirror keeps its slot")

	e.resume(m.ID)
	waitRows(t, e.dstURL, "items", 12, 30*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Equal(t, lockApp("a"), e.lockOwner(m.ID), "the resumed mirror's run")
	insertItem(t, e.srcURL, 13)
	waitRows(t, e.dstURL, "items", 13, 30*time.Second)

	e.deleteMirror(m.ID)
	waitFor(t, "the deleted mirror to be gone from the catalog", 60*time.Second, func() bool {
		_, err := e.store.MirrorGetByID(context.Background(), m.ID)
		return errors.Is(err, db.ErrNotFound)
	})
	require.False(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "the deleted mirror's slot")
	require.False(t, publicationExists(t, e.srcURL, m.PublicationName), "the deleted mirror's publication")
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the delete")
	insertItem(t, e.srcURL, 14)
	holds(t, "a deleted mirror applies nothing", time.Second, func() bool { return rows(t, e.dstURL, "items") == 13 })
}

// runningJob is the id of the mirror's run job that a replica works now.
func (e *lcEnv) runningJob(id int64) int64 {
	e.t.Helper()
	return queryInt(e.t, e.catalogURL, `SELECT coalesce(max(id), 0) FROM river_job WHERE kind = $1 AND state = 'running'
		AND (args->>'mirror_id')::bigint = $2`, MirrorRunArgs{}.Kind(), id)
}

// jobState is the River state of job id.
func (e *lcEnv) jobState(id int64) string {
	e.t.Helper()
	var state string
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&state))
	return state
}

// When the catalog connection holding the mirror lock dies during CDC, the
// run goes on streaming and takes the lock back once it can: the same run
// (the same River job, never snoozed) holds the mirror again, and changes
// made meanwhile reach the destination.
func TestRunLockRegain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m := streaming(t, e, "a", nil)
	job := e.runningJob(m.ID)
	require.NotZero(t, job)

	r.faults.setLockDown(true) // the lock cannot be taken back for now
	e.killLockConnection(r)
	waitFor(t, "the lock to be gone with its connection", 10*time.Second, func() bool { return e.lockOwner(m.ID) == "" })
	insertItem(t, e.srcURL, 12)
	waitRows(t, e.dstURL, "items", 12, 30*time.Second) // streamed without the lock
	// The catalog answers again. The mirror has no lock holder for a
	// moment, and a supervisor or an adoption may enqueue a run job for
	// it: that job ends, and leaves the mirror to the run under way.
	r.faults.setLockDown(false)
	dup, err := e.client.Insert(context.Background(), MirrorRunArgs{MirrorID: m.ID}, nil)
	require.NoError(t, err)

	waitFor(t, "the run to take its lock back", 20*time.Second, func() bool { return e.lockOwner(m.ID) == lockApp("a") })
	waitFor(t, "the duplicate run job to end", 20*time.Second, func() bool { return e.jobState(dup.Job.ID) == "completed" })
	require.Equal(t, 1, r.log.count("catalog reachable again; mirror lock taken back"))
	require.Zero(t, r.log.count("another worker took the mirror over during the catalog outage; stopping this run"))
	require.Zero(t, r.log.count("lost the catalog connection that holds the mirror lock; stopping the run"))
	require.Equal(t, "running", e.jobState(job), "the run job that held the mirror before")
	require.Zero(t, e.runSnoozes(m.ID), "snoozes of the mirror's run jobs")
	insertItem(t, e.srcURL, 13)
	waitRows(t, e.dstURL, "items", 13, 30*time.Second)
	require.Equal(t, db.StatusRunning, e.mirror(m.ID).Status)
	require.Zero(t, e.mirror(m.ID).ErrorCount)
}

// When another replica took the mirror over while this one was cut off
// from the catalog, this run stops at its next batch boundary once it
// finds the lock held, which frees the slot: the new run streams from
// where the old one stopped, and nothing is lost or applied twice.
func TestRunLockLostToAnotherReplica(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, m := streaming(t, e, "a", nil)
	e.startReplica("b", nil)

	a.faults.setLockDown(true)
	e.killLockConnection(a)
	waitFor(t, "the lock to be gone with its connection", 10*time.Second, func() bool { return e.lockOwner(m.ID) == "" })
	// Replica a is still live in the replicas table (its lock holder
	// reconnected; only its run cannot take the lock back), so the fleet
	// leaves the mirror to it: b gets the mirror's run job on its adoption
	// queue, as a's balancer or b's adoption would hand it over.
	opts := MirrorRunArgs{}.InsertOpts()
	opts.Queue = adoptQueue("b")
	_, err := e.client.Insert(context.Background(), MirrorRunArgs{MirrorID: m.ID}, &opts)
	require.NoError(t, err)
	waitFor(t, "replica b to take the mirror over", 30*time.Second, func() bool { return e.lockOwner(m.ID) == lockApp("b") })
	insertItem(t, e.srcURL, 12)
	a.faults.setLockDown(false) // a reaches the catalog again and finds the lock held

	waitFor(t, "replica a's run to stop", 20*time.Second, func() bool {
		return a.log.count("another worker took the mirror over during the catalog outage; stopping this run") == 1 &&
			a.log.count("lost the catalog connection that holds the mirror lock; stopping the run") == 1
	})
	require.Zero(t, a.log.count("catalog reachable again; mirror lock taken back"))
	waitRows(t, e.dstURL, "items", 12, 30*time.Second)
	insertItem(t, e.srcURL, 13)
	insertItem(t, e.srcURL, 14)
	waitRows(t, e.dstURL, "items", 14, 40*time.Second) // b streams: a stopped
	require.Equal(t, lockApp("b"), e.lockOwner(m.ID))
	require.Equal(t, int64(14), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`))
	require.Equal(t, db.StatusRunning, e.mirror(m.ID).Status)
}

// While the catalog cannot be reached (its calls fail and the lock
// connection is gone), the run keeps applying changes; once the catalog
// answers, the run takes its lock back and the mirror's status catches up:
// position, batch and table counters, and the batch log entries.
func TestRunCatalogOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m := streaming(t, e, "a", nil)
	waitFor(t, "the streamed row in the catalog", 10*time.Second, func() bool { return tableInserted(e, m.ID) == 1 })
	before := e.mirror(m.ID)

	r.faults.fail(outageMethods...)
	r.faults.setLockDown(true)
	e.killLockConnection(r)
	for id := 12; id <= 31; id++ {
		insertItem(t, e.srcURL, id)
	}
	waitRows(t, e.dstURL, "items", 31, 30*time.Second) // applied during the outage
	// While the catalog is being reconnected the run does not try its
	// progress writes (one may have failed before the run noticed).
	require.LessOrEqual(t, r.faults.injected("MirrorRecordProgress"), 1, "progress writes tried during the outage")
	during := e.mirror(m.ID)
	require.Equal(t, before.LastSyncBatchID, during.LastSyncBatchID, "the catalog took no progress during the outage")
	require.Equal(t, int64(1), tableInserted(e, m.ID))

	r.faults.heal()
	waitFor(t, "the run to take its lock back", 20*time.Second, func() bool { return e.lockOwner(m.ID) == lockApp("a") })
	// The lock connection came back: the balancer holds adoptions and
	// hand-offs until the replicas' runs have retaken their locks.
	require.WithinDuration(t, time.Now(), r.locks.BackSince(), 25*time.Second, "when the lock connection came back")
	if time.Since(r.locks.BackSince()) < catalogSettle-time.Second {
		require.True(t, r.bal.settling(), "the balancer settles after the lock connection came back")
	}
	waitFor(t, "the catalog to catch up", 20*time.Second, func() bool {
		got := e.mirror(m.ID)
		return tableInserted(e, m.ID) == 21 && got.LastSyncBatchID > before.LastSyncBatchID && *got.LastLSN != *before.LastLSN
	}, func() string { return "rows_inserted " + strconv.FormatInt(tableInserted(e, m.ID), 10) })
	// Every applied change is in the batch log entries, those of the
	// outage included.
	waitFor(t, "the batch log entries", 20*time.Second, func() bool {
		return queryInt(t, e.catalogURL, `SELECT coalesce(sum((details->>'rows_processed')::bigint), 0) FROM mirror_logs
			WHERE mirror_id = $1 AND message = $2`, m.ID, db.MsgCDCBatchApplied) == 21
	})
	require.Equal(t, db.StatusRunning, e.mirror(m.ID).Status)
	require.Zero(t, r.log.count("lost the catalog connection that holds the mirror lock; stopping the run"))
}

// tableInserted is the rows_inserted of the mirror's one table.
func tableInserted(e *lcEnv, id int64) int64 {
	e.t.Helper()
	tables, err := e.store.MirrorTables(context.Background(), id)
	require.NoError(e.t, err)
	require.Len(e.t, tables, 1)
	return tables[0].RowsInserted
}

// requestCutover requests a cut-over as POST /v1/mirrors/{name}/cutover
// does: the record, and a run job, in one transaction.
func (e *lcEnv) requestCutover(id int64, opts db.CutoverOptions) {
	e.t.Helper()
	ctx := context.Background()
	e.inTx(func(tx pgx.Tx) error {
		record := db.Cutover{State: db.CutoverRequested, RequestedAt: time.Now().UTC(), RequestedBy: "test", Options: opts, Steps: []db.CutoverStep{}}
		if err := e.store.With(tx).MirrorRequestCutover(ctx, id, record); err != nil {
			return err
		}
		_, err := e.client.InsertTx(ctx, tx, MirrorRunArgs{MirrorID: id}, nil)
		return err
	})
}

// waitCutover waits until the mirror's cut-over is finished.
func (e *lcEnv) waitCutover(id int64, timeout time.Duration) db.Cutover {
	e.t.Helper()
	var last db.Mirror
	waitFor(e.t, "the cut-over to finish", timeout, func() bool {
		last = e.mirror(id)
		return last.Cutover.Finished()
	}, func() string {
		if last.Cutover == nil {
			return "no cut-over record"
		}
		return "cut-over " + string(last.Cutover.State)
	})
	return *last.Cutover
}

// A run hands its mirror back to the queue when its run budget is used up
// (the job snoozes and comes straight back): the mirror replicates across
// the runs without a gap and its status stays running.
func TestRunBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, m := streaming(t, e, "a", func(c *Config) { c.RunBudget = 1500 * time.Millisecond })
	for id := 12; id <= 15; id++ {
		insertItem(t, e.srcURL, id)
		waitRows(t, e.dstURL, "items", int64(id), 30*time.Second)
		time.Sleep(500 * time.Millisecond)
	}
	waitFor(t, "the run to hand the mirror back twice", 30*time.Second, func() bool { return e.runSnoozes(m.ID) >= 2 },
		func() string { return strconv.FormatInt(e.runSnoozes(m.ID), 10) + " snoozes" })
	insertItem(t, e.srcURL, 16)
	waitRows(t, e.dstURL, "items", 16, 30*time.Second)
	got := e.mirror(m.ID)
	require.Equal(t, db.StatusRunning, got.Status)
	require.Zero(t, got.ErrorCount)
}

// A failed run records the failure on the mirror (status error, the
// error, a retry time Backoff(1) away) and its job snoozes until then; the
// retry after the cause is fixed runs the mirror.
func TestRunFailureBackoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	itemsTable(t, e.srcURL, 10)
	r := e.startReplica("a", nil)
	// The destination peer points at a port where nothing listens.
	port := e.dstPeer.Port
	closed := 1
	_, err := e.store.PeerUpdate(context.Background(), e.dstPeer.Name, db.PeerUpdateParams{Port: &closed})
	require.NoError(t, err)
	m := e.createMirror("m", []string{"items"})
	failed := e.waitStatus(m.ID, db.StatusError, 30*time.Second)
	require.Equal(t, 1, failed.ErrorCount)
	require.NotNil(t, failed.NextRetryAt)
	require.Contains(t, deref(failed.ErrorMessage), "destination")
	require.Equal(t, int64(1), e.logCount(m.ID, db.MsgConnectionTimeout))
	wait := time.Until(*failed.NextRetryAt)
	require.True(t, wait > 2*time.Second && wait <= Backoff(1), "next retry in %s, want about %s", wait, Backoff(1))
	// The job waits for the retry time, snoozed (not retried by River). The
	// mirror's status is written before the job returns its snooze, and
	// River's completer records the snooze a moment later.
	scheduled := func() int64 {
		return queryInt(t, e.catalogURL, `SELECT count(*) FROM river_job WHERE kind = $1 AND (metadata->>'snoozes')::int = 1
			AND abs(extract(epoch FROM scheduled_at - $2::timestamptz)) < 1`, MirrorRunArgs{}.Kind(), *failed.NextRetryAt)
	}
	deadline := time.Now().Add(5 * time.Second)
	for scheduled() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if scheduled() == 0 {
		e.dumpJobs()
	}
	require.Equal(t, int64(1), scheduled(), "a run job scheduled at next_retry_at %s", failed.NextRetryAt)
	require.Equal(t, 0, r.locks.Running())

	_, err = e.store.PeerUpdate(context.Background(), e.dstPeer.Name, db.PeerUpdateParams{Port: &port})
	require.NoError(t, err)
	waitRows(t, e.dstURL, "items", 10, 30*time.Second)
	require.False(t, time.Now().Before(*failed.NextRetryAt), "the retry came before next_retry_at")
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
}

// A mirror that wants to run but has no run job and no worker (its job was
// lost with a replica) is adopted by a live replica and runs.
func TestOrphanAdopted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	itemsTable(t, e.srcURL, 10)
	m := e.createMirror("m", []string{"items"}) // no replica yet: no job
	require.Zero(t, queryInt(t, e.catalogURL, `SELECT count(*) FROM river_job`))
	// The leader's supervisor (at its start) and every replica's adoption
	// check look for such mirrors; either enqueues its run.
	e.startReplica("a", nil)
	waitRows(t, e.dstURL, "items", 10, 60*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Equal(t, lockApp("a"), e.lockOwner(m.ID))
}

// A verification compares the destination with the source at one source
// position while CDC runs under a write load: the run holds its stream at
// that position for the moment the verification takes its snapshots, then
// goes on. The verification finds the tables equal.
func TestVerificationHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, m := streaming(t, e, "a", nil)
	stop := make(chan struct{})
	loadDone := make(chan int)
	go func() { // at most 600 rows, one per 10 ms
		id := 1000
		defer func() { loadDone <- id }()
		for ; id < 1600; id++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if tryExec(e.srcURL, `INSERT INTO public.items VALUES ($1::bigint, 'load')`, id) != nil {
				return
			}
		}
	}()
	var v db.Verification
	e.inTx(func(tx pgx.Tx) error {
		var err error
		if v, err = e.store.With(tx).VerificationCreate(context.Background(), m.ID, "test", nil, 0); err != nil {
			return err
		}
		_, err = e.client.InsertTx(context.Background(), tx, VerifyArgs{VerificationID: v.ID}, nil)
		return err
	})
	waitFor(t, "the verification to finish", 60*time.Second, func() bool {
		got, err := e.store.VerificationByID(context.Background(), v.ID)
		require.NoError(t, err)
		v = got
		return v.State != db.VerifyRunning
	})
	close(stop)
	last := <-loadDone
	require.Equal(t, db.VerifyDone, v.State, "verification error %q", v.Error)
	require.NotNil(t, v.RowsDiffering)
	require.Zero(t, *v.RowsDiffering)
	require.NotEmpty(t, v.HeldApplied, "the run held its stream for the verification")
	require.Equal(t, db.HoldReleased, v.HoldState)
	// CDC went on after the hold.
	waitRows(t, e.dstURL, "items", int64(11+last-1000), 30*time.Second)
}
