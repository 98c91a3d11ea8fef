package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/httpapi"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// peerPassword is the password of the test role that peers log in with. No
// response may ever contain it.
const peerPassword = "Zq8-peer-secret-Wx41"

const peerRole = "pgmirror_test_peer"

var roleOnce sync.Map

// ensurePeerRole creates the login role the tests' peers use on cluster c.
func ensurePeerRole(t testing.TB, c *localpg.Cluster) {
	t.Helper()
	once, _ := roleOnce.LoadOrStore(c.Port(), &sync.Once{})
	once.(*sync.Once).Do(func() {
		pgtest.Exec(t, c.URL("postgres"), fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '%s') THEN
				CREATE ROLE %s LOGIN SUPERUSER REPLICATION PASSWORD '%s';
			END IF; END $$`, peerRole, peerRole, peerPassword))
	})
}

// bundle is one test's API server on its own catalog.
type bundle struct {
	t           testing.TB
	server      *httptest.Server
	store       *db.Store
	pool        *pgxpool.Pool
	adminToken  string
	viewerToken string
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupWith(t, nil)
}

// setupWith is setup with a change to the API's configuration.
func setupWith(t *testing.T, configure func(*httpapi.Config)) *bundle {
	t.Helper()
	return setupCatalogWith(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)), configure)
}

// setupOn is setup with the catalog database on cluster c (a private
// cluster for tests that stop the catalog).
func setupOn(t testing.TB, c *localpg.Cluster) *bundle {
	t.Helper()
	return setupCatalog(t, pgtest.NewDatabase(t, c))
}

// setupCatalog serves the API on the catalog database at url, which may be
// new or already set up by another bundle (fuzz workers share one).
func setupCatalog(t testing.TB, url string) *bundle {
	t.Helper()
	return setupCatalogWith(t, url, nil)
}

// setupCatalogWith is setupCatalog with a change to the API's configuration.
func setupCatalogWith(t testing.TB, url string, configure func(*httpapi.Config)) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, url)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, db.Migrate(ctx, pool, logger))
	store := db.New(pool, catalogKeyring(t))
	require.NoError(t, store.EnsureAdmin(ctx, "admin", "admin-password"))
	secret, err := store.JWTSecret(ctx)
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	cfg := httpapi.Config{Store: store, River: client, JWTSecret: secret, Logger: logger, Version: "test"}
	if configure != nil {
		configure(&cfg)
	}
	handler, err := httpapi.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	b := &bundle{t: t, server: srv, store: store, pool: pool}
	b.adminToken = b.login("admin", "admin-password")
	if status, raw := b.do(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "viewer", "password": "viewer-password", "role": "viewer"}); status != http.StatusConflict {
		require.Equal(t, http.StatusCreated, status, "create the viewer: %s", raw)
	}
	b.viewerToken = b.login("viewer", "viewer-password")
	return b
}

func (b *bundle) login(username, password string) string {
	b.t.Helper()
	var out struct{ Token string }
	b.mustDecode(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": username, "password": password}, http.StatusOK, &out)
	require.NotEmpty(b.t, out.Token)
	return out.Token
}

// do sends a request and returns the status and body. It checks what every
// response must satisfy: no peer password, JSON, and errors shaped
// {"error": "..."} with a non-empty message.
func (b *bundle) do(method, path, token string, body any) (int, []byte) {
	b.t.Helper()
	status, _, raw := b.doHeaders(method, path, token, body)
	return status, raw
}

// doHeaders is do that also returns the response headers.
func (b *bundle) doHeaders(method, path, token string, body any) (int, http.Header, []byte) {
	b.t.Helper()
	var rdr io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rdr = strings.NewReader(v)
	case []byte:
		rdr = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		require.NoError(b.t, err)
		rdr = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.server.URL+path, rdr)
	require.NoError(b.t, err)
	if rdr != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.ContentLength > 256<<10 {
		// The service answers a body over a route's limit before reading
		// it and closes the connection; a client still writing the body
		// may then meet a reset before it reads the answer. Waiting for
		// 100 Continue (as curl does for large bodies) avoids sending it.
		req.Header.Set("Expect", "100-continue")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	require.NotContains(b.t, string(raw), peerPassword, "%s %s leaked a peer password", method, path)
	if resp.StatusCode >= 400 {
		requireErrorShape(b.t, raw, "%s %s", method, path)
	}
	if !strings.HasPrefix(path, "/docs") {
		require.True(b.t, json.Valid(raw), "%s %s: body is not JSON: %s", method, path, raw)
	}
	return resp.StatusCode, resp.Header, raw
}

func requireErrorShape(t testing.TB, raw []byte, msgAndArgs ...any) {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m), append([]any{"error body is not a JSON object: %s"}, raw))
	require.Len(t, m, 1, "error body must have exactly one field: %s", raw)
	msg, ok := m["error"].(string)
	require.True(t, ok, "error body must be {\"error\": string}: %s", raw)
	require.NotEmpty(t, msg)
}

// mustDo sends a request and requires the status.
func (b *bundle) mustDo(method, path, token string, body any, want int) []byte {
	b.t.Helper()
	status, raw := b.do(method, path, token, body)
	require.Equal(b.t, want, status, "%s %s: %s", method, path, raw)
	return raw
}

func (b *bundle) mustDecode(method, path, token string, body any, want int, out any) {
	b.t.Helper()
	raw := b.mustDo(method, path, token, body, want)
	require.NoError(b.t, json.Unmarshal(raw, out), "%s", raw)
}

// requireError requires an error status and a message containing each of
// the given fragments.
func (b *bundle) requireError(method, path, token string, body any, want int, fragments ...string) string {
	b.t.Helper()
	raw := b.mustDo(method, path, token, body, want)
	var e struct{ Error string }
	require.NoError(b.t, json.Unmarshal(raw, &e))
	for _, f := range fragments {
		require.Contains(b.t, e.Error, f, "%s %s", method, path)
	}
	return e.Error
}

// sourceDB creates a fresh database on the shared logical source cluster
// and a peer for it; it returns the database URL.
func (b *bundle) sourceDB(peerName string, sql string) string {
	b.t.Helper()
	c := pgtest.SourceCluster(b.t)
	ensurePeerRole(b.t, c)
	url := pgtest.NewDatabase(b.t, c)
	if sql != "" {
		pgtest.Exec(b.t, url, sql)
	}
	b.createPeer(peerName, c.Port(), dbName(url))
	return url
}

func (b *bundle) createPeer(name string, port int, database string) {
	b.t.Helper()
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, map[string]any{
		"name": name, "host": "127.0.0.1", "port": port, "user": peerRole, "password": peerPassword,
		"database": database, "ssl_mode": "disable",
	}, http.StatusCreated)
}

func dbName(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	return cfg.Database
}

// destPeer creates a peer on the shared destination cluster.
func (b *bundle) destPeer(name string) {
	b.t.Helper()
	c := pgtest.DestCluster(b.t)
	ensurePeerRole(b.t, c)
	b.createPeer(name, c.Port(), dbName(pgtest.NewDatabase(b.t, c)))
}

func mapping(src, dst string) map[string]any {
	return map[string]any{"source_schema": "public", "source_table": src, "destination_schema": "public", "destination_table": dst}
}

// jobCount counts River jobs of a kind.
func (b *bundle) jobCount(kind string) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1`, kind).Scan(&n))
	return n
}

func (b *bundle) exec(sql string, args ...any) {
	b.t.Helper()
	_, err := b.pool.Exec(context.Background(), sql, args...)
	require.NoError(b.t, err)
}
