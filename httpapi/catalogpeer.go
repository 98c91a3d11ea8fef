package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/dbident"
)

// catalogCheckTimeout bounds the connection that creating or updating a
// peer makes to see whether the peer is the catalog.
const catalogCheckTimeout = 5 * time.Second

// refuseCatalog answers 400 when conn, a connection to peer p, reaches the
// catalog database itself: a mirror from or to it would expose or
// overwrite pgmirror's users, secrets and state. Another database of the
// catalog's server is allowed. An error that is not an *apiError means the
// peer could not be identified.
func (h *handlers) refuseCatalog(ctx context.Context, p db.Peer, conn *pgx.Conn) error {
	peer, err := dbident.Of(ctx, conn)
	if err != nil {
		return fmt.Errorf("connected, but could not tell whether it is pgmirror's catalog: %w", err)
	}
	catalog, err := h.store.Identity(ctx)
	if err != nil {
		return h.internal(ctx, "identify the catalog database", err)
	}
	if dbident.Same(peer, catalog) {
		return errorf(http.StatusBadRequest, "Peer %q points at pgmirror's own catalog database (database %q of the same PostgreSQL server), whose tables hold pgmirror's users, secrets and state: a peer must be another database. Choose another database or server",
			p.Name, peer.Database)
	}
	return nil
}

// refuseCatalogPeer connects to p, if it can within catalogCheckTimeout,
// and answers 400 when p is the catalog database itself. A peer that
// cannot be reached or identified now is accepted: every later connection
// the API makes to it (test, tables, mirror creation) checks again.
func (h *handlers) refuseCatalogPeer(ctx context.Context, p db.Peer) error {
	cctx, cancel := context.WithTimeout(ctx, catalogCheckTimeout)
	defer cancel()
	conn, err := h.connectPeer(cctx, p)
	if isRefusal(err) {
		return err
	}
	if err != nil {
		h.logger.DebugContext(ctx, "peer not compared with the catalog: it cannot be reached now", "peer", p.Name, "error", err)
		return nil
	}
	conn.Close(context.WithoutCancel(ctx))
	return nil
}

// isRefusal reports whether an error of connectPeer is an answer for the
// client as it is (an *apiError, such as the catalog refusal) rather than a
// connection failure to describe.
func isRefusal(err error) bool {
	var e *apiError
	return errors.As(err, &e)
}
