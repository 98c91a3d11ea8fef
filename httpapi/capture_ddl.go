package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/ddl"
	"github.com/pgmirror/pgmirror/engine/session"
)

// ddlCapture checks that the event trigger that captures DDL may be
// installed on the source peer's database (engine/ddl) and, with install,
// installs (or updates) it. A source that may not have it is a 400 that
// says what is needed.
func (h *handlers) ddlCapture(ctx context.Context, source db.Peer, install bool) error {
	conn, err := h.connectPeer(ctx, source)
	if isRefusal(err) {
		return err
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "Could not reach the source peer %q: %s. Check that it is running and that its settings are right (POST /v1/peers/%s/test)", source.Name, err, source.Name)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if install {
		err = ddl.Install(qctx, conn)
	} else {
		err = ddl.CheckPermitted(qctx, conn)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ddl.ErrNotPermitted):
		return errorf(http.StatusBadRequest, "Invalid request: source peer %q: %s", source.Name, err)
	default:
		return errorf(http.StatusBadRequest, "Could not install the DDL capture trigger on the source peer %q: %s", source.Name, session.Scrub(err.Error(), conn.Config().Password))
	}
}
