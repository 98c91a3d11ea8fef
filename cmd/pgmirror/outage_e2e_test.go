package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// checkErrorDetails checks the Error details shape of a failure log entry.
func checkErrorDetails(t *testing.T, e logEntry) {
	t.Helper()
	if e.Level != "ERROR" {
		t.Errorf("%q entry has level %s, want ERROR", e.Message, e.Level)
	}
	if msg, _ := e.Details["error"].(string); msg == "" {
		t.Errorf("%q entry has no error text: %v", e.Message, e.Details)
	}
	if n, ok := e.Details["retry_count"].(float64); !ok || n < 1 {
		t.Errorf("%q entry: retry_count %v, want a number >= 1", e.Message, e.Details["retry_count"])
	}
	if s, _ := e.Details["next_retry_at"].(string); s == "" {
		t.Errorf("%q entry has no next_retry_at: %v", e.Message, e.Details)
	} else if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		t.Errorf("%q entry: next_retry_at %q is not ISO 8601: %v", e.Message, s, err)
	}
	if op, _ := e.Details["operation"].(string); op == "" {
		t.Errorf("%q entry has no operation: %v", e.Message, e.Details)
	}
}

func nextRetryAt(t *testing.T, e logEntry) time.Time {
	t.Helper()
	s, _ := e.Details["next_retry_at"].(string)
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("next_retry_at %q: %v", s, err)
	}
	return at
}

// TestDestinationOutage stops the destination under a write load: the
// mirror goes to error with "Connection timeout", retries with a growing
// backoff (error_count counts consecutive failures), comes back to running
// by itself once the destination is back, ends exactly equal, and resets
// error_count after 30 s of streaming.
func TestDestinationOutage(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstCluster := pgtest.NewCluster(t, false)
	dst := pgtest.NewDatabase(t, dstCluster)
	s := startLoadMirror(t, "dout", src, dst)
	checkLoadEqual(t, src, dst, 30*time.Second)

	l := startLoad(src)
	waitStreaming(t, l, dst, 100, 30*time.Second)
	stopCluster(t, dstCluster)

	m := s.waitMirror("dout", "status error", 30*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	if m.ErrorMessage == "" || m.ErrorCount < 1 || m.NextRetryAt == nil {
		t.Errorf("mirror in error: error_message %q, error_count %d, next_retry_at %v", m.ErrorMessage, m.ErrorCount, m.NextRetryAt)
	}
	// The automatic retry fails too: consecutive failures are counted.
	m = s.waitMirror("dout", "a second consecutive failure", 30*time.Second, func(m fullStatus) bool { return m.ErrorCount >= 2 })
	if m.Status != "error" {
		t.Errorf("status %q after the second failure, want error", m.Status)
	}
	// The failure is counted first and its log entry written right after.
	failures := waitUntil(t, 10*time.Second, func() ([]logEntry, bool) {
		f := s.logsWith("dout", "Connection timeout")
		return f, len(f) >= 2
	}, func(f []logEntry) string {
		return fmt.Sprintf("%d \"Connection timeout\" entries after 2 failures, want >= 2", len(f))
	})
	byCount := map[int]logEntry{}
	for _, e := range failures {
		checkErrorDetails(t, e)
		n, _ := e.Details["retry_count"].(float64)
		byCount[int(n)] = e
	}
	first, ok1 := byCount[1]
	second, ok2 := byCount[2]
	if !ok1 || !ok2 {
		t.Fatalf("no failure entries with retry_count 1 and 2: %v", failures)
	}
	// Backoff 5 s, then 10 s: the second retry is at least 10 s after the first.
	if d := nextRetryAt(t, second).Sub(nextRetryAt(t, first)); d < 9500*time.Millisecond {
		t.Errorf("next_retry_at moved by %s from the first failure to the second, want >= 10 s (backoff doubles from 5 s)", d)
	}
	if first.Details["operation"] != "cdc" {
		t.Errorf("first failure: operation %v, want cdc", first.Details["operation"])
	}
	if strings.Contains(s.output.String(), "password=") {
		t.Error("the process log shows a password")
	}

	restartCluster(t, dstCluster)
	restarted := time.Now()
	m = s.waitMirror("dout", "running again by itself", 45*time.Second, func(m fullStatus) bool { return m.Status == "running" })
	runningAt := time.Now()
	t.Logf("running again %s after the destination restarted", runningAt.Sub(restarted).Round(time.Second))
	if m.ErrorMessage != "" || m.NextRetryAt != nil {
		t.Errorf("running mirror keeps error_message %q / next_retry_at %v", m.ErrorMessage, m.NextRetryAt)
	}
	waitStreaming(t, l, dst, 50, 30*time.Second)
	if n := l.end(); n < 100 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	checkLoadEqual(t, src, dst, 60*time.Second)

	// error_count counts consecutive failures: it returns to 0 once the
	// mirror has streamed for 30 s without failing (docs/status.md).
	m = s.waitMirror("dout", "error_count back to 0", 50*time.Second, func(m fullStatus) bool { return m.ErrorCount == 0 })
	if d := time.Since(runningAt); d < 25*time.Second {
		t.Errorf("error_count reset %s after the mirror ran again, docs/status.md says after 30 s of streaming", d)
	}
	if m.Status != "running" {
		t.Errorf("status %q, want running", m.Status)
	}
}

// TestSourceOutage stops the source for 10 s during a write load: the
// mirror goes to error, then back to running by itself, and the destination
// ends exactly equal (count and checksum), nothing lost or doubled.
func TestSourceOutage(t *testing.T) {
	t.Parallel()
	srcCluster := pgtest.NewCluster(t, true)
	src := pgtest.NewDatabase(t, srcCluster)
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	s := startLoadMirror(t, "sout", src, dst)

	l := startLoad(src)
	waitStreaming(t, l, dst, 100, 30*time.Second)
	stopCluster(t, srcCluster)
	m := s.waitMirror("sout", "status error", 10*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	if m.ErrorMessage == "" {
		t.Error("error_message empty while the source is down")
	}
	e := s.waitLog("sout", "Connection timeout", 10*time.Second, nil)
	checkErrorDetails(t, e)
	// The source stays down through an automatic retry (5 s backoff).
	s.waitMirror("sout", "a retry that failed too", 30*time.Second, func(m fullStatus) bool { return m.ErrorCount >= 2 })
	restartCluster(t, srcCluster)
	l.waitMore(t, 50, 30*time.Second) // the load writes again once the source is back
	if n := l.end(); n < 100 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	s.waitMirror("sout", "running again by itself", 45*time.Second, func(m fullStatus) bool { return m.Status == "running" })
	checkLoadEqual(t, src, dst, 60*time.Second)
	if m := s.full("sout"); m.Status != "running" {
		t.Errorf("status %q after catching up, want running (error %q)", m.Status, m.ErrorMessage)
	}
}

// TestKillDuringSnapshot kills the service with SIGKILL while it copies a
// 300k-row table in small partitions, starts it again, and checks that the
// snapshot starts over and ends with the destination exactly equal: no
// duplicates, no lost rows, changes made meanwhile included.
func TestKillDuringSnapshot(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	dumpJobsOnFailure(t, catalog)
	exec1(t, src, `CREATE TABLE public.big (id bigint PRIMARY KEY, pad text);
		INSERT INTO public.big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 300000) g;
		CREATE TABLE public.nokey (k int, v text);
		ALTER TABLE public.nokey REPLICA IDENTITY FULL;
		INSERT INTO public.nokey SELECT g % 10, 'v' FROM generate_series(1, 5000) g;
		ANALYZE public.big, public.nokey;`)

	a := startService(t, catalog)
	a.createPeer("src", src)
	a.createPeer("dst", dst)
	waitFor(t, "the first supervisor and slot monitor jobs", 10*time.Second, func() bool {
		return queryInt64(t, catalog, `SELECT count(DISTINCT kind) FROM river_job WHERE kind IN ('mirror_supervisor', 'mirror_slot_monitor')`) == 2
	})
	a.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "snap", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 3000, "snapshot_max_parallel_workers": 1, "snapshot_num_tables_in_parallel": 1,
		"table_mappings": []any{mapping("public", "nokey", "public", "nokey"), mapping("public", "big", "public", "big")},
	}, 201, nil)
	a.dumpOnFailure("snap")
	// Kill once the copy is under way: partitions are on the destination.
	a.waitMirror("snap", "the snapshot to be under way", 60*time.Second, func(m fullStatus) bool {
		if m.Status == "running" {
			t.Fatal("the snapshot ended before the test could kill the service: make the table bigger")
		}
		return m.Status == "snapshotting" && a.countLogs("snap", "Snapshot partition completed") >= 2
	})
	a.kill()
	// A process killed while its periodic jobs run leaves them "running" in
	// River's table (River rescues them only after RescueStuckJobsAfter,
	// 40 minutes). Make that certain: they must not keep the new process's
	// supervisor from taking the mirror over.
	exec1(t, catalog, `UPDATE river_job SET state = 'running', attempted_at = now(), finalized_at = NULL
		WHERE id IN (SELECT max(id) FROM river_job WHERE kind IN ('mirror_supervisor', 'mirror_slot_monitor') GROUP BY kind)`)
	if n, _ := tableDigest(t, dst, "public.big", "id"); n >= 300000 {
		t.Fatalf("the destination had all %d rows when the service was killed", n)
	}
	exec1(t, src, `INSERT INTO public.big SELECT g, 'after kill' FROM generate_series(300001, 300100) g;
		UPDATE public.big SET pad = 'updated' WHERE id % 1000 = 0;
		DELETE FROM public.big WHERE id BETWEEN 10 AND 19;
		INSERT INTO public.nokey VALUES (1, 'after kill'), (1, 'after kill');`)

	b := startService(t, catalog)
	b.waitStatus("snap", "running", 120*time.Second)
	waitEqual(t, src, dst, "public.big", "public.big", "id, pad", 60*time.Second)
	waitEqual(t, src, dst, "public.nokey", "public.nokey", "k, v", 30*time.Second)
	noDuplicates(t, dst, "public.big", "id")
	if n := b.countLogs("snap", "Starting initial snapshot"); n < 2 {
		t.Errorf("%d \"Starting initial snapshot\" entries, want 2 (the snapshot starts over)", n)
	}
	if !hasLog(b.logs("snap", ""), "Initial snapshot completed") {
		t.Error("no \"Initial snapshot completed\" entry")
	}
	// CDC continues after the restarted snapshot.
	exec1(t, src, `INSERT INTO public.big VALUES (400000, 'cdc')`)
	waitEqual(t, src, dst, "public.big", "public.big", "id, pad", 30*time.Second)
}

// freezePostmaster stops (SIGSTOP) a cluster's postmaster: the server
// accepts TCP connections but never answers them, like a host that hangs.
// It returns the function that lets it go on (SIGCONT).
func freezePostmaster(t *testing.T, c *localpg.Cluster) func() {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP postmaster %d: %v", pid, err)
	}
	var once sync.Once
	thaw := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(thaw)
	return thaw
}

// TestUnansweringPeer: a destination that accepts connections but never
// answers makes the mirror fail with "Connection timeout" (not hang), and
// once it answers again POST retry brings the mirror up at once.
func TestUnansweringPeer(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstCluster := pgtest.NewCluster(t, false)
	dst := pgtest.NewDatabase(t, dstCluster)
	exec1(t, src, `CREATE TABLE public.u (id int PRIMARY KEY, v text);
		INSERT INTO public.u SELECT g, 'v' || g FROM generate_series(1, 500) g`)

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	thaw := freezePostmaster(t, dstCluster)
	started := time.Now()
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "hang", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "u", "public", "u")},
	}, 201, nil)
	s.dumpOnFailure("hang")
	m := s.waitMirror("hang", "a failure while the destination does not answer", 40*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	t.Logf("failed %s after creation", time.Since(started).Round(time.Second))
	if !strings.Contains(m.ErrorMessage, "dst") {
		t.Errorf("error_message %q does not name the peer", m.ErrorMessage)
	}
	e := s.waitLog("hang", "Connection timeout", 5*time.Second, nil)
	checkErrorDetails(t, e)
	if e.Details["operation"] != "setup" {
		t.Errorf("operation %v, want setup", e.Details["operation"])
	}

	thaw()
	s.mustDo("POST", "/v1/mirrors/hang/retry", nil, 200, nil)
	s.waitStatus("hang", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.u", "public.u", "id, v", 30*time.Second)
	exec1(t, src, `UPDATE public.u SET v = 'after' WHERE id <= 10`)
	waitEqual(t, src, dst, "public.u", "public.u", "id, v", 30*time.Second)
}

// TestCatalogOutage stops the catalog database under a write load: the
// mirror notices and keeps replicating meanwhile (the destination advances
// until a batch log entry had to be kept for later), the log
// entries of that time are written once the catalog is back, with their
// times, and the destination ends exactly equal.
func TestCatalogOutage(t *testing.T) {
	t.Parallel()
	catalogCluster := pgtest.NewCluster(t, false)
	catalog := pgtest.NewDatabase(t, catalogCluster)
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	s := startLoadMirrorOn(t, catalog, "cout", src, dst)
	checkLoadEqual(t, src, dst, 30*time.Second)

	l := startLoad(src)
	waitStreaming(t, l, dst, 100, 30*time.Second)
	stopCluster(t, catalogCluster)
	stoppedAt := time.Now()
	// The run finds out that the connection holding its lock is gone, and
	// keeps applying meanwhile: the applied position moves after that.
	waitFor(t, "the run to notice the lost lock connection", 30*time.Second, func() bool {
		return strings.Contains(s.output.String(), "lost the catalog connection that holds the mirror lock")
	})
	waitAppliedMoves(t, dst, 20*time.Second)
	// The run keeps its batch log entries (one every few seconds) in
	// memory meanwhile, without trying the catalog; the outage lasts long
	// enough for some (checked below, once they are written).
	waitAppliedMoves(t, dst, 20*time.Second)
	// Long enough for the last lag measure written before the outage to
	// be stale (over 15 s old) when the catalog comes back.
	if wait := 17*time.Second - time.Since(stoppedAt); wait > 0 {
		time.Sleep(wait)
	}
	restartCluster(t, catalogCluster)
	restartedAt := time.Now()
	// The API's first answer after the outage gives the stream's lag (this
	// replica runs the mirror and measured it every second meanwhile),
	// not the age of the last measure the catalog holds.
	var first struct {
		LagSeconds *float64 `json:"lag_seconds"`
	}
	for s.do("GET", "/v1/mirrors/cout", nil, &first) != 200 {
		if time.Since(restartedAt) > 30*time.Second {
			t.Fatal("the API did not answer within 30 s of the catalog's return")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if first.LagSeconds == nil {
		t.Errorf("the first answer after a %s catalog outage reports lag_seconds null, want the stream's",
			restartedAt.Sub(stoppedAt).Round(time.Second))
	} else if *first.LagSeconds > 5 {
		t.Errorf("the first answer after a %s catalog outage reports lag_seconds %.1f, want the stream's (under 5 s)",
			restartedAt.Sub(stoppedAt).Round(time.Second), *first.LagSeconds)
	}
	l.waitMore(t, 50, 30*time.Second)
	if n := l.end(); n < 100 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	checkLoadEqual(t, src, dst, 60*time.Second)
	m := s.waitMirror("cout", "running after the outage", 30*time.Second, func(m fullStatus) bool { return m.Status == "running" })
	if m.ErrorCount != 0 || m.ErrorMessage != "" {
		t.Errorf("the outage was counted as a failure: error_count %d, error_message %q", m.ErrorCount, m.ErrorMessage)
	}
	// The batch log entries of the outage were kept and written afterwards
	// with the times they happened.
	waitFor(t, "the log entries of the outage", 20*time.Second, func() bool {
		return queryInt64(t, catalog, `SELECT count(*) FROM mirror_logs WHERE message = $1 AND created_at > $2 AND created_at < $3`,
			db.MsgCDCBatchApplied, stoppedAt, restartedAt) > 0
	})
	// The same process went on: the run took its lock back instead of
	// ending (no second "mirror failed" or takeover).
	if strings.Contains(s.output.String(), "mirror failed") {
		t.Errorf("the run failed during the catalog outage:\n%s", tail(s.output.String(), 40))
	}
	waitFor(t, "\"mirror lock taken back\" in the process log", 10*time.Second, func() bool {
		return strings.Contains(s.output.String(), "mirror lock taken back")
	})
}

// TestLockTakenWhileCutOff: the catalog connection holding a mirror's lock
// dies and, before the run can take the lock back, someone else holds it
// (as another replica's worker would after this one was cut off). The run
// stops streaming and frees the slot instead of competing, without counting
// a failure; once the lock is free again the mirror runs and ends equal.
func TestLockTakenWhileCutOff(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	s := startLoadMirrorOn(t, catalog, "takeover", src, dst)
	l := startLoad(src)
	waitStreaming(t, l, dst, 50, 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other, err := pgx.Connect(ctx, catalog)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	var id int64
	if err := other.QueryRow(ctx, `SELECT id FROM mirrors WHERE name = 'takeover'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	const lockClass = 0x70676d // db.mirrorLockClass
	// Only this catalog's lock: other tests' catalogs in the cluster have
	// mirrors with the same id.
	if _, err := other.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = $1 AND objid = $2 AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, lockClass, id); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the test to hold the mirror lock", 10*time.Second, func() bool {
		var ok bool
		if err := other.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(lockClass), int32(id)).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	})
	waitFor(t, "the run to give the mirror up", 15*time.Second, func() bool {
		return strings.Contains(s.output.String(), "another worker took the mirror over")
	})
	waitFor(t, "the slot to be free", 15*time.Second, func() bool {
		return queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE active AND database = current_database()`) == 0
	})
	if m := s.full("takeover"); m.Status == "error" || m.ErrorCount != 0 {
		t.Errorf("giving the mirror up counted as a failure: status %s, error_count %d, error %q", m.Status, m.ErrorCount, m.ErrorMessage)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, int32(lockClass), int32(id)); err != nil {
		t.Fatal(err)
	}
	if n := l.end(); n < 50 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	checkLoadEqual(t, src, dst, 60*time.Second)
	if m := s.full("takeover"); m.Status != "running" {
		t.Errorf("status %q after the lock was free again, want running (error %q)", m.Status, m.ErrorMessage)
	}
}
