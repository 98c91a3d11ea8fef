package db

import "fmt"

// The vocabulary of a mirror's state, and the rules over it in one place
// (state_test.go). docs/status.md draws the transitions; the catalog's
// trigger mirrors_status_transition enforces them.

// MirrorStatus is a mirror's observed status, written by the worker that
// runs it (and by the API for pause and resume).
type MirrorStatus string

// Mirror statuses.
const (
	StatusInitializing MirrorStatus = "initializing"
	StatusSnapshotting MirrorStatus = "snapshotting"
	StatusRunning      MirrorStatus = "running"
	StatusPaused       MirrorStatus = "paused"
	StatusError        MirrorStatus = "error"
	// StatusStopped is final: the retry budget is used up.
	StatusStopped MirrorStatus = "stopped"
	// StatusCompleted is final: the mirror was cut over to its destination,
	// which has every change of the source and takes the writes now.
	StatusCompleted MirrorStatus = "completed"
)

// MirrorStatuses are every mirror status, in the order of their life.
var MirrorStatuses = []MirrorStatus{StatusInitializing, StatusSnapshotting, StatusRunning, StatusPaused, StatusError, StatusStopped, StatusCompleted}

// Final reports a status that no mirror leaves (only DELETE removes it).
func (s MirrorStatus) Final() bool { return s == StatusStopped || s == StatusCompleted }

// DesiredState is what the API last asked of a mirror.
type DesiredState string

// Desired states.
const (
	DesiredRunning DesiredState = "running"
	DesiredPaused  DesiredState = "paused"
)

// PendingAction is a control request written by the API that the mirror's
// worker carries out and clears.
type PendingAction string

// Pending actions.
const (
	ActionResync     PendingAction = "resync"
	ActionSyncSchema PendingAction = "sync_schema"
	ActionCutover    PendingAction = "cutover"
)

// describe names the action in messages.
func (a PendingAction) describe() string {
	switch a {
	case ActionSyncSchema:
		return "schema sync"
	case ActionCutover:
		return "cut-over"
	}
	return string(a)
}

// TableStatus is a table's sync status within its mirror.
type TableStatus string

// Table statuses.
const (
	TableStatusPending      TableStatus = "pending"
	TableStatusSnapshotting TableStatus = "snapshotting"
	TableStatusRunning      TableStatus = "running"
	TableStatusError        TableStatus = "error"
)

// WantsToRun reports whether the mirror needs a worker now: live, asked to
// run, and neither paused nor in a final status.
func (m Mirror) WantsToRun() bool {
	return m.DeletedAt == nil && m.DesiredState == DesiredRunning && m.Status != StatusPaused && !m.Status.Final()
}

// EffectiveStatus is the mirror's status, or for a failed mirror the status
// it returns to.
func (m Mirror) EffectiveStatus() MirrorStatus {
	if m.Status == StatusError && m.ResumeStatus != nil {
		return *m.ResumeStatus
	}
	return m.Status
}

// InFullSnapshot reports whether the mirror is (or was, before it failed)
// in its initial setup and snapshot or a full resync.
func (m Mirror) InFullSnapshot() bool {
	s := m.EffectiveStatus()
	return s == StatusInitializing || s == StatusSnapshotting
}

// TablesToCopy returns the tables that wait for a copy: those being copied
// when the last run ended, those with a resync request, and pending ones
// unless the mirror skips initial snapshots (a full resync copies them even
// then).
func (m Mirror) TablesToCopy(tables []MirrorTable) []MirrorTable {
	copyPending := m.DoInitialSnapshot || m.EffectiveStatus() == StatusSnapshotting
	var out []MirrorTable
	for _, t := range tables {
		if t.ResyncRequestedAt != nil || t.Status == TableStatusSnapshotting || (t.Status == TableStatusPending && copyPending) {
			out = append(out, t)
		}
	}
	return out
}

// ControlBlocked says why no control operation (pause, resync, schema sync,
// table resync, cut-over) may start on the mirror now, "" when one may:
// being set up or snapshotted, in a final status, or with a request or a
// table copy still to be carried out. The text completes "Cannot ... mirror
// X: ".
func (m Mirror) ControlBlocked(tables []MirrorTable) string {
	switch m.Status {
	case StatusInitializing:
		return "it is still initializing; wait until it is running"
	case StatusSnapshotting:
		return "its snapshot is in progress; wait until it is running"
	case StatusStopped:
		return "it is stopped, which is final; delete it and create it again"
	case StatusCompleted:
		return "it was cut over to its destination (status completed, which is final); delete it, or create a new mirror"
	}
	if m.PendingAction != nil {
		return fmt.Sprintf("a %s is in progress; wait until it has finished", m.PendingAction.describe())
	}
	for _, t := range tables {
		if t.ResyncRequestedAt != nil || t.Status == TableStatusSnapshotting {
			return fmt.Sprintf("table %s.%s is being resynced; wait until it has finished", t.SourceSchema, t.SourceTable)
		}
	}
	return ""
}

// ExistingRows is what a table's first copy does with rows its destination
// table already holds (mirrors.existing_destination_rows).
type ExistingRows string

// The values of ExistingRows.
const (
	// ExistingRowsRefuse: the copy does not start while the table has rows
	// (the API answers 409, the worker fails the mirror).
	ExistingRowsRefuse ExistingRows = "refuse"
	// ExistingRowsTruncate: the table is emptied before the copy.
	ExistingRowsTruncate ExistingRows = "truncate"
	// ExistingRowsKeep: the rows stay and the copy upserts the source's
	// rows over them by primary key.
	ExistingRowsKeep ExistingRows = "keep"
)

// SchemaChanges is what CDC does when a mapped source table's columns change
// (mirrors.schema_changes).
type SchemaChanges string

// The values of SchemaChanges.
const (
	// SchemaChangesApply: the change is applied to the destination at its
	// position in the stream (the default).
	SchemaChangesApply SchemaChanges = "apply"
	// SchemaChangesWarn: a WARN is logged and the destination's schema is
	// left as it is (dropped columns are kept, made nullable).
	SchemaChangesWarn SchemaChanges = "warn"
	// SchemaChangesStop: the mirror is paused before the first change that
	// would alter the destination's schema.
	SchemaChangesStop SchemaChanges = "stop"
)

// Valid reports whether s is one of the values.
func (s SchemaChanges) Valid() bool {
	return s == SchemaChangesApply || s == SchemaChangesWarn || s == SchemaChangesStop
}
