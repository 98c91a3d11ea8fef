package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// The hostile-tenant suite for expressions and writes: a role without any
// special right (app_*) owns schema app and its tables, as the
// application's role does in a migration, while the peers connect as the
// clusters' superuser. The tenant plants code that calls nextval on
// canary.seq, a sequence only a superuser may use: the canary moves only
// when the tenant's code runs with a superuser's privileges, and nextval
// is never rolled back, so not even a failed statement hides it.

var hostileSeq atomic.Int64

// plantTenant creates, in the database at dbURL, role (when the cluster
// lacks it), the canary, schema app owned by role, and role's functions
// app.spy(integer) (an IMMUTABLE plpgsql function that tries the canary
// and returns true) and app.spy_int(integer) (returns its argument).
func plantTenant(t *testing.T, dbURL, role string) {
	t.Helper()
	exec1(t, dbURL, fmt.Sprintf(`
DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s NOLOGIN; END IF; END$$;
CREATE SCHEMA canary; CREATE SEQUENCE canary.seq; REVOKE ALL ON SCHEMA canary FROM PUBLIC;
CREATE SCHEMA app AUTHORIZATION %[1]s;
SET ROLE %[1]s;
CREATE FUNCTION app.spy(integer) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN
  BEGIN PERFORM pg_catalog.nextval('canary.seq'); EXCEPTION WHEN insufficient_privilege OR invalid_schema_name THEN NULL; END;
  RETURN true;
END$f$;
CREATE FUNCTION app.spy_int(integer) RETURNS integer IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN PERFORM app.spy($1); RETURN $1; END$f$;
CREATE FUNCTION app.spy_trigger() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN PERFORM app.spy(0); RETURN NEW; END$f$;
RESET ROLE;`, role))
}

// tenantRole returns a role name of its own for a test (roles are shared
// by the databases of a cluster).
func tenantRole(prefix string) string {
	return fmt.Sprintf("app_%s_%d_%d", prefix, time.Now().UnixNano()%1_000_000, hostileSeq.Add(1))
}

// requireCanary fails the test when the tenant's code ran as a superuser
// on the database at dbURL.
func requireCanary(t *testing.T, dbURL, side string) {
	t.Helper()
	if n := queryInt64(t, dbURL, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM canary.seq`); n != 0 {
		t.Errorf("the tenant's code ran %d times with the %s peer's superuser privileges", n, side)
	}
}

// TestHostileExpressions: a table owner's CHECK that runs SQL through
// query_to_xml when it is not the one evaluating it, a DEFAULT and a
// generated column calling its own function, function-based and partial
// indexes calling its IMMUTABLE plpgsql function, an enum, and a domain
// whose CHECK calls its function: the destination gets the table, the
// rows, the enum and everything built in, never the tenant's code; the
// same expressions added later through captured DDL are left out too;
// each is named in a WARN log entry and in the cut-over's not-carried
// list; and no code of the tenant ran as the superuser on either side.
func TestHostileExpressions(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := tenantRole("expr")
	plantTenant(t, src, role)
	plantTenant(t, dst, role)
	exec1(t, src, fmt.Sprintf(`SET ROLE %[1]s;
CREATE DOMAIN app.dom AS integer CONSTRAINT spying CHECK (app.spy(VALUE)) CONSTRAINT positive CHECK (VALUE > 0);
CREATE TYPE app.mood AS ENUM ('sad', 'ok');
CREATE TABLE app.t (
  id integer PRIMARY KEY,
  d integer DEFAULT app.spy_int(7),
  g integer GENERATED ALWAYS AS (app.spy_int(id)) STORED,
  dm app.dom,
  m app.mood DEFAULT 'ok',
  n integer DEFAULT 3,
  CONSTRAINT xml CHECK (CASE WHEN current_user = '%[1]s' OR id <> 1 THEN true
    ELSE query_to_xml('SELECT pg_catalog.nextval(''canary.seq'')', true, true, '') IS NOT NULL END),
  CONSTRAINT positive CHECK (id > 0)
);
CREATE INDEX t_spy ON app.t ((app.spy_int(id)));
CREATE INDEX t_partial ON app.t (n) WHERE app.spy(n);
CREATE INDEX t_plain ON app.t ((n * 2));
INSERT INTO app.t (id, dm, m) SELECT g, g, 'sad' FROM generate_series(1, 50) g;
RESET ROLE;
ALTER TABLE app.t REPLICA IDENTITY DEFAULT;`, role))
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "hostile", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "capture_ddl": true,
		"table_mappings": []any{mapping("app", "t", "app", "t")},
	}, 201, nil)
	s.dumpOnFailure("hostile")
	s.waitStatus("hostile", "running", 90*time.Second)
	const cols = "id, d, dm, m, n"
	waitEqual(t, src, dst, "app.t", "app.t", cols, 60*time.Second)
	// The indexes and constraints come after the copy.
	destHas(t, dst, "index t_plain", `SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND indexname = 't_plain'`)
	destHas(t, dst, "constraint positive", `SELECT count(*) FROM pg_constraint WHERE conrelid = 'app.t'::regclass AND conname = 'positive'`)

	// Changes flow, and captured DDL adds the same kinds of code.
	exec1(t, src, fmt.Sprintf(`SET ROLE %[1]s;
INSERT INTO app.t (id, dm) VALUES (51, 51);
ALTER TABLE app.t ADD CONSTRAINT xml2 CHECK (CASE WHEN current_user = '%[1]s' OR id <> 2 THEN true
    ELSE query_to_xml('SELECT pg_catalog.nextval(''canary.seq'')', true, true, '') IS NOT NULL END);
ALTER TABLE app.t ADD CONSTRAINT ok2 CHECK (n < 1000);
CREATE INDEX t_spy2 ON app.t ((app.spy_int(n)));
ALTER TABLE app.t ALTER COLUMN n SET DEFAULT app.spy_int(4);
INSERT INTO app.t (id, dm) VALUES (52, 52);`, role))
	destHas(t, dst, "constraint ok2", `SELECT count(*) FROM pg_constraint WHERE conrelid = 'app.t'::regclass AND conname = 'ok2'`)
	waitEqual(t, src, dst, "app.t", "app.t", "id, d, dm, m", 60*time.Second)

	for _, absent := range []string{
		`SELECT count(*) FROM pg_constraint WHERE conrelid = 'app.t'::regclass AND conname IN ('xml', 'xml2')`,
		`SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND indexname IN ('t_spy', 't_partial', 't_spy2')`,
		`SELECT count(*) FROM pg_attrdef WHERE adrelid = 'app.t'::regclass AND pg_get_expr(adbin, adrelid) LIKE '%spy%'`,
		`SELECT count(*) FROM pg_constraint WHERE contypid = 'app.dom'::regtype AND conname = 'spying'`,
	} {
		if n := queryInt64(t, dst, absent); n != 0 {
			t.Errorf("the destination has the tenant's code: %s counts %d", absent, n)
		}
	}
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_constraint WHERE contypid = 'app.dom'::regtype AND conname = 'positive'`); n != 1 {
		t.Error("the domain's built-in CHECK was not carried")
	}

	// The operator is told, in WARN entries, about each of them.
	var warned []string
	for _, e := range s.logs("hostile", "") {
		if e.Level == "WARN" {
			warned = append(warned, fmt.Sprint(e.Details))
		}
	}
	all := strings.Join(warned, "\n")
	for _, want := range []string{
		`default of column "d" of app.t is not carried to the destination: it calls app.spy_int(integer), which is not a built-in function`,
		`generated column "g" of app.t is not carried to the destination as generated`,
		`CHECK constraint "spying" of domain app.dom is not carried`,
		`constraint "xml" of app.t is not carried to the destination: it calls query_to_xml(text,boolean,boolean,text), a built-in function that runs SQL or reaches the server`,
		`index "t_spy" of app.t is not carried`, `index "t_partial" of app.t is not carried`,
		`constraint "xml2" of app.t is not carried`, `index "t_spy2" of app.t is not carried`, `default of column "n" of app.t is not carried`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no WARN entry says %q; WARN entries:\n%s", want, all)
		}
	}

	// The cut-over lists what was not carried.
	var done struct {
		Status   string   `json:"status"`
		Warnings []string `json:"warnings"`
	}
	s.mustDo("POST", "/v1/mirrors/hostile/cutover", map[string]any{"quiet_seconds": 1, "drop_slot": true}, 200, &done)
	list := strings.Join(done.Warnings, "\n")
	for _, want := range []string{"expressions of the mirrored tables that pgmirror does not carry", `constraint "xml" on app.t (calls query_to_xml`,
		`constraint "xml2" on app.t`, `index "t_spy" on app.t`, `index "t_spy2" on app.t`, `default of column "d" on app.t`, `generated column "g" on app.t`,
		`CHECK constraint "spying" of domain app.dom`} {
		if !strings.Contains(list, want) {
			t.Errorf("the cut-over's warnings do not name %q:\n%s", want, list)
		}
	}
	// Rows the application now writes on the destination, as the
	// superuser, still run none of the tenant's code.
	exec1(t, dst, `INSERT INTO app.t (id, dm) VALUES (1000, 7)`)
	requireCanary(t, src, "source")
	requireCanary(t, dst, "destination")
}

// TestHostileTriggerOnDestination: the destination table already exists,
// owned by the tenant, with an ENABLE ALWAYS trigger and an ENABLE ALWAYS
// rule calling its code. pgmirror would fire them with its superuser
// privileges (session_replication_role replica fires ALWAYS ones), so it
// refuses to write into the table and says why and what to do; once the
// operator disables them, the same mirror copies and replicates the rows
// and ends equal, and the tenant's code never ran as the superuser.
func TestHostileTriggerOnDestination(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := tenantRole("trg")
	plantTenant(t, src, role)
	plantTenant(t, dst, role)
	exec1(t, src, fmt.Sprintf(`SET ROLE %[1]s;
CREATE TABLE app.t (id integer PRIMARY KEY, v text);
INSERT INTO app.t SELECT g, 'v' || g FROM generate_series(1, 20) g;`, role))
	exec1(t, dst, fmt.Sprintf(`SET ROLE %[1]s;
CREATE TABLE app.t (id integer PRIMARY KEY, v text);
CREATE TRIGGER spying BEFORE INSERT OR UPDATE ON app.t FOR EACH ROW EXECUTE FUNCTION app.spy_trigger();
ALTER TABLE app.t ENABLE ALWAYS TRIGGER spying;
CREATE RULE spying_rule AS ON INSERT TO app.t DO ALSO SELECT app.spy(NEW.id);
ALTER TABLE app.t ENABLE ALWAYS RULE spying_rule;`, role))
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "trg", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("app", "t", "app", "t")},
	}, 201, nil)
	s.dumpOnFailure("trg")
	m := s.waitMirror("trg", "the refusal", 90*time.Second, func(m fullStatus) bool {
		return m.ErrorCount > 0 && strings.Contains(m.ErrorMessage, "would run code that role")
	})
	for _, want := range []string{`"app"."t"`, role, `trigger spying (app.spy_trigger())`, "rule spying_rule", "pgmirror does not write into it", "DISABLE TRIGGER"} {
		if !strings.Contains(m.ErrorMessage, want) {
			t.Errorf("the error does not say %q: %s", want, m.ErrorMessage)
		}
	}
	if n := queryInt64(t, dst, `SELECT count(*) FROM app.t`); n != 0 {
		t.Errorf("%d rows were written into the refused table", n)
	}
	requireCanary(t, dst, "destination")

	// The operator disables the tenant's code; the mirror goes on.
	exec1(t, dst, `ALTER TABLE app.t DISABLE TRIGGER spying; ALTER TABLE app.t DISABLE RULE spying_rule`)
	s.mustDo("POST", "/v1/mirrors/trg/retry", nil, 200, nil)
	s.waitStatus("trg", "running", 90*time.Second)
	exec1(t, src, fmt.Sprintf(`SET ROLE %s; INSERT INTO app.t VALUES (21, 'later'); UPDATE app.t SET v = 'changed' WHERE id = 3`, role))
	waitEqual(t, src, dst, "app.t", "app.t", "id, v", 60*time.Second)

	// The tenant enables the trigger again while the mirror runs: the next
	// batch is refused before it writes anything.
	exec1(t, dst, `ALTER TABLE app.t ENABLE ALWAYS TRIGGER spying`)
	exec1(t, src, fmt.Sprintf(`SET ROLE %s; INSERT INTO app.t VALUES (22, 'refused')`, role))
	s.waitMirror("trg", "the refusal of the next batch", 90*time.Second, func(m fullStatus) bool {
		return m.ErrorCount > 0 && strings.Contains(m.ErrorMessage, "trigger spying")
	})
	if n := queryInt64(t, dst, `SELECT count(*) FROM app.t WHERE id = 22`); n != 0 {
		t.Error("the row was written into the refused table")
	}
	requireCanary(t, src, "source")
	requireCanary(t, dst, "destination")
}

// TestHostileTriggerOnSourceReverse: the tenant's source table has an
// ENABLE ALWAYS trigger calling its code. The forward mirror only reads
// the source, so it copies and replicates the table and cuts over. The
// reverse mirror would write into the tenant's table as the source peer's
// superuser and fire the trigger: it refuses, naming the trigger, and the
// tenant's code never ran as the superuser on either side.
func TestHostileTriggerOnSourceReverse(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := tenantRole("rev")
	plantTenant(t, src, role)
	plantTenant(t, dst, role)
	exec1(t, src, fmt.Sprintf(`SET ROLE %[1]s;
CREATE TABLE app.t (id integer PRIMARY KEY, v text);
INSERT INTO app.t SELECT g, 'v' || g FROM generate_series(1, 20) g;
CREATE TRIGGER spying BEFORE INSERT OR UPDATE ON app.t FOR EACH ROW EXECUTE FUNCTION app.spy_trigger();
ALTER TABLE app.t ENABLE ALWAYS TRIGGER spying;`, role))
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "fwd", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("app", "t", "app", "t")},
	}, 201, nil)
	s.dumpOnFailure("fwd")
	s.waitStatus("fwd", "running", 90*time.Second)
	exec1(t, src, fmt.Sprintf(`SET ROLE %s; INSERT INTO app.t VALUES (21, 'cdc')`, role))
	waitEqual(t, src, dst, "app.t", "app.t", "id, v", 60*time.Second)

	var done struct {
		Status string `json:"status"`
	}
	s.mustDo("POST", "/v1/mirrors/fwd/cutover", map[string]any{"quiet_seconds": 1, "drop_slot": true, "reverse_mirror_name": "back"}, 200, &done)
	if done.Status != "completed" {
		t.Fatalf("cut-over: %+v", done)
	}
	s.dumpOnFailure("back")
	exec1(t, dst, `INSERT INTO app.t VALUES (100, 'on the new side')`)
	m := s.waitMirror("back", "the reverse mirror's refusal", 120*time.Second, func(m fullStatus) bool {
		return m.ErrorCount > 0 && strings.Contains(m.ErrorMessage, "trigger spying (app.spy_trigger())")
	})
	if !strings.Contains(m.ErrorMessage, "would run code that role "+role) {
		t.Errorf("the reverse mirror's error does not name the owner: %s", m.ErrorMessage)
	}
	if n := queryInt64(t, src, `SELECT count(*) FROM app.t WHERE id = 100`); n != 0 {
		t.Error("the reverse mirror wrote into the trapped source table")
	}
	requireCanary(t, src, "source")
	requireCanary(t, dst, "destination")
}
