package verify_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/verify"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var nameSeq atomic.Int64

type bundle struct {
	src, dst string
	cfg      cdc.Config
	hold     *verify.Local
	maps     []change.Mapping
}

func tn(s, n string) change.TableName { return change.TableName{Schema: s, Name: n} }

// setup creates source and destination databases with ddl, a publication
// and slot for maps, and starts a CDC run with a Local hold.
func setup(t *testing.T, srcDDL, dstDDL string, maps ...change.Mapping) *bundle {
	t.Helper()
	return setupOn(t, pgtest.NewDatabase(t, pgtest.SourceCluster(t)), pgtest.NewDatabase(t, pgtest.DestCluster(t)), srcDDL, dstDDL, maps...)
}

// setupOn is setup on the given databases.
func setupOn(t *testing.T, src, dst, srcDDL, dstDDL string, maps ...change.Mapping) *bundle {
	t.Helper()
	pgtest.Exec(t, src, srcDDL)
	pgtest.Exec(t, dst, dstDDL)
	n := nameSeq.Add(1)
	slot := fmt.Sprintf("verify_test_%d_%d", os.Getpid(), n)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tables []change.TableName
	for _, m := range maps {
		tables = append(tables, m.Source)
	}
	_, err = capture.EnsurePublication(ctx, conn, slot+"_pub", tables)
	require.NoError(t, err)
	repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, src).Config)
	require.NoError(t, err)
	_, err = capture.CreateSlot(ctx, repl, slot, false)
	require.NoError(t, err)
	require.NoError(t, repl.Close(ctx))
	// A logical slot's creation waits for every transaction open in the
	// shared source cluster; on a loaded machine that takes longer than
	// the product's default wait, so the run waits longer here.
	b := &bundle{src: src, dst: dst, hold: &verify.Local{Wait: 15 * time.Second}, maps: maps}
	b.cfg = cdc.Config{
		MirrorUID: fmt.Sprintf("mirror-%d", n), Source: pgtest.ConnConfig(t, src), Dest: pgtest.ConnConfig(t, dst),
		SlotName: slot, PublicationName: slot + "_pub", Tables: maps,
		BatchSize: 1000, SyncInterval: time.Second, HeartbeatTimeout: 30 * time.Second, StatusInterval: time.Second,
		Holder: b.hold, Logger: slog.New(slog.DiscardHandler),
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cdc.Run(runCtx, b.cfg, nil, runCtx.Done()) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return b
}

// verifyOnce obtains snapshots at one position and compares every table.
func (b *bundle) verifyOnce(t *testing.T, opts ...func(verify.Config) verify.Config) ([]verify.TableResult, *verify.Snapshots) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var tables []change.TableName
	for _, m := range b.maps {
		tables = append(tables, m.Source)
	}
	// Like the verification job, a hold that timed out is tried again.
	var snaps *verify.Snapshots
	var err error
	for attempt := 1; ; attempt++ {
		snaps, err = verify.OpenSnapshots(ctx, verify.SnapshotConfig{
			Source: b.cfg.Source, Dest: b.cfg.Dest, MirrorUID: b.cfg.MirrorUID,
			SlotName: fmt.Sprintf("pgmirror_verify_t%d", nameSeq.Add(1)), Note: "test", Tables: tables,
		}, b.hold)
		if !errors.Is(err, verify.ErrHoldTimeout) || attempt == 3 {
			break
		}
	}
	require.NoError(t, err)
	defer snaps.Close()
	compare, skipped := snaps.Comparable(b.maps)
	require.Empty(t, skipped)
	cfg := verify.Config{
		Source: b.cfg.Source, Dest: b.cfg.Dest, SourceSnapshot: snaps.Source, DestSnapshot: snaps.Dest,
		Tables: compare, ChunkRows: 500, LeafRows: 50, Workers: 2,
	}
	for _, o := range opts {
		cfg = o(cfg)
	}
	res, err := verify.Compare(ctx, cfg, nil)
	require.NoError(t, err)
	return res, snaps
}

// loop runs step(conn, i) for i = 0, 1, ... on a connection to url until
// ctx ends or step fails, in a goroutine counted in wg.
func loop(ctx context.Context, t *testing.T, wg *sync.WaitGroup, url string, step func(conn *pgx.Conn, i int) error) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		for i := 0; ctx.Err() == nil; i++ {
			if err := step(conn, i); err != nil {
				t.Error(err)
				return
			}
		}
	}()
}

// opener obtains snapshots at new positions for RepairChunks.
func (b *bundle) opener() verify.Opener {
	var tables []change.TableName
	for _, m := range b.maps {
		tables = append(tables, m.Source)
	}
	return func(ctx context.Context, chunk int, whileHeld func(context.Context, *verify.Snapshots) error) (*verify.Snapshots, error) {
		return verify.OpenSnapshots(ctx, verify.SnapshotConfig{
			Source: b.cfg.Source, Dest: b.cfg.Dest, MirrorUID: b.cfg.MirrorUID,
			SlotName: fmt.Sprintf("pgmirror_verify_t%d", nameSeq.Add(1)), Note: "repair", Tables: tables, WhileHeld: whileHeld,
		}, b.hold)
	}
}

// waitApplied waits until the destination table has n rows.
func waitRows(t *testing.T, url, table string, n int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var got int64
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&got))
		if got == n {
			return
		}
	}
	t.Fatalf("%s has %d rows, want %d", table, got, n)
}

// Under a steady write load (inserts, updates, deletes in many small
// transactions, on a keyed table and on one without a key), every
// verification finds the two sides equal: no false positive.
func TestEqualUnderWriteLoad(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int PRIMARY KEY, v int, s text, at timestamptz DEFAULT now(), f float8);
		CREATE TABLE public.nk (a int, b text);
		ALTER TABLE public.nk REPLICA IDENTITY FULL;`
	b := setup(t, ddl, ddl, change.Mapping{Source: tn("public", "k"), Destination: tn("public", "k")},
		change.Mapping{Source: tn("public", "nk"), Destination: tn("public", "nk")})
	pgtest.Exec(t, b.src, `INSERT INTO k SELECT g, g, md5(g::text), now(), g / 7.0 FROM generate_series(1, 3000) g;
		INSERT INTO nk SELECT g % 100, 'x' FROM generate_series(1, 500) g`)
	waitRows(t, b.dst, "k", 3000)

	ctx, stop := context.WithCancel(context.Background())
	var load sync.WaitGroup
	var writes atomic.Int64
	loop(ctx, t, &load, b.src, func(conn *pgx.Conn, i int) error {
		id := 3001 + i
		_, err := conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO k VALUES (%[1]d, %[1]d, 'n', now(), 0.1);
			UPDATE k SET v = v + 1, f = f * 1.1 WHERE id = %[2]d;
			DELETE FROM k WHERE id = %[3]d;
			INSERT INTO nk VALUES (%[1]d %% 50, 'y')`, id, i%3000+1, id-50))
		writes.Add(1)
		return err
	})
	for range 8 {
		res, snaps := b.verifyOnce(t)
		for _, r := range res {
			require.True(t, r.Equal(), "false difference at %s: %+v", snaps.LSN, r)
			require.Positive(t, r.RowsSource)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	load.Wait()
	require.Positive(t, writes.Load())
}

// Direct changes on the destination are reported exactly, with their keys
// (keyed table) or rows (table without a key).
func TestDifferencesReported(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int, region text, v int, PRIMARY KEY (region, id));
		CREATE TABLE public.nk (a int, b text);
		CREATE TABLE public.ok (id int PRIMARY KEY, v int)`
	dstDDL := `CREATE TABLE public.k (id int, region text, v int, PRIMARY KEY (region, id));
		CREATE TABLE public.nk (a int, b text);
		CREATE TABLE public.renamed (id int PRIMARY KEY, v int, secret text)`
	srcDDL := ddl + `; ALTER TABLE public.ok ADD COLUMN secret text`
	b := setup(t, srcDDL, dstDDL,
		change.Mapping{Source: tn("public", "k"), Destination: tn("public", "k")},
		change.Mapping{Source: tn("public", "nk"), Destination: tn("public", "nk")},
		change.Mapping{Source: tn("public", "ok"), Destination: tn("public", "renamed"), ExcludeColumns: []string{"secret"}})
	pgtest.Exec(t, b.src, `INSERT INTO k SELECT g, 'r' || (g % 3), g FROM generate_series(1, 5000) g;
		INSERT INTO nk SELECT g, 'x' || g FROM generate_series(1, 300) g;
		INSERT INTO ok SELECT g, g, 'hidden' FROM generate_series(1, 100) g`)
	waitRows(t, b.dst, "k", 5000)
	waitRows(t, b.dst, "nk", 300)
	waitRows(t, b.dst, "renamed", 100)
	res, _ := b.verifyOnce(t)
	for _, r := range res {
		require.True(t, r.Equal(), "%+v", r)
	}
	// The excluded column differs on purpose: it is not compared.
	pgtest.Exec(t, b.dst, `UPDATE renamed SET secret = 'other'`)
	pgtest.Exec(t, b.dst, `UPDATE k SET v = -1 WHERE id = 100; DELETE FROM k WHERE id = 2000; INSERT INTO k VALUES (99999, 'r0', 1);
		DELETE FROM nk WHERE a = 7; INSERT INTO nk VALUES (1, 'x1'), (-5, 'extra')`)
	res, _ = b.verifyOnce(t)
	byTable := map[string]verify.TableResult{}
	for _, r := range res {
		byTable[r.Table] = r
	}
	// The portable row hash (md5, for databases that compute
	// hashtextextended differently) finds the same differences.
	portable, _ := b.verifyOnce(t, verify.PortableHash)
	require.Len(t, portable, len(res))
	for i, r := range portable {
		require.Equal(t, res[i].RowsDiffering, r.RowsDiffering, r.Table)
		if r.Method == verify.MethodKeyRanges { // buckets depend on the hash
			require.Equal(t, res[i].ChunksDiffering, r.ChunksDiffering, r.Table)
		}
		require.ElementsMatch(t, res[i].Missing, r.Missing, r.Table)
		require.ElementsMatch(t, res[i].Extra, r.Extra, r.Table)
		require.ElementsMatch(t, res[i].Different, r.Different, r.Table)
	}
	k := byTable["public.k"]
	require.Equal(t, verify.MethodKeyRanges, k.Method)
	require.Equal(t, int64(5000), k.RowsSource)
	require.Equal(t, int64(5000), k.RowsDestination)
	require.Equal(t, int64(3), k.RowsDiffering)
	require.Equal(t, []string{"(region, id)=('r2', '2000')"}, k.Missing)
	require.Equal(t, []string{"(region, id)=('r0', '99999')"}, k.Extra)
	require.Equal(t, []string{"(region, id)=('r1', '100')"}, k.Different)
	require.LessOrEqual(t, k.ChunksDiffering, 3)
	require.Positive(t, k.ChunksDiffering)

	nk := byTable["public.nk"]
	require.Equal(t, verify.MethodMultiset, nk.Method)
	require.Equal(t, int64(300), nk.RowsSource)
	require.Equal(t, int64(301), nk.RowsDestination)
	require.Equal(t, int64(3), nk.RowsDiffering)
	require.Equal(t, []string{"(7,x7)"}, nk.Missing)
	require.ElementsMatch(t, []string{"(1,x1)", "(-5,extra)"}, nk.Extra)

	require.True(t, byTable["public.ok"].Equal(), "%+v", byTable["public.ok"])
	require.Equal(t, "public.renamed", byTable["public.ok"].Destination)
}

// Repair copies the differing key ranges again at one held position, and a
// verification afterwards finds the table equal, while CDC keeps applying.
func TestRepair(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int PRIMARY KEY, v text, n numeric)`
	b := setup(t, ddl, ddl, change.Mapping{Source: tn("public", "k"), Destination: tn("public", "k")})
	pgtest.Exec(t, b.src, `INSERT INTO k SELECT g, 'v' || g, g / 3.0 FROM generate_series(1, 4000) g`)
	waitRows(t, b.dst, "k", 4000)
	pgtest.Exec(t, b.dst, `UPDATE k SET v = 'bad', n = NULL WHERE id IN (5, 3000); DELETE FROM k WHERE id BETWEEN 100 AND 120;
		INSERT INTO k VALUES (-7, 'extra', 1)`)
	res, _ := b.verifyOnce(t)
	require.Len(t, res, 1)
	require.Equal(t, int64(24), res[0].RowsDiffering)
	require.NotNil(t, res[0].RepairRanges)
	require.NotEmpty(t, res[0].RepairRanges.Ranges)
	// Changes keep coming while the repair runs, also to repaired rows.
	pgtest.Exec(t, b.src, `UPDATE k SET v = 'later' WHERE id = 5`)
	// A slot on the destination sees the repair's writes, marked with an
	// origin of the mirror (a reverse mirror leaves them out).
	slot := fmt.Sprintf("verify_repair_%d", nameSeq.Add(1))
	pgtest.Exec(t, b.dst, `SELECT pg_create_logical_replication_slot('`+slot+`', 'test_decoding')`)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), b.dst)
		if err == nil {
			_ = origin.DropMirror(context.Background(), conn, b.cfg.MirrorUID)
			conn.Close(context.Background())
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The first chunk's peer does not answer (a refused connection, as a
	// loaded server's timeout would be): the chunk is tried again.
	_, refused := pgconn.Connect(ctx, "postgres://postgres@127.0.0.1:1/none?connect_timeout=2")
	require.Error(t, refused)
	opener, calls := b.opener(), 0
	flaky := func(ctx context.Context, chunk int, whileHeld func(context.Context, *verify.Snapshots) error) (*verify.Snapshots, error) {
		if calls++; calls == 1 {
			return nil, fmt.Errorf("connect to the source: %w", refused)
		}
		return opener(ctx, chunk, whileHeld)
	}
	rep, _, err := verify.RepairChunks(ctx, verify.RepairConfig{Source: b.cfg.Source, Dest: b.cfg.Dest, MirrorUID: b.cfg.MirrorUID,
		// A budget no loaded machine reaches: 24 rows are one chunk.
		Tables: []verify.TableRepair{{Mapping: b.maps[0], Ranges: *res[0].RepairRanges}}, MarkWrites: true, Budget: 30 * time.Second}, flaky)
	require.NoError(t, err)
	require.Equal(t, 2, calls, "the chunk was tried again after its peer did not answer")
	require.GreaterOrEqual(t, rep.Written, int64(23))
	require.Equal(t, 1, rep.Chunks)
	dst, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dst.Close(context.Background())
	// The slot decodes flushed WAL only: wait for the repair's one
	// transaction to be there, then none of its deletes may be local.
	var all, local int
	require.Eventually(t, func() bool {
		return dst.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL) WHERE data LIKE 'table public.k: DELETE%'`, slot).Scan(&all) == nil && all > 0
	}, 20*time.Second, 100*time.Millisecond, "the repair deleted the differing ranges")
	require.NoError(t, dst.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'only-local', '1') WHERE data LIKE 'table public.k: DELETE%'`, slot).Scan(&local))
	require.Zero(t, local, "the repair's deletes carry no origin")
	pgtest.Exec(t, b.src, `UPDATE k SET v = 'after' WHERE id = 3000`)
	res, _ = b.verifyOnce(t)
	require.True(t, res[0].Equal(), "%+v", res[0])
	waitRows(t, b.dst, "k WHERE v IN ('later', 'after')", 2)
}

// A repair of many differing rows under a write load is written in chunks,
// each at a position of its own: the mirror's run is never held for longer
// than its hold bound (the lag of a steady stream of source writes stays
// small), and the data is exact afterwards.
func TestRepairBounded(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int PRIMARY KEY, v text, pad text);
		CREATE TABLE public.tick (id int PRIMARY KEY, at timestamptz)`
	b := setup(t, ddl, ddl, change.Mapping{Source: tn("public", "k"), Destination: tn("public", "k")},
		change.Mapping{Source: tn("public", "tick"), Destination: tn("public", "tick")})
	const rows = 20000
	pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO k SELECT g, 'v' || g, repeat('p', 400) FROM generate_series(1, %d) g`, rows))
	waitRows(t, b.dst, "k", rows)
	pgtest.Exec(t, b.dst, `UPDATE k SET v = 'bad' WHERE id % 3 = 0`)
	res, _ := b.verifyOnce(t, func(c verify.Config) verify.Config { c.ChunkRows, c.LeafRows = 3200, 200; return c })
	require.Equal(t, int64(rows/3), res[0].RowsDiffering)
	require.NotNil(t, res[0].RepairRanges)
	require.False(t, res[0].RepairRanges.Incomplete)

	// The load: a tick a source transaction every 20 ms, and updates of the
	// rows being repaired.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var committed sync.Map // tick id -> time.Time of its commit
	var load sync.WaitGroup
	var ticks atomic.Int64
	loop(ctx, t, &load, b.src, func(conn *pgx.Conn, i int) error {
		_, err := conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO tick VALUES (%[1]d, now());
			UPDATE k SET v = 'later' || %[1]d WHERE id = %[1]d * 7 %% %[2]d + 1`, i+1, rows))
		committed.Store(i+1, time.Now())
		ticks.Store(int64(i + 1))
		time.Sleep(20 * time.Millisecond)
		return err
	})
	var maxLag atomic.Int64
	loop(ctx, t, &load, b.dst, func(conn *pgx.Conn, _ int) error {
		var seen int
		if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM tick`).Scan(&seen); err != nil {
			return err
		}
		if at, ok := committed.Load(seen + 1); ok {
			if lag := time.Since(at.(time.Time)); int64(lag) > maxLag.Load() {
				maxLag.Store(int64(lag))
			}
		}
		time.Sleep(20 * time.Millisecond)
		return nil
	})
	// The stream's own lag under this load (a loaded machine has some) is
	// measured first, over 3 s (over 1 s it missed the spikes of a loaded
	// CI machine: 0.38 s, then 2.53 s during a 42 s repair): the repair
	// may add at most the hold bound to it.
	time.Sleep(3 * time.Second)
	streamLag := time.Duration(maxLag.Swap(0))

	rctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	started := time.Now()
	rep, _, err := verify.RepairChunks(rctx, verify.RepairConfig{Source: b.cfg.Source, Dest: b.cfg.Dest, MirrorUID: b.cfg.MirrorUID,
		Tables: []verify.TableRepair{{Mapping: b.maps[0], Ranges: *res[0].RepairRanges}}, Budget: 300 * time.Millisecond}, b.opener())
	require.NoError(t, err)
	took := time.Since(started)
	t.Logf("repaired %d rows in %d ranges, %d chunks, %s; longest lag %s (%s before the repair)", rep.Written, rep.Ranges, rep.Chunks,
		took.Round(time.Millisecond), time.Duration(maxLag.Load()).Round(time.Millisecond), streamLag.Round(time.Millisecond))
	require.Equal(t, len(res[0].RepairRanges.Ranges), rep.Ranges)
	require.Greater(t, rep.Chunks, 1, "the repair was cut into chunks")
	time.Sleep(500 * time.Millisecond)
	stop()
	load.Wait()
	// Held at most about the budget per chunk, plus the statement that
	// passed it and the catch-up after the hold: 2 s above the stream's own
	// lag on a quiet machine. On a loaded one (a repair of 27 s in 14 chunks
	// instead of 1.6 s in 3) every chunk takes longer: a quarter of the
	// repair is the bound there, which one hold for the whole repair would
	// still exceed fourfold.
	bound := streamLag + max(2*time.Second, took/4)
	require.Less(t, time.Duration(maxLag.Load()), bound, "the mirror was held longer than the hold bound")
	require.Positive(t, ticks.Load())

	waitRows(t, b.dst, "tick", ticks.Load())
	res, _ = b.verifyOnce(t)
	for _, r := range res {
		require.True(t, r.Equal(), "%+v", r)
	}
}

// alterDatabase sets a default of the current database in sql (run there).
func alterDatabase(settings map[string]string) string {
	var sql strings.Builder
	for k, v := range settings {
		fmt.Fprintf(&sql, "DO $$ BEGIN EXECUTE format('ALTER DATABASE %%I SET %s = %%L', current_database(), '%s'); END $$;\n", k, v)
	}
	return sql.String()
}

// Databases whose defaults print values differently, and floating-point
// values whose text differs between major versions (the destination's
// comparison prints floats with extra_float_digits 0, as PostgreSQL 11 and
// earlier do by default: 15 significant digits), give no false difference;
// a float that differs only beyond 15 digits is still found.
func TestCanonicalForms(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.v (id int PRIMARY KEY, f8 float8, f4 float4, a8 float8[], a4 real[], m money, tz timestamptz,
			ts timestamp, d date, tm time, ttz timetz, iv interval, b bytea, n numeric, j jsonb);
		CREATE TABLE public.nk (f8 float8, tz timestamptz, a8 float8[]);
		ALTER TABLE public.nk REPLICA IDENTITY FULL;`
	srcDDL := alterDatabase(map[string]string{"TimeZone": "Asia/Kolkata", "DateStyle": "German", "IntervalStyle": "iso_8601",
		"extra_float_digits": "-5", "bytea_output": "escape"}) + ddl
	dstDDL := alterDatabase(map[string]string{"TimeZone": "Pacific/Chatham", "DateStyle": "SQL, DMY", "IntervalStyle": "sql_standard",
		"extra_float_digits": "0", "bytea_output": "escape"}) + ddl
	b := setup(t, srcDDL, dstDDL, change.Mapping{Source: tn("public", "v"), Destination: tn("public", "v")},
		change.Mapping{Source: tn("public", "nk"), Destination: tn("public", "nk")})
	pgtest.Exec(t, b.src, `INSERT INTO v VALUES
		(1, 0.1::float8 + 0.2, 0.1, '{0.1,NULL,1e-300}', '{{1.5,2.25},{NaN,-0}}', 1234.56, '2024-02-29 23:59:59.123456+05:30',
		 '2024-02-29 23:59:59.5', '0044-03-15 BC', '12:34:56.789', '12:34:56+02', '1 year 2 mons -3 days 04:05:06.7', '\x00ff5c27', 12.3400, '{"a": [1, 2.50]}'),
		(2, 'NaN', 'NaN', '{}', NULL, -0.01, 'infinity', '-infinity', 'infinity', '24:00', '00:00-14', '-1 day +1 microsecond', '', 'NaN', 'null'),
		(3, 'Infinity'::float8 - 'Infinity'::float8, '-Infinity', '{NaN,Infinity}', '{3.4028235e38}', 0, '1999-12-31 23:00:00Z', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(4, '-0', 1.17549435e-38, NULL, '{}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(5, 2.2250738585072014e-308, 3.14159274, '{5e-324}', '{1e-45}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
		INSERT INTO nk VALUES (0.1::float8 + 0.2, '2024-01-01 00:00:00+01', '{0.3,NaN}'), ('NaN', NULL, NULL), (NULL, NULL, '{}')`)
	waitRows(t, b.dst, "v", 5)
	waitRows(t, b.dst, "nk", 3)
	asPG11 := func(c verify.Config) verify.Config {
		return verify.DestSettings(c, map[string]string{"extra_float_digits": "0"})
	}
	for _, opts := range [][]func(verify.Config) verify.Config{nil, {asPG11}, {asPG11, verify.PortableHash}} {
		res, _ := b.verifyOnce(t, opts...)
		for _, r := range res {
			require.True(t, r.Equal(), "false difference: %+v", r)
			require.Positive(t, r.RowsSource)
		}
	}
	// A float that differs only in its last bits, equal in 15 digits.
	pgtest.Exec(t, b.dst, `UPDATE v SET f8 = 0.3 WHERE id = 1; UPDATE nk SET f8 = 0.3 WHERE f8 BETWEEN 0.29 AND 0.31`)
	res, _ := b.verifyOnce(t, asPG11)
	require.Equal(t, []string{"(id)=('1')"}, res[0].Different)
	require.Equal(t, int64(2), res[1].RowsDiffering, "%+v", res[1])
}

// A destination in another encoding (LATIN1, the source UTF8) gives no
// false difference on text beyond ASCII, in values and in keys, and a
// change there is still found.
func TestEncodings(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.k (id int PRIMARY KEY, s text);
		CREATE TABLE public.tk (name text PRIMARY KEY, n int);
		CREATE TABLE public.nk (s text)`
	dst := pgtest.NewDatabaseWith(t, pgtest.DestCluster(t), "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	b := setupOn(t, pgtest.NewDatabase(t, pgtest.SourceCluster(t)), dst, ddl+"; ALTER TABLE public.nk REPLICA IDENTITY FULL", ddl,
		change.Mapping{Source: tn("public", "k"), Destination: tn("public", "k")},
		change.Mapping{Source: tn("public", "tk"), Destination: tn("public", "tk")},
		change.Mapping{Source: tn("public", "nk"), Destination: tn("public", "nk")})
	pgtest.Exec(t, b.src, `INSERT INTO k SELECT g, 'café ' || g || ' Ångström ß ÿ' FROM generate_series(1, 2000) g;
		INSERT INTO tk SELECT chr(192 + g % 64) || 'é' || g, g FROM generate_series(1, 2000) g;
		INSERT INTO nk SELECT 'naïve ' || g FROM generate_series(1, 300) g`)
	waitRows(t, b.dst, "k", 2000)
	waitRows(t, b.dst, "tk", 2000)
	waitRows(t, b.dst, "nk", 300)
	res, _ := b.verifyOnce(t)
	for _, r := range res {
		require.True(t, r.Equal(), "false difference: %+v", r)
	}
	pgtest.Exec(t, b.dst+"&client_encoding=UTF8", `UPDATE k SET s = 'cafe' WHERE id = 7; UPDATE tk SET n = -1 WHERE name = 'Ñé17'`)
	res, _ = b.verifyOnce(t)
	require.Equal(t, []string{"(id)=('7')"}, res[0].Different)
	require.Equal(t, []string{"(name)=('Ñé17')"}, res[1].Different)
	require.True(t, res[2].Equal(), "%+v", res[2])
}
