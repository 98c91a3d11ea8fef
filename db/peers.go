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
