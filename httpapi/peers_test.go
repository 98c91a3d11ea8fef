package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/httpapi"
)

// peerRecord is a peer as the API returns it.
type peerRecord struct {
	Name      string
	Host      string
	Port      int
	User      string
	Database  string
	SSLMode   string    `json:"ssl_mode"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// peerTest is the body of POST /v1/peers/{name}/test.
type peerTest struct {
	Success bool
	Version *string
	Error   string
}

func validPeer(t *testing.T, name string) map[string]any {
	c := pgtest.SourceCluster(t)
	return map[string]any{"name": name, "host": "127.0.0.1", "port": c.Port(), "user": peerRole,
		"password": peerPassword, "database": "postgres"}
}

func without(m map[string]any, key string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func with(m map[string]any, key string, value any) map[string]any {
	out := without(m, key)
	out[key] = value
	return out
}

func TestPeerCreateAndValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	base := validPeer(t, "p1")

	var created peerRecord
	raw := b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, base, http.StatusCreated)
	require.NoError(t, json.Unmarshal(raw, &created))
	require.Equal(t, "p1", created.Name)
	require.Equal(t, "127.0.0.1", created.Host)
	require.Equal(t, base["port"], created.Port)
	require.Equal(t, peerRole, created.User)
	require.Equal(t, "postgres", created.Database)
	require.Equal(t, "prefer", created.SSLMode, "ssl_mode defaults to prefer")
	require.False(t, created.CreatedAt.IsZero())
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	require.NotContains(t, fields, "password")

	// Every ssl_mode of the spec is accepted and kept.
	for _, mode := range []string{"disable", "require", "verify-ca", "verify-full", "prefer"} {
		var p peerRecord
		b.mustDecode(http.MethodPost, "/v1/peers", b.adminToken, with(with(base, "name", "ssl-"+mode), "ssl_mode", mode), http.StatusCreated, &p)
		require.Equal(t, mode, p.SSLMode)
	}

	for _, field := range []string{"name", "host", "port", "user", "password", "database"} {
		t.Run("missing "+field, func(t *testing.T) {
			body := without(base, field)
			if field != "name" {
				body["name"] = "x-" + field
			}
			b.on(t).requireError(http.MethodPost, "/v1/peers", b.adminToken, body, http.StatusBadRequest, field)
		})
	}
	for name, tc := range map[string]struct {
		body     map[string]any
		fragment string
	}{
		"port 0":         {with(base, "port", 0), "port"},
		"port 65536":     {with(base, "port", 65536), "port"},
		"port negative":  {with(base, "port", -5), "port"},
		"port string":    {with(base, "port", "5432"), "port"},
		"bad ssl_mode":   {with(base, "ssl_mode", "allow-maybe"), "ssl_mode"},
		"empty host":     {with(base, "host", ""), "host"},
		"empty name":     {with(base, "name", ""), "name"},
		"name with /":    {with(base, "name", "a/b"), "name"},
		"empty database": {with(base, "database", ""), "database"},
		"not an object":  {nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			var body any = tc.body
			if tc.body == nil {
				body = `"peer"`
			}
			b.on(t).requireError(http.MethodPost, "/v1/peers", b.adminToken, body, http.StatusBadRequest, tc.fragment)
		})
	}
	// Nothing invalid was stored.
	var peers []peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers", b.adminToken, nil, http.StatusOK, &peers)
	require.Len(t, peers, 6)

	// Port bounds are inclusive.
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(with(base, "name", "port-max"), "port", 65535), http.StatusCreated)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(with(base, "name", "port-min"), "port", 1), http.StatusCreated)

	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, with(base, "host", "elsewhere"), http.StatusConflict, "p1")
	var p peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers/p1", b.viewerToken, nil, http.StatusOK, &p)
	require.Equal(t, "127.0.0.1", p.Host, "a rejected duplicate must not change the existing peer")
}

func TestPeerListAndGet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var peers []peerRecord
	raw := b.mustDo(http.MethodGet, "/v1/peers", b.viewerToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw), "no peers is an empty array, not null")

	b.sourceDB("beta", "")
	b.destPeer("alpha")
	b.mustDecode(http.MethodGet, "/v1/peers", b.viewerToken, nil, http.StatusOK, &peers)
	require.Len(t, peers, 2)
	require.Equal(t, "alpha", peers[0].Name)
	require.Equal(t, "beta", peers[1].Name)
	for _, p := range peers {
		require.Equal(t, "127.0.0.1", p.Host)
		require.NotZero(t, p.Port)
		require.Equal(t, peerRole, p.User)
		require.NotEmpty(t, p.Database)
		require.Equal(t, "disable", p.SSLMode)
	}

	var p peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers/beta", b.viewerToken, nil, http.StatusOK, &p)
	require.Equal(t, peers[1], p)
	b.requireError(http.MethodGet, "/v1/peers/nobody", b.viewerToken, nil, http.StatusNotFound, "nobody")
}

func TestPeerUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := pgtest.SourceCluster(t)
	b.sourceDB("p", "")
	other := dbName(pgtest.NewDatabase(t, src))
	var before peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers/p", b.adminToken, nil, http.StatusOK, &before)

	// Each field alone; the others stay as they were.
	var got peerRecord
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"ssl_mode": "prefer"}, http.StatusOK, &got)
	require.Equal(t, "prefer", got.SSLMode)
	require.Equal(t, before.Host, got.Host)
	require.Equal(t, before.Port, got.Port)
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"database": other}, http.StatusOK, &got)
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"host": "localhost"}, http.StatusOK, &got)
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{}, http.StatusOK, &got)
	b.mustDecode(http.MethodGet, "/v1/peers/p", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, "localhost", got.Host)
	require.Equal(t, other, got.Database)
	require.Equal(t, "prefer", got.SSLMode)
	require.Equal(t, before.Port, got.Port)
	require.Equal(t, before.User, got.User)
	require.Equal(t, before.CreatedAt, got.CreatedAt)
	require.True(t, got.UpdatedAt.After(before.UpdatedAt))
	var test peerTest
	b.mustDecode(http.MethodPost, "/v1/peers/p/test", b.adminToken, nil, http.StatusOK, &test)
	require.True(t, test.Success, test.Error)

	// Several fields at once.
	b.mustDecode(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"host": "127.0.0.1", "port": src.Port(), "ssl_mode": "disable"}, http.StatusOK, &got)
	require.Equal(t, "127.0.0.1", got.Host)
	require.Equal(t, "disable", got.SSLMode)

	// Password: a wrong one makes the test fail, the right one fixes it.
	b.mustDo(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"password": "not-the-password"}, http.StatusOK)
	b.mustDecode(http.MethodPost, "/v1/peers/p/test", b.adminToken, nil, http.StatusOK, &test)
	require.False(t, test.Success)
	require.Contains(t, test.Error, "password")
	b.mustDo(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"password": peerPassword}, http.StatusOK)
	test = peerTest{}
	b.mustDecode(http.MethodPost, "/v1/peers/p/test", b.adminToken, nil, http.StatusOK, &test)
	require.True(t, test.Success, test.Error)

	// User and port changes reach the connection too.
	b.mustDo(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"user": "no_such_role"}, http.StatusOK)
	test = peerTest{}
	b.mustDecode(http.MethodPost, "/v1/peers/p/test", b.adminToken, nil, http.StatusOK, &test)
	require.False(t, test.Success)
	b.mustDo(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"user": peerRole}, http.StatusOK)

	// Validation is the same as on create.
	for name, body := range map[string]map[string]any{
		"port 0": {"port": 0}, "port 65536": {"port": 65536}, "bad ssl_mode": {"ssl_mode": "sometimes"},
		"empty host": {"host": ""}, "empty database": {"database": ""}, "empty user": {"user": ""},
	} {
		t.Run(name, func(t *testing.T) {
			for k := range body {
				b.on(t).requireError(http.MethodPut, "/v1/peers/p", b.adminToken, body, http.StatusBadRequest, k)
			}
		})
	}
	b.mustDecode(http.MethodGet, "/v1/peers/p", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, src.Port(), got.Port)
	require.Equal(t, "disable", got.SSLMode)
	require.Equal(t, "127.0.0.1", got.Host)

	// The name is not part of the update: it cannot be renamed, and an
	// unknown peer is a 404.
	b.requireError(http.MethodPut, "/v1/peers/p", b.adminToken, map[string]any{"name": "renamed"}, http.StatusBadRequest, "name")
	b.mustDo(http.MethodGet, "/v1/peers/p", b.adminToken, nil, http.StatusOK)
	b.requireError(http.MethodPut, "/v1/peers/ghost", b.adminToken, map[string]any{"host": "x"}, http.StatusNotFound, "ghost")
}

func TestPeerDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sourceDB("src", `CREATE TABLE t (id int PRIMARY KEY)`)
	b.destPeer("dst")
	b.destPeer("spare")

	b.requireError(http.MethodDelete, "/v1/peers/ghost", b.adminToken, nil, http.StatusNotFound, "ghost")
	var del struct{ Deleted string }
	b.mustDecode(http.MethodDelete, "/v1/peers/spare", b.adminToken, nil, http.StatusOK, &del)
	require.Equal(t, "spare", del.Deleted)
	b.requireError(http.MethodGet, "/v1/peers/spare", b.adminToken, nil, http.StatusNotFound)

	b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{
		"name": "m", "source_peer": "src", "destination_peer": "dst", "table_mappings": []any{mapping("t", "t")},
	}, http.StatusCreated)
	// Both ends of a mirror are in use.
	b.requireError(http.MethodDelete, "/v1/peers/src", b.adminToken, nil, http.StatusConflict, `"m"`)
	b.requireError(http.MethodDelete, "/v1/peers/dst", b.adminToken, nil, http.StatusConflict, `"m"`)

	// A deleted mirror still needs its source until its cleanup job has
	// dropped the slot and publication.
	b.mustDo(http.MethodDelete, "/v1/mirrors/m", b.adminToken, nil, http.StatusOK)
	b.requireError(http.MethodDelete, "/v1/peers/src", b.adminToken, nil, http.StatusConflict, "being deleted")
	// The cleanup job removes the row at its end (no worker runs here).
	b.exec(`DELETE FROM mirrors WHERE name = 'm'`)
	b.mustDecode(http.MethodDelete, "/v1/peers/src", b.adminToken, nil, http.StatusOK, &del)
	require.Equal(t, "src", del.Deleted)
	b.mustDo(http.MethodDelete, "/v1/peers/dst", b.adminToken, nil, http.StatusOK)
	raw := b.mustDo(http.MethodGet, "/v1/peers", b.adminToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw))
}

func TestPeerTestConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := pgtest.SourceCluster(t)
	b.sourceDB("good", "")

	var test peerTest
	raw := b.mustDo(http.MethodPost, "/v1/peers/good/test", b.adminToken, nil, http.StatusOK)
	require.NoError(t, json.Unmarshal(raw, &test))
	require.True(t, test.Success, test.Error)
	require.NotNil(t, test.Version)
	require.Regexp(t, `^\d+(\.\d+)?`, *test.Version)
	require.NotContains(t, string(raw), `"error"`)

	b.requireError(http.MethodPost, "/v1/peers/ghost/test", b.adminToken, nil, http.StatusNotFound, "ghost")

	// A closed port and a wrong password: success false with the reason,
	// answered at once (well inside the 10 s connect timeout).
	closed := freePort(t)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "closed"), "port", closed), http.StatusCreated)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "badpw"), "password", "wrong-password"), http.StatusCreated)
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "nodb"), "database", "no_such_database"), http.StatusCreated)
	for name, fragment := range map[string]string{"closed": "connect", "badpw": "password", "nodb": "no_such_database"} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			raw := b.on(t).mustDo(http.MethodPost, "/v1/peers/"+name+"/test", b.adminToken, nil, http.StatusOK)
			require.Less(t, time.Since(start), 10*time.Second)
			var test peerTest
			require.NoError(t, json.Unmarshal(raw, &test))
			require.False(t, test.Success)
			require.Nil(t, test.Version, "version is present only on success: %s", raw)
			require.Contains(t, test.Error, fragment)
			require.NotContains(t, test.Error, "wrong-password")
		})
	}

	// User, password and database names with URL-special characters.
	const oddPassword = `p@ss:w/rd?#% "'x`
	pgtest.Exec(t, src.URL("postgres"), `DO $$ BEGIN
		IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'odd@user:x') THEN
			CREATE ROLE "odd@user:x" LOGIN PASSWORD 'p@ss:w/rd?#% "''x';
		END IF; END $$`)
	pgtest.Exec(t, src.URL("postgres"), `DROP DATABASE IF EXISTS "odd db/1?"`)
	pgtest.Exec(t, src.URL("postgres"), `CREATE DATABASE "odd db/1?"`)
	t.Cleanup(func() { pgtest.Exec(t, src.URL("postgres"), `DROP DATABASE IF EXISTS "odd db/1?" WITH (FORCE)`) })
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, map[string]any{"name": "odd", "host": "127.0.0.1", "port": src.Port(),
		"user": "odd@user:x", "password": oddPassword, "database": "odd db/1?", "ssl_mode": "disable"}, http.StatusCreated)
	raw = b.mustDo(http.MethodPost, "/v1/peers/odd/test", b.adminToken, nil, http.StatusOK)
	test = peerTest{}
	require.NoError(t, json.Unmarshal(raw, &test))
	require.True(t, test.Success, test.Error)
	require.NotContains(t, string(raw), oddPassword)
	b.mustDo(http.MethodPut, "/v1/peers/odd", b.adminToken, map[string]any{"password": oddPassword + "wrong"}, http.StatusOK)
	raw = b.mustDo(http.MethodPost, "/v1/peers/odd/test", b.adminToken, nil, http.StatusOK)
	test = peerTest{}
	require.NoError(t, json.Unmarshal(raw, &test))
	require.False(t, test.Success)
	require.NotContains(t, string(raw), oddPassword)
}

// TestPeerTestTimeout tests a peer whose server accepts the connection but
// never answers: the test gives up after the 10 s connect timeout.
func TestPeerTestTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	// ssl_mode prefer (the default) would try twice: the limit is for the whole test.
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "silent"), "port", l.Addr().(*net.TCPAddr).Port), http.StatusCreated)
	start := time.Now()
	var test peerTest
	b.mustDecode(http.MethodPost, "/v1/peers/silent/test", b.adminToken, nil, http.StatusOK, &test)
	elapsed := time.Since(start)
	t.Logf("elapsed %s: %s", elapsed, test.Error)
	require.False(t, test.Success)
	require.NotEmpty(t, test.Error)
	require.Greater(t, elapsed, 9*time.Second)
	require.Less(t, elapsed, 12*time.Second)
}

func TestPeerTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sourceDB("src", `
		CREATE TABLE b_table (id int PRIMARY KEY);
		CREATE TABLE a_table (id int);
		CREATE SCHEMA "Sales";
		CREATE TABLE "Sales"."Order Items" (id int PRIMARY KEY);
		CREATE TABLE parted (id int, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (100);
		CREATE VIEW v AS SELECT 1 AS x;
		CREATE SEQUENCE s;`)
	var tables []struct {
		Schema    string
		TableName string `json:"table_name"`
	}
	b.mustDecode(http.MethodGet, "/v1/peers/src/tables", b.viewerToken, nil, http.StatusOK, &tables)
	type ref struct{ schema, table string }
	var got []ref
	for _, tb := range tables {
		require.NotEqual(t, "pg_catalog", tb.Schema)
		require.NotEqual(t, "information_schema", tb.Schema)
		got = append(got, ref{tb.Schema, tb.TableName})
	}
	require.Equal(t, []ref{{"Sales", "Order Items"}, {"public", "a_table"}, {"public", "b_table"}, {"public", "parted"}}, got)

	// An empty database lists no tables (an array, not null).
	b.sourceDB("empty", "")
	raw := b.mustDo(http.MethodGet, "/v1/peers/empty/tables", b.viewerToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw))

	b.requireError(http.MethodGet, "/v1/peers/ghost/tables", b.viewerToken, nil, http.StatusNotFound, "ghost")
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "closed"), "port", freePort(t)), http.StatusCreated)
	b.requireError(http.MethodGet, "/v1/peers/closed/tables", b.viewerToken, nil, http.StatusBadRequest, "connect")
}

// freePort returns a loopback port that nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// on returns the bundle reporting to t, for use inside subtests.
func (b *bundle) on(t *testing.T) *bundle {
	c := *b
	c.t = t
	return &c
}

// TestPeerErrorsAreNoPasswordOracle checks that a connection error a viewer
// reads does not tell a weak password by masking it wherever it appears: a
// peer whose password equals its user name, or is a single letter, shows
// the error text as the server gave it.
func TestPeerErrorsAreNoPasswordOracle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	port := pgtest.SourceCluster(t).Port()
	for _, c := range []struct{ name, user, password string }{
		{"same", "peeruser", "peeruser"},
		{"letter", "alphauser", "a"},
	} {
		b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, map[string]any{
			"name": c.name, "host": "127.0.0.1", "port": port, "user": c.user, "password": c.password,
			"database": "postgres", "ssl_mode": "disable",
		}, http.StatusCreated)
		msg := b.requireError(http.MethodGet, "/v1/peers/"+c.name+"/tables", b.viewerToken, nil, http.StatusBadRequest,
			"user="+c.user)
		require.NotContains(t, msg, "*", c.name)
	}
}

// TestPeerHostIsOneHost checks that a peer's host is one host name or IP
// address: a Unix-socket path (a socket can log in as pgmirror's own OS
// user) and a list of hosts are refused with a 400 that says what to do,
// on create and update; with AllowSocketPeers a socket directory is
// accepted and connects.
func TestPeerHostIsOneHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ensurePeerRole(t, pgtest.SourceCluster(t))
	port := pgtest.SourceCluster(t).Port()
	peer := func(name, host string) map[string]any {
		return map[string]any{"name": name, "host": host, "port": port, "user": peerRole, "password": peerPassword,
			"database": "postgres", "ssl_mode": "disable"}
	}
	for _, c := range []struct{ host, want string }{
		{"/tmp/sock", "SERVICE_ALLOW_SOCKET_PEERS"},
		{pgtest.SourceCluster(t).DataDir(), "Unix-socket"},
		{"10.255.255.1,127.0.0.1", "list of hosts"},
		{"db.example.com:5432", "not a host name"},
		{"bad host", "not a host name"},
		{"-x.example", "not a host name"},
		{"host=evil", "not a host name"},
	} {
		b.requireError(http.MethodPost, "/v1/peers", b.adminToken, peer("p", c.host), http.StatusBadRequest, "host", c.want)
	}
	for _, host := range []string{"db_1.internal.example.", "a-b.c", "10.0.0.5", "fe80::1%eth0", strings.Repeat("a", 63) + ".b"} {
		require.True(t, httpapi.ValidHost(host), host)
	}
	for _, host := range []string{"", ".", "a..b", strings.Repeat("a", 64), "a.-b", "[::1]", "a/b", "ä.example"} {
		require.False(t, httpapi.ValidHost(host), host)
	}
	for i, host := range []string{"127.0.0.1", "localhost", "::1"} {
		b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, peer(fmt.Sprintf("ok%d", i), host), http.StatusCreated)
	}
	b.requireError(http.MethodPut, "/v1/peers/ok0", b.adminToken, map[string]any{"host": "/var/run/postgresql"}, http.StatusBadRequest, "Unix-socket")
	b.requireError(http.MethodPut, "/v1/peers/ok0", b.adminToken, map[string]any{"host": "a,b"}, http.StatusBadRequest, "list of hosts")

	// The operator allows sockets: the source cluster's socket directory.
	allowed := setupWith(t, func(c *httpapi.Config) { c.AllowSocketPeers = true })
	allowed.mustDo(http.MethodPost, "/v1/peers", allowed.adminToken, peer("sock", pgtest.SourceCluster(t).DataDir()), http.StatusCreated)
	var result struct {
		Success bool
		Error   string
	}
	allowed.mustDecode(http.MethodPost, "/v1/peers/sock/test", allowed.adminToken, nil, http.StatusOK, &result)
	require.True(t, result.Success, result.Error)
	allowed.requireError(http.MethodPost, "/v1/peers", allowed.adminToken, peer("list", "/a,/b"), http.StatusBadRequest, "list of hosts")
}
