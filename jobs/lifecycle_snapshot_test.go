package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// snapshotRows is the size of the tables in the snapshot test.
const snapshotRows = 2000

// tableStatus is the status of the mirror's one table.
func tableStatus(e *lcEnv, id int64) db.TableStatus {
	e.t.Helper()
	tables, err := e.store.MirrorTables(context.Background(), id)
	require.NoError(e.t, err)
	require.Len(e.t, tables, 1)
	return tables[0].Status
}

// Two mirrors whose initial copies stand still before their end (their
// progress writes to the catalog are held: the copied rows are not yet
// taken as done):
//   - a pause of one is refused, as POST /v1/mirrors/{name}/pause answers
//     409 with the reason (Mirror.ControlBlocked), and the catalog refuses
//     the status change too (a pause that raced past the check); its copy
//     goes on, and once done every row is on the destination exactly once
//     and the mirror streams; then a pause is accepted, and a resume
//     streams what was written during it;
//   - a delete of the other stops its run at once; the cleanup drops the
//     slot and the publication the mirror created on the source, and the
//     mirror is gone, with no run left.
func TestPauseAndDeleteDuringSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	itemsTable(t, e.srcURL, snapshotRows)
	exec(t, e.srcURL, `CREATE TABLE public.others (id bigint PRIMARY KEY, v text NOT NULL)`)
	exec(t, e.srcURL, `INSERT INTO public.others SELECT g, 'other ' || g FROM generate_series(1, $1::int) g`, snapshotRows)
	r := e.startReplica("a", nil)
	reached, open := r.faults.hold("MirrorTableSnapshotProgress")
	t.Cleanup(open)
	p := e.createMirror("p", []string{"items"})
	d := e.createMirror("d", []string{"others"})
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatal("no snapshot started within 60 s")
	}
	for _, m := range []db.Mirror{p, d} {
		e.waitStatus(m.ID, db.StatusSnapshotting, 30*time.Second)
		waitFor(t, "replica a to run "+m.Name, 30*time.Second, func() bool { return e.lockOwner(m.ID) == lockApp("a") })
	}

	// Pause: refused.
	tables, err := e.store.MirrorTables(ctx, p.ID)
	require.NoError(t, err)
	require.Equal(t, "its snapshot is in progress; wait until it is running", e.mirror(p.ID).ControlBlocked(tables), "why a pause is refused")
	err = e.store.MirrorPause(ctx, p.ID)
	require.ErrorContains(t, err, "illegal mirror status transition from snapshotting to paused", "a pause during the snapshot")
	require.Equal(t, db.DesiredRunning, e.mirror(p.ID).DesiredState)
	require.Equal(t, lockApp("a"), e.lockOwner(p.ID), "the snapshotting run goes on")

	// Delete: the run stops, the slot and publication are dropped.
	require.True(t, slotExists(t, e.srcURL, d.ReplicationSlotName), "the snapshot's slot")
	require.True(t, publicationExists(t, e.srcURL, d.PublicationName), "the mirror's publication")
	e.deleteMirror(d.ID)
	waitFor(t, "the deleted mirror to be gone from the catalog", 60*time.Second, func() bool {
		_, err := e.store.MirrorGetByID(ctx, d.ID)
		return errors.Is(err, db.ErrNotFound)
	})
	require.False(t, slotExists(t, e.srcURL, d.ReplicationSlotName), "the deleted mirror's slot")
	require.False(t, publicationExists(t, e.srcURL, d.PublicationName), "the deleted mirror's publication")
	require.Equal(t, "", e.lockOwner(d.ID), "the deleted mirror's lock")
	// River's completer records the run job's end a moment after the run
	// let the lock go.
	waitFor(t, "the deleted mirror's run job to end", 10*time.Second, func() bool { return e.runningJob(d.ID) == 0 })
	require.Equal(t, 1, r.locks.Running(), "runs of the replica after the delete")
	require.Equal(t, db.TableStatusSnapshotting, tableStatus(e, p.ID), "the table whose copy is held")

	// The refused pause's copy completes.
	insertItem(t, e.srcURL, snapshotRows+1) // during the copy
	open()
	waitRows(t, e.dstURL, "items", snapshotRows+1, 60*time.Second)
	e.waitStatus(p.ID, db.StatusRunning, 30*time.Second)
	require.Equal(t, int64(snapshotRows+1), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`), "distinct rows on the destination")
	require.Equal(t, db.TableStatusRunning, tableStatus(e, p.ID))
	require.Equal(t, int64(1), e.logCount(p.ID, db.MsgSnapshotCompleted), "completed snapshots")

	e.pause(p.ID)
	waitFor(t, "the paused run to let go of the mirror", 30*time.Second, func() bool { return e.lockOwner(p.ID) == "" })
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the pause")
	insertItem(t, e.srcURL, snapshotRows+2)
	e.resume(p.ID)
	waitRows(t, e.dstURL, "items", snapshotRows+2, 30*time.Second)
	require.Equal(t, int64(snapshotRows+2), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`), "distinct rows on the destination")
	require.Equal(t, int64(1), e.logCount(p.ID, db.MsgSnapshotCompleted), "completed snapshots")
}
