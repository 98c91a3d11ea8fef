//go:build verifyperf

package verify_test

// A measurement, not a test of the suite (build tag verifyperf): it times one
// binary COPY pipe of a table and one Compare of it, on the test clusters.
//
//	go test -tags verifyperf -run TestPerf -v ./engine/verify/ -rows 300000

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/verify"
)

var perfRows = flag.Int("rows", 300000, "rows of the measured table")

const perfDDL = `CREATE TABLE public.bench (id bigint PRIMARY KEY, a integer NOT NULL, b integer NOT NULL, c integer NOT NULL,
  note text NOT NULL, ts timestamptz NOT NULL) WITH (autovacuum_enabled = false)`

func perfFill(t *testing.T, url string, rows int) {
	pgtest.Exec(t, url, perfDDL)
	pgtest.Exec(t, url, fmt.Sprintf(`INSERT INTO public.bench SELECT g, g %% 1000, (g * 7) %% 100000, g %% 13,
       substr(repeat(md5(g::text), 5), 1, 140), timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
       FROM generate_series(1, %d) g`, rows))
	pgtest.Exec(t, url, `VACUUM ANALYZE public.bench`)
}

func exportSnapshot(t *testing.T, ctx context.Context, url string) string {
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`)
	require.NoError(t, err)
	var name string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&name))
	return name
}

func TestPerf(t *testing.T) {
	ctx := context.Background()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	perfFill(t, src, *perfRows)
	perfFill(t, dst, *perfRows)
	pgtest.Exec(t, dst, `CREATE TABLE public.copied (LIKE public.bench INCLUDING ALL)`)
	pgtest.Exec(t, src, `CHECKPOINT`)
	pgtest.Exec(t, dst, `CHECKPOINT`)

	sc, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	dc, err := pgx.Connect(ctx, dst+"&synchronous_commit=off")
	require.NoError(t, err)
	defer dc.Close(ctx)
	t0 := time.Now()
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 64<<10)
		_, err := sc.PgConn().CopyTo(ctx, bw, "COPY public.bench TO STDOUT (FORMAT binary)")
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	_, err = dc.PgConn().CopyFrom(ctx, pr, "COPY public.copied FROM STDIN (FORMAT binary)")
	pr.CloseWithError(errors.New("done"))
	require.NoError(t, err)
	copyDur := time.Since(t0)
	t.Logf("COPY pipe: %d rows in %s", *perfRows, copyDur.Round(time.Millisecond))

	for _, workers := range []int{1, 2, 4} {
		ss, ds := exportSnapshot(t, ctx, src), exportSnapshot(t, ctx, dst)
		t0 = time.Now()
		res, err := verify.Compare(ctx, verify.Config{
			Source: pgtest.ConnConfig(t, src), Dest: pgtest.ConnConfig(t, dst), SourceSnapshot: ss, DestSnapshot: ds,
			Tables:  []change.Mapping{{Source: tn("public", "bench"), Destination: tn("public", "bench")}},
			Workers: workers,
		}, nil)
		require.NoError(t, err)
		d := time.Since(t0)
		require.True(t, res[0].Equal(), "%+v", res[0])
		t.Logf("Compare, %d workers: %s, %.2fx the COPY pipe's speed", workers, d.Round(time.Millisecond), copyDur.Seconds()/d.Seconds())
	}
}

// TestPerfQueries times candidate hash queries over the whole table.
func TestPerfQueries(t *testing.T) {
	ctx := context.Background()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	perfFill(t, src, *perfRows)
	c, err := pgx.Connect(ctx, src)
	require.NoError(t, err)
	defer c.Close(ctx)
	for _, q := range []string{
		`COPY bench TO STDOUT (FORMAT binary)`,
		`COPY bench TO STDOUT`,
		`SELECT count(*) FROM (SELECT id::text FROM (SELECT id, row_number() OVER (ORDER BY id) rn FROM bench) s WHERE rn > 1 AND (rn-1) % 10000 = 0 ORDER BY rn) s`,
		`SELECT count(*), coalesce(md5(string_agg(md5(ROW(id,a,b,c,note,ts)::text), '' ORDER BY id)), '') FROM bench`,
		`SELECT count(*), sum(length(ROW(id,a,b,c,note,ts)::text)) FROM bench`,
		`SELECT count(*), sum(length(md5(ROW(id,a,b,c,note,ts)::text))) FROM bench`,
		`SELECT count(*), sum(hashtextextended(ROW(id,a,b,c,note,ts)::text, 0)) FROM bench`,
		`SELECT count(*), sum(hashtextextended(ROW(id,a,b,c,note,ts)::text COLLATE "C", 0)) FROM bench`,
		`SELECT count(*), sum(h), bit_xor(h) FROM (SELECT hashtextextended(ROW(id,a,b,c,note,ts)::text, 0) h FROM bench) s`,
		`SELECT count(*), sum(hashtextextended(r, 0)), sum(hashtextextended(r, 1)) FROM (SELECT ROW(id,a,b,c,note,ts)::text r FROM bench OFFSET 0) s`,
		`SELECT count(*), sum(hashtextextended(concat_ws(',', id,a,b,c,note,ts), 0)) FROM bench`,
		`SELECT count(*), sum(('x'||substr(h,1,16))::bit(64)::bigint) FROM (SELECT md5(ROW(id,a,b,c,note,ts)::text) h FROM bench OFFSET 0) s`,
	} {
		best := time.Hour
		for range 3 {
			t0 := time.Now()
			if q[:4] == "COPY" {
				_, err = c.PgConn().CopyTo(ctx, io.Discard, q)
			} else {
				_, err = c.Exec(ctx, q)
			}
			require.NoError(t, err, q)
			best = min(best, time.Since(t0))
		}
		t.Logf("%6dms %s", best.Milliseconds(), q)
	}
}
