package httpapi_test

import (
	"net/http"
	"testing"
)

// TestTextPostgresCannotStore sends NUL characters and bytes that are not
// UTF-8 in paths, queries and JSON strings: the catalog cannot store or
// compare them, and the answer is a 400, not a 500.
func TestTextPostgresCannotStore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("m")
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/v1/peers/%00", nil},
		{http.MethodGet, "/v1/peers/%ff", nil},
		{http.MethodPut, "/v1/peers/a%00", map[string]any{"host": "x"}},
		{http.MethodDelete, "/v1/peers/%00", nil},
		{http.MethodGet, "/v1/peers/%ff/tables", nil},
		{http.MethodPost, "/v1/peers/%00/test", nil},
		{http.MethodGet, "/v1/mirrors/%00", nil},
		{http.MethodDelete, "/v1/mirrors/%ff", nil},
		{http.MethodPost, "/v1/mirrors/%00/pause", nil},
		{http.MethodGet, "/v1/mirrors/%00/logs", nil},
		{http.MethodGet, "/v1/mirrors/m/logs?search=%00", nil},
		{http.MethodGet, "/v1/mirrors/m/logs?search=%ff", nil},
		{http.MethodDelete, "/v1/users/%00", nil},
		{http.MethodPost, "/v1/auth/login", `{"username": "a\u0000b", "password": "p"}`},
		{http.MethodPost, "/v1/users", `{"username": "a\u0000b", "password": "p", "role": "viewer"}`},
		{http.MethodPost, "/v1/peers", `{"name": "x", "host": "a\u0000b", "port": 5432, "user": "u", "password": "p", "database": "d"}`},
		{http.MethodPost, "/v1/mirrors", `{"name": "m2", "source_peer": "src\u0000", "destination_peer": "dst", "table_mappings": [
			{"source_schema": "public", "source_table": "orders", "destination_schema": "public", "destination_table": "o"}]}`},
		{http.MethodPost, "/v1/mirrors", `{"name": "m2", "source_peer": "src", "destination_peer": "dst", "table_mappings": [
			{"source_schema": "public", "source_table": "orders", "destination_schema": "public", "destination_table": "o\u0000"}]}`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Logf("%v", tc.body)
			b.on(t).requireError(tc.method, tc.path, b.adminToken, tc.body, http.StatusBadRequest, "UTF-8")
		})
	}
	// A source table name the source cannot read is reported by the source check.
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, `{"name": "m2", "source_peer": "src", "destination_peer": "dst", "table_mappings": [
			{"source_schema": "public", "source_table": "orders\u0000", "destination_schema": "public", "destination_table": "o"}]}`, http.StatusBadRequest, `"src"`)
	b.mustDo(http.MethodGet, "/v1/mirrors/m", b.adminToken, nil, http.StatusOK)
	if got := len(b.mirrorList()); got != 1 {
		t.Fatalf("%d mirrors, want 1", got)
	}
}
