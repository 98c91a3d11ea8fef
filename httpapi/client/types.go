package client

import (
	"encoding/json"
	"time"
)

// The types below are the request and response bodies of the API, one per
// schema of the OpenAPI document (GET /openapi.json); the package's tests
// fail when a schema gains, loses or renames a field that its type here does
// not. Field comments are in the document and in docs/api.md.

// Health is the body of GET /health.
type Health struct {
	Status string `json:"status"`
}

// Ready is the body of GET /ready.
type Ready struct {
	Status string `json:"status"`
}

// LoginRequest is the body of POST /v1/auth/login.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// LoginResponse is the answer to a login: the token to send as
// Authorization: Bearer <token>.
type LoginResponse struct {
	Token     string     `json:"token"`
	Username  string     `json:"username"`
	Role      string     `json:"role"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	ExpiresIn *int64     `json:"expires_in,omitempty"`
}

// Me is the body of GET /v1/auth/me.
type Me struct {
	Username string `json:"username"`
	Role     string `json:"role"`
	// DefaultPassword is true while the user's password is still the
	// default "admin", which anyone can guess.
	DefaultPassword bool `json:"default_password"`
}

// ChangePasswordRequest is the body of POST /v1/auth/change-password.
type ChangePasswordRequest struct {
	CurrentPassword string `json:"current_password"`
	NewPassword     string `json:"new_password"`
}

// ChangePasswordResponse is the answer to a password change, with a new
// token.
type ChangePasswordResponse struct {
	Message   string     `json:"message"`
	Token     string     `json:"token"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	ExpiresIn *int64     `json:"expires_in,omitempty"`
}

// User is an account as GET /v1/users lists it.
type User struct {
	ID        int64     `json:"id"`
	Username  string    `json:"username"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

// UserCreate is the body of POST /v1/users.
type UserCreate struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Role     string `json:"role"`
}

// UserCreated is the answer to POST /v1/users.
type UserCreated struct {
	ID       int64  `json:"id"`
	Username string `json:"username"`
	Role     string `json:"role"`
}

// Deleted is the answer to the DELETE operations: the deleted name.
type Deleted struct {
	Deleted string `json:"deleted"`
}

// Peer is a peer as the API returns it (never with its password).
type Peer struct {
	Name           string    `json:"name"`
	Host           string    `json:"host"`
	Port           int       `json:"port"`
	User           string    `json:"user"`
	Database       string    `json:"database"`
	SSLMode        string    `json:"ssl_mode"`
	HasSSLRootCert bool      `json:"has_ssl_root_cert"`
	CreatedAt      time.Time `json:"created_at"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// PeerCreate is the body of POST /v1/peers.
type PeerCreate struct {
	Name        string `json:"name"`
	Host        string `json:"host"`
	Port        int    `json:"port"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Database    string `json:"database"`
	SSLMode     string `json:"ssl_mode,omitempty"`
	SSLRootCert string `json:"ssl_root_cert,omitempty"`
}

// PeerUpdate is the body of PUT /v1/peers/{name}: nil fields stay as they
// are.
type PeerUpdate struct {
	Host        *string `json:"host,omitempty"`
	Port        *int    `json:"port,omitempty"`
	User        *string `json:"user,omitempty"`
	Password    *string `json:"password,omitempty"`
	Database    *string `json:"database,omitempty"`
	SSLMode     *string `json:"ssl_mode,omitempty"`
	SSLRootCert *string `json:"ssl_root_cert,omitempty"`
}

// PeerTest is the result of POST /v1/peers/{name}/test.
type PeerTest struct {
	Success bool   `json:"success"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

// TableRef names a table of a peer.
type TableRef struct {
	Schema    string `json:"schema"`
	TableName string `json:"table_name"`
}

// TableMapping maps a source table to a destination table, or with
// SourceTable and DestinationTable "*" a whole source schema to a
// destination schema (tables created in it later included).
type TableMapping struct {
	SourceSchema      string   `json:"source_schema"`
	SourceTable       string   `json:"source_table"`
	DestinationSchema string   `json:"destination_schema"`
	DestinationTable  string   `json:"destination_table"`
	ExcludeColumns    []string `json:"exclude_columns,omitempty"`
}

// SequenceRef names a source sequence kept in step on the destination.
type SequenceRef struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// MirrorCreate is the body of POST /v1/mirrors. Zero optional fields take
// the service's defaults.
type MirrorCreate struct {
	Name                        string         `json:"name"`
	SourcePeer                  string         `json:"source_peer"`
	DestinationPeer             string         `json:"destination_peer"`
	TableMappings               []TableMapping `json:"table_mappings"`
	SnapshotNumRowsPerPartition int            `json:"snapshot_num_rows_per_partition,omitempty"`
	SnapshotMaxParallelWorkers  int            `json:"snapshot_max_parallel_workers,omitempty"`
	SnapshotNumTablesInParallel int            `json:"snapshot_num_tables_in_parallel,omitempty"`
	CDCSyncIntervalSeconds      int            `json:"cdc_sync_interval_seconds,omitempty"`
	CDCBatchSize                int            `json:"cdc_batch_size,omitempty"`
	DoInitialSnapshot           *bool          `json:"do_initial_snapshot,omitempty"`
	PublicationName             string         `json:"publication_name,omitempty"`
	ReplicationSlotName         string         `json:"replication_slot_name,omitempty"`
	ExistingDestinationRows     string         `json:"existing_destination_rows,omitempty"`
	SchemaChanges               string         `json:"schema_changes,omitempty"`
	Sequences                   []SequenceRef  `json:"sequences,omitempty"`
	CaptureDDL                  bool           `json:"capture_ddl,omitempty"`
}

// MirrorUpdate is the body of PATCH /v1/mirrors/{name}: nil fields keep
// their value.
type MirrorUpdate struct {
	SchemaChanges *string `json:"schema_changes,omitempty"`
	CaptureDDL    *bool   `json:"capture_ddl,omitempty"`
}

// MirrorConfig is a mirror's configuration as the API returns it.
type MirrorConfig struct {
	Name            string         `json:"name"`
	SourcePeer      string         `json:"source_peer"`
	DestinationPeer string         `json:"destination_peer"`
	TableMappings   []TableMapping `json:"table_mappings"`
	// ExpandedTableMappings are the tables the schema mappings cover now.
	ExpandedTableMappings       []TableMapping `json:"expanded_table_mappings"`
	SnapshotNumRowsPerPartition int            `json:"snapshot_num_rows_per_partition"`
	SnapshotMaxParallelWorkers  int            `json:"snapshot_max_parallel_workers"`
	SnapshotNumTablesInParallel int            `json:"snapshot_num_tables_in_parallel"`
	CDCSyncIntervalSeconds      int            `json:"cdc_sync_interval_seconds"`
	CDCBatchSize                int            `json:"cdc_batch_size"`
	DoInitialSnapshot           bool           `json:"do_initial_snapshot"`
	ExistingDestinationRows     string         `json:"existing_destination_rows"`
	SchemaChanges               string         `json:"schema_changes"`
	PublicationName             string         `json:"publication_name"`
	ReplicationSlotName         string         `json:"replication_slot_name"`
	Sequences                   []SequenceRef  `json:"sequences"`
	Status                      string         `json:"status"`
	CreatedAt                   time.Time      `json:"created_at"`
	CaptureDDL                  bool           `json:"capture_ddl"`
}

// SlotHealth is the mirror's replication slot as the service last read it
// on the source; all nil before the first reading.
type SlotHealth struct {
	SlotLagBytes  *int64     `json:"slot_lag_bytes"`
	SlotWALStatus *string    `json:"slot_wal_status"`
	SlotCheckedAt *time.Time `json:"slot_checked_at"`
	LagSeconds    *float64   `json:"lag_seconds"`
}

// WorkerInfo says which pgmirror replica runs the mirror now (host:pid)
// and when it last reported; both nil while no replica runs it.
type WorkerInfo struct {
	Worker       *string    `json:"worker"`
	WorkerSeenAt *time.Time `json:"worker_seen_at"`
}

// PeerWarnings lists the mirror's peers that refused pgmirror's last
// connection attempt; empty when none.
type PeerWarnings struct {
	PeerWarnings []PeerWarning `json:"peer_warnings"`
}

// PeerWarning is a peer that refuses pgmirror's connections.
type PeerWarning struct {
	Peer      string    `json:"peer"`
	Role      string    `json:"role"`
	Message   string    `json:"message"`
	Since     time.Time `json:"since"`
	CheckedAt time.Time `json:"checked_at"`
}

// MirrorSummary is one element of GET /v1/mirrors.
type MirrorSummary struct {
	Name            string  `json:"name"`
	SourcePeer      string  `json:"source_peer"`
	DestinationPeer string  `json:"destination_peer"`
	Status          string  `json:"status"`
	LastLSN         *string `json:"last_lsn"`
	ErrorMessage    *string `json:"error_message"`
	ErrorCount      int     `json:"error_count"`
	SchemaChanges   string  `json:"schema_changes"`
	SlotHealth
	WorkerInfo
	PeerWarnings
	LostChanges *LostChanges `json:"lost_changes"`
	RowsSynced  int64        `json:"rows_synced"`
	CreatedAt   time.Time    `json:"created_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

// History is a mirror's lag and throughput samples (GET
// /v1/mirrors/{name}/history).
type History struct {
	Mirror          string          `json:"mirror"`
	Since           time.Time       `json:"since"`
	IntervalSeconds int             `json:"interval_seconds"`
	Samples         []HistorySample `json:"samples"`
}

// HistorySample is one sample of a mirror's history.
type HistorySample struct {
	At                time.Time `json:"at"`
	LagSeconds        *float64  `json:"lag_seconds"`
	RowsSynced        int64     `json:"rows_synced"`
	RowsPerSecond     *float64  `json:"rows_per_second"`
	LSN               *string   `json:"lsn"`
	WALBytesPerSecond *float64  `json:"wal_bytes_per_second"`
}

// LostChanges names a mirror's tables that may miss changes because its
// replication slot was missing, recreated, invalidated or moved on; nil in
// a mirror that is not known to have lost any.
type LostChanges struct {
	SinceLSN   *string   `json:"since_lsn"`
	UntilLSN   *string   `json:"until_lsn"`
	DetectedAt time.Time `json:"detected_at"`
	Reason     string    `json:"reason"`
	Tables     []string  `json:"tables"`
	Action     string    `json:"action"`
}

// TableStatus is one table's progress in a mirror's status.
type TableStatus struct {
	TableName     string     `json:"table_name"`
	Status        string     `json:"status"`
	RowsSynced    int64      `json:"rows_synced"`
	RowsInserted  int64      `json:"rows_inserted"`
	RowsUpdated   int64      `json:"rows_updated"`
	RowsDeleted   int64      `json:"rows_deleted"`
	Truncates     int64      `json:"truncates"`
	LastSyncedAt  *time.Time `json:"last_synced_at"`
	RowsEstimated *int64     `json:"rows_estimated"`
	Progress      *float64   `json:"progress"`
	// LostChanges is set while the table may miss changes (see
	// MirrorStatus.LostChanges).
	LostChanges *TableLostChanges `json:"lost_changes"`
}

// TableLostChanges says from which source position a table may miss
// changes, and why.
type TableLostChanges struct {
	SinceLSN   *string   `json:"since_lsn"`
	UntilLSN   *string   `json:"until_lsn"`
	DetectedAt time.Time `json:"detected_at"`
	Reason     string    `json:"reason"`
}

// MirrorStatus is the body of GET /v1/mirrors/{name}: configuration,
// status, counters and the last cut-over.
type MirrorStatus struct {
	MirrorConfig
	Verification      MirrorVerification `json:"verification"`
	DesiredState      string             `json:"desired_state"`
	LastLSN           *string            `json:"last_lsn"`
	LastSyncBatchID   int64              `json:"last_sync_batch_id"`
	ErrorMessage      *string            `json:"error_message"`
	ErrorCount        int                `json:"error_count"`
	NextRetryAt       *time.Time         `json:"next_retry_at"`
	SequencesSyncedAt *time.Time         `json:"sequences_synced_at"`
	SlotHealth
	WorkerInfo
	PeerWarnings
	LostChanges *LostChanges   `json:"lost_changes"`
	Cutover     *CutoverRecord `json:"cutover"`
	Tables      []TableStatus  `json:"tables"`
	UpdatedAt   time.Time      `json:"updated_at"`
}

// Message is the answer of the control operations that only report.
type Message struct {
	Message string `json:"message"`
}

// StatusMessage is the answer to pause and resume.
type StatusMessage struct {
	Message string `json:"message"`
	Status  string `json:"status"`
}

// TableMessage is the answer to a table resync.
type TableMessage struct {
	Message string `json:"message"`
	Table   string `json:"table"`
}

// TablesPut is the body of PUT /v1/mirrors/{name}/tables: the complete
// desired set of mappings.
type TablesPut struct {
	TableMappings           []TableMapping `json:"table_mappings"`
	ExistingDestinationRows string         `json:"existing_destination_rows,omitempty"`
}

// CutoverRequest is the body of POST /v1/mirrors/{name}/cutover; nil
// fields take the service's defaults.
type CutoverRequest struct {
	LockSource        *bool  `json:"lock_source,omitempty"`
	DropSlot          *bool  `json:"drop_slot,omitempty"`
	TimeoutSeconds    *int   `json:"timeout_seconds,omitempty"`
	QuietSeconds      *int   `json:"quiet_seconds,omitempty"`
	ReverseMirrorName string `json:"reverse_mirror_name,omitempty"`
	Verify            *bool  `json:"verify,omitempty"`
	WaitSeconds       *int   `json:"wait_seconds,omitempty"`
}

// CutoverOptions are the options a cut-over runs with.
type CutoverOptions struct {
	LockSource        bool   `json:"lock_source"`
	DropSlot          bool   `json:"drop_slot"`
	TimeoutSeconds    int    `json:"timeout_seconds"`
	QuietSeconds      int    `json:"quiet_seconds"`
	ReverseMirrorName string `json:"reverse_mirror_name,omitempty"`
}

// CutoverStep is one step of a cut-over.
type CutoverStep struct {
	Name       string         `json:"name"`
	State      string         `json:"state"`
	StartedAt  time.Time      `json:"started_at"`
	DurationMS int64          `json:"duration_ms"`
	Detail     map[string]any `json:"detail,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// CutoverRecord is a mirror's last cut-over with its steps.
type CutoverRecord struct {
	State         string         `json:"state"`
	RequestedAt   time.Time      `json:"requested_at"`
	RequestedBy   string         `json:"requested_by,omitempty"`
	StartedAt     *time.Time     `json:"started_at,omitempty"`
	FinishedAt    *time.Time     `json:"finished_at,omitempty"`
	Options       CutoverOptions `json:"options"`
	TargetLSN     string         `json:"target_lsn,omitempty"`
	Steps         []CutoverStep  `json:"steps"`
	Error         string         `json:"error,omitempty"`
	ReverseMirror string         `json:"reverse_mirror,omitempty"`
	// Warnings name what the cut-over did not check (row counts only) or
	// carry to the destination.
	Warnings []string `json:"warnings"`
	// RowCountsOnly names the tables whose checksums were not compared.
	RowCountsOnly []string `json:"row_counts_only"`
}

// CutoverResponse is the answer to a cut-over request.
type CutoverResponse struct {
	Message string `json:"message"`
	Status  string `json:"status"`
	// Warnings name what the cut-over did not carry to the destination
	// (the record's warnings once it completed).
	Warnings []string       `json:"warnings"`
	Cutover  *CutoverRecord `json:"cutover"`
}

// LogEntry is one of a mirror's log entries.
type LogEntry struct {
	ID        int64           `json:"id"`
	Level     string          `json:"level"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details"`
	CreatedAt time.Time       `json:"created_at"`
}

// LogQuery filters and pages GET /v1/mirrors/{name}/logs; zero fields are
// left out (the service's defaults: limit 50, offset 0, no filter).
type LogQuery struct {
	Limit  int
	Offset int
	Search string
	Level  string
}

// LogPage is one page of a mirror's logs, newest first.
type LogPage struct {
	Logs   []LogEntry `json:"logs"`
	Total  int        `json:"total"`
	Offset int        `json:"offset"`
	Limit  int        `json:"limit"`
}

// AuditEntry is one entry of the audit log.
type AuditEntry struct {
	ID         int64           `json:"id"`
	CreatedAt  time.Time       `json:"created_at"`
	UserID     int64           `json:"user_id"`
	Username   string          `json:"username"`
	Action     string          `json:"action"`
	TargetType string          `json:"target_type"`
	TargetName string          `json:"target_name,omitempty"`
	Result     string          `json:"result"`
	Status     int             `json:"status"`
	Details    json.RawMessage `json:"details"`
}

// AuditQuery filters and pages GET /v1/audit; zero fields are left out.
type AuditQuery struct {
	Limit      int
	Offset     int
	Username   string
	Action     string
	TargetType string
	TargetName string
	Result     string
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Entries []AuditEntry `json:"entries"`
	Total   int          `json:"total"`
	Offset  int          `json:"offset"`
	Limit   int          `json:"limit"`
}
