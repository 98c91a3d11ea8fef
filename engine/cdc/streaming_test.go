package cdc_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
)

// streamSmall makes the source stream every transaction of more than 64 kB
// of changes: the walsender of the mirror's slot connects to the source
// database and takes the database's settings.
func streamSmall(t *testing.T, b *testBundle) {
	t.Helper()
	pgtest.Exec(t, b.src, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '64kB'`, pgx.Identifier{dbName(b.src)}.Sanitize()))
}

// slotStats are the slot's counters in pg_stat_replication_slots.
type slotStats struct {
	streamTxns, streamBytes, spillTxns, spillBytes int64
}

func readSlotStats(t *testing.T, url, slot string) slotStats {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var st slotStats
	err = conn.QueryRow(ctx, `SELECT stream_txns, stream_bytes, spill_txns, spill_bytes FROM pg_stat_replication_slots WHERE slot_name = $1`, slot).
		Scan(&st.streamTxns, &st.streamBytes, &st.spillTxns, &st.spillBytes)
	require.NoError(t, err)
	return st
}

// sessionsDump describes, for a failure message, the cluster's sessions
// with what they wait for, the slot's positions and the WAL's end.
func sessionsDump(url, slot string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(ctx)
	var out bytes.Buffer
	rows, err := conn.Query(ctx, `SELECT format('%s %s %s %s %s/%s xact %s: %s', pid, datname, backend_type, application_name, state,
		coalesce(wait_event_type || ':' || wait_event, '-'), coalesce(now() - xact_start, '0'), left(query, 120))
		FROM pg_stat_activity WHERE pid <> pg_backend_pid() ORDER BY backend_type, pid`)
	if err == nil {
		lines, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, l := range lines {
			fmt.Fprintln(&out, l)
		}
	}
	if slot != "" {
		var line string
		err := conn.QueryRow(ctx, `SELECT format('slot %s active %s restart %s confirmed %s; wal end %s', slot_name, active_pid, restart_lsn,
			confirmed_flush_lsn, pg_current_wal_lsn()) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&line)
		if err != nil {
			line = err.Error()
		}
		fmt.Fprintln(&out, line)
	}
	return out.String()
}

// visibleCounts are the row counts a reader of the destination may see:
// the count after each source commit so far. A count is allowed before the
// commit that makes it.
type visibleCounts struct {
	mu     sync.Mutex
	counts []int64
}

func newVisibleCounts() *visibleCounts { return &visibleCounts{counts: []int64{0}} }

// add allows the count after a commit of delta more rows.
func (v *visibleCounts) add(delta int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.counts = append(v.counts, v.counts[len(v.counts)-1]+delta)
}

// set allows count n.
func (v *visibleCounts) set(n int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.counts = append(v.counts, n)
}

func (v *visibleCounts) allowed() []int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.counts)
}

// watchCounts samples query (a count) on the destination until stop and
// fails the test if it ever returns a value not allowed: a reader of the
// destination sees the rows of whole source transactions only.
func watchCounts(t *testing.T, url, query string, allowed *visibleCounts) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var bad []int64
	var samples int
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			var n int64
			if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
				continue
			}
			samples++
			if !slices.Contains(allowed.allowed(), n) {
				bad = append(bad, n)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return func() {
		cancel()
		wg.Wait()
		t.Logf("%d samples of the destination", samples)
		require.Empty(t, bad, "the destination showed part of a source transaction")
	}
}

// TestStreamedTransactions: on a source that streams (PostgreSQL 14+), a
// streamed commit, a streamed rollback, a subtransaction rolled back inside
// a streamed transaction, TOAST values (new and unchanged) in streamed
// transactions, and two streamed transactions interleaved with a small one
// all reach the destination exactly, and a reader of the destination never
// sees part of one. The source streamed them and spilled nothing (but for
// TOAST values).
func TestStreamedTransactions(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, v text, body text); CREATE TABLE public.dup (id int, v text)`
	b := setup(t, ddl+`; ALTER TABLE public.dup REPLICA IDENTITY FULL; ALTER TABLE public.items ALTER body SET STORAGE EXTERNAL`, ddl,
		same("public", "items"), same("public", "dup"))
	streamSmall(t, b)
	b.cfg.StageMemory = 256 << 10 // some transactions go to files
	ctx := context.Background()

	seen := newVisibleCounts()
	stop := watchCounts(t, b.dst, `SELECT (SELECT count(*) FROM items) + (SELECT count(*) FROM dup)`, seen)
	r := b.start(t)

	// A streamed commit.
	// (Each count is allowed before the commit that makes it.)
	seen.add(20000)
	pgtest.Exec(t, b.src, `INSERT INTO items SELECT g, 'v' || g, NULL FROM generate_series(1, 20000) g`)
	// A streamed rollback.
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO items SELECT g, 'gone', NULL FROM generate_series(100001, 120000) g;
		INSERT INTO dup SELECT 1, 'gone' FROM generate_series(1, 5000); ROLLBACK`)
	// A subtransaction rolled back within a streamed transaction (nested
	// savepoints, a released one kept), and duplicates in a table without
	// a key: undone in its early transaction.
	seen.add(5001)
	pgtest.Exec(t, b.src, `BEGIN;
		INSERT INTO dup SELECT 1, 'kept' FROM generate_series(1, 3001);
		SAVEPOINT a; INSERT INTO dup SELECT 2, 'rolled back' FROM generate_series(1, 4000);
		SAVEPOINT b; UPDATE items SET v = 'rolled back' WHERE id <= 10000; RELEASE SAVEPOINT b;
		ROLLBACK TO SAVEPOINT a;
		SAVEPOINT c; INSERT INTO dup SELECT 3, 'released' FROM generate_series(1, 2000); RELEASE SAVEPOINT c;
		UPDATE items SET v = 'updated' WHERE id > 15000;
		COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)
	first := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", first)
	require.Positive(t, first.streamTxns, "the source streamed")
	require.Zero(t, first.spillBytes, "the source spilled to disk")

	// TOAST: values stored out of line, inserted in a streamed transaction,
	// then kept unchanged by a streamed update of another column.
	big := `(SELECT string_agg(md5(g::text || i), '') FROM generate_series(1, 100) i)`
	seen.add(300)
	pgtest.Exec(t, b.src, `INSERT INTO items SELECT g, 't', `+big+` FROM generate_series(20001, 20300) g`)
	pgtest.Exec(t, b.src, `UPDATE items SET v = 'toast kept' WHERE id > 20000; UPDATE items SET v = 'toast kept 2' WHERE id > 20000`)
	b.waitEqual(t, r, `SELECT id, v, md5(body) FROM items`, `SELECT id, v, md5(body) FROM items`)
	// A transaction that reaches logical_decoding_work_mem in the middle
	// of a TOASTed row cannot be streamed at that moment: the source
	// spills that part, as for its own subscribers.
	toast := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", toast)

	// Two streamed transactions interleaved, and a small one committed
	// while both are open: the small one, then the second, then the first.
	ta, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer ta.Close(ctx)
	tb, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer tb.Close(ctx)
	_, err = ta.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	_, err = tb.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	for round := range 4 {
		_, err = ta.Exec(ctx, fmt.Sprintf(`INSERT INTO items SELECT g, 'a', NULL FROM generate_series(%d, %d) g`, 30000+round*2000, 30000+round*2000+1999))
		require.NoError(t, err)
		_, err = tb.Exec(ctx, fmt.Sprintf(`INSERT INTO items SELECT g, 'b', NULL FROM generate_series(%d, %d) g`, 40000+round*1500, 40000+round*1500+1499))
		require.NoError(t, err)
		_, err = tb.Exec(ctx, `UPDATE items SET v = v || '+b' WHERE id BETWEEN 1 AND 500`)
		require.NoError(t, err)
	}
	seen.add(1)
	pgtest.Exec(t, b.src, `INSERT INTO dup VALUES (9, 'small')`)
	// Let the blocks reach the run before the commits.
	time.Sleep(500 * time.Millisecond)
	seen.add(6000)
	_, err = tb.Exec(ctx, `COMMIT`)
	require.NoError(t, err)
	seen.add(8000)
	_, err = ta.Exec(ctx, `COMMIT`)
	require.NoError(t, err)
	b.waitEqual(t, r, `SELECT id, v, md5(body) FROM items`, `SELECT id, v, md5(body) FROM items`)
	b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)
	require.NoError(t, r.halt(t))
	stop()

	require.Equal(t, change.Counts{Inserted: 20000 + 300 + 8000 + 6000, Updated: 5000 + 600 + 4*500}, b.rep.totals()["public.items"],
		"each change applied once (updates of one row in one batch count once)")
	st := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", st)
	require.Greater(t, st.streamTxns, toast.streamTxns, "the source streamed")
	require.Equal(t, toast.spillBytes, st.spillBytes, "the source spilled to disk")
}

// openTx begins a transaction on the source and returns its connection.
func openTx(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `BEGIN`)
	require.NoError(t, err)
	return conn
}

func execOn(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	_, err := conn.Exec(context.Background(), sql)
	require.NoError(t, err)
}

// TestStreamedRestart: a run that ends in the middle of a streamed
// transaction (its blocks staged, the source still writing it), and one
// that ends while a streamed transaction is being applied, lose and double
// nothing: the next run receives the transaction again from its start.
func TestStreamedRestart(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.dup (id int, v text)`
	b := setup(t, ddl+`; ALTER TABLE public.dup REPLICA IDENTITY FULL`, ddl, same("public", "dup"))
	streamSmall(t, b)
	b.cfg.ChunkSize = 500
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO dup VALUES (0, 'first')`)
	b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)

	// The run ends (cancelled, as by a crash) while the source still writes
	// a streamed transaction whose first blocks it received.
	tx := openTx(t, b.src)
	execOn(t, tx, `INSERT INTO dup SELECT g % 7, 'open' FROM generate_series(1, 20000) g`)
	require.Eventually(t, func() bool { return readSlotStats(t, b.src, b.cfg.SlotName).streamBytes > 0 },
		30*time.Second, 50*time.Millisecond, "the source never streamed")
	r.cancel()
	<-r.done
	r.stopped = true
	execOn(t, tx, `INSERT INTO dup SELECT g % 7, 'open, later' FROM generate_series(1, 20000) g`)
	r = b.start(t)
	execOn(t, tx, `UPDATE dup SET v = 'updated' WHERE v = 'first'`)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)

	// The run ends while it applies a streamed transaction.
	dc, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer dc.Close(context.Background())
	pgtest.Exec(t, b.src, `INSERT INTO dup SELECT g % 7, 'applying' FROM generate_series(1, 100000) g`)
	require.Eventually(t, func() bool {
		var busy bool
		err := dc.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.datname = current_database() AND a.application_name = 'pgmirror' AND l.locktype = 'relation'
			AND l.relation = 'public.dup'::regclass AND l.mode = 'RowExclusiveLock')`).Scan(&busy)
		return err == nil && busy
	}, 60*time.Second, 2*time.Millisecond)
	r.cancel()
	<-r.done
	r.stopped = true
	var n int
	require.NoError(t, dc.QueryRow(context.Background(), `SELECT count(*) FROM dup WHERE v = 'applying'`).Scan(&n))
	require.True(t, n == 0 || n == 100000, "half a transaction is visible: %d rows", n)
	r = b.start(t)
	b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)
	require.NoError(t, r.halt(t))
	require.Equal(t, change.Counts{Inserted: 1 + 40000 + 100000, Updated: 1}, b.rep.totals()["public.dup"], "every change applied once")
	// (A walsender that starts again decodes the open transaction from its
	// beginning, before the slot's confirmed position, where it may not
	// stream: the source spills that part, as for its own subscribers.)
}

// TestStreamedMemoryBounded applies two streamed transactions of 300,000
// rows while they stream, with 1 MiB of staging memory: their staged
// records past it are dropped (they are applied early), the heap stays
// bounded, and the source streams them without spilling.
func TestStreamedMemoryBounded(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("slow: 300,000 rows, and a heap bound the race detector's overhead would break")
	}
	// Not parallel: the heap measurement must see this test alone.
	ddl := `CREATE TABLE public.big (id bigint PRIMARY KEY, v text, n int)`
	b := setup(t, ddl, ddl, same("public", "big"))
	pgtest.Exec(t, b.src, fmt.Sprintf(`ALTER DATABASE %s SET logical_decoding_work_mem = '1MB'`, pgx.Identifier{dbName(b.src)}.Sanitize()))
	b.cfg.StageMemory = 1 << 20
	b.cfg.MaxBufferedBytes = 8 << 20
	runtime.GC() // what earlier tests left does not count
	peak := watchHeap(t)
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big SELECT g, md5(g::text) || md5((g + 1)::text), g FROM generate_series(1, 300000) g`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	pgtest.Exec(t, b.src, `UPDATE big SET n = n + 1`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	t.Logf("peak heap: %d MB live, %d MB in use", peak.live.Load()>>20, peak.inUse.Load()>>20)
	// Measured 13 MB alone; staged whole, the transactions' 125 MB of
	// messages would be in memory (111 MB measured that way).
	require.Less(t, peak.inUse.Load(), uint64(64<<20), "heap grew with the transaction")
	require.Equal(t, change.Counts{Inserted: 300000, Updated: 300000}, b.rep.totals()["public.big"])
	st := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", st)
	require.Positive(t, st.streamBytes, "the source streamed")
	require.Zero(t, st.spillBytes, "the source spilled to disk")
}

// TestStreamingVersions: PostgreSQL 14 (the first that streams) and 18
// sources stream a transaction with a rolled back subtransaction; a
// PostgreSQL 13 source, which cannot stream, sends it whole at its commit
// as before, and the stream asks it for nothing it does not know.
func TestStreamingVersions(t *testing.T) {
	t.Parallel()
	for _, major := range []int{13, 14, 18} {
		t.Run(fmt.Sprint(major), func(t *testing.T) {
			t.Parallel()
			ddl := `CREATE TABLE public.dup (id int, v text)`
			b := setupOn(t, pgtest.MajorCluster(t, major), pgtest.DestCluster(t), ddl+`; ALTER TABLE public.dup REPLICA IDENTITY FULL`, ddl, same("public", "dup"))
			streamSmall(t, b)
			r := b.start(t)
			pgtest.Exec(t, b.src, `BEGIN; INSERT INTO dup SELECT g % 5, 'kept' FROM generate_series(1, 5000) g;
				SAVEPOINT a; INSERT INTO dup SELECT 1, 'rolled back' FROM generate_series(1, 5000); ROLLBACK TO a;
				INSERT INTO dup SELECT g % 5, 'after' FROM generate_series(1, 5000) g; COMMIT`)
			b.waitEqual(t, r, `SELECT * FROM dup`, `SELECT * FROM dup`)
			require.NoError(t, r.halt(t))
			require.Equal(t, change.Counts{Inserted: 10000}, b.rep.totals()["public.dup"])
			if major >= 14 {
				st := readSlotStats(t, b.src, b.cfg.SlotName)
				require.Positive(t, st.streamBytes, "the source streamed")
				require.Zero(t, st.spillBytes, "the source spilled to disk")
			}
		})
	}
}

// Small transactions that commit while a large one streams are committed on
// the destination before the large one is applied, not in its batch: they
// do not wait for its apply. The run starts on a backlog in which 50 small
// transactions commit right before the large one, so that they arrive
// together and the small ones would otherwise still be gathering when the
// large one's replay begins.
func TestStreamedNotHoldingBackSmall(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text); CREATE TABLE public.small (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "big"), same("public", "small"))
	streamSmall(t, b)
	ctx := context.Background()
	large, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer large.Close(ctx)
	_, err = large.Exec(ctx, `BEGIN; INSERT INTO public.big SELECT g, 'big ' || g FROM generate_series(1, 50000) g`)
	require.NoError(t, err)
	for i := range 50 {
		pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO public.small VALUES (%d, 'small')`, i))
	}
	_, err = large.Exec(ctx, `COMMIT`)
	require.NoError(t, err)

	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	b.waitEqual(t, r, `SELECT * FROM small`, `SELECT * FROM small`)
	require.Positive(t, readSlotStats(t, b.src, b.cfg.SlotName).streamTxns, "the source streamed")
	b.rep.mu.Lock()
	defer b.rep.mu.Unlock()
	bigT, smallT := change.TableName{Schema: "public", Name: "big"}, change.TableName{Schema: "public", Name: "small"}
	for _, batch := range b.rep.batches {
		_, hasBig := batch.Tables[bigT]
		_, hasSmall := batch.Tables[smallT]
		require.False(t, hasBig && hasSmall, "batch %d holds the small transactions and the large one: %+v", batch.ID, batch.Tables)
	}
}

// earlyWriter returns the process id of a pgmirror session on the
// destination that holds a write lock on table while its transaction is
// open and idle (a streamed transaction being applied while the source
// still runs it, waiting for more), or 0 if there is none.
func earlyWriter(t *testing.T, dc *pgx.Conn, table string) int32 {
	t.Helper()
	var pid int32
	err := dc.QueryRow(context.Background(), `SELECT coalesce(min(a.pid), 0) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.datname = current_database() AND a.application_name = 'pgmirror' AND a.state = 'idle in transaction'
		AND l.locktype = 'relation' AND l.relation = $1::regclass AND l.mode = 'RowExclusiveLock'`, table).Scan(&pid)
	if err != nil {
		return 0
	}
	return pid
}

// earlyWriting reports whether an early transaction is open on table.
func earlyWriting(t *testing.T, dc *pgx.Conn, table string) bool {
	return earlyWriter(t, dc, table) != 0
}

// stillWriting reports whether the session pid still holds its write lock
// on table, writing or waiting: its transaction is still open.
func stillWriting(t *testing.T, dc *pgx.Conn, pid int32, table string) bool {
	t.Helper()
	var busy bool
	err := dc.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE pid = $1 AND locktype = 'relation' AND relation = $2::regclass AND mode = 'RowExclusiveLock')`, pid, table).Scan(&busy)
	return err == nil && busy
}

// TestStreamedAppliedWhileStreaming: a streamed transaction's rows are
// written on the destination while the source still runs it, invisible
// there until the source commits; small transactions on the same table
// committed meanwhile arrive without waiting for it; at the commit its
// batch is reported with the time its first change was written; a streamed
// transaction rolled back on the source leaves nothing; one with a
// truncate is applied whole at its commit.
func TestStreamedAppliedWhileStreaming(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text); CREATE TABLE public.small (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "big"), same("public", "small"))
	streamSmall(t, b)
	ctx := context.Background()
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (0, 'first')`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)

	// Applied while it streams.
	tx := openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'big' FROM generate_series(1, 30000) g`)
	var writer int32
	require.Eventually(t, func() bool { writer = earlyWriter(t, dc, "public.big"); return writer != 0 }, 60*time.Second, 5*time.Millisecond,
		"the streamed transaction is not being applied while the source runs it")
	var n int
	require.NoError(t, dc.QueryRow(ctx, `SELECT count(*) FROM big`).Scan(&n))
	require.Equal(t, 1, n, "rows of an open source transaction are visible on the destination")
	// A small transaction on the same table meanwhile.
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (-1, 'small')`)
	b.waitEqual(t, r, `SELECT * FROM big WHERE id < 1`, `SELECT * FROM big WHERE id < 1`)
	require.True(t, stillWriting(t, dc, writer, "public.big"), "the early transaction ended before the source's commit")
	execOn(t, tx, `UPDATE big SET v = 'updated' WHERE id % 3 = 0`)
	time.Sleep(200 * time.Millisecond)
	committedAt := time.Now()
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	bigT := change.TableName{Schema: "public", Name: "big"}
	b.rep.mu.Lock()
	var early *cdc.Batch
	for i, batch := range b.rep.batches {
		if batch.Tables[bigT].Inserted == 30000 {
			early = &b.rep.batches[i]
		}
	}
	require.NotNil(t, early, "no batch with the streamed transaction's 30,000 rows: %+v", b.rep.batches)
	require.True(t, early.FetchedAt.Before(committedAt), "the streamed transaction's batch began at its commit (%s), not before (%s)",
		early.FetchedAt, committedAt)
	b.rep.mu.Unlock()

	// Rolled back on the source while applied early: nothing stays.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'gone' FROM generate_series(100001, 130000) g`)
	require.Eventually(t, func() bool { writer = earlyWriter(t, dc, "public.big"); return writer != 0 }, 60*time.Second, 5*time.Millisecond)
	execOn(t, tx, `ROLLBACK`)
	require.Eventually(t, func() bool { return !stillWriting(t, dc, writer, "public.big") }, 30*time.Second, 5*time.Millisecond,
		"the early transaction stayed open after the source rolled back")
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (-2, 'after the rollback')`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)

	// The early transaction's writes wait (a destination session holds a
	// row lock they need): small transactions committed meanwhile still
	// arrive, their apply does not wait behind the large one's.
	holder := openTx(t, b.dst)
	execOn(t, holder, `SELECT * FROM big WHERE id = 0 FOR UPDATE`)
	tx = openTx(t, b.src)
	execOn(t, tx, `UPDATE big SET v = 'held' WHERE id = 0`)
	execOn(t, tx, `INSERT INTO big SELECT g, 'held' FROM generate_series(300001, 330000) g`)
	require.Eventually(t, func() bool {
		var waiting bool
		err := dc.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database()
			AND application_name = 'pgmirror' AND wait_event_type = 'Lock')`).Scan(&waiting)
		return err == nil && waiting
	}, 60*time.Second, 5*time.Millisecond, "the early transaction never met the held row")
	pgtest.Exec(t, b.src, `INSERT INTO small VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM small`, `SELECT * FROM small`)
	execOn(t, holder, `COMMIT`)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)

	// A truncate between the rows of a streamed transaction: applied once,
	// in the early transaction.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'before truncate' FROM generate_series(200001, 220000) g`)
	execOn(t, tx, `TRUNCATE big`)
	execOn(t, tx, `INSERT INTO big SELECT g, 'after truncate' FROM generate_series(1, 20000) g`)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	require.Equal(t, change.Counts{Inserted: 1 + 30000 + 1 + 1 + 30000 + 20000 + 20000, Updated: 10001 + 1}, b.rep.totals()["public.big"],
		"each change applied once")
	st := readSlotStats(t, b.src, b.cfg.SlotName)
	require.Zero(t, st.spillBytes, "the source spilled to disk")
}

// TestStreamedEarlyLockWait: a destination-only unique index makes a small
// transaction wait for a row the early transaction deleted (the source,
// without the index, let it commit first). The batch's lock wait ends at
// its timeout instead of waiting forever for a transaction that commits
// only after it, and the run starts again with large transactions applied
// at their commit, where the destination's index refuses the small
// transaction's row: the run ends with that violation, as it would without
// early apply; or, when both transactions come in one batch, the batch
// applies them (the large one's delete first) and the destination equals
// the source.
func TestStreamedEarlyLockWait(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl+`; CREATE UNIQUE INDEX ON public.big (v)`, same("public", "big"))
	streamSmall(t, b)
	var log lockedBuffer
	b.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (1, 'x')`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	dc, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer dc.Close(context.Background())

	tx := openTx(t, b.src)
	execOn(t, tx, `DELETE FROM big WHERE id = 1`)
	execOn(t, tx, `INSERT INTO big SELECT g, 'big ' || g FROM generate_series(2, 30000) g`)
	require.Eventually(t, func() bool { return earlyWriting(t, dc, "public.big") }, 60*time.Second, 5*time.Millisecond)
	pgtest.Exec(t, b.src, `INSERT INTO big VALUES (100000, 'x')`)
	execOn(t, tx, `COMMIT`)
	start := time.Now()
	sc, err := pgx.Connect(context.Background(), b.src)
	require.NoError(t, err)
	defer sc.Close(context.Background())
	const restarted = "restarting the stream with large transactions applied at their commit"
	for {
		select {
		case err := <-r.done:
			r.stopped = true
			require.Error(t, err)
			require.Contains(t, err.Error(), "unique", "the run ended with the destination's violation")
			require.Contains(t, log.String(), restarted)
			t.Logf("run ended after %s: %v", time.Since(start).Round(time.Millisecond), err)
			return
		case <-time.After(100 * time.Millisecond):
		}
		// Restarted, the source may send the large transaction whole
		// (it began before the restart position, where the source does
		// not stream): then both share a batch, applied folded by key
		// (the large one's delete first), which the index accepts. The
		// destination then equals the source; each change once.
		if strings.Contains(log.String(), restarted) {
			wantN, want := fingerprint(t, sc, `SELECT * FROM big`)
			if gotN, got := fingerprint(t, dc, `SELECT * FROM big`); gotN == wantN && got == want {
				require.NoError(t, r.halt(t))
				require.Equal(t, change.Counts{Inserted: 1 + 29999 + 1, Deleted: 1}, b.rep.totals()["public.big"], "each change applied once")
				t.Logf("the restarted run applied both transactions in one batch after %s", time.Since(start).Round(time.Millisecond))
				return
			}
		}
		if time.Since(start) < 90*time.Second {
			continue
		}
		var stacks bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		b.rep.mu.Lock()
		batches := fmt.Sprintf("%+v", b.rep.batches)
		b.rep.mu.Unlock()
		var rows string
		_ = dc.QueryRow(context.Background(), `SELECT format('%s rows, ids 1 and 100000: %s', count(*), string_agg(id || '=' || v, ', ') FILTER (WHERE id IN (1, 100000))) FROM big`).Scan(&rows)
		t.Fatalf("the run still waits: the batch waits for the early transaction, which waits for the batch\nlog:\n%s\nbatches: %s\ndestination table: %s\nsource:\n%s\ndestination:\n%s\ngoroutines:\n%s",
			log.String(), batches, rows, sessionsDump(b.src, b.cfg.SlotName), sessionsDump(b.dst, ""), stacks.String())
	}
}

// TestSmallNotHeldWhileLargeDeclined: while a streamed transaction is not
// applied early (a run with a stop position applies none early), its changes still
// arrive as it streams; a small transaction that commits among them is
// committed on the destination within moments, not at the next source
// commit (the large one's, or a heartbeat's).
func TestSmallNotHeldWhileLargeDeclined(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text); CREATE TABLE public.small (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "big"), same("public", "small"))
	streamSmall(t, b)
	b.cfg.StopAt = change.LSN(1 << 62) // never reached; no early apply with a stop position
	// A backlog in which the large transaction's changes come right after
	// the small one's commit, still open when the run starts.
	tx := openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'big' FROM generate_series(1, 20000) g`)
	pgtest.Exec(t, b.src, `INSERT INTO small VALUES (1)`)
	execOn(t, tx, `INSERT INTO big SELECT g, 'big' FROM generate_series(100000, 120000) g`)
	started := time.Now()
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM small`, `SELECT * FROM small`)
	t.Logf("the small transaction arrived %s after the run started", time.Since(started).Round(time.Millisecond))
	require.Less(t, time.Since(started), 8*time.Second, "the small transaction waited for a later source commit")
	// The same while the run streams.
	for round := 2; round <= 3; round++ {
		pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO small VALUES (%d)`, round))
		execOn(t, tx, fmt.Sprintf(`INSERT INTO big SELECT g, 'big' FROM generate_series(%d, %d) g`, round*100000+50000, round*100000+55000))
		committed := time.Now()
		b.waitEqual(t, r, `SELECT * FROM small`, `SELECT * FROM small`)
		t.Logf("round %d: the small transaction arrived %s after the large one streamed on", round, time.Since(committed).Round(time.Millisecond))
		require.Less(t, time.Since(committed), 5*time.Second, "the small transaction waited for a later source commit")
	}
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	require.Equal(t, change.Counts{Inserted: 3}, b.rep.totals()["public.small"])
	require.Equal(t, change.Counts{Inserted: 20000 + 20001 + 2*5001}, b.rep.totals()["public.big"])
}

// TestSourceStreamsSooner: a transaction of about 20 MB of changes, below
// PostgreSQL's default logical_decoding_work_mem (64 MB) and above the 8 MB
// pgmirror's stream asks its walsender for, is streamed while it runs
// instead of sent whole at its commit, and applied once.
func TestSourceStreamsSooner(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.mid (id bigint PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "mid"))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	var setting string
	require.NoError(t, conn.QueryRow(ctx, `SHOW logical_decoding_work_mem`).Scan(&setting))
	require.NoError(t, conn.Close(ctx))
	require.Equal(t, "64MB", setting, "the source's own setting")
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO mid SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, 60000) g`)
	b.waitEqual(t, r, `SELECT * FROM mid`, `SELECT * FROM mid`)
	require.NoError(t, r.halt(t))
	require.Equal(t, change.Counts{Inserted: 60000}, b.rep.totals()["public.mid"])
	st := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", st)
	require.Positive(t, st.streamTxns, "the source streamed the transaction")
	require.Zero(t, st.spillBytes, "the source spilled to disk")
}

// TestStreamedReadAgain: streamed transactions applied while they stream,
// past the staging memory. Subtransactions rolled back in one (nested
// savepoints, a released one, rollbacks before and after other changes)
// are undone in its early transaction, which goes on; a truncate with
// RESTART IDENTITY gives the next one up after its changes went to the
// destination, and the run reads it again from the source and applies it
// at its commit. The
// destination never shows part of one, each change is applied once, and
// the transaction after it is applied early again. One with more
// subtransactions than the early transaction takes savepoints for (an
// exception block per row) is read again too.
func TestStreamedReadAgain(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "big"))
	streamSmall(t, b)
	b.cfg.StageMemory = 64 << 10
	var log lockedBuffer
	b.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	seen := newVisibleCounts()
	stop := watchCounts(t, b.dst, `SELECT count(*) FROM big`, seen)
	r := b.start(t)
	const reread = "reading it again from the source"
	early := func(what string) {
		t.Helper()
		require.Eventually(t, func() bool { return earlyWriting(t, dc, "public.big") }, 60*time.Second, 5*time.Millisecond, what)
	}

	// Subtransactions rolled back once the early transaction holds 30,000
	// rows: undone there, and it goes on.
	tx := openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'big' FROM generate_series(1, 30000) g`)
	early("the streamed transaction is not being applied while the source runs it")
	execOn(t, tx, `SAVEPOINT a; INSERT INTO big SELECT g, 'gone' FROM generate_series(50001, 60000) g;
		SAVEPOINT b; UPDATE big SET v = 'gone' WHERE id <= 20000; RELEASE SAVEPOINT b;
		INSERT INTO big SELECT g, 'gone' FROM generate_series(60001, 70000) g;
		ROLLBACK TO SAVEPOINT a;
		SAVEPOINT c; UPDATE big SET v = 'kept' WHERE id <= 10000; RELEASE SAVEPOINT c;
		INSERT INTO big SELECT g, 'after' FROM generate_series(30001, 35000) g;
		SAVEPOINT d; DELETE FROM big WHERE id > 34000; ROLLBACK TO SAVEPOINT d;
		UPDATE big SET v = 'last' WHERE id > 34990`)
	early("the early transaction was given up")
	seen.set(35000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NotContains(t, log.String(), reread)
	require.NotContains(t, log.String(), "applied at its commit instead of while it streams")

	// The next one is applied early too; a truncate that resets sequences
	// gives it up.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'before truncate' FROM generate_series(100001, 130000) g`)
	early("the next streamed transaction is not being applied while it streams")
	execOn(t, tx, `TRUNCATE big RESTART IDENTITY`)
	execOn(t, tx, `INSERT INTO big SELECT g, 'after truncate' FROM generate_series(1, 20000) g`)
	seen.set(20000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.Equal(t, 1, strings.Count(log.String(), reread), "the transaction read again once")
	require.Contains(t, log.String(), "a truncate with CASCADE or RESTART IDENTITY")

	// One applied early to its end after the one read again.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'early' FROM generate_series(200001, 230000) g`)
	early("after a transaction read again, the next one is not applied while it streams")
	seen.set(50000)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)

	// A PL/pgSQL exception block per row: more subtransactions than the
	// early transaction takes savepoints for; read again, each tenth row's
	// block rolled back.
	tx = openTx(t, b.src)
	execOn(t, tx, `INSERT INTO big SELECT g, 'bulk' FROM generate_series(300001, 330000) g`)
	early("the fourth streamed transaction is not being applied while it streams")
	execOn(t, tx, `DO $$ BEGIN FOR i IN 400001..400200 LOOP
		BEGIN INSERT INTO big VALUES (i, 'row'); IF i % 10 = 0 THEN RAISE EXCEPTION 'no'; END IF;
		EXCEPTION WHEN raise_exception THEN NULL; END; END LOOP; END $$`)
	seen.set(50000 + 30000 + 180)
	execOn(t, tx, `COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.Contains(t, log.String(), "more than 64 subtransactions")
	require.NoError(t, r.halt(t))
	stop()
	require.Equal(t, 2, strings.Count(log.String(), reread))
	require.Equal(t, change.Counts{Inserted: 35000 + 30000 + 20000 + 30000 + 30000 + 180, Updated: 10000 + 10, Deleted: 0},
		b.rep.totals()["public.big"], "each change applied once, none of those rolled back")
	// Decoding a transaction again up to the position it restarts from,
	// the source spills what it cannot stream yet: no bound on that here.
	t.Logf("slot: %+v", readSlotStats(t, b.src, b.cfg.SlotName))
}

// TestDeclinedStagedFromStart: while the run declines early apply (a table
// is being copied on its own), a large streamed transaction is staged from
// its first change, not handed over early and then read again from the
// source.
func TestDeclinedStagedFromStart(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.big (id int PRIMARY KEY, v text); CREATE TABLE public.copied (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "big"), same("public", "copied"))
	streamSmall(t, b)
	b.cfg.StageMemory = 64 << 10
	b.cfg.SkipTables = []change.TableName{{Schema: "public", Name: "copied"}}
	var log lockedBuffer
	b.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO big SELECT g, 'big' FROM generate_series(1, 30000) g`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	require.NotContains(t, log.String(), "reading it again", "the declined transaction was handed over early")
	require.Contains(t, log.String(), "handing it over", "the transaction was not streamed and staged")
	require.Equal(t, change.Counts{Inserted: 30000}, b.rep.totals()["public.big"])
}

// TestStreamedPreparedTransactions: two-phase commit on a streaming source
// (PREPARE TRANSACTION, then COMMIT PREPARED or ROLLBACK PREPARED, as
// transaction managers do). pgmirror's slot does not decode at PREPARE,
// so a prepared transaction reaches the destination at its COMMIT
// PREPARED, as one transaction, and not at all after ROLLBACK PREPARED.
// While one waits prepared (its changes streamed and applied early,
// uncommitted), transactions committed after it are applied, and a
// restart of the run in between loses and doubles nothing.
func TestStreamedPreparedTransactions(t *testing.T) {
	t.Parallel()
	src := pgtest.NewClusterWith(t, true, map[string]string{"max_prepared_transactions": "4"})
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, v text)`
	b := setupOn(t, src, pgtest.DestCluster(t), ddl, ddl, same("public", "items"))
	streamSmall(t, b)
	seen := newVisibleCounts()
	stop := watchCounts(t, b.dst, `SELECT count(*) FROM items`, seen)
	r := b.start(t)
	count := func() int64 {
		var n int64
		conn, err := pgx.Connect(context.Background(), b.dst)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n))
		return n
	}
	streamed := func(before int64) {
		require.Eventually(t, func() bool { return readSlotStats(t, b.src, b.cfg.SlotName).streamBytes > before },
			30*time.Second, 20*time.Millisecond, "the source never streamed")
	}

	// Prepared, then a small transaction committed: the small one is
	// applied while the prepared one waits, and nothing of that one shows.
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO items SELECT g, 'prepared' FROM generate_series(1, 20000) g; PREPARE TRANSACTION 'pgmirror_p1'`)
	streamed(0)
	seen.add(1)
	pgtest.Exec(t, b.src, `INSERT INTO items VALUES (100001, 'small')`)
	require.Eventually(t, func() bool { return count() == 1 }, 30*time.Second, 20*time.Millisecond,
		"the transaction committed after the prepared one was not applied")
	seen.add(20000)
	pgtest.Exec(t, b.src, `COMMIT PREPARED 'pgmirror_p1'`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)

	// Prepared and rolled back: nothing reaches the destination.
	before := readSlotStats(t, b.src, b.cfg.SlotName).streamBytes
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO items SELECT g, 'rolled back' FROM generate_series(200001, 220000) g; PREPARE TRANSACTION 'pgmirror_p2'`)
	streamed(before)
	pgtest.Exec(t, b.src, `ROLLBACK PREPARED 'pgmirror_p2'`)
	seen.add(1)
	pgtest.Exec(t, b.src, `INSERT INTO items VALUES (100002, 'small after the rollback')`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)

	st := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", st)
	require.Zero(t, st.spillBytes, "the source spilled to disk")

	// Prepared, the run restarted, then committed. (The walsender that
	// starts again decodes the prepared transaction from its beginning,
	// before the slot's confirmed position, where it does not stream: that
	// part is spilled on the source, as for its own subscribers.)
	before = st.streamBytes
	pgtest.Exec(t, b.src, `BEGIN; UPDATE items SET v = 'updated' WHERE id <= 10000; INSERT INTO items SELECT g, 'p3' FROM generate_series(300001, 310000) g;
		PREPARE TRANSACTION 'pgmirror_p3'`)
	streamed(before)
	require.NoError(t, r.halt(t))
	r = b.start(t)
	seen.add(10000)
	pgtest.Exec(t, b.src, `COMMIT PREPARED 'pgmirror_p3'`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	require.NoError(t, r.halt(t))
	stop()
	require.Equal(t, change.Counts{Inserted: 1 + 20000 + 1 + 10000, Updated: 10000}, b.rep.totals()["public.items"], "each change applied once")
	// The prepared transaction applied while it streamed is reported as
	// such, in a batch of its own; the small ones are not.
	var early []int64
	for _, batch := range b.rep.all() {
		if batch.Streamed {
			early = append(early, batch.Changes)
		} else {
			require.NotEqual(t, int64(20000), batch.Changes, "the streamed transaction was not reported as streamed")
		}
	}
	require.Contains(t, early, int64(20000))
	require.NotContains(t, early, int64(1))
}

// TestStreamedPartitioned: a streamed transaction on a partitioned table
// published through its root, with rows inserted into two partitions,
// updates that move rows from one partition to the other (the source sends
// them as a delete and an insert on the root) and deletes, reaches the
// destination's single table exactly and whole.
func TestStreamedPartitioned(t *testing.T) {
	t.Parallel()
	b := setup(t, partitionedEventsSource, partitionedEventsDest, same("public", "events"))
	streamSmall(t, b)
	seen := newVisibleCounts()
	stop := watchCounts(t, b.dst, `SELECT count(*) FROM events`, seen)
	r := b.start(t)
	seen.add(20000)
	pgtest.Exec(t, b.src, `INSERT INTO events SELECT g, date '2024-01-01' + g % 700, 'p' || g FROM generate_series(1, 20000) g`)
	b.waitEqual(t, r, `SELECT * FROM events`, `SELECT * FROM events`)
	seen.add(-(20000 / 11))
	pgtest.Exec(t, b.src, `BEGIN;
		UPDATE events SET payload = 'moved', day = day + 200 WHERE id % 7 = 0 AND day < '2024-10-01';
		UPDATE events SET payload = 'stayed' WHERE id % 5 = 0;
		DELETE FROM events WHERE id % 11 = 0;
		COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM events`, `SELECT * FROM events`)
	require.NoError(t, r.halt(t))
	stop()
	st := readSlotStats(t, b.src, b.cfg.SlotName)
	t.Logf("slot: %+v", st)
	require.Positive(t, st.streamTxns, "the source streamed")
	require.Zero(t, st.spillBytes, "the source spilled to disk")
}
