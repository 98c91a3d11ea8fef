package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmirror/pgmirror/db/secretbox"
	"github.com/pgmirror/pgmirror/engine/change"
)

// Store is the catalog. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	q    Executor // the pool, or the transaction of a Store from With
	keys *secretbox.Keyring
}

// Executor runs the catalog's statements: the pool or a transaction both
// are one.
type Executor interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// New returns a Store on pool that encrypts and decrypts the catalog's
// secrets (peer passwords and CA certificates, the JWT secret) with keys.
func New(pool *pgxpool.Pool, keys *secretbox.Keyring) *Store {
	return &Store{pool: pool, q: pool, keys: keys}
}

// With returns the store running its statements in tx: every method of the
// result is part of that transaction (a method that opens a transaction of
// its own opens a savepoint in it). Methods that need a connection of their
// own (the mirror lock) still use the pool.
func (s *Store) With(tx pgx.Tx) *Store {
	c := *s
	c.q = tx
	return &c
}

// Pool returns the store's connection pool (for transactions that also
// enqueue River jobs).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// User is an API account. PasswordHash is a bcrypt hash. TokenVersion is
// written into every token issued to the user; incrementing it revokes older
// tokens. The catalog increments it when the role changes, and
// UserSetPasswordHash when asked to revoke.
type User struct {
	ID           int64
	Username     string
	PasswordHash string
	Role         UserRole
	TokenVersion int64
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// UserRole is what an API user may do (users.role).
type UserRole string

// Roles of API users.
const (
	// RoleAdmin may read and change everything.
	RoleAdmin UserRole = "admin"
	// RoleViewer may read.
	RoleViewer UserRole = "viewer"
)

// Peer is a configured PostgreSQL database. Its password and CA
// certificate stay encrypted in the Peer; ConnConfig decrypts them when a
// connection is about to be opened.
type Peer struct {
	ID       int64
	Name     string
	Host     string
	Port     int
	User     string
	Database string
	SSLMode  SSLMode
	// HasSSLRootCert reports whether a CA certificate is stored for the peer.
	HasSSLRootCert bool
	CreatedAt      time.Time
	UpdatedAt      time.Time

	sealedPassword string
	sealedRootCert string // "" when the peer has none
	keys           *secretbox.Keyring
}

// SequenceName names a sequence listed in a mirror's configuration.
type SequenceName struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// Mirror is one replication stream: its configuration, desired state and
// observed status. SourcePeer and DestinationPeer are the peers' names.
type Mirror struct {
	ID                          int64
	UID                         string
	Name                        string
	SourcePeerID                int64
	DestinationPeerID           int64
	SourcePeer                  string
	DestinationPeer             string
	SnapshotNumRowsPerPartition int
	SnapshotMaxParallelWorkers  int
	SnapshotNumTablesInParallel int
	CDCSyncIntervalSeconds      int
	CDCBatchSize                int
	DoInitialSnapshot           bool
	// ExistingDestinationRows is what a table's first copy does with rows
	// its destination table already holds.
	ExistingDestinationRows ExistingRows
	// SchemaChanges is what CDC does when a mapped source table's columns
	// change.
	SchemaChanges       SchemaChanges
	PublicationName     string
	ReplicationSlotName string
	CreatedPublication  bool
	CreatedSlot         bool
	Status              MirrorStatus
	DesiredState        DesiredState
	ResumeStatus        *MirrorStatus
	PendingAction       *PendingAction
	ErrorMessage        *string
	ErrorCount          int
	NextRetryAt         *time.Time
	LastLSN             *string
	LastSyncBatchID     int64
	// Slot health, read from the source by the slot monitor (nil before
	// its first check).
	SlotLagBytes  *int64
	SlotWALStatus *string
	SlotCheckedAt *time.Time
	DeletedAt     *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// SequencesSyncedAt is when the destination's sequences were last set
	// in step with the source's (nil before the first time).
	SequencesSyncedAt *time.Time
	// Cutover is the mirror's last cut-over (nil before the first).
	Cutover *Cutover
	// Sequences are the source sequences listed in the mirror's
	// configuration, kept in step under the same names on the destination.
	Sequences []SequenceName
	// SchemaMappings are the source schemas the mirror maps as a whole
	// (empty for none).
	SchemaMappings []SchemaMapping
	// The streaming worker's last measure of the lag (mirror_lag; nil
	// before the first): see Lag.
	LagSeconds      *float64
	LagMeasuredAt   *time.Time
	AppliedCommitAt *time.Time

	// CaptureDDL: the mirror applies the schema changes captured by
	// pgmirror's event trigger on the source (engine/ddl).
	CaptureDDL bool

	// LostChanges are the mirror's tables marked as possibly missing
	// changes (see LostTable), in mapping order; empty when none is.
	LostChanges []LostTable
}

// MirrorTable is one table mapping of a mirror with its sync status and
// counters.
type MirrorTable struct {
	ID                int64
	MirrorID          int64
	Position          int
	SourceSchema      string
	SourceTable       string
	DestinationSchema string
	DestinationTable  string
	ExcludeColumns    []string
	Status            TableStatus
	ResyncRequestedAt *time.Time
	RowsSynced        int64
	RowsInserted      int64
	RowsUpdated       int64
	RowsDeleted       int64
	LastSyncedAt      *time.Time
	// RowsEstimated is the source's row estimate when the table's last
	// snapshot started (nil before any).
	RowsEstimated *int64
	// Truncates counts the source's TRUNCATEs that CDC applied to the table.
	Truncates int64
	// DestinationTakenAt is when the mirror took the destination table over
	// (nil before): its first copy checked or emptied it, or a full resync
	// was requested. Until then a copy follows the mirror's
	// ExistingDestinationRows; from then on it truncates the table.
	DestinationTakenAt *time.Time
	// FromSchemaMapping says that the table is in the mirror because its
	// source schema is mapped as a whole (SchemaMapping), not by name.
	FromSchemaMapping bool
	// LostChanges is set while the table may miss changes (its mirror's
	// slot was missing, recreated, invalidated or moved on); nil otherwise.
	LostChanges *LostTable
}

// Source is the table's source name.
func (t MirrorTable) Source() change.TableName {
	return change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}
}

// Destination is the table's destination name.
func (t MirrorTable) Destination() change.TableName {
	return change.TableName{Schema: t.DestinationSchema, Name: t.DestinationTable}
}

// LogEntry is one structured mirror log entry.
type LogEntry struct {
	ID        int64
	Level     LogLevel
	Message   string
	Details   json.RawMessage
	CreatedAt time.Time
}

// Ping checks that the catalog answers a query.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.q.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("ping catalog: %w", translate(err))
	}
	return nil
}

// Mapping is the table's mapping.
func (t MirrorTable) Mapping() change.Mapping {
	return change.Mapping{Source: t.Source(), Destination: t.Destination(), ExcludeColumns: t.ExcludeColumns}
}
