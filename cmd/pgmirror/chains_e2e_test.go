package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// chainTables creates the application's tables: a keyed table and a
// keyless one (replica identity full, created so in every database of a
// chain, as a database a mirror reads needs it).
const chainTables = `
	CREATE TABLE items (id int PRIMARY KEY, v text, n int);
	CREATE TABLE events (kind text, n int);
	ALTER TABLE events REPLICA IDENTITY FULL;`

// chainSchema is the application's tables with their rows, in a chain's
// first database.
const chainSchema = chainTables + `
	INSERT INTO items SELECT g, 'v' || g, g FROM generate_series(1, 5000) g;
	INSERT INTO events SELECT 'k' || (g % 7), g FROM generate_series(1, 1000) g;`

// chainWrites changes a chain's first database: inserts, updates, deletes
// on both tables, touching different rows (so that a mirror applying them
// writes each as it came, and the next mirror counts the same).
const chainWrites = `
	INSERT INTO items SELECT g, 'new' || g, g FROM generate_series(5001, 5300) g;
	UPDATE items SET v = 'upd', n = n + 1 WHERE id BETWEEN 1000 AND 2000 AND id % 10 = 0;
	DELETE FROM items WHERE id BETWEEN 100 AND 199;
	INSERT INTO events VALUES ('late', 1), ('late', 1);
	UPDATE events SET n = -n WHERE kind = 'k3';
	DELETE FROM events WHERE kind = 'k5';`

// chainKeyWrites changes keys and rows changed before, which a mirror may
// apply in another form (a key update as a delete and an insert, rows
// folded by key): compared by content only.
const chainKeyWrites = `
	UPDATE items SET id = id + 100000 WHERE id BETWEEN 7 AND 9;
	UPDATE items SET v = v || '!' WHERE id % 3 = 0;
	DELETE FROM events WHERE n < 100;`

// chainMirror is the request for a mirror of items and events between two
// peers.
func chainMirror(name, from, to string) map[string]any {
	return map[string]any{
		"name": name, "source_peer": from, "destination_peer": to, "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 1000, "snapshot_max_parallel_workers": 3,
		"table_mappings": []any{mapping("public", "items", "public", "items"), mapping("public", "events", "public", "events")},
	}
}

// sameTables fails the test unless items and events hold the same rows (md5
// of the contents and counts) in every database, waiting up to timeout.
func sameTables(t *testing.T, timeout time.Duration, first string, others ...string) {
	t.Helper()
	for _, other := range others {
		waitEqual(t, first, other, "items", "items", "id, v, n", timeout)
		waitEqual(t, first, other, "events", "events", "kind, n", timeout)
	}
}

// changeCounts sums a mirror's inserted, updated and deleted rows.
func (s *service) changeCounts(name string) (ins, upd, del int64) {
	s.t.Helper()
	for _, tb := range s.mirror(name).Tables {
		ins += tb.RowsInserted
		upd += tb.RowsUpdated
		del += tb.RowsDeleted
	}
	return ins, upd, del
}

// waitCountsOf waits until mirror name counts what mirror of counts, plus
// the inserts given: both mirrors' counts reach the catalog a moment
// after their rows reach the destinations, so both are read again each
// time.
func (s *service) waitCountsOf(name, of string, inserts int64, timeout time.Duration) {
	s.t.Helper()
	waitUntil(s.t, timeout, func() ([2][3]int64, bool) {
		var got, want [3]int64
		got[0], got[1], got[2] = s.changeCounts(name)
		want[0], want[1], want[2] = s.changeCounts(of)
		want[0] += inserts
		return [2][3]int64{got, want}, got == want
	}, func(c [2][3]int64) string {
		return fmt.Sprintf("mirror %s counts %v inserted/updated/deleted rows, want %v (what %s counts)", name, c[0], c[1], of)
	})
}

// waitCounts waits until mirror name counts the given inserted, updated
// and deleted rows.
func (s *service) waitCounts(name string, want [3]int64, timeout time.Duration) {
	s.t.Helper()
	waitUntil(s.t, timeout, func() ([3]int64, bool) {
		var got [3]int64
		got[0], got[1], got[2] = s.changeCounts(name)
		return got, got == want
	}, func(got [3]int64) string {
		return fmt.Sprintf("mirror %s counts %v inserted/updated/deleted rows, want %v", name, got, want)
	})
}

// TestChainTwoSteps: a mirror B -> C reads the database that a mirror
// A -> B writes (three databases in three clusters: 15, 18 and 15). B -> C is created
// first over B's empty tables, so the A -> B snapshot's writes (copy
// origins) reach C through it as well as the A -> B stream's inserts,
// updates and deletes: C ends equal to A, and B -> C counts every change.
func TestChainTwoSteps(t *testing.T) {
	t.Parallel()
	// 15 -> 18 -> 15: an upgrade rehearsed through a newer copy and back.
	a := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	b := pgtest.NewDatabase(t, pgtest.MajorCluster(t, 18))
	c := pgtest.NewDatabase(t, pgtest.NewCluster(t, false))
	exec1(t, a, chainSchema)
	exec1(t, b, chainTables)
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	s.createPeer("a", a)
	s.createPeer("b", b)
	s.createPeer("c", c)
	s.mustDo("POST", "/v1/mirrors", chainMirror("two-b-c", "b", "c"), 201, nil)
	s.waitStatus("two-b-c", "running", 90*time.Second)
	s.mustDo("POST", "/v1/mirrors", chainMirror("two-a-b", "a", "b"), 201, nil)
	s.waitStatus("two-a-b", "running", 90*time.Second)
	sameTables(t, 60*time.Second, a, b, c)
	// The counts reach the catalog a moment after the rows reach C (the
	// run's progress is written every 200 ms): wait for them, and for no
	// more than the 6000 rows that a-b copied into b.
	s.waitCounts("two-b-c", [3]int64{6000, 0, 0}, 30*time.Second)

	exec1(t, a, chainWrites)
	sameTables(t, 60*time.Second, a, b, c)
	s.waitCountsOf("two-b-c", "two-a-b", 6000, 30*time.Second)
	exec1(t, a, chainKeyWrites)
	sameTables(t, 60*time.Second, a, b, c)
	s.noWarnings("two-a-b")
	s.noWarnings("two-b-c")
}

// TestChainThreeSteps: a staged upgrade A (13) -> B (15) -> C (17) -> D
// (15), each mirror
// created (with its snapshot) once the one before runs; the changes made
// on A afterwards reach B, C and D, and every database ends equal.
func TestChainThreeSteps(t *testing.T) {
	t.Parallel()
	// A staged upgrade 13 -> 15 -> 17, and a reporting copy of the last.
	a := pgtest.NewDatabase(t, pgtest.MajorCluster(t, 13))
	b := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	c := pgtest.NewDatabase(t, pgtest.MajorCluster(t, 17))
	d := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, a, chainSchema)
	for _, db := range []string{b, c} {
		exec1(t, db, chainTables)
	}
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	for name, url := range map[string]string{"a": a, "b": b, "c": c, "d": d} {
		s.createPeer(name, url)
	}
	for _, step := range [][2]string{{"a", "b"}, {"b", "c"}, {"c", "d"}} {
		name := "three-" + step[0] + "-" + step[1]
		s.mustDo("POST", "/v1/mirrors", chainMirror(name, step[0], step[1]), 201, nil)
		s.waitStatus(name, "running", 90*time.Second)
	}
	sameTables(t, 60*time.Second, a, b, c, d)
	exec1(t, a, chainWrites)
	sameTables(t, 90*time.Second, a, b, c, d)
	for _, name := range []string{"three-b-c", "three-c-d"} {
		s.waitCountsOf(name, "three-a-b", 0, 30*time.Second)
	}
	exec1(t, a, chainKeyWrites)
	sameTables(t, 90*time.Second, a, b, c, d)
	for _, name := range []string{"three-a-b", "three-b-c", "three-c-d"} {
		s.noWarnings(name)
	}
}

// TestLoopCutoverWithChain: A -> B with a reporting copy B -> C; after a
// cut-over of A -> B with a reverse mirror B -> A, the application writes
// on B. The reverse mirror carries exactly those writes back to A (none of
// what A -> B wrote on B comes back: a loop), while the reporting copy
// carries both A -> B's writes and the application's (a chain): all three
// databases end equal.
func TestLoopCutoverWithChain(t *testing.T) {
	t.Parallel()
	a := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	b := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	c := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	exec1(t, a, chainSchema)
	exec1(t, b, chainTables)
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	s.createPeer("a", a)
	s.createPeer("b", b)
	s.createPeer("c", c)
	s.mustDo("POST", "/v1/mirrors", chainMirror("cut-move", "a", "b"), 201, nil)
	s.waitStatus("cut-move", "running", 90*time.Second)
	s.mustDo("POST", "/v1/mirrors", chainMirror("cut-report", "b", "c"), 201, nil)
	s.waitStatus("cut-report", "running", 90*time.Second)
	exec1(t, a, chainWrites)
	exec1(t, a, chainKeyWrites)
	sameTables(t, 60*time.Second, a, b, c)

	var done struct {
		Status string `json:"status"`
	}
	s.mustDo("POST", "/v1/mirrors/cut-move/cutover", map[string]any{"quiet_seconds": 1, "reverse_mirror_name": "cut-move-back"}, 200, &done)
	if done.Status != "completed" {
		t.Fatalf("cut-over: status %s", done.Status)
	}
	s.waitStatus("cut-move-back", "running", 60*time.Second)
	exec1(t, b, `INSERT INTO items VALUES (200000, 'on b', 1), (200001, 'on b', 2);
		UPDATE items SET v = 'b' WHERE id BETWEEN 1 AND 5;
		DELETE FROM items WHERE id BETWEEN 10 AND 12;
		INSERT INTO events VALUES ('b', 1);`)
	sameTables(t, 60*time.Second, b, a, c)
	time.Sleep(2 * time.Second) // time for an echo to show
	if ins, upd, del := s.changeCounts("cut-move-back"); ins != 3 || upd != 5 || del != 3 {
		t.Errorf("move-back applied %d inserts, %d updates, %d deletes; want the application's 3, 5, 3", ins, upd, del)
	}
	s.noWarnings("cut-report")
}

// TestLoopRing: three mirrors in a ring A -> B -> C -> A over the same
// tables. A change made on A reaches B and C and stops there: C -> A
// leaves out what B -> C wrote on C, because B -> C's source is fed by
// A -> B (its writes came from A). No mirror applies a change twice and
// nothing circles.
func TestLoopRing(t *testing.T) {
	t.Parallel()
	a := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	b := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	c := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	exec1(t, a, chainSchema)
	exec1(t, b, chainTables)
	exec1(t, c, chainTables)
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	s.createPeer("a", a)
	s.createPeer("b", b)
	s.createPeer("c", c)
	s.mustDo("POST", "/v1/mirrors", chainMirror("ring-a-b", "a", "b"), 201, nil)
	s.waitStatus("ring-a-b", "running", 90*time.Second)
	s.mustDo("POST", "/v1/mirrors", chainMirror("ring-b-c", "b", "c"), 201, nil)
	s.waitStatus("ring-b-c", "running", 90*time.Second)
	closing := chainMirror("ring-c-a", "c", "a")
	closing["do_initial_snapshot"] = false
	s.mustDo("POST", "/v1/mirrors", closing, 201, nil)
	s.waitStatus("ring-c-a", "running", 90*time.Second)

	exec1(t, a, chainWrites)
	sameTables(t, 60*time.Second, a, b, c)
	time.Sleep(3 * time.Second) // time for an echo to show
	sameTables(t, time.Second, a, b, c)
	if ins, upd, del := s.changeCounts("ring-c-a"); ins+upd+del != 0 {
		t.Errorf("c-a applied %d inserts, %d updates, %d deletes of A's own changes back into A, want none", ins, upd, del)
	}
	ab := [3]int64{}
	ab[0], ab[1], ab[2] = s.changeCounts("ring-a-b")
	if ins, upd, del := s.changeCounts("ring-b-c"); ins != ab[0] || upd != ab[1] || del != ab[2] {
		t.Errorf("b-c applied %d/%d/%d, want a-b's changes %d/%d/%d", ins, upd, del, ab[0], ab[1], ab[2])
	}
	// A write on C goes to A only (it would otherwise come back to C).
	exec1(t, c, `INSERT INTO items VALUES (300000, 'on c', 0)`)
	waitFor(t, "c-a to carry C's insert", 30*time.Second, func() bool {
		return queryInt64(t, a, `SELECT count(*) FROM items WHERE id = 300000`) == 1
	})
	time.Sleep(3 * time.Second)
	if ins, upd, del := s.changeCounts("ring-c-a"); ins != 1 || upd+del != 0 {
		t.Errorf("c-a applied %d/%d/%d, want C's one insert", ins, upd, del)
	}
	if ins, _, _ := s.changeCounts("ring-a-b"); ins != ab[0] {
		t.Errorf("a-b applied %d inserts after C's insert reached A, want %d: a write that came around the ring went on", ins, ab[0])
	}
}

// serverLogProblems returns the ERROR, FATAL and PANIC lines of a test
// cluster's server log (localpg writes it to server.log in the data
// directory), with the lines that follow each (DETAIL, STATEMENT).
func serverLogProblems(t *testing.T, c *localpg.Cluster) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.DataDir(), "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	lines := strings.Split(string(raw), "\n")
	for i, line := range lines {
		if strings.Contains(line, "ERROR:") || strings.Contains(line, "FATAL:") || strings.Contains(line, "PANIC:") {
			entry := line
			for j := i + 1; j < len(lines) && j <= i+2 && !strings.Contains(lines[j], "LOG:") && !strings.Contains(lines[j], "ERROR:"); j++ {
				entry += "\n\t" + lines[j]
			}
			out = append(out, entry)
		}
	}
	return out
}

// TestServerLogClean: a mirror's normal work (a snapshot with parallel
// copy connections, a stream of changes, a verification, a cut-over with
// a reverse mirror that carries writes back, the deletion of both
// mirrors) writes no ERROR or FATAL line into the source's or the
// destination's server log, where DBAs' alerts look.
func TestServerLogClean(t *testing.T) {
	t.Parallel()
	srcCluster, dstCluster := pgtest.NewCluster(t, true), pgtest.NewCluster(t, true)
	src, dst := pgtest.NewDatabase(t, srcCluster), pgtest.NewDatabase(t, dstCluster)
	exec1(t, src, chainSchema+`
		CREATE TABLE t1 (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v text);
		CREATE TABLE t2 (id int PRIMARY KEY, v text);
		INSERT INTO t1 (v) SELECT 'x' || g FROM generate_series(1, 20000) g;
		INSERT INTO t2 SELECT g, 'y' FROM generate_series(1, 20000) g;`)
	exec1(t, dst, chainTables)
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	req := chainMirror("logs", "src", "dst")
	req["snapshot_num_tables_in_parallel"] = 4
	req["snapshot_max_parallel_workers"] = 4
	req["table_mappings"] = append(req["table_mappings"].([]any), mapping("public", "t1", "public", "t1"), mapping("public", "t2", "public", "t2"))
	s.mustDo("POST", "/v1/mirrors", req, 201, nil)
	s.waitStatus("logs", "running", 90*time.Second)
	exec1(t, src, chainWrites)
	exec1(t, src, chainKeyWrites)
	exec1(t, src, `UPDATE t1 SET v = 'z' WHERE id < 100; DELETE FROM t2 WHERE id > 19000`)
	sameTables(t, 60*time.Second, src, dst)
	waitEqual(t, src, dst, "t2", "t2", "id, v", 30*time.Second)

	if v := s.runVerify(t, "logs", nil); v.State != "done" || v.RowsDiffering == nil || *v.RowsDiffering != 0 {
		t.Fatalf("verification: %+v", v)
	}
	var done struct {
		Status string `json:"status"`
	}
	s.mustDo("POST", "/v1/mirrors/logs/cutover", map[string]any{"quiet_seconds": 1, "reverse_mirror_name": "logs-back"}, 200, &done)
	if done.Status != "completed" {
		t.Fatalf("cut-over: status %s", done.Status)
	}
	s.waitStatus("logs-back", "running", 60*time.Second)
	exec1(t, dst, `INSERT INTO items VALUES (200000, 'on dst', 1); INSERT INTO t1 (v) VALUES ('after'); DELETE FROM t2 WHERE id = 1`)
	sameTables(t, 60*time.Second, dst, src)
	waitEqual(t, dst, src, "t1", "t1", "id, v", 30*time.Second)
	s.mustDo("DELETE", "/v1/mirrors/logs-back", nil, 200, nil)
	s.mustDo("DELETE", "/v1/mirrors/logs", nil, 200, nil)
	waitFor(t, "the mirrors' cleanup", 60*time.Second, func() bool {
		var list []any
		s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
		return len(list) == 0 && queryInt64(t, dst, `SELECT count(*) FROM pg_replication_origin`) == 0 &&
			queryInt64(t, src, `SELECT count(*) FROM pg_replication_origin`) == 0
	})
	// An error provoked on purpose shows that the log is the one read.
	for _, db := range []string{src, dst} {
		if err := execErr(db, `SELECT pg_catalog.pg_advisory_unlock_shared(-1) FROM pg_catalog.pg_class WHERE 1 / 0 = 1`); err == nil {
			t.Fatal("the probe did not fail")
		}
	}
	for role, c := range map[string]*localpg.Cluster{"source": srcCluster, "destination": dstCluster} {
		probes := 0
		for _, line := range serverLogProblems(t, c) {
			if strings.Contains(line, "division by zero") {
				probes++
				continue
			}
			t.Errorf("%s server log: %s", role, line)
		}
		if probes != 1 {
			t.Errorf("%s server log: %d lines of the error provoked on purpose, want 1", role, probes)
		}
	}
}
