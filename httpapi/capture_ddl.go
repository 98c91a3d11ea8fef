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

// removeDDLCapture removes the DDL capture trigger from the source database
// of m, whose capture_ddl was just turned off, unless another live mirror of
// that database captures DDL (by its peer, or by its replication slot in that
// database when its peer names the database differently). It does its best:
// a source that cannot be reached or a user that may not drop the trigger
// leaves a WARN in the mirror's log naming what to drop by hand (the
// trigger's messages are then ignored by mirrors that do not capture DDL).
func (h *handlers) removeDDLCapture(ctx context.Context, m db.Mirror) {
	warn := func(err error) {
		_ = h.store.LogInsert(context.WithoutCancel(ctx), m.ID, db.LevelWarn, "Could not remove the DDL capture trigger from the source",
			map[string]any{"error": err.Error(), "remove_by_hand": "DROP EVENT TRIGGER " + ddl.CommandEndTrigger + "; DROP EVENT TRIGGER " + ddl.SQLDropTrigger})
	}
	others, err := h.store.MirrorOthersCaptureDDL(ctx, m.ID)
	if err != nil || others {
		if err != nil {
			warn(err)
		}
		return
	}
	source, err := h.store.PeerGetByID(ctx, m.SourcePeerID)
	if err != nil {
		warn(err)
		return
	}
	conn, err := h.connectPeer(ctx, source)
	if err != nil {
		warn(err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	slots, err := h.store.MirrorOthersCaptureDDLSlots(ctx, m.ID)
	if err != nil {
		warn(err)
		return
	}
	if shared, err := ddl.SlotsInDatabase(qctx, conn, slots); err != nil || len(shared) > 0 {
		if err != nil {
			warn(errors.New(session.Scrub(err.Error(), conn.Config().Password)))
		}
		return
	}
	if err := ddl.Remove(qctx, conn); err != nil {
		warn(errors.New(session.Scrub(err.Error(), conn.Config().Password)))
	}
}
