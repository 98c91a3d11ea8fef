package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestCaseVariantAndDuplicateKeys sends the bodies of issue 9: a key that
// differs from a field only by case used to pass validation under one
// spelling and be stored under the other (a viewer created as superadmin, a
// peer with port 0 answering 500). Every such body is a 400 naming the key,
// and nothing is stored.
func TestCaseVariantAndDuplicateKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	peer := func(extra string) string {
		return fmt.Sprintf(`{"name":"cv","host":"127.0.0.1","port":%d,"user":%q,"password":%q,"database":"postgres"%s}`,
			pgtest.SourceCluster(t).Port(), peerRole, peerPassword, extra)
	}
	cases := []struct {
		name, path, body, key string
	}{
		{"role case variant", "/v1/users", `{"username":"eve","password":"pw-123456","role":"viewer","Role":"superadmin"}`, `"Role"`},
		{"role case variant first", "/v1/users", `{"username":"eve","password":"pw-123456","ROLE":"admin","role":"viewer"}`, `"ROLE"`},
		{"duplicate role", "/v1/users", `{"username":"eve","password":"pw-123456","role":"viewer","role":"admin"}`, `"role"`},
		{"escaped duplicate", "/v1/users", `{"username":"eve","password":"pw-123456","role":"viewer","r\u006fle":"admin"}`, `"role"`},
		{"PORT", "/v1/peers", peer(`,"PORT":0`), `"PORT"`},
		{"HOST", "/v1/peers", peer(`,"HOST":""`), `"HOST"`},
		{"SSL_MODE", "/v1/peers", peer(`,"SSL_MODE":"allow"`), `"SSL_MODE"`},
		{"NAME with a bad name", "/v1/peers", peer(`,"NAME":"../x y\"z"`), `"NAME"`},
		// encoding/json folds the long s (U+017F) to s: it would set ssl_mode.
		{"unicode fold", "/v1/peers", peer(`,"ſsl_mode":"allow"`), `"ſsl_mode"`},
		{"duplicate host", "/v1/peers", peer(`,"host":"elsewhere"`), `"host"`},
	}
	for _, c := range cases {
		msg := b.requireError(http.MethodPost, c.path, b.adminToken, c.body, http.StatusBadRequest, c.key)
		require.Contains(t, msg, "Invalid request", c.name)
	}
	// Nested objects are checked too: a table mapping's keys.
	msg := b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken,
		`{"name":"m","source_peer":"a","destination_peer":"b","table_mappings":[{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","Destination_Table":"other"}]}`,
		http.StatusBadRequest, `"Destination_Table"`, "table_mappings[0]", `"destination_table"`)
	require.Contains(t, msg, "case-sensitive")
	b.requireError(http.MethodPut, "/v1/peers/nope", b.adminToken, `{"port":5432,"Port":0}`, http.StatusBadRequest, `"Port"`)
	b.requireError(http.MethodPost, "/v1/auth/change-password", b.adminToken,
		`{"current_password":"admin-password","new_password":"x-123456","New_Password":"y"}`, http.StatusBadRequest, `"New_Password"`)
	b.requireError(http.MethodPost, "/v1/auth/login", "", `{"username":"admin","password":"admin-password","Username":"viewer"}`,
		http.StatusBadRequest, `"Username"`)

	// Nothing was stored, and the real passwords still work.
	var users []struct{ Username string }
	b.mustDecode(http.MethodGet, "/v1/users", b.adminToken, nil, http.StatusOK, &users)
	for _, u := range users {
		require.NotEqual(t, "eve", u.Username)
	}
	b.mustDo(http.MethodGet, "/v1/peers/cv", b.adminToken, nil, http.StatusNotFound)
	b.login("admin", "admin-password")

	// The same bodies with each key once, spelled right, are accepted.
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, `{"username":"eve","password":"pw-123456","role":"viewer"}`, http.StatusCreated)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, peer(`,"ssl_mode":"disable"`), http.StatusCreated)
}

// TestNamesFollowThePattern checks the names of issue 9 that were stored:
// peer and mirror names must match ^[A-Za-z0-9][A-Za-z0-9_.-]*$ (1 to 128
// characters).
func TestNamesFollowThePattern(t *testing.T) {
	t.Parallel()
	b := setup(t)
	peer := validPeer(t, "")
	for _, name := range []string{`../x y"z`, "weird name/../x", "", ".hidden", "-x", "a/b", "ünï", strings.Repeat("a", 129)} {
		b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(peer, "name", name), http.StatusBadRequest, "name")
		mirror := map[string]any{"name": name, "source_peer": "a", "destination_peer": "b", "table_mappings": []any{mapping("t", "t")}}
		b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, mirror, http.StatusBadRequest, "name")
	}
	var peers []peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers", b.adminToken, nil, http.StatusOK, &peers)
	require.Empty(t, peers)
	// Letters of either case, digits, '_', '.' and '-' are fine.
	ensurePeerRole(t, pgtest.SourceCluster(t))
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(peer, "name", "Orders-Mirror.1_"+strings.Repeat("x", 112)), http.StatusCreated)
}

// TestExcludeColumnsShapes sends the bodies that crashed inside Huma's
// request validation (its uniqueItems check hashes each item, and an array
// or object item panics): every one is a JSON 400, never a dropped
// connection.
func TestExcludeColumnsShapes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, cols := range []string{`[[],[]]`, `[{},{}]`, `[[1],[1]]`, `[{"a":1},{"a":1}]`, `["a",[]]`, `[null,null]`, `[1,1]`} {
		body := `{"name":"m","source_peer":"a","destination_peer":"b","table_mappings":[{"source_schema":"public","source_table":"t",` +
			`"destination_schema":"public","destination_table":"t","exclude_columns":` + cols + `}]}`
		b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusBadRequest, "exclude_columns")
		b.requireError(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken,
			`{"table_mappings":[{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","exclude_columns":`+cols+`}]}`,
			http.StatusBadRequest, "exclude_columns")
	}
	// A mapping, or any other object, where a string belongs.
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":{},"password":[],"role":"viewer"}`, http.StatusBadRequest, "username")
}

// TestListBounds checks the documented limits: at most 1000 table mappings,
// 1600 excluded columns per mapping, names of at most 63 bytes.
func TestListBounds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := func(mappings []any) map[string]any {
		return map[string]any{"name": "m", "source_peer": "a", "destination_peer": "b", "table_mappings": mappings}
	}
	many := make([]any, 1001)
	for i := range many {
		many[i] = mapping(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i))
	}
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body(many), http.StatusBadRequest, "table_mappings", "1000")
	b.requireError(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, map[string]any{"table_mappings": many}, http.StatusBadRequest, "table_mappings", "1000")

	cols := make([]string, 1601)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i)
	}
	m := mapping("t", "t")
	m["exclude_columns"] = cols
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body([]any{m}), http.StatusBadRequest, "exclude_columns", "1600")

	m["exclude_columns"] = []string{strings.Repeat("c", 64)}
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body([]any{m}), http.StatusBadRequest, "exclude_columns", "63")
	m["exclude_columns"] = []string{"a", "a"}
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body([]any{m}), http.StatusBadRequest, "exclude_columns")

	// 30 characters, 60 bytes: fine for the schema; 32 of them, 64 bytes:
	// too long for PostgreSQL, which the handler reports. Both peers exist,
	// so the mapping check is what answers.
	b.sourceDB("src", "")
	b.destPeer("dst")
	m = mapping("t", strings.Repeat("é", 32))
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken,
		map[string]any{"name": "m", "source_peer": "src", "destination_peer": "dst", "table_mappings": []any{m}},
		http.StatusBadRequest, "table_mappings[0].destination_table is 64 bytes long", "63 bytes")
}

// TestCatalogConstraintViolations adds a check constraint and a unique
// index to the test's own catalog, standing for any rule of the catalog the
// API's own validation does not know: a violation is a 400 or a 409 that
// names the constraint, never a 500.
func TestCatalogConstraintViolations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	b.exec(`ALTER TABLE peers ADD CONSTRAINT peers_host_not_forbidden CHECK (host <> 'forbidden.example')`)
	b.exec(`CREATE UNIQUE INDEX peers_one_per_database ON peers (host, port, database)`)

	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "p1"), "host", "forbidden.example"),
		http.StatusBadRequest, "peers_host_not_forbidden", "Invalid request")
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, validPeer(t, "p1"), http.StatusCreated)
	b.requireError(http.MethodPut, "/v1/peers/p1", b.adminToken, map[string]any{"host": "forbidden.example"},
		http.StatusBadRequest, "peers_host_not_forbidden")
	msg := b.requireError(http.MethodPost, "/v1/peers", b.adminToken, validPeer(t, "p2"), http.StatusConflict, "peers_one_per_database")
	require.NotContains(t, msg, peerPassword)
}

// TestOversizedAndMalformedBodies checks the answers to bodies the strict
// body check does not walk: 413 for a body over the route's limit, 400 for
// malformed JSON.
func TestOversizedAndMalformedBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	big := `{"username":"` + strings.Repeat("a", 1<<20) + `","password":"x","role":"viewer"}`
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, big, http.StatusRequestEntityTooLarge, "too large", "16 KiB")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":"a",`, http.StatusBadRequest, "Malformed JSON")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":"a","password":"b","role":"viewer"} {}`, http.StatusBadRequest)
	raw := b.mustDo(http.MethodPost, "/v1/users", b.adminToken, strings.Repeat("[", 16000), http.StatusBadRequest)
	require.True(t, json.Valid(raw))
}

// TestBodyLimitsAndShortErrors checks that every route reads only the body
// it needs: an unauthenticated login with a megabyte of unknown keys is a
// 413 naming the 4 KiB limit, a peer takes its 64 KiB certificate, and an
// error names at most a handful of the problems it found instead of every
// unknown key.
func TestBodyLimitsAndShortErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var keys strings.Builder
	keys.WriteString(`{"username":"admin","password":"x"`)
	for i := 0; i < 90000; i++ {
		fmt.Fprintf(&keys, `,"k%d":1`, i)
	}
	keys.WriteString("}")
	start := time.Now()
	msg := b.requireError(http.MethodPost, "/v1/auth/login", "", keys.String(), http.StatusRequestEntityTooLarge, "4 KiB")
	require.Less(t, len(msg), 200)
	require.Less(t, time.Since(start), 2*time.Second)

	// Under the limit, hundreds of unknown keys: five are named.
	keys.Reset()
	keys.WriteString(`{"username":"admin","password":"x"`)
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&keys, `,"k%d":1`, i)
	}
	keys.WriteString("}")
	require.Less(t, keys.Len(), 4<<10)
	msg = b.requireError(http.MethodPost, "/v1/auth/login", "", keys.String(), http.StatusBadRequest, "and 295 more problems")
	require.Less(t, len(msg), 500, msg)

	// Each route has its own limit.
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, `{"username":"`+strings.Repeat("a", 20<<10)+`"}`,
		http.StatusRequestEntityTooLarge, "16 KiB")
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, `{"name":"`+strings.Repeat("a", 300<<10)+`"}`,
		http.StatusRequestEntityTooLarge, "256 KiB")
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, `{"name":"`+strings.Repeat("a", 2<<20)+`"}`,
		http.StatusRequestEntityTooLarge, "1 MiB")
	// A peer body with a certificate at its 64 KiB limit is read (and
	// refused for its content, not its size).
	cert := strings.Repeat("A", 65536)
	msg = b.requireError(http.MethodPost, "/v1/peers", b.adminToken,
		map[string]any{"name": "big", "host": "127.0.0.1", "port": 5432, "user": "u", "password": "p", "database": "d", "ssl_root_cert": cert},
		http.StatusBadRequest)
	require.NotContains(t, msg, "too large")
	// A mirror body of 500 KB is read.
	mappings := make([]map[string]any, 1000)
	for i := range mappings {
		m := mapping(fmt.Sprintf("t%d", i), fmt.Sprintf("t%d", i))
		m["exclude_columns"] = []string{strings.Repeat("c", 63), strings.Repeat("d", 63), strings.Repeat("e", 63)}
		mappings[i] = m
	}
	status, raw := b.do(http.MethodPost, "/v1/mirrors", b.adminToken,
		map[string]any{"name": "m", "source_peer": "nope", "destination_peer": "nope", "table_mappings": mappings})
	require.NotEqual(t, http.StatusRequestEntityTooLarge, status, string(raw))
	require.Contains(t, string(raw), "nope")
}
