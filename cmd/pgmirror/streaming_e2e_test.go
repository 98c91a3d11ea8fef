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
	srcConn, err := pgx.Connect(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer srcConn.Close(ctx)
	var db string
	if err := srcConn.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	exec1(t, src, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '64kB'`, pgx.Identifier{db}.Sanitize()))
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
