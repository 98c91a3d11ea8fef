package jobs

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

// runStore is the catalog as a mirror's run sees it: the db.Store methods
// that mirrorRun and what it drives (the batch and snapshot reporters, the
// cut-over, the verification hold, the origin filter, the lost-changes
// records) call, in the groups below, which the parts of a run that need
// only one group take instead (runHold a holdStore, the origin filter a
// loopReader, ...). *db.Store satisfies it, and production runs use the
// replica's Store (Config.Store). It exists so that a test can hand a run
// a real Store wrapped to make a named call fail (for a while, or once)
// and watch what the run does about it; the methods are listed by the
// compiler's needs, not chosen: a run that calls another Store method
// adds it to its group here.
type runStore interface {
	mirrorReader
	runStatus
	tableStore
	cutoverStore
	holdStore
	logStore
}

// tableLister reads a mirror's tables.
type tableLister interface {
	MirrorTables(ctx context.Context, mirrorID int64) ([]db.MirrorTable, error)
}

// peerReader reads a peer.
type peerReader interface {
	PeerGetByID(ctx context.Context, id int64) (db.Peer, error)
}

// loopReader reads what the origin filter decides from: every mirror's
// ends and the peers (origin_loops.go).
type loopReader interface {
	MirrorEnds(ctx context.Context) ([]db.MirrorEnd, error)
	PeerList(ctx context.Context) ([]db.Peer, error)
}

// mirrorReader reads the mirror, its tables and peers as they are now.
type mirrorReader interface {
	tableLister
	peerReader
	loopReader
	MirrorGetByID(ctx context.Context, id int64) (db.Mirror, error)
	MirrorGetByName(ctx context.Context, name string) (db.Mirror, error)
	MirrorConfirmCeiling(ctx context.Context, mirrorID int64) (lsn string, found bool, err error)
}

// lostChangesRecorder records changes a mirror may have lost
// (lost_changes.go).
type lostChangesRecorder interface {
	MirrorRecordLostChanges(ctx context.Context, mirrorID int64, l db.LostChanges) (tables, added []string, err error)
}

// runStatus writes the mirror's status, position and the outcome of its
// control requests.
type runStatus interface {
	lostChangesRecorder
	MirrorMarkRunning(ctx context.Context, mirrorID int64) error
	MirrorSetStatus(ctx context.Context, mirrorID int64, status db.MirrorStatus, clearError bool) error
	MirrorSetCreated(ctx context.Context, mirrorID int64, publication, slot bool) error
	MirrorSetLastLSN(ctx context.Context, mirrorID int64, lsn string) error
	MirrorRecordProgress(ctx context.Context, mirrorID int64, lsn string, batchID int64, tables map[int64]change.Counts) error
	MirrorRecordLag(ctx context.Context, mirrorID int64, lagSeconds float64, measuredAt, appliedCommit time.Time) error
	MirrorRecordFailure(ctx context.Context, mirrorID int64, f db.MirrorFailure) (count int, stopped bool, err error)
	MirrorResetErrorCount(ctx context.Context, mirrorID int64) error
	MirrorPause(ctx context.Context, id int64) error
	MirrorSetPausedIfRequested(ctx context.Context, mirrorID int64) error
	MirrorClearPendingAction(ctx context.Context, mirrorID int64, action db.PendingAction) error
	MirrorRaiseConfirmCeiling(ctx context.Context, mirrorID int64, lsn string) (string, error)
	MirrorSequencesSynced(ctx context.Context, mirrorID int64, at time.Time) error
}

// tableStore writes the state of the mirror's tables: copies, resyncs,
// tables dropped on the source or added from a mapped schema.
type tableStore interface {
	MirrorTablesSetStatus(ctx context.Context, mirrorID int64, ids []int64, status db.TableStatus) error
	MirrorTablesTakeDestination(ctx context.Context, mirrorID int64, ids []int64) error
	MirrorTableSnapshotStarted(ctx context.Context, tableID int64, estimate int64) error
	MirrorTableSnapshotProgress(ctx context.Context, tableID int64, rows int64) error
	MirrorTableSnapshotted(ctx context.Context, tableID int64, rows int64, requestSeen *time.Time) error
	MirrorTableLostChangesCopied(ctx context.Context, tableID int64, at string, fromSlot bool) (bool, error)
	MirrorTableRequestResync(ctx context.Context, mirrorID int64, source change.TableName) error
	MirrorTableSetDropped(ctx context.Context, tableID int64) (bool, error)
	MirrorTableAddFromSchema(ctx context.Context, mirrorID int64, m change.Mapping) (bool, error)
}

// cutoverStore writes the cut-over record. The cut-over completes in one
// catalog transaction (cutoverRun.complete): what it writes goes through
// the *db.Store of With, the real one.
type cutoverStore interface {
	MirrorCutoverProgress(ctx context.Context, id int64, c db.Cutover) error
	MirrorCutoverFailed(ctx context.Context, id int64, c db.Cutover) error
	MirrorCutoverFinalRecord(ctx context.Context, id int64, c db.Cutover, slotDropped bool) error
	BeginTx(ctx context.Context) (pgx.Tx, error)
	With(tx pgx.Tx) *db.Store
}

// holdStore reads and moves a verification's hold on the run's stream
// (verify_hold.go).
type holdStore interface {
	VerificationHoldRequest(ctx context.Context, mirrorID int64) (db.Verification, bool, error)
	VerificationSetHold(ctx context.Context, id int64, from []db.HoldState, to db.HoldState, floor, at, applied string) (bool, error)
	VerificationByID(ctx context.Context, id int64) (db.Verification, error)
}

// logStore writes the mirror's log.
type logStore interface {
	LogInsert(ctx context.Context, mirrorID int64, level db.LogLevel, message string, details any) error
	LogInsertAt(ctx context.Context, mirrorID int64, at time.Time, level db.LogLevel, message string, details any) error
}

// runLocks is the replica's lock holder as a mirror's run sees it.
// *db.LockHolder satisfies it (Config.Locks); a test wraps it to make
// TryLock fail while it plays a catalog that cannot be reached, so that a
// run whose lock connection died cannot take its lock back.
type runLocks interface {
	// TryLock takes the mirror's lock, nil when another session holds it.
	TryLock(ctx context.Context, mirrorID int64) (*db.MirrorLock, error)
	// Subscribe delivers the mirror's control notifications.
	Subscribe(mirrorID int64) (<-chan struct{}, func())
	// Running is how many mirror locks the replica holds.
	Running() int
}

// runHooks are the points where a test makes a step of a run fail on
// purpose, after the step did its work, to watch the run undo it. Unset in
// production.
type runHooks struct {
	// afterCutoverStep, when set, is called once a cut-over step other
	// than complete did its work; an error it returns fails the step as
	// the step's own error would (cutoverRun.step).
	afterCutoverStep func(step string) error
	// afterDestinationPrepared, when set, is called once a run prepared
	// the destination tables, with the source tables it is about to copy.
	afterDestinationPrepared func(ctx context.Context, copying []change.TableName)
}

var (
	_ runStore = (*db.Store)(nil)
	_ runLocks = (*db.LockHolder)(nil)
)
