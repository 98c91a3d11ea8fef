package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// The tests of this file play a table owner who is not pgmirror's user: a
// role (not a superuser) that owns the database, and so its public schema,
// and the application's tables, on the source and the destination, while
// the peers connect as a superuser. Whatever that role plants must never
// run with the peers' privileges.

// hostileRole returns a role name of its own for the database dbURL (roles
// are shared by the databases of a cluster).
func hostileRole(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	return "owner_" + strings.NewReplacer("-", "_", ".", "_").Replace(strings.TrimPrefix(u.Path, "/"))
}

// plantSQL is what the table owner plants in public, its own schema: for
// the functions and operators pgmirror's SQL uses, look-alikes that are an
// exact match for argument types where the built-in needs a cast (and so
// win under the default search_path), or the same signature (which win
// when public comes first). Each records its call in canary.hits, which
// only a superuser may write to (a call by the owner itself writes nothing
// and goes on; one in a read-only transaction, such as a verification's,
// fails it with an error that says so), and then does the built-in's job,
// so that nothing but the canary tells that it ran.
const plantSQL = `
CREATE FUNCTION public.pgmirror_canary(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO canary.hits (what) VALUES (what);
EXCEPTION
  WHEN insufficient_privilege THEN NULL;
  WHEN read_only_sql_transaction THEN
    RAISE EXCEPTION 'canary: the planted % ran as % in a read-only transaction', what, current_user;
END $$;
CREATE FUNCTION public.hashtextextended(t text, seed integer) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('hashtextextended'); RETURN pg_catalog.hashtextextended(t, seed); END $$;
CREATE FUNCTION public.md5(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('md5'); RETURN pg_catalog.md5(t); END $$;
CREATE FUNCTION public.md5(t bytea) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('md5 bytea'); RETURN pg_catalog.md5(t); END $$;
CREATE FUNCTION public.quote_nullable(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('quote_nullable'); RETURN pg_catalog.quote_nullable(t); END $$;
CREATE FUNCTION public.concat_ws(sep text, a text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('concat_ws'); RETURN pg_catalog.concat_ws(sep, a); END $$;
CREATE FUNCTION public.int8and(a bigint, b integer) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('int8and'); RETURN pg_catalog.int8and(a, b); END $$;
CREATE FUNCTION public.substr(t text, a integer, b integer) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('substr'); RETURN pg_catalog.substr(t, a, b); END $$;
CREATE FUNCTION public.current_setting(t text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('current_setting'); RETURN pg_catalog.current_setting(t); END $$;
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('now'); RETURN pg_catalog.now(); END $$;
-- "Casts" written as function calls.
CREATE FUNCTION public.text(v bigint) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('text(bigint)'); RETURN v::pg_catalog.text; END $$;
CREATE FUNCTION public.int8(v text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('int8(text)'); RETURN v::pg_catalog.int8; END $$;
-- Operators.
CREATE FUNCTION public.evil_texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('= text'); RETURN pg_catalog.texteq(a, b); END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_texteq);
CREATE FUNCTION public.evil_int4eq(a integer, b integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('= integer'); RETURN pg_catalog.int4eq(a, b); END $$;
CREATE OPERATOR public.= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int4eq);
CREATE FUNCTION public.evil_int4ge(a integer, b integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('>= integer'); RETURN pg_catalog.int4ge(a, b); END $$;
CREATE OPERATOR public.>= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int4ge);
CREATE FUNCTION public.evil_int4le(a integer, b integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('<= integer'); RETURN pg_catalog.int4le(a, b); END $$;
CREATE OPERATOR public.<= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = public.evil_int4le);
CREATE FUNCTION public.evil_textcat(a text, b text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('|| text'); RETURN pg_catalog.textcat(a, b); END $$;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = public.evil_textcat);
CREATE FUNCTION public.evil_and(a bigint, b integer) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('& bigint integer'); RETURN pg_catalog.int8and(a, b); END $$;
CREATE OPERATOR public.& (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.evil_and);
CREATE FUNCTION public.evil_mod(a bigint, b integer) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN PERFORM public.pgmirror_canary('% bigint integer'); RETURN pg_catalog.int8mod(a, b); END $$;
CREATE OPERATOR public.% (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = public.evil_mod);
`

// makeHostile makes a role of its own the owner of the database dbURL (and
// so of its public schema), creates the superuser-only table canary.hits,
// and plants plantSQL as that role. It proves that the plant works: a
// superuser session with the default search_path that calls
// hashtextextended(text, 0) or md5 as pgmirror once did writes to the
// canary. It returns the role.
func makeHostile(t *testing.T, dbURL string) string {
	t.Helper()
	ctx := context.Background()
	role := ownDatabase(t, dbURL)
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `CREATE SCHEMA canary;
		CREATE TABLE canary.hits (what text, who text DEFAULT current_user, at timestamptz DEFAULT pg_catalog.clock_timestamp());
		SET ROLE `+role+`;`+plantSQL+`RESET ROLE`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT hashtextextended('probe', 0), 5::bigint & 3`)
	require.NoError(t, err)
	require.Equal(t, []string{"& bigint integer", "hashtextextended"}, canaryHits(t, dbURL),
		"the planted functions run as a superuser whose search_path is the default: the canary works")
	exec1(t, dbURL, `TRUNCATE canary.hits`)
	return role
}

// ownDatabase creates a role (LOGIN, not a superuser) and makes it the
// owner of the database dbURL, and so of its public schema. It returns the
// role.
func ownDatabase(t *testing.T, dbURL string) string {
	t.Helper()
	role := hostileRole(t, dbURL)
	var db string
	queryOne(t, dbURL, &db, `SELECT current_database()`)
	exec1(t, dbURL, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN; ALTER DATABASE %[2]s OWNER TO %[1]s`, role, pgx.Identifier{db}.Sanitize()))
	return role
}

// asRole runs sql on dbURL as role (a superuser session that SETs ROLE).
func asRole(t *testing.T, dbURL, role, sql string) {
	t.Helper()
	exec1(t, dbURL, `SET ROLE `+role+`; `+sql+`; RESET ROLE`)
}

// canaryHits returns what planted objects wrote into canary.hits on dbURL,
// and as whom, in name order.
func canaryHits(t *testing.T, dbURL string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT what, who FROM canary.hits ORDER BY what, who`)
	require.NoError(t, err)
	hits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var what, who string
		err := r.Scan(&what, &who)
		return what, err
	})
	require.NoError(t, err)
	return hits
}

// canaryQuiet fails the test when a planted object ran with a superuser's
// privileges on dbURL.
func canaryQuiet(t *testing.T, side, dbURL string) {
	t.Helper()
	require.Empty(t, canaryHits(t, dbURL), "objects the table owner planted on the %s ran with the peer's privileges", side)
}

// TestHostileSearchPath: the table owner on the source and on the
// destination plants look-alikes of the functions, operators and casts
// pgmirror uses. A snapshot, streaming, verifications (row hashes with
// hashtextextended, and with md5 where the databases' encodings differ),
// and a repair run without calling any of them, and still give the right
// answers.
func TestHostileSearchPath(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	// A destination whose encoding differs: rows are hashed with md5 of
	// their UTF8 text there.
	latin := pgtest.NewDatabaseWith(t, pgtest.DestCluster(t), "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0")
	srcRole := makeHostile(t, src)
	dstRole := makeHostile(t, dst)
	latinRole := makeHostile(t, latin)
	asRole(t, src, srcRole, `CREATE SCHEMA shop;
		CREATE TABLE shop.items (id integer PRIMARY KEY, name text NOT NULL, qty bigint);
		CREATE TABLE shop.events (k integer, v text);
		ALTER TABLE shop.events REPLICA IDENTITY FULL;
		INSERT INTO shop.items SELECT g, 'item ' || g, g * 10 FROM generate_series(1, 300) g;
		INSERT INTO shop.events SELECT g % 7, 'event ' || g FROM generate_series(1, 100) g`)
	// On the destination the owner made the tables beforehand (empty).
	for _, d := range []struct{ url, role string }{{dst, dstRole}, {latin, latinRole}} {
		asRole(t, d.url, d.role, `CREATE SCHEMA shop;
			CREATE TABLE shop.items (id integer PRIMARY KEY, name text NOT NULL, qty bigint);
			CREATE TABLE shop.events (k integer, v text)`)
	}

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.createPeer("latin", latin)
	tables := []any{mapping("shop", "items", "shop", "items"), mapping("shop", "events", "shop", "events")}
	for _, m := range []struct{ name, dest string }{{"fast", "dst"}, {"portable", "latin"}} {
		s.mustDo("POST", "/v1/mirrors", map[string]any{"name": m.name, "source_peer": "src", "destination_peer": m.dest,
			"cdc_sync_interval_seconds": 1, "table_mappings": tables}, 201, nil)
		s.dumpOnFailure(m.name)
	}
	for _, name := range []string{"fast", "portable"} {
		s.waitStatus(name, "running", 120*time.Second)
	}
	// Streaming: inserts, updates, deletes, by the owner itself.
	asRole(t, src, srcRole, `INSERT INTO shop.items SELECT g, 'late ' || g, g FROM generate_series(301, 350) g;
		UPDATE shop.items SET name = name || ' changed', qty = qty + 1 WHERE id % 10 = 0;
		DELETE FROM shop.items WHERE id BETWEEN 40 AND 45;
		INSERT INTO shop.events VALUES (100, 'late'), (100, 'late');
		DELETE FROM shop.events WHERE k = 3`)
	for _, d := range []string{dst, latin} {
		waitEqual(t, src, d, "shop.items", "shop.items", "id, name, qty", 90*time.Second)
		waitEqual(t, src, d, "shop.events", "shop.events", "k, v", 90*time.Second)
	}
	// A bulk UPDATE and DELETE of consecutive keys: written as merge joins
	// bounded to the keys' range (the applier's own >= and <=).
	asRole(t, src, srcRole, `UPDATE shop.items SET qty = qty + 2 WHERE id BETWEEN 100 AND 199;
		DELETE FROM shop.items WHERE id BETWEEN 200 AND 229`)
	for _, d := range []string{dst, latin} {
		waitEqual(t, src, d, "shop.items", "shop.items", "id, name, qty", 90*time.Second)
	}

	for _, name := range []string{"fast", "portable"} {
		v := s.runVerify(t, name, nil)
		require.Equal(t, "done", v.State, "%s: %+v %s", name, v, derefS(v.Error))
		require.Equal(t, int64(0), *v.RowsDiffering, "%s: %+v", name, v)
		require.Len(t, v.Tables, 2)
		for _, tb := range v.Tables {
			require.Positive(t, tb.RowsSource, "%s: %+v", name, tb)
		}
	}
	// Differences made on the destinations are found, in both hash forms.
	for _, d := range []string{dst, latin} {
		exec1(t, d, `UPDATE shop.items SET qty = -1 WHERE id = 7; INSERT INTO shop.events VALUES (-5, 'extra')`)
	}
	for _, name := range []string{"fast", "portable"} {
		v := s.runVerify(t, name, nil)
		require.Equal(t, "done", v.State, "%s: %+v %s", name, v, derefS(v.Error))
		items, events := byName(v)["shop.items"], byName(v)["shop.events"]
		require.Equal(t, []string{"(id)=('7')"}, items.Different, "%s: %+v", name, items)
		require.Equal(t, []string{"(-5,extra)"}, events.Extra, "%s: %+v", name, events)
		require.Equal(t, int64(2), *v.RowsDiffering, "%s: %+v", name, v)
	}
	// A repair of the keyed table (the other one fixed by hand).
	exec1(t, dst, `DELETE FROM shop.events WHERE k = -5`)
	v := s.runVerify(t, "fast", map[string]any{"tables": []string{"shop.items"}})
	require.Equal(t, int64(1), *v.RowsDiffering, "%+v", v)
	var repair verifyResult
	s.mustDo("POST", fmt.Sprintf("/v1/mirrors/fast/verifications/%d/repair", v.ID), nil, 202, &repair)
	repaired := s.waitVerify(t, "fast", repair.ID)
	require.Equal(t, "done", repaired.State, "%+v %s", repaired, derefS(repaired.Error))
	require.Equal(t, int64(0), *repaired.RowsDiffering, "%+v", repaired)
	waitEqual(t, src, dst, "shop.items", "shop.items", "id, name, qty", 60*time.Second)

	canaryQuiet(t, "source", src)
	canaryQuiet(t, "destination", dst)
	canaryQuiet(t, "LATIN1 destination", latin)
}

// TestHostilePgmirrorSchema: pgmirror's schema _pgmirror, or an object in
// it, made beforehand by the database's owner is refused, naming it, where
// pgmirror would use it: the peer test, the mirror's creation, and a
// running mirror that reads the DDL signing key again at its next start.
// The other role's objects are never used or taken over.
func TestHostilePgmirrorSchema(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	srcRole := ownDatabase(t, src)
	dstRole := ownDatabase(t, dst)
	exec1(t, src, `CREATE TABLE public.t (id int PRIMARY KEY, v text); INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 50) g`)
	// The destination's owner made _pgmirror, with a positions table of
	// its own.
	asRole(t, dst, dstRole, `CREATE SCHEMA _pgmirror;
		CREATE TABLE _pgmirror.applied (mirror_uid text PRIMARY KEY, lsn pg_lsn NOT NULL, batch_id bigint NOT NULL, updated_at timestamptz)`)

	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	var test struct {
		Success bool   `json:"success"`
		Error   string `json:"error"`
	}
	s.mustDo("POST", "/v1/peers/dst/test", nil, 200, &test)
	require.False(t, test.Success)
	require.Contains(t, test.Error, `schema _pgmirror is owned by role "`+dstRole+`"`)
	s.mustDo("POST", "/v1/peers/src/test", nil, 200, &test)
	require.True(t, test.Success, test.Error)

	body := map[string]any{"name": "m", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")}, "capture_ddl": true}
	var e struct {
		Error string `json:"error"`
	}
	require.Equal(t, 400, s.do("POST", "/v1/mirrors", body, &e))
	for _, want := range []string{`Destination peer "dst"`, `schema _pgmirror is owned by role "` + dstRole + `"`, "DROP SCHEMA _pgmirror CASCADE"} {
		require.Contains(t, e.Error, want)
	}
	require.Equal(t, int64(1), queryInt64(t, dst, `SELECT count(*) FROM pg_class WHERE relnamespace = '_pgmirror'::regnamespace AND relkind = 'r'`),
		"nothing is created in the other role's schema")
	exec1(t, dst, `DROP SCHEMA _pgmirror CASCADE`)

	// On the source, _pgmirror is the superuser's but its owner let the
	// database's owner create in it, and that role made the DDL signing
	// key's table with a key it knows.
	exec1(t, src, `CREATE SCHEMA _pgmirror; GRANT USAGE, CREATE ON SCHEMA _pgmirror TO `+srcRole)
	asRole(t, src, srcRole, `CREATE TABLE _pgmirror.pgmirror_ddl_key (key text NOT NULL);
		INSERT INTO _pgmirror.pgmirror_ddl_key VALUES ('a key the owner knows')`)
	require.Equal(t, 400, s.do("POST", "/v1/mirrors", body, &e))
	for _, want := range []string{`Source peer "src"`, `table _pgmirror.pgmirror_ddl_key is owned by role "` + srcRole + `"`} {
		require.Contains(t, e.Error, want)
	}
	require.Zero(t, queryInt64(t, src, `SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'pgmirror%'`), "no event trigger installed")
	require.Equal(t, 404, s.do("GET", "/v1/mirrors/m", nil, nil))

	// Cleaned up, the mirror starts; then the key's table is handed to the
	// owner (who can then read and replace the key): at the next start the
	// mirror refuses to read it, and stops in error naming it.
	exec1(t, src, `DROP TABLE _pgmirror.pgmirror_ddl_key; REVOKE CREATE ON SCHEMA _pgmirror FROM `+srcRole)
	s.mustDo("POST", "/v1/mirrors", body, 201, nil)
	s.dumpOnFailure("m")
	s.waitStatus("m", "running", 90*time.Second)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 60*time.Second)
	exec1(t, src, `ALTER TABLE _pgmirror.pgmirror_ddl_key OWNER TO `+srcRole)
	s.mustDo("POST", "/v1/mirrors/m/pause", nil, 200, nil)
	s.waitStatus("m", "paused", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/m/resume", nil, 200, nil)
	m := s.waitMirror("m", "the run refuses the key", 90*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	require.Contains(t, m.ErrorMessage, `table _pgmirror.pgmirror_ddl_key is owned by role "`+srcRole+`"`)
	// A schema change made meanwhile is not applied while the key is not
	// trusted.
	exec1(t, src, `ALTER TABLE public.t ADD CONSTRAINT t_v_check CHECK (v <> '')`)
	holdsFor(t, "no constraint replayed on the destination", 3*time.Second, func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM pg_constraint WHERE conname = 't_v_check'`) == 0
	})
}

// TestHostileSchemaMappingExistingRows: a table created on the source in a
// mapped schema after the mirror started, whose name a destination table
// with rows already has, follows existing_destination_rows like any table:
// under refuse (the default) the destination's rows stay and the mirror
// says which table and which setting; set to truncate, the table is
// copied.
func TestHostileSchemaMappingExistingRows(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `CREATE SCHEMA sales; CREATE TABLE sales.a (id int PRIMARY KEY, v text); INSERT INTO sales.a VALUES (1, 'a')`)
	exec1(t, dst, `CREATE SCHEMA sales; CREATE TABLE sales.late (id int PRIMARY KEY, v text);
		INSERT INTO sales.late VALUES (1, 'not the mirror''s'), (2, 'not the mirror''s either')`)
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "sm", "source_peer": "src", "destination_peer": "dst",
		"cdc_sync_interval_seconds": 1, "table_mappings": []any{mapping("sales", "*", "sales", "*")}}, 201, nil)
	s.dumpOnFailure("sm")
	s.waitStatus("sm", "running", 90*time.Second)
	waitEqual(t, src, dst, "sales.a", "sales.a", "id, v", 30*time.Second)

	exec1(t, src, `CREATE TABLE sales.late (id int PRIMARY KEY, v text); INSERT INTO sales.late VALUES (1, 'source'), (3, 'source')`)
	m := s.waitMirror("sm", "the copy of sales.late refused", 90*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	for _, want := range []string{"table sales.late", "holds rows", "existing_destination_rows is refuse", "PUT /v1/mirrors/sm/tables"} {
		require.Contains(t, m.ErrorMessage, want)
	}
	holdsFor(t, "the destination's rows stay", 3*time.Second, func() bool {
		n, _ := tableDigest(t, dst, "(SELECT * FROM sales.late WHERE v LIKE 'not the mirror%') x", "id, v")
		return n == 2 && queryInt64(t, dst, `SELECT count(*) FROM sales.late`) == 2
	})
	// The other table keeps its rows and the mirror's data.
	waitEqual(t, src, dst, "sales.a", "sales.a", "id, v", 30*time.Second)
}
