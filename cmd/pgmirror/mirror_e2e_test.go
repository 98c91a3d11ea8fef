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

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// typesSchema creates, on a source database, one table per interesting case.
const typesSchema = `
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE public.orders (id bigint PRIMARY KEY, item text NOT NULL, qty int, note text);
INSERT INTO public.orders SELECT g, 'item ' || g, g % 7, CASE WHEN g % 3 = 0 THEN NULL ELSE 'n' || g END FROM generate_series(1, 5000) g;
CREATE SCHEMA "Mixed Schema";
CREATE TABLE "Mixed Schema"."Weird""Table" (
  "Id" int PRIMARY KEY, "Col ""X""" text, amount numeric(12,3), data jsonb, blob bytea, uid uuid,
  tags text[], nums int[], feeling mood, feelings mood[], ts timestamptz, span interval, addr inet, secret text);
INSERT INTO "Mixed Schema"."Weird""Table"
  SELECT g, 'x"' || g, g * 1.5, jsonb_build_object('k', g, 'a', jsonb_build_array(g, 'v')), decode(md5(g::text), 'hex'),
         md5(g::text)::uuid, ARRAY['a' || g, NULL, 'b,c'], ARRAY[g, g + 1], 'ok', ARRAY['sad', 'happy']::mood[],
         '2024-01-01 00:00+00'::timestamptz + g * interval '1 minute', g * interval '1 second', '10.0.0.1'::inet, 'hidden'
  FROM generate_series(1, 500) g;
INSERT INTO "Mixed Schema"."Weird""Table" ("Id") VALUES (100000);
CREATE TABLE public.events (kind text, n int, payload text);
ALTER TABLE public.events REPLICA IDENTITY FULL;
INSERT INTO public.events SELECT 'dup', 1, 'same' FROM generate_series(1, 3);
INSERT INTO public.events SELECT 'k' || (g % 10), g, repeat('p', g % 50) FROM generate_series(1, 2000) g;
`

const weirdColumns = `"Id", "Col ""X""", amount, data, blob, uid, tags, nums, feeling, feelings, ts, span, addr`

func mapping(srcSchema, srcTable, dstSchema, dstTable string, exclude ...string) map[string]any {
	m := map[string]any{"source_schema": srcSchema, "source_table": srcTable, "destination_schema": dstSchema, "destination_table": dstTable}
	if len(exclude) > 0 {
		m["exclude_columns"] = exclude
	}
	return m
}

func slotExists(t *testing.T, dbURL, slot string) bool {
	t.Helper()
	return queryInt64(t, dbURL, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot) > 0
}

func publicationExists(t *testing.T, dbURL, pub string) bool {
	t.Helper()
	return queryInt64(t, dbURL, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, pub) > 0
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	waitUntil(t, timeout, func() (struct{}, bool) { return struct{}{}, cond() },
		func(struct{}) string { return fmt.Sprintf("timed out after %s waiting for %s", timeout, what) })
}

// waitUntil is the one polling loop of these tests: it calls check every
// 200 ms until check says done and returns its value, or fails the test
// after timeout with what failure says of the last value.
func waitUntil[T any](t testing.TB, timeout time.Duration, check func() (T, bool), failure func(last T) string) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, done := check()
		if done {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatal(failure(v))
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMirrorLifecycle walks a mirror through snapshot, CDC, pause, resume
// and delete over the API and checks the data, status and logs a user sees.
func TestMirrorLifecycle(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, typesSchema)
	var created map[string]any
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "life", "source_peer": "src", "destination_peer": "dst",
		"snapshot_num_rows_per_partition": 1000,
		"cdc_sync_interval_seconds":       1,
		"table_mappings": []any{
			mapping("public", "orders", "public", "orders"),
			mapping("Mixed Schema", `Weird"Table`, "Mixed Schema", `Weird"Table`, "secret"),
			mapping("public", "events", "copy", "events"),
		},
	}, 201, &created)
	slot := created["replication_slot_name"].(string)
	pub := created["publication_name"].(string)

	m := s.waitStatus("life", "running", 90*time.Second)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, item, qty, note", 30*time.Second)
	waitEqual(t, src, dst, `"Mixed Schema"."Weird""Table"`, `"Mixed Schema"."Weird""Table"`, weirdColumns, 30*time.Second)
	waitEqual(t, src, dst, "public.events", "copy.events", "kind, n, payload", 30*time.Second)
	for _, tbl := range m.Tables {
		if tbl.Status != "running" {
			t.Errorf("table %s status %q after snapshot, want running", tbl.TableName, tbl.Status)
		}
	}
	logs := s.logs("life", "")
	for _, msg := range []string{"Starting initial snapshot", "Table snapshot completed", "Initial snapshot completed"} {
		if !hasLog(logs, msg) {
			t.Errorf("log has no %q entry", msg)
		}
	}
	// The excluded column never reaches the destination.
	var hasSecret bool
	pgxConnQuery(t, dst, `SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'Mixed Schema' AND column_name = 'secret')`, &hasSecret)
	if hasSecret {
		t.Error("excluded column secret exists on the destination")
	}
	lsnBefore := s.mirror("life").LastLSN

	// CDC: exact counts of inserts, updates and deletes.
	exec1(t, src, `INSERT INTO public.orders SELECT g, 'new ' || g, 1, NULL FROM generate_series(10001, 10100) g`)
	exec1(t, src, `UPDATE public.orders SET qty = qty + 100 WHERE id BETWEEN 1 AND 50`)
	exec1(t, src, `DELETE FROM public.orders WHERE id BETWEEN 4991 AND 5000`)
	exec1(t, src, `UPDATE "Mixed Schema"."Weird""Table" SET data = data || '{"u": true}', tags = tags || 'z'::text, feeling = 'happy' WHERE "Id" <= 10`)
	exec1(t, src, `UPDATE "Mixed Schema"."Weird""Table" SET "Id" = 200000 WHERE "Id" = 100000`)
	exec1(t, src, `DELETE FROM public.events WHERE ctid = (SELECT ctid FROM public.events WHERE kind = 'dup' LIMIT 1)`)
	exec1(t, src, `UPDATE public.events SET payload = 'changed' WHERE n = 7`)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, item, qty, note", 30*time.Second)
	waitEqual(t, src, dst, `"Mixed Schema"."Weird""Table"`, `"Mixed Schema"."Weird""Table"`, weirdColumns, 30*time.Second)
	waitEqual(t, src, dst, "public.events", "copy.events", "kind, n, payload", 30*time.Second)

	waitFor(t, "counters", 10*time.Second, func() bool {
		for _, tbl := range s.mirror("life").Tables {
			if tbl.TableName == "public.orders" {
				return tbl.RowsInserted == 100 && tbl.RowsUpdated == 50 && tbl.RowsDeleted == 10
			}
		}
		return false
	})
	m = s.mirror("life")
	if m.LastLSN == lsnBefore || !strings.Contains(m.LastLSN, "/") {
		t.Errorf("last_lsn %q did not advance from %q", m.LastLSN, lsnBefore)
	}
	if m.LastSyncBatchID < 1 {
		t.Errorf("last_sync_batch_id = %d, want > 0", m.LastSyncBatchID)
	}
	waitFor(t, "CDC log entries", 15*time.Second, func() bool {
		return hasLog(s.logs("life", "search=CDC+batch+applied"), "CDC batch applied successfully")
	})
	for _, e := range s.logs("life", "search=CDC+batch+applied") {
		for _, key := range []string{"batch_id", "rows_processed", "rows_inserted", "rows_updated", "rows_deleted", "duration_ms", "lsn", "tables_affected"} {
			if _, ok := e.Details[key]; !ok {
				t.Errorf("CDC batch log entry has no %s: %v", key, e.Details)
			}
		}
	}

	// Pause: the slot stays, nothing is applied; resume replicates the gap.
	var paused map[string]any
	s.mustDo("POST", "/v1/mirrors/life/pause", nil, 200, &paused)
	if paused["status"] != "paused" {
		t.Errorf("pause response %v", paused)
	}
	s.mustDo("POST", "/v1/mirrors/life/pause", nil, 409, nil)
	slotIdle := func() bool {
		return queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot) == 1
	}
	waitFor(t, "the paused mirror to let go of its slot", 15*time.Second, slotIdle)
	before, _ := tableDigest(t, dst, "public.orders", "id")
	exec1(t, src, `INSERT INTO public.orders SELECT g, 'paused ' || g, 2, NULL FROM generate_series(20001, 20050) g`)
	holdsFor(t, "a paused mirror applying nothing and leaving its slot idle", 2*time.Second, func() bool {
		after, _ := tableDigest(t, dst, "public.orders", "id")
		return after == before && slotIdle()
	})
	if !slotExists(t, src, slot) {
		t.Error("slot dropped by pause")
	}
	s.mustDo("POST", "/v1/mirrors/life/resume", nil, 200, nil)
	s.mustDo("POST", "/v1/mirrors/life/resume", nil, 409, nil)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, item, qty, note", 30*time.Second)
	logs = s.logs("life", "")
	for _, msg := range []string{"Mirror paused", "Mirror resumed"} {
		if !hasLog(logs, msg) {
			t.Errorf("log has no %q entry", msg)
		}
	}

	// Delete: gone from the API at once, slot and publication dropped,
	// destination data untouched.
	var deleted map[string]string
	s.mustDo("DELETE", "/v1/mirrors/life", nil, 200, &deleted)
	if deleted["deleted"] != "life" {
		t.Errorf("delete response %v", deleted)
	}
	s.mustDo("GET", "/v1/mirrors/life", nil, 404, nil)
	waitFor(t, "slot and publication dropped", 30*time.Second, func() bool {
		return !slotExists(t, src, slot) && !publicationExists(t, src, pub)
	})
	if n, _ := tableDigest(t, dst, "public.orders", "id"); n == 0 {
		t.Error("delete emptied the destination table")
	}
}

func pgxConnQuery(t *testing.T, dbURL, sql string, dest ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// writeLoad runs small random transactions on a no-PK table until stop is
// closed: inserts (with duplicates), updates and deletes of single rows.
func writeLoad(t *testing.T, dbURL string, stop <-chan struct{}, txs *atomic.Int64) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200000; i++ {
		select {
		case <-stop:
			return
		default:
		}
		var err error
		switch rng.IntN(10) {
		case 0, 1, 2, 3, 4, 5:
			_, err = conn.Exec(ctx, `INSERT INTO public.load (k, v) VALUES ($1, $2), ($1, $2)`, rng.IntN(500), fmt.Sprint(rng.IntN(5)))
		case 6, 7:
			_, err = conn.Exec(ctx, `UPDATE public.load SET v = v || 'u' WHERE ctid = (SELECT ctid FROM public.load WHERE k = $1 LIMIT 1)`, rng.IntN(500))
		default:
			_, err = conn.Exec(ctx, `DELETE FROM public.load WHERE ctid = (SELECT ctid FROM public.load WHERE k = $1 LIMIT 1)`, rng.IntN(500))
		}
		if err != nil {
			t.Errorf("load: %v", err)
			return
		}
		txs.Add(1)
		time.Sleep(2 * time.Millisecond)
	}
}

const loadSchema = `CREATE TABLE public.load (k int, v text);
ALTER TABLE public.load REPLICA IDENTITY FULL;
INSERT INTO public.load SELECT g % 500, 'init' FROM generate_series(1, 2000) g;`

// TestKillDuringLoad kills the service with SIGKILL while a steady write
// load runs on a table without a primary key, starts it again, and checks
// that the destination ends exactly equal: nothing lost, nothing doubled.
func TestKillDuringLoad(t *testing.T) {
	t.Parallel()
	catalog, src, dst, a := newEnv(t, loadSchema)
	a.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "load", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "load", "public", "load")},
	}, 201, nil)
	a.waitStatus("load", "running", 60*time.Second)

	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); writeLoad(t, src, stop, &txs) }()
	// Kill while batches are being applied, then let the load go on until
	// the new process has taken over and applied some of it.
	waitGrown(t, "load transactions", &txs, 100, 30*time.Second)
	waitAppliedMoves(t, dst, 30*time.Second)
	a.kill()
	b := startService(t, catalog)
	b.waitStatus("load", "running", 60*time.Second)
	waitGrown(t, "load transactions", &txs, 50, 30*time.Second)
	waitAppliedMoves(t, dst, 60*time.Second)
	close(stop)
	wg.Wait()
	if txs.Load() < 100 {
		t.Fatalf("the load ran only %d transactions", txs.Load())
	}
	waitEqual(t, src, dst, "public.load", "public.load", "k, v", 90*time.Second)
	b.waitStatus("load", "running", 10*time.Second)
}

// holder returns the application_name of the catalog session that holds
// the mirror lock, or "" when nobody does.
func holder(t *testing.T, catalogURL string) string {
	t.Helper()
	var name string
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, catalogURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::oid AND l.objsubid = 2
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, int64(0x70676d)).Scan(&name)
	if err == pgx.ErrNoRows {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return name
}

// TestReplicaTakeover runs two replicas on one catalog: exactly one runs
// the mirror; when it is killed the other takes over within 30 s, and when
// it is terminated with SIGTERM the other takes over at once.
func TestReplicaTakeover(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `CREATE TABLE public.t (id serial PRIMARY KEY, v text)`)

	withApp := func(name string) string { return catalog + "&application_name=" + name }
	replicas := map[string]*service{}
	replicas["r1"] = startService(t, withApp("r1"))
	replicas["r2"] = startService(t, withApp("r2"))
	r1 := replicas["r1"]
	r1.createPeer("src", src)
	r1.createPeer("dst", dst)
	r1.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ha", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	r1.waitStatus("ha", "running", 60*time.Second)
	var first string
	waitFor(t, "a replica to hold the mirror", 20*time.Second, func() bool { first = holder(t, catalog); return first != "" })

	// kill -9 the replica that runs the mirror.
	other := map[string]string{"r1": "r2", "r2": "r1"}[first]
	killedAt := time.Now()
	replicas[first].kill()
	waitFor(t, "the other replica to take the mirror over", 45*time.Second, func() bool { return holder(t, catalog) == other })
	if d := time.Since(killedAt); d > 30*time.Second {
		t.Errorf("takeover after kill -9 took %s, want at most 30 s", d)
	}
	exec1(t, src, `INSERT INTO public.t (v) SELECT 'after kill' FROM generate_series(1, 100)`)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 30*time.Second)

	// Start a fresh replica, then SIGTERM the holder: handover at once.
	replicas[first] = startService(t, withApp(first))
	termAt := time.Now()
	replicas[other].terminate(40 * time.Second)
	waitFor(t, "handover after SIGTERM", 30*time.Second, func() bool { return holder(t, catalog) == first })
	if d := time.Since(termAt); d > 15*time.Second {
		t.Errorf("handover after SIGTERM took %s, want a few seconds", d)
	}
	exec1(t, src, `INSERT INTO public.t (v) SELECT 'after term' FROM generate_series(1, 100)`)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 30*time.Second)
}

// TestDeleteWithSourceDown deletes a mirror while its source is down: the
// mirror disappears from the API at once, and its slot and publication are
// dropped in the background once the source is back.
func TestDeleteWithSourceDown(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	srcCluster := pgtest.NewCluster(t, true)
	src := pgtest.NewDatabase(t, srcCluster)
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `CREATE TABLE public.t (id int PRIMARY KEY, v text); INSERT INTO public.t SELECT g, 'v' FROM generate_series(1, 100) g`)

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	var created map[string]any
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "gone", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, &created)
	s.waitStatus("gone", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 30*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srcCluster.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	s.mustDo("DELETE", "/v1/mirrors/gone", nil, 200, nil)
	s.mustDo("GET", "/v1/mirrors/gone", nil, 404, nil)
	var list []map[string]any
	s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
	if len(list) != 0 {
		t.Errorf("deleted mirror still listed: %v", list)
	}
	// The background cleanup tries while the source is down, fails, and
	// is retried later.
	waitFor(t, "a failed cleanup attempt while the source is down", 30*time.Second, func() bool {
		return queryInt64(t, catalog, `SELECT count(*) FROM river_job WHERE kind = 'mirror_cleanup' AND cardinality(errors) > 0`) > 0
	})
	if err := srcCluster.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	slot := created["replication_slot_name"].(string)
	pub := created["publication_name"].(string)
	waitFor(t, "slot and publication dropped after the source came back", 90*time.Second, func() bool {
		return !slotExists(t, src, slot) && !publicationExists(t, src, pub)
	})
	if n, _ := tableDigest(t, dst, "public.t", "id"); n != 100 {
		t.Errorf("destination has %d rows after delete, want the 100 replicated", n)
	}
}

// TestReplicasStartTogether starts three replicas at the same moment on an
// empty catalog: all come up (migrations under one lock), there is one
// default admin, and a token from one replica works on the others (one
// shared generated JWT secret).
func TestReplicasStartTogether(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	replicas := []*service{launchService(t, catalog), launchService(t, catalog), launchService(t, catalog)}
	for _, r := range replicas {
		r.waitReady()
	}
	for i, r := range replicas {
		other := replicas[(i+1)%len(replicas)]
		var me map[string]any
		other.token = r.token
		other.mustDo("GET", "/v1/auth/me", nil, 200, &me)
		if me["username"] != "admin" {
			t.Errorf("replica %d: /v1/auth/me with another replica's token: %v", i, me)
		}
	}
	var admins int
	pgxConnQuery(t, catalog, `SELECT count(*) FROM users WHERE username = 'admin'`, &admins)
	if admins != 1 {
		t.Errorf("%d default admin accounts, want 1", admins)
	}
}
