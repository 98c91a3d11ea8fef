package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// snapshotRows is the size of public.items in the snapshot tests: ten
// partitions of 1000 rows.
const snapshotRows = 10000

// snapshotHeld starts a replica and a mirror of public.items
// (snapshotRows rows, copied in partitions of 1000) and returns once the
// initial copy stands still mid-way: its first progress write to the
// catalog is held until open is called (or the run's context ends).
func snapshotHeld(t *testing.T, e *lcEnv) (r *replica, m db.Mirror, open func()) {
	t.Helper()
	itemsTable(t, e.srcURL, snapshotRows)
	r = e.startReplica("a", nil)
	reached, open := r.faults.hold("MirrorTableSnapshotProgress")
	t.Cleanup(open)
	m = e.createMirror("m", []string{"items"}, func(p *db.MirrorCreateParams) { p.SnapshotNumRowsPerPartition = 1000 })
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatal("the snapshot did not start within 60 s")
	}
	require.Equal(t, db.StatusSnapshotting, e.mirror(m.ID).Status)
	require.Equal(t, lockApp("a"), e.lockOwner(m.ID), "the snapshotting run holds the mirror")
	return r, m, open
}

// tableStatus is the status of the mirror's one table.
func tableStatus(e *lcEnv, id int64) db.TableStatus {
	e.t.Helper()
	tables, err := e.store.MirrorTables(context.Background(), id)
	require.NoError(e.t, err)
	require.Len(e.t, tables, 1)
	return tables[0].Status
}

// A pause while the initial copy is under way is refused, as
// POST /v1/mirrors/{name}/pause answers 409 with the reason
// (Mirror.ControlBlocked), and the catalog refuses the status change too
// (a pause that raced past the check); the copy goes on, and once it is
// done every row is on the destination exactly once and the mirror
// streams. Then the pause is accepted, and a resume streams what was
// written during it.
func TestPauseDuringSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m, open := snapshotHeld(t, e)
	ctx := context.Background()

	got := e.mirror(m.ID)
	tables, err := e.store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, "its snapshot is in progress; wait until it is running", got.ControlBlocked(tables), "why a pause is refused")
	err = e.store.MirrorPause(ctx, m.ID)
	require.ErrorContains(t, err, "illegal mirror status transition from snapshotting to paused", "a pause during the snapshot")
	require.Equal(t, db.DesiredRunning, e.mirror(m.ID).DesiredState)
	require.Equal(t, lockApp("a"), e.lockOwner(m.ID), "the snapshotting run goes on")
	insertItem(t, e.srcURL, snapshotRows+1) // during the copy
	open()

	waitRows(t, e.dstURL, "items", snapshotRows+1, 60*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Equal(t, int64(snapshotRows+1), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`), "distinct rows on the destination")
	require.Equal(t, db.TableStatusRunning, tableStatus(e, m.ID))
	require.Equal(t, int64(1), e.logCount(m.ID, db.MsgSnapshotCompleted), "completed snapshots")

	e.pause(m.ID)
	waitFor(t, "the paused run to let go of the mirror", 30*time.Second, func() bool { return e.lockOwner(m.ID) == "" })
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the pause")
	insertItem(t, e.srcURL, snapshotRows+2)
	e.resume(m.ID)
	waitRows(t, e.dstURL, "items", snapshotRows+2, 30*time.Second)
	require.Equal(t, int64(snapshotRows+2), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`), "distinct rows on the destination")
	require.Equal(t, int64(1), e.logCount(m.ID, db.MsgSnapshotCompleted), "completed snapshots")
}

// A delete that lands while the initial copy is under way stops the run
// at once; the cleanup drops the slot and the publication the mirror
// created on the source, and the mirror is gone, with no run left.
func TestDeleteDuringSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m, _ := snapshotHeld(t, e)
	require.True(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "the snapshot's slot")
	require.True(t, publicationExists(t, e.srcURL, m.PublicationName), "the mirror's publication")

	e.deleteMirror(m.ID)
	waitFor(t, "the deleted mirror to be gone from the catalog", 60*time.Second, func() bool {
		_, err := e.store.MirrorGetByID(context.Background(), m.ID)
		return errors.Is(err, db.ErrNotFound)
	})
	require.False(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "the deleted mirror's slot")
	require.False(t, publicationExists(t, e.srcURL, m.PublicationName), "the deleted mirror's publication")
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the delete")
	require.Equal(t, "", e.lockOwner(m.ID), "the deleted mirror's lock")
	require.Zero(t, e.runningJob(m.ID), "run jobs of the deleted mirror")
	require.Zero(t, queryInt(t, e.srcURL, `SELECT count(*) FROM pg_replication_slots WHERE active AND database = current_database()`), "slots in use on the source database")
}
