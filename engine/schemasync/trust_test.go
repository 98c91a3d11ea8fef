package schemasync

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

var tenantSeq atomic.Int64

// hostileTenant makes, in the database at url, a role that owns schema app
// and functions there that call nextval on canary.seq, a sequence only a
// superuser may use: the canary moves only when the tenant's code runs
// with a superuser's privileges (nextval is never rolled back). It returns
// the role's name.
func hostileTenant(t *testing.T, url, role string) {
	t.Helper()
	pgtest.Exec(t, url, fmt.Sprintf(`
DO $$BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '%[1]s') THEN CREATE ROLE %[1]s NOLOGIN; END IF; END$$;
CREATE SCHEMA canary; CREATE SEQUENCE canary.seq;
REVOKE ALL ON SCHEMA canary FROM PUBLIC;
CREATE SCHEMA app AUTHORIZATION %[1]s;
SET ROLE %[1]s;
CREATE FUNCTION app.spy(integer) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN
  BEGIN PERFORM pg_catalog.nextval('canary.seq'); EXCEPTION WHEN insufficient_privilege OR invalid_schema_name THEN NULL; END;
  RETURN true;
END$f$;
CREATE FUNCTION app.spy_int(integer) RETURNS integer IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN PERFORM app.spy($1); RETURN $1; END$f$;
RESET ROLE;`, role))
}

// canaryUntouched fails the test when the tenant's code ran as a
// superuser on the database at url.
func canaryUntouched(t *testing.T, b *testBundle, url string) {
	t.Helper()
	var called bool
	conn := connect(t, url)
	require.NoError(t, conn.QueryRow(b.ctx, `SELECT is_called FROM canary.seq`).Scan(&called))
	require.False(t, called, "the tenant's code ran with the superuser's privileges")
}

// TestHostileExpressionsNotCarried: a table owner's CHECK, DEFAULT,
// generated column, index and domain calling its own code (or a built-in
// that runs SQL from text) are left out of the destination table, with a
// warning each; everything else is created; and none of the owner's code
// runs as the destination's superuser, neither at creation nor when rows
// are written.
func TestHostileExpressionsNotCarried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	role := fmt.Sprintf("app_ss_%d_%d", time.Now().UnixNano()%1e6, tenantSeq.Add(1))
	hostileTenant(t, b.srcURL, role)
	hostileTenant(t, b.dstURL, role)
	pgtest.Exec(t, b.srcURL, fmt.Sprintf(`SET ROLE %[1]s;
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
  CONSTRAINT spied CHECK (app.spy(id)),
  CONSTRAINT positive CHECK (id > 0)
);
CREATE INDEX t_spy ON app.t ((app.spy_int(id)));
CREATE INDEX t_partial ON app.t (n) WHERE app.spy(n);
CREATE INDEX t_plain ON app.t ((n * 2));
INSERT INTO app.t (id, dm) VALUES (1, 1), (2, 2);`, role))
	m := change.Mapping{Source: change.TableName{Schema: "app", Name: "t"}, Destination: change.TableName{Schema: "app", Name: "t"}}

	report, err := EnsureTablesReport(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	all := strings.Join(report.Warnings, "\n")
	require.Contains(t, all, `default of column "d" of app.t is not carried to the destination: it calls app.spy_int(integer), which is not a built-in function`)
	require.Contains(t, all, `generated column "g" of app.t is not carried to the destination as generated`)
	require.Contains(t, all, `CHECK constraint "spying" of domain app.dom is not carried to the destination: it calls app.spy(integer)`)
	ddl := strings.Join(report.DDL, "\n")
	require.NotContains(t, ddl, "spy")
	require.Contains(t, ddl, `CONSTRAINT "positive" CHECK ((VALUE > 0))`, "the domain's other check is carried")
	require.Contains(t, ddl, `DEFAULT 3`)
	require.Contains(t, ddl, `DEFAULT 'ok'::app.mood`)

	// The rows of a copy, written as the destination's superuser.
	pgtest.Exec(t, b.dstURL, `INSERT INTO app.t (id, d, g, dm, m, n) VALUES (1, 7, 1, 1, 'ok', 3), (2, 7, 2, 2, 'ok', 3); INSERT INTO app.t (id) VALUES (3)`)
	ddlList, warnings, err := AddIndexesAndConstraints(b.ctx, b.src, b.dst, m, AfterCopy)
	require.NoError(t, err)
	all = strings.Join(warnings, "\n")
	for _, w := range []string{
		`constraint "xml" of app.t is not carried to the destination: it calls query_to_xml(text,boolean,boolean,text), a built-in function that runs SQL or reaches the server`,
		`constraint "spied" of app.t is not carried to the destination: it calls app.spy(integer)`,
		`index "t_spy" of app.t is not carried to the destination: it calls app.spy_int(integer)`,
		`index "t_partial" of app.t is not carried to the destination: it calls app.spy(integer)`,
	} {
		require.Contains(t, all, w)
	}
	ddl = strings.Join(ddlList, "\n")
	require.Contains(t, ddl, `ADD CONSTRAINT "positive"`)
	require.Contains(t, ddl, `t_plain`)
	require.NotContains(t, ddl, "spy")
	pgtest.Exec(t, b.dstURL, `INSERT INTO app.t (id, dm) VALUES (4, 4)`)
	canaryUntouched(t, b, b.dstURL)

	// The cut-over's list names each of them, and nothing that was carried.
	list, err := ExpressionsNotCarried(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	all = strings.Join(list, "\n")
	for _, w := range []string{`default of column "d" on app.t (calls app.spy_int(integer)`, `generated column "g" on app.t`,
		`constraint "xml" on app.t (calls query_to_xml`, `constraint "spied" on app.t`, `index "t_spy" on app.t`, `index "t_partial" on app.t`,
		`CHECK constraint "spying" of domain app.dom (calls app.spy(integer)`} {
		require.Contains(t, all, w)
	}
	require.Len(t, list, 7, all)
}
