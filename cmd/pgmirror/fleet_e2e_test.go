package main

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// gapWatch samples, every 100 ms, which running mirrors have no worker
// (nobody holds their advisory lock) and keeps the most at once and the
// longest time one mirror went without.
type gapWatch struct {
	mu      sync.Mutex
	since   map[int64]time.Time // mirrors without a worker, since when
	most    int
	longest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func watchGaps(t *testing.T, catalogURL string) *gapWatch {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), catalogURL)
	if err != nil {
		t.Fatal(err)
	}
	w := &gapWatch{since: map[int64]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rows, err := conn.Query(ctx, `SELECT m.id FROM mirrors m
				WHERE m.deleted_at IS NULL AND m.desired_state = 'running' AND m.status = 'running'
				  AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
				    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				    AND l.classid = x'70676d'::int::oid AND l.objid = m.id::oid AND l.objsubid = 2)`)
			var ids []int64
			if err == nil {
				ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			}
			cancel()
			if err != nil {
				continue
			}
			w.observe(ids, time.Now())
		}
	}()
	return w
}

func (w *gapWatch) observe(ids []int64, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.most = max(w.most, len(ids))
	next := make(map[int64]time.Time, len(ids))
	for _, id := range ids {
		since, ok := w.since[id]
		if !ok {
			since = now
		}
		next[id] = since
		w.longest = max(w.longest, now.Sub(since))
	}
	w.since = next
}

// reset starts a new phase: counts from now on.
func (w *gapWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.most, w.longest, w.since = 0, 0, map[int64]time.Time{}
}

func (w *gapWatch) result() (most int, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.longest
}

func (w *gapWatch) close() {
	close(w.stop)
	<-w.done
}

// TestRollingRestart runs 10 mirrors on two replicas under a small write
// load and kills one (kill -9), then starts it again:
//   - the survivor takes the dead replica's mirrors over; the dead
//     replica's row leaves the replicas table and the River jobs it left
//     running are rescued within seconds (not after River's 40 minutes);
//   - the restarted replica names its catalog connections (application
//     name "pgmirror serve|river|locks <replica>");
//   - while it takes its share, at most a few mirrors are without a worker
//     at any moment and none for more than 5 s, and the spread is reached
//     within 20 s, with no mirror handed back and forth;
//   - a replica stopped with SIGTERM hands its mirrors over a few at a time: at
//     most 4 without a worker at once, none for more than 5 s;
//   - every row written meanwhile arrives, once.
func TestRollingRestart(t *testing.T) {
	t.Parallel()
	const n = 10
	f := newFleetDatabases(t, n)
	catalog, src, dst, withApp := f.catalog, f.src, f.dst, f.app
	started := time.Now()
	r1, r2 := launchService(t, withApp("r1")), launchService(t, withApp("r2"))
	r1.waitReady()
	r2.waitReady()
	t.Logf("two replicas ready %s after the start", time.Since(started).Round(time.Millisecond))
	r1.createPeer("src", src)
	r1.createPeer("dst", dst)
	for i := 1; i <= n; i++ {
		table := fmt.Sprintf("t%d", i)
		[]*service{r1, r2}[i%2].mustDo("POST", "/v1/mirrors", map[string]any{
			"name": fmt.Sprintf("m%02d", i), "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
			"table_mappings": []any{mapping("public", table, "public", table)},
		}, 201, nil)
	}
	r1Name, r2Name := workerOf(t, catalog, "r1"), workerOf(t, catalog, "r2")
	began := time.Now()
	t.Logf("%d mirrors created %s after the start", n, time.Since(started).Round(time.Millisecond))
	waitFor(t, "every mirror running, spread over both replicas", 90*time.Second, func() bool {
		byWorker, running := workersOf(r2)
		return running == n && byWorker[r1Name] >= n/2-1 && byWorker[r2Name] >= n/2-1
	})
	t.Logf("%d mirrors running on both replicas %s after they were created", n, time.Since(began).Round(time.Millisecond))

	// A small write load over every table, until the end.
	loadCtx, stopLoad := context.WithCancel(context.Background())
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		conn, err := pgx.Connect(loadCtx, src)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for i := 0; loadCtx.Err() == nil && i < 2000; i++ {
			_, _ = conn.Exec(loadCtx, fmt.Sprintf("INSERT INTO public.t%d (v) VALUES ('load %d')", 1+rand.IntN(n), i))
			select {
			case <-loadCtx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	defer func() { stopLoad(); <-loadDone }()
	gaps := watchGaps(t, catalog)
	defer gaps.close()

	// kill -9 r1: r2 takes its mirrors over, and the catalog says so.
	var deadClient string
	queryOne(t, catalog, &deadClient, `SELECT job_client_id FROM replicas WHERE name = $1`, r1Name)
	if queryInt64(t, catalog, `SELECT count(*) FROM river_job WHERE state = 'running' AND attempted_by[array_upper(attempted_by, 1)] = $1`, deadClient) == 0 {
		t.Fatalf("no running River job of r1 (River client %q) before the kill", deadClient)
	}
	killedAt := time.Now()
	r1.kill()
	waitFor(t, "r2 to run every mirror", 30*time.Second, func() bool {
		byWorker, running := workersOf(r2)
		return running == n && byWorker[r2Name] == n
	})
	t.Logf("takeover of r1's mirrors after kill -9: %s", time.Since(killedAt).Round(time.Millisecond))
	waitFor(t, "r1's running River jobs rescued and its row removed", 20*time.Second, func() bool {
		return queryInt64(t, catalog, `SELECT count(*) FROM river_job WHERE state = 'running' AND attempted_by[array_upper(attempted_by, 1)] = $1`, deadClient) == 0 &&
			queryInt64(t, catalog, `SELECT count(*) FROM replicas WHERE name = $1`, r1Name) == 0
	})
	t.Logf("r1's jobs rescued and its row removed %s after the kill", time.Since(killedAt).Round(time.Millisecond))

	// r1 comes back (without an application_name of the test's): it
	// names its connections, takes its share, paced.
	gaps.reset()
	restartedAt := time.Now()
	r1New := startService(t, catalog)
	var r1Again string
	queryOne(t, catalog, &r1Again, `SELECT name FROM replicas WHERE name <> $1`, r2Name)
	for _, role := range []string{"serve", "river", "locks"} {
		app := catalogAppName(role, r1Again)
		if queryInt64(t, catalog, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, app) == 0 {
			t.Errorf("no catalog connection with application_name %q", app)
		}
	}
	if unnamed := queryInt64(t, catalog, `SELECT count(*) FROM pg_stat_activity a JOIN replicas r ON r.lock_pid = a.pid WHERE r.name = $1 AND a.application_name = ''`, r1Again); unnamed != 0 {
		t.Errorf("the restarted replica's lock connection has no application_name")
	}
	waitFor(t, "the restarted replica to take its share", 30*time.Second, func() bool {
		byWorker, running := workersOf(r2)
		return running == n && byWorker[r1Again] >= n/2-1 && byWorker[r2Name] >= n/2-1
	})
	spread := time.Since(restartedAt)
	time.Sleep(2 * time.Second) // settled: no more hand-offs
	byWorker, running := workersOf(r2)
	most, longest := gaps.result()
	t.Logf("restart: spread %v %s after the start, at most %d mirrors without a worker at once, longest gap %s",
		byWorker, spread.Round(time.Millisecond), most, longest.Round(time.Millisecond))
	if running != n || byWorker[r1Again] < n/2-1 || byWorker[r2Name] < n/2-1 {
		t.Errorf("after settling: %v, want %d on each replica, give or take one (no overshoot)", byWorker, n/2)
	}
	if most > 4 {
		t.Errorf("%d mirrors without a worker at once during the restart, want at most 4", most)
	}
	if longest > 5*time.Second {
		t.Errorf("a mirror went %s without a worker during the restart, want at most 5 s", longest)
	}
	if spread > 20*time.Second {
		t.Errorf("spreading took %s after the start, want at most 20 s", spread)
	}

	// SIGTERM of r2, as a rolling deploy does: it hands its mirrors to r1
	// a few at a time, the next as soon as one is taken, instead of
	// leaving them all without a worker at once.
	gaps.reset()
	termAt := time.Now()
	r2.terminate(40 * time.Second)
	t.Logf("r2 stopped %s after its SIGTERM", time.Since(termAt).Round(time.Millisecond))
	waitFor(t, "r1 to run every mirror after r2's SIGTERM", 30*time.Second, func() bool {
		byWorker, running := workersOf(r1New)
		return running == n && byWorker[r1Again] == n
	})
	took := time.Since(termAt)
	most, longest = gaps.result()
	t.Logf("SIGTERM of r2: r1 runs all %d mirrors %s after it, at most %d mirrors without a worker at once, longest gap %s",
		n, took.Round(time.Millisecond), most, longest.Round(time.Millisecond))
	if most > 4 {
		t.Errorf("%d mirrors without a worker at once after the SIGTERM, want at most 4 (at most 4 hand-offs are under way at once)", most)
	}
	// Every mirror was handed so, none was left to the cancellation.
	handed := regexp.MustCompile(`msg="handed mirrors to the other replicas before stopping" mirrors=(\d+) left_to_cancel=(\d+)`).
		FindStringSubmatch(r2.output.String())
	if handed == nil || handed[1] != strconv.Itoa(byWorker[r2Name]) || handed[2] != "0" {
		t.Errorf("r2's log says %q about its hand-over, want all its %d mirrors handed and none left to cancel", handed, byWorker[r2Name])
	}
	if longest > 5*time.Second {
		t.Errorf("a mirror went %s without a worker after the SIGTERM, want at most 5 s", longest)
	}

	stopLoad()
	<-loadDone
	began = time.Now()
	defer func() {
		t.Logf("every table equal %s after the load stopped", time.Since(began).Round(time.Millisecond))
	}()
	for i := 1; i <= n; i++ {
		table := fmt.Sprintf("public.t%d", i)
		waitEqual(t, src, dst, table, table, "id, v", 30*time.Second)
	}
}

// TestCatalogOutageKeepsWorkers: two replicas share 12 mirrors under a
// light write load; the catalog database refuses connections for 10 s and
// its sessions end, so that every replica's lock connection dies and its
// runs stream on without their locks. The catalog comes back for r1 3 s
// before r2. Then the runs take their locks back: no mirror changes replica
// (r1 counts r2 neither as gone while its lock connection comes back, nor
// adopts a mirror whose run is about to retake its lock), and every table
// ends equal.
func TestCatalogOutageKeepsWorkers(t *testing.T) {
	t.Parallel()
	const n = 12
	f := newFleetDatabases(t, n)
	catalog, src, dst, withApp := f.catalog, f.src, f.dst, f.app
	r1, r2 := launchService(t, withApp("r1")), launchService(t, withApp("r2"))
	r1.waitReady()
	r2.waitReady()
	r1.createPeer("src", src)
	r1.createPeer("dst", dst)
	for i := 1; i <= n; i++ {
		table := fmt.Sprintf("t%d", i)
		[]*service{r1, r2}[i%2].mustDo("POST", "/v1/mirrors", map[string]any{
			"name": fmt.Sprintf("k%02d", i), "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
			"table_mappings": []any{mapping("public", table, "public", table)},
		}, 201, nil)
	}
	r1Name, r2Name := workerOf(t, catalog, "r1"), workerOf(t, catalog, "r2")
	waitFor(t, "every mirror running, spread over both replicas", 90*time.Second, func() bool {
		byWorker, running := workersOf(r2)
		return running == n && byWorker[r1Name] == n/2 && byWorker[r2Name] == n/2
	})
	insertAll := func(v string) {
		t.Helper()
		for i := 1; i <= n; i++ {
			exec1(t, src, fmt.Sprintf("INSERT INTO public.t%d (v) VALUES ($1)", i), v)
		}
	}
	allEqual := func(timeout time.Duration) {
		t.Helper()
		for i := 1; i <= n; i++ {
			table := fmt.Sprintf("public.t%d", i)
			waitEqual(t, src, dst, table, table, "id, v", timeout)
		}
	}
	insertAll("before")
	allEqual(60 * time.Second)
	// The spread as it settled: the counts can match while a hand-off of
	// the start is still under way, and the balancer would then correct
	// it after the outage (it did once: 7 and 5 before the outage).
	var before map[string]string
	settled := time.Now()
	waitFor(t, "the mirrors at their share on both replicas, unchanged for 3 s", 60*time.Second, func() bool {
		cur := mirrorWorkersByName(r1)
		if !maps.Equal(cur, before) {
			before, settled = cur, time.Now()
			return false
		}
		counts := map[string]int{}
		for _, w := range cur {
			counts[w]++
		}
		return counts[r1Name] == n/2 && counts[r2Name] == n/2 && time.Since(settled) >= 3*time.Second
	})

	// The outage: the catalog database takes no connections, and its
	// sessions end.
	catalogDB := dbNameOf(t, catalog)
	admin := withDatabase(t, catalog, "postgres")
	exec1(t, admin, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS false`, catalogDB))
	reopened := false
	reopen := func() {
		if !reopened {
			reopened = true
			exec1(t, admin, fmt.Sprintf(`ALTER DATABASE %q ALLOW_CONNECTIONS true`, catalogDB))
		}
	}
	defer reopen()
	exec1(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, catalogDB)
	for round := 0; round < 10; round++ {
		insertAll(fmt.Sprintf("outage %d", round))
		time.Sleep(time.Second)
	}
	allEqual(30 * time.Second) // the streams went on without the catalog
	reopen()
	back := time.Now()
	// r2 gets back a few seconds after r1 (its sessions keep ending
	// meanwhile), as a slower replica would: r1 must not take r2's
	// mirrors for orphans while their runs are about to retake their
	// locks.
	for time.Since(back) < 3*time.Second {
		exec1(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'r2'`, catalogDB)
		time.Sleep(50 * time.Millisecond)
	}

	waitFor(t, "every mirror running with a worker after the outage", 60*time.Second, func() bool {
		byWorker, running := workersOf(r1)
		return running == n && byWorker[""] == 0
	})
	insertAll("after")
	allEqual(60 * time.Second)
	if wait := 15*time.Second - time.Since(back); wait > 0 {
		time.Sleep(wait)
	}
	after := mirrorWorkersByName(r1)
	var moved []string
	for name, w := range before {
		if after[name] != w {
			moved = append(moved, fmt.Sprintf("%s: %s -> %s", name, w, after[name]))
		}
	}
	if len(moved) > 0 {
		t.Errorf("%d mirrors changed replica after a catalog outage, where both replicas were at their share:\n%s\nr1:\n%s\nr2:\n%s",
			len(moved), strings.Join(moved, "\n"), tail(r1.output.String(), 60), tail(r2.output.String(), 60))
	}
}

// mirrorWorkersByName is each mirror's worker ("" without one), by name.
func mirrorWorkersByName(s *service) map[string]string {
	var list []struct {
		Name   string  `json:"name"`
		Worker *string `json:"worker"`
	}
	s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
	out := make(map[string]string, len(list))
	for _, m := range list {
		out[m.Name] = ""
		if m.Worker != nil {
			out[m.Name] = *m.Worker
		}
	}
	return out
}

// dbNameOf is the database a connection URL names.
func dbNameOf(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// withDatabase is dbURL naming database instead.
func withDatabase(t *testing.T, dbURL, database string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + database
	return u.String()
}

// fleetDatabases are the databases of a test with several replicas: a
// catalog, a source with tables public.t1 to public.tN (id serial primary
// key, v text) and an empty destination.
type fleetDatabases struct{ catalog, src, dst string }

// newFleetDatabases creates the databases, with n source tables.
func newFleetDatabases(t *testing.T, n int) fleetDatabases {
	t.Helper()
	f := fleetDatabases{
		catalog: pgtest.NewDatabase(t, pgtest.CatalogCluster(t)),
		src:     pgtest.NewDatabase(t, pgtest.SourceCluster(t)),
		dst:     pgtest.NewDatabase(t, pgtest.DestCluster(t)),
	}
	var ddl strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&ddl, "CREATE TABLE public.t%d (id serial PRIMARY KEY, v text);\n", i)
	}
	exec1(t, f.src, ddl.String())
	return f
}

// app is the catalog's URL with application_name name: a replica's
// catalog sessions carry it.
func (f fleetDatabases) app(name string) string {
	return f.catalog + "&application_name=" + name
}
