package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// These tests run the real pgmirror binary as separate processes against
// real PostgreSQL clusters and talk to it over HTTP, the way a user does.

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pgmirror-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "pgmirror")
	build := exec.Command("go", "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build pgmirror:", err)
		os.Exit(1)
	}
	code := pgtest.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

const testAdminPassword = "admin-password-for-tests"

// testEncryptionKey is the catalog encryption key of every service the tests
// start (base64 of 32 bytes), so that a restarted service reads its secrets.
const testEncryptionKey = "cGdtaXJyb3ItdGVzdC1lbmNyeXB0aW9uLWtleS0zMmI="

// service is one running `pgmirror serve` process.
type service struct {
	t       *testing.T
	cmd     *exec.Cmd
	baseURL string
	token   string
	output  *syncBuffer
	done    chan struct{}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startService starts pgmirror serve on catalogURL and logs in as admin.
//
// The port is free when launchService picks it, but another process (a
// client's outgoing connection takes ports of the same range) may take it
// before the service listens: then the service is started again on a new
// port, up to three times.
func startService(t *testing.T, catalogURL string, env ...string) *service {
	t.Helper()
	s := launchService(t, catalogURL, env...)
	for range 3 {
		if !s.lostItsPort() {
			break
		}
		t.Logf("port %s was taken before pgmirror listened on it; starting it on another", s.baseURL)
		s = launchService(t, catalogURL, env...)
	}
	s.waitReady()
	return s
}

// lostItsPort waits until s answers /health or exits, and says whether it
// exited because its port was taken.
func (s *service) lostItsPort() bool {
	return s.awaitStart() == startExited && strings.Contains(s.output.String(), "bind: address already in use")
}

// launchService starts pgmirror serve on catalogURL without waiting for it.
func launchService(t *testing.T, catalogURL string, env ...string) *service {
	t.Helper()
	port, err := localpg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dropOriginsAtEnd(t, catalogURL)
	cmd := exec.Command(binary, "serve")
	cmd.Env = append(os.Environ(),
		"SERVICE_DATABASE_URL="+catalogURL,
		"SERVICE_ENCRYPTION_KEY="+testEncryptionKey,
		"SERVICE_PORT="+strconv.Itoa(port),
		"SERVICE_ADMIN_PASSWORD="+testAdminPassword,
		"SERVICE_LOG_LEVEL=debug",
	)
	cmd.Env = append(cmd.Env, env...)
	s := &service{t: t, cmd: cmd, baseURL: fmt.Sprintf("http://127.0.0.1:%d", port), output: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = s.output
	cmd.Stderr = s.output
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgmirror: %v", err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("pgmirror output (%s):\n%s", s.baseURL, tail(s.output.String(), 6000))
		}
	})
	return s
}

// originCleanups records the catalogs whose mirrors' replication origins
// a test drops when it ends.
var originCleanups sync.Map

// dropOriginsAtEnd drops, once the test's services have stopped, the
// replication origins its mirrors left in the shared clusters: a mirror
// the test did not delete keeps its origins, and a suite's worth of them
// would use up the destination's replication states. Registered before
// the first service of catalogURL starts, so it runs after every one of
// them is killed.
func dropOriginsAtEnd(t *testing.T, catalogURL string) {
	if _, loaded := originCleanups.LoadOrStore(catalogURL, true); loaded {
		return
	}
	t.Cleanup(func() {
		defer originCleanups.Delete(catalogURL)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, catalogURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT 'pgmirror_' || uid::text FROM mirrors`)
		if err != nil {
			return
		}
		prefixes, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return
		}
		pgtest.DropReplicationOrigins(t, prefixes...)
	})
}

// waitReady waits until the service answers /health and logs in as admin.
func (s *service) waitReady() {
	s.t.Helper()
	s.waitHealthy()
	var login struct {
		Token string `json:"token"`
	}
	s.mustDo("POST", "/v1/auth/login", map[string]string{"username": "admin", "password": testAdminPassword}, 200, &login)
	s.token = login.Token
}

// waitHealthy waits until the service answers /health.
func (s *service) waitHealthy() {
	s.t.Helper()
	switch s.awaitStart() {
	case startExited:
		s.t.Fatalf("pgmirror exited during startup:\n%s", s.output.String())
	case startTimedOut:
		s.t.Fatalf("pgmirror did not become healthy:\n%s", s.output.String())
	}
}

// How a service's start ended (awaitStart).
const (
	startHealthy = iota
	startExited
	startTimedOut
)

// awaitStart waits up to 90 s until s answers /health or its process exits.
// The answer counts once s logged that it listens: until then another
// test's service may hold the port (taken between FreePort and s's listen)
// and answer in its place.
func (s *service) awaitStart() int {
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.Contains(s.output.String(), "pgmirror serving") {
			if resp, err := http.Get(s.baseURL + "/health"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return startHealthy
				}
			}
		}
		select {
		case <-s.done:
			return startExited
		default:
		}
		if time.Now().After(deadline) {
			return startTimedOut
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// kill stops the process at once (SIGKILL), like a crash.
func (s *service) kill() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
	<-s.done
}

// terminate sends SIGTERM and waits for a graceful exit.
func (s *service) terminate(timeout time.Duration) {
	s.t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		s.t.Fatalf("pgmirror did not exit within %s of SIGTERM", timeout)
	}
}

// do sends a request and decodes the JSON response into out (when not nil).
func (s *service) do(method, path string, body any, out any) int {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.baseURL+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
	return resp.StatusCode
}

func (s *service) mustDo(method, path string, body any, want int, out any) {
	s.t.Helper()
	var raw json.RawMessage
	got := s.do(method, path, body, &raw)
	if got != want {
		s.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

// createPeer registers a database URL of a test cluster as a peer.
func (s *service) createPeer(name, dbURL string) {
	s.t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		s.t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	pw, _ := u.User.Password()
	s.mustDo("POST", "/v1/peers", map[string]any{
		"name": name, "host": u.Hostname(), "port": port, "user": u.User.Username(),
		"password": pw, "database": strings.TrimPrefix(u.Path, "/"), "ssl_mode": "disable",
	}, 201, nil)
}

type tableStatus struct {
	TableName    string `json:"table_name"`
	Status       string `json:"status"`
	RowsSynced   int64  `json:"rows_synced"`
	RowsInserted int64  `json:"rows_inserted"`
	RowsUpdated  int64  `json:"rows_updated"`
	RowsDeleted  int64  `json:"rows_deleted"`
}

type mirrorStatus struct {
	Name            string        `json:"name"`
	Status          string        `json:"status"`
	LastLSN         string        `json:"last_lsn"`
	LastSyncBatchID int64         `json:"last_sync_batch_id"`
	ErrorMessage    string        `json:"error_message"`
	ErrorCount      int           `json:"error_count"`
	Tables          []tableStatus `json:"tables"`
}

func (s *service) mirror(name string) mirrorStatus {
	s.t.Helper()
	var m mirrorStatus
	s.mustDo("GET", "/v1/mirrors/"+name, nil, 200, &m)
	return m
}

// waitStatus waits until the mirror has the given status.
func (s *service) waitStatus(name, status string, timeout time.Duration) mirrorStatus {
	s.t.Helper()
	return waitUntil(s.t, timeout, func() (mirrorStatus, bool) {
		m := s.mirror(name)
		return m, m.Status == status
	}, func(m mirrorStatus) string {
		return fmt.Sprintf("mirror %s: status %q (error %q), want %q after %s", name, m.Status, m.ErrorMessage, status, timeout)
	})
}

type logEntry struct {
	Level   string         `json:"level"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

func (s *service) logs(name string, query string) []logEntry {
	s.t.Helper()
	var out struct {
		Logs  []logEntry `json:"logs"`
		Total int        `json:"total"`
	}
	s.mustDo("GET", "/v1/mirrors/"+name+"/logs?limit=500&"+query, nil, 200, &out)
	return out.Logs
}

// noWarnings fails the test for each WARN and ERROR entry in the mirror's
// log.
func (s *service) noWarnings(name string) {
	s.t.Helper()
	for _, level := range []string{"ERROR", "WARN"} {
		for _, e := range s.logs(name, "level="+level) {
			s.t.Errorf("%s entry %q: %v", level, e.Message, e.Details)
		}
	}
}

func hasLog(entries []logEntry, message string) bool {
	for _, e := range entries {
		if e.Message == message {
			return true
		}
	}
	return false
}

// tableDigest returns the row count and an order-independent checksum of
// a table's rows (duplicates count), for exact equality checks.
func tableDigest(t *testing.T, dbURL, table string, columns string) (int64, string) {
	t.Helper()
	n, sum, err := tryDigest(dbURL, table, columns)
	if err != nil {
		t.Fatal(err)
	}
	return n, sum
}

func tryDigest(dbURL, table string, columns string) (int64, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close(ctx)
	var n int64
	var sum string
	q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(r, ',' ORDER BY r)), '') FROM (SELECT (%s)::text AS r FROM %s) s`, columns, table)
	if err := conn.QueryRow(ctx, q).Scan(&n, &sum); err != nil {
		return 0, "", fmt.Errorf("digest %s: %w", table, err)
	}
	return n, sum, nil
}

// waitEqual waits until the table has the same rows on both sides.
func waitEqual(t *testing.T, srcURL, dstURL, srcTable, dstTable, columns string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sn, ss := tableDigest(t, srcURL, srcTable, columns)
		// The destination table may not exist yet.
		dn, ds, err := tryDigest(dstURL, dstTable, columns)
		if err == nil && sn == dn && ss == ds {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: source has %d rows (%s), destination %s has %d rows (%s) after %s (%v)", srcTable, sn, ss, dstTable, dn, ds, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func exec1(t *testing.T, dbURL, sql string, args ...any) {
	t.Helper()
	pgtest.Exec(t, dbURL, sql, args...)
}

// newEnv gives a test its own catalog, source and destination databases on
// the shared clusters, runs sourceSQL on the source, and starts a service
// with the peers "src" and "dst".
func newEnv(t *testing.T, sourceSQL string) (catalog, src, dst string, s *service) {
	t.Helper()
	catalog = pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src = pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst = pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, sourceSQL)
	s = startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	return catalog, src, dst, s
}
