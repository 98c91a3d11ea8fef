package main

import (
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestSnapshotProgress polls GET /v1/mirrors/{name} during a slow,
// partitioned snapshot: the table's rows_synced moves during the copy (seen
// strictly between 0 and the row count) and ends at exactly the row count,
// and the partition log entries carry the rows copied so far.
func TestSnapshotProgress(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	dumpJobsOnFailure(t, catalog)
	const total = 300000
	exec1(t, src, `CREATE TABLE public.big (id bigint PRIMARY KEY, pad text);
		INSERT INTO public.big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, 300000) g;
		ANALYZE public.big;`)

	a := startService(t, catalog)
	a.createPeer("src", src)
	a.createPeer("dst", dst)
	a.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "prog", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 3000, "snapshot_max_parallel_workers": 1, "snapshot_num_tables_in_parallel": 1,
		"table_mappings": []any{mapping("public", "big", "public", "big")},
	}, 201, nil)
	a.dumpOnFailure("prog")

	type progressStatus struct {
		Tables []struct {
			Status        string   `json:"status"`
			RowsSynced    int64    `json:"rows_synced"`
			RowsEstimated *int64   `json:"rows_estimated"`
			Progress      *float64 `json:"progress"`
		} `json:"tables"`
		Status string `json:"status"`
	}
	var midway []int64
	var progress []float64
	deadline := time.Now().Add(50 * time.Second)
	for {
		var m progressStatus
		a.mustDo("GET", "/v1/mirrors/prog", nil, 200, &m)
		if len(m.Tables) != 1 {
			t.Fatalf("%d tables in the status, want 1", len(m.Tables))
		}
		tb := m.Tables[0]
		if tb.Status == "snapshotting" && tb.RowsSynced > 0 && tb.RowsSynced < total {
			if len(midway) > 0 && tb.RowsSynced < midway[len(midway)-1] {
				t.Fatalf("rows_synced went back from %d to %d during the snapshot", midway[len(midway)-1], tb.RowsSynced)
			}
			midway = append(midway, tb.RowsSynced)
			if tb.RowsEstimated == nil || *tb.RowsEstimated < total/2 || *tb.RowsEstimated > total*2 {
				t.Fatalf("rows_estimated %v during the snapshot, want about %d (the source was analyzed)", tb.RowsEstimated, total)
			}
			if tb.Progress == nil || *tb.Progress <= 0 || *tb.Progress > 0.99 {
				t.Fatalf("progress %v during the snapshot, want in (0, 0.99]", tb.Progress)
			}
			if len(progress) > 0 && *tb.Progress < progress[len(progress)-1] {
				t.Fatalf("progress went back from %v to %v", progress[len(progress)-1], *tb.Progress)
			}
			progress = append(progress, *tb.Progress)
		}
		if m.Status == "running" && tb.Status == "running" {
			if tb.RowsSynced != total {
				t.Fatalf("rows_synced %d after the snapshot, want exactly %d", tb.RowsSynced, total)
			}
			if tb.Progress == nil || *tb.Progress != 1 {
				t.Fatalf("progress %v after the snapshot, want 1", tb.Progress)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot did not finish in time: status %s, table status %s, rows_synced %d", m.Status, tb.Status, tb.RowsSynced)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(midway) == 0 {
		t.Fatal("rows_synced was never seen between 0 and the row count during the snapshot: it only moves at the end")
	}
	t.Logf("rows_synced seen during the snapshot: %v, progress %v", midway, progress)

	// The partition log entries say how far along the table's copy is.
	var last float64
	for _, e := range a.logsWith("prog", "Snapshot partition completed") {
		copied, ok := e.Details["rows_copied"].(float64)
		if !ok {
			continue // a partition the stream had no rows for
		}
		last = max(last, copied)
	}
	if last != total {
		t.Errorf("the partition log entries' rows_copied reached %v, want %d", last, total)
	}
}
