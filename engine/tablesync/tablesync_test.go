package tablesync

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const testSchema = `
CREATE TABLE public.big (id bigint PRIMARY KEY, pad text);
INSERT INTO public.big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 60000) g;
ANALYZE public.big;
CREATE TABLE public.parted (id int, k int, v text, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
CREATE TABLE public.parted_a PARTITION OF public.parted FOR VALUES IN (1);
CREATE TABLE public.parted_b PARTITION OF public.parted FOR VALUES IN (2);
INSERT INTO public.parted SELECT g, 1 + g % 2, 'v' || g FROM generate_series(1, 5000) g;
CREATE TABLE public.empty (id int PRIMARY KEY, v text);
CREATE TABLE public.small (id int PRIMARY KEY, v numeric, d date);
INSERT INTO public.small SELECT g, g / 7.0, date '2020-01-31' + g FROM generate_series(1, 100) g;`

const testDestSchema = `
CREATE TABLE public.big (id bigint PRIMARY KEY, pad text);
CREATE TABLE public.parted (id int, k int, v text, PRIMARY KEY (id, k));
CREATE TABLE public.empty (id int PRIMARY KEY, v text);
-- a different type: copied in text format
CREATE TABLE public.small (id bigint PRIMARY KEY, v text, d date);
INSERT INTO public.small VALUES (-1, 'stale');`

func testMappings(names ...string) []change.Mapping {
	var ms []change.Mapping
	for _, n := range names {
		t := change.TableName{Schema: "public", Name: n}
		ms = append(ms, change.Mapping{Source: t, Destination: t})
	}
	return ms
}

type countingReporter struct {
	mu         sync.Mutex
	partitions map[string]int
	rows       map[string]int64
	done       map[string][]int // partitions reported done, in order
}

func (c *countingReporter) TableStarted(_ context.Context, t change.Mapping, total int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partitions[t.Source.Name] = total
	return nil
}

func (c *countingReporter) PartitionDone(_ context.Context, t change.Mapping, n, total int, _ int64, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if total != c.partitions[t.Source.Name] {
		return fmt.Errorf("partition %d of %d, but the table started with %d", n, total, c.partitions[t.Source.Name])
	}
	c.done[t.Source.Name] = append(c.done[t.Source.Name], n)
	return nil
}

func (c *countingReporter) TableDone(_ context.Context, t change.Mapping, rows int64, _ time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows[t.Source.Name] = rows
	return nil
}

// TestRun copies a plain table in several partitions (with one writer and,
// with a lowered size threshold, with several), a partitioned table, an
// empty table and a table with other column types, from a snapshot exported
// by an open transaction: rows written after the export are not copied, and
// rows on the destination before the run are gone.
func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name     string
		borrow   bool
		parallel bool
	}{
		{"own connections", false, false},
		{"borrowed connections", true, false},
		{"parallel writers", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantWriters := "writers=1"
			if tc.parallel {
				oldBytes, oldCPU := bytesPerWriter, numCPU
				bytesPerWriter, numCPU = 1<<20, func() int { return 64 }
				t.Cleanup(func() { bytesPerWriter, numCPU = oldBytes, oldCPU })
				wantWriters = "writers=3"
			}
			log := testRun(t, tc.borrow)
			if !regexp.MustCompile(`msg="snapshot planned" table=public.big .*` + wantWriters).MatchString(log) {
				t.Errorf("big was not planned with %s:\n%s", wantWriters, log)
			}
		})
	}
}

func testRun(t *testing.T, borrow bool) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, srcURL, testSchema)
	pgtest.Exec(t, dstURL, testDestSchema)

	exporter := connect(t, srcURL)
	tx, err := exporter.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	var snapshot string
	if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&snapshot); err != nil {
		t.Fatal(err)
	}
	pgtest.Exec(t, srcURL, `INSERT INTO public.big VALUES (1000000, 'after the snapshot');
		DELETE FROM public.small WHERE id = 1`)

	var log syncBuffer
	cfg := Config{
		Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL), SnapshotName: snapshot,
		Tables:           testMappings("big", "parted", "empty", "small"),
		RowsPerPartition: 5000, MaxParallelWorkers: 3, TablesInParallel: 2,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(testWriter{t}, &log), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if borrow {
		// Session settings of the caller's that would break a text COPY:
		// each partition's transaction overrides them, and they survive.
		cfg.SourceConn, cfg.DestConn = connect(t, srcURL), connect(t, dstURL)
		for _, c := range []*pgx.Conn{cfg.SourceConn, cfg.DestConn} {
			if _, err := c.Exec(ctx, `SET DateStyle = 'SQL, DMY'`); err != nil {
				t.Fatal(err)
			}
		}
	}
	var before string
	if borrow {
		before = settings(t, cfg.SourceConn, cfg.DestConn)
	}
	rep := &countingReporter{partitions: map[string]int{}, rows: map[string]int64{}, done: map[string][]int{}}
	if err := Run(ctx, cfg, rep); err != nil {
		t.Fatal(err)
	}
	if borrow {
		for _, c := range []*pgx.Conn{cfg.SourceConn, cfg.DestConn} {
			if c.IsClosed() || c.PgConn().TxStatus() != 'I' {
				t.Errorf("a borrowed connection is closed or in a transaction after Run")
			}
		}
		if after := settings(t, cfg.SourceConn, cfg.DestConn); after != before {
			t.Errorf("borrowed connections' settings after Run:\n%s\nwant those before:\n%s", after, before)
		}
	}

	// big: about 52 rows per page, 1150 pages: 5 partitions of 256 pages.
	if n := rep.partitions["big"]; n < 4 || n > 6 {
		t.Errorf("big was copied in %d partitions, want 4-6 (2 MiB each)", n)
	}
	for table, total := range rep.partitions {
		want := make([]int, total)
		for i := range want {
			want[i] = i + 1
		}
		if !slices.Equal(slices.Sorted(slices.Values(rep.done[table])), want) {
			t.Errorf("%s: partitions %v reported done, want each of 1-%d once", table, rep.done[table], total)
		}
	}
	want := map[string]int64{"big": 60000, "parted": 5000, "empty": 0, "small": 100}
	for table, n := range want {
		if rep.rows[table] != n {
			t.Errorf("reported %d rows of %s, want %d", rep.rows[table], table, n)
		}
	}
	dst := connect(t, dstURL)
	for _, q := range []struct {
		sql  string
		want int64
	}{
		{`SELECT count(*) FROM public.big`, 60000},
		{`SELECT count(*) FROM public.big WHERE pad = repeat(md5(id::text), 3)`, 60000},
		{`SELECT count(*) FROM public.parted`, 5000},
		{`SELECT count(*) FROM public.empty`, 0},
		{`SELECT count(*) FROM public.small WHERE v::numeric = id / 7.0 AND d = date '2020-01-31' + id::int`, 100},
	} {
		var n int64
		if err := dst.QueryRow(ctx, q.sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != q.want {
			t.Errorf("%s = %d, want %d", q.sql, n, q.want)
		}
	}
	return log.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// settings returns the session settings that Run sets, on each of conns,
// and whether they are in a transaction.
func settings(t *testing.T, conns ...*pgx.Conn) string {
	t.Helper()
	var out string
	for _, c := range conns {
		var s string
		err := c.QueryRow(context.Background(), `SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings
			WHERE name IN ('DateStyle', 'IntervalStyle', 'extra_float_digits', 'bytea_output', 'statement_timeout',
				'idle_in_transaction_session_timeout', 'synchronous_commit', 'session_replication_role')`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("%s tx=%c\n", s, c.PgConn().TxStatus())
	}
	return out
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}

// TestRunBorrowedSettings copies a table in text format over borrowed
// connections whose DateStyle would garble dates: each partition's
// transaction sets tablesync's settings, and the connections keep theirs.
func TestRunBorrowedSettings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, srcURL, `CREATE TABLE public.d (id int PRIMARY KEY, d date, ts timestamptz);
		INSERT INTO public.d SELECT g, date '2020-01-31' + g, timestamptz '2020-01-31 12:00+00' + g * interval '1 day' FROM generate_series(1, 100) g`)
	pgtest.Exec(t, dstURL, `CREATE TABLE public.d (id bigint PRIMARY KEY, d date, ts timestamptz)`)
	src, dst := connect(t, srcURL), connect(t, dstURL)
	if _, err := src.Exec(ctx, `SET DateStyle = 'SQL, DMY'; SET TimeZone = 'Asia/Tokyo'`); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Exec(ctx, `SET DateStyle = 'SQL, MDY'`); err != nil {
		t.Fatal(err)
	}
	before := settings(t, src, dst)
	err := Run(ctx, Config{Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL), Tables: testMappings("d"),
		MaxParallelWorkers: 1, SourceConn: src, DestConn: dst}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if after := settings(t, src, dst); after != before {
		t.Errorf("borrowed connections' settings after Run:\n%s\nwant those before:\n%s", after, before)
	}
	var n int64
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.d
		WHERE d = date '2020-01-31' + id::int AND ts = timestamptz '2020-01-31 12:00+00' + id * interval '1 day'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 100 {
		t.Errorf("%d of 100 rows arrived intact", n)
	}
}
