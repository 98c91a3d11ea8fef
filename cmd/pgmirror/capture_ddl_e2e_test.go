package main

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// eventTriggers counts pgmirror's DDL capture event triggers on a database.
func eventTriggers(t *testing.T, dbURL string) int64 {
	t.Helper()
	return queryInt64(t, dbURL, `SELECT count(*) FROM pg_event_trigger WHERE evtname IN ('pgmirror_ddl_command_end', 'pgmirror_ddl_sql_drop')`)
}

// destHas waits until a query on the destination counts at least one row.
func destHas(t *testing.T, dst, what, sql string, args ...any) {
	t.Helper()
	waitFor(t, what+" on the destination", 60*time.Second, func() bool { return queryInt64(t, dst, sql, args...) > 0 })
}

// TestCaptureDDL: a mirror with capture_ddl, under a running write load,
// applies index, constraint, default and NOT NULL changes made on the
// source at their place in the stream: a row that violates a CHECK added
// NOT VALID in the same transaction lands before it (the other order would
// fail the batch), the run never errors, the data ends equal, each change
// is logged and counted, and deleting the mirror removes the trigger.
func TestCaptureDDL(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, loadTables)
	const token = "metrics-token-for-the-ddl-test"
	s := startService(t, catalog, "SERVICE_METRICS_TOKEN="+token)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	var cfg struct {
		CaptureDDL bool `json:"capture_ddl"`
	}
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ddl", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": loadMappings(), "capture_ddl": true,
	}, 201, &cfg)
	if !cfg.CaptureDDL {
		t.Fatal("POST /v1/mirrors answered capture_ddl false")
	}
	s.dumpOnFailure("ddl")
	if n := eventTriggers(t, src); n != 2 {
		t.Fatalf("%d DDL capture event triggers on the source after create, want 2", n)
	}
	s.waitStatus("ddl", "running", 60*time.Second)
	s.mustDo("GET", "/v1/mirrors/ddl", nil, 200, &cfg)
	if !cfg.CaptureDDL {
		t.Fatal("GET /v1/mirrors/ddl shows capture_ddl false")
	}

	l := startLoad(src)
	ended := false
	defer func() {
		if !ended {
			l.end()
		}
	}()
	l.waitMore(t, 20, 30*time.Second)

	exec1(t, src, `CREATE INDEX items_n_idx ON public.items (n)`)
	destHas(t, dst, "index items_n_idx", `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'items' AND indexname = 'items_n_idx'`)

	// The violating row comes first in the transaction, the constraint
	// after it: the destination must apply them in that order.
	exec1(t, src, `BEGIN;
		INSERT INTO public.items (n, v) VALUES (-5, 'violates the check added next');
		ALTER TABLE public.items ADD CONSTRAINT items_n_nonneg CHECK (n >= 0) NOT VALID;
		COMMIT`)
	destHas(t, dst, "NOT VALID check items_n_nonneg",
		`SELECT count(*) FROM pg_constraint WHERE conrelid = 'public.items'::regclass AND conname = 'items_n_nonneg' AND contype = 'c' AND NOT convalidated`)

	exec1(t, src, `ALTER TABLE public.items ADD CONSTRAINT items_n_id_key UNIQUE (n, id)`)
	destHas(t, dst, "unique items_n_id_key",
		`SELECT count(*) FROM pg_constraint WHERE conrelid = 'public.items'::regclass AND conname = 'items_n_id_key' AND contype = 'u'`)

	exec1(t, src, `ALTER TABLE public.items ALTER COLUMN v SET DEFAULT 'dflt'`)
	destHas(t, dst, "default of items.v",
		`SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'items' AND column_name = 'v' AND column_default = $1`, "'dflt'::text")

	exec1(t, src, `ALTER TABLE public.events ALTER COLUMN v SET NOT NULL`)
	destHas(t, dst, "NOT NULL events.v",
		`SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'events' AND column_name = 'v' AND is_nullable = 'NO'`)

	// One source transaction of several changes. It locks items before
	// events, as every load transaction does: the other order deadlocks
	// with the load itself (the load holds items and waits for events
	// while this waits for items), whatever pgmirror does.
	exec1(t, src, `DROP INDEX public.items_n_idx; CREATE INDEX events_k_idx ON public.events (k); ALTER INDEX public.events_k_idx RENAME TO events_k_idx2`)
	destHas(t, dst, "renamed index events_k_idx2",
		`SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND indexname = 'events_k_idx2'`)
	waitFor(t, "items_n_idx dropped on the destination", 60*time.Second, func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND indexname IN ('items_n_idx', 'events_k_idx')`) == 0
	})

	exec1(t, src, `ALTER TABLE public.items DROP CONSTRAINT items_n_nonneg`)
	waitFor(t, "items_n_nonneg dropped on the destination", 60*time.Second, func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'public.items'::regclass AND conname = 'items_n_nonneg'`) == 0
	})

	l.waitMore(t, 20, 30*time.Second)
	ended = true
	if n := l.end(); n == 0 {
		t.Fatal("the load committed nothing")
	}
	checkLoadEqual(t, src, dst, 90*time.Second)
	m := s.full("ddl")
	if m.Status != "running" || m.ErrorCount != 0 {
		t.Fatalf("mirror status %q, error_count %d (%q), want running without errors", m.Status, m.ErrorCount, m.ErrorMessage)
	}
	applied := s.logsWith("ddl", "Schema change applied")
	var statements []string
	for _, e := range applied {
		if e.Level != "INFO" || e.Details["table"] == nil {
			t.Errorf("log entry %+v: want INFO with the table", e)
		}
		statements = append(statements, fmt.Sprint(e.Details["statement"]))
	}
	joined := strings.Join(statements, "\n")
	for _, want := range []string{
		`CREATE INDEX "items_n_idx" ON "public"."items"`, `ADD CONSTRAINT "items_n_nonneg" CHECK ((n >= 0)) NOT VALID`,
		`ALTER COLUMN "v" SET DEFAULT 'dflt'::text`, `ALTER COLUMN "v" SET NOT NULL`, `RENAME TO "events_k_idx2"`, `DROP INDEX "public"."items_n_idx"`,
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("no \"Schema change applied\" entry with %q; entries:\n%s", want, joined)
		}
	}
	if v, ok := metricValue(s.scrape(token), "pgmirror_schema_changes_applied_total", map[string]string{"mirror": "ddl"}); !ok || v < float64(len(applied)) {
		t.Errorf("pgmirror_schema_changes_applied_total = %v (present %v), want at least %d", v, ok, len(applied))
	}

	s.mustDo("DELETE", "/v1/mirrors/ddl", nil, 200, nil)
	waitFor(t, "the DDL capture trigger removed from the source", 60*time.Second, func() bool { return eventTriggers(t, src) == 0 })
}

// TestCaptureDDLNeedsSuperuser: capture_ddl with a source peer user that
// is not a superuser is refused with a 400 that says what is needed, and
// the same mirror without it is created.
func TestCaptureDDLNeedsSuperuser(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := fmt.Sprintf("ddl_user_%d", time.Now().UnixNano()%1_000_000_000)
	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	exec1(t, src, fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD 'ddl-secret-pw'; GRANT CREATE, CONNECT ON DATABASE %q TO %s;
		CREATE TABLE public.t (id int PRIMARY KEY, v text); ALTER TABLE public.t OWNER TO %s`, role, dbName, role, role))
	t.Cleanup(func() {
		exec1(t, src, fmt.Sprintf(`DROP OWNED BY %s CASCADE`, role))
		pgtest.Exec(t, pgtest.SourceCluster(t).URL("postgres"), `DROP ROLE IF EXISTS `+role)
	})
	u.User = url.UserPassword(role, "ddl-secret-pw")
	s := startService(t, catalog)
	s.createPeer("src", u.String())
	s.createPeer("dst", dst)
	body := map[string]any{
		"name": "plain", "source_peer": "src", "destination_peer": "dst",
		"table_mappings": []any{mapping("public", "t", "public", "t")}, "capture_ddl": true,
	}
	var e struct {
		Error string `json:"error"`
	}
	if code := s.do("POST", "/v1/mirrors", body, &e); code != 400 || !strings.Contains(e.Error, "superuser") || !strings.Contains(e.Error, "capture_ddl") {
		t.Fatalf("POST /v1/mirrors with capture_ddl and a plain source user: %d %q, want 400 naming capture_ddl and superuser", code, e.Error)
	}
	if strings.Contains(e.Error, "ddl-secret-pw") {
		t.Fatal("the error shows the password")
	}
	if n := eventTriggers(t, src); n != 0 {
		t.Fatalf("%d event triggers on the source after the refusal", n)
	}
	delete(body, "capture_ddl")
	s.mustDo("POST", "/v1/mirrors", body, 201, nil)
}

// TestCaptureDDLShared: two mirrors of one source database share the DDL
// capture trigger; each applies the changes of its own tables only; a
// trigger removed by hand is installed again by the next run; deleting the
// first mirror keeps the trigger, deleting the second removes it.
func TestCaptureDDLShared(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text); CREATE TABLE public.b (id int PRIMARY KEY, v text);`)
	for _, name := range []string{"a", "b"} {
		s.mustDo("POST", "/v1/mirrors", map[string]any{
			"name": name, "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
			"table_mappings": []any{mapping("public", name, "public", name)},
		}, 201, nil)
		s.dumpOnFailure(name)
	}
	s.waitStatus("a", "running", 60*time.Second)
	s.waitStatus("b", "running", 60*time.Second)
	exec1(t, src, `CREATE INDEX a_v ON public.a (v); CREATE INDEX b_v ON public.b (v); INSERT INTO public.a VALUES (1, 'x'); INSERT INTO public.b VALUES (1, 'y')`)
	destHas(t, dst, "index a_v", `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_v'`)
	destHas(t, dst, "index b_v", `SELECT count(*) FROM pg_indexes WHERE indexname = 'b_v'`)
	for _, name := range []string{"a", "b"} {
		for _, e := range s.logsWith(name, "Schema change applied") {
			if st := fmt.Sprint(e.Details["statement"]); !strings.Contains(st, `"public"."`+name+`"`) {
				t.Errorf("mirror %s applied %q, a change of another mirror's table", name, st)
			}
		}
	}
	// Removed by hand: the next run of a mirror installs it again, with a
	// new key, and changes replicate again.
	exec1(t, src, `DROP EVENT TRIGGER pgmirror_ddl_command_end; DROP EVENT TRIGGER pgmirror_ddl_sql_drop; DROP TABLE _pgmirror.pgmirror_ddl_key`)
	s.mustDo("POST", "/v1/mirrors/b/pause", nil, 200, nil)
	s.waitStatus("b", "paused", 60*time.Second)
	s.mustDo("POST", "/v1/mirrors/b/resume", nil, 200, nil)
	s.waitLog("b", "DDL capture trigger installed", 60*time.Second, nil)
	s.waitStatus("b", "running", 60*time.Second)
	exec1(t, src, `CREATE INDEX b_v2 ON public.b (v, id)`)
	destHas(t, dst, "index b_v2", `SELECT count(*) FROM pg_indexes WHERE indexname = 'b_v2'`)

	s.mustDo("DELETE", "/v1/mirrors/a", nil, 200, nil)
	waitFor(t, "mirror a purged", 60*time.Second, func() bool {
		return s.do("GET", "/v1/mirrors/a", nil, nil) == 404 && queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgmirror_slot_a'`) == 0
	})
	time.Sleep(time.Second)
	if n := eventTriggers(t, src); n != 2 {
		t.Fatalf("%d DDL capture event triggers after deleting one of two mirrors, want 2", n)
	}
	s.mustDo("DELETE", "/v1/mirrors/b", nil, 200, nil)
	waitFor(t, "the DDL capture trigger removed with the last mirror", 60*time.Second, func() bool { return eventTriggers(t, src) == 0 })
}

// TestCaptureDDLSchemaChanges: captured DDL follows schema_changes: stop
// pauses the mirror before the change (nothing applied); switched to warn,
// the resumed mirror logs the statement as not applied and leaves the
// destination as it is; switched to apply, the next change is applied.
func TestCaptureDDLSchemaChanges(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "scddl", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"capture_ddl": true, "schema_changes": "stop", "table_mappings": []any{mapping("public", "a", "public", "a")},
	}, 201, nil)
	s.dumpOnFailure("scddl")
	s.waitStatus("scddl", "running", 60*time.Second)
	exec1(t, src, `INSERT INTO public.a VALUES (1, 'x'); CREATE INDEX a_v ON public.a (v)`)
	s.waitStatus("scddl", "paused", 60*time.Second)
	s.waitLog("scddl", "Mirror paused before a schema change", 10*time.Second, nil)
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_v'`); n != 0 {
		t.Fatal("schema_changes stop: the index was created on the destination")
	}
	s.mustDo("PATCH", "/v1/mirrors/scddl", map[string]any{"schema_changes": "warn"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/scddl/resume", nil, 200, nil)
	s.waitLog("scddl", "Schema change not applied", 60*time.Second, func(e logEntry) bool {
		return strings.Contains(fmt.Sprint(e.Details["change"]), `CREATE INDEX "a_v"`)
	})
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_v'`); n != 0 {
		t.Fatal("schema_changes warn: the index was created on the destination")
	}
	s.mustDo("POST", "/v1/mirrors/scddl/pause", nil, 200, nil)
	s.waitStatus("scddl", "paused", 60*time.Second)
	s.mustDo("PATCH", "/v1/mirrors/scddl", map[string]any{"schema_changes": "apply"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/scddl/resume", nil, 200, nil)
	exec1(t, src, `ALTER TABLE public.a ALTER COLUMN v SET DEFAULT 'd'`)
	destHas(t, dst, "index a_v and default of a.v, applied with the next change",
		`SELECT count(*) FROM information_schema.columns c WHERE table_name = 'a' AND column_name = 'v' AND column_default IS NOT NULL
			AND EXISTS (SELECT 1 FROM pg_indexes WHERE indexname = 'a_v')`)
}

// TestCaptureDDLPatch: capture_ddl turned on with PATCH while paused
// installs the trigger at once and the resumed mirror applies captured DDL;
// turned off, the trigger is removed (no other mirror uses it) and later
// DDL is no longer applied; on a running mirror the PATCH is 409.
func TestCaptureDDLPatch(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "p", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "a", "public", "a")},
	}, 201, nil)
	s.dumpOnFailure("p")
	s.waitStatus("p", "running", 60*time.Second)
	if n := eventTriggers(t, src); n != 0 {
		t.Fatalf("%d event triggers on the source of a mirror without capture_ddl", n)
	}
	var e struct {
		Error string `json:"error"`
	}
	if code := s.do("PATCH", "/v1/mirrors/p", map[string]any{"capture_ddl": true}, &e); code != 409 || !strings.Contains(e.Error, "not paused") {
		t.Fatalf("PATCH capture_ddl on a running mirror: %d %q, want 409 saying it is not paused", code, e.Error)
	}
	if n := eventTriggers(t, src); n != 0 {
		t.Fatal("a refused PATCH installed the trigger")
	}
	s.mustDo("POST", "/v1/mirrors/p/pause", nil, 200, nil)
	s.waitStatus("p", "paused", 60*time.Second)
	var got struct {
		CaptureDDL bool `json:"capture_ddl"`
	}
	s.mustDo("PATCH", "/v1/mirrors/p", map[string]any{"capture_ddl": true}, 200, &got)
	if !got.CaptureDDL || eventTriggers(t, src) != 2 {
		t.Fatalf("after PATCH capture_ddl true: capture_ddl %v, %d event triggers; want true and 2", got.CaptureDDL, eventTriggers(t, src))
	}
	s.mustDo("POST", "/v1/mirrors/p/resume", nil, 200, nil)
	s.waitStatus("p", "running", 60*time.Second)
	exec1(t, src, `CREATE INDEX a_v ON public.a (v); INSERT INTO public.a VALUES (1, 'x')`)
	destHas(t, dst, "index a_v", `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_v'`)

	s.mustDo("POST", "/v1/mirrors/p/pause", nil, 200, nil)
	s.waitStatus("p", "paused", 60*time.Second)
	s.mustDo("PATCH", "/v1/mirrors/p", map[string]any{"capture_ddl": false}, 200, &got)
	if got.CaptureDDL || eventTriggers(t, src) != 0 {
		t.Fatalf("after PATCH capture_ddl false: capture_ddl %v, %d event triggers; want false and 0", got.CaptureDDL, eventTriggers(t, src))
	}
	s.mustDo("POST", "/v1/mirrors/p/resume", nil, 200, nil)
	s.waitStatus("p", "running", 60*time.Second)
	exec1(t, src, `CREATE INDEX a_id_v ON public.a (id, v); INSERT INTO public.a VALUES (2, 'y')`)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_id_v'`); n != 0 {
		t.Fatal("capture_ddl false: an index created on the source afterwards was created on the destination")
	}
}

// TestCaptureDDLWholeSchema: a mirror of a whole schema that captures DDL
// applies a migration that renames a column and adds one, then an index,
// then copies a table created later: captured DDL (which names its table in
// its payload, not in a Relation) goes through the run's check for tables
// new in a mapped schema without stopping the run.
func TestCaptureDDLWholeSchema(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.ev (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text NOT NULL);
		INSERT INTO public.ev (kind) SELECT 'k' || g FROM generate_series(1, 100) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ws", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
		"table_mappings": []any{mapping("public", "*", "public", "*")},
	}, 201, nil)
	s.dumpOnFailure("ws")
	s.waitStatus("ws", "running", 60*time.Second)
	// A row streamed first: the run then knows the table's columns (see
	// docs/consistency.md, Columns, on a table's first description).
	exec1(t, src, `INSERT INTO public.ev (kind) VALUES ('before')`)
	waitEqual(t, src, dst, "public.ev", "public.ev", "id, kind", 60*time.Second)
	exec1(t, src, `BEGIN; ALTER TABLE public.ev RENAME COLUMN kind TO category; ALTER TABLE public.ev ADD COLUMN score int NOT NULL DEFAULT 7; COMMIT;
		INSERT INTO public.ev (category) VALUES ('after');`)
	waitEqual(t, src, dst, "public.ev", "public.ev", "id, category, score", 60*time.Second)
	exec1(t, src, `CREATE INDEX ev_category ON public.ev (category);
		CREATE TABLE public.later (id int PRIMARY KEY, note text); INSERT INTO public.later SELECT g, 'n' FROM generate_series(1, 50) g;`)
	destHas(t, dst, "index ev_category", `SELECT count(*) FROM pg_indexes WHERE indexname = 'ev_category'`)
	waitEqual(t, src, dst, "public.later", "public.later", "id, note", 60*time.Second)
	if n := queryInt64(t, dst, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'ev' AND column_name = 'kind'`); n != 0 {
		t.Fatal("the renamed column kind is still on the destination")
	}
}

// TestCaptureDDLColumnsFirst: with capture_ddl, a transaction that renames
// or adds a column and creates an index or constraint on it gets the
// column change applied first, at the captured change's position, even
// when no row of the table follows: the index and constraint land on the
// destination with it, nothing is refused, and the data stays equal.
func TestCaptureDDLColumnsFirst(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text, w int, n int);
		INSERT INTO public.a SELECT i, 'v' || i, i, i FROM generate_series(1, 100) i`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "cf", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
		"table_mappings": []any{mapping("public", "a", "public", "a")},
	}, 201, nil)
	s.dumpOnFailure("cf")
	s.waitStatus("cf", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v, w, n", 60*time.Second)

	// No row of a after the rename: only the captured change tells.
	exec1(t, src, `BEGIN; ALTER TABLE public.a RENAME COLUMN v TO v2; CREATE INDEX a_v2 ON public.a (v2); COMMIT`)
	destHas(t, dst, "index a_v2", `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND indexname = 'a_v2' AND indexdef LIKE '%(v2)%'`)
	if got := tableColumns(t, dst, "public.a"); got != "id integer, v2 text, w integer, n integer" {
		t.Fatalf("destination columns %q after the rename", got)
	}

	// Added, dropped and renamed columns with an index, a constraint and
	// NOT NULL on them, and rows around them.
	exec1(t, src, `BEGIN;
		INSERT INTO public.a VALUES (101, 'x', 1, 1001);
		ALTER TABLE public.a ADD COLUMN c varchar(12) DEFAULT 'c';
		ALTER TABLE public.a DROP COLUMN w;
		ALTER TABLE public.a RENAME COLUMN n TO n2;
		CREATE UNIQUE INDEX a_n2_c ON public.a (n2, c);
		ALTER TABLE public.a ADD CONSTRAINT a_c_check CHECK (c <> '');
		ALTER TABLE public.a ALTER COLUMN n2 SET NOT NULL;
		INSERT INTO public.a VALUES (102, 'y', 1002, 'cc');
		COMMIT`)
	destHas(t, dst, "index a_n2_c", `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND indexname = 'a_n2_c'`)
	destHas(t, dst, "constraint a_c_check", `SELECT count(*) FROM pg_constraint WHERE conname = 'a_c_check'`)
	want := tableColumns(t, src, "public.a")
	waitFor(t, "the source's columns", 60*time.Second, func() bool { return tableColumns(t, dst, "public.a") == want })
	destHas(t, dst, "n2 NOT NULL", `SELECT count(*) FROM pg_attribute WHERE attrelid = 'public.a'::regclass AND attname = 'n2' AND attnotnull`)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v2, n2, c", 60*time.Second)

	// A constraint dropped and a row it would refuse right after it: the
	// drop reaches the destination first.
	exec1(t, src, `BEGIN; ALTER TABLE public.a DROP CONSTRAINT a_c_check; INSERT INTO public.a VALUES (103, 'z', 1003, ''); COMMIT`)
	exec1(t, src, `BEGIN; ALTER TABLE public.a ALTER COLUMN n2 DROP NOT NULL; INSERT INTO public.a VALUES (104, 'z', NULL, 'd'); COMMIT`)
	// The same inside a savepoint, as migration tools run each step.
	exec1(t, src, `BEGIN; SAVEPOINT step; ALTER TABLE public.a ADD CONSTRAINT a_z CHECK (c <> 'zz');
		RELEASE SAVEPOINT step; INSERT INTO public.a VALUES (105, 'z', 1005, 'z'); COMMIT`)
	exec1(t, src, `BEGIN; SAVEPOINT step; ALTER TABLE public.a DROP CONSTRAINT a_z; RELEASE SAVEPOINT step;
		INSERT INTO public.a VALUES (106, 'z', 1006, 'zz'); COMMIT`)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v2, n2, c", 60*time.Second)
	if m := s.mirror("cf"); m.Status != "running" || m.ErrorCount != 0 {
		t.Errorf("status %s with %d errors after the drops, want running without errors", m.Status, m.ErrorCount)
	}

	s.noWarnings("cf")
}

// TestCaptureDDLSharedOtherPeer: two mirrors read one source database
// through two peers that name it differently (127.0.0.1 and localhost).
// Turning capture_ddl off on one, then deleting it, leaves the trigger for
// the other (found by its replication slot in that database), whose DDL keeps
// replicating; deleting the other removes the trigger.
func TestCaptureDDLSharedOtherPeer(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text); CREATE TABLE public.b (id int PRIMARY KEY, v text);`)
	u, err := url.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	alias := "localhost"
	if u.Hostname() == "localhost" {
		alias = "127.0.0.1"
	}
	u.Host = alias + ":" + u.Port()
	s.createPeer("src_alias", u.String())
	for name, peer := range map[string]string{"a": "src", "b": "src_alias"} {
		s.mustDo("POST", "/v1/mirrors", map[string]any{
			"name": name, "source_peer": peer, "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
			"table_mappings": []any{mapping("public", name, "public", name)},
		}, 201, nil)
		s.dumpOnFailure(name)
	}
	s.waitStatus("a", "running", 60*time.Second)
	s.waitStatus("b", "running", 60*time.Second)

	s.mustDo("POST", "/v1/mirrors/a/pause", nil, 200, nil)
	s.waitStatus("a", "paused", 60*time.Second)
	s.mustDo("PATCH", "/v1/mirrors/a", map[string]any{"capture_ddl": false}, 200, nil)
	if n := eventTriggers(t, src); n != 2 {
		t.Fatalf("%d DDL capture event triggers after capture_ddl turned off on one of two mirrors of the database, want 2", n)
	}
	s.mustDo("PATCH", "/v1/mirrors/a", map[string]any{"capture_ddl": true}, 200, nil)
	s.mustDo("DELETE", "/v1/mirrors/a", nil, 200, nil)
	waitFor(t, "mirror a purged", 60*time.Second, func() bool {
		return s.do("GET", "/v1/mirrors/a", nil, nil) == 404 && queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgmirror_slot_a'`) == 0
	})
	time.Sleep(time.Second)
	if n := eventTriggers(t, src); n != 2 {
		t.Fatalf("%d DDL capture event triggers after deleting one of two mirrors of the database (other peer), want 2", n)
	}
	exec1(t, src, `CREATE INDEX b_v ON public.b (v); INSERT INTO public.b VALUES (1, 'y')`)
	destHas(t, dst, "index b_v", `SELECT count(*) FROM pg_indexes WHERE indexname = 'b_v'`)

	s.mustDo("DELETE", "/v1/mirrors/b", nil, 200, nil)
	waitFor(t, "the DDL capture trigger removed with the last mirror", 60*time.Second, func() bool { return eventTriggers(t, src) == 0 })
}

// TestCaptureDDLReportedOnce: a captured change whose batch fails on the
// destination (a row the destination's own CHECK refuses, in the same
// source transaction) is not reported as applied while the batch keeps
// failing; once the destination lets the row in, the change is applied
// and logged exactly once.
func TestCaptureDDLReportedOnce(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text)`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "ro", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
		"table_mappings": []any{mapping("public", "a", "public", "a")},
	}, 201, nil)
	s.dumpOnFailure("ro")
	s.waitStatus("ro", "running", 60*time.Second)
	exec1(t, dst, `ALTER TABLE public.a ADD CONSTRAINT dest_only CHECK (v <> 'refused')`)
	exec1(t, src, `BEGIN; CREATE INDEX a_v ON public.a (v); INSERT INTO public.a VALUES (1, 'refused'); COMMIT`)
	applied := func() int {
		n := 0
		for _, e := range s.logs("ro", "") {
			if e.Message == "Schema change applied" && strings.Contains(fmt.Sprint(e.Details["statement"]), "a_v") {
				n++
			}
		}
		return n
	}
	waitFor(t, "the batch to fail", 60*time.Second, func() bool { return s.mirror("ro").ErrorCount >= 2 })
	if n := applied(); n != 0 {
		t.Fatalf("%d Schema change applied entries for a change whose batch failed", n)
	}
	exec1(t, dst, `ALTER TABLE public.a DROP CONSTRAINT dest_only`)
	s.mustDo("POST", "/v1/mirrors/ro/retry", nil, 200, nil)
	destHas(t, dst, "index a_v", `SELECT count(*) FROM pg_indexes WHERE indexname = 'a_v'`)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	s.waitStatus("ro", "running", 60*time.Second)
	if n := applied(); n != 1 {
		t.Errorf("%d Schema change applied entries for the index, want 1", n)
	}
}
