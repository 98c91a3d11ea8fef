package exprcheck

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestParse(t *testing.T) {
	t.Parallel()
	r := Parse(`{OPEXPR :opno 96 :opfuncid 65 :opresulttype 16 :opretset false :args ({VAR :varno 1 :vartype 23} {CONST :consttype 23 :constvalue 4 [ 1 0 0 0 0 0 0 0 ]}) :location 7} {ROWCOMPARE :opnos (o 97 521) :funcid 0}`)
	require.Equal(t, []uint32{65}, r.Funcs)
	require.Equal(t, []uint32{96, 97, 521}, r.Ops)
	require.Equal(t, []uint32{16, 23}, r.Types)
}

// TestCheck reads real node trees from a database where a non-superuser
// planted functions, operators and a domain, and checks the verdicts.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `
CREATE FUNCTION public.f(integer) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $$BEGIN RETURN true; END$$;
CREATE FUNCTION public.eq(integer, integer) RETURNS boolean IMMUTABLE LANGUAGE sql AS 'SELECT $1 = $2';
CREATE OPERATOR public.=== (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.eq);
CREATE DOMAIN public.bad AS integer CHECK (public.f(VALUE));
CREATE DOMAIN public.good AS integer CHECK (VALUE > 0);
CREATE TYPE public.pair AS (a integer, b public.bad);
CREATE SEQUENCE public.s;
CREATE TABLE public.t (
  id integer PRIMARY KEY,
  a integer DEFAULT nextval('public.s'),
  b timestamptz DEFAULT now(),
  c uuid DEFAULT gen_random_uuid(),
  d text DEFAULT pg_catalog.current_setting('data_directory'),
  e integer DEFAULT 1,
  CONSTRAINT ok CHECK (id > 0 AND lower('X') = 'x' AND e::public.good > 0),
  CONSTRAINT xml CHECK (CASE WHEN current_user = 'app' OR id <> 1 THEN true ELSE query_to_xml('SELECT 1', true, true, '') IS NOT NULL END),
  CONSTRAINT usr CHECK (public.f(id)),
  CONSTRAINT op CHECK (id OPERATOR(public.===) id),
  CONSTRAINT dom CHECK ((id::public.bad) > 0),
  CONSTRAINT comp CHECK ((NULL::public.pair) IS NULL)
);`)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	c := New(conn)
	verdict := func(sql string) string {
		t.Helper()
		var tree string
		require.NoError(t, conn.QueryRow(ctx, sql).Scan(&tree))
		reason, err := c.Check(ctx, tree)
		require.NoError(t, err)
		return reason
	}
	con := func(name string) string {
		return verdict(`SELECT conbin::text FROM pg_constraint WHERE conrelid = 'public.t'::regclass AND conname = '` + name + `'`)
	}
	def := func(col string) string {
		return verdict(`SELECT adbin::text FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum WHERE d.adrelid = 'public.t'::regclass AND a.attname = '` + col + `'`)
	}
	require.Empty(t, con("ok"))
	require.Contains(t, con("xml"), "query_to_xml")
	require.Contains(t, con("xml"), "runs SQL")
	require.Contains(t, con("usr"), "public.f(integer), which is not a built-in function")
	require.Contains(t, con("op"), "operator public.===")
	require.Contains(t, con("dom"), "uses type bad")
	require.Contains(t, con("dom"), "public.f(integer)")
	require.Contains(t, con("comp"), "uses type pair")
	for _, col := range []string{"a", "b", "c", "e"} {
		require.Empty(t, def(col), col)
	}
	require.Contains(t, def("d"), "current_setting")
}
