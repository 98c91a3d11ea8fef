package httpapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/db/secretbox"
)

// The fuzz targets send arbitrary bodies (and path names) to the write
// endpoints through the whole handler stack on a real catalog. Whatever the
// input, the server answers: a status below 500, a JSON body, errors shaped
// {"error": "..."}, and never a peer password. `go test` runs the seed
// corpus (the inputs of issue 9 among them); `make fuzz` fuzzes each target
// for FUZZTIME.

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

// fuzzBundle serves the API for a fuzz target.
func fuzzBundle(f *testing.F) *bundle {
	if url := os.Getenv(fuzzCatalogEnv); url != "" {
		return setupCatalog(f, url)
	}
	raw, err := secretbox.GenerateKey()
	if err != nil {
		f.Fatal(err)
	}
	f.Setenv(fuzzKeyEnv, secretbox.EncodeKey(raw))
	url := pgtest.NewDatabase(f, pgtest.CatalogCluster(f))
	f.Setenv(fuzzCatalogEnv, url)
	return setupCatalog(f, url)
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

// fuzzWrites fuzzes ops with the given valid bodies and badBodies as seeds.
func fuzzWrites(f *testing.F, ops []writeOp, goodBodies ...string) {
	b := fuzzBundle(f)
	for i := range ops {
		for _, body := range append(append([]string{}, goodBodies...), badBodies...) {
			f.Add(uint8(i), "m", body)
		}
		f.Add(uint8(i), "../x y\"z", `{}`)
		f.Add(uint8(i), "weird name/../x", `{}`)
		f.Add(uint8(i), "\x00", `{}`)
	}
	f.Fuzz(func(t *testing.T, op uint8, name, body string) {
		o := ops[int(op)%len(ops)]
		path := o.path
		if strings.Contains(path, "%s") {
			path = fmt.Sprintf(path, url.PathEscape(name))
		}
		// do fails the test on a dropped connection, a body that is not
		// JSON, a malformed error body and a leaked peer password.
		status, raw := b.on(t).do(o.method, path, b.adminToken, body)
		if status >= http.StatusInternalServerError {
			t.Fatalf("%s %s with %q: status %d: %s", o.method, path, body, status, raw)
		}
	})
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
