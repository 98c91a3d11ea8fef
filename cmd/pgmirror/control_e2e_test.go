package main

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dropSlot drops a replication slot on the source, waiting until nothing
// consumes it.
func dropSlot(t *testing.T, dbURL, slot string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRetry makes a mirror fail on the destination (a CHECK constraint
// rejects a replicated row), then: POST retry restarts it at once, long
// before next_retry_at, and answers 409 when the mirror is not in error; a
// slot dropped on the source while the mirror is in error is recreated on
// retry, with an ERROR entry saying the changes in the gap were lost and
// pointing to resync, which repairs the destination.
func TestRetry(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.r (id int PRIMARY KEY, v text);
		INSERT INTO public.r SELECT g, 'v' || g FROM generate_series(1, 1000) g`)
	var created map[string]any
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "rt", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "r", "public", "r")},
	}, 201, &created)
	s.dumpOnFailure("rt")
	slot := created["replication_slot_name"].(string)
	s.waitStatus("rt", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.r", "public.r", "id, v", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/rt/retry", nil, 409, nil)

	// A row the destination rejects: every attempt fails the same way.
	exec1(t, dst, `ALTER TABLE public.r ADD CONSTRAINT no_bad CHECK (v <> 'bad')`)
	exec1(t, src, `INSERT INTO public.r VALUES (1001, 'bad')`)
	m := s.waitMirror("rt", "a second failure with the next retry 5 s away", 40*time.Second, func(m fullStatus) bool {
		return m.Status == "error" && m.ErrorCount >= 2 && m.NextRetryAt != nil && time.Until(*m.NextRetryAt) > 5*time.Second
	})
	if !strings.Contains(m.ErrorMessage, "no_bad") {
		t.Errorf("error_message %q does not name the violated constraint", m.ErrorMessage)
	}
	e := s.waitLog("rt", "Failed to apply CDC batch", 5*time.Second, nil)
	checkErrorDetails(t, e)
	if e.Details["operation"] != "cdc" {
		t.Errorf("operation %v, want cdc", e.Details["operation"])
	}
	nextRetry := *m.NextRetryAt

	exec1(t, dst, `ALTER TABLE public.r DROP CONSTRAINT no_bad`)
	var msg map[string]string
	s.mustDo("POST", "/v1/mirrors/rt/retry", nil, 200, &msg)
	if msg["message"] == "" {
		t.Errorf("retry response %v", msg)
	}
	s.waitLog("rt", "Retry signal received", 5*time.Second, nil)
	s.waitStatus("rt", "running", time.Until(nextRetry))
	if time.Now().After(nextRetry.Add(-time.Second)) {
		t.Errorf("the mirror ran again only at %s, the backoff ended at %s: retry did not bypass it", time.Now().Format(time.StampMilli), nextRetry.Format(time.StampMilli))
	}
	waitEqual(t, src, dst, "public.r", "public.r", "id, v", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/rt/retry", nil, 409, nil)

	// Fail again, then drop the slot while the mirror waits for its retry.
	exec1(t, dst, `ALTER TABLE public.r ADD CONSTRAINT no_bad CHECK (v <> 'bad2')`)
	exec1(t, src, `INSERT INTO public.r VALUES (1002, 'bad2')`)
	s.waitMirror("rt", "error with the next retry 5 s away", 40*time.Second, func(m fullStatus) bool {
		return m.Status == "error" && m.NextRetryAt != nil && time.Until(*m.NextRetryAt) > 5*time.Second
	})
	dropSlot(t, src, slot)
	exec1(t, src, `INSERT INTO public.r VALUES (1003, 'in the gap')`)
	exec1(t, dst, `ALTER TABLE public.r DROP CONSTRAINT no_bad`)
	s.mustDo("POST", "/v1/mirrors/rt/retry", nil, 200, nil)
	w := s.waitLog("rt", "Replication slot recreated: changes were lost", 30*time.Second, nil)
	if w.Level != "ERROR" {
		t.Errorf("slot recreated entry has level %s, want ERROR", w.Level)
	}
	if action, _ := w.Details["action"].(string); !strings.Contains(action, "resync") {
		t.Errorf("slot recreated entry does not point to resync: %v", w.Details)
	}
	s.waitStatus("rt", "running", 30*time.Second)
	if !slotExists(t, src, slot) {
		t.Fatal("the slot was not recreated")
	}
	exec1(t, src, `INSERT INTO public.r VALUES (1004, 'after')`)
	waitFor(t, "a change made after the slot was recreated", 30*time.Second, func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM public.r WHERE id = 1004`) == 1
	})
	if n := queryInt64(t, dst, `SELECT count(*) FROM public.r WHERE id IN (1002, 1003)`); n != 0 {
		t.Errorf("%d rows of the gap on the destination, want 0 (the log says they were lost)", n)
	}
	if l := s.lost("rt").LostChanges; l == nil || !slices.Contains(l.Tables, "public.r") {
		t.Errorf("lost_changes %+v, want public.r", l)
	}
	// Resync repairs what was lost, and clears the mark.
	s.mustDo("POST", "/v1/mirrors/rt/resync", nil, 200, nil)
	waitEqual(t, src, dst, "public.r", "public.r", "id, v", 60*time.Second)
	s.waitStatus("rt", "running", 30*time.Second)
	s.waitLost("rt", nil, 30*time.Second)
}

// statusRecorder polls a mirror's status in the background and records
// every distinct status it sees, in order.
type statusRecorder struct {
	mu   sync.Mutex
	seen []string
	stop chan struct{}
	done chan struct{}
}

func recordStatuses(s *service, name string) *statusRecorder {
	r := &statusRecorder{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			select {
			case <-r.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			var m struct {
				Status string `json:"status"`
			}
			// s.do would call t.Fatal from this goroutine: use the plain client.
			if err := getJSON(s, "/v1/mirrors/"+name, &m); err != nil || m.Status == "" {
				continue
			}
			r.mu.Lock()
			if len(r.seen) == 0 || r.seen[len(r.seen)-1] != m.Status {
				r.seen = append(r.seen, m.Status)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

func (r *statusRecorder) end() []string {
	close(r.stop)
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}

// TestFullResync deletes and changes rows on the destination by hand, then
// runs POST resync under a write load: the mirror goes snapshotting, then
// running, the destination tables are copied again (the damage is gone) and
// no write made during the resync is lost.
func TestFullResync(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, loadTables+`INSERT INTO public.items (n, v) SELECT g, repeat('r', 50) FROM generate_series(1, 60000) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "rs", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 5000, "snapshot_max_parallel_workers": 2,
		"table_mappings": loadMappings(),
	}, 201, nil)
	s.dumpOnFailure("rs")
	s.waitStatus("rs", "running", 60*time.Second)
	checkLoadEqual(t, src, dst, 30*time.Second)

	exec1(t, dst, `DELETE FROM public.items WHERE id % 2 = 0; UPDATE public.events SET v = 'damaged' WHERE k < 50`)
	l := startLoad(src)
	l.waitMore(t, 50, 30*time.Second)
	rec := recordStatuses(s, "rs")
	var msg map[string]string
	s.mustDo("POST", "/v1/mirrors/rs/resync", nil, 200, &msg)
	if msg["message"] == "" {
		t.Errorf("resync response %v", msg)
	}
	s.waitLog("rs", "Full resync started", 30*time.Second, nil)
	waitFor(t, "the second snapshot to complete", 60*time.Second, func() bool {
		return s.countLogs("rs", "Initial snapshot completed") >= 2
	})
	s.waitStatus("rs", "running", 30*time.Second)
	l.waitMore(t, 20, 30*time.Second) // the load goes on into CDC after the resync
	seen := rec.end()
	if n := l.end(); n < 50 {
		t.Fatalf("the load committed only %d transactions", n)
	}
	checkLoadEqual(t, src, dst, 60*time.Second)
	if i := indexOf(seen, "snapshotting"); i < 0 || indexOf(seen[i:], "running") < 0 {
		t.Errorf("statuses seen during the resync: %v, want snapshotting then running", seen)
	}
	if n := s.countLogs("rs", "Starting initial snapshot"); n != 2 {
		t.Errorf("%d \"Starting initial snapshot\" entries, want 2", n)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}

// TestSyncSchema adds a column and widens a column's type on the source;
// POST sync-schema brings the destination up to it (logged with the DDL),
// and CDC continues with no change lost. A column added on the source
// without sync-schema is picked up by itself.
func TestSyncSchema(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.ss (id int PRIMARY KEY, qty int, note text);
		INSERT INTO public.ss SELECT g, g, 'n' || g FROM generate_series(1, 1000) g`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "sch", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "ss", "public", "ss")},
	}, 201, nil)
	s.dumpOnFailure("sch")
	s.waitStatus("sch", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.ss", "public.ss", "id, qty, note", 30*time.Second)

	exec1(t, src, `ALTER TABLE public.ss ADD COLUMN extra text; ALTER TABLE public.ss ALTER COLUMN qty TYPE bigint`)
	var msg map[string]string
	s.mustDo("POST", "/v1/mirrors/sch/sync-schema", nil, 200, &msg)
	if msg["message"] == "" {
		t.Errorf("sync-schema response %v", msg)
	}
	if e := s.waitLog("sch", "Schema sync initiated", 5*time.Second, nil); e.Level != "INFO" {
		t.Errorf("Schema sync initiated has level %s", e.Level)
	}
	e := s.waitLog("sch", "Schema sync completed", 30*time.Second, func(e logEntry) bool {
		ddl, _ := e.Details["ddl_statements"].([]any)
		return len(ddl) > 0
	})
	tables, _ := e.Details["tables"].([]any)
	ddl, _ := e.Details["ddl_statements"].([]any)
	if len(tables) != 1 || tables[0] != "public.ss" {
		t.Errorf("Schema sync tables = %v, want [public.ss]", e.Details["tables"])
	}
	joined := ""
	for _, d := range ddl {
		joined += d.(string) + "; "
	}
	if !strings.Contains(joined, "ADD COLUMN") || !strings.Contains(joined, "extra") || !strings.Contains(joined, "bigint") {
		t.Errorf("Schema sync ddl_statements = %v, want the added column and the new type", e.Details["ddl_statements"])
	}
	if _, ok := e.Details["duration_ms"].(float64); !ok {
		t.Errorf("Schema sync has no duration_ms: %v", e.Details)
	}
	var qtyType string
	pgxConnQuery(t, dst, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'public.ss'::regclass AND attname = 'qty'`, &qtyType)
	if qtyType != "bigint" {
		t.Errorf("destination qty is %s, want bigint", qtyType)
	}
	s.waitStatus("sch", "running", 30*time.Second)
	exec1(t, src, `INSERT INTO public.ss VALUES (1001, 5000000000, 'big', 'x');
		UPDATE public.ss SET extra = 'e' || id WHERE id <= 10;
		UPDATE public.ss SET qty = qty * 10000000 WHERE id BETWEEN 11 AND 20;
		DELETE FROM public.ss WHERE id = 30`)
	waitEqual(t, src, dst, "public.ss", "public.ss", "id, qty, note, extra", 30*time.Second)

	// A column added without sync-schema: rows that use it arrive with the value.
	exec1(t, src, `ALTER TABLE public.ss ADD COLUMN auto int;
		INSERT INTO public.ss VALUES (1002, 1, 'auto', 'y', 42);
		UPDATE public.ss SET auto = 7 WHERE id <= 5`)
	waitEqual(t, src, dst, "public.ss", "public.ss", "id, qty, note, extra, auto", 60*time.Second)
	s.waitStatus("sch", "running", 30*time.Second)
	// Neither path went through a failure.
	for _, e := range s.logs("sch", "level=ERROR") {
		t.Errorf("ERROR entry %q: %v", e.Message, e.Details)
	}
}
