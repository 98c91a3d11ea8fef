package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// twoTableLoad runs small transactions that change both tables until stop
// is closed: inserts, updates and deletes, some touching both tables at once.
func twoTableLoad(t *testing.T, dbURL string, stop <-chan struct{}, txs *atomic.Int64) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(3, 4))
	next := int64(10_000_000)
	for i := 0; i < 100000; i++ {
		select {
		case <-stop:
			return
		default:
		}
		next++
		var err error
		switch rng.IntN(4) {
		case 0:
			_, err = conn.Exec(ctx, `INSERT INTO public.big (id, v) VALUES ($1, 'load')`, next)
		case 1:
			_, err = conn.Exec(ctx, `UPDATE public.big SET v = v || 'u' WHERE id = $1`, rng.Int64N(20000)+1)
		case 2:
			_, err = conn.Exec(ctx, `INSERT INTO public.other (k, v) VALUES ($1, 'load')`, rng.IntN(100))
		default:
			// One transaction touching both tables.
			_, err = conn.Exec(ctx, `WITH d AS (DELETE FROM public.big WHERE id = $1 RETURNING id)
				INSERT INTO public.other (k, v) SELECT $2, 'both' FROM generate_series(1, 2)`, rng.Int64N(20000)+1, rng.IntN(100))
		}
		if err != nil {
			t.Errorf("load: %v", err)
			return
		}
		txs.Add(1)
		time.Sleep(3 * time.Millisecond)
	}
}

const twoTableSchema = `
CREATE TABLE public.big (id bigint PRIMARY KEY, v text, pad text);
INSERT INTO public.big SELECT g, 'v' || g, repeat('p', 300) FROM generate_series(1, 300000) g;
CREATE TABLE public.other (k int, v text);
ALTER TABLE public.other REPLICA IDENTITY FULL;
INSERT INTO public.other SELECT g % 100, 'init' FROM generate_series(1, 1000) g;
`

func tableStatusOf(m mirrorStatus, table string) string {
	for _, t := range m.Tables {
		if t.TableName == table {
			return t.Status
		}
	}
	return ""
}

// TestTableResync resyncs one table of a running mirror under a write load
// on both of its tables: the other table keeps replicating while the copy
// runs, the mirror stays running, and both tables end exactly equal to the
// source. The service is killed with SIGKILL during the copy and the new
// process finishes the resync.
func TestTableResync(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, twoTableSchema)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "trs", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 20000, "snapshot_max_parallel_workers": 1,
		"table_mappings": []any{mapping("public", "big", "public", "big"), mapping("public", "other", "public", "other")},
	}, 201, nil)
	s.waitStatus("trs", "running", 120*time.Second)
	waitEqual(t, src, dst, "public.big", "public.big", "id, v, pad", 60*time.Second)

	// The destination copy of big gets damaged; other is fine.
	exec1(t, dst, `DELETE FROM public.big WHERE id % 10 = 0; UPDATE public.big SET v = 'damaged' WHERE id % 7 = 0`)

	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); twoTableLoad(t, src, stop, &txs) }()
	waitGrown(t, "load transactions", &txs, 30, 30*time.Second)

	var out map[string]string
	s.mustDo("POST", "/v1/mirrors/trs/resync/public.big", nil, 200, &out)
	if out["table"] != "public.big" {
		t.Errorf("resync response %v", out)
	}
	s.mustDo("POST", "/v1/mirrors/trs/resync/public.missing", nil, 404, nil)

	// While big is copied, a marker written to other arrives and the mirror
	// stays running.
	waitFor(t, "big to be snapshotting", 30*time.Second, func() bool {
		return tableStatusOf(s.mirror("trs"), "public.big") == "snapshotting"
	})
	marker := rand.IntN(1_000_000) + 1_000_000
	exec1(t, src, `INSERT INTO public.other (k, v) VALUES ($1, 'marker')`, marker)
	waitFor(t, "the marker on the destination while big is copied", 20*time.Second, func() bool {
		var n int
		pgxConnQuery(t, dst, fmt.Sprintf(`SELECT count(*) FROM public.other WHERE k = %d`, marker), &n)
		return n == 1
	})
	m := s.mirror("trs")
	if m.Status != "running" {
		t.Errorf("mirror status %q during a table resync, want running", m.Status)
	}
	if st := tableStatusOf(m, "public.big"); st != "snapshotting" {
		t.Logf("big finished copying before the marker was checked (status %q): the copy was too quick to observe", st)
	}

	// Kill the process during the copy; a new one finishes the resync.
	s.kill()
	s = startService(t, catalog)
	waitGrown(t, "load transactions", &txs, 30, 30*time.Second) // the load goes on during the take-over
	close(stop)
	wg.Wait()
	if txs.Load() < 50 {
		t.Fatalf("the load ran only %d transactions", txs.Load())
	}
	waitFor(t, "big back to running", 120*time.Second, func() bool {
		return tableStatusOf(s.mirror("trs"), "public.big") == "running"
	})
	waitEqual(t, src, dst, "public.big", "public.big", "id, v, pad", 90*time.Second)
	waitEqual(t, src, dst, "public.other", "public.other", "k, v", 30*time.Second)
	if !hasLog(s.logs("trs", ""), "Table resync started") {
		t.Error(`log has no "Table resync started" entry`)
	}
	s.waitStatus("trs", "running", 10*time.Second)
}

// TestEditTables pauses a mirror, replaces its tables (one added, one
// removed, one kept), and resumes it: the added table is copied and then
// replicated, the removed one stops replicating and keeps its destination
// data, and GET tables and available-tables show the change at once.
func TestEditTables(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.keep (id int PRIMARY KEY, v text);
		CREATE TABLE public.gone (id int PRIMARY KEY, v text);
		CREATE TABLE public.added (id int PRIMARY KEY, v text);
		INSERT INTO public.keep SELECT g, 'k' FROM generate_series(1, 100) g;
		INSERT INTO public.gone SELECT g, 'g' FROM generate_series(1, 100) g;
		INSERT INTO public.added SELECT g, 'a' FROM generate_series(1, 5000) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ed", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "keep", "public", "keep"), mapping("public", "gone", "public", "gone")},
	}, 201, nil)
	s.waitStatus("ed", "running", 60*time.Second)

	newTables := []any{mapping("public", "keep", "public", "keep"), mapping("public", "added", "copy", "added")}
	s.mustDo("PUT", "/v1/mirrors/ed/tables", map[string]any{"table_mappings": newTables}, 409, nil)
	s.mustDo("POST", "/v1/mirrors/ed/pause", nil, 200, nil)
	s.mustDo("PUT", "/v1/mirrors/ed/tables", map[string]any{"table_mappings": []any{map[string]any{"source_schema": "public"}}}, 400, nil)
	var put []map[string]any
	s.mustDo("PUT", "/v1/mirrors/ed/tables", map[string]any{"table_mappings": newTables}, 200, &put)
	if len(put) != 2 {
		t.Fatalf("PUT tables returned %v", put)
	}
	var got []map[string]any
	s.mustDo("GET", "/v1/mirrors/ed/tables", nil, 200, &got)
	if len(got) != 2 || got[1]["source_table"] != "added" || got[1]["destination_schema"] != "copy" {
		t.Errorf("GET tables after PUT: %v", got)
	}
	var avail []map[string]string
	s.mustDo("GET", "/v1/mirrors/ed/available-tables", nil, 200, &avail)
	foundGone := false
	for _, a := range avail {
		if a["table_name"] == "added" || a["table_name"] == "keep" {
			t.Errorf("available-tables lists mapped table %v", a)
		}
		foundGone = foundGone || a["table_name"] == "gone"
	}
	if !foundGone {
		t.Errorf("available-tables does not list the removed table: %v", avail)
	}

	// Changes while paused: all three tables.
	exec1(t, src, `INSERT INTO public.keep VALUES (1000, 'paused'); INSERT INTO public.gone VALUES (1000, 'paused');
		UPDATE public.added SET v = 'paused' WHERE id <= 10`)
	s.mustDo("POST", "/v1/mirrors/ed/resume", nil, 200, nil)
	waitEqual(t, src, dst, "public.added", "copy.added", "id, v", 60*time.Second)
	waitEqual(t, src, dst, "public.keep", "public.keep", "id, v", 30*time.Second)
	exec1(t, src, `INSERT INTO public.added VALUES (6000, 'after'); UPDATE public.added SET v = 'after' WHERE id = 1;
		INSERT INTO public.keep VALUES (1001, 'after'); INSERT INTO public.gone VALUES (1001, 'after')`)
	waitEqual(t, src, dst, "public.added", "copy.added", "id, v", 30*time.Second)
	waitEqual(t, src, dst, "public.keep", "public.keep", "id, v", 30*time.Second)

	// The removed table kept its rows and got nothing after its removal.
	var n int
	pgxConnQuery(t, dst, `SELECT count(*) FROM public.gone`, &n)
	if n != 100 {
		t.Errorf("removed table has %d rows on the destination, want its 100 rows from before the removal", n)
	}
	m := s.waitStatus("ed", "running", 10*time.Second)
	if tableStatusOf(m, "public.added") != "running" || len(m.Tables) != 2 {
		t.Errorf("tables after resume: %+v", m.Tables)
	}
}

// TestSourceDDLWithoutSyncSchema changes a source table's columns without
// calling sync-schema, under schema_changes warn: an added column appears on
// the destination before the rows that use it, and a dropped or renamed
// column gets a WARN entry while the remaining columns keep replicating.
// (TestSchemaChangesApply covers the default, apply.)
func TestSourceDDLWithoutSyncSchema(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TYPE color AS ENUM ('red', 'green');
		CREATE TABLE public.ddl (id int PRIMARY KEY, a text, b text NOT NULL, c text NOT NULL);
		INSERT INTO public.ddl SELECT g, 'a', 'b', 'c' FROM generate_series(1, 10) g`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ddlwarn", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "warn",
		"table_mappings": []any{mapping("public", "ddl", "public", "ddl")},
	}, 201, nil)
	s.waitStatus("ddlwarn", "running", 60*time.Second)

	// A column added with a default: the rows that were there get it
	// without a change the slot would send, on the destination too.
	exec1(t, src, `ALTER TABLE public.ddl ADD COLUMN added color, ADD COLUMN flag boolean NOT NULL DEFAULT false;
		INSERT INTO public.ddl VALUES (11, 'a', 'b', 'c', 'green', true);
		UPDATE public.ddl SET added = 'red' WHERE id = 1`)
	waitEqual(t, src, dst, "public.ddl", "public.ddl", "id, a, b, c, added::text, flag", 60*time.Second)

	exec1(t, src, `ALTER TABLE public.ddl DROP COLUMN b; ALTER TABLE public.ddl RENAME COLUMN c TO c2;
		INSERT INTO public.ddl VALUES (12, 'a', 'c2', 'red', false); UPDATE public.ddl SET a = 'after' WHERE id = 2`)
	waitEqual(t, src, dst, "public.ddl", "public.ddl", "id, a, added::text", 60*time.Second)
	// The renamed column arrives as a new column; rows written after the
	// rename carry its value there (older rows keep theirs under the old name).
	var c2 string
	pgxConnQuery(t, dst, `SELECT c2 FROM public.ddl WHERE id = 12`, &c2)
	if c2 != "c2" {
		t.Errorf("renamed column on the destination holds %q for a new row, want c2", c2)
	}
	waitFor(t, "a WARN entry for the dropped columns", 20*time.Second, func() bool {
		for _, e := range s.logs("ddlwarn", "level=WARN") {
			if e.Message == "Source columns dropped or renamed" {
				return true
			}
		}
		return false
	})
	m := s.waitStatus("ddlwarn", "running", 10*time.Second)
	if m.ErrorCount != 0 {
		t.Errorf("error_count %d after source DDL, want 0", m.ErrorCount)
	}
}

// TestTablesAddedWithoutCopy: tables added with PUT tables to a mirror that
// skips initial copies (do_initial_snapshot false, as a cut-over's reverse
// mirror) start with their changes only; one that already holds rows on the
// source gets a WARN naming it and the table resync that copies it, and that
// resync makes the destination equal. An empty one gets no warning.
func TestTablesAddedWithoutCopy(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text);
		CREATE TABLE public.b (id int PRIMARY KEY, v text); INSERT INTO public.b SELECT g, 'old' FROM generate_series(1, 20) g;
		CREATE TABLE public.c (id int PRIMARY KEY, v text);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "nc", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "do_initial_snapshot": false,
		"table_mappings": []any{mapping("public", "a", "public", "a")},
	}, 201, nil)
	s.dumpOnFailure("nc")
	s.waitStatus("nc", "running", 60*time.Second)
	s.mustDo("POST", "/v1/mirrors/nc/pause", nil, 200, nil)
	s.waitStatus("nc", "paused", 60*time.Second)
	s.mustDo("PUT", "/v1/mirrors/nc/tables", map[string]any{"table_mappings": []any{
		mapping("public", "a", "public", "a"), mapping("public", "b", "public", "b"), mapping("public", "c", "public", "c")}}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/nc/resume", nil, 200, nil)
	e := s.waitLog("nc", "Tables added without a copy", 60*time.Second, nil)
	if e.Level != "WARN" || fmt.Sprint(e.Details["tables"]) != "[public.b]" || !strings.Contains(fmt.Sprint(e.Details["action"]), "/v1/mirrors/nc/resync/") {
		t.Fatalf("warning for tables added without a copy: %s %v, want WARN naming public.b only and the table resync", e.Level, e.Details)
	}
	exec1(t, src, `INSERT INTO public.b VALUES (21, 'new'); INSERT INTO public.c VALUES (1, 'new')`)
	waitEqual(t, src, dst, "public.c", "public.c", "id, v", 60*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM public.b`); n > 1 {
		t.Fatalf("destination public.b holds %d rows before its resync, want only the one inserted after the table was added", n)
	}
	s.mustDo("POST", "/v1/mirrors/nc/resync/public.b", nil, 200, nil)
	waitEqual(t, src, dst, "public.b", "public.b", "id, v", 60*time.Second)
}
