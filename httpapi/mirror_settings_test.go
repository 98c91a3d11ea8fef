package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMirrorSchemaChangesSetting covers the schema_changes setting: its
// default, validation at creation, how GET and list show it, and PATCH
// /v1/mirrors/{name} (admin only, paused only, 400 for unknown fields,
// bad values and an empty body).
func TestMirrorSchemaChangesSetting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()

	var cfg struct {
		SchemaChanges string `json:"schema_changes"`
	}
	b.mustDecode(http.MethodPost, "/v1/mirrors", b.adminToken, mirrorBody("m"), http.StatusCreated, &cfg)
	require.Equal(t, "apply", cfg.SchemaChanges, "default")

	body := mirrorBody("w")
	body["schema_changes"] = "warn"
	b.mustDecode(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusCreated, &cfg)
	require.Equal(t, "warn", cfg.SchemaChanges)

	body = mirrorBody("bad")
	body["schema_changes"] = "ignore"
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusBadRequest, "schema_changes", "apply", "warn", "stop")

	var got struct {
		SchemaChanges string `json:"schema_changes"`
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors/w", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, "warn", got.SchemaChanges)
	var list []struct {
		Name          string
		SchemaChanges string `json:"schema_changes"`
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors", b.viewerToken, nil, http.StatusOK, &list)
	require.Len(t, list, 2)
	require.Equal(t, "apply", list[0].SchemaChanges)
	require.Equal(t, "warn", list[1].SchemaChanges)

	stop := map[string]any{"schema_changes": "stop"}
	b.requireError(http.MethodPatch, "/v1/mirrors/ghost", b.adminToken, stop, http.StatusNotFound, "ghost")
	b.mustDo(http.MethodPatch, "/v1/mirrors/m", b.viewerToken, stop, http.StatusForbidden)
	b.requireError(http.MethodPatch, "/v1/mirrors/m", b.adminToken, stop, http.StatusConflict, "not paused", "pause")
	b.setStatus("m", "paused")
	b.requireError(http.MethodPatch, "/v1/mirrors/m", b.adminToken, map[string]any{}, http.StatusBadRequest, "changes nothing", "schema_changes")
	b.requireError(http.MethodPatch, "/v1/mirrors/m", b.adminToken, map[string]any{"schema_changes": "drop"}, http.StatusBadRequest, "schema_changes", "apply, warn, stop")
	b.requireError(http.MethodPatch, "/v1/mirrors/m", b.adminToken, map[string]any{"cdc_batch_size": 5}, http.StatusBadRequest, "cdc_batch_size")
	b.mustDecode(http.MethodPatch, "/v1/mirrors/m", b.adminToken, stop, http.StatusOK, &cfg)
	require.Equal(t, "stop", cfg.SchemaChanges)
	b.mustDecode(http.MethodGet, "/v1/mirrors/m", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, "stop", got.SchemaChanges)
	require.Equal(t, "paused", b.mirrorStatus("m").Status, "PATCH leaves the mirror paused")
	require.Contains(t, b.logMessages("m"), "Mirror settings changed")
}
