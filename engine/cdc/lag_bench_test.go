package cdc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/cdc"
)

// BenchmarkLag measures replication lag under a steady load of single-row
// transactions (2,000 per second for 5 s per iteration) and reports its
// percentiles. Run it with:
//
//	go test -run '^$' -bench Lag -benchtime 1x ./engine/cdc/
//
// Lag is the time from the source row's insert to its insert on the
// destination (both clocks are this machine's).
func BenchmarkLag(b *testing.B) {
	src := `CREATE TABLE public.lag (id bigint PRIMARY KEY, ts timestamptz NOT NULL DEFAULT clock_timestamp())`
	dst := `CREATE TABLE public.lag (id bigint PRIMARY KEY, ts timestamptz NOT NULL, applied_at timestamptz DEFAULT clock_timestamp())`
	bt := setup(b, src, dst, same("public", "lag"))
	bt.cfg.BatchSize = 10000
	bt.cfg.SyncInterval = time.Minute
	ctx := context.Background()
	// The test clusters run with synchronous_commit = off, which makes the
	// walsender see WAL only every wal_writer_delay (200 ms): production
	// sources commit synchronously, so the load does too.
	pool := pgtest.Pool(b, bt.src+"&synchronous_commit=on")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- cdc.Run(ctx, bt.cfg, bt.rep, stop) }()

	const (
		rate    = 2000
		seconds = 5
		workers = 8
	)
	b.ResetTimer()
	for i := range b.N {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Second * workers / rate)
				defer tick.Stop()
				for n := range rate * seconds / workers {
					<-tick.C
					id := int64(i)*1e9 + int64(n*workers+w)
					if _, err := pool.Exec(ctx, `INSERT INTO lag (id) VALUES ($1)`, id); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	b.StopTimer()
	want := int64(b.N * rate * seconds)
	dc := pgtest.Pool(b, bt.dst)
	require.Eventually(b, func() bool {
		var n int64
		return dc.QueryRow(ctx, `SELECT count(*) FROM lag`).Scan(&n) == nil && n == want
	}, time.Minute, 50*time.Millisecond)
	close(stop)
	require.NoError(b, <-done)
	var p50, p99, maxLag float64
	require.NoError(b, dc.QueryRow(ctx, `SELECT
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		max(extract(epoch FROM applied_at - ts))::float8 FROM lag`).Scan(&p50, &p99, &maxLag))
	b.ReportMetric(p50*1000, "p50-ms")
	b.ReportMetric(p99*1000, "p99-ms")
	b.ReportMetric(maxLag*1000, "max-ms")
	b.ReportMetric(float64(bt.rep.count())/float64(b.N), "batches/op")
}
