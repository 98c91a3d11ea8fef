package tablesync

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// TestRunMarksOrigin: with OriginMirrorUID every destination write of a
// snapshot (the truncate and each partition, on borrowed and own
// connections) carries a pgmirror origin, so a reader that leaves out
// transactions with an origin sees none of them; the copy origins are gone
// after the run.
func TestRunMarksOrigin(t *testing.T) {
	for _, borrow := range []bool{false, true} {
		t.Run(fmt.Sprintf("borrowed=%v", borrow), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
			dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
			pgtest.Exec(t, srcURL, testSchema)
			pgtest.Exec(t, dstURL, testDestSchema)
			uid := fmt.Sprintf("tablesync-origin-%d-%v", os.Getpid(), borrow)
			t.Cleanup(func() {
				c := connect(t, dstURL)
				_ = origin.DropMirror(context.Background(), c, uid)
			})
			dst := connect(t, dstURL)
			slot := fmt.Sprintf("ts_origin_%d_%v", os.Getpid(), borrow)
			if _, err := dst.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
				t.Fatal(err)
			}
			cfg := Config{
				Source: pgtest.ConnConfig(t, srcURL), Dest: pgtest.ConnConfig(t, dstURL),
				Tables:           testMappings("big", "parted", "small"),
				RowsPerPartition: 20000, MaxParallelWorkers: 3, TablesInParallel: 2,
				OriginMirrorUID: uid,
			}
			if borrow {
				cfg.SourceConn, cfg.DestConn = connect(t, srcURL), connect(t, dstURL)
			}
			if err := Run(ctx, cfg, nil); err != nil {
				t.Fatal(err)
			}
			// count counts the changes of the copy a slot decodes; localOnly
			// leaves out those of transactions with an origin.
			count := func(localOnly bool) int {
				var n int
				opts := ""
				if localOnly {
					opts = ", 'only-local', '1'"
				}
				q := `SELECT count(*) FROM pg_logical_slot_peek_changes($1, NULL, NULL` + opts + `) WHERE data LIKE 'table public.%'`
				if err := dst.QueryRow(ctx, q, slot).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			// The partitions commit without waiting for their WAL's flush,
			// and a slot decodes only flushed WAL: wait for all of it.
			all, deadline := 0, time.Now().Add(20*time.Second)
			for all = count(false); all < 65101 && time.Now().Before(deadline); all = count(false) {
				time.Sleep(100 * time.Millisecond)
			}
			if all < 65101 {
				t.Fatalf("the slot saw %d row changes and truncates of the copy, want all 65100 and the truncate", all)
			}
			if local := count(true); local != 0 {
				t.Errorf("%d changes of the copy carry no origin, want none", local)
			}
			var left int
			if err := dst.QueryRow(ctx, `SELECT count(*) FROM pg_replication_origin WHERE roname LIKE $1`, origin.Name(uid)+"%").Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d copy origins left after the run, want 0", left)
			}
			if borrow && cfg.DestConn.PgConn().TxStatus() != 'I' {
				t.Error("the borrowed destination connection is in a transaction after Run")
			}
		})
	}
}
