package localpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PortTakenError is returned by Start when another program listens on the
// cluster's port: the server there is not the cluster of this data
// directory, and Start neither uses it nor sends it the password.
type PortTakenError struct {
	Port    int
	DataDir string
	Err     error
}

func (e *PortTakenError) Error() string {
	return fmt.Sprintf("port %d on 127.0.0.1 is taken by another program, not by the PostgreSQL cluster in %s: stop that program or choose another port", e.Port, e.DataDir)
}

func (e *PortTakenError) Unwrap() error { return e.Err }

// running reports whether the cluster of this data directory is already
// running (pg_ctl status), and refuses one that runs on another port.
func (c *Cluster) running(ctx context.Context) (bool, error) {
	err := c.command(ctx, "pg_ctl", "-D", c.cfg.DataDir, "status").Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 3 { // not running
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pg_ctl status of %s: %w", c.cfg.DataDir, err)
	}
	port, err := c.pidFilePort()
	if err != nil {
		return false, err
	}
	if port != c.cfg.Port {
		return false, fmt.Errorf("the PostgreSQL cluster in %s is already running on port %d, not %d: stop it (pg_ctl -D %s -m fast stop) or use port %d", c.cfg.DataDir, port, c.cfg.Port, c.cfg.DataDir, port)
	}
	return true, nil
}

// pidFilePort reads the port from postmaster.pid (its fourth line).
func (c *Cluster) pidFilePort() (int, error) {
	path := filepath.Join(c.cfg.DataDir, "postmaster.pid")
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) < 4 {
		return 0, fmt.Errorf("%s is incomplete: the server may still be starting; try again", path)
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	if err != nil {
		return 0, fmt.Errorf("%s: bad port line %q", path, lines[3])
	}
	return port, nil
}

// checkPortFree returns a *PortTakenError when 127.0.0.1:port cannot be
// bound: another program listens there.
func (c *Cluster) checkPortFree() error {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.cfg.Port)))
	if err != nil {
		return &PortTakenError{Port: c.cfg.Port, DataDir: c.cfg.DataDir, Err: err}
	}
	return l.Close()
}

// verifyOwn checks, through the Unix socket inside the data directory
// (which only this cluster's postmaster can have created), that the server
// serves this data directory on the configured port: so it holds the
// 127.0.0.1 port, and the password goes to no one else. A reused cluster
// rereads its configuration files, which Start has just rewritten.
func (c *Cluster) verifyOwn(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.SocketURL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the PostgreSQL cluster in %s through its socket: %w", c.cfg.DataDir, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var dir string
	var port int
	if err := conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('port')::int`).Scan(&dir, &port); err != nil {
		return fmt.Errorf("ask the PostgreSQL cluster in %s for its data directory: %w", c.cfg.DataDir, err)
	}
	if !sameFile(dir, c.cfg.DataDir) || port != c.cfg.Port {
		return fmt.Errorf("the server on the socket in %s serves %s on port %d, not %s on port %d: stop it", c.cfg.DataDir, dir, port, c.cfg.DataDir, c.cfg.Port)
	}
	if c.reused {
		if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			return fmt.Errorf("reload the configuration of the PostgreSQL cluster in %s: %w", c.cfg.DataDir, err)
		}
	}
	return nil
}

// sameFile reports whether two paths name the same file.
func sameFile(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(sa, sb)
}
