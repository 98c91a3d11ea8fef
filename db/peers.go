package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const peerColumns = `id, name, host, port, "user", password, database, ssl_mode, created_at, updated_at`

func scanPeer(row pgx.Row) (Peer, error) {
	var p Peer
	err := row.Scan(&p.ID, &p.Name, &p.Host, &p.Port, &p.User, &p.Password, &p.Database, &p.SSLMode, &p.CreatedAt, &p.UpdatedAt)
	return p, err
}

// PeerGetByID returns the peer with the given id.
func (s *Store) PeerGetByID(ctx context.Context, id int64) (Peer, error) {
	p, err := scanPeer(s.pool.QueryRow(ctx, `SELECT `+peerColumns+` FROM peers WHERE id = $1`, id))
	if err != nil {
		return Peer{}, fmt.Errorf("get peer %d: %w", id, translate(err))
	}
	return p, nil
}

// PeerGetByName returns the peer with the given name.
func (s *Store) PeerGetByName(ctx context.Context, name string) (Peer, error) {
	p, err := scanPeer(s.pool.QueryRow(ctx, `SELECT `+peerColumns+` FROM peers WHERE name = $1`, name))
	if err != nil {
		return Peer{}, fmt.Errorf("get peer %q: %w", name, translate(err))
	}
	return p, nil
}

// PeerCreateParams are the fields of a new peer.
type PeerCreateParams struct {
	Name, Host string
	Port       int
	User       string
	Password   string
	Database   string
	SSLMode    string
}

// PeerCreate creates a peer. A taken name gives ErrConflict.
func (s *Store) PeerCreate(ctx context.Context, p PeerCreateParams) (Peer, error) {
	peer, err := scanPeer(s.pool.QueryRow(ctx, `INSERT INTO peers (name, host, port, "user", password, database, ssl_mode)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+peerColumns,
		p.Name, p.Host, p.Port, p.User, p.Password, p.Database, p.SSLMode))
	if err != nil {
		return Peer{}, fmt.Errorf("create peer %q: %w", p.Name, translate(err))
	}
	return peer, nil
}

// PeerList returns every peer ordered by name.
func (s *Store) PeerList(ctx context.Context) ([]Peer, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+peerColumns+` FROM peers ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	peers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Peer, error) { return scanPeer(r) })
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	return peers, nil
}

// PeerUpdateParams are the fields to change; nil leaves a field as it is.
type PeerUpdateParams struct {
	Host     *string
	Port     *int
	User     *string
	Password *string
	Database *string
	SSLMode  *string
}

// PeerUpdate changes the given fields of the named peer and returns it.
func (s *Store) PeerUpdate(ctx context.Context, name string, p PeerUpdateParams) (Peer, error) {
	peer, err := scanPeer(s.pool.QueryRow(ctx, `UPDATE peers SET
			host = COALESCE($2, host), port = COALESCE($3, port), "user" = COALESCE($4, "user"),
			password = COALESCE($5, password), database = COALESCE($6, database), ssl_mode = COALESCE($7, ssl_mode)
		WHERE name = $1 RETURNING `+peerColumns,
		name, p.Host, p.Port, p.User, p.Password, p.Database, p.SSLMode))
	if err != nil {
		return Peer{}, fmt.Errorf("update peer %q: %w", name, translate(err))
	}
	return peer, nil
}

// PeerInUseError means a peer cannot be deleted because a mirror (possibly
// one whose deletion is still being cleaned up) uses it. It matches
// ErrConflict with errors.Is.
type PeerInUseError struct {
	Peer     string
	Mirror   string
	Deleting bool
}

func (e *PeerInUseError) Error() string {
	if e.Deleting {
		return fmt.Sprintf("peer %q is used by mirror %q, which is being deleted", e.Peer, e.Mirror)
	}
	return fmt.Sprintf("peer %q is used by mirror %q", e.Peer, e.Mirror)
}

// Is makes PeerInUseError match ErrConflict.
func (e *PeerInUseError) Is(target error) bool { return target == ErrConflict }

// PeerDelete deletes the named peer. It returns ErrNotFound when no such
// peer exists and a *PeerInUseError while any mirror references it.
func (s *Store) PeerDelete(ctx context.Context, name string) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("delete peer %q: %w", name, err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // rollback after commit is a no-op
	var id int64
	// Lock the peer so no mirror can start using it between the check and the delete.
	if err := tx.QueryRow(ctx, `SELECT id FROM peers WHERE name = $1 FOR UPDATE`, name).Scan(&id); err != nil {
		return fmt.Errorf("delete peer %q: %w", name, translate(err))
	}
	var mirror string
	var deleting bool
	err = tx.QueryRow(ctx, `SELECT name, deleted_at IS NOT NULL FROM mirrors
		WHERE source_peer_id = $1 OR destination_peer_id = $1 ORDER BY deleted_at IS NOT NULL, name LIMIT 1`, id).Scan(&mirror, &deleting)
	if err == nil {
		return &PeerInUseError{Peer: name, Mirror: mirror, Deleting: deleting}
	}
	if err != pgx.ErrNoRows {
		return fmt.Errorf("delete peer %q: find mirrors using it: %w", name, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM peers WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete peer %q: %w", name, translate(err))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("delete peer %q: %w", name, translate(err))
	}
	return nil
}
