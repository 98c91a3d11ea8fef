package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// TestDemo runs `pgmirror demo` as `make demo` does, on a fresh embedded
// default, with a short load: it shows the mirror running and the rows
// arriving, tells how to look, and on Ctrl-C deletes its mirror, peers and
// databases and stops what it started.
func TestDemo(t *testing.T) {
	t.Parallel()
	e := newEmbedded(t)
	port, err := localpg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "demo", "-duration", "3s", "-rate", "20")
	cmd.Env = append(os.Environ(), append(e.env(), "SERVICE_PORT="+strconv.Itoa(port),
		"SERVICE_DATABASE_URL=", "SERVICE_ENCRYPTION_KEY=", "SERVICE_ADMIN_PASSWORD=")...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("demo output:\n%s", out.String())
			if log, err := os.ReadFile(filepath.Join(e.dataDir, "demo-service.log")); err == nil {
				t.Logf("service log:\n%s", tail(string(log), 4000))
			}
		}
	})

	waitFor(t, "the demo to finish its load and wait for Ctrl-C", 3*time.Minute, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the demo ended early: %v", err)
		default:
		}
		return strings.Contains(out.String(), "press Ctrl-C")
	})
	text := out.String()
	if !regexp.MustCompile(`mirror demo: running \| lag [0-9.]+ s \| source \d+ rows, destination \d+ rows`).MatchString(text) {
		t.Errorf("no status line of a running mirror in the output:\n%s", text)
	}
	m := regexp.MustCompile(`caught up: (\d+) rows on both sides`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("the demo did not report catching up:\n%s", text)
	}
	if n, _ := strconv.Atoi(m[1]); n <= demoRows-100 {
		t.Errorf("caught up with %d rows, want about %d", n, demoRows)
	}
	for _, want := range []string{"/docs", "/metrics", "psql", "curl"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo does not tell how to look with %s", want)
		}
	}

	// While it waits, the destination really has the rows.
	password := strings.TrimSpace(e.password())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst, err := pgx.Connect(ctx, demoCluster{port: e.port, password: password}.url(demoDestinationDB))
	if err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.orders`).Scan(&rows); err != nil || rows != mustAtoi(m[1]) {
		t.Errorf("destination has %d rows (%v), the demo said %s", rows, err, m[1])
	}
	dst.Close(ctx)

	// Ctrl-C: cleanup, then everything stops.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the demo exited with %v after Ctrl-C", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the demo did not stop within 2 minutes of Ctrl-C")
	}
	if _, err := os.Stat(filepath.Join(e.dataDir, "data", "postmaster.pid")); !os.IsNotExist(err) {
		t.Errorf("the embedded cluster still runs after the demo (%v)", err)
	}
	c, err := e.cluster()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	conn, err := pgx.Connect(ctx, c.SocketURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dbs, slots int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_database WHERE datname LIKE 'pgmirror_demo_%'),
		(SELECT count(*) FROM pg_replication_slots)`).Scan(&dbs, &slots); err != nil {
		t.Fatal(err)
	}
	if dbs != 0 || slots != 0 {
		t.Errorf("after the demo: %d demo databases and %d replication slots left, want none", dbs, slots)
	}
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
