package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// scaleItem is a mirror as the list shows it, with its worker.
type scaleItem struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	Worker *string `json:"worker"`
}

// workersOf lists the mirrors and counts the running ones by worker (""
// for running mirrors without one).
func workersOf(s *service) (byWorker map[string]int, running int) {
	var list []scaleItem
	s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
	byWorker = map[string]int{}
	for _, m := range list {
		if m.Status != "running" {
			continue
		}
		running++
		if m.Worker == nil {
			byWorker[""]++
		} else {
			byWorker[*m.Worker]++
		}
	}
	return byWorker, running
}

// TestScale runs 30 mirrors on two replicas with the default settings
// (SERVICE_MIRROR_WORKERS 50, the default catalog pool): every create
// answers at once, every mirror runs with a worker, the mirrors spread over
// both replicas, each replica's catalog connections stay below the mirror
// count, and after a kill -9 of one replica the other runs every mirror
// within 10 s and they replicate.
func TestScale(t *testing.T) {
	t.Parallel()
	const n = 30
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
	dst := pgtest.NewDatabase(t, pgtest.NewCluster(t, false))
	var ddl strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&ddl, "CREATE TABLE public.t%d (id serial PRIMARY KEY, v text);\n", i)
		fmt.Fprintf(&ddl, "INSERT INTO public.t%d (v) SELECT 'before' FROM generate_series(1, 10);\n", i)
	}
	exec1(t, src, ddl.String())

	withApp := func(name string) string { return catalog + "&application_name=" + name }
	replicas := map[string]*service{"r1": startService(t, withApp("r1")), "r2": startService(t, withApp("r2"))}
	r1, r2 := replicas["r1"], replicas["r2"]
	r1.createPeer("src", src)
	r1.createPeer("dst", dst)
	started := time.Now()
	for i := 1; i <= n; i++ {
		s := []*service{r1, r2}[i%2]
		at := time.Now()
		table := fmt.Sprintf("t%d", i)
		s.mustDo("POST", "/v1/mirrors", map[string]any{
			"name": fmt.Sprintf("m%02d", i), "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
			"table_mappings": []any{mapping("public", table, "public", table)},
		}, 201, nil)
		if d := time.Since(at); d > 5*time.Second {
			t.Errorf("creating mirror %d took %s", i, d)
		}
	}
	waitFor(t, "every mirror running with a worker", 90*time.Second, func() bool {
		byWorker, running := workersOf(r1)
		return running == n && byWorker[""] == 0
	})
	t.Logf("%d mirrors running after %s", n, time.Since(started).Round(time.Millisecond))
	var byWorker map[string]int
	waitFor(t, "the mirrors spread over both replicas", 60*time.Second, func() bool {
		byWorker, _ = workersOf(r1)
		if len(byWorker) != 2 || byWorker[""] != 0 {
			return false
		}
		for _, c := range byWorker {
			if c < n/2-3 {
				return false
			}
		}
		return true
	})
	t.Logf("mirrors by worker: %v", byWorker)

	// Catalog connections do not grow with the mirrors: the shared pool
	// (20), River's (8) and the lock connection at most.
	for name := range replicas {
		conns := queryInt64(t, catalog, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, name)
		t.Logf("catalog connections of %s: %d", name, conns)
		if conns > 29 {
			t.Errorf("replica %s has %d catalog connections for about %d mirrors", name, conns, n/2)
		}
	}
	srcConns := queryInt64(t, src, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	dstConns := queryInt64(t, dst, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	t.Logf("source connections: %d, destination connections: %d, for %d mirrors", srcConns, dstConns, n)
	if srcConns > 2*n+4 || dstConns > 2*n+4 {
		t.Errorf("%d source and %d destination connections for %d mirrors, want at most two per mirror on each", srcConns, dstConns, n)
	}

	insertAll := func(v string) {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			fmt.Fprintf(&b, "INSERT INTO public.t%d (v) SELECT '%s' FROM generate_series(1, 10);\n", i, v)
		}
		exec1(t, src, b.String())
	}
	allEqual := func(timeout time.Duration) {
		t.Helper()
		for i := 1; i <= n; i++ {
			table := fmt.Sprintf("public.t%d", i)
			waitEqual(t, src, dst, table, table, "id, v", timeout)
		}
	}
	insertAll("streamed")
	allEqual(60 * time.Second)

	// kill -9 the replica that runs more mirrors: the other runs them all
	// within 10 s.
	victim, survivor := "r1", "r2"
	if byWorker[workerOf(t, catalog, "r2")] > byWorker[workerOf(t, catalog, "r1")] {
		victim, survivor = "r2", "r1"
	}
	killedAt := time.Now()
	replicas[victim].kill()
	survivorName := workerOf(t, catalog, survivor)
	waitFor(t, "the surviving replica to run every mirror", 30*time.Second, func() bool {
		byWorker, running := workersOf(replicas[survivor])
		return running == n && byWorker[survivorName] == n
	})
	takeover := time.Since(killedAt)
	t.Logf("takeover of the killed replica's mirrors took %s", takeover.Round(time.Millisecond))
	if takeover > 10*time.Second {
		t.Errorf("takeover after kill -9 took %s, want at most 10 s", takeover)
	}
	insertAll("after kill")
	allEqual(30 * time.Second)
	t.Logf("every mirror replicated the rows written after the kill %s after it", time.Since(killedAt).Round(time.Millisecond))
}

// workerOf is the replica name (host:pid) of the replica whose catalog
// connections carry application_name app.
func workerOf(t *testing.T, catalogURL, app string) string {
	t.Helper()
	var name string
	queryOne(t, catalogURL, &name, `SELECT r.name FROM replicas r JOIN pg_stat_activity a ON a.pid = r.lock_pid WHERE a.application_name = $1`, app)
	return name
}
