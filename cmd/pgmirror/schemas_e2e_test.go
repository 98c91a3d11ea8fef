package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

const appSchema = `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app.a (n, v) SELECT g, 'init' FROM generate_series(1, 500) g;
CREATE TABLE app.nokey (x int);
CREATE TABLE public.solo (id int PRIMARY KEY);`

// schemaLoad writes small transactions into app.a and into every table
// whose name is in tables (a sync.Map of enabled names) until stop is
// closed: an insert into each, and now and then an update or a delete.
func schemaLoad(t *testing.T, dbURL string, tables *sync.Map, stop <-chan struct{}, txs *atomic.Int64) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Error(err)
		return
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(3, 5))
	for {
		select {
		case <-stop:
			return
		default:
		}
		names := []string{"app.a"}
		tables.Range(func(k, _ any) bool { names = append(names, k.(string)); return true })
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			for _, name := range names {
				k := rng.IntN(1000)
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (n, v) VALUES ($1, 'load')`, name), k); err != nil {
					return err
				}
				switch rng.IntN(4) {
				case 0:
					if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET v = v || 'u', n = n + 1 WHERE id = (SELECT max(id) - 3 FROM %s)`, name, name)); err != nil {
						return err
					}
				case 1:
					if _, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE id = (SELECT min(id) + 2 FROM %s)`, name, name)); err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("load transaction: %v", err)
			return
		}
		txs.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSchemaMappingValidation checks the forms of a schema mapping
// (source_table "*") that create refuses with 400.
func TestSchemaMappingValidation(t *testing.T) {
	t.Parallel()
	_, src, _, s := newEnv(t, appSchema)
	create := func(mappings ...any) (int, string) {
		var out map[string]any
		code := s.do("POST", "/v1/mirrors", map[string]any{
			"name": "v", "source_peer": "src", "destination_peer": "dst", "table_mappings": mappings,
		}, &out)
		msg, _ := out["error"].(string)
		return code, msg
	}
	cases := []struct {
		name     string
		mappings []any
		want     string
	}{
		{"destination table not *", []any{mapping("app", "*", "app", "t")}, `set destination_table to "*"`},
		{"* as destination only", []any{mapping("app", "a", "app", "*")}, `must be given as both`},
		{"excluded columns", []any{mapping("app", "*", "app", "*", "v")}, "cannot exclude columns"},
		{"schema twice", []any{mapping("app", "*", "app", "*"), mapping("app", "*", "app2", "*")}, "map each schema once"},
		{"one destination schema", []any{mapping("app", "*", "d", "*"), mapping("public", "*", "d", "*")}, "would collide"},
		{"schema missing", []any{mapping("nosuch", "*", "app", "*")}, "schema nosuch does not exist"},
		{"destination taken", []any{mapping("public", "solo", "app", "a"), mapping("app", "*", "app", "*")}, "writes to already"},
		{"table without key", []any{mapping("app", "*", "app", "*")}, "app.nokey has neither a primary key"},
	}
	for _, c := range cases {
		code, msg := create(c.mappings...)
		if code != 400 || !strings.Contains(msg, c.want) {
			t.Errorf("%s: status %d %q, want 400 containing %q", c.name, code, msg, c.want)
		}
	}
	// An explicit mapping of a table of the schema wins over the schema's.
	exec1(t, src, `DROP TABLE app.nokey`)
	var cfg struct {
		TableMappings         []map[string]any `json:"table_mappings"`
		ExpandedTableMappings []map[string]any `json:"expanded_table_mappings"`
	}
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ok", "source_peer": "src", "destination_peer": "dst", "do_initial_snapshot": false,
		"table_mappings": []any{mapping("app", "a", "other", "a_copy", "v"), mapping("app", "*", "app", "*")},
	}, 201, &cfg)
	if len(cfg.TableMappings) != 2 || cfg.TableMappings[1]["source_table"] != "*" || len(cfg.ExpandedTableMappings) != 0 {
		t.Errorf("mappings as created: %v, expanded %v", cfg.TableMappings, cfg.ExpandedTableMappings)
	}

	// PUT tables validates and expands the same way.
	s.waitStatus("ok", "running", 60*time.Second)
	s.mustDo("POST", "/v1/mirrors/ok/pause", nil, 200, nil)
	s.waitStatus("ok", "paused", 30*time.Second)
	var out map[string]any
	if code := s.do("PUT", "/v1/mirrors/ok/tables", map[string]any{
		"table_mappings": []any{mapping("app", "*", "app", "*", "v")}}, &out); code != 400 || !strings.Contains(fmt.Sprint(out["error"]), "cannot exclude columns") {
		t.Errorf("PUT tables with excluded columns on a schema mapping: %d %v, want 400", code, out)
	}
	exec1(t, src, `CREATE TABLE app.b (id int PRIMARY KEY)`)
	var given []map[string]any
	s.mustDo("PUT", "/v1/mirrors/ok/tables", map[string]any{
		"table_mappings": []any{mapping("app", "*", "app", "*"), mapping("app", "a", "other", "a_copy")}}, 200, &given)
	if len(given) != 2 || given[0]["source_table"] != "a" || given[1]["source_table"] != "*" {
		t.Errorf("PUT tables answered %v, want the mapping of a, then the schema mapping", given)
	}
	s.mustDo("GET", "/v1/mirrors/ok", nil, 200, &cfg)
	if len(cfg.ExpandedTableMappings) != 1 || cfg.ExpandedTableMappings[0]["source_table"] != "b" {
		t.Errorf("after PUT, expanded %v, want app.b only (app.a is mapped by name)", cfg.ExpandedTableMappings)
	}
}

// TestSchemaMappingNewTables maps a whole schema and, under a running
// write load, creates tables in it: one with rows inserted by the creating
// transaction and continuously afterwards, one created empty and written
// later. Both are created on the destination, copied and replicated, and
// end equal to the source; then a table is dropped on the source: it is
// marked dropped, its destination table is kept and the mirror keeps
// replicating the others.
func TestSchemaMappingNewTables(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app.a (n, v) SELECT g, 'init' FROM generate_series(1, 500) g;`)
	const token = "schema-metrics-token"
	s := startService(t, catalog, "SERVICE_METRICS_TOKEN="+token)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	var cfg struct {
		TableMappings         []map[string]any `json:"table_mappings"`
		ExpandedTableMappings []map[string]any `json:"expanded_table_mappings"`
	}
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "smnew", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, &cfg)
	s.dumpOnFailure("smnew")
	if len(cfg.TableMappings) != 1 || cfg.TableMappings[0]["source_table"] != "*" ||
		len(cfg.ExpandedTableMappings) != 1 || cfg.ExpandedTableMappings[0]["source_table"] != "a" {
		t.Fatalf("create answered mappings %v, expanded %v", cfg.TableMappings, cfg.ExpandedTableMappings)
	}
	s.waitStatus("smnew", "running", 90*time.Second)

	var enabled sync.Map
	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); schemaLoad(t, src, &enabled, stop, &txs) }()
	waitGrown(t, "load transactions", &txs, 50, 30*time.Second)

	// b: created with rows in the same transaction, written at once.
	exec1(t, src, `BEGIN;
CREATE TABLE app.b (id bigserial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app.b (n, v) SELECT g, 'created' FROM generate_series(1, 3000) g;
COMMIT;`)
	enabled.Store("app.b", true)
	// c: created empty, written once the mirror has it.
	exec1(t, src, `CREATE TABLE app.c (id bigserial PRIMARY KEY, n int NOT NULL, v text)`)
	waitFor(t, "app.b and app.c running in the mirror", 90*time.Second, func() bool {
		m := s.mirror("smnew")
		return tableStatusOf(m, "app.b") == "running" && tableStatusOf(m, "app.c") == "running"
	})
	waitGrown(t, "load transactions", &txs, 100, 30*time.Second)
	exec1(t, src, `INSERT INTO app.c (n, v) SELECT g, 'later' FROM generate_series(1, 200) g`)
	enabled.Store("app.c", true)
	waitGrown(t, "load transactions", &txs, 100, 30*time.Second)
	if m := s.mirror("smnew"); m.Status != "running" {
		t.Errorf("mirror status %q while tables were added, want running", m.Status)
	}

	// d is dropped: its rows stay on the destination, the others go on.
	exec1(t, src, `CREATE TABLE app.d (id int PRIMARY KEY); INSERT INTO app.d SELECT generate_series(1, 10)`)
	waitFor(t, "app.d running", 90*time.Second, func() bool { return tableStatusOf(s.mirror("smnew"), "app.d") == "running" })
	waitEqual(t, src, dst, "app.d", "app.d", "id", 30*time.Second)
	exec1(t, src, `DROP TABLE app.d`)
	waitFor(t, "app.d dropped", 30*time.Second, func() bool { return tableStatusOf(s.mirror("smnew"), "app.d") == "dropped" })
	waitGrown(t, "load transactions", &txs, 50, 30*time.Second)
	close(stop)
	wg.Wait()

	for _, table := range []string{"app.a", "app.b", "app.c"} {
		waitEqual(t, src, dst, table, table, "id, n, v", 90*time.Second)
		noDuplicates(t, dst, table, "id")
	}
	if n := queryInt64(t, dst, `SELECT count(*) FROM app.d`); n != 10 {
		t.Errorf("destination app.d has %d rows after the source dropped it, want its 10 kept", n)
	}
	m := s.mirror("smnew")
	if m.Status != "running" {
		t.Errorf("mirror status %q after a table was dropped, want running", m.Status)
	}
	var created []string
	var droppedLogged bool
	for _, e := range s.logs("smnew", "") {
		if e.Message == "Schema change applied" {
			if st, _ := e.Details["statement"].(string); strings.HasPrefix(st, "CREATE TABLE") {
				created = append(created, e.Details["table"].(string))
			}
		}
		if e.Message == "Source table dropped; its destination table is kept" && e.Level == "WARN" && e.Details["table"] == "app.d" {
			droppedLogged = true
		}
	}
	if strings.Join(created, ",") != "app.d,app.c,app.b" {
		t.Errorf("Schema change applied (CREATE TABLE) logged for %v, want app.d, app.c, app.b (newest first)", created)
	}
	if !droppedLogged {
		t.Error(`no WARN "Source table dropped; its destination table is kept" for app.d`)
	}
	s.mustDo("GET", "/v1/mirrors/smnew", nil, 200, &cfg)
	if len(cfg.ExpandedTableMappings) != 4 || len(cfg.TableMappings) != 1 {
		t.Errorf("GET shows mappings %v, expanded %v; want the schema mapping and a, b, c, d", cfg.TableMappings, cfg.ExpandedTableMappings)
	}
	if v, ok := metricValue(s.scrape(token), "pgmirror_schema_changes_applied_total", map[string]string{"mirror": "smnew"}); !ok || v < 3 {
		t.Errorf("pgmirror_schema_changes_applied_total{mirror=smnew} = %v (present %v), want at least 3 (three tables created)", v, ok)
	}
}

// TestSchemaMappingNewTableCrash maps a schema through a publication of
// the user's (FOR TABLES IN SCHEMA, which publishes a new table at once),
// creates a large table in it under a write load and kills the service
// while the table is copied: a new process copies it again and it ends
// equal to the source, the rows of its creating transaction and the later
// ones each once.
func TestSchemaMappingNewTableCrash(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app.a (n, v) SELECT g, 'init' FROM generate_series(1, 500) g;
CREATE PUBLICATION app_pub FOR TABLES IN SCHEMA app WITH (publish_via_partition_root = true);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "sccrash", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"publication_name": "app_pub", "snapshot_num_rows_per_partition": 20000, "snapshot_max_parallel_workers": 1,
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, nil)
	s.dumpOnFailure("sccrash")
	s.waitStatus("sccrash", "running", 90*time.Second)

	var enabled sync.Map
	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); schemaLoad(t, src, &enabled, stop, &txs) }()
	waitGrown(t, "load transactions", &txs, 30, 30*time.Second)

	exec1(t, src, `BEGIN;
CREATE TABLE app.big (id bigserial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app.big (n, v) SELECT g, repeat('x', 200) FROM generate_series(1, 200000) g;
COMMIT;`)
	enabled.Store("app.big", true)
	waitFor(t, "app.big being copied", 60*time.Second, func() bool {
		return tableStatusOf(s.mirror("sccrash"), "app.big") == "snapshotting"
	})
	s.kill()
	s = startService(t, catalog)
	s.dumpOnFailure("sccrash")
	waitGrown(t, "load transactions", &txs, 50, 30*time.Second)
	waitFor(t, "app.big running", 120*time.Second, func() bool {
		return tableStatusOf(s.mirror("sccrash"), "app.big") == "running"
	})
	waitGrown(t, "load transactions", &txs, 50, 30*time.Second)
	close(stop)
	wg.Wait()
	for _, table := range []string{"app.a", "app.big"} {
		waitEqual(t, src, dst, table, table, "id, n, v", 120*time.Second)
		noDuplicates(t, dst, table, "id")
	}
	if m := s.mirror("sccrash"); m.Status != "running" {
		t.Errorf("mirror status %q, want running", m.Status)
	}
}

// TestDroppedTableMappedByName drops a table mapped by name while the
// mirror is paused: on resume it is marked dropped with a WARN entry, its
// destination table is kept, a resync of it is refused, and the mirror
// replicates its other table.
func TestDroppedTableMappedByName(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `
CREATE TABLE public.keep (id int PRIMARY KEY);
CREATE TABLE public.gone (id int PRIMARY KEY);
INSERT INTO public.gone SELECT generate_series(1, 20);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "dn", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "keep", "public", "keep"), mapping("public", "gone", "public", "gone")},
	}, 201, nil)
	s.dumpOnFailure("dn")
	s.waitStatus("dn", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.gone", "public.gone", "id", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/dn/pause", nil, 200, nil)
	s.waitStatus("dn", "paused", 30*time.Second)
	exec1(t, src, `DROP TABLE public.gone; INSERT INTO public.keep SELECT generate_series(1, 30)`)
	s.mustDo("POST", "/v1/mirrors/dn/resume", nil, 200, nil)
	waitFor(t, "public.gone dropped", 30*time.Second, func() bool { return tableStatusOf(s.mirror("dn"), "public.gone") == "dropped" })
	waitEqual(t, src, dst, "public.keep", "public.keep", "id", 30*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM public.gone`); n != 20 {
		t.Errorf("destination public.gone has %d rows, want its 20 kept", n)
	}
	if !hasLog(s.logs("dn", "level=WARN"), "Source table dropped; its destination table is kept") {
		t.Error(`no WARN "Source table dropped; its destination table is kept"`)
	}
	s.mustDo("POST", "/v1/mirrors/dn/resync/public.gone", nil, 409, nil)
	if m := s.mirror("dn"); m.Status != "running" {
		t.Errorf("status %s after a table was dropped, want running", m.Status)
	}
}

// TestSchemaMappingPolicies follows a table created in a mapped schema
// through the mirror's schema_changes settings: warn leaves it out with a
// WARN entry, stop pauses the mirror before adding it, and apply (after
// PATCH and resume) creates and copies it.
func TestSchemaMappingPolicies(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "sp", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "warn",
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, nil)
	s.dumpOnFailure("sp")
	s.waitStatus("sp", "running", 60*time.Second)
	exec1(t, src, `CREATE TABLE app.w (id int PRIMARY KEY); INSERT INTO app.w SELECT generate_series(1, 100)`)
	waitFor(t, "a Schema change not applied entry for app.w", 60*time.Second, func() bool {
		for _, e := range s.logs("sp", "") {
			if e.Message == "Schema change not applied" && e.Level == "WARN" && e.Details["table"] == "app.w" {
				return true
			}
		}
		return false
	})
	destinationHasW := func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM pg_tables WHERE schemaname = 'app' AND tablename = 'w'`) > 0
	}
	if tableStatusOf(s.mirror("sp"), "app.w") != "" || destinationHasW() {
		t.Fatal("under warn, app.w was added to the mirror or created on the destination")
	}

	s.mustDo("POST", "/v1/mirrors/sp/pause", nil, 200, nil)
	s.waitStatus("sp", "paused", 60*time.Second)
	s.mustDo("PATCH", "/v1/mirrors/sp", map[string]any{"schema_changes": "stop"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/sp/resume", nil, 200, nil)
	waitFor(t, "a Mirror paused before a schema change entry for app.w", 60*time.Second, func() bool {
		for _, e := range s.logs("sp", "") {
			if e.Message == "Mirror paused before a schema change" && e.Level == "WARN" && e.Details["table"] == "app.w" {
				return true
			}
		}
		return false
	})
	s.waitStatus("sp", "paused", 60*time.Second)
	if tableStatusOf(s.mirror("sp"), "app.w") != "" || destinationHasW() {
		t.Fatal("under stop, app.w was added to the mirror or created on the destination")
	}

	s.mustDo("PATCH", "/v1/mirrors/sp", map[string]any{"schema_changes": "apply"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/sp/resume", nil, 200, nil)
	waitFor(t, "app.w running", 60*time.Second, func() bool { return tableStatusOf(s.mirror("sp"), "app.w") == "running" })
	exec1(t, src, `INSERT INTO app.w SELECT generate_series(101, 150)`)
	waitEqual(t, src, dst, "app.w", "app.w", "id", 60*time.Second)
	if m := s.mirror("sp"); m.Status != "running" {
		t.Errorf("status %s, want running", m.Status)
	}
}

// TestSchemaMappingAttachPartition: in a mapped schema, under a write load,
// a table of the mirror that holds rows is attached as a partition of a
// partitioned table of the mirror. The rows it had reach the root's
// destination table (no change carries them: the root is copied again),
// the attached table stops replicating on its own (dropped, destination
// table kept), rows written through the root after the attach replicate,
// and detached again it is copied anew as a table of its own.
func TestSchemaMappingAttachPartition(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);
CREATE TABLE app.meas (id int NOT NULL, region text NOT NULL, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE app.meas_eu PARTITION OF app.meas FOR VALUES IN ('eu');
INSERT INTO app.meas SELECT g, 'eu', g FROM generate_series(1, 50) g;
CREATE TABLE app.meas_us (id int NOT NULL, region text NOT NULL, v int, PRIMARY KEY (id, region));
INSERT INTO app.meas_us SELECT g, 'us', g FROM generate_series(1, 40) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ap", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, nil)
	s.dumpOnFailure("ap")
	s.waitStatus("ap", "running", 60*time.Second)
	waitEqual(t, src, dst, "app.meas_us", "app.meas_us", "id, region, v", 30*time.Second)

	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); schemaLoad(t, src, &sync.Map{}, stop, &txs) }()
	time.Sleep(500 * time.Millisecond)
	exec1(t, src, `ALTER TABLE app.meas ATTACH PARTITION app.meas_us FOR VALUES IN ('us')`)
	exec1(t, src, `INSERT INTO app.meas VALUES (100, 'us', 100), (101, 'eu', 101); UPDATE app.meas SET v = -v WHERE id = 7`)
	waitEqual(t, src, dst, "app.meas", "app.meas", "id, region, v", 60*time.Second)
	waitFor(t, "app.meas_us dropped", 30*time.Second, func() bool { return tableStatusOf(s.mirror("ap"), "app.meas_us") == "dropped" })
	exec1(t, src, `UPDATE app.meas SET v = v + 1000 WHERE region = 'us' AND id % 3 = 0`)
	waitEqual(t, src, dst, "app.meas", "app.meas", "id, region, v", 60*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM app.meas_us`); n != 40 {
		t.Errorf("destination app.meas_us has %d rows, want its 40 kept", n)
	}

	// Detached, it is a table of the schema again: copied anew.
	exec1(t, src, `ALTER TABLE app.meas DETACH PARTITION app.meas_us; INSERT INTO app.meas_us VALUES (200, 'us', 200)`)
	waitFor(t, "app.meas_us running again", 60*time.Second, func() bool { return tableStatusOf(s.mirror("ap"), "app.meas_us") == "running" })
	waitEqual(t, src, dst, "app.meas_us", "app.meas_us", "id, region, v", 60*time.Second)
	close(stop)
	wg.Wait()
	if txs.Load() == 0 {
		t.Fatal("the write load committed nothing")
	}
	waitEqual(t, src, dst, "app.a", "app.a", "id, n, v", 60*time.Second)
	if m := s.mirror("ap"); m.Status != "running" {
		t.Errorf("status %s, want running", m.Status)
	}
	for _, e := range s.logs("ap", "level=ERROR") {
		t.Errorf("ERROR entry %q: %v", e.Message, e.Details)
	}
}

// TestSchemaMappingRecreatedTable: under a write load, a table of a mapped
// schema dropped and created again with another shape in one migration
// (never seen missing by a check) is copied anew with its new columns, and
// its later changes replicate; before, the new table was left out of the
// publication while the mirror showed it running, and nothing of it
// replicated.
func TestSchemaMappingRecreatedTable(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);
CREATE TABLE app.r (id int PRIMARY KEY, v text);
INSERT INTO app.r SELECT g, 'old' || g FROM generate_series(1, 30) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "rc", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, nil)
	s.dumpOnFailure("rc")
	s.waitStatus("rc", "running", 60*time.Second)
	waitEqual(t, src, dst, "app.r", "app.r", "id, v", 30*time.Second)

	stop := make(chan struct{})
	var txs atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); schemaLoad(t, src, &sync.Map{}, stop, &txs) }()
	time.Sleep(500 * time.Millisecond)
	exec1(t, src, `BEGIN; DROP TABLE app.r;
		CREATE TABLE app.r (id int PRIMARY KEY, label text NOT NULL DEFAULT 'l', n int);
		INSERT INTO app.r SELECT g, 'new' || g, g FROM generate_series(1, 20) g; COMMIT`)
	time.Sleep(time.Second)
	exec1(t, src, `INSERT INTO app.r VALUES (21, 'later', 21); UPDATE app.r SET label = 'changed' WHERE id <= 3; DELETE FROM app.r WHERE id = 20`)
	waitEqual(t, src, dst, "app.r", "app.r", "id, label, n", 60*time.Second)
	exec1(t, src, `UPDATE app.r SET n = -n WHERE id % 2 = 0`)
	waitEqual(t, src, dst, "app.r", "app.r", "id, label, n", 60*time.Second)
	close(stop)
	wg.Wait()
	if txs.Load() == 0 {
		t.Fatal("the write load committed nothing")
	}
	waitEqual(t, src, dst, "app.a", "app.a", "id, n, v", 60*time.Second)
	if got, want := tableShape(t, dst, "app.r"), tableShape(t, src, "app.r"); got != want {
		t.Errorf("destination columns of app.r are\n%s\nthe source's\n%s", got, want)
	}
	if m := s.mirror("rc"); m.Status != "running" || tableStatusOf(m, "app.r") != "running" {
		t.Errorf("status %s, app.r %s, want both running", m.Status, tableStatusOf(m, "app.r"))
	}
	for _, e := range s.logs("rc", "level=ERROR") {
		t.Errorf("ERROR entry %q: %v", e.Message, e.Details)
	}
}
