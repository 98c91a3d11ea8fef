package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

const peerColumns = `id, name, host, port, "user", password, ssl_root_cert, database, ssl_mode, created_at, updated_at`

// scanPeer reads a peer row; the store's keyring goes with it so that
// ConnConfig can decrypt its secrets when it connects.
func (s *Store) scanPeer(row pgx.Row) (Peer, error) {
	var p Peer
	var rootCert *string
	err := row.Scan(&p.ID, &p.Name, &p.Host, &p.Port, &p.User, &p.sealedPassword, &rootCert, &p.Database, &p.SSLMode, &p.CreatedAt, &p.UpdatedAt)
	if rootCert != nil {
		p.sealedRootCert, p.HasSSLRootCert = *rootCert, true
	}
	p.keys = s.keys
	return p, err
}

// Places the peer secrets are bound to (the associated data of their
// encryption): a value copied to another peer or column does not decrypt.
func peerPasswordPlace(peer string) string { return "peers.password:" + peer }
func peerRootCertPlace(peer string) string { return "peers.ssl_root_cert:" + peer }

// sealPeerSecrets encrypts the password and CA certificate given for the
// named peer; a nil input stays nil and an empty CA certificate becomes
// the empty string (which clears it).
func (s *Store) sealPeerSecrets(peer string, password, rootCert *string) (sealedPassword, sealedRootCert *string, err error) {
	if password != nil {
		v, err := s.keys.Seal([]byte(*password), peerPasswordPlace(peer))
		if err != nil {
			return nil, nil, err
		}
		sealedPassword = &v
	}
	if rootCert != nil {
		v := ""
		if *rootCert != "" {
			if v, err = s.keys.Seal([]byte(*rootCert), peerRootCertPlace(peer)); err != nil {
				return nil, nil, err
			}
		}
		sealedRootCert = &v
	}
	return sealedPassword, sealedRootCert, nil
}

// PeerGetByID returns the peer with the given id.
func (s *Store) PeerGetByID(ctx context.Context, id int64) (Peer, error) {
	p, err := s.scanPeer(s.q.QueryRow(ctx, `SELECT `+peerColumns+` FROM peers WHERE id = $1`, id))
	if err != nil {
		return Peer{}, fmt.Errorf("get peer %d: %w", id, translate(err))
	}
	return p, nil
}

// PeerGetByName returns the peer with the given name.
func (s *Store) PeerGetByName(ctx context.Context, name string) (Peer, error) {
	p, err := s.scanPeer(s.q.QueryRow(ctx, `SELECT `+peerColumns+` FROM peers WHERE name = $1`, name))
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
	SSLMode    SSLMode
	// SSLRootCert is PEM CA certificates for verify-ca / verify-full; ""
	// means none. Check it with ParseRootCerts first.
	SSLRootCert string
}

// PeerCreate creates a peer, its password and CA certificate encrypted with
// the current key. A taken name gives ErrConflict.
func (s *Store) PeerCreate(ctx context.Context, p PeerCreateParams) (Peer, error) {
	password, rootCert, err := s.sealPeerSecrets(p.Name, &p.Password, &p.SSLRootCert)
	if err != nil {
		return Peer{}, fmt.Errorf("create peer %q: %w", p.Name, err)
	}
	peer, err := s.scanPeer(s.q.QueryRow(ctx, `INSERT INTO peers (name, host, port, "user", password, ssl_root_cert, database, ssl_mode)
		VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), $7, $8) RETURNING `+peerColumns,
		p.Name, p.Host, p.Port, p.User, *password, *rootCert, p.Database, p.SSLMode))
	if err != nil {
		return Peer{}, fmt.Errorf("create peer %q: %w", p.Name, translate(err))
	}
	return peer, nil
}

// DraftPeer returns the peer that PeerCreate would store for p, without
// storing it: for checks that connect to a peer before it is saved.
func (s *Store) DraftPeer(p PeerCreateParams) (Peer, error) {
	return s.DraftPeerUpdate(Peer{Name: p.Name, Host: p.Host, Port: p.Port, User: p.User, Database: p.Database, SSLMode: p.SSLMode},
		PeerUpdateParams{Password: &p.Password, SSLRootCert: &p.SSLRootCert})
}

// DraftPeerUpdate returns cur with the changes u applied as PeerUpdate
// would store them, without storing them.
func (s *Store) DraftPeerUpdate(cur Peer, u PeerUpdateParams) (Peer, error) {
	password, rootCert, err := s.sealPeerSecrets(cur.Name, u.Password, u.SSLRootCert)
	if err != nil {
		return Peer{}, fmt.Errorf("peer %q: %w", cur.Name, err)
	}
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&cur.Host, u.Host)
	set(&cur.User, u.User)
	set(&cur.Database, u.Database)
	if u.SSLMode != nil {
		cur.SSLMode = *u.SSLMode
	}
	if u.Port != nil {
		cur.Port = *u.Port
	}
	set(&cur.sealedPassword, password)
	if rootCert != nil {
		cur.sealedRootCert, cur.HasSSLRootCert = *rootCert, *rootCert != ""
	}
	cur.keys = s.keys
	return cur, nil
}

// PeerList returns every peer ordered by name.
func (s *Store) PeerList(ctx context.Context) ([]Peer, error) {
	rows, err := s.q.Query(ctx, `SELECT `+peerColumns+` FROM peers ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list peers: %w", err)
	}
	peers, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Peer, error) { return s.scanPeer(r) })
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
	SSLMode  *SSLMode
	// SSLRootCert replaces the CA certificates; "" removes them.
	SSLRootCert *string
}

// PeerUpdate changes the given fields of the named peer and returns it. A
// new password or CA certificate is encrypted with the current key.
func (s *Store) PeerUpdate(ctx context.Context, name string, p PeerUpdateParams) (Peer, error) {
	password, rootCert, err := s.sealPeerSecrets(name, p.Password, p.SSLRootCert)
	if err != nil {
		return Peer{}, fmt.Errorf("update peer %q: %w", name, err)
	}
	peer, err := s.scanPeer(s.q.QueryRow(ctx, `UPDATE peers SET
			host = COALESCE($2, host), port = COALESCE($3, port), "user" = COALESCE($4, "user"),
			password = COALESCE($5, password), database = COALESCE($6, database), ssl_mode = COALESCE($7, ssl_mode),
			ssl_root_cert = CASE WHEN $8::text IS NULL THEN ssl_root_cert ELSE NULLIF($8, '') END
		WHERE name = $1 RETURNING `+peerColumns,
		name, p.Host, p.Port, p.User, password, p.Database, p.SSLMode, rootCert))
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
	tx, err := s.q.Begin(ctx)
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
