package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

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
	peer := validPeer(t, "p1")
	require.JSONEq(t, `{"status":"ready"}`, string(b.mustDo(http.MethodGet, "/ready", "", nil, http.StatusOK)))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, catalog.Stop(ctx))

	requests := []struct {
		method, path, token string
		body                any
	}{
		{http.MethodPost, "/v1/auth/login", "", `{"username":"admin","password":"admin-password"}`},
		{http.MethodGet, "/v1/auth/me", b.viewerToken, nil},
		{http.MethodGet, "/v1/peers", b.viewerToken, nil},
		{http.MethodPost, "/v1/peers", b.adminToken, peer},
		{http.MethodGet, "/v1/mirrors", b.adminToken, nil},
		{http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil},
		{http.MethodGet, "/ready", "", nil},
	}
	for _, r := range requests {
		status, header, body := b.doHeaders(r.method, r.path, r.token, r.body)
		require.Equal(t, http.StatusServiceUnavailable, status, "%s %s: %s", r.method, r.path, body)
		require.Equal(t, "5", header.Get("Retry-After"), "%s %s: Retry-After", r.method, r.path)
		require.NotContains(t, string(body), "Internal server error")
	}
	// An invalid token is still a 401, and a bad body a 400: neither needs
	// the catalog.
	b.requireError(http.MethodGet, "/v1/peers", "not-a-token", nil, http.StatusUnauthorized, "Invalid token")
	b.requireError(http.MethodPost, "/v1/auth/login", "", `{"username":"admin"}`, http.StatusBadRequest, "password")
	require.JSONEq(t, `{"status":"ok"}`, string(b.mustDo(http.MethodGet, "/health", "", nil, http.StatusOK)))

	require.NoError(t, catalog.Restart(ctx))
	require.Eventually(t, func() bool {
		status, _ := b.do(http.MethodGet, "/ready", "", nil)
		return status == http.StatusOK
	}, time.Minute, 200*time.Millisecond, "/ready after the catalog restarted")
	b.login("admin", "admin-password")
	b.mustDo(http.MethodGet, "/v1/peers", b.viewerToken, nil, http.StatusOK)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, peer, http.StatusCreated)
}

// TestReadyNeedsTheJobQueue removes River's job table from a catalog: the
// catalog answers but the job queue is unusable, so /ready is 503.
func TestReadyNeedsTheJobQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(`DROP TABLE river_job CASCADE`)
	status, header, body := b.doHeaders(http.MethodGet, "/ready", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, status, "%s", body)
	require.Equal(t, "5", header.Get("Retry-After"))
	require.Contains(t, string(body), "job queue")
}
