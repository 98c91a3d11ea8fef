package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// endpoint is one row of the permission matrix: a request that succeeds
// with status ok when an allowed caller sends it.
type endpoint struct {
	method string
	// route is the path template as in the spec and the OpenAPI document.
	route string
	// path is the concrete path requested.
	path string
	perm string // open, authed or adminOnly
	// body returns the request body for a caller of the given role ("" for
	// no token).
	body func(role string) any
	ok   int
}

func fixed(v any) func(string) any { return func(string) any { return v } }

func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.destPeer("p-del")
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "u-del", "password": "pw", "role": "viewer"}, http.StatusCreated)
	for name, status := range map[string]string{
		"m": "running", "m-pause": "running", "m-resume": "paused", "m-resync": "running", "m-tresync": "running",
		"m-retry": "error", "m-schema": "running", "m-tables": "paused", "m-del": "initializing", "m-cut": "running",
		"m-ver": "running", "m-rep": "running", "m-set": "paused",
	} {
		b.createMirror(name)
		b.setStatus(name, status)
	}
	b.exec(`UPDATE mirror_tables SET status = 'running' WHERE mirror_id = (SELECT id FROM mirrors WHERE name = 'm-cut' AND deleted_at IS NULL)`)
	// Verifications 1 (to read) and 2 (to cancel) of mirror m.
	b.exec(`INSERT INTO verifications (mirror_id) SELECT id FROM mirrors WHERE name = 'm' AND deleted_at IS NULL`)
	b.exec(`INSERT INTO verifications (mirror_id) SELECT id FROM mirrors WHERE name = 'm' AND deleted_at IS NULL`)
	// Verification 3, done with a difference to repair, of mirror m-rep.
	b.exec(`INSERT INTO verifications (mirror_id, state, rows_differing, result) SELECT id, 'done', 1,
		'[{"table": "public.orders", "rows_differing": 1, "repair_ranges": {"key_columns": ["id"], "key_types": ["integer"], "ranges": [{"lo": null, "hi": null}]}}]'
		FROM mirrors WHERE name = 'm-rep' AND deleted_at IS NULL`)
	passwordFor := map[string]string{"admin": "admin-password", "viewer": "viewer-password"}

	matrix := []endpoint{
		{http.MethodGet, "/health", "/health", "open", nil, http.StatusOK},
		{http.MethodGet, "/ready", "/ready", "open", nil, http.StatusOK},
		{http.MethodPost, "/v1/auth/login", "/v1/auth/login", "open", fixed(map[string]any{"username": "viewer", "password": "viewer-password"}), http.StatusOK},
		{http.MethodGet, "/v1/auth/me", "/v1/auth/me", "authed", nil, http.StatusOK},
		{http.MethodPost, "/v1/auth/change-password", "/v1/auth/change-password", "authed", func(role string) any {
			// Change to the same password so that later logins still work.
			return map[string]any{"current_password": passwordFor[role], "new_password": passwordFor[role]}
		}, http.StatusOK},
		{http.MethodGet, "/v1/users", "/v1/users", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/users", "/v1/users", "adminOnly", fixed(map[string]any{"username": "u-new", "password": "pw", "role": "viewer"}), http.StatusCreated},
		{http.MethodDelete, "/v1/users/{username}", "/v1/users/u-del", "adminOnly", nil, http.StatusOK},
		{http.MethodGet, "/v1/peers", "/v1/peers", "authed", nil, http.StatusOK},
		{http.MethodPost, "/v1/peers", "/v1/peers", "adminOnly", fixed(validPeer(t, "p-new")), http.StatusCreated},
		{http.MethodGet, "/v1/peers/{name}", "/v1/peers/src", "authed", nil, http.StatusOK},
		{http.MethodPut, "/v1/peers/{name}", "/v1/peers/src", "adminOnly", fixed(map[string]any{"host": "127.0.0.1"}), http.StatusOK},
		{http.MethodDelete, "/v1/peers/{name}", "/v1/peers/p-del", "adminOnly", nil, http.StatusOK},
		{http.MethodGet, "/v1/peers/{name}/tables", "/v1/peers/src/tables", "authed", nil, http.StatusOK},
		{http.MethodPost, "/v1/peers/{name}/test", "/v1/peers/src/test", "adminOnly", nil, http.StatusOK},
		{http.MethodGet, "/v1/mirrors", "/v1/mirrors", "authed", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors", "/v1/mirrors", "adminOnly", fixed(mirrorBody("m-new")), http.StatusCreated},
		{http.MethodGet, "/v1/mirrors/{name}", "/v1/mirrors/m", "authed", nil, http.StatusOK},
		{http.MethodDelete, "/v1/mirrors/{name}", "/v1/mirrors/m-del", "adminOnly", nil, http.StatusOK},
		{http.MethodPatch, "/v1/mirrors/{name}", "/v1/mirrors/m-set", "adminOnly", fixed(map[string]any{"schema_changes": "warn"}), http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/pause", "/v1/mirrors/m-pause/pause", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/resume", "/v1/mirrors/m-resume/resume", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/resync", "/v1/mirrors/m-resync/resync", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/resync/{table}", "/v1/mirrors/m-tresync/resync/public.orders", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/retry", "/v1/mirrors/m-retry/retry", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/cutover", "/v1/mirrors/m-cut/cutover", "adminOnly", fixed(map[string]any{"wait_seconds": 0}), http.StatusAccepted},
		{http.MethodPost, "/v1/mirrors/{name}/sync-schema", "/v1/mirrors/m-schema/sync-schema", "adminOnly", nil, http.StatusOK},
		{http.MethodPut, "/v1/mirrors/{name}/tables", "/v1/mirrors/m-tables/tables", "adminOnly",
			fixed(map[string]any{"table_mappings": []any{mapping("orders", "orders"), mapping("items", "items")}}), http.StatusOK},
		{http.MethodGet, "/v1/mirrors/{name}/tables", "/v1/mirrors/m/tables", "authed", nil, http.StatusOK},
		{http.MethodGet, "/v1/mirrors/{name}/available-tables", "/v1/mirrors/m/available-tables", "authed", nil, http.StatusOK},
		{http.MethodGet, "/v1/mirrors/{name}/logs", "/v1/mirrors/m/logs", "authed", nil, http.StatusOK},
		{http.MethodGet, "/v1/mirrors/{name}/history", "/v1/mirrors/m/history", "authed", nil, http.StatusOK},
		{http.MethodGet, "/v1/audit", "/v1/audit", "adminOnly", nil, http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/verify", "/v1/mirrors/m-ver/verify", "adminOnly", nil, http.StatusAccepted},
		{http.MethodGet, "/v1/mirrors/{name}/verifications", "/v1/mirrors/m/verifications", "authed", nil, http.StatusOK},
		{http.MethodGet, "/v1/mirrors/{name}/verifications/{id}", "/v1/mirrors/m/verifications/1", "authed", nil, http.StatusOK},
		{http.MethodDelete, "/v1/mirrors/{name}/verifications/{id}", "/v1/mirrors/m/verifications/2", "adminOnly", nil, http.StatusOK},
		{http.MethodPut, "/v1/mirrors/{name}/verify-interval", "/v1/mirrors/m/verify-interval", "adminOnly", fixed(map[string]any{"verify_interval_seconds": 3600}), http.StatusOK},
		{http.MethodPost, "/v1/mirrors/{name}/verifications/{id}/repair", "/v1/mirrors/m-rep/verifications/3/repair", "adminOnly", nil, http.StatusAccepted},
	}

	// The matrix covers every operation the server offers, and nothing else.
	var spec struct {
		Paths map[string]map[string]json.RawMessage
	}
	b.mustDecode(http.MethodGet, "/openapi.json", "", nil, http.StatusOK, &spec)
	var offered, tested []string
	for path, ops := range spec.Paths {
		for method := range ops {
			offered = append(offered, strings.ToUpper(method)+" "+path)
		}
	}
	for _, e := range matrix {
		tested = append(tested, e.method+" "+e.route)
	}
	sort.Strings(offered)
	sort.Strings(tested)
	require.Equal(t, offered, tested)

	bodyFor := func(e endpoint, role string) any {
		if e.body == nil {
			return nil
		}
		return e.body(role)
	}

	// First every refusal, so that a refused request that did act anyway
	// makes the admin's request below fail (a second delete is a 404, a
	// second pause a 409, a second create a 409).
	for _, e := range matrix {
		t.Run("refused "+e.method+" "+e.route, func(t *testing.T) {
			bt := b.on(t)
			if e.perm == "open" {
				bt.mustDo(e.method, e.path, "", bodyFor(e, ""), e.ok)
				bt.mustDo(e.method, e.path, b.viewerToken, bodyFor(e, "viewer"), e.ok)
				return
			}
			bt.requireError(e.method, e.path, "", bodyFor(e, "admin"), http.StatusUnauthorized, "bearer token")
			bt.requireError(e.method, e.path, "", nil, http.StatusUnauthorized, "bearer token")
			bt.requireError(e.method, e.path, "garbage", bodyFor(e, "admin"), http.StatusUnauthorized, "Invalid token")
			bt.requireError(e.method, e.path, b.adminToken+"x", bodyFor(e, "admin"), http.StatusUnauthorized, "Invalid token")
			if e.perm == "adminOnly" {
				bt.requireError(e.method, e.path, b.viewerToken, bodyFor(e, "viewer"), http.StatusForbidden, "admin")
				bt.requireError(e.method, e.path, b.viewerToken, nil, http.StatusForbidden, "admin")
			}
		})
	}
	for _, e := range matrix {
		t.Run("allowed "+e.method+" "+e.route, func(t *testing.T) {
			bt := b.on(t)
			if e.perm == "authed" {
				bt.mustDo(e.method, e.path, b.viewerToken, bodyFor(e, "viewer"), e.ok)
			}
			bt.mustDo(e.method, e.path, b.adminToken, bodyFor(e, "admin"), e.ok)
		})
	}

	// The admin's requests did what they say.
	require.Equal(t, "paused", b.mirrorStatus("m-pause").Status)
	require.Equal(t, "running", b.mirrorStatus("m-resume").Status)
	b.requireError(http.MethodGet, "/v1/mirrors/m-del", b.adminToken, nil, http.StatusNotFound)
	b.requireError(http.MethodGet, "/v1/peers/p-del", b.adminToken, nil, http.StatusNotFound)
	b.mustDo(http.MethodGet, "/v1/mirrors/m-new", b.adminToken, nil, http.StatusOK)
	b.mustDo(http.MethodGet, "/v1/peers/p-new", b.adminToken, nil, http.StatusOK)
	b.login("u-new", "pw")
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "u-del", "password": "pw"}, http.StatusUnauthorized)
}
