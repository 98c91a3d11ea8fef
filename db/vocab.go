package db

// The closed lists of values the catalog, the engine and the API share.
// Each is a Go type with its values here; vocab_test.go holds every list
// to the catalog's CHECK constraints (and MirrorStatus's transitions to
// the catalog's trigger), and the API's OpenAPI document takes its enums
// from these lists (httpapi/vocabulary.go).

// SSLMode is how pgmirror connects to a peer over TLS (peers.ssl_mode,
// libpq's sslmode values that pgmirror supports).
type SSLMode string

// SSL modes.
const (
	SSLDisable    SSLMode = "disable"
	SSLRequire    SSLMode = "require"
	SSLVerifyCA   SSLMode = "verify-ca"
	SSLVerifyFull SSLMode = "verify-full"
	SSLPrefer     SSLMode = "prefer"
)

// PeerRole is the part a peer plays in a mirror.
type PeerRole string

// Peer roles.
const (
	PeerSource      PeerRole = "source"
	PeerDestination PeerRole = "destination"
)

// Every value of each vocabulary, in the order the API documents them.
var (
	DesiredStates      = []DesiredState{DesiredRunning, DesiredPaused}
	PendingActions     = []PendingAction{ActionResync, ActionSyncSchema, ActionCutover}
	TableStatuses      = []TableStatus{TableStatusPending, TableStatusSnapshotting, TableStatusRunning, TableStatusError, TableStatusDropped}
	ExistingRowsValues = []ExistingRows{ExistingRowsRefuse, ExistingRowsTruncate, ExistingRowsKeep}
	SchemaChangesModes = []SchemaChanges{SchemaChangesApply, SchemaChangesWarn, SchemaChangesStop}
	VerificationStates = []VerificationState{VerifyRunning, VerifyDone, VerifyFailed, VerifyCancelled}
	HoldStates         = []HoldState{HoldRequested, HoldArmed, HoldHeld, HoldReleased, HoldExpired}
	CutoverStates      = []CutoverState{CutoverRequested, CutoverRunning, CutoverCompleted, CutoverFailed}
	StepStates         = []StepState{StepRunning, StepDone, StepFailed}
	LostReasons        = []LostReason{LostSlotMissing, LostSlotRecreated, LostSlotInvalidated, LostSlotBehind}
	LogLevels          = []LogLevel{LevelInfo, LevelWarn, LevelError, LevelDebug}
	UserRoles          = []UserRole{RoleAdmin, RoleViewer}
	SSLModes           = []SSLMode{SSLDisable, SSLRequire, SSLVerifyCA, SSLVerifyFull, SSLPrefer}
	AuditResults       = []AuditResult{AuditSuccess, AuditFailure}
	AuditTargetTypes   = []AuditTargetType{AuditTargetUser, AuditTargetPeer, AuditTargetMirror}
	LoginSubjectKinds  = []LoginSubjectKind{LoginSubjectUser, LoginSubjectAddress}
	PeerRoles          = []PeerRole{PeerSource, PeerDestination}
)

// mirrorTransitions lists, for each mirror status, the statuses it may
// change to (staying is always allowed). The catalog's trigger
// mirrors_status_transition enforces the same list.
var mirrorTransitions = map[MirrorStatus][]MirrorStatus{
	StatusInitializing: {StatusSnapshotting, StatusRunning, StatusError, StatusStopped},
	StatusSnapshotting: {StatusRunning, StatusError, StatusStopped},
	StatusRunning:      {StatusPaused, StatusSnapshotting, StatusInitializing, StatusError, StatusStopped, StatusCompleted},
	StatusPaused:       {StatusRunning, StatusSnapshotting, StatusInitializing, StatusError, StatusStopped},
	StatusError:        {StatusInitializing, StatusSnapshotting, StatusRunning, StatusPaused, StatusStopped},
}

// CanBecome reports whether a mirror in status s may change to status to.
func (s MirrorStatus) CanBecome(to MirrorStatus) bool {
	if s == to {
		return true
	}
	for _, t := range mirrorTransitions[s] {
		if t == to {
			return true
		}
	}
	return false
}
