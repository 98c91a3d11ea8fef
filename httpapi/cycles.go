package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/dbident"
	"github.com/pgmirror/pgmirror/engine/change"
)

// cycleIdentifyTimeout bounds the connection made to identify one peer's
// database for the cycle check.
const cycleIdentifyTimeout = 5 * time.Second

// refuseCycle answers 409 when a mirror from source to dest over mappings
// (a new one, or one whose tables change) would close a loop with a mirror that still runs (any status but
// the final completed and stopped): one that reads dest's database and
// writes source's, and writes a table the new mirror reads or reads a
// table the new mirror writes. Such mirrors would feed each other's writes
// back (or, where pgmirror's writes are marked with a replication origin,
// leave each other's out). A completed mirror is no longer replicating: a
// cut-over's reverse mirror runs beside the completed original by design.
//
// The databases are compared by what their servers report (system
// identifier and database OID, engine dbident), so that two peers spelling
// one host differently still match; a peer that cannot be reached now is
// compared by host, port and database name.
//
// self is the mirror whose tables change (PUT tables), 0 for a new one.
func (h *handlers) refuseCycle(ctx context.Context, self int64, source, dest db.Peer, mappings []change.Mapping) error {
	mirrors, err := h.store.MirrorList(ctx)
	if err != nil {
		return h.internal(ctx, "list the mirrors", err)
	}
	// Every mirror's tables in one query: a create is checked against every
	// other mirror.
	tablesOf, err := h.store.MirrorTablesByMirror(ctx)
	if err != nil {
		return h.internal(ctx, "load the mirrors' tables", err)
	}
	reads := map[change.TableName]bool{}  // tables the new mirror reads on source
	writes := map[change.TableName]bool{} // tables the new mirror writes on dest
	for _, m := range mappings {
		reads[m.Source], writes[m.Destination] = true, true
	}
	ids := &peerIdentities{h: h, known: map[int64]peerIdentity{}}
	for _, other := range mirrors {
		if other.Status.Final() || other.ID == self {
			continue
		}
		var shared []string
		for _, t := range tablesOf[other.ID] {
			switch {
			case writes[t.Source()]:
				shared = append(shared, t.Source().String())
			case reads[t.Destination()]:
				shared = append(shared, t.Destination().String())
			}
		}
		if len(shared) == 0 {
			continue
		}
		if !ids.same(ctx, other.SourcePeerID, dest) || !ids.same(ctx, other.DestinationPeerID, source) {
			continue
		}
		slices.Sort(shared)
		return errorf(http.StatusConflict, "Mirror %q already replicates from the database of destination peer %q into the database of source peer %q, over %s: "+
			"a mirror in the opposite direction over the same tables would close a loop, each mirror feeding the other's writes back. "+
			"Delete mirror %q first, cut it over (a completed mirror no longer replicates), or map other tables",
			other.Name, dest.Name, source.Name, strings.Join(shared, ", "), other.Name)
	}
	return nil
}

// peerIdentity is what a peer's server said about its database (ok), or the
// peer itself when it could not be asked.
type peerIdentity struct {
	peer db.Peer
	id   dbident.Identity
	ok   bool
}

// peerIdentities identifies peers' databases once per request.
type peerIdentities struct {
	h     *handlers
	known map[int64]peerIdentity
}

func (p *peerIdentities) of(ctx context.Context, peer db.Peer) peerIdentity {
	if pi, ok := p.known[peer.ID]; ok {
		return pi
	}
	pi := peerIdentity{peer: peer}
	cctx, cancel := context.WithTimeout(ctx, cycleIdentifyTimeout)
	defer cancel()
	if conn, err := dialPeer(cctx, peer); err == nil {
		pi.id, err = dbident.Of(cctx, conn)
		pi.ok = err == nil
		conn.Close(context.WithoutCancel(ctx))
	}
	p.known[peer.ID] = pi
	return pi
}

// same reports whether peer id names the same database as peer b.
func (p *peerIdentities) same(ctx context.Context, id int64, b db.Peer) bool {
	if id == b.ID {
		return true
	}
	a, err := p.h.store.PeerGetByID(ctx, id)
	if err != nil {
		return false
	}
	if samePeer(a, b) {
		return true
	}
	ia, ib := p.of(ctx, a), p.of(ctx, b)
	if ia.ok && ib.ok {
		return dbident.Same(ia.id, ib.id)
	}
	return false
}
