package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// rawDo sends a request and returns the status, the Retry-After header and
// the body, which must be JSON.
func (b *bundle) rawDo(method, path, token, body string) (int, string, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.server.URL+path, strings.NewReader(body))
	require.NoError(b.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err, "%s %s", method, path)
	defer resp.Body.Close()
	var v map[string]any
	require.NoError(b.t, json.NewDecoder(resp.Body).Decode(&v), "%s %s: body is not a JSON object", method, path)
	raw, _ := json.Marshal(v)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(raw)
}

// TestCatalogOutage stops the catalog cluster: every request that needs the
// catalog, the token check and login included, answers 503 with a JSON
// error and Retry-After, /ready answers 503 and /health stays 200 ok. Once
// the catalog is started again everything works without a restart of the
// service.
func TestCatalogOutage(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewCluster(t, false)
	b := setupOn(t, catalog)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	peer, err := json.Marshal(validPeer(t, "p1"))
	require.NoError(t, err)
	status, _, body := b.rawDo(http.MethodGet, "/ready", "", "")
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"status":"ready"}`, body)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, catalog.Stop(ctx))

	requests := []struct{ method, path, token, body string }{
		{http.MethodPost, "/v1/auth/login", "", `{"username":"admin","password":"admin-password"}`},
		{http.MethodGet, "/v1/auth/me", b.viewerToken, ""},
		{http.MethodGet, "/v1/peers", b.viewerToken, ""},
		{http.MethodPost, "/v1/peers", b.adminToken, string(peer)},
		{http.MethodGet, "/v1/mirrors", b.adminToken, ""},
		{http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, ""},
		{http.MethodGet, "/ready", "", ""},
	}
	for _, r := range requests {
		status, retryAfter, body := b.rawDo(r.method, r.path, r.token, r.body)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %s", r.method, r.path, body)
		require.Equal(t, "5", retryAfter, "%s %s: Retry-After", r.method, r.path)
		requireErrorShape(t, []byte(body), "%s %s", r.method, r.path)
		require.NotContains(t, body, "Internal server error")
	}
	// An invalid token is still a 401, and a bad body a 400: neither needs
	// the catalog.
	status, _, _ = b.rawDo(http.MethodGet, "/v1/peers", "not-a-token", "")
	require.Equal(t, http.StatusUnauthorized, status)
	status, _, _ = b.rawDo(http.MethodPost, "/v1/auth/login", "", `{"username":"admin"}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _, body = b.rawDo(http.MethodGet, "/health", "", "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"status":"ok"}`, body)

	require.NoError(t, catalog.Restart(ctx))
	require.Eventually(t, func() bool {
		status, _, _ := b.rawDo(http.MethodGet, "/ready", "", "")
		return status == http.StatusOK
	}, time.Minute, 200*time.Millisecond, "/ready after the catalog restarted")
	b.login("admin", "admin-password")
	b.mustDo(http.MethodGet, "/v1/peers", b.viewerToken, nil, http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, string(peer), http.StatusCreated)
}

// TestReadyNeedsTheJobQueue removes River's job table from a catalog: the
// catalog answers but the job queue is unusable, so /ready is 503.
func TestReadyNeedsTheJobQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(`DROP TABLE river_job CASCADE`)
	status, retryAfter, body := b.rawDo(http.MethodGet, "/ready", "", "")
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Equal(t, "5", retryAfter)
	require.Contains(t, body, "job queue")
}
