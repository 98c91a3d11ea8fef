package localpg

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// startCluster starts a cluster with cfg and stops it when the test ends.
func startCluster(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { stopQuietly(c) })
	return c
}

func stopQuietly(c *Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.StopImmediate(ctx)
}

func stop(t *testing.T, c *Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func tempDir(t *testing.T) string {
	t.Helper()
	dir, err := TempDir("", "localpg-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// tcpURL is a TCP URL for the superuser with the given password.
func tcpURL(c *Cluster, password string) string {
	return "postgres://postgres:" + password + "@127.0.0.1:" + strconv.Itoa(c.Port()) + "/postgres?sslmode=disable"
}

// login connects over TCP with password and returns the error, if any.
func login(t *testing.T, c *Cluster, password string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, tcpURL(c, password))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func requireWrongPassword(t *testing.T, err error, what string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
		t.Fatalf("%s: want password authentication failure (28P01), got %v", what, err)
	}
}

func requireSecretFile(t *testing.T, path string) string {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("password file: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %04o, want 0600", path, st.Mode().Perm())
	}
	if uid := st.Sys().(*syscall.Stat_t).Uid; int(uid) != os.Geteuid() {
		t.Errorf("%s is owned by uid %d, want this process's %d", path, uid, os.Geteuid())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pw := strings.TrimSpace(string(raw))
	if !regexp.MustCompile(`^[A-Za-z0-9_-]{43,}$`).MatchString(pw) {
		t.Fatalf("password in %s is not 32+ random bytes in URL-safe base64 (length %d)", path, len(pw))
	}
	return pw
}

func TestRandomPasswordKeptInFile(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	cfg := Config{DataDir: filepath.Join(dir, "data"), PasswordFile: filepath.Join(dir, "pw")}
	c := startCluster(t, cfg)
	pw := requireSecretFile(t, cfg.PasswordFile)
	if c.Password() != pw {
		t.Fatal("Cluster.Password differs from the password file")
	}
	if err := login(t, c, pw); err != nil {
		t.Fatalf("login with the password from the file: %v", err)
	}
	requireWrongPassword(t, login(t, c, legacyPassword), "login with the old fixed password")

	// Password logins only, on loopback and the socket; no trust anywhere.
	conn, err := pgx.Connect(context.Background(), c.SocketURL("postgres"))
	if err != nil {
		t.Fatalf("connect through the socket: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT type, coalesce(address, ''), auth_method FROM pg_hba_file_rules`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var typ, addr, method string
		if err := rows.Scan(&typ, &addr, &method); err != nil {
			t.Fatal(err)
		}
		n++
		if method != "scram-sha-256" || (typ != "local" && addr != "127.0.0.1" && addr != "::1") {
			t.Errorf("pg_hba rule %s %s %s: want scram-sha-256 on the socket or loopback only", typ, addr, method)
		}
	}
	if rows.Err() != nil || n == 0 {
		t.Fatalf("read pg_hba_file_rules: %d rules, %v", n, rows.Err())
	}
	var listen string
	if err := conn.QueryRow(context.Background(), `SHOW listen_addresses`).Scan(&listen); err != nil || listen != "127.0.0.1" {
		t.Fatalf("listen_addresses = %q (%v), want 127.0.0.1", listen, err)
	}

	// A restart keeps the password.
	stop(t, c)
	c2 := startCluster(t, cfg)
	if c2.Password() != pw || c2.Reused() {
		t.Fatalf("after a restart: password kept %v, reused %v; want kept and not reused", c2.Password() == pw, c2.Reused())
	}
	if err := login(t, c2, pw); err != nil {
		t.Fatalf("login after restart: %v", err)
	}
}

func TestThrowawayClustersGetDifferentPasswords(t *testing.T) {
	t.Parallel()
	a := startCluster(t, Config{DataDir: filepath.Join(tempDir(t), "data")})
	b := startCluster(t, Config{DataDir: filepath.Join(tempDir(t), "data")})
	if len(a.Password()) < 43 || a.Password() == b.Password() {
		t.Fatalf("passwords of two clusters: lengths %d and %d, equal %v; want 43+ and different", len(a.Password()), len(b.Password()), a.Password() == b.Password())
	}
	if err := login(t, a, a.Password()); err != nil {
		t.Fatal(err)
	}
	requireWrongPassword(t, login(t, a, b.Password()), "login with another cluster's password")
}

// setPassword gives the superuser of the running cluster c a password.
func setPassword(t *testing.T, c *Cluster, password string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), c.SocketURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "ALTER ROLE postgres PASSWORD '"+password+"'"); err != nil {
		t.Fatal(err)
	}
}

func TestLegacyPasswordReplacedOnFirstStart(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	cfg := Config{DataDir: filepath.Join(dir, "data"), PasswordFile: filepath.Join(dir, "pw")}
	// A cluster as earlier versions left it: password "postgres", no file.
	c := startCluster(t, cfg)
	setPassword(t, c, legacyPassword)
	stop(t, c)
	if err := os.Remove(cfg.PasswordFile); err != nil {
		t.Fatal(err)
	}

	c = startCluster(t, cfg)
	pw := requireSecretFile(t, cfg.PasswordFile)
	if pw == legacyPassword || c.Password() != pw {
		t.Fatal("the cluster did not get a new password from the file")
	}
	if err := login(t, c, pw); err != nil {
		t.Fatalf("login with the new password: %v", err)
	}
	requireWrongPassword(t, login(t, c, legacyPassword), "login with the old fixed password after the upgrade")
	if _, err := os.Stat(cfg.PasswordFile + ".new"); !os.IsNotExist(err) {
		t.Errorf("the pending password file is still there: %v", err)
	}

	// A start interrupted after ALTER ROLE: the cluster has the pending
	// password, the file is not renamed yet. The next start adopts it.
	pending := "pending-password-0123456789-abcdefghijklmnopqrstu"
	setPassword(t, c, pending)
	stop(t, c)
	if err := os.Remove(cfg.PasswordFile); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(cfg.PasswordFile+".new", pending); err != nil {
		t.Fatal(err)
	}
	c = startCluster(t, cfg)
	if got := requireSecretFile(t, cfg.PasswordFile); got != pending {
		t.Fatalf("password file after an interrupted upgrade holds another password than the pending one")
	}
	if err := login(t, c, pending); err != nil {
		t.Fatal(err)
	}
}

func TestPasswordFileReadableByOthersRefused(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	cfg := Config{DataDir: filepath.Join(dir, "data"), PasswordFile: filepath.Join(dir, "pw")}
	stop(t, startCluster(t, cfg))
	if err := os.Chmod(cfg.PasswordFile, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "chmod 600 "+cfg.PasswordFile) {
		t.Fatalf("start with a world-readable password file: %v; want a refusal that says chmod 600", err)
	}
}

func TestPortTakenByAnotherServerRefused(t *testing.T) {
	t.Parallel()
	other := startCluster(t, Config{DataDir: filepath.Join(tempDir(t), "data")})
	dir := tempDir(t)
	cfg := Config{DataDir: filepath.Join(dir, "data"), Port: other.Port(), PasswordFile: filepath.Join(dir, "pw")}
	c, err := Start(context.Background(), cfg)
	if c != nil {
		stopQuietly(c)
	}
	var taken *PortTakenError
	if !errors.As(err, &taken) || taken.Port != other.Port() {
		t.Fatalf("start on the port of another cluster: %v; want a PortTakenError for port %d", err, other.Port())
	}
	if !strings.Contains(err.Error(), strconv.Itoa(other.Port())) || !strings.Contains(err.Error(), cfg.DataDir) {
		t.Errorf("message %q does not name the port and the data directory", err)
	}
	// The other server was never sent our password: it is still the only
	// one there, and ours did not start.
	if err := login(t, other, other.Password()); err != nil {
		t.Fatalf("the other cluster: %v", err)
	}

	// Something that is not PostgreSQL at all.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg.Port = l.Addr().(*net.TCPAddr).Port
	if c, err = Start(context.Background(), cfg); !errors.As(err, &taken) {
		if c != nil {
			stopQuietly(c)
		}
		t.Fatalf("start on a port another program listens on: %v; want a PortTakenError", err)
	}
}

func TestRunningClusterReused(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	cfg := Config{DataDir: filepath.Join(dir, "data"), PasswordFile: filepath.Join(dir, "pw")}
	first := startCluster(t, cfg)
	cfg.Port = first.Port()
	again, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start while the same cluster runs: %v", err)
	}
	if !again.Reused() || first.Reused() {
		t.Fatalf("Reused: first %v, second %v; want false, true", first.Reused(), again.Reused())
	}
	if err := login(t, again, again.Password()); err != nil {
		t.Fatal(err)
	}

	// The same cluster asked for on another port: refused with what to do.
	cfg.Port, _ = FreePort()
	_, err = Start(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "already running on port "+strconv.Itoa(first.Port())) {
		t.Fatalf("start on another port while running: %v; want a refusal naming port %d", err, first.Port())
	}
}

func TestParentDirectoryModesUnchanged(t *testing.T) {
	t.Parallel()
	root := tempDir(t)
	open := filepath.Join(root, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	before := modes(t, root, open)
	cfg := Config{DataDir: filepath.Join(open, "svc", "data"), PasswordFile: filepath.Join(open, "svc", "pw")}
	startCluster(t, cfg)
	if after := modes(t, root, open); after != before {
		t.Fatalf("modes of the existing parent directories changed: %s -> %s", before, after)
	}

	if os.Geteuid() != 0 {
		t.Skip("the cluster runs as this user: no directory needs to let another user through")
	}
	// The postgres user may not enter "closed": refused, not chmod-ed.
	closed := filepath.Join(root, "closed")
	if err := os.Mkdir(closed, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o750); err != nil {
		t.Fatal(err)
	}
	before = modes(t, root, closed)
	_, err := Start(context.Background(), Config{DataDir: filepath.Join(closed, "svc", "data")})
	if err == nil || !strings.Contains(err.Error(), "may not enter "+closed+" (mode 0750") || !strings.Contains(err.Error(), "chmod o+x "+closed) {
		t.Fatalf("start below a directory postgres cannot enter: %v; want a refusal naming %s and what to do", err, closed)
	}
	if after := modes(t, root, closed); after != before {
		t.Fatalf("modes changed: %s -> %s", before, after)
	}
}

// modes lists the permission bits of dirs.
func modes(t *testing.T, dirs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, d := range dirs {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(d + "=" + st.Mode().Perm().String() + " ")
	}
	return b.String()
}
