//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestServeSchedulesBatch runs pgmirror serve with its default CPU
// scheduling and checks that every thread of the process runs under
// SCHED_BATCH, also threads the runtime started for a burst of concurrent
// requests after the start; with SERVICE_CPU_SCHEDULING=normal every thread
// keeps the default policy, and any other value stops the service at start
// with a message naming the variable.
func TestServeSchedulesBatch(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))

	s := startService(t, catalog)
	burst(s)
	policies := threadPolicies(t, s.cmd.Process.Pid)
	if len(policies) < 2 {
		t.Fatalf("found %d threads of the service, want several", len(policies))
	}
	for tid, p := range policies {
		if p != schedBatch {
			t.Errorf("thread %d runs under policy %d, want SCHED_BATCH (%d); all: %v", tid, p, schedBatch, policies)
		}
	}
	if !strings.Contains(s.output.String(), "threads scheduled as SCHED_BATCH") {
		t.Errorf("no log line says the threads run under SCHED_BATCH:\n%s", tail(s.output.String(), 3000))
	}

	normal := startService(t, catalog, "SERVICE_CPU_SCHEDULING=normal")
	burst(normal)
	for tid, p := range threadPolicies(t, normal.cmd.Process.Pid) {
		if p != schedOther {
			t.Errorf("with SERVICE_CPU_SCHEDULING=normal, thread %d runs under policy %d, want SCHED_OTHER", tid, p)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bad := exec.CommandContext(ctx, binary, "serve")
	bad.Env = append(os.Environ(), "SERVICE_DATABASE_URL="+catalog, "SERVICE_ENCRYPTION_KEY="+testEncryptionKey, "SERVICE_CPU_SCHEDULING=fast")
	out, err := bad.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `SERVICE_CPU_SCHEDULING="fast": use batch or normal`) {
		t.Errorf("SERVICE_CPU_SCHEDULING=fast: err %v, output %q; want a refusal naming the variable", err, out)
	}
}

// burst sends concurrent requests to s, so that its runtime starts threads
// beyond those of its start.
func burst(s *service) {
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 20 {
				s.do("GET", "/v1/mirrors", nil, nil)
			}
		})
	}
	wg.Wait()
}

// threadPolicies returns the scheduling policy (field 41 of
// /proc/PID/task/TID/stat) of every thread of process pid.
func threadPolicies(t *testing.T, pid int) map[int]int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("threads of process %d: %v", pid, err)
	}
	policies := map[int]int{}
	for _, e := range entries {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := processPolicy(t, filepath.Join(dir, e.Name(), "stat")); ok {
			policies[tid] = p
		}
	}
	return policies
}

// processPolicy reads the policy field of a /proc stat file; false when
// the thread or process is gone.
func processPolicy(t *testing.T, statFile string) (int, bool) {
	t.Helper()
	raw, err := os.ReadFile(statFile)
	if err != nil {
		return 0, false
	}
	// Fields after the command name's closing parenthesis start at field 3.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	const policyField = 41
	if len(fields) <= policyField-3 {
		t.Fatalf("%s has %d fields after the command name", statFile, len(fields))
	}
	p, err := strconv.Atoi(fields[policyField-3])
	if err != nil {
		t.Fatalf("%s: policy %q: %v", statFile, fields[policyField-3], err)
	}
	return p, true
}

// checkEmbeddedPolicy checks that the embedded cluster's postmaster, which
// the service started, runs under PostgreSQL's default policy while the
// service's threads run under SCHED_BATCH.
func checkEmbeddedPolicy(t *testing.T, e *embedded, s *service) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(e.dataDir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.SplitN(string(raw), "\n", 2)[0]
	if p, ok := processPolicy(t, filepath.Join("/proc", pid, "stat")); !ok || p != schedOther {
		t.Errorf("the embedded postmaster (pid %s) runs under policy %d (found: %v), want SCHED_OTHER", pid, p, ok)
	}
	if p := threadPolicies(t, s.cmd.Process.Pid)[s.cmd.Process.Pid]; p != schedBatch {
		t.Errorf("the service's main thread runs under policy %d, want SCHED_BATCH", p)
	}
}
