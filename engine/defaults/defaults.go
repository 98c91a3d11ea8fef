// Package defaults is the one place the default of every mirror setting
// and of the service's tunables is written. The API's documented defaults,
// the catalog's column DEFAULTs, the service configuration and the
// engine's fallbacks all use these values; tests compare the API document
// and the migrated catalog with them (httpapi's TestDefaultsAgree).
package defaults

import "time"

// Mirror settings (POST /v1/mirrors; columns of the catalog's mirrors).
const (
	// SnapshotRowsPerPartition is how many rows one copy partition holds.
	SnapshotRowsPerPartition = 500000
	// SnapshotMaxParallelWorkers is how many partitions of one table are
	// copied at once.
	SnapshotMaxParallelWorkers = 4
	// SnapshotTablesInParallel is how many tables are copied at once.
	SnapshotTablesInParallel = 4
	// CDCSyncIntervalSeconds is the longest time applied changes wait
	// before their position is recorded.
	CDCSyncIntervalSeconds = 60
	// CDCBatchSize is the most changes in one applied batch.
	CDCBatchSize = 10000
	// DoInitialSnapshot: a new mirror copies its tables first.
	DoInitialSnapshot = true
	// ExistingDestinationRows: a first copy refuses a destination table
	// that already has rows.
	ExistingDestinationRows = "refuse"
	// SchemaChanges: source column changes are applied while streaming.
	SchemaChanges = "apply"
	// CaptureDDL: no event trigger is installed on the source.
	CaptureDDL = false
)

// CDCSyncInterval is CDCSyncIntervalSeconds as a duration.
const CDCSyncInterval = CDCSyncIntervalSeconds * time.Second

// Service tunables (SERVICE_* environment variables, docs/configuration.md).
const (
	MirrorWorkers = 200
	LogRetention  = 7 * 24 * time.Hour
	// MetricsHistoryRetention is how long the lag and throughput samples of
	// mirrors are kept; MetricsHistoryInterval is how often a streaming
	// mirror gets one.
	MetricsHistoryRetention = 24 * time.Hour
	MetricsHistoryInterval  = 30 * time.Second
	ShutdownTimeout         = 30 * time.Second
	SlotMonitorInterval     = 15 * time.Second
	VerifyScheduleInterval  = 30 * time.Second
	SequenceSyncInterval    = 30 * time.Second
	// CutoverChecksumMaxBytes is the largest source table whose checksums
	// a cut-over compares when the request does not say.
	CutoverChecksumMaxBytes = 1 << 30
	LoginMaxFailures        = 5
	LoginMaxFailuresPerAddr = 20
	LoginFailureWindow      = 15 * time.Minute
	// SupervisorInterval is how often the supervisor looks for mirrors
	// without a worker.
	SupervisorInterval = 30 * time.Second
	// HeartbeatTimeout is how long a run may go without a sign of life
	// before another replica takes its mirror.
	HeartbeatTimeout = 2 * time.Minute
	// RunBudget is how long one River job streams a mirror before it hands
	// over to the next run.
	RunBudget = 10 * time.Minute
	// MaxFailures is how many failed runs in a row stop a mirror.
	MaxFailures = 2016
	// SchemaCheckInterval is how often a mirror mapping whole schemas looks
	// for tables created or dropped in them.
	SchemaCheckInterval = 5 * time.Second
)
