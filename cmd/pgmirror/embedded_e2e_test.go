package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// embedded is the environment of a `pgmirror serve` without
// SERVICE_DATABASE_URL: its data directory and embedded port.
type embedded struct {
	t       *testing.T
	dataDir string
	port    int
}

func newEmbedded(t *testing.T) *embedded {
	t.Helper()
	root, err := localpg.TempDir("", "pgmirror-embedded-")
	if err != nil {
		t.Fatal(err)
	}
	port, err := localpg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	e := &embedded{t: t, dataDir: filepath.Join(root, "svc"), port: port}
	t.Cleanup(func() {
		e.stopCluster() // whatever a test left running
		os.RemoveAll(root)
	})
	return e
}

func (e *embedded) env() []string {
	return []string{"SERVICE_DATA_DIR=" + e.dataDir, "SERVICE_EMBEDDED_PG_PORT=" + strconv.Itoa(e.port)}
}

func (e *embedded) passwordFile() string { return filepath.Join(e.dataDir, embeddedPasswordFile) }

// cluster starts (or reuses) the embedded cluster the way pgmirror does.
func (e *embedded) cluster() (*localpg.Cluster, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(e.dataDir, "data"), Port: e.port,
		Logical: true, Durable: true, PasswordFile: e.passwordFile()})
}

// stopCluster stops the embedded cluster if it runs.
func (e *embedded) stopCluster() {
	if _, err := os.Stat(filepath.Join(e.dataDir, "data", "postmaster.pid")); err != nil {
		return
	}
	if c, err := e.cluster(); err == nil {
		_ = c.Stop(context.Background())
	}
}

// password reads the password file and checks its mode and form.
func (e *embedded) password() string {
	e.t.Helper()
	st, err := os.Stat(e.passwordFile())
	if err != nil {
		e.t.Fatalf("password file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		e.t.Errorf("%s has mode %04o, want 0600", e.passwordFile(), st.Mode().Perm())
	}
	raw, err := os.ReadFile(e.passwordFile())
	if err != nil {
		e.t.Fatal(err)
	}
	pw := strings.TrimSpace(string(raw))
	if len(pw) < 43 {
		e.t.Fatalf("the password in %s has %d characters, want 43+ (32 random bytes)", e.passwordFile(), len(pw))
	}
	return pw
}

// login tries the superuser password over TCP, as psql would.
func (e *embedded) login(password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "postgres://postgres:"+password+"@127.0.0.1:"+strconv.Itoa(e.port)+"/pgmirror?sslmode=disable")
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (e *embedded) requireRefused(password, what string) {
	e.t.Helper()
	var pgErr *pgconn.PgError
	if err := e.login(password); !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		e.t.Fatalf("login with %s: %v; want a password authentication failure", what, err)
	}
}

func TestEmbeddedCatalogPassword(t *testing.T) {
	t.Parallel()
	e := newEmbedded(t)
	s := startService(t, "", e.env()...)
	pw := e.password()
	if err := e.login(pw); err != nil {
		t.Fatalf("login to the embedded catalog with the password file: %v", err)
	}
	e.requireRefused("postgres", "the old fixed password")
	// The catalog itself cannot be registered as a peer.
	var refused struct{ Error string }
	if got := s.do("POST", "/v1/peers", map[string]any{"name": "catalog", "host": "localhost", "port": e.port,
		"user": "postgres", "password": pw, "database": "pgmirror", "ssl_mode": "disable"}, &refused); got != 400 ||
		!strings.Contains(refused.Error, "catalog database") {
		t.Fatalf("peer pointing at the embedded catalog: status %d %q; want 400 naming the catalog", got, refused.Error)
	}
	if strings.Contains(s.output.String(), pw) {
		t.Fatal("the log holds the embedded catalog's password")
	}

	// A crash leaves the cluster running: the next start uses it, as it is ours.
	s.kill()
	s = startService(t, "", e.env()...)
	if !strings.Contains(s.output.String(), "using the embedded PostgreSQL cluster that was already running") {
		t.Fatalf("the restarted service did not reuse the running cluster:\n%s", tail(s.output.String(), 3000))
	}
	s.mustDo("GET", "/v1/peers", nil, 200, nil)
	if e.password() != pw {
		t.Fatal("the password changed across a restart")
	}
	s.terminate(time.Minute)
	e.stopCluster()

	// A cluster made by an earlier version: password "postgres", no file.
	c, err := e.cluster()
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, c.SocketURL("postgres"), `ALTER ROLE postgres PASSWORD 'postgres'`)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(e.passwordFile()); err != nil {
		t.Fatal(err)
	}
	s = startService(t, "", e.env()...)
	upgraded := e.password()
	if upgraded == pw {
		t.Fatal("the upgraded cluster got the same password as before")
	}
	if err := e.login(upgraded); err != nil {
		t.Fatalf("login with the new password after the upgrade: %v", err)
	}
	e.requireRefused("postgres", "the old fixed password after the upgrade")
	s.mustDo("GET", "/v1/peers", nil, 200, nil)
	s.terminate(time.Minute)
}

func TestEmbeddedPortTakenRefused(t *testing.T) {
	t.Parallel()
	other := pgtest.NewCluster(t, false)
	e := newEmbedded(t)
	e.port = other.Port()
	s := launchService(t, "", e.env()...)
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		t.Fatal("pgmirror did not stop on a port taken by another server")
	}
	out := s.output.String()
	if code := s.cmd.ProcessState.ExitCode(); code == 0 {
		t.Fatalf("pgmirror exited with 0 on a taken port:\n%s", out)
	}
	for _, want := range []string{"port " + strconv.Itoa(other.Port()) + " on 127.0.0.1 is taken by another program", "SERVICE_EMBEDDED_PG_PORT"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output does not say %q:\n%s", want, tail(out, 3000))
		}
	}
	// The other server is untouched and still the one on the port.
	pgtest.Exec(t, other.URL("postgres"), `SELECT 1`)
}

// TestEmbeddedDefaultFromScratch: `make run` on a fresh checkout, with no
// key and no data directory yet. The service creates the data directory
// (traversable by the postgres OS user when it runs as root, so the cluster
// below it can start), its key file (0600) and the cluster, and serves.
func TestEmbeddedDefaultFromScratch(t *testing.T) {
	t.Parallel()
	e := newEmbedded(t)
	if _, err := os.Stat(e.dataDir); !os.IsNotExist(err) {
		t.Fatalf("the data directory %s exists before the start (%v)", e.dataDir, err)
	}
	s := startService(t, "", append(e.env(), "SERVICE_ENCRYPTION_KEY=")...)
	var health map[string]string
	if err := getJSON(s, "/ready", &health); err != nil || health["status"] != "ready" {
		t.Fatalf("GET /ready: %v %v", health, err)
	}
	st, err := os.Stat(filepath.Join(e.dataDir, "encryption.key"))
	if err != nil {
		t.Fatalf("key file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", st.Mode().Perm())
	}
	dir, err := os.Stat(e.dataDir)
	if err != nil {
		t.Fatal(err)
	}
	want := os.FileMode(0o700)
	if os.Geteuid() == 0 {
		want = 0o711
	}
	if dir.Mode().Perm() != want {
		t.Errorf("data directory mode %04o, want %04o", dir.Mode().Perm(), want)
	}
	checkEmbeddedPolicy(t, e, s)
	s.terminate(30 * time.Second)
}
