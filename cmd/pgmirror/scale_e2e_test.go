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
// (SERVICE_MIRROR_WORKERS 200, the default catalog pool): every create
// answers at once, every mirror runs with a worker, the mirrors spread over
// both replicas, each replica's catalog connections stay below the mirror
// count, and each mirror holds one source connection (its walsender) and one
// destination connection (its apply connection) beside a shared poll per
// replica on each; after a kill -9 of one replica the other runs every mirror within
// 10 s and they replicate; a replica that joins takes its share; and an
// idle mirror costs well under one source and half a catalog transaction a
// second.
func TestScale(t *testing.T) {
	t.Parallel()
	const n = 30
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
	// Every destination session that marks its writes with the mirror's
	// replication origin takes one of the destination's
	// max_replication_slots: a logical cluster has 64.
	dst := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
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
			if c < n/2-1 {
				return false
			}
		}
		return true
	})
	t.Logf("mirrors by worker: %v, %s after the first create", byWorker, time.Since(started).Round(time.Millisecond))

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
	if srcConns > n+4 || dstConns > n+4 {
		t.Errorf("%d source and %d destination connections for %d mirrors, want one per mirror on each (its walsender on the source, its apply connection on the destination) and a shared poll per replica", srcConns, dstConns, n)
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

	// A replica that joins takes its share within a minute.
	joinedAt := time.Now()
	replicas["r3"] = startService(t, withApp("r3"))
	joinerName := workerOf(t, catalog, "r3")
	waitFor(t, "the joining replica to take its share", 60*time.Second, func() bool {
		byWorker, running := workersOf(replicas[survivor])
		return running == n && byWorker[survivorName] >= n/2-1 && byWorker[joinerName] >= n/2-1
	})
	t.Logf("the joining replica runs its share %s after it started", time.Since(joinedAt).Round(time.Millisecond))

	// Idle cost per mirror: transactions on the catalog and the source
	// while nothing is written (heartbeats, position polls, status).
	xacts := func(dbURL string) int64 {
		return queryInt64(t, dbURL, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`)
	}
	const idle = 12 * time.Second
	time.Sleep(12 * time.Second) // the handed-over runs' start-up reads and writes first
	catalogBefore, srcBefore := xacts(catalog), xacts(src)
	time.Sleep(idle)
	catalogRate := float64(xacts(catalog)-catalogBefore) / idle.Seconds() / n
	srcRate := float64(xacts(src)-srcBefore) / idle.Seconds() / n
	t.Logf("idle transactions per mirror and second: catalog %.3f, source %.3f", catalogRate, srcRate)
	// The bound guards against the per-mirror polling this replaced (about
	// 2 catalog and 10 source transactions per mirror a second), and
	// against run jobs that a replica at its share refuses coming back to
	// the catalog every few seconds after a rebalance. An idle mirror
	// records its confirm ceiling in the catalog before its slot may
	// confirm past the applied position (so that a slot moved by someone
	// else is found): that adds a fraction of a transaction a second.
	if catalogRate > 1 || srcRate > 1 {
		t.Errorf("idle cost per mirror: %.3f catalog and %.3f source transactions a second, want under 1 and 1", catalogRate, srcRate)
	}
	insertAll("after join")
	allEqual(30 * time.Second)
}

// workerOf is the replica name (host:pid) of the replica whose catalog
// connections carry application_name app.
func workerOf(t *testing.T, catalogURL, app string) string {
	t.Helper()
	var name string
	queryOne(t, catalogURL, &name, `SELECT r.name FROM replicas r JOIN pg_stat_activity a ON a.pid = r.lock_pid WHERE a.application_name = $1`, app)
	return name
}

// workerStatus is the part of a mirror's status record about its worker.
type workerStatus struct {
	Status       string     `json:"status"`
	ErrorMessage *string    `json:"error_message"`
	Worker       *string    `json:"worker"`
	WorkerSeenAt *time.Time `json:"worker_seen_at"`
}

// TestDestinationRefused: a running mirror whose destination stops
// accepting connections goes to error with the database's message and no
// worker between retries, instead of staying "running"; GET shows the
// worker while it runs.
func TestDestinationRefused(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.t (id serial PRIMARY KEY, v text)`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "refused", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	s.waitStatus("refused", "running", 60*time.Second)
	var st workerStatus
	waitFor(t, "the mirror's worker", 10*time.Second, func() bool {
		s.mustDo("GET", "/v1/mirrors/refused", nil, 200, &st)
		return st.Worker != nil && st.WorkerSeenAt != nil
	})
	if !strings.Contains(*st.Worker, ":") || time.Since(*st.WorkerSeenAt) > 20*time.Second {
		t.Errorf("worker %q last seen %s", *st.Worker, st.WorkerSeenAt)
	}

	dstDB := dst[strings.LastIndex(dst, "/")+1:]
	if i := strings.Index(dstDB, "?"); i >= 0 {
		dstDB = dstDB[:i]
	}
	admin := strings.Replace(dst, "/"+dstDB, "/postgres", 1)
	exec1(t, admin, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS false`, dstDB))
	defer exec1(t, admin, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS true`, dstDB))
	exec1(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, dstDB)
	exec1(t, src, `INSERT INTO public.t (v) VALUES ('while refused')`)
	waitFor(t, "the mirror in error with the destination's message", 30*time.Second, func() bool {
		s.mustDo("GET", "/v1/mirrors/refused", nil, 200, &st)
		return st.Status == "error" && st.ErrorMessage != nil && strings.Contains(*st.ErrorMessage, "not currently accepting connections")
	})
	waitFor(t, "no worker between retries", 10*time.Second, func() bool {
		s.mustDo("GET", "/v1/mirrors/refused", nil, 200, &st)
		return st.Status == "error" && st.Worker == nil
	})
}

// TestWorkerCap: a replica runs at most SERVICE_MIRROR_WORKERS mirrors,
// also when it adopts the mirrors of a replica that died: the others wait
// without a worker (shown as such) until a replica with room adopts them.
func TestWorkerCap(t *testing.T) {
	t.Parallel()
	const n = 4
	f := newFleetDatabases(t, n)
	catalog, src, dst, withApp := f.catalog, f.src, f.dst, f.app
	capped := startService(t, withApp("capped"), "SERVICE_MIRROR_WORKERS=1")
	other := startService(t, withApp("other"))
	other.createPeer("src", src)
	other.createPeer("dst", dst)
	for i := 1; i <= n; i++ {
		table := fmt.Sprintf("t%d", i)
		other.mustDo("POST", "/v1/mirrors", map[string]any{
			"name": fmt.Sprintf("m%d", i), "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
			"table_mappings": []any{mapping("public", table, "public", table)},
		}, 201, nil)
	}
	waitFor(t, "every mirror running with a worker", 90*time.Second, func() bool {
		byWorker, running := workersOf(capped)
		return running == n && byWorker[""] == 0
	})
	cappedName, otherName := workerOf(t, catalog, "capped"), workerOf(t, catalog, "other")
	if byWorker, _ := workersOf(capped); byWorker[cappedName] > 1 {
		t.Fatalf("the replica with SERVICE_MIRROR_WORKERS=1 runs %d mirrors", byWorker[cappedName])
	}

	// The other replica dies: the capped one adopts one mirror at most.
	if byWorker, _ := workersOf(capped); byWorker[otherName] == 0 {
		t.Fatalf("mirrors by worker %v: the uncapped replica runs none", byWorker)
	}
	other.kill()
	waitFor(t, "the capped replica to run one mirror", 30*time.Second, func() bool {
		byWorker, _ := workersOf(capped)
		return byWorker[cappedName] == 1 && byWorker[""] == n-1
	})
	time.Sleep(5 * time.Second) // two adoption checks and more: still one
	if byWorker, _ := workersOf(capped); byWorker[cappedName] != 1 || byWorker[""] != n-1 {
		t.Fatalf("mirrors by worker %v, want 1 on the capped replica and %d without a worker", byWorker, n-1)
	}

	// A replica with room joins: it adopts the rest, and they replicate.
	startService(t, withApp("joined"))
	joinedName := workerOf(t, catalog, "joined")
	waitFor(t, "the joining replica to adopt the rest", 30*time.Second, func() bool {
		byWorker, running := workersOf(capped)
		return running == n && byWorker[cappedName] == 1 && byWorker[joinedName] == n-1
	})
	for i := 1; i <= n; i++ {
		table := fmt.Sprintf("public.t%d", i)
		exec1(t, src, fmt.Sprintf("INSERT INTO %s (v) VALUES ('after')", table))
		waitEqual(t, src, dst, table, table, "id, v", 30*time.Second)
	}
}
