// Package dbident tells whether two connections reach the same database of
// the same PostgreSQL server, whatever host name, address, port or proxy
// leads there. pgmirror uses it to refuse a peer that is its own catalog.
package dbident

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Identity names one database of one PostgreSQL server, as the server
// itself reports it.
type Identity struct {
	// SystemID is pg_control_system().system_identifier, shared by a
	// cluster and its physical standbys; "" when the user may not call the
	// function (it is PUBLIC by default, but can be revoked).
	SystemID string
	// StartedAt is pg_postmaster_start_time(): the same value through every
	// connection to one running server, readable by every user.
	StartedAt time.Time
	// DatabaseOID and Database name the database of the connection.
	DatabaseOID uint32
	Database    string
}

// Querier is what Of needs: *pgx.Conn, *pgxpool.Pool and pgx.Tx have it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Of asks the server behind q which database it is.
func Of(ctx context.Context, q Querier) (Identity, error) {
	var id Identity
	var canReadSystemID bool
	err := q.QueryRow(ctx, `SELECT d.oid, d.datname, pg_postmaster_start_time(),
			has_function_privilege('pg_catalog.pg_control_system()', 'EXECUTE')
		FROM pg_catalog.pg_database d WHERE d.datname = current_database()`).
		Scan(&id.DatabaseOID, &id.Database, &id.StartedAt, &canReadSystemID)
	if err != nil {
		return Identity{}, fmt.Errorf("identify the database: %w", err)
	}
	if canReadSystemID {
		if err := q.QueryRow(ctx, `SELECT system_identifier::text FROM pg_catalog.pg_control_system()`).Scan(&id.SystemID); err != nil {
			return Identity{}, fmt.Errorf("read the system identifier: %w", err)
		}
	}
	return id, nil
}

// Same reports whether a and b are the same database: the same name and OID
// in the same cluster. The cluster is compared by system identifier when
// both sides could read it (which also matches a physical standby of it),
// otherwise by postmaster start time (which matches the same running
// server only).
func Same(a, b Identity) bool {
	if a.DatabaseOID != b.DatabaseOID || a.Database != b.Database {
		return false
	}
	if a.SystemID != "" && b.SystemID != "" {
		return a.SystemID == b.SystemID
	}
	return a.StartedAt.Equal(b.StartedAt)
}
