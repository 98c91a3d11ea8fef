package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
)

// mirrorPatchInput is the body of PATCH /v1/mirrors/{name}: any subset of
// the settings that may change while the mirror is paused. Each field is a
// pointer so that an absent field leaves the setting as it is; add a new
// editable setting as a field here and in settings() below.
type mirrorPatchInput struct {
	Name string `path:"name" doc:"Mirror name."`
	Body struct {
		SchemaChanges *db.SchemaChanges `json:"schema_changes,omitempty" doc:"Changes schema_changes (absent: unchanged). What CDC does when a mapped source table's columns change (renamed, dropped, added, retyped): apply (default: the change is applied to the destination at its position in the stream and logged as Schema change applied; a type change that may have changed stored values resyncs that table beside running CDC), warn (a WARN is logged and the destination's schema is left as it is: dropped and renamed columns are kept and made nullable), or stop (the mirror is paused before the first change that would alter the destination's schema; switch the setting with PATCH /v1/mirrors/{name} or change the destination yourself, then resume). See docs/consistency.md, Schema changes."`
		CaptureDDL    *bool             `json:"capture_ddl,omitempty" doc:"Changes capture_ddl (absent: unchanged). true installs pgmirror's DDL capture event trigger on the source database now (400 when the source peer is not a superuser or the source is older than PostgreSQL 14); false stops applying captured DDL and removes the trigger unless another mirror of that source database captures DDL. See docs/consistency.md, DDL captured by the event trigger."`
	}
}

// settings turns the body into the catalog's update, with the audit details
// of what is changed; ok is false when the body changes nothing.
func (in *mirrorPatchInput) settings() (set db.MirrorSettings, details map[string]string, ok bool) {
	details = map[string]string{}
	if v := in.Body.SchemaChanges; v != nil {
		sc := db.SchemaChanges(*v)
		set.SchemaChanges = &sc
		details["schema_changes"] = string(*v)
	}
	if v := in.Body.CaptureDDL; v != nil {
		set.CaptureDDL = v
		details["capture_ddl"] = fmt.Sprint(*v)
	}
	return set, details, len(details) > 0
}

func (h *handlers) registerMirrorSettings(api huma.API) {
	register(api, adminOnly, huma.Operation{
		OperationID: "update-mirror", Method: http.MethodPatch, Path: "/v1/mirrors/{name}", Tags: []string{"Mirrors"},
		Summary: "Change a paused mirror's settings",
		Description: "Changes the settings named in the body (any subset of schema_changes, capture_ddl); absent fields keep their value. " +
			"The mirror must be paused (409 otherwise); the new settings take effect when it is resumed. 400 for an unknown field, an invalid value or an empty body.",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, h.patchMirror)
}

func (h *handlers) patchMirror(ctx context.Context, in *mirrorPatchInput) (*mirrorCreateOutput, error) {
	setAuditTarget(ctx, in.Name)
	set, details, ok := in.settings()
	if !ok {
		return nil, errorf(http.StatusBadRequest, "Invalid request: the body changes nothing: set at least one of schema_changes, capture_ddl")
	}
	if on := in.Body.CaptureDDL; on != nil && *on {
		// Installed before the setting is stored, so that a source that
		// may not have the trigger is a 400 that changes nothing.
		m, err := h.mirror(ctx, in.Name)
		if err != nil {
			return nil, err
		}
		if m.Status != db.StatusPaused {
			return nil, errorf(http.StatusConflict, "Mirror %q is not paused (status %s): pause it (POST /v1/mirrors/%s/pause), change its settings, then resume it", m.Name, m.Status, m.Name)
		}
		source, err := h.store.PeerGetByID(ctx, m.SourcePeerID)
		if err != nil {
			return nil, h.internal(ctx, "load the source peer", err)
		}
		if err := h.ddlCapture(ctx, source, true); err != nil {
			return nil, err
		}
	}
	audit := map[string]any{}
	for k, v := range details {
		audit[k] = v
	}
	setAuditDetails(ctx, audit)
	var m db.Mirror
	var tables []db.MirrorTable
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, locked db.Mirror) error {
		if locked.Status != db.StatusPaused {
			return errorf(http.StatusConflict, "Mirror %q is not paused (status %s): pause it (POST /v1/mirrors/%s/pause), change its settings, then resume it", locked.Name, locked.Status, locked.Name)
		}
		st := h.store.With(tx)
		if err := st.MirrorUpdateSettings(ctx, locked.ID, set); err != nil {
			return err
		}
		if err := st.LogInsert(ctx, locked.ID, db.LevelInfo, "Mirror settings changed", actor(ctx, details)); err != nil {
			return err
		}
		var err error
		if m, err = st.MirrorGetByID(ctx, locked.ID); err != nil {
			return err
		}
		tables, err = st.MirrorTables(ctx, locked.ID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if off := in.Body.CaptureDDL; off != nil && !*off {
		h.removeDDLCapture(ctx, m)
	}
	return &mirrorCreateOutput{Body: configResponse(m, tables)}, nil
}
