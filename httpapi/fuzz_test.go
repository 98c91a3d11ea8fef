package httpapi_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/db/secretbox"
	"github.com/pgmirror/pgmirror/httpapi"
)

// The fuzz targets send arbitrary bodies (and path names) to the write
// endpoints through the whole handler stack on a real catalog. Whatever the
// input, the server answers: a status below 500, a JSON body, errors shaped
// {"error": "..."}, and never a peer password. Each input is sent in one of
// four shapes (see bodyShape): whole, declaring a size over every limit, a
// body that never completes, or a chunked body, too large or never ending;
// the last three must be answered and the connection closed within the
// body read timeout. `go test` runs the seed corpus (the inputs of issue 9
// among them); `make fuzz` fuzzes each target for FUZZTIME.

// writeOp is one endpoint; %s in path is replaced by the fuzzed name.
type writeOp struct {
	method, path string
}

// badBodies are inputs every write endpoint gets as seeds: the reported
// ones and the classic decoding traps.
var badBodies = []string{
	``, `null`, `[]`, `{}`, `"x"`, `1e400`, `{"a":1}{"a":2}`, `{`, `{"x":}`, "\xff\xfe",
	strings.Repeat(`[`, 5000), strings.Repeat(`{"a":`, 2000),
	`{"name":"\u0000","username":"a\u0000b","host":"\ud800"}`,
	`{"port":"5432"}`, `{"port":-1}`, `{"port":1e300}`, `{"port":5432.5}`, `{"port":null}`,
	`{"role":"viewer","Role":"superadmin","username":"eve","password":"pw-123456"}`,
	`{"role":"viewer","role":"admin","username":"eve","password":"pw-123456"}`,
	`{"name":"../x y\"z","host":"h","port":5432,"user":"u","password":"p","database":"d"}`,
	`{"name":"p","host":"h","port":5432,"user":"u","password":"p","database":"d","PORT":0,"HOST":"","SSL_MODE":"allow"}`,
	`{"name":"weird name/../x","source_peer":"a","destination_peer":"b","table_mappings":[]}`,
	`{"name":"m","source_peer":"a","destination_peer":"b","table_mappings":[{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","exclude_columns":[[],[]]}]}`,
	`{"name":"m","source_peer":"a","destination_peer":"b","table_mappings":[{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","exclude_columns":[{},{}]}]}`,
	`{"table_mappings":[{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","exclude_columns":[[],[]]}]}`,
	`{"table_mappings":[[],{}],"TABLE_MAPPINGS":null}`,
	`{"username":"admin","password":"` + strings.Repeat("p", 100) + `"}`,
	`{"current_password":{},"new_password":[]}`,
}

// fuzzCatalogEnv passes the catalog database from the process that runs
// `go test -fuzz` to its fuzz workers, which inherit its environment: the
// workers share it instead of each starting a cluster of its own (a worker
// may be stopped at any time, which would leave the cluster behind).
const fuzzCatalogEnv = "PGMIRROR_FUZZ_CATALOG_URL"

// fuzzKeyEnv passes the catalog's encryption key the same way: the workers
// must read the secrets (the JWT secret) the first process stored.
const fuzzKeyEnv = "PGMIRROR_FUZZ_CATALOG_KEY"

// fuzzReadTimeout is the fuzzed API's read timeout: a body that never
// completes is answered 408 after it.
const fuzzReadTimeout = 300 * time.Millisecond

// fuzzBundle serves the API for a fuzz target.
func fuzzBundle(f *testing.F) *bundle {
	short := func(c *httpapi.Config) { c.ReadTimeout = fuzzReadTimeout }
	if url := os.Getenv(fuzzCatalogEnv); url != "" {
		return setupCatalogWith(f, url, short)
	}
	raw, err := secretbox.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	f.Setenv(fuzzKeyEnv, secretbox.EncodeKey(raw))
	url := pgtest.NewDatabase(f, pgtest.CatalogCluster(f))
	f.Setenv(fuzzCatalogEnv, url)
	return setupCatalogWith(f, url, short)
}

// catalogKeyring is the test catalog's keyring: the fuzz key when a fuzz
// target set one (see fuzzKeyEnv), else a new key.
func catalogKeyring(t testing.TB) *secretbox.Keyring {
	t.Helper()
	text := os.Getenv(fuzzKeyEnv)
	if text == "" {
		return pgtest.Keyring(t)
	}
	raw, err := secretbox.ParseKey(text)
	if err != nil {
		t.Fatalf("%s: %v", fuzzKeyEnv, err)
	}
	keys, err := secretbox.NewKeyring(raw)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// bodyShape is how a fuzzed body is sent.
type bodyShape uint8

const (
	// whole: the body as it is, by net/http's client.
	whole bodyShape = iota
	// declaredHuge: Content-Length says 2 MiB more than the body, which is
	// sent alone: over every route's limit, answered without waiting.
	declaredHuge
	// neverCompletes: Content-Length says one byte more than is sent.
	neverCompletes
	// chunkedStall: the body, padded with 20 KiB of spaces (over the 4 KiB
	// and 16 KiB limits), in one chunk with no last chunk.
	chunkedStall
	shapes
)

// fuzzWrites fuzzes ops with the given valid bodies and badBodies as seeds.
func fuzzWrites(f *testing.F, ops []writeOp, goodBodies ...string) {
	b := fuzzBundle(f)
	for i := range ops {
		for _, body := range append(append([]string{}, goodBodies...), badBodies...) {
			f.Add(uint8(i), "m", body, uint8(whole))
		}
		f.Add(uint8(i), "../x y\"z", `{}`, uint8(whole))
		f.Add(uint8(i), "weird name/../x", `{}`, uint8(whole))
		f.Add(uint8(i), "\x00", `{}`, uint8(whole))
		// The slow and oversized paths, with a valid body where there is one.
		body := `{}`
		if len(goodBodies) > 0 {
			body = goodBodies[i%len(goodBodies)]
		}
		for shape := declaredHuge; shape < shapes; shape++ {
			f.Add(uint8(i), "m", body, uint8(shape))
		}
	}
	f.Fuzz(func(t *testing.T, op uint8, name, body string, shape uint8) {
		o := ops[int(op)%len(ops)]
		path := o.path
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, url.PathEscape(name))
		}
		var status int
		var raw []byte
		switch s := bodyShape(shape % uint8(shapes)); s {
		case whole:
			// do fails the test on a dropped connection, a body that is
			// not JSON, a malformed error body and a leaked peer password.
			status, raw = b.on(t).do(o.method, path, b.adminToken, body)
		default:
			status, raw = b.on(t).incompleteBody(o.method, path, body, s)
		}
		if status >= http.StatusInternalServerError {
			t.Fatalf("%s %s with %q: status %d: %s", o.method, path, body, status, raw)
		}
	})
}

// incompleteBody sends body to path in shape on a connection of its own
// and requires an answer with a JSON body (an error shaped as such, without
// the peer password) and the server closing the connection, within the
// read timeout and a margin.
func (b *bundle) incompleteBody(method, path, body string, shape bodyShape) (int, []byte) {
	t := b.t
	t.Helper()
	var request strings.Builder
	fmt.Fprintf(&request, "%s %s HTTP/1.1\r\nHost: pgmirror\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n", method, path, b.adminToken)
	switch shape {
	case declaredHuge:
		fmt.Fprintf(&request, "Content-Length: %d\r\n\r\n%s", len(body)+2<<20, body)
	case neverCompletes:
		fmt.Fprintf(&request, "Content-Length: %d\r\n\r\n%s", len(body)+1, body)
	case chunkedStall:
		chunk := body + strings.Repeat(" ", 20<<10)
		fmt.Fprintf(&request, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(chunk), chunk)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.server.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	start := time.Now()
	limit := fuzzReadTimeout + 3*time.Second
	_ = conn.SetDeadline(start.Add(limit + 5*time.Second))
	_, err = io.WriteString(conn, request.String())
	require.NoError(t, err)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err, "no answer after %s", time.Since(start))
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.True(t, json.Valid(raw), "the answer is not JSON: %s", raw)
	if resp.StatusCode >= 400 {
		requireErrorShape(t, raw)
	}
	require.NotContains(t, string(raw), peerPassword)
	require.True(t, resp.Close, "status %d without Connection: close: %s", resp.StatusCode, raw)
	_, err = r.ReadByte()
	require.Error(t, err, "the server sent more after the answer")
	var netErr net.Error
	require.False(t, errors.As(err, &netErr) && netErr.Timeout(), "the connection was still open after %s", time.Since(start))
	require.Less(t, time.Since(start), limit, "the connection was closed late")
	return resp.StatusCode, raw
}

func FuzzUserWrites(f *testing.F) {
	fuzzWrites(f, []writeOp{
		{http.MethodPost, "/v1/auth/login"},
		{http.MethodPost, "/v1/auth/change-password"},
		{http.MethodPost, "/v1/users"},
		{http.MethodDelete, "/v1/users/%s"},
	},
		`{"username":"admin","password":"wrong"}`,
		`{"current_password":"wrong","new_password":"x"}`,
		`{"username":"eve","password":"pw-123456","role":"viewer"}`,
	)
}

func FuzzPeerWrites(f *testing.F) {
	fuzzWrites(f, []writeOp{
		{http.MethodPost, "/v1/peers"},
		{http.MethodPut, "/v1/peers/%s"},
		{http.MethodDelete, "/v1/peers/%s"},
		{http.MethodPost, "/v1/peers/%s/test"},
	},
		// Port 1 refuses connections at once: POST .../test answers fast.
		fmt.Sprintf(`{"name":"m","host":"127.0.0.1","port":1,"user":%q,"password":%q,"database":"postgres","ssl_mode":"disable"}`, peerRole, peerPassword),
		`{"host":"127.0.0.1","port":1,"ssl_mode":"require"}`,
	)
}

func FuzzMirrorWrites(f *testing.F) {
	mapping := `{"source_schema":"public","source_table":"t","destination_schema":"public","destination_table":"t","exclude_columns":["c"]}`
	fuzzWrites(f, []writeOp{
		{http.MethodPost, "/v1/mirrors"},
		{http.MethodPut, "/v1/mirrors/%s/tables"},
		{http.MethodDelete, "/v1/mirrors/%s"},
	},
		`{"name":"m","source_peer":"a","destination_peer":"b","table_mappings":[`+mapping+`],"cdc_batch_size":10,"do_initial_snapshot":false}`,
		`{"table_mappings":[`+mapping+`]}`,
	)
}

func FuzzControlWrites(f *testing.F) {
	fuzzWrites(f, []writeOp{
		{http.MethodPost, "/v1/mirrors/%s/pause"},
		{http.MethodPost, "/v1/mirrors/%s/resume"},
		{http.MethodPost, "/v1/mirrors/%s/resync"},
		{http.MethodPost, "/v1/mirrors/m/resync/%s"},
		{http.MethodPost, "/v1/mirrors/%s/retry"},
		{http.MethodPost, "/v1/mirrors/%s/sync-schema"},
	})
}
