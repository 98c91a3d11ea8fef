package httpapi

import (
	"context"
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// PeerWarnings lists the mirror's peers that refuse pgmirror's connections.
// Exported (embedded in the mirror responses) for the same reason as
// MirrorConfig.
type PeerWarnings struct {
	PeerWarnings []peerWarning `json:"peer_warnings" doc:"The mirror's peers (source, destination) that refused pgmirror's last connection attempt, checked every SERVICE_SLOT_MONITOR_INTERVAL (15 s): a password changed, a role made NOLOGIN, CONNECT revoked. Replication on connections opened before keeps running, so the status may still say running; its next connection (restart, retry, snapshot, verification, cut-over) fails. Cleared once a connection works again. [] when none."`
}

type peerWarning struct {
	Peer      string      `json:"peer" doc:"Peer name."`
	Role      db.PeerRole `json:"role" doc:"The peer's role in this mirror."`
	Message   string      `json:"message" doc:"The database's error message, with its SQLSTATE."`
	Since     time.Time   `json:"since" doc:"When the refusals began."`
	CheckedAt time.Time   `json:"checked_at" doc:"The last attempt."`
}

// peerWarningsOf returns the warnings of mirror m's peers among problems.
func peerWarningsOf(m db.Mirror, problems map[int64]db.PeerProblem) PeerWarnings {
	out := PeerWarnings{PeerWarnings: []peerWarning{}}
	add := func(id int64, name, role string) {
		p, ok := problems[id]
		if !ok {
			return
		}
		msg := p.Message
		if p.SQLState != "" {
			msg += " (SQLSTATE " + p.SQLState + ")"
		}
		out.PeerWarnings = append(out.PeerWarnings, peerWarning{Peer: name, Role: db.PeerRole(role), Message: msg, Since: p.Since, CheckedAt: p.CheckedAt})
	}
	add(m.SourcePeerID, m.SourcePeer, "source")
	if m.DestinationPeerID != m.SourcePeerID {
		add(m.DestinationPeerID, m.DestinationPeer, "destination")
	}
	return out
}

// peerProblems reads the peers' connection problems for a mirror response.
func (h *handlers) peerProblems(ctx context.Context) (map[int64]db.PeerProblem, error) {
	problems, err := h.store.PeerProblems(ctx)
	if err != nil {
		return nil, h.internal(ctx, "read the peers' connection problems", err)
	}
	return problems, nil
}
