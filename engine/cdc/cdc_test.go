package cdc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var nameSeq atomic.Int64

// recorder is a Reporter (and LagReporter) that keeps every batch and lag
// sample.
type recorder struct {
	mu      sync.Mutex
	batches []cdc.Batch
	lags    []lagSample
}

type lagSample struct {
	lag           time.Duration
	appliedCommit time.Time
}

func (r *recorder) Lag(lag time.Duration, appliedCommit time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = append(r.lags, lagSample{lag, appliedCommit})
}

func (r *recorder) lastLag() (lagSample, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.lags) == 0 {
		return lagSample{}, false
	}
	return r.lags[len(r.lags)-1], true
}

func (r *recorder) BatchApplied(_ context.Context, b cdc.Batch) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
	return nil
}

// totals sums the per-table counts of all batches.
// (key: the source table's schema.table).
func (r *recorder) totals() map[string]change.Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]change.Counts{}
	for _, b := range r.batches {
		for table, c := range b.Tables {
			t := table.String()
			o := out[t]
			o.Inserted += c.Inserted
			o.Updated += c.Updated
			o.Deleted += c.Deleted
			out[t] = o
		}
	}
	return out
}

// all returns the batches reported so far.
func (r *recorder) all() []cdc.Batch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.batches)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.batches)
}

type testBundle struct {
	src, dst string
	cfg      cdc.Config
	rep      *recorder
}

// setup creates a source and a destination database, runs srcDDL on the
// source and dstDDL on the destination, and creates the publication and
// slot for mappings.
func setup(t testing.TB, srcDDL, dstDDL string, mappings ...change.Mapping) *testBundle {
	t.Helper()
	return setupOn(t, pgtest.SourceCluster(t), pgtest.DestCluster(t), srcDDL, dstDDL, mappings...)
}

// newSlot creates a publication of the mappings' tables (their destination
// tables with onDest) and a logical slot on the database at url, named
// for a new bundle: it returns the bundle's number and the two names.
func newSlot(t testing.TB, url string, mappings []change.Mapping, onDest bool) (n int64, slot, pub string) {
	t.Helper()
	n = nameSeq.Add(1)
	slot = fmt.Sprintf("cdc_test_%d_%d", os.Getpid(), n)
	pub = slot + "_pub"
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables []change.TableName
	for _, m := range mappings {
		if onDest {
			tables = append(tables, m.Destination)
		} else {
			tables = append(tables, m.Source)
		}
	}
	_, err = capture.EnsurePublication(ctx, conn, pub, tables)
	require.NoError(t, err)
	repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, url).Config)
	require.NoError(t, err)
	_, err = capture.CreateSlot(ctx, repl, slot, false)
	require.NoError(t, err)
	require.NoError(t, repl.Close(ctx))
	return n, slot, pub
}

// setupOn is setup with the source and destination databases on the given
// clusters.
func setupOn(t testing.TB, srcCluster, dstCluster *localpg.Cluster, srcDDL, dstDDL string, mappings ...change.Mapping) *testBundle {
	t.Helper()
	src := pgtest.NewDatabase(t, srcCluster)
	dst := pgtest.NewDatabase(t, dstCluster)
	pgtest.Exec(t, src, srcDDL)
	pgtest.Exec(t, dst, dstDDL)
	n, slot, pub := newSlot(t, src, mappings, false)
	return &testBundle{
		src: src, dst: dst, rep: &recorder{},
		cfg: cdc.Config{
			MirrorUID: fmt.Sprintf("mirror-%d", n), Source: pgtest.ConnConfig(t, src), Dest: pgtest.ConnConfig(t, dst),
			SlotName: slot, PublicationName: pub, Tables: mappings,
			BatchSize: 1000, SyncInterval: time.Second, HeartbeatTimeout: 30 * time.Second,
			StatusInterval: time.Second,
			Logger:         slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: testLogLevel})),
		},
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// running is a Run in a goroutine.
type running struct {
	stop    chan struct{}
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

func (b *testBundle) start(t *testing.T) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stop: make(chan struct{}), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- cdc.Run(ctx, b.cfg, b.rep, r.stop) }()
	t.Cleanup(func() {
		if !r.stopped {
			r.cancel()
			<-r.done
		}
	})
	return r
}

// halt closes stop and returns Run's result.
func (r *running) halt(t *testing.T) error {
	t.Helper()
	close(r.stop)
	r.stopped = true
	select {
	case err := <-r.done:
		r.cancel()
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after stop")
		return nil
	}
}

// fingerprint returns the row count and an md5 over the ordered rows of
// query's result.
func fingerprint(t *testing.T, conn *pgx.Conn, query string) (int64, string) {
	t.Helper()
	var n int64
	var sum string
	err := conn.QueryRow(context.Background(),
		`SELECT count(*), coalesce(md5(string_agg(r::text, '|' ORDER BY r::text)), '') FROM (`+query+`) r`).Scan(&n, &sum)
	require.NoError(t, err)
	return n, sum
}

// waitEqual waits until srcQuery on the source and dstQuery on the
// destination return the same rows, and fails the test if they never do.
func (b *testBundle) waitEqual(t *testing.T, r *running, srcQuery, dstQuery string) {
	t.Helper()
	ctx := context.Background()
	sc, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	wantN, want := fingerprint(t, sc, srcQuery)
	deadline := time.Now().Add(90 * time.Second)
	var gotN int64
	var got string
	for time.Now().Before(deadline) {
		gotN, got = fingerprint(t, dc, dstQuery)
		if got == want && gotN == wantN {
			return
		}
		if r != nil {
			select {
			case err := <-r.done:
				r.stopped = true
				t.Fatalf("Run ended early: %v", err)
			default:
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("destination never matched the source: source %d rows, destination %d rows\nsource: %s\ndest:   %s",
		wantN, gotN, dump(t, sc, srcQuery), dump(t, dc, dstQuery))
}

func dump(t *testing.T, conn *pgx.Conn, query string) string {
	var s string
	err := conn.QueryRow(context.Background(), `SELECT left(coalesce(string_agg(r::text, ' | ' ORDER BY r::text), ''), 2000) FROM (`+query+`) r`).Scan(&s)
	if err != nil {
		return err.Error()
	}
	return s
}

func tn(schema, name string) change.TableName { return change.TableName{Schema: schema, Name: name} }

func same(schema, name string) change.Mapping {
	return change.Mapping{Source: tn(schema, name), Destination: tn(schema, name)}
}

func TestInsertUpdateDelete(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, name text, qty int)`
	b := setup(t, ddl, ddl, same("public", "items"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 500) g`)
	pgtest.Exec(t, b.src, `UPDATE items SET qty = qty * 10 WHERE id % 3 = 0`)
	pgtest.Exec(t, b.src, `DELETE FROM items WHERE id % 5 = 0`)
	// Several changes to one row in one transaction collapse but all count.
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO items VALUES (1000, 'x', 1); UPDATE items SET qty = 2 WHERE id = 1000;
		UPDATE items SET qty = 3 WHERE id = 1000; DELETE FROM items WHERE id = 1000; INSERT INTO items VALUES (1000, 'y', 4); COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	require.NoError(t, r.halt(t))

	require.Equal(t, change.Counts{Inserted: 502, Updated: 168, Deleted: 101}, b.rep.totals()["public.items"])
	// The applied position is recorded with the last batch.
	dc, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer dc.Close(context.Background())
	var lsn string
	var batchID int64
	require.NoError(t, dc.QueryRow(context.Background(), `SELECT lsn::text, batch_id FROM _pgmirror.applied WHERE mirror_uid = $1`, b.cfg.MirrorUID).Scan(&lsn, &batchID))
	last := b.rep.batches[len(b.rep.batches)-1]
	require.Equal(t, last.LSN.String(), lsn)
	require.Equal(t, last.ID, batchID)
	require.Equal(t, int64(len(b.rep.batches)), batchID)
}

func TestTruncate(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.a (id int PRIMARY KEY, v text); CREATE TABLE public.b (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "a"), same("public", "b"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO a SELECT g, 'a' FROM generate_series(1, 100) g; INSERT INTO b SELECT g, 'b' FROM generate_series(1, 100) g`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)
	// Rows inserted before the TRUNCATE in the same transaction go, rows after it stay.
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO a VALUES (101, 'gone'); TRUNCATE a; INSERT INTO a VALUES (7, 'kept'); COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)
	b.waitEqual(t, r, `SELECT * FROM b`, `SELECT * FROM b`)
	require.NoError(t, r.halt(t))
}

// partitionedEventsSource is a source table partitioned by range in two
// partitions, and partitionedEventsDest the destination's plain table.
const (
	partitionedEventsSource = `CREATE TABLE public.events (id int, day date, payload text, PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
		CREATE TABLE public.events_2024 PARTITION OF public.events FOR VALUES FROM ('2024-01-01') TO ('2025-01-01');
		CREATE TABLE public.events_2025 PARTITION OF public.events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`
	partitionedEventsDest = `CREATE TABLE public.events (id int, day date, payload text, PRIMARY KEY (id, day))`
)

func TestPartitionedThroughRoot(t *testing.T) {
	t.Parallel()
	b := setup(t, partitionedEventsSource, partitionedEventsDest, same("public", "events"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO events SELECT g, date '2024-06-01' + g, 'p' || g FROM generate_series(1, 400) g`)
	pgtest.Exec(t, b.src, `UPDATE events SET payload = 'moved', day = day + 150 WHERE id % 7 = 0`) // crosses partitions
	pgtest.Exec(t, b.src, `DELETE FROM events WHERE id % 11 = 0`)
	b.waitEqual(t, r, `SELECT * FROM events`, `SELECT * FROM events`)
	require.NoError(t, r.halt(t))
	require.Contains(t, b.rep.totals(), "public.events")
}

func TestExcludeColumns(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.users (id int PRIMARY KEY, email text, secret text, note text)`,
		`CREATE TABLE public.users (id int PRIMARY KEY, email text, note text)`,
		change.Mapping{Source: tn("public", "users"), Destination: tn("public", "users"), ExcludeColumns: []string{"secret"}})
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO users SELECT g, g || '@x', 'pw' || g, 'n' FROM generate_series(1, 50) g`)
	pgtest.Exec(t, b.src, `UPDATE users SET secret = 'changed' WHERE id < 10; UPDATE users SET note = 'm' WHERE id > 40; DELETE FROM users WHERE id = 25`)
	b.waitEqual(t, r, `SELECT id, email, note FROM users`, `SELECT id, email, note FROM users`)
	require.NoError(t, r.halt(t))
}

func TestUnchangedToast(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.docs (id int PRIMARY KEY, title text, body text)`
	b := setup(t, ddl, ddl, same("public", "docs"))
	// Large incompressible values are stored out of line (TOAST).
	big := `(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200))`
	pgtest.Exec(t, b.src, `INSERT INTO docs SELECT g, 't', `+big+` FROM generate_series(1, 20) g`)
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM docs`, `SELECT * FROM docs`)
	// Update another column: the source sends the body as unchanged.
	pgtest.Exec(t, b.src, `UPDATE docs SET title = 'new title' WHERE id <= 10`)
	b.waitEqual(t, r, `SELECT * FROM docs`, `SELECT * FROM docs`)
	// Insert and update of one row in one batch keep the inserted value.
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO docs VALUES (100, 'a', `+big+`); UPDATE docs SET title = 'b' WHERE id = 100; UPDATE docs SET title = 'c' WHERE id = 1; UPDATE docs SET title = 'd' WHERE id = 1; COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM docs`, `SELECT * FROM docs`)
	// A key change of a row with a TOASTed value keeps the value.
	pgtest.Exec(t, b.src, `UPDATE docs SET id = 200 WHERE id = 2`)
	pgtest.Exec(t, b.src, `BEGIN; UPDATE docs SET title = 'e' WHERE id = 3; UPDATE docs SET id = 300 WHERE id = 3; COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM docs`, `SELECT * FROM docs`)
	require.NoError(t, r.halt(t))
}

func TestNoPrimaryKeyReplicaIdentityFull(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.log (a int, b text, j json, p point)`
	b := setup(t, ddl+`; ALTER TABLE public.log REPLICA IDENTITY FULL`, ddl, same("public", "log"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO log VALUES (1, 'dup', '{"k": [1, 2]}', '(1,2)'), (1, 'dup', '{"k": [1, 2]}', '(1,2)'), (2, 'x', NULL, NULL), (3, NULL, '{}', '(0,0)')`)
	b.waitEqual(t, r, `SELECT * FROM log`, `SELECT * FROM log`)
	// Deleting one of two identical rows leaves one.
	pgtest.Exec(t, b.src, `DELETE FROM log WHERE ctid = (SELECT ctid FROM log WHERE a = 1 LIMIT 1)`)
	pgtest.Exec(t, b.src, `UPDATE log SET b = 'y' WHERE a = 2; UPDATE log SET a = 4 WHERE b IS NULL`)
	b.waitEqual(t, r, `SELECT a, b, j::text, p::text FROM log`, `SELECT a, b, j::text, p::text FROM log`)
	require.NoError(t, r.halt(t))
}

func TestPrimaryKeyChange(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "k"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO k SELECT g, 'v' || g FROM generate_series(1, 10) g`)
	pgtest.Exec(t, b.src, `UPDATE k SET id = id + 100 WHERE id <= 5`)
	// A swap through a free key, and a key reused after a move, in one transaction.
	pgtest.Exec(t, b.src, `BEGIN; UPDATE k SET id = 1000 WHERE id = 6; UPDATE k SET id = 6 WHERE id = 7; UPDATE k SET id = 7 WHERE id = 1000; UPDATE k SET id = 1 WHERE id = 8; COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM k`, `SELECT * FROM k`)
	require.NoError(t, r.halt(t))
}

func TestQuotedIdentifiers(t *testing.T) {
	t.Parallel()
	ddl := `CREATE SCHEMA "Mixed Schema"; CREATE TABLE "Mixed Schema"."Weird""Table" ("Id" int PRIMARY KEY, "Col ""X""" text, "select" int)`
	b := setup(t, ddl, ddl, same("Mixed Schema", `Weird"Table`))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO "Mixed Schema"."Weird""Table" SELECT g, 'x' || g, g FROM generate_series(1, 30) g`)
	pgtest.Exec(t, b.src, `UPDATE "Mixed Schema"."Weird""Table" SET "Col ""X""" = 'tab	and
newline \ backslash' WHERE "Id" < 5; DELETE FROM "Mixed Schema"."Weird""Table" WHERE "Id" > 25`)
	q := `SELECT * FROM "Mixed Schema"."Weird""Table"`
	b.waitEqual(t, r, q, q)
	require.NoError(t, r.halt(t))
	require.Contains(t, b.rep.totals(), `Mixed Schema.Weird"Table`)
}

func TestManyTypes(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TYPE public.mood AS ENUM ('sad', 'ok', 'happy');
		CREATE TABLE public.typed (id uuid PRIMARY KEY, n numeric(20,5), j jsonb, b bytea, ia int[], ta text[],
			m public.mood, ts timestamptz, d date, iv interval, ip inet, f float8, bo boolean, c char(3), ti time)`
	b := setup(t, ddl, ddl, same("public", "typed"))
	// The destination session uses another time zone: values still match.
	pgtest.Exec(t, b.dst, `ALTER DATABASE `+pgx.Identifier{dbName(b.dst)}.Sanitize()+` SET timezone = 'Asia/Tokyo'`)
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO typed VALUES
		('00000000-0000-0000-0000-000000000001', 12345.6789, '{"a": [1, {"b": null}]}', '\x00ff10', '{1,2,NULL}', '{"a b","c,d",NULL,"\"q\""}',
		 'happy', '2024-02-29 23:59:59.123456+05:30', '2024-01-01', '1 year 2 mons 3 days 04:05:06.5', '10.1.2.0/24', 0.1, true, 'ab', '12:34:56'),
		('00000000-0000-0000-0000-000000000002', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		('00000000-0000-0000-0000-000000000003', -0.00001, '[]', '\x', '{}', '{}', 'sad', '-infinity', 'infinity', '-1 days', '::1', 'NaN', false, '', '00:00')`)
	pgtest.Exec(t, b.src, `UPDATE typed SET n = n * 2, j = j || '{"x": 1}', m = 'ok' WHERE id = '00000000-0000-0000-0000-000000000001'`)
	q := `SELECT id, n, j, b, ia, ta, m::text, ts AT TIME ZONE 'UTC', d, iv, ip, f, bo, c, ti FROM typed`
	b.waitEqual(t, r, q, q)
	require.NoError(t, r.halt(t))
}

func dbName(url string) string {
	s := url[strings.LastIndex(url, "/")+1:]
	if i := strings.Index(s, "?"); i >= 0 {
		s = s[:i]
	}
	return s
}

func TestRestartExactlyOnce(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.pk (id int PRIMARY KEY, v int); CREATE TABLE public.nopk (id int, v int)`
	b := setup(t, ddl+`; ALTER TABLE public.nopk REPLICA IDENTITY FULL`, ddl, same("public", "pk"), same("public", "nopk"))
	b.cfg.BatchSize = 50
	for round := range 4 {
		r := b.start(t)
		for i := range 20 {
			pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO pk VALUES (%d, %d); INSERT INTO nopk VALUES (%d, 1), (%d, 1)`,
				round*100+i, i, round, round))
		}
		pgtest.Exec(t, b.src, fmt.Sprintf(`UPDATE pk SET v = v + 1 WHERE id %% 2 = %d`, round%2))
		if round%2 == 0 {
			// Stop in the middle of the stream and write more while stopped.
			time.Sleep(time.Duration(round*50) * time.Millisecond)
			require.NoError(t, r.halt(t))
			pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO nopk SELECT %d, g FROM generate_series(1, 100) g`, 10+round))
			continue
		}
		b.waitEqual(t, r, `SELECT * FROM pk`, `SELECT * FROM pk`)
		require.NoError(t, r.halt(t))
	}
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM pk`, `SELECT * FROM pk`)
	b.waitEqual(t, r, `SELECT * FROM nopk`, `SELECT * FROM nopk`)
	require.NoError(t, r.halt(t))
	// Batch ids continue across runs.
	for i, batch := range b.rep.batches {
		require.Equal(t, int64(i+1), batch.ID)
	}
}

func TestIdleSourceAdvancesSlot(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer conn.Close(ctx)
	before, err := capture.SlotState(ctx, conn, b.cfg.SlotName)
	require.NoError(t, err)
	// Write in another database of the same cluster: WAL grows, nothing of
	// ours is in it.
	other := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, other, `CREATE TABLE x (v text); INSERT INTO x SELECT repeat('x', 100) FROM generate_series(1, 10000)`)
	var walNow string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walNow))
	now, err := change.ParseLSN(walNow)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := capture.SlotState(ctx, conn, b.cfg.SlotName)
		return err == nil && st.ConfirmedFlush >= now
	}, 60*time.Second, 200*time.Millisecond, "confirmed_flush_lsn stayed at %s (WAL at %s)", before.ConfirmedFlush, now)
	require.NoError(t, r.halt(t))
}

func TestStopIsPrompt(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	started := time.Now()
	require.NoError(t, r.halt(t))
	require.Less(t, time.Since(started), 2*time.Second, "Run took too long to stop")
}

func TestContextCancelReturnsCtxErr(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	r.cancel()
	r.stopped = true
	require.ErrorIs(t, <-r.done, context.Canceled)
}

func TestMissingSlotIsTyped(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	b.cfg.SlotName = "no_such_slot_here"
	err := cdc.Run(context.Background(), b.cfg, b.rep, make(chan struct{}))
	require.ErrorIs(t, err, cdc.ErrSlotMissing)
}

func TestConnectionRefusedIsTyped(t *testing.T) {
	t.Parallel()
	refused := pgtest.ConnConfig(t, "postgres://u:secretpw@127.0.0.1:1/x?sslmode=disable")
	cfg := cdc.Config{MirrorUID: "m", Source: refused, Dest: refused, SlotName: "s", PublicationName: "p"}
	err := cdc.Run(context.Background(), cfg, &recorder{}, make(chan struct{}))
	require.ErrorIs(t, err, cdc.ErrConnect)
	require.NotContains(t, err.Error(), "secretpw")
}

// TestMillionRowTransaction applies one source transaction of a million
// rows and checks that memory stays bounded while it does.
func TestMillionRowTransaction(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("slow: one million rows, and a heap bound the race detector's overhead would break")
	}
	// Not parallel: the heap measurement must see this test alone.
	ddl := `CREATE TABLE public.big (id bigint PRIMARY KEY, v text, n int); CREATE TABLE public.bignopk (id bigint, v text)`
	b := setup(t, ddl+`; ALTER TABLE public.bignopk REPLICA IDENTITY FULL`, ddl, same("public", "big"), same("public", "bignopk"))
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO big SELECT g, md5(g::text), g FROM generate_series(1, 1000000) g;
		INSERT INTO bignopk SELECT g, md5(g::text) FROM generate_series(1, 100000) g; COMMIT`)

	peak := watchHeap(t)
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	b.waitEqual(t, r, `SELECT * FROM bignopk`, `SELECT * FROM bignopk`)
	t.Logf("peak heap: %d MB live, %d MB in use", peak.live.Load()>>20, peak.inUse.Load()>>20)
	require.Less(t, peak.inUse.Load(), uint64(200<<20), "heap grew with the transaction")
	// The whole transaction is one batch: never half of it on the destination.
	require.Equal(t, 1, b.rep.count())
	require.Equal(t, change.Counts{Inserted: 1000000}, b.rep.totals()["public.big"])

	// A million-row UPDATE while the run streams: the source streams it as
	// it runs and the run applies it early, behind a destination that
	// writes slower than the source sends. What waits for the destination
	// stays within the stream's budget of decoded changes.
	runtime.GC()
	peak.reset()
	pgtest.Exec(t, b.src, `UPDATE big SET n = n + 1, v = md5(v)`)
	b.waitEqual(t, r, `SELECT * FROM big`, `SELECT * FROM big`)
	require.NoError(t, r.halt(t))
	t.Logf("peak heap through the streamed UPDATE: %d MB live, %d MB in use", peak.live.Load()>>20, peak.inUse.Load()>>20)
	require.Less(t, peak.inUse.Load(), uint64(200<<20), "heap through the streamed UPDATE")
	require.Equal(t, change.Counts{Inserted: 1000000, Updated: 1000000}, b.rep.totals()["public.big"])
}

// TestSkipsTransactionsAlreadyApplied simulates a crash between the
// destination commit and the confirmation to the source: the source re-sends
// transactions that the destination already holds, and they are skipped.
func TestSkipsTransactionsAlreadyApplied(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.nopk (id int, v text)`
	b := setup(t, ddl+`; ALTER TABLE public.nopk REPLICA IDENTITY FULL`, ddl, same("public", "nopk"))
	ctx := context.Background()
	// Three transactions; the destination already has the first two, as if
	// a previous run applied them and died before confirming.
	pgtest.Exec(t, b.src, `INSERT INTO nopk VALUES (1, 'a'), (1, 'a')`)
	pgtest.Exec(t, b.src, `INSERT INTO nopk VALUES (2, 'b')`)
	sc, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	var pos string
	require.NoError(t, sc.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&pos))
	pgtest.Exec(t, b.src, `INSERT INTO nopk VALUES (3, 'c'); DELETE FROM nopk WHERE id = 2`)
	pgtest.Exec(t, b.dst, `INSERT INTO nopk VALUES (1, 'a'), (1, 'a'), (2, 'b')`)
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	lsn, err := change.ParseLSN(pos)
	require.NoError(t, err)
	require.NoError(t, positions.Ensure(ctx, dc))
	require.NoError(t, positions.SnapshotTaken(ctx, dc, b.cfg.MirrorUID, lsn, 7))

	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM nopk`, `SELECT * FROM nopk`)
	require.NoError(t, r.halt(t))
	require.Equal(t, change.Counts{Inserted: 1, Deleted: 1}, b.rep.totals()["public.nopk"])
	require.Equal(t, int64(8), b.rep.batches[0].ID)
}

// TestStopInsideLargeTransaction stops Run while a large transaction is
// being applied: nothing of it may be visible, and the next run applies it
// exactly once.
func TestStopInsideLargeTransaction(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.nopk (id int, v text)`
	b := setup(t, ddl+`; ALTER TABLE public.nopk REPLICA IDENTITY FULL`, ddl, same("public", "nopk"))
	b.cfg.ChunkSize = 500
	pgtest.Exec(t, b.src, `INSERT INTO nopk SELECT g % 10, 'dup' FROM generate_series(1, 100000) g`)
	r := b.start(t)
	dc, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer dc.Close(context.Background())
	// Wait until the big transaction is being written into an open
	// destination transaction, then stop.
	require.Eventually(t, func() bool {
		var busy bool
		err := dc.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE a.datname = current_database() AND a.application_name = 'pgmirror' AND l.locktype = 'relation'
			AND l.relation = 'public.nopk'::regclass AND l.mode = 'RowExclusiveLock')`).Scan(&busy)
		return err == nil && busy
	}, 30*time.Second, 2*time.Millisecond)
	require.NoError(t, r.halt(t))
	var n int
	require.NoError(t, dc.QueryRow(context.Background(), `SELECT count(*) FROM nopk`).Scan(&n))
	require.True(t, n == 0 || n == 100000, "half a transaction is visible: %d rows", n)
	r = b.start(t)
	b.waitEqual(t, r, `SELECT * FROM nopk`, `SELECT * FROM nopk`)
	require.NoError(t, r.halt(t))
}

// TestHeartbeatTimeout freezes the walsender: the stream goes silent and
// Run ends with ErrHeartbeatTimeout.
func TestHeartbeatTimeout(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	b.cfg.HeartbeatTimeout = 3 * time.Second
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	ctx := context.Background()
	sc, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	var pid int
	require.NoError(t, sc.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, b.cfg.SlotName).Scan(&pid))
	proc, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.NoError(t, proc.Signal(syscall.SIGSTOP))
	defer proc.Signal(syscall.SIGCONT)
	select {
	case err := <-r.done:
		r.stopped = true
		require.ErrorIs(t, err, cdc.ErrHeartbeatTimeout)
	case <-time.After(30 * time.Second):
		t.Fatal("no heartbeat timeout")
	}
}

// TestAddedColumn: a column added on the source reaches the destination
// once the destination has it; until then Run stops with ErrMissingColumn
// and nothing is lost.
func TestAddedColumn(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY, a text)`
	b := setup(t, ddl, ddl, same("public", "t"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1, 'a')`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)

	// Destination first (as a schema sync would), then the source: no error.
	pgtest.Exec(t, b.dst, `ALTER TABLE t ADD COLUMN b int`)
	pgtest.Exec(t, b.src, `ALTER TABLE t ADD COLUMN b int; INSERT INTO t VALUES (2, 'b', 2); UPDATE t SET b = 1 WHERE id = 1`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)

	// Source only: Run stops with a typed error.
	pgtest.Exec(t, b.src, `ALTER TABLE t ADD COLUMN c text; INSERT INTO t VALUES (3, 'c', 3, 'c')`)
	select {
	case err := <-r.done:
		r.stopped = true
		require.ErrorIs(t, err, cdc.ErrMissingColumn)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail on the missing column")
	}
	pgtest.Exec(t, b.dst, `ALTER TABLE t ADD COLUMN c text`)
	r = b.start(t)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	// A dropped source column is no longer written.
	pgtest.Exec(t, b.src, `ALTER TABLE t DROP COLUMN a; INSERT INTO t VALUES (4, 4, 'd')`)
	b.waitEqual(t, r, `SELECT id, b, c FROM t`, `SELECT id, b, c FROM t`)
	require.NoError(t, r.halt(t))
}

// TestLargeValuesBounded applies one transaction of 250 values of 1 MB
// each: the bytes buffered between stream, applier and destination stay
// bounded, so the heap does not grow with the transaction.
func TestLargeValuesBounded(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("slow: 250 MB of values, and a heap bound the race detector's overhead would break")
	}
	// Not parallel: the heap measurement must see this test alone.
	ddl := `CREATE TABLE public.blobs (id int PRIMARY KEY, body text)`
	b := setup(t, ddl, ddl, same("public", "blobs"))
	b.cfg.MaxBufferedBytes = 8 << 20
	pgtest.Exec(t, b.src, `ALTER TABLE blobs ALTER body SET STORAGE EXTERNAL;
		INSERT INTO blobs SELECT g, (SELECT string_agg(md5(random()::text || i), '') FROM generate_series(1, 32768) i WHERE o.g > 0) FROM generate_series(1, 250) o(g)`)
	runtime.GC() // what earlier tests left does not count
	peak := watchHeap(t)
	r := b.start(t)
	b.waitEqual(t, r, `SELECT id, md5(body) FROM blobs`, `SELECT id, md5(body) FROM blobs`)
	require.NoError(t, r.halt(t))
	t.Logf("peak heap: %d MB live, %d MB in use", peak.live.Load()>>20, peak.inUse.Load()>>20)
	// Each value is copied a few times on its way (decoded, encoded for
	// the destination), and the garbage collector lets the heap grow to
	// about twice what it keeps: 48 MB live and 92 MB in use measured
	// alone. Held whole, the transaction alone would be 250 MB; decoded
	// changes that kept each other's values alive (a shared block of
	// values) made it 132 MB live, 278 MB in use.
	require.Less(t, peak.live.Load(), uint64(96<<20), "heap grew with the transaction")
	require.Less(t, peak.inUse.Load(), uint64(160<<20), "heap grew with the transaction")
}

// heapPeaks are the peaks watchHeap saw: the live heap (what the last
// garbage collection kept) and the heap in use (live plus garbage not yet
// collected, about twice the live heap at the default GOGC).
type heapPeaks struct {
	live, inUse atomic.Uint64
}

// reset forgets the peaks seen so far.
func (p *heapPeaks) reset() {
	p.live.Store(0)
	p.inUse.Store(0)
}

// watchHeap samples the heap until the test ends and keeps its peaks.
func watchHeap(t *testing.T) *heapPeaks {
	var p heapPeaks
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		var ms runtime.MemStats
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			runtime.ReadMemStats(&ms)
			metrics.Read(sample)
			if ms.HeapInuse > p.inUse.Load() {
				p.inUse.Store(ms.HeapInuse)
			}
			if live := sample[0].Value.Uint64(); live > p.live.Load() {
				p.live.Store(live)
			}
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return &p
}

var testLogLevel = slog.LevelWarn

// TestConfirmedPromptly: once a batch's commit is flushed on the
// destination, the slot is confirmed at once, not at the next standby status
// interval (set to a minute here).
func TestConfirmedPromptly(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "t"))
	b.cfg.StatusInterval = time.Minute
	r := b.start(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer conn.Close(ctx)
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	for round := range 3 {
		_, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1, 'x')`, round)
		require.NoError(t, err)
		b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
		applied := time.Now()
		// The end of the transaction just applied (not the source's WAL
		// end: other tests write to the same cluster, and WAL that holds
		// nothing for this slot is only confirmed at status intervals).
		wal, _, _, err := positions.Applied(ctx, dc, b.cfg.MirrorUID)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			st, err := capture.SlotState(ctx, conn, b.cfg.SlotName)
			return err == nil && st.ConfirmedFlush >= wal
		}, 5*time.Second, 10*time.Millisecond, "round %d: the slot was not confirmed to %s within 5 s of the destination commit", round, wal)
		t.Logf("round %d: slot confirmed %s after the row was visible on the destination", round, time.Since(applied).Round(time.Millisecond))
	}
	require.NoError(t, r.halt(t))
}

// TestBacklogGathered: a backlog of small source transactions, applied
// while batches gather for more transactions, ends exactly equal, and a lone
// transaction on a caught-up mirror is still applied at once. How many
// batches the backlog takes depends on how fast the source sends it, so it
// is only logged; the gathering decision itself is TestCloseBatch's.
func TestBacklogGathered(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "t"))
	// ~8 MiB of WAL in single-row transactions: well past catchUpBehind.
	const txs = 8000
	conn, err := pgx.Connect(context.Background(), b.src)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	for i := range txs {
		_, err := conn.Exec(context.Background(), `INSERT INTO t VALUES ($1::int, repeat(md5($1::int::text), 30))`, i)
		require.NoError(t, err)
	}
	require.EqualValues(t, txs, queryCount(t, conn, `SELECT count(*) FROM t`))

	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	n := b.rep.count()
	t.Logf("%d single-row transactions applied in %d batches", txs, n)
	// A catch-up gathers: batches last at least catchUpWindow while the
	// source's WAL ends far ahead (a batch per transaction was the case
	// when the stream's own "WAL end" was taken for the source's).
	require.LessOrEqual(t, n, txs/10, "a backlog of small transactions was applied in too many batches")

	// Caught up: a lone transaction is applied without waiting.
	start := time.Now()
	_, err = conn.Exec(context.Background(), `INSERT INTO t VALUES (-1, 'lone')`)
	require.NoError(t, err)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	t.Logf("a lone transaction was applied %s after its commit", time.Since(start).Round(time.Millisecond))
	require.Greater(t, b.rep.count(), n, "the lone transaction was not applied in a batch of its own")
	require.NoError(t, r.halt(t))
}

func queryCount(t *testing.T, conn *pgx.Conn, sql string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, conn.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// TestLagAndHeartbeats: heartbeats written on the source come back through
// the slot, so an idle mirror's applied commit time keeps moving and its
// lag stays near 0; without heartbeats it stands at the last transaction.
func TestLagAndHeartbeats(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "t"))
	b.cfg.HeartbeatInterval = 300 * time.Millisecond
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (1)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	insertedAt := time.Now()

	// Idle: the applied commit time moves past the insert (heartbeats),
	// and the lag reported stays small.
	require.Eventually(t, func() bool {
		s, ok := b.rep.lastLag()
		return ok && s.appliedCommit.After(insertedAt.Add(500*time.Millisecond))
	}, 15*time.Second, 100*time.Millisecond, "no heartbeat came back through the slot")
	s, _ := b.rep.lastLag()
	require.Less(t, s.lag, 1500*time.Millisecond, "an idle mirror with heartbeats reports %s of lag", s.lag)
	require.NoError(t, r.halt(t))

	// Without heartbeats an idle mirror's applied commit time stands still.
	b.cfg.HeartbeatInterval = -1
	b.rep = &recorder{}
	r = b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO t VALUES (2)`)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	require.Eventually(t, func() bool { _, ok := b.rep.lastLag(); return ok }, 10*time.Second, 100*time.Millisecond)
	first, _ := b.rep.lastLag()
	time.Sleep(1500 * time.Millisecond)
	last, _ := b.rep.lastLag()
	require.Equal(t, first.appliedCommit, last.appliedCommit, "applied commit time moved without heartbeats")
	require.Zero(t, last.lag)
	require.NoError(t, r.halt(t))
}

// TestOtherUniqueConstraints: a destination table with unique constraints
// besides its primary key (here a UNIQUE column and an exclusion
// constraint, as a schema restored with pg_dump has them) takes values that
// move between rows within one batch: swaps through a temporary value, a
// value taken over from a deleted row, hundreds of swaps in one
// transaction. Applying the final state of each key would meet a row that
// still holds the value; the rows must arrive as on the source.
func TestOtherUniqueConstraints(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.acct (id int PRIMARY KEY, email text NOT NULL UNIQUE, slot int4range,
		note text, body text, EXCLUDE USING gist (slot WITH &&))`
	b := setup(t, ddl, ddl, same("public", "acct"))
	big := `(SELECT string_agg(md5(random()::text), '') FROM generate_series(1, 200))`
	// Written before the run starts, so that they arrive as a backlog and
	// fill batches.
	pgtest.Exec(t, b.src, `INSERT INTO acct SELECT g, 'e' || g, int4range(g * 10, g * 10 + 10), 't',
		CASE WHEN g <= 5 THEN `+big+` END FROM generate_series(1, 400) g`)
	pgtest.Exec(t, b.src, `BEGIN; UPDATE acct SET email = 'tmp' WHERE id = 1; UPDATE acct SET email = 'e1' WHERE id = 2;
		UPDATE acct SET email = 'e2' WHERE id = 1; COMMIT`)
	pgtest.Exec(t, b.src, `UPDATE acct SET slot = 'empty' WHERE id = 3`)
	pgtest.Exec(t, b.src, `UPDATE acct SET slot = int4range(30, 40) WHERE id = 4`)
	pgtest.Exec(t, b.src, `UPDATE acct SET slot = int4range(40, 50) WHERE id = 3`)
	pgtest.Exec(t, b.src, `INSERT INTO acct VALUES (1000, 'tmp2', 'empty', 'x')`)
	pgtest.Exec(t, b.src, `DELETE FROM acct WHERE id = 6`)
	pgtest.Exec(t, b.src, `UPDATE acct SET email = 'e6' WHERE id = 1000`)
	// A key change of a row with a TOASTed value, and a swap of a TOASTed
	// row's value (the body arrives unchanged).
	pgtest.Exec(t, b.src, `UPDATE acct SET id = 5000 WHERE id = 5`)
	pgtest.Exec(t, b.src, `BEGIN; UPDATE acct SET email = 'tmp' WHERE id = 4; UPDATE acct SET email = 'e4' WHERE id = 7;
		UPDATE acct SET email = 'e7' WHERE id = 4; COMMIT`)
	pgtest.Exec(t, b.src, `DO $$ BEGIN FOR i IN 0..99 LOOP
		UPDATE acct SET email = 'tmp' WHERE id = 100 + 2 * i;
		UPDATE acct SET email = 'e' || (100 + 2 * i) WHERE id = 101 + 2 * i;
		UPDATE acct SET email = 'e' || (101 + 2 * i) WHERE id = 100 + 2 * i;
	END LOOP; END $$`)
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM acct`, `SELECT * FROM acct`)
	// While streaming: a rotation of three values in one transaction.
	pgtest.Exec(t, b.src, `BEGIN; UPDATE acct SET email = 'tmp' WHERE id = 10; UPDATE acct SET email = 'e10' WHERE id = 11;
		UPDATE acct SET email = 'e11' WHERE id = 12; UPDATE acct SET email = 'e12' WHERE id = 10; COMMIT`)
	b.waitEqual(t, r, `SELECT * FROM acct`, `SELECT * FROM acct`)
	require.NoError(t, r.halt(t))
}

// TestUniqueViolationOnDivergedDestination: a destination row the source
// does not have holds a unique value that the source then uses. Applied in
// order the violation stays, so the run ends with it (once, not in a loop
// of restarts) and applies nothing of the batch.
func TestUniqueViolationOnDivergedDestination(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.acct (id int PRIMARY KEY, email text UNIQUE)`
	b := setup(t, ddl, ddl+`; INSERT INTO public.acct VALUES (999, 'taken')`, same("public", "acct"))
	pgtest.Exec(t, b.src, `BEGIN; INSERT INTO acct SELECT g, 'e' || g FROM generate_series(1, 20) g;
		INSERT INTO acct VALUES (21, 'taken'); COMMIT`)
	r := b.start(t)
	select {
	case err := <-r.done:
		r.stopped = true
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "23505", pgErr.Code)
		var conflict *apply.OrderConflictError
		require.False(t, errors.As(err, &conflict), "a violation in order is returned as it is: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end on a unique violation that order cannot resolve")
	}
	conn, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	n, _ := fingerprint(t, conn, `SELECT * FROM acct`)
	require.EqualValues(t, 1, n, "nothing of the failed batch may stay on the destination")
}

// TestFilledDestinationConverges: a destination filled after the slot was
// created (a mirror started without a snapshot over a copy taken later)
// receives inserts of rows it already has. A chunk of new rows goes by
// COPY straight into the table, which meets them; the batch is applied
// again in order, whose upserts converge.
func TestFilledDestinationConverges(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.f (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "f"))
	pgtest.Exec(t, b.src, `INSERT INTO f SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	pgtest.Exec(t, b.dst, `INSERT INTO f SELECT g, 'v' || g FROM generate_series(1, 60) g`)
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM f`, `SELECT * FROM f`)
	// Later chunks of new rows go by COPY again without a conflict.
	pgtest.Exec(t, b.src, `INSERT INTO f SELECT g, 'w' || g FROM generate_series(101, 200) g`)
	b.waitEqual(t, r, `SELECT * FROM f`, `SELECT * FROM f`)
	require.NoError(t, r.halt(t))
}
