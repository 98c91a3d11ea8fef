package schemasync

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

type testBundle struct {
	ctx            context.Context
	srcURL, dstURL string
	src, dst       *pgx.Conn
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	b := &testBundle{
		ctx:    ctx,
		srcURL: pgtest.NewDatabase(t, pgtest.SourceCluster(t)),
		dstURL: pgtest.NewDatabase(t, pgtest.DestCluster(t)),
	}
	b.src = connect(t, b.srcURL)
	b.dst = connect(t, b.dstURL)
	return b
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func columnNames(cols []Column) []string {
	var names []string
	for _, c := range cols {
		names = append(names, c.Name)
	}
	return names
}

const manyTypesSQL = `
CREATE SCHEMA "Mixed Schema";
CREATE TYPE "Mixed Schema".mood AS ENUM ('sad', 'ok', 'it''s \ fine');
CREATE DOMAIN "Mixed Schema"."Pos Int" AS integer NOT NULL CHECK (VALUE > 0);
CREATE TYPE public.pair AS (a integer, "B" "Mixed Schema".mood);
CREATE TABLE "Mixed Schema"."Weird""Table" (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  "Col ""X""" numeric(12,3) NOT NULL,
  doc jsonb, raw bytea, uid uuid, ints int[], tags text[],
  m "Mixed Schema".mood, ms "Mixed Schema".mood[],
  p "Mixed Schema"."Pos Int", ts timestamptz, iv interval, ip inet, name varchar(20),
  pr public.pair, secret text,
  doubled integer GENERATED ALWAYS AS (p * 2) STORED
);`

func TestEnsureTablesManyTypes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, manyTypesSQL)

	m := change.Mapping{
		Source:         change.TableName{Schema: "Mixed Schema", Name: `Weird"Table`},
		Destination:    change.TableName{Schema: "Dest Schema", Name: `Weird"Table`},
		ExcludeColumns: []string{"secret"},
	}
	ddl, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	joined := strings.Join(ddl, ";\n")
	require.Contains(t, joined, `CREATE SCHEMA IF NOT EXISTS "Mixed Schema"`)
	require.Contains(t, joined, `CREATE SCHEMA IF NOT EXISTS "Dest Schema"`)
	require.Contains(t, joined, `CREATE TYPE "Mixed Schema"."mood" AS ENUM ('sad', 'ok', E'it''s \\ fine')`)
	require.Contains(t, joined, `CREATE TABLE "Dest Schema"."Weird""Table"`)
	require.NotContains(t, joined, "secret")

	srcT, err := Describe(b.ctx, b.src, m.Source)
	require.NoError(t, err)
	dstT, err := Describe(b.ctx, b.dst, m.Destination)
	require.NoError(t, err)

	require.Equal(t, []string{"id", `Col "X"`, "doc", "raw", "uid", "ints", "tags", "m", "ms", "p", "ts", "iv", "ip", "name", "pr", "doubled"},
		columnNames(dstT.Columns))
	for _, dc := range dstT.Columns {
		sc, ok := srcT.Column(dc.Name)
		require.True(t, ok)
		require.Equal(t, sc.Type, dc.Type, "column %s", dc.Name)
	}
	col, _ := dstT.Column(`Col "X"`)
	require.Equal(t, "numeric(12,3)", col.Type)
	require.True(t, col.NotNull)
	col, _ = dstT.Column("ms")
	require.Equal(t, `"Mixed Schema".mood[]`, col.Type)
	require.False(t, col.BinarySafe, "an array of an enum carries the enum's OID")
	col, _ = dstT.Column("ints")
	require.True(t, col.BinarySafe)
	col, _ = dstT.Column("doubled")
	require.True(t, col.Generated)
	require.Equal(t, []string{"id"}, dstT.PrimaryKey)
	require.False(t, BinaryCompatible(srcT, dstT, m))

	// The created types work: the destination takes a row like the source's.
	pgtest.Exec(t, b.dstURL, `INSERT INTO "Dest Schema"."Weird""Table" (id, "Col ""X""", m, ms, p, pr, name)
		VALUES (1, 1.5, 'it''s \ fine', '{sad,ok}', 4, '(1,sad)', 'x')`)
	var doubled int
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT doubled FROM "Dest Schema"."Weird""Table"`).Scan(&doubled))
	require.Equal(t, 8, doubled)
	_, err = b.dst.Exec(b.ctx, `INSERT INTO "Dest Schema"."Weird""Table" (id, "Col ""X""", p) VALUES (2, 1, -1)`)
	require.ErrorContains(t, err, "check constraint", "the domain's CHECK was copied")

	// Idempotent: nothing left to do.
	ddl, err = EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Empty(t, ddl)

	// Without the enum array and composite columns, binary COPY is possible.
	m.ExcludeColumns = []string{"secret", "ms", "pr"}
	require.True(t, BinaryCompatible(srcT, dstT, m))
}

func TestEnsureTablesExclusions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id int PRIMARY KEY, a text);
		CREATE TABLE u (k int NOT NULL, v text); CREATE UNIQUE INDEX u_k ON u (k); ALTER TABLE u REPLICA IDENTITY USING INDEX u_k;`)
	name := change.TableName{Schema: "public", Name: "t"}

	_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: name, Destination: name, ExcludeColumns: []string{"id"}}})
	require.ErrorContains(t, err, `column "id" of public.t is part of the primary key and cannot be excluded`)

	_, err = EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: name, Destination: name, ExcludeColumns: []string{"nope"}}})
	require.ErrorContains(t, err, `excluded column "nope" does not exist in source table public.t`)

	u := change.TableName{Schema: "public", Name: "u"}
	_, err = EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: u, Destination: u, ExcludeColumns: []string{"k"}}})
	require.ErrorContains(t, err, "replica identity")

	_, err = EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: change.TableName{Schema: "public", Name: "missing"}, Destination: name}})
	require.ErrorIs(t, err, ErrTableNotFound)

	// Nothing was created by the failed calls.
	_, err = Describe(b.ctx, b.dst, name)
	require.ErrorIs(t, err, ErrTableNotFound)

	// Without a primary key, the replica identity index becomes a UNIQUE constraint.
	ddl, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: u, Destination: u}})
	require.NoError(t, err)
	require.Contains(t, strings.Join(ddl, "\n"), `UNIQUE ("k")`)
}

func TestEnsureTablesPartitionedSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `
CREATE TABLE events (id bigint NOT NULL, at date NOT NULL, body text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
CREATE TABLE events_2025 PARTITION OF events FOR VALUES FROM ('2025-01-01') TO ('2026-01-01');
CREATE TABLE events_2026 PARTITION OF events FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE INDEX events_body ON events (body);`)
	src := change.TableName{Schema: "public", Name: "events"}
	dst := change.TableName{Schema: "archive", Name: "events"}

	srcT, err := Describe(b.ctx, b.src, src)
	require.NoError(t, err)
	require.True(t, srcT.Partitioned)
	require.Equal(t, []string{"id", "at"}, srcT.PrimaryKey)
	require.Equal(t, ReplicaIdentityDefault, srcT.ReplicaIdentity)

	_, err = EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: src, Destination: dst}})
	require.NoError(t, err)
	dstT, err := Describe(b.ctx, b.dst, dst)
	require.NoError(t, err)
	require.False(t, dstT.Partitioned)
	require.Equal(t, []string{"id", "at", "body"}, columnNames(dstT.Columns))
	require.Equal(t, []string{"id", "at"}, dstT.PrimaryKey)
	require.True(t, BinaryCompatible(srcT, dstT, change.Mapping{Source: src, Destination: dst}))

	// The partitioned index ("ON ONLY" on the source) becomes a plain one.
	ddl, warnings, err := AddIndexesAndConstraints(b.ctx, b.src, b.dst, change.Mapping{Source: src, Destination: dst}, AfterCopy)
	require.NoError(t, err)
	require.Empty(t, warnings)
	require.Equal(t, []string{`CREATE INDEX IF NOT EXISTS "events_body" ON "archive"."events" USING btree (body)`}, ddl)
}

func TestEnsureTablesExistingDestination(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id integer PRIMARY KEY, name varchar(20), amount numeric(10,2), n smallint)`)
	name := change.TableName{Schema: "public", Name: "t"}
	m := change.Mapping{Source: name, Destination: name}

	t.Run("Compatible", func(t *testing.T) {
		pgtest.Exec(t, b.dstURL, `CREATE SCHEMA ok; CREATE TABLE ok.t (id bigint PRIMARY KEY, name text, amount numeric,
			n integer, extra text NOT NULL DEFAULT 'x', note text)`)
		m := m
		m.Destination = change.TableName{Schema: "ok", Name: "t"}
		ddl, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
		require.NoError(t, err)
		require.Empty(t, ddl)
		srcT, err := Describe(b.ctx, b.src, m.Source)
		require.NoError(t, err)
		dstT, err := Describe(b.ctx, b.dst, m.Destination)
		require.NoError(t, err)
		require.False(t, BinaryCompatible(srcT, dstT, m), "different types need text COPY")
	})
	t.Run("Incompatible", func(t *testing.T) {
		pgtest.Exec(t, b.dstURL, `CREATE SCHEMA bad; CREATE TABLE bad.t (id smallint PRIMARY KEY, name varchar(10),
			amount numeric(10,2), must text NOT NULL)`)
		m := m
		m.Destination = change.TableName{Schema: "bad", Name: "t"}
		_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
		require.Error(t, err)
		msg := err.Error()
		require.Contains(t, msg, `column "id" has type smallint on the destination, which cannot hold source type integer`)
		require.Contains(t, msg, `column "name" has type character varying(10) on the destination, which cannot hold source type character varying(20)`)
		require.Contains(t, msg, `column "n" (source type smallint) is missing`)
		require.Contains(t, msg, `column "must" (type text) is not replicated from the source but is NOT NULL without a default`)
	})
}

func TestSyncColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TYPE color AS ENUM ('red', 'green');
		CREATE TABLE t (id integer PRIMARY KEY, qty integer, old text, c color, secret text)`)
	name := change.TableName{Schema: "public", Name: "t"}
	m := change.Mapping{Source: name, Destination: name, ExcludeColumns: []string{"secret"}}
	_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	pgtest.Exec(t, b.dstURL, `INSERT INTO t (id, qty, old, c) VALUES (1, 42, 'o', 'red')`)

	pgtest.Exec(t, b.srcURL, `CREATE TYPE size AS ENUM ('S', 'M');
		ALTER TYPE color ADD VALUE 'blue' BEFORE 'red';
		ALTER TABLE t ADD COLUMN "New Col" size, ADD COLUMN note varchar(5);
		ALTER TABLE t ALTER COLUMN qty TYPE bigint, ALTER COLUMN id TYPE bigint;
		ALTER TABLE t DROP COLUMN old`)
	ddl, warnings, err := SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Equal(t, []string{
		`ALTER TYPE "public"."color" ADD VALUE 'blue' BEFORE 'red'`,
		`CREATE TYPE "public"."size" AS ENUM ('S', 'M')`,
		`ALTER TABLE "public"."t" ALTER COLUMN "id" TYPE bigint USING "id"::bigint`,
		`ALTER TABLE "public"."t" ALTER COLUMN "qty" TYPE bigint USING "qty"::bigint`,
		`ALTER TABLE "public"."t" ADD COLUMN "New Col" public.size`,
		`ALTER TABLE "public"."t" ADD COLUMN "note" character varying(5)`,
	}, ddl)
	require.Len(t, warnings, 1)
	require.Contains(t, warnings[0], `column "old" of public.t no longer exists on source table public.t`)

	dstT, err := Describe(b.ctx, b.dst, name)
	require.NoError(t, err)
	require.Equal(t, []string{"id", "qty", "old", "c", "New Col", "note"}, columnNames(dstT.Columns))
	var qty int64
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT qty FROM t WHERE id = 1`).Scan(&qty))
	require.Equal(t, int64(42), qty, "data survives the type change")
	pgtest.Exec(t, b.dstURL, `INSERT INTO t (id, c, "New Col") VALUES (2, 'blue', 'M')`)

	ddl, warnings, err = SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Empty(t, ddl)
	require.Len(t, warnings, 1)

	// A narrower source type keeps the wider destination type.
	pgtest.Exec(t, b.srcURL, `ALTER TABLE t ALTER COLUMN qty TYPE integer`)
	ddl, _, err = SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Empty(t, ddl)
}

func TestCompatible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src, dst string
		want     bool
	}{
		{"integer", "integer", true},
		{"integer", "bigint", true},
		{"bigint", "integer", false},
		{"smallint", "numeric", true},
		{"integer", "numeric(12,2)", true},
		{"integer", "numeric(8,0)", false},
		{"character varying(20)", "text", true},
		{"character varying(20)", "character varying(30)", true},
		{"character varying(20)", "character varying(10)", false},
		{"character varying(20)", "character varying", true},
		{"text", "character varying(100)", false},
		{"character(3)", "text", true},
		{"numeric(12,3)", "numeric", true},
		{"numeric(12,3)", "numeric(14,4)", true},
		{"numeric(12,3)", "numeric(12,4)", false},
		{"numeric", "numeric(12,3)", false},
		{"real", "double precision", true},
		{"double precision", "real", false},
		{"timestamp(3) with time zone", "timestamp with time zone", true},
		{"timestamp with time zone", "timestamp(3) with time zone", false},
		{"timestamp with time zone", "timestamp without time zone", false},
		{"json", "jsonb", true},
		{"jsonb", "json", false},
		{"integer[]", "bigint[]", false},
		{"public.mood", "public.mood", true},
		{"public.mood", "text", false},
	} {
		require.Equal(t, tc.want, Compatible(tc.src, tc.dst), "Compatible(%q, %q)", tc.src, tc.dst)
	}
}

const writableSQL = `
CREATE SCHEMA app;
CREATE TABLE app.ident (id bigint GENERATED BY DEFAULT AS IDENTITY (START WITH 100 INCREMENT BY 5 CACHE 3) PRIMARY KEY, v text);
CREATE TABLE app.always (id integer GENERATED ALWAYS AS IDENTITY (MINVALUE 10 MAXVALUE 100000 CYCLE) PRIMARY KEY, v text);
CREATE TABLE app.ser (id serial PRIMARY KEY, v text);
CREATE TABLE app.rich (
  id bigint PRIMARY KEY,
  qty integer NOT NULL DEFAULT 1,
  price numeric(10,2) NOT NULL DEFAULT 0 CHECK (price >= 0),
  created timestamptz NOT NULL DEFAULT now(),
  total numeric GENERATED ALWAYS AS (qty * price) STORED,
  code text,
  secret text,
  CONSTRAINT code_unique UNIQUE (code)
);
ALTER TABLE app.rich ADD CONSTRAINT code_upper CHECK (code = upper(code)) NOT VALID;
CREATE INDEX rich_created ON app.rich (created DESC) WHERE qty > 0;
CREATE UNIQUE INDEX "Rich Lower" ON app.rich (lower(code));
CREATE INDEX rich_secret ON app.rich (secret);
ALTER TABLE app.rich ADD CONSTRAINT secret_len CHECK (length(secret) < 10);`

// columnFacts returns, for every column of destination table t, its
// default expression, attidentity and attgenerated.
func columnFacts(t *testing.T, b *testBundle, table string) map[string][3]string {
	t.Helper()
	rows, err := b.dst.Query(b.ctx, `SELECT a.attname::text, COALESCE(pg_get_expr(d.adbin, d.adrelid), ''), a.attidentity::text, a.attgenerated::text
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped`, table)
	require.NoError(t, err)
	out := map[string][3]string{}
	for rows.Next() {
		var name string
		var f [3]string
		require.NoError(t, rows.Scan(&name, &f[0], &f[1], &f[2]))
		out[name] = f
	}
	require.NoError(t, rows.Err())
	return out
}

func TestEnsureTablesWritable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, writableSQL)
	name := func(s, n string) change.TableName { return change.TableName{Schema: s, Name: n} }
	mappings := []change.Mapping{
		{Source: name("app", "ident"), Destination: name("app", "ident")},
		{Source: name("app", "always"), Destination: name("app", "always")},
		// A schema mapping: the serial's sequence and default follow the table.
		{Source: name("app", "ser"), Destination: name("moved", "ser")},
		{Source: name("app", "rich"), Destination: name("app", "rich"), ExcludeColumns: []string{"secret"}},
	}
	r, err := EnsureTablesReport(b.ctx, b.src, b.dst, mappings)
	require.NoError(t, err)
	require.Empty(t, r.Existing)
	require.Len(t, r.Warnings, 1)
	require.Contains(t, r.Warnings[0], `identity column "id" of app.always is GENERATED ALWAYS on the source and GENERATED BY DEFAULT on the destination`)

	// Identity with its options, always created BY DEFAULT.
	require.Equal(t, "d", columnFacts(t, b, "app.ident")["id"][1])
	require.Equal(t, "d", columnFacts(t, b, "app.always")["id"][1])
	var start, inc, minv, maxv, cache int64
	var cycle bool
	seqSQL := `SELECT seqstart, seqincrement, seqmin, seqmax, seqcache, seqcycle FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence($1, 'id')::regclass`
	require.NoError(t, b.dst.QueryRow(b.ctx, seqSQL, "app.ident").Scan(&start, &inc, &minv, &maxv, &cache, &cycle))
	require.Equal(t, []int64{100, 5, 1, 9223372036854775807, 3}, []int64{start, inc, minv, maxv, cache})
	require.False(t, cycle)
	require.NoError(t, b.dst.QueryRow(b.ctx, seqSQL, "app.always").Scan(&start, &inc, &minv, &maxv, &cache, &cycle))
	require.Equal(t, []int64{10, 1, 10, 100000, 1}, []int64{start, inc, minv, maxv, cache})
	require.True(t, cycle)
	var seqName string
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT pg_get_serial_sequence('app.ident', 'id')`).Scan(&seqName))
	require.Equal(t, "app.ident_id_seq", seqName, "the identity's sequence keeps the source's name")

	// Serial: the sequence is created in the destination schema, owned by the column.
	require.Equal(t, `nextval('moved.ser_id_seq'::regclass)`, columnFacts(t, b, "moved.ser")["id"][0])
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT pg_get_serial_sequence('moved.ser', 'id')`).Scan(&seqName))
	require.Equal(t, "moved.ser_id_seq", seqName)

	// Defaults and the generated column.
	rich := columnFacts(t, b, "app.rich")
	require.Equal(t, "1", rich["qty"][0])
	require.Equal(t, "now()", rich["created"][0])
	require.Equal(t, "s", rich["total"][2])
	require.Equal(t, "((qty)::numeric * price)", rich["total"][0])
	require.NotContains(t, rich, "secret")

	// Constraints and indexes wait for AddIndexesAndConstraints.
	var n int
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'app.rich'::regclass AND contype <> 'p'`).Scan(&n))
	require.Zero(t, n)

	// The destination takes inserts without ids.
	pgtest.Exec(t, b.dstURL, `INSERT INTO app.ident (v) VALUES ('a'); INSERT INTO app.always (v) VALUES ('a');
		INSERT INTO moved.ser (v) VALUES ('a'); INSERT INTO app.rich (id, price) VALUES (1, 2.5)`)
	var total string
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT total::text FROM app.rich`).Scan(&total))
	require.Equal(t, "2.50", total)
	// Replication writes explicit values into the identity columns.
	pgtest.Exec(t, b.dstURL, `INSERT INTO app.always (id, v) VALUES (5000, 'b'); TRUNCATE app.rich`)

	// After the copy: checks and non-unique indexes.
	ddl, warnings, err := AddIndexesAndConstraints(b.ctx, b.src, b.dst, mappings[3], AfterCopy)
	require.NoError(t, err)
	require.Equal(t, []string{
		`ALTER TABLE "app"."rich" ADD CONSTRAINT "code_upper" CHECK ((code = upper(code))) NOT VALID`,
		`ALTER TABLE "app"."rich" ADD CONSTRAINT "rich_price_check" CHECK ((price >= (0)::numeric))`,
		`CREATE INDEX IF NOT EXISTS "rich_created" ON "app"."rich" USING btree (created DESC) WHERE (qty > 0)`,
	}, ddl)
	require.Len(t, warnings, 2)
	require.Contains(t, warnings[0], `constraint "secret_len" of app.rich is not created on app.rich: it uses an excluded column`)
	require.Contains(t, warnings[1], `index "rich_secret" of app.rich is not created on app.rich: it uses an excluded column`)
	_, err = b.dst.Exec(b.ctx, `INSERT INTO app.rich (id, price) VALUES (2, -1)`)
	require.ErrorContains(t, err, "rich_price_check")
	var validated bool
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT convalidated FROM pg_constraint WHERE conname = 'code_upper'`).Scan(&validated))
	require.False(t, validated, "a NOT VALID constraint stays NOT VALID")
	pgtest.Exec(t, b.dstURL, `INSERT INTO app.rich (id, code) VALUES (3, 'ABC'), (4, 'ABC')`) // no unique yet
	pgtest.Exec(t, b.dstURL, `DELETE FROM app.rich WHERE id = 4`)

	// At the cut-over: the unique ones too.
	ddl, warnings, err = AddIndexesAndConstraints(b.ctx, b.src, b.dst, mappings[3], AtCutover)
	require.NoError(t, err)
	require.Equal(t, []string{
		`ALTER TABLE "app"."rich" ADD CONSTRAINT "code_unique" UNIQUE (code)`,
		`CREATE UNIQUE INDEX IF NOT EXISTS "Rich Lower" ON "app"."rich" USING btree (lower(code))`,
	}, ddl)
	require.Len(t, warnings, 2)
	_, err = b.dst.Exec(b.ctx, `INSERT INTO app.rich (id, code) VALUES (4, 'ABC')`)
	require.ErrorContains(t, err, "code_unique")

	// Idempotent.
	ddl, warnings, err = AddIndexesAndConstraints(b.ctx, b.src, b.dst, mappings[3], AtCutover)
	require.NoError(t, err)
	require.Empty(t, ddl)
	require.Len(t, warnings, 2)
	r, err = EnsureTablesReport(b.ctx, b.src, b.dst, mappings)
	require.NoError(t, err)
	require.Empty(t, r.DDL)
	require.Empty(t, r.Existing, "tables pgmirror created are not reported as the user's")
}

func TestEnsureTablesLeavesExistingTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id int PRIMARY KEY, v text CHECK (v <> '')); CREATE INDEX t_v ON t (v)`)
	pgtest.Exec(t, b.dstURL, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	m := change.Mapping{Source: change.TableName{Schema: "public", Name: "t"}, Destination: change.TableName{Schema: "public", Name: "t"}}
	r, err := EnsureTablesReport(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Empty(t, r.DDL)
	require.Equal(t, []string{`"public"."t"`}, r.Existing)
	ddl, warnings, err := AddIndexesAndConstraints(b.ctx, b.src, b.dst, m, AtCutover)
	require.NoError(t, err)
	require.Empty(t, ddl)
	require.Empty(t, warnings)
	var n int
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT count(*) FROM pg_indexes WHERE tablename = 't'`).Scan(&n))
	require.Equal(t, 1, n, "only the primary key")
}

func TestEnsureTablesExpressionFallback(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE FUNCTION twice(int) RETURNS int IMMUTABLE LANGUAGE sql AS 'SELECT $1 * 2';
		CREATE TABLE t (id int PRIMARY KEY, v int DEFAULT 7, w int GENERATED ALWAYS AS (twice(v)) STORED)`)
	m := change.Mapping{Source: change.TableName{Schema: "public", Name: "t"}, Destination: change.TableName{Schema: "public", Name: "t"}}
	r, err := EnsureTablesReport(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	require.Len(t, r.Warnings, 1)
	require.Contains(t, r.Warnings[0], `generated column "w" of public.t is not carried to the destination as generated: its expression calls public.twice(integer), which is not a built-in function`)
	f := columnFacts(t, b, "public.t")
	require.Equal(t, [3]string{"", "", ""}, f["w"], "a plain column")
	pgtest.Exec(t, b.dstURL, `INSERT INTO t (id, v) VALUES (1, 2)`)
}

func TestRestoreIdentityAlways(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, d int GENERATED BY DEFAULT AS IDENTITY, v text);
		CREATE TABLE mine (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY)`)
	pgtest.Exec(t, b.dstURL, `CREATE TABLE mine (id int GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY)`)
	m := change.Mapping{Source: change.TableName{Schema: "public", Name: "t"}, Destination: change.TableName{Schema: "public", Name: "t"}}
	mine := change.Mapping{Source: change.TableName{Schema: "public", Name: "mine"}, Destination: change.TableName{Schema: "public", Name: "mine"}}
	_, err := EnsureTablesReport(b.ctx, b.src, b.dst, []change.Mapping{m, mine})
	require.NoError(t, err)
	identity := func(table, col string) string {
		var s string
		require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT attidentity::text FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2`, table, col).Scan(&s))
		return s
	}
	require.Equal(t, "d", identity("t", "id"), "BY DEFAULT while replicating")
	ddl, err := RestoreIdentityAlways(b.ctx, b.src, b.dst, m)
	require.NoError(t, err)
	require.Equal(t, []string{`ALTER TABLE "public"."t" ALTER COLUMN "id" SET GENERATED ALWAYS`}, ddl)
	require.Equal(t, "a", identity("t", "id"))
	require.Equal(t, "d", identity("t", "d"), "BY DEFAULT on the source stays so")
	ddl, err = RestoreIdentityAlways(b.ctx, b.src, b.dst, m)
	require.NoError(t, err)
	require.Empty(t, ddl, "idempotent")
	ddl, err = RestoreIdentityAlways(b.ctx, b.src, b.dst, mine)
	require.NoError(t, err)
	require.Empty(t, ddl, "a table the user made is left alone")
	require.Equal(t, "d", identity("mine", "id"))
}

// TestSyncColumnsAddedWithDefault: a column added on the source with a
// default that is not volatile gives the rows the source already had that
// value without rewriting them; the rows the destination already has get
// the same value when the column is added there, and new rows the source's
// default. A default the destination rejects is left out with a warning,
// and a volatile one is warned about (older rows cannot be known).
func TestSyncColumnsAddedWithDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id integer PRIMARY KEY); INSERT INTO t VALUES (1), (2);
		CREATE TABLE v (id integer PRIMARY KEY); INSERT INTO v VALUES (1)`)
	name := change.TableName{Schema: "public", Name: "t"}
	m := change.Mapping{Source: name, Destination: name}
	volatile := change.Mapping{Source: change.TableName{Schema: "public", Name: "v"}, Destination: change.TableName{Schema: "public", Name: "v"}}
	_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m, volatile})
	require.NoError(t, err)
	pgtest.Exec(t, b.dstURL, `INSERT INTO t VALUES (1), (2); INSERT INTO v VALUES (1)`)

	pgtest.Exec(t, b.srcURL, `CREATE FUNCTION public.only_here() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 7';
		ALTER TABLE t ADD COLUMN flag boolean NOT NULL DEFAULT false,
			ADD COLUMN note text DEFAULT 'it''s {x} \ "q"',
			ADD COLUMN tags integer[] DEFAULT '{1,2}',
			ADD COLUMN at timestamptz DEFAULT now(),
			ADD COLUMN n integer DEFAULT public.only_here(),
			ADD COLUMN plain integer`)
	// A volatile default rewrites the table: each row gets its own value.
	pgtest.Exec(t, b.srcURL, `ALTER TABLE v ADD COLUMN stamp timestamptz DEFAULT clock_timestamp()`)
	ddl, warnings, err := SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{m, volatile})
	require.NoError(t, err, "ddl: %v", ddl)
	require.Len(t, warnings, 2, "%v", warnings)
	require.Contains(t, warnings[0], `default of column "n" of public.t is not carried to the destination: it calls public.only_here(), which is not a built-in function`)
	require.Contains(t, warnings[1], `column "stamp" of "public"."v" was added with NULL in the rows the destination already had`)

	// The rows both sides had agree, as text, in every added column.
	cols := `flag::text, note, tags::text, at::text, n::text, plain::text`
	var want, got string
	require.NoError(t, b.src.QueryRow(b.ctx, `SELECT string_agg(concat_ws('|', id, `+cols+`), ' ' ORDER BY id) FROM t`).Scan(&want))
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT string_agg(concat_ws('|', id, `+cols+`), ' ' ORDER BY id) FROM t`).Scan(&got))
	require.Equal(t, want, got)
	require.Contains(t, got, `1|false|it's {x} \ "q"|{1,2}|`)

	// New rows written on the destination get the source's defaults.
	pgtest.Exec(t, b.dstURL, `INSERT INTO t (id) VALUES (3)`)
	var flag bool
	var note string
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT flag, note FROM t WHERE id = 3`).Scan(&flag, &note))
	require.False(t, flag)
	require.Equal(t, `it's {x} \ "q"`, note)
	var atDefault string
	var nDefault *string
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT
		(SELECT column_default FROM information_schema.columns WHERE table_name = 't' AND column_name = 'at'),
		(SELECT column_default FROM information_schema.columns WHERE table_name = 't' AND column_name = 'n')`).Scan(&atDefault, &nDefault))
	require.Equal(t, "now()", atDefault, "the default of at is the source's, not the time the column was added")
	require.Nil(t, nDefault, "a default calling a user function is left out")
}
