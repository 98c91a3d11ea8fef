package db

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the catalog. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Pool returns the store's connection pool (for transactions that also
// enqueue River jobs).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// User is an API account. PasswordHash is a bcrypt hash.
type User struct {
	ID           int64
	Username     string
	PasswordHash string
	Role         string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Roles of API users.
const (
	RoleAdmin  = "admin"
	RoleViewer = "viewer"
)

// Peer is a configured PostgreSQL database. Password is never returned by
// the API.
type Peer struct {
	ID        int64
	Name      string
	Host      string
	Port      int
	User      string
	Password  string
	Database  string
	SSLMode   string
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ConnString returns a postgres:// URL for the peer with its SSL mode and a
// 10 second connect timeout. It contains the password: never log it.
func (p Peer) ConnString() string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.UserPassword(p.User, p.Password),
		Host:   p.Host + ":" + strconv.Itoa(p.Port),
		Path:   "/" + p.Database,
	}
	if isIPv6(p.Host) {
		u.Host = "[" + p.Host + "]:" + strconv.Itoa(p.Port)
	}
	q := url.Values{}
	q.Set("sslmode", p.SSLMode)
	q.Set("connect_timeout", "10")
	u.RawQuery = q.Encode()
	return u.String()
}

func isIPv6(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] == ':' {
			return true
		}
	}
	return false
}

// Mirror statuses.
const (
	StatusInitializing = "initializing"
	StatusSnapshotting = "snapshotting"
	StatusRunning      = "running"
	StatusPaused       = "paused"
	StatusError        = "error"
	StatusStopped      = "stopped"
)

// Desired states and pending actions written by the API.
const (
	DesiredRunning = "running"
	DesiredPaused  = "paused"

	ActionResync     = "resync"
	ActionSyncSchema = "sync_schema"
)

// Table statuses.
const (
	TableStatusPending      = "pending"
	TableStatusSnapshotting = "snapshotting"
	TableStatusRunning      = "running"
	TableStatusError        = "error"
)

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
	PublicationName             string
	ReplicationSlotName         string
	CreatedPublication          bool
	CreatedSlot                 bool
	Status                      string
	DesiredState                string
	ResumeStatus                *string
	PendingAction               *string
	ErrorMessage                *string
	ErrorCount                  int
	NextRetryAt                 *time.Time
	LastLSN                     *string
	LastSyncBatchID             int64
	// Slot health, read from the source by the slot monitor (nil before
	// its first check).
	SlotLagBytes  *int64
	SlotWALStatus *string
	SlotCheckedAt *time.Time
	DeletedAt     *time.Time
	CreatedAt     time.Time
	UpdatedAt     time.Time
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
	Status            string
	ResyncRequestedAt *time.Time
	RowsSynced        int64
	RowsInserted      int64
	RowsUpdated       int64
	RowsDeleted       int64
	LastSyncedAt      *time.Time
}

// LogEntry is one structured mirror log entry.
type LogEntry struct {
	ID        int64
	Level     string
	Message   string
	Details   json.RawMessage
	CreatedAt time.Time
}

// Ping checks that the catalog answers a query.
func (s *Store) Ping(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, `SELECT 1`); err != nil {
		return fmt.Errorf("ping catalog: %w", translate(err))
	}
	return nil
}
