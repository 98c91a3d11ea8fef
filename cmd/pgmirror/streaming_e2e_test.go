package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestKillDuringStreamedTransaction: the source streams a large transaction
// while it runs (PostgreSQL 14+; logical_decoding_work_mem is set low on
// the source database so that it streams early). The service is killed with
// SIGKILL twice: while it has received part of an open streamed transaction,
// and while it applies a committed one. After each restart the destination
// ends exactly equal on a table without a key (duplicates included), and a
// reader of the destination never saw part of the transaction.
func TestKillDuringStreamedTransaction(t *testing.T) {
	t.Parallel()
	catalog, src, dst, a := newEnv(t, loadSchema)
	ctx := context.Background()
	srcConn := streamEarly(t, src)
	a.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "big", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "load", "public", "load")},
	}, 201, nil)
	a.waitStatus("big", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.load", "public.load", "k, v", 60*time.Second)
	streamed := func() int64 {
		var n int64
		err := srcConn.QueryRow(ctx, `SELECT coalesce(sum(s.stream_bytes), 0) FROM pg_stat_replication_slots s
			JOIN pg_replication_slots r USING (slot_name) WHERE r.database = current_database()`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Killed while the source streams an open transaction to it.
	tx, err := pgx.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	for _, sql := range []string{`BEGIN`, `INSERT INTO public.load SELECT g % 300, 'open' FROM generate_series(1, 30000) g`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the source to stream the open transaction", 30*time.Second, func() bool { return streamed() > 0 })
	a.kill()
	if _, err := tx.Exec(ctx, `INSERT INTO public.load SELECT g % 300, 'open, later' FROM generate_series(1, 30000) g`); err != nil {
		t.Fatal(err)
	}
	b := startService(t, catalog)
	b.waitStatus("big", "running", 60*time.Second)
	if _, err := tx.Exec(ctx, `DELETE FROM public.load WHERE v = 'init' AND k < 100`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	waitEqual(t, src, dst, "public.load", "public.load", "k, v", 90*time.Second)

	// Killed while it applies a committed streamed transaction.
	dstConn, err := pgx.Connect(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer dstConn.Close(ctx)
	count := func() int64 {
		var n int64
		if err := dstConn.QueryRow(ctx, `SELECT count(*) FROM public.load`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := count()
	exec1(t, src, `INSERT INTO public.load SELECT g % 300, 'applying' FROM generate_series(1, 200000) g`)
	waitFor(t, "the service to apply the streamed transaction", 60*time.Second, func() bool {
		var busy bool
		err := dstConn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND l.locktype = 'relation'
			AND l.relation = 'public.load'::regclass AND l.mode = 'RowExclusiveLock')`).Scan(&busy)
		return err == nil && busy
	})
	b.kill()
	if n := count(); n != before && n != before+200000 {
		t.Fatalf("half a transaction is visible: %d rows, %d before it", n, before)
	}
	c := startService(t, catalog)
	c.waitStatus("big", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.load", "public.load", "k, v", 90*time.Second)
	if n := streamed(); n == 0 {
		t.Fatal("the source streamed nothing")
	}
}

// TestVerifyDuringStreamedTransaction: while the source streams a large
// transaction that is still open (PostgreSQL 14+; logical_decoding_work_mem
// set low), a small transaction committed beside it reaches the destination
// without waiting for the large one. A verification started meanwhile
// waits for the open transaction (PostgreSQL takes its consistent snapshot
// only then) and says so in the mirror's log, without holding the mirror:
// another small transaction still arrives while it waits. Once the large
// transaction commits, the verification ends "done" without difference,
// with the large transaction on both sides.
func TestVerifyDuringStreamedTransaction(t *testing.T) {
	t.Parallel()
	_, src, dst, a := newEnv(t, `CREATE TABLE public.big (id int PRIMARY KEY, v text);
		INSERT INTO public.big SELECT g, 'init' FROM generate_series(1, 5000) g;`)
	ctx := context.Background()
	srcConn := streamEarly(t, src)
	var streams bool
	if err := srcConn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int >= 140000`).Scan(&streams); err != nil {
		t.Fatal(err)
	}
	a.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "bigv", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "big", "public", "big")},
	}, 201, nil)
	a.waitStatus("bigv", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.big", "public.big", "id, v", 60*time.Second)

	tx, err := pgx.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	for _, sql := range []string{`BEGIN`, `UPDATE public.big SET v = 'open'`,
		`INSERT INTO public.big SELECT g, 'open' FROM generate_series(100001, 130000) g`} {
		if _, err := tx.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	if streams {
		waitFor(t, "the source to stream the open transaction", 30*time.Second, func() bool {
			var n int64
			err := srcConn.QueryRow(ctx, `SELECT coalesce(sum(s.stream_bytes), 0) FROM pg_stat_replication_slots s
				JOIN pg_replication_slots r USING (slot_name) WHERE r.database = current_database()`).Scan(&n)
			return err == nil && n > 0
		})
	}
	// Small transactions beside it are applied while the large one is open.
	small := func(id int) {
		exec1(t, src, fmt.Sprintf(`INSERT INTO public.big VALUES (%d, 'small')`, id))
		waitFor(t, "a small transaction on the destination while the large one is open", 60*time.Second, func() bool {
			return queryInt64(t, dst, fmt.Sprintf(`SELECT count(*) FROM public.big WHERE id = %d`, id)) == 1
		})
	}
	small(-1)

	var v verifyResult
	a.mustDo("POST", "/v1/mirrors/bigv/verify", nil, 202, &v)
	a.waitLog("bigv", "Verification waits for transactions open on the source", 60*time.Second, nil)
	small(-2) // the mirror is not held while the verification waits
	if n := queryInt64(t, dst, `SELECT count(*) FROM public.big WHERE v = 'open'`); n != 0 {
		t.Fatalf("%d rows of the open transaction are visible on the destination", n)
	}
	var now verifyResult
	a.mustDo("GET", fmt.Sprintf("/v1/mirrors/bigv/verifications/%d", v.ID), nil, 200, &now)
	if now.State != "running" {
		t.Fatalf("verification while the large transaction is open: %+v, want running (waiting)", now)
	}

	if _, err := tx.Exec(ctx, `COMMIT`); err != nil {
		t.Fatal(err)
	}
	v = a.waitVerify(t, "bigv", v.ID)
	if v.State != "done" || v.RowsDiffering == nil || *v.RowsDiffering != 0 {
		t.Fatalf("verification once the large transaction committed: %+v, want done without difference", v)
	}
	if tb := byName(v)["public.big"]; tb.RowsSource < 35002 || tb.RowsDestination != tb.RowsSource {
		t.Fatalf("verification counted %d source and %d destination rows, want the large transaction's 35002 on both sides",
			tb.RowsSource, tb.RowsDestination)
	}
	waitEqual(t, src, dst, "public.big", "public.big", "id, v", 90*time.Second)
}

// streamEarly sets logical_decoding_work_mem low on the source database, so
// that a 14+ source streams a transaction of a few thousand rows while it
// runs, and returns a connection to it (closed when the test ends).
func streamEarly(t *testing.T, src string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	exec1(t, src, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '64kB'`, pgx.Identifier{db}.Sanitize()))
	return conn
}
