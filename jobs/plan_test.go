package jobs

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
)

func ptr[T any](v T) *T { return &v }

// mirrorIn builds a mirror in status (in error, resuming to resume).
func mirrorIn(status, resume db.MirrorStatus) db.Mirror {
	m := db.Mirror{Name: "m", Status: status, DesiredState: db.DesiredRunning, DoInitialSnapshot: true, CreatedSlot: true,
		ReplicationSlotName: "pgmirror_slot_m"}
	if resume != "" {
		m.ResumeStatus = ptr(resume)
	}
	return m
}

func tablesIn(statuses ...db.TableStatus) []db.MirrorTable {
	out := make([]db.MirrorTable, len(statuses))
	for i, s := range statuses {
		out[i] = db.MirrorTable{ID: int64(i + 1), SourceSchema: "public", SourceTable: fmt.Sprintf("t%d", i), Status: s}
	}
	return out
}

var (
	slotOK      = capture.SlotStatus{Exists: true, WALStatus: "reserved"}
	slotLost    = capture.SlotStatus{Exists: true, WALStatus: "lost"}
	slotMissing = capture.SlotStatus{}
)

func TestNextPhase(t *testing.T) {
	t.Parallel()
	running, pending, snapshotting := db.TableStatusRunning, db.TableStatusPending, db.TableStatusSnapshotting
	resyncRequested := tablesIn(running, running)
	resyncRequested[1].ResyncRequestedAt = ptr(time.Now())
	noSnapshot := func(m db.Mirror) db.Mirror { m.DoInitialSnapshot = false; return m }
	notOurs := func(m db.Mirror) db.Mirror { m.CreatedSlot = false; return m }
	pendingAction := func(a db.PendingAction) func(db.Mirror) db.Mirror {
		return func(m db.Mirror) db.Mirror { m.PendingAction = ptr(a); return m }
	}
	same := func(m db.Mirror) db.Mirror { return m }
	cases := []struct {
		name        string
		mirror      db.Mirror
		change      func(db.Mirror) db.Mirror
		tables      []db.MirrorTable
		slot        capture.SlotStatus
		hasPosition bool
		want        phase
	}{
		{"new mirror", mirrorIn(db.StatusInitializing, ""), notOurs, tablesIn(pending, pending), slotMissing, false, phaseSnapshot},
		{"new mirror without snapshot", mirrorIn(db.StatusInitializing, ""), func(m db.Mirror) db.Mirror { return notOurs(noSnapshot(m)) }, tablesIn(pending), slotMissing, false, phaseNewSlot},
		{"slot of the name made by someone else", mirrorIn(db.StatusInitializing, ""), notOurs, tablesIn(pending), slotOK, false, phaseSlotTaken},
		{"interrupted snapshot starts over", mirrorIn(db.StatusSnapshotting, ""), same, tablesIn(running, snapshotting), slotOK, false, phaseSnapshot},
		{"snapshot failed, retried", mirrorIn(db.StatusError, db.StatusSnapshotting), same, tablesIn(snapshotting), slotOK, true, phaseSnapshot},
		{"setup failed, retried", mirrorIn(db.StatusError, db.StatusInitializing), same, tablesIn(pending), slotMissing, false, phaseSnapshot},
		{"full resync", mirrorIn(db.StatusSnapshotting, ""), noSnapshot, tablesIn(pending, pending), slotOK, true, phaseSnapshot},
		{"running", mirrorIn(db.StatusRunning, ""), same, tablesIn(running, running), slotOK, true, phaseCDC},
		{"running, slot extended", mirrorIn(db.StatusRunning, ""), same, tablesIn(running), capture.SlotStatus{Exists: true, WALStatus: "extended"}, true, phaseCDC},
		{"CDC failed, retried", mirrorIn(db.StatusError, db.StatusRunning), same, tablesIn(running), slotOK, true, phaseCDC},
		{"resumed after pause", mirrorIn(db.StatusRunning, ""), same, tablesIn(running), slotOK, true, phaseCDC},
		{"slot went missing", mirrorIn(db.StatusRunning, ""), same, tablesIn(running), slotMissing, true, phaseNewSlot},
		{"slot invalidated", mirrorIn(db.StatusRunning, ""), same, tablesIn(running), slotLost, true, phaseNewSlot},
		{"table resync", mirrorIn(db.StatusRunning, ""), same, resyncRequested, slotOK, true, phaseCopyTables},
		{"table copy interrupted", mirrorIn(db.StatusRunning, ""), same, tablesIn(running, snapshotting), slotOK, true, phaseCopyTables},
		{"tables added", mirrorIn(db.StatusRunning, ""), same, tablesIn(running, pending), slotOK, true, phaseCopyTables},
		{"tables added, no snapshots", mirrorIn(db.StatusRunning, ""), noSnapshot, tablesIn(running, pending), slotOK, true, phaseCDC},
		{"table resync but the slot is lost", mirrorIn(db.StatusRunning, ""), same, resyncRequested, slotLost, true, phaseSnapshot},
		{"table resync without applied position", mirrorIn(db.StatusRunning, ""), same, resyncRequested, slotOK, false, phaseSnapshot},
		{"resync requested", mirrorIn(db.StatusRunning, ""), pendingAction(db.ActionResync), tablesIn(running), slotOK, true, phaseAction},
		{"schema sync requested", mirrorIn(db.StatusRunning, ""), pendingAction(db.ActionSyncSchema), tablesIn(running), slotOK, true, phaseAction},
		{"cut-over requested", mirrorIn(db.StatusRunning, ""), pendingAction(db.ActionCutover), tablesIn(running), slotOK, true, phaseCutover},
		{"an action comes before a foreign slot", mirrorIn(db.StatusRunning, ""), func(m db.Mirror) db.Mirror { return pendingAction(db.ActionResync)(notOurs(m)) }, tablesIn(running), slotOK, true, phaseAction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := nextPhase(runFacts{mirror: c.change(c.mirror), tables: c.tables, slot: c.slot, hasPosition: c.hasPosition})
			require.Equal(t, c.want.String(), got.String())
		})
	}
}

func TestSchemaPreparation(t *testing.T) {
	t.Parallel()
	withAction := func(m db.Mirror, a db.PendingAction) db.Mirror { m.PendingAction = ptr(a); return m }
	require.Equal(t, schemaCreate, schemaPreparation(mirrorIn(db.StatusInitializing, "")))
	require.Equal(t, schemaCreate, schemaPreparation(mirrorIn(db.StatusError, db.StatusInitializing)))
	require.Equal(t, schemaFollow, schemaPreparation(mirrorIn(db.StatusRunning, "")))
	require.Equal(t, schemaFollow, schemaPreparation(mirrorIn(db.StatusSnapshotting, "")))
	require.Equal(t, schemaFollow, schemaPreparation(withAction(mirrorIn(db.StatusRunning, ""), db.ActionResync)))
	require.Equal(t, schemaNone, schemaPreparation(withAction(mirrorIn(db.StatusRunning, ""), db.ActionSyncSchema)))
}

func TestFailureMessage(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		err  error
		want string
	}{
		{inStep(opSnapshot, boom), db.MsgSnapshotFailed},
		{inStep(opCDC, boom), db.MsgCDCBatchFailed},
		{inStep(opSchema, boom), "Schema sync failed"},
		{inStep(opCutover, boom), "Cut-over failed"},
		{inStep(opSetup, boom), "Mirror setup failed"},
		{boom, "Mirror setup failed"},
		// The innermost step names the failure: CDC beside a table copy.
		{inStep(opSnapshot, fmt.Errorf("copy: %w", inStep(opCDC, boom))), db.MsgCDCBatchFailed},
		{inStep(opSetup, &slotExistsError{slot: "s"}), db.MsgSlotExists},
		{inStep(opCDC, fmt.Errorf("stream: %w", cdc.ErrHeartbeatTimeout)), db.MsgHeartbeatTimeout},
		{inStep(opSetup, &peerConnectError{role: "source", peer: "p", err: boom}), db.MsgConnectionTimeout},
		{inStep(opCDC, fmt.Errorf("batch: %w", &pgconn.PgError{Code: "57P01"})), db.MsgConnectionTimeout},
		{inStep(opSetup, &pgconn.PgError{Code: "28P01"}), "Peer rejected the connection"},
		{inStep(opCDC, &pgconn.PgError{Code: "23505"}), db.MsgCDCBatchFailed},
	}
	for _, c := range cases {
		require.Equal(t, c.want, failureMessage(c.err), "%v", c.err)
	}
	require.Equal(t, opCDC, failedStep(inStep(opSnapshot, inStep(opCDC, boom))))
	require.NoError(t, inStep(opCDC, nil))
	require.ErrorIs(t, inStep(opCDC, fmt.Errorf("x: %w", errAgain)), errAgain, "control errors stay visible")
	require.Equal(t, "boom", inStep(opCDC, boom).Error(), "the text is the cause's")
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	var got []time.Duration
	for n := 1; n <= 9; n++ {
		got = append(got, Backoff(n))
	}
	require.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, got)
	require.Equal(t, 5*time.Minute, Backoff(10000))
}

// TestRunRetryBounded: a run job that ended with an error of its own comes
// back within seconds at any attempt, so that its mirror is never left for
// minutes with a waiting job that keeps other replicas from adopting it.
func TestRunRetryBounded(t *testing.T) {
	t.Parallel()
	w := &MirrorRunWorker{}
	for _, attempt := range []int{0, 1, 2, 5, 50, 999} {
		start := time.Now()
		next := w.NextRetry(&river.Job[MirrorRunArgs]{JobRow: &rivertype.JobRow{Attempt: attempt}})
		wait := next.Sub(start)
		require.Greater(t, wait, 500*time.Millisecond, "attempt %d", attempt)
		require.LessOrEqual(t, wait, runRetryMax+time.Second, "attempt %d", attempt)
	}
}
