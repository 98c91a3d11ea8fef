package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// versionPairs are the source -> destination majors of the version matrix:
// upgrades (older to newer), downgrades (newer to older) and same-version,
// covering every supported major at least once on each side.
var versionPairs = []struct{ src, dst int }{
	{12, 18}, {13, 17}, {14, 16}, {16, 14}, {17, 13}, {18, 18}, {18, 16},
}

// matrixSource is the source schema of a matrix case: a keyed table with
// ranges, arrays, jsonb, TOASTed text and a stored generated column (and,
// on PostgreSQL 18, a virtual one), a table without a key (REPLICA
// IDENTITY FULL) and a table that is truncated.
const matrixSource = `
CREATE TABLE items (id int PRIMARY KEY, n int NOT NULL, v text, r int4range, a int[], j jsonb, doc text,
	g int GENERATED ALWAYS AS (n * 2) STORED);
ALTER TABLE items ALTER COLUMN doc SET STORAGE EXTERNAL;
CREATE TABLE nokey (k int, v text);
ALTER TABLE nokey REPLICA IDENTITY FULL;
CREATE TABLE trunc (id int PRIMARY KEY, v text);
INSERT INTO items (id, n, v, r, a, j, doc)
	SELECT g, g, 'v' || g, int4range(g, g + 10), ARRAY[g, g + 1], jsonb_build_object('g', g, 's', 'x' || g),
	       CASE WHEN g % 50 = 0 THEN repeat('toast' || g, 2000) END
	FROM generate_series(1, 300) g;
INSERT INTO nokey SELECT g % 20, 'k' || g FROM generate_series(1, 100) g;
INSERT INTO trunc SELECT g, 't' || g FROM generate_series(1, 50) g;`

// matrixChanges are the changes streamed after the copy: inserts, updates
// (some leaving a TOASTed value unchanged), key updates, deletes, changes of
// the table without a key and a truncate followed by an insert.
const matrixChanges = `
INSERT INTO items (id, n, v, r, a, j)
	SELECT g, g, 'v' || g, int4range(g, g + 10), ARRAY[g, g + 1], jsonb_build_object('g', g) FROM generate_series(301, 350) g;
UPDATE items SET v = 'u' || id, n = n + 1 WHERE id % 7 = 0;
UPDATE items SET id = id + 10000 WHERE id % 11 = 0;
DELETE FROM items WHERE id % 13 = 0;
UPDATE nokey SET v = v || '!' WHERE k = 3;
DELETE FROM nokey WHERE k = 4;
TRUNCATE trunc;
INSERT INTO trunc VALUES (1, 'after');`

// TestVersionMatrix mirrors between PostgreSQL majors from 12 to 18 in
// both directions: the copy, a stream of every change kind, an added
// column, a verification and a cut-over, with both sides equal after each
// step and no warning in the mirror's log. One service and one cluster per
// major serve every case.
func TestVersionMatrix(t *testing.T) {
	t.Parallel()
	start := time.Now()
	majors := map[int]bool{}
	for _, p := range versionPairs {
		majors[p.src], majors[p.dst] = true, true
	}
	t.Run("clusters", func(t *testing.T) {
		for major := range majors {
			t.Run(fmt.Sprint(major), func(t *testing.T) {
				t.Parallel()
				pgtest.MajorCluster(t, major)
			})
		}
	})
	t.Logf("clusters of %d majors ready after %s", len(majors), time.Since(start).Round(time.Millisecond))
	shared := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	t.Cleanup(func() { t.Logf("version matrix: %s", time.Since(start).Round(time.Millisecond)) })
	for _, p := range versionPairs {
		name := fmt.Sprintf("pg%d_to_pg%d", p.src, p.dst)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			s := *shared
			s.t = t
			src := pgtest.NewDatabase(t, pgtest.MajorCluster(t, p.src))
			dst := pgtest.NewDatabase(t, pgtest.MajorCluster(t, p.dst))
			exec1(t, src, matrixSource)
			itemCols := "id, n, v, r, a, j, doc, g"
			if p.src >= 18 {
				// A virtual generated column (the default kind on 18).
				exec1(t, src, `ALTER TABLE items ADD COLUMN vg text GENERATED ALWAYS AS (v || '/' || n)`)
				itemCols += ", vg"
			}
			s.createPeer(name+"_src", src)
			s.createPeer(name+"_dst", dst)
			mirror := strings.ReplaceAll(name, "_", "-")
			s.mustDo("POST", "/v1/mirrors", map[string]any{
				"name": mirror, "source_peer": name + "_src", "destination_peer": name + "_dst", "cdc_sync_interval_seconds": 1,
				"table_mappings": []any{mapping("public", "items", "public", "items"), mapping("public", "nokey", "public", "nokey"),
					mapping("public", "trunc", "public", "trunc")},
			}, 201, nil)
			s.waitStatus(mirror, "running", 2*time.Minute)
			equal := func(what string) {
				t.Helper()
				waitEqual(t, src, dst, "items", "items", itemCols, time.Minute)
				waitEqual(t, src, dst, "nokey", "nokey", "k, v", time.Minute)
				waitEqual(t, src, dst, "trunc", "trunc", "id, v", time.Minute)
				t.Logf("%s: equal after %s", what, time.Since(began).Round(time.Millisecond))
			}
			equal("copy")
			if p.src >= 18 {
				// Virtual where the destination has virtual columns,
				// stored before: it reads the same on both sides.
				want := "v"
				if p.dst < 18 {
					want = "s"
				}
				var kind string
				queryOne(t, dst, &kind, `SELECT attgenerated::text FROM pg_attribute WHERE attrelid = 'public.items'::regclass AND attname = 'vg'`)
				if kind != want {
					t.Errorf("vg on the destination has attgenerated %q, want %q", kind, want)
				}
			}

			exec1(t, src, matrixChanges)
			equal("stream")

			exec1(t, src, `ALTER TABLE items ADD COLUMN extra text DEFAULT 'x';
				UPDATE items SET extra = 'e' || id WHERE id % 5 = 0;
				INSERT INTO items (id, n, extra) VALUES (5000, 1, 'new');`)
			itemCols += ", extra"
			equal("added column")

			v := s.runVerify(t, mirror, nil)
			if v.State != "done" || v.RowsDiffering == nil || *v.RowsDiffering != 0 || len(v.Tables) != 3 {
				t.Fatalf("verification: %+v (error %s)", v, derefS(v.Error))
			}
			for _, tb := range v.Tables {
				if tb.Skipped != "" || tb.RowsSource != tb.RowsDestination || tb.RowsSource == 0 {
					t.Errorf("verification of %s: %+v", tb.Table, tb)
				}
			}
			t.Logf("verified after %s", time.Since(began).Round(time.Millisecond))

			exec1(t, src, `INSERT INTO items (id, n) VALUES (6000, 6); UPDATE nokey SET v = 'last' WHERE k = 5`)
			var done struct {
				Status  string      `json:"status"`
				Cutover cutoverView `json:"cutover"`
			}
			s.mustDo("POST", "/v1/mirrors/"+mirror+"/cutover", map[string]any{"quiet_seconds": 1}, 200, &done)
			if done.Status != "completed" || done.Cutover.State != "completed" {
				t.Fatalf("cut-over: %+v", done)
			}
			for _, step := range done.Cutover.Steps {
				if step.State != "done" {
					t.Errorf("cut-over step %s is %s (%s)", step.Name, step.State, step.Error)
				}
			}
			equal("cut-over")
			for _, level := range []string{"ERROR", "WARN"} {
				for _, e := range s.logs(mirror, "level="+level) {
					t.Errorf("%s entry %q: %v", level, e.Message, e.Details)
				}
			}
			t.Logf("done after %s", time.Since(began).Round(time.Millisecond))
		})
	}
}
