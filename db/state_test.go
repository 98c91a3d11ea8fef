package db_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

func ptr[T any](v T) *T { return &v }

func mirrorIn(status db.MirrorStatus) db.Mirror {
	return db.Mirror{Name: "m", Status: status, DesiredState: db.DesiredRunning, DoInitialSnapshot: true}
}

func failedFrom(resume db.MirrorStatus) db.Mirror {
	m := mirrorIn(db.StatusError)
	m.ResumeStatus = ptr(resume)
	return m
}

func TestWantsToRun(t *testing.T) {
	t.Parallel()
	for status, want := range map[db.MirrorStatus]bool{
		db.StatusInitializing: true, db.StatusSnapshotting: true, db.StatusRunning: true, db.StatusError: true,
		db.StatusPaused: false, db.StatusStopped: false, db.StatusCompleted: false,
	} {
		require.Equal(t, want, mirrorIn(status).WantsToRun(), status)
	}
	pausing := mirrorIn(db.StatusRunning)
	pausing.DesiredState = db.DesiredPaused
	require.False(t, pausing.WantsToRun(), "pause requested")
	deleted := mirrorIn(db.StatusRunning)
	deleted.DeletedAt = ptr(time.Now())
	require.False(t, deleted.WantsToRun())
	require.Len(t, db.MirrorStatuses, 7)
	for _, s := range db.MirrorStatuses {
		require.Equal(t, s == db.StatusStopped || s == db.StatusCompleted, s.Final(), s)
	}
}

func TestEffectiveStatusAndFullSnapshot(t *testing.T) {
	t.Parallel()
	require.Equal(t, db.StatusRunning, mirrorIn(db.StatusRunning).EffectiveStatus())
	require.Equal(t, db.StatusSnapshotting, failedFrom(db.StatusSnapshotting).EffectiveStatus())
	require.Equal(t, db.StatusError, mirrorIn(db.StatusError).EffectiveStatus(), "an error without a status to return to")
	for m, want := range map[*db.Mirror]bool{
		ptr(mirrorIn(db.StatusInitializing)): true, ptr(mirrorIn(db.StatusSnapshotting)): true,
		ptr(failedFrom(db.StatusInitializing)): true, ptr(failedFrom(db.StatusSnapshotting)): true,
		ptr(mirrorIn(db.StatusRunning)): false, ptr(failedFrom(db.StatusRunning)): false, ptr(mirrorIn(db.StatusPaused)): false,
	} {
		require.Equal(t, want, m.InFullSnapshot(), "%s/%v", m.Status, m.ResumeStatus)
	}
}

func TestTablesToCopy(t *testing.T) {
	t.Parallel()
	tables := []db.MirrorTable{
		{ID: 1, Status: db.TableStatusRunning},
		{ID: 2, Status: db.TableStatusPending},
		{ID: 3, Status: db.TableStatusSnapshotting},
		{ID: 4, Status: db.TableStatusRunning, ResyncRequestedAt: ptr(time.Now())},
		{ID: 5, Status: db.TableStatusError},
	}
	ids := func(ts []db.MirrorTable) []int64 {
		var out []int64
		for _, t := range ts {
			out = append(out, t.ID)
		}
		return out
	}
	require.Equal(t, []int64{2, 3, 4}, ids(mirrorIn(db.StatusRunning).TablesToCopy(tables)))
	noSnapshot := mirrorIn(db.StatusRunning)
	noSnapshot.DoInitialSnapshot = false
	require.Equal(t, []int64{3, 4}, ids(noSnapshot.TablesToCopy(tables)), "pending tables start without a copy")
	resync := mirrorIn(db.StatusSnapshotting)
	resync.DoInitialSnapshot = false
	require.Equal(t, []int64{2, 3, 4}, ids(resync.TablesToCopy(tables)), "a full resync copies pending tables even so")
}

func TestControlBlocked(t *testing.T) {
	t.Parallel()
	running := []db.MirrorTable{{SourceSchema: "public", SourceTable: "t", Status: db.TableStatusRunning}}
	for status, want := range map[db.MirrorStatus]string{
		db.StatusInitializing: "still initializing", db.StatusSnapshotting: "snapshot is in progress",
		db.StatusStopped: "stopped, which is final", db.StatusCompleted: "cut over",
		db.StatusRunning: "", db.StatusPaused: "", db.StatusError: "",
	} {
		got := mirrorIn(status).ControlBlocked(running)
		if want == "" {
			require.Empty(t, got, status)
		} else {
			require.Contains(t, got, want, status)
		}
	}
	for action, want := range map[db.PendingAction]string{db.ActionResync: "a resync is in progress",
		db.ActionSyncSchema: "a schema sync is in progress", db.ActionCutover: "a cut-over is in progress"} {
		m := mirrorIn(db.StatusRunning)
		m.PendingAction = ptr(action)
		require.Contains(t, m.ControlBlocked(running), want)
	}
	copying := []db.MirrorTable{{SourceSchema: "public", SourceTable: "t", Status: db.TableStatusSnapshotting}}
	require.Contains(t, mirrorIn(db.StatusRunning).ControlBlocked(copying), "table public.t is being resynced")
}
