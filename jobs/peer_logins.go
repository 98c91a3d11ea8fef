package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/db"
)

// This file is the slot monitor's second task: every pass it finds the
// peers of live mirrors that refuse pgmirror's connections (a password
// changed, a role made NOLOGIN, CONNECT revoked) and records them in
// peer_problems, which GET /v1/mirrors shows as peer_warnings. Replication
// that runs on connections opened before goes on (PostgreSQL checks
// credentials only when a session starts), so without this the mirror
// would show running until its next reconnect failed.

// peerLogins collects, during one slot monitor pass, what connecting to
// each peer gave: nil when the peer took the connection, the error
// otherwise.
type peerLogins struct {
	mu   sync.Mutex
	seen map[int64]error
}

func (l *peerLogins) record(peerID int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[peerID] = err
}

func (l *peerLogins) checked(peerID int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.seen[peerID]
	return ok
}

// refusal returns the database's error when err is a connection attempt
// that the server refused (authentication, authorization, a missing
// database, too many connections), nil for anything else (a network
// failure or a server starting up says nothing about credentials, a failed
// query after the login neither).
func refusal(err error) *pgconn.PgError {
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if errors.As(err, &connErr) && errors.As(connErr, &pgErr) && pgErr.Code != "57P03" {
		return pgErr
	}
	return nil // 57P03: the server is starting up or shutting down
}

// checkPeerLogins connects to the peers of live mirrors that this pass did
// not reach yet (destinations, sources without a slot), at most
// slotCheckParallel at a time, and records every peer's outcome.
func (w *SlotMonitorWorker) checkPeerLogins(ctx context.Context, logins *peerLogins, sem chan struct{}) {
	uses, err := w.cfg.Store.PeersInUse(ctx)
	if err != nil {
		w.cfg.Logger.Warn("slot monitor: cannot list the mirrors' peers", "error", err)
		return
	}
	byPeer := map[int64][]db.PeerUse{}
	var order []int64
	for _, u := range uses {
		if _, ok := byPeer[u.PeerID]; !ok {
			order = append(order, u.PeerID)
		}
		byPeer[u.PeerID] = append(byPeer[u.PeerID], u)
	}
	var wg sync.WaitGroup
	for _, id := range order {
		if logins.checked(id) {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			logins.record(id, w.tryLogin(ctx, id))
		}()
	}
	wg.Wait()
	for peerID, err := range logins.seen {
		w.recordLogin(ctx, peerID, err, byPeer[peerID])
	}
}

// tryLogin opens and closes a connection to peer peerID (at most
// slotCheckTimeout).
func (w *SlotMonitorWorker) tryLogin(ctx context.Context, peerID int64) error {
	peer, err := w.cfg.Store.PeerGetByID(ctx, peerID)
	if err != nil {
		return fmt.Errorf("load peer %d: %w", peerID, err)
	}
	ctx, cancel := context.WithTimeout(ctx, slotCheckTimeout)
	defer cancel()
	cfg, err := peer.ConnConfig()
	if err != nil {
		return fmt.Errorf("peer %q: %w", peer.Name, err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to peer %q: %w", peer.Name, err)
	}
	closeConn(conn)
	return nil
}

// recordLogin records the outcome err of connecting to peer peerID: a
// refusal starts or updates its problem, a connection clears it; other
// failures change nothing. A problem that starts or ends is logged in the
// log of every mirror in uses.
func (w *SlotMonitorWorker) recordLogin(ctx context.Context, peerID int64, err error, uses []db.PeerUse) {
	store := w.cfg.Store
	if err == nil {
		p, cleared, cerr := store.PeerProblemClear(ctx, peerID)
		if cerr != nil {
			w.cfg.Logger.Warn("slot monitor: clear a peer's connection problem", "peer_id", peerID, "error", cerr)
			return
		}
		if !cleared {
			return
		}
		w.cfg.Logger.Info("peer accepts connections again", "peer_id", peerID, "refused_since", p.Since)
		for _, u := range uses {
			w.mirrorLog(ctx, u, db.LevelInfo, "Peer accepts connections again", map[string]any{
				"peer_role": u.Role, "refused_since": p.Since.UTC().Format(time.RFC3339),
				"refused_seconds": int64(time.Since(p.Since).Seconds())})
		}
		return
	}
	pgErr := refusal(err)
	if pgErr == nil {
		return
	}
	started, serr := store.PeerProblemSet(ctx, peerID, pgErr.Message, pgErr.Code)
	if serr != nil {
		w.cfg.Logger.Warn("slot monitor: record a peer's connection problem", "peer_id", peerID, "error", serr)
		return
	}
	if !started {
		return
	}
	w.cfg.Logger.Warn("peer refuses connections", "peer_id", peerID, "error", pgErr.Message, "sqlstate", pgErr.Code)
	for _, u := range uses {
		w.mirrorLog(ctx, u, db.LevelWarn, "Peer refuses connections", map[string]any{
			"peer_role": u.Role, "error": pgErr.Message, "sqlstate": pgErr.Code,
			"effect": "replication on connections opened before goes on, but the mirror's next connection to this peer (a restart, a retry, a snapshot, a verification, a cut-over) fails",
			"action": "fix the peer user's login on the database (password, LOGIN, CONNECT), or update the peer (PUT /v1/peers/{name}) with the new password"})
	}
}

// mirrorLog writes an entry to the log of u's mirror; details get the
// peer's name.
func (w *SlotMonitorWorker) mirrorLog(ctx context.Context, u db.PeerUse, level db.LogLevel, msg string, details map[string]any) {
	if peer, err := w.cfg.Store.PeerGetByID(ctx, u.PeerID); err == nil {
		details["peer"] = peer.Name
	}
	if err := w.cfg.Store.LogInsert(ctx, u.MirrorID, level, msg, details); err != nil {
		w.cfg.Logger.Warn("write mirror log entry", "mirror", u.Mirror, "error", err)
	}
}
