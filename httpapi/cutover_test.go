package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A cut-over starts only from a running mirror whose tables all replicate,
// and the request is recorded for the worker (no worker runs here: the
// answer after wait_seconds 0 is 202 with the requested cut-over).
func TestCutoverRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	for name, status := range map[string]string{"c-init": "initializing", "c-paused": "paused", "c-err": "error", "c-stop": "stopped", "c-run": "running", "c-other": "running"} {
		b.createMirror(name)
		b.setStatus(name, status)
	}
	errorText := func(raw []byte) string {
		var e struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		return e.Error
	}
	for _, name := range []string{"c-init", "c-paused", "c-err", "c-stop"} {
		raw := b.mustDo(http.MethodPost, "/v1/mirrors/"+name+"/cutover", b.adminToken, nil, http.StatusConflict)
		require.Contains(t, errorText(raw), "a cut-over needs a running mirror")
	}
	// Tables still waiting for their snapshot.
	raw := b.mustDo(http.MethodPost, "/v1/mirrors/c-run/cutover", b.adminToken, map[string]any{"wait_seconds": 0}, http.StatusConflict)
	require.Contains(t, errorText(raw), "wait until every table is running")
	b.exec(`UPDATE mirror_tables SET status = 'running'`)
	raw = b.mustDo(http.MethodPost, "/v1/mirrors/c-run/cutover", b.adminToken, map[string]any{"reverse_mirror_name": "c-other", "wait_seconds": 0}, http.StatusConflict)
	require.Contains(t, errorText(raw), `Mirror "c-other" already exists`)
	b.mustDo(http.MethodPost, "/v1/mirrors/c-run/cutover", b.viewerToken, nil, http.StatusForbidden)

	var out struct {
		Message string `json:"message"`
		Status  string `json:"status"`
		Cutover struct {
			State   string         `json:"state"`
			Options map[string]any `json:"options"`
		} `json:"cutover"`
	}
	b.mustDecode(http.MethodPost, "/v1/mirrors/c-run/cutover", b.adminToken, map[string]any{"wait_seconds": 0, "reverse_mirror_name": "c-back", "lock_source": true}, http.StatusAccepted, &out)
	require.Equal(t, "running", out.Status)
	require.Equal(t, "requested", out.Cutover.State)
	require.Equal(t, map[string]any{"lock_source": true, "drop_slot": true, "timeout_seconds": 300.0, "quiet_seconds": 5.0, "reverse_mirror_name": "c-back"}, out.Cutover.Options)
	require.Contains(t, out.Message, "in progress")
	// A second request, or another control request, waits for this one.
	raw = b.mustDo(http.MethodPost, "/v1/mirrors/c-run/cutover", b.adminToken, nil, http.StatusConflict)
	require.Contains(t, errorText(raw), "a cut-over is in progress")
	b.mustDo(http.MethodPost, "/v1/mirrors/c-run/pause", b.adminToken, nil, http.StatusConflict)
	var got struct {
		Cutover struct {
			State string `json:"state"`
		} `json:"cutover"`
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors/c-run", b.adminToken, nil, http.StatusOK, &got)
	require.Equal(t, "requested", got.Cutover.State)
}
