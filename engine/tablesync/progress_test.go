package tablesync

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// progressReporter is a countingReporter that also records the rows
// streamed it is told of.
type progressReporter struct {
	countingReporter
	pmu      sync.Mutex
	streamed []int64
	afterEnd bool // a report came after TableDone
}

func (p *progressReporter) RowsStreamed(_ context.Context, t change.Mapping, rows int64) {
	p.pmu.Lock()
	defer p.pmu.Unlock()
	p.streamed = append(p.streamed, rows)
	p.mu.Lock()
	_, done := p.rows[t.Source.Name]
	p.mu.Unlock()
	p.afterEnd = p.afterEnd || done
}

// TestProgressWithinPartition: a table copied in one partition reports the
// rows streamed so far while its COPY runs (strictly between 0 and the
// total, never decreasing), and nothing after the table is done.
func TestProgressWithinPartition(t *testing.T) {
	old := progressEvery
	progressEvery = 10 * time.Millisecond
	t.Cleanup(func() { progressEvery = old })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	const total = 300000
	pgtest.Exec(t, srcURL, `CREATE TABLE public.one (id bigint PRIMARY KEY, pad text);
		INSERT INTO public.one SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 300000) g; ANALYZE public.one`)
	pgtest.Exec(t, dstURL, `CREATE TABLE public.one (id bigint PRIMARY KEY, pad text)`)
	rep := &progressReporter{countingReporter: countingReporter{partitions: map[string]int{}, rows: map[string]int64{}, done: map[string][]int{}}}
	cfg := Config{Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL), Tables: testMappings("one"),
		RowsPerPartition: 10_000_000, MaxParallelWorkers: 1, TablesInParallel: 1}
	if err := Run(ctx, cfg, rep); err != nil {
		t.Fatal(err)
	}
	if n := rep.partitions["one"]; n != 1 {
		t.Fatalf("copied in %d partitions, want 1", n)
	}
	rep.pmu.Lock()
	defer rep.pmu.Unlock()
	midway := 0
	for i, n := range rep.streamed {
		if i > 0 && n < rep.streamed[i-1] {
			t.Fatalf("rows streamed went back: %v", rep.streamed)
		}
		if n > 0 && n < total {
			midway++
		}
	}
	if midway == 0 {
		t.Errorf("no report of the rows streamed during the copy of one partition: %v", rep.streamed)
	}
	if rep.afterEnd {
		t.Error("a progress report came after the table was done")
	}
}
