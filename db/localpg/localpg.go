// Package localpg starts and stops local PostgreSQL clusters with the server
// binaries installed on the machine (initdb, pg_ctl).
//
// It backs the embedded catalog of `pgmirror serve` when no
// SERVICE_DATABASE_URL is given, the throwaway clusters of the test suite and
// the benchmark. When the process runs as root, the binaries run as the
// postgres user (initdb refuses root) and the data directory is handed to it;
// the directories above it are never chmod-ed: they must let that user
// through (see TempDir).
//
// Every cluster has a random superuser password (see Config.PasswordFile and
// Cluster.Password) and accepts password (SCRAM) logins only, on 127.0.0.1
// and on the Unix socket inside its data directory.
package localpg

import (
	"bytes"

	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Config describes a cluster to start.
type Config struct {
	// DataDir is the cluster's data directory. It is initialised with initdb
	// when it holds no cluster yet.
	DataDir string
	// Port is the TCP port on 127.0.0.1. Zero picks a free port.
	Port int
	// Logical sets wal_level=logical and room for replication slots, so the
	// cluster can be a mirror source.
	Logical bool
	// Durable keeps fsync on. Test clusters turn it off for speed.
	Durable bool
	// BinDir holds initdb and pg_ctl. Empty means what FindBinDir("")
	// finds: /usr/lib/postgresql/15/bin, another installed major, or the
	// directory of pg_config --bindir.
	BinDir string
	// Settings are extra postgresql.conf lines, name to value.
	Settings map[string]string
	// Files are extra files written into the data directory before every
	// start (mode 0600, owned by the cluster's user), name to content: for
	// example server.crt and server.key with Settings ssl = on.
	Files map[string][]byte
	// PasswordFile keeps the password of the superuser "postgres", readable
	// by the owner of the process only (mode 0600). Start writes a random
	// one there before initdb, and gives a cluster created before passwords
	// were random (password "postgres") a random one on its first start.
	// Empty: the random password lives only in the Cluster, for throwaway
	// clusters that this process initialises.
	PasswordFile string
}

// Cluster is a running local PostgreSQL cluster.
type Cluster struct {
	cfg      Config
	binDir   string
	asUser   string // run binaries as this user (root case), or ""
	password string
	reused   bool
}

// FindBinDir returns the directory with initdb and pg_ctl: preferred when
// it has them (the service passes its PGBIN), else the distribution's, else
// pg_config's; or an error that says how to install them.
func FindBinDir(preferred string) (string, error) {
	candidates := []string{preferred}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(matches)))
	candidates = append(candidates, "/usr/lib/postgresql/15/bin")
	candidates = append(candidates, matches...)
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	for _, dir := range candidates {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, pg_ctl) not found: install the postgresql package (apt-get install postgresql) or set PGBIN")
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start initialises the data directory if needed and starts the cluster.
//
// A cluster of this data directory that is already running on cfg.Port is
// used as it is (Reused reports it). Start refuses, with a *PortTakenError,
// a port on which another server listens: it only ever talks to a server
// through the Unix socket inside the data directory before it trusts it
// with the password.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	binDir := cfg.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(""); err != nil {
			return nil, err
		}
	}
	if cfg.Port == 0 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		cfg.Port = port
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", cfg.DataDir, err)
	}
	cfg.DataDir = dataDir
	c := &Cluster{cfg: cfg, binDir: binDir}
	if os.Geteuid() == 0 {
		c.asUser = "postgres"
	}
	if err := c.prepareDirs(ctx); err != nil {
		return nil, err
	}
	legacy, err := c.initIfNeeded(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.writeConf(); err != nil {
		return nil, err
	}
	if c.reused, err = c.running(ctx); err != nil {
		return nil, err
	}
	if !c.reused {
		if err := c.checkPortFree(); err != nil {
			return nil, err
		}
		if err := c.start(ctx); err != nil {
			return nil, err
		}
	}
	if legacy {
		err = c.replaceLegacyPassword(ctx)
	}
	if err == nil {
		err = c.verifyOwn(ctx)
	}
	if err != nil {
		if !c.reused {
			_ = c.Stop(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	return c, nil
}

// Port is the cluster's TCP port on 127.0.0.1.
func (c *Cluster) Port() int { return c.cfg.Port }

// DataDir is the cluster's data directory.
func (c *Cluster) DataDir() string { return c.cfg.DataDir }

// Password is the password of the superuser "postgres". It is a secret:
// never log it.
func (c *Cluster) Password() string { return c.password }

// Reused reports whether the cluster was already running when Start was
// called (a previous process left it running), rather than started by it.
func (c *Cluster) Reused() bool { return c.reused }

// URL returns a connection URL over TCP (127.0.0.1) for the superuser to
// database dbname. It holds the password.
func (c *Cluster) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", c.password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.Port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// SocketURL returns a connection URL for the superuser to database dbname
// over the Unix socket in the data directory: only this cluster can answer
// there, whatever else listens on the TCP port. It holds the password.
func (c *Cluster) SocketURL(dbname string) string {
	return c.socketURL(dbname, c.password)
}

func (c *Cluster) socketURL(dbname, password string) string {
	q := url.Values{}
	q.Set("host", c.cfg.DataDir)
	q.Set("port", strconv.Itoa(c.cfg.Port))
	q.Set("sslmode", "disable")
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("postgres", password),
		Host:     "",
		Path:     "/" + dbname,
		RawQuery: q.Encode(),
	}
	return u.String()
}

// command runs one of the server binaries as the cluster's OS user.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return c.asUserCommand(ctx, filepath.Join(c.binDir, name), args...)
}

// asUserCommand runs a program as the cluster's OS user.
func (c *Cluster) asUserCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	if c.asUser != "" {
		args = append([]string{"-u", c.asUser, "--", name}, args...)
		return exec.CommandContext(ctx, "runuser", args...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func run(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Args[0]), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (c *Cluster) chown(path string) error {
	if c.asUser == "" {
		return nil
	}
	u, err := user.Lookup(c.asUser)
	if err != nil {
		return fmt.Errorf("look up user %s: %w", c.asUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// initIfNeeded runs initdb with a new random password when the data
// directory holds no cluster yet. It reports legacy when the cluster exists
// but PasswordFile does not: a cluster initialised with the fixed password
// of earlier versions, which Start replaces.
func (c *Cluster) initIfNeeded(ctx context.Context) (legacy bool, err error) {
	dir := c.cfg.DataDir
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return c.loadPassword()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create data directory %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, fmt.Errorf("chmod data directory %s: %w", dir, err)
	}
	if c.password, err = newPassword(); err != nil {
		return false, err
	}
	if c.cfg.PasswordFile != "" {
		// Written before initdb: a crash in between leaves a file whose
		// password matches no cluster, and the next start runs initdb again.
		if err := writeSecretFile(c.cfg.PasswordFile, c.password); err != nil {
			return false, err
		}
	}
	pwfile := filepath.Join(dir, "..", "."+filepath.Base(dir)+".pw")
	if err := os.WriteFile(pwfile, []byte(c.password+"\n"), 0o600); err != nil {
		return false, fmt.Errorf("write password file for initdb: %w", err)
	}
	defer os.Remove(pwfile)
	if err := c.chown(dir); err != nil {
		return false, err
	}
	if err := c.chown(pwfile); err != nil {
		return false, err
	}
	cmd := c.command(ctx, "initdb", "-D", dir, "-U", "postgres", "--pwfile="+pwfile,
		"--auth=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	if err := run(cmd); err != nil {
		return false, fmt.Errorf("initdb %s: %w", dir, err)
	}
	return false, nil
}

// hbaConf is the whole pg_hba.conf of every cluster, rewritten on each
// start: SCRAM password logins only, on the Unix socket in the data
// directory and on loopback; no trust, no other address.
const hbaConf = `# written by pgmirror localpg on every start: password (SCRAM) logins only,
# on the Unix socket in the data directory and on loopback
local   all           all                  scram-sha-256
host    all           all   127.0.0.1/32   scram-sha-256
host    all           all   ::1/128        scram-sha-256
local   replication   all                  scram-sha-256
host    replication   all   127.0.0.1/32   scram-sha-256
host    replication   all   ::1/128        scram-sha-256
`

func (c *Cluster) writeConf() error {
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(c.cfg.Port),
		"unix_socket_directories": "'" + c.cfg.DataDir + "'",
		"max_connections":         "200",
		"shared_buffers":          "128MB",
		"log_min_messages":        "warning",
		"logging_collector":       "off",
	}
	if c.cfg.Logical {
		settings["wal_level"] = "logical"
		settings["max_replication_slots"] = "64"
		settings["max_wal_senders"] = "64"
		settings["max_logical_replication_workers"] = "16"
		settings["max_worker_processes"] = "32"
	}
	if !c.cfg.Durable {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range c.cfg.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# written by pgmirror localpg on every start\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	for name, body := range c.cfg.Files {
		path := filepath.Join(c.cfg.DataDir, filepath.Base(name))
		if err := os.WriteFile(path, body, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	path := filepath.Join(c.cfg.DataDir, "postgresql.localpg.conf")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	hba := filepath.Join(c.cfg.DataDir, "pg_hba.conf")
	if err := os.WriteFile(hba, []byte(hbaConf), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", hba, err)
	}
	main := filepath.Join(c.cfg.DataDir, "postgresql.conf")
	body, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("read %s: %w", main, err)
	}
	if !bytes.Contains(body, []byte("include_if_exists = 'postgresql.localpg.conf'")) {
		body = append(body, []byte("\ninclude_if_exists = 'postgresql.localpg.conf'\n")...)
		if err := os.WriteFile(main, body, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", main, err)
		}
	}
	return c.chown(c.cfg.DataDir)
}

func (c *Cluster) start(ctx context.Context) error {
	logFile := filepath.Join(c.cfg.DataDir, "server.log")
	cmd := c.command(ctx, "pg_ctl", "-D", c.cfg.DataDir, "-l", logFile, "-w", "-t", "60", "-o", "-c port="+strconv.Itoa(c.cfg.Port), "start")
	if err := run(cmd); err != nil {
		tail, _ := os.ReadFile(logFile)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("start cluster in %s: %w\n%s", c.cfg.DataDir, err, tail)
	}
	return nil
}

// Restart starts a stopped cluster again on the same port.
func (c *Cluster) Restart(ctx context.Context) error { return c.start(ctx) }

// Stop shuts the cluster down (fast mode: active sessions are disconnected).
func (c *Cluster) Stop(ctx context.Context) error {
	cmd := c.command(ctx, "pg_ctl", "-D", c.cfg.DataDir, "-m", "fast", "-w", "-t", "60", "stop")
	if err := run(cmd); err != nil {
		return fmt.Errorf("stop cluster in %s: %w", c.cfg.DataDir, err)
	}
	return nil
}

// StopImmediate shuts the cluster down without a checkpoint, like a crash.
func (c *Cluster) StopImmediate(ctx context.Context) error {
	cmd := c.command(ctx, "pg_ctl", "-D", c.cfg.DataDir, "-m", "immediate", "-w", "-t", "60", "stop")
	if err := run(cmd); err != nil {
		return fmt.Errorf("stop cluster in %s: %w", c.cfg.DataDir, err)
	}
	return nil
}

// WaitReady waits until the server accepts TCP connections or ctx ends.
func (c *Cluster) WaitReady(ctx context.Context) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.Port))
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for cluster on %s: %w", addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
