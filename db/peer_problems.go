package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// This file holds the catalog queries of peer_problems: peers that refuse
// pgmirror's connections, as the slot monitor (jobs/slot_monitor.go) last
// found them.

// PeerProblem is a peer whose last connection attempt the database
// refused.
type PeerProblem struct {
	PeerID int64
	// Message is the database's message (never a password).
	Message string
	// SQLState is the error's SQLSTATE ("" when none).
	SQLState string
	// Since is when the refusals began; CheckedAt the last attempt.
	Since, CheckedAt time.Time
}

// PeerUse is a peer of a mirror that has not reached a final status, in one
// role.
type PeerUse struct {
	PeerID   int64
	MirrorID int64
	Mirror   string
	Role     PeerRole
}

// PeersInUse returns the peers of every live mirror that has not reached a
// final status (stopped or completed), each with its mirror and role.
func (s *Store) PeersInUse(ctx context.Context) ([]PeerUse, error) {
	rows, err := s.q.Query(ctx, `
		SELECT p.peer_id, m.id, m.name, p.role
		FROM mirrors m
		CROSS JOIN LATERAL (VALUES (m.source_peer_id, 'source'), (m.destination_peer_id, 'destination')) AS p(peer_id, role)
		WHERE m.deleted_at IS NULL AND m.status NOT IN ('stopped', 'completed')
		ORDER BY p.peer_id, m.id, p.role DESC`)
	if err != nil {
		return nil, fmt.Errorf("list the peers of mirrors: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PeerUse, error) {
		var u PeerUse
		return u, row.Scan(&u.PeerID, &u.MirrorID, &u.Mirror, &u.Role)
	})
	if err != nil {
		return nil, fmt.Errorf("list the peers of mirrors: %w", err)
	}
	return out, nil
}

// PeerProblemSet records that peer peerID refused a connection with
// message. It reports whether the peer was fine before (the problem is
// new); a known problem keeps its since and gets the latest message.
func (s *Store) PeerProblemSet(ctx context.Context, peerID int64, message, sqlState string) (started bool, err error) {
	err = s.q.QueryRow(ctx, `
		INSERT INTO peer_problems AS pp (peer_id, message, sqlstate) VALUES ($1, $2, nullif($3, ''))
		ON CONFLICT (peer_id) DO UPDATE SET message = excluded.message, sqlstate = excluded.sqlstate, checked_at = now()
		RETURNING pp.since = pp.checked_at`, peerID, message, sqlState).Scan(&started)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			return false, nil // the peer was deleted meanwhile
		}
		return false, fmt.Errorf("record the connection problem of peer %d: %w", peerID, translate(err))
	}
	return started, nil
}

// PeerProblemClear forgets peer peerID's connection problem, and reports
// whether it had one.
func (s *Store) PeerProblemClear(ctx context.Context, peerID int64) (PeerProblem, bool, error) {
	var p PeerProblem
	var state *string
	err := s.q.QueryRow(ctx, `DELETE FROM peer_problems WHERE peer_id = $1 RETURNING peer_id, message, sqlstate, since, checked_at`, peerID).
		Scan(&p.PeerID, &p.Message, &state, &p.Since, &p.CheckedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return PeerProblem{}, false, nil
	}
	if err != nil {
		return PeerProblem{}, false, fmt.Errorf("clear the connection problem of peer %d: %w", peerID, err)
	}
	if state != nil {
		p.SQLState = *state
	}
	return p, true, nil
}

// PeerProblems returns every peer's connection problem by peer id.
func (s *Store) PeerProblems(ctx context.Context) (map[int64]PeerProblem, error) {
	rows, err := s.q.Query(ctx, `SELECT peer_id, message, coalesce(sqlstate, ''), since, checked_at FROM peer_problems`)
	if err != nil {
		return nil, fmt.Errorf("read peer problems: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PeerProblem, error) {
		var p PeerProblem
		return p, row.Scan(&p.PeerID, &p.Message, &p.SQLState, &p.Since, &p.CheckedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("read peer problems: %w", err)
	}
	out := make(map[int64]PeerProblem, len(list))
	for _, p := range list {
		out[p.PeerID] = p
	}
	return out, nil
}
