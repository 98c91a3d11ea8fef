package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
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
	// A NUL in any string of a body is refused before any check reads it.
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, `{"name": "m2", "source_peer": "src", "destination_peer": "dst", "table_mappings": [
			{"source_schema": "public", "source_table": "orders\u0000", "destination_schema": "public", "destination_table": "o"}]}`,
		http.StatusBadRequest, "table_mappings[0].source_table", "UTF-8")
	b.mustDo(http.MethodGet, "/v1/mirrors/m", b.adminToken, nil, http.StatusOK)
	if got := len(b.mirrorList()); got != 1 {
		t.Fatalf("%d mirrors, want 1", got)
	}
}

// TestNotUTF8AndInvisibleNames checks that a body that is not UTF-8 is a
// 400 (it used to be stored with U+FFFD in place of the bad bytes), and
// that user names and a peer's user and database refuse characters that
// display as something else or not at all, and spaces at either end.
func TestNotUTF8AndInvisibleNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, "{\"username\":\"ab\xff\xfe\",\"password\":\"pw-123456\",\"role\":\"viewer\"}",
		http.StatusBadRequest, "UTF-8")
	b.requireError(http.MethodPost, "/v1/auth/login", "", "{\"username\":\"admin\",\"password\":\"\xc3\"}", http.StatusBadRequest, "UTF-8")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":"a","password":"pw-123456","role":"viewer","x\u0000":1}`,
		http.StatusBadRequest, "UTF-8")
	for _, name := range []string{"ad\x1bmin", "ad\u200bmin", "\u202eadmin", "admin\u2066", " admin", "admin ", "ad\u2028min",
		"\ufeffadmin", "ad\u00admin", "ad\tmin", "ad\ufffdmin"} {
		msg := b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": name, "password": "pw-123456", "role": "viewer"},
			http.StatusBadRequest, "username")
		require.Contains(t, msg, "Invalid request", name)
	}
	// An escape that is not a character decodes to U+FFFD: refused too.
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":"ab\udcff","password":"pw-123456","role":"viewer"}`,
		http.StatusBadRequest, "username")
	var users []struct{ Username string }
	b.mustDecode(http.MethodGet, "/v1/users", b.adminToken, nil, http.StatusOK, &users)
	require.Len(t, users, 2, "nothing was stored: %v", users)

	// Letters of any script, and inner spaces, are fine.
	for _, name := range []string{"José Ñúñez", "名前", "o'brien.ops"} {
		b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": name, "password": "pw-123456", "role": "viewer"}, http.StatusCreated)
	}

	peer := map[string]any{"name": "p", "host": "127.0.0.1", "port": 5432, "user": "u\u200b", "password": "p", "database": "d"}
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, peer, http.StatusBadRequest, "user", "invisible")
	peer["user"], peer["database"] = "u", "d\x07"
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, peer, http.StatusBadRequest, "database", "control character")
	b.requireError(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"database": " d"}, http.StatusBadRequest, "database", "space")
}
