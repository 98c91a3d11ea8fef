package colsync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

const (
	oidInt4 = 23
	oidInt8 = 20
)

var tbl = change.TableName{Schema: "public", Name: "t"}

func mapping(excluded ...string) change.Mapping {
	return change.Mapping{Source: tbl, Destination: tbl, ExcludeColumns: excluded}
}

func src(attnum int, name, typ string, oid uint32) Source {
	return Source{Attnum: attnum, Name: name, Type: typ, TypeOID: oid, TypeMod: -1}
}

func described(s Source, f func(*Source)) Source {
	s.Described = true
	f(&s)
	return s
}

func dests(names ...string) map[string]Dest {
	out := map[string]Dest{}
	for _, n := range names {
		out[n] = Dest{Name: n, Type: "integer"}
	}
	return out
}

func ptr(s string) *string { return &s }

// render lists a plan as statements, "resync: ..." after a statement that
// asks for one, "note: ..." for notes and "warning: ..." for warnings.
func render(p Plan) []string {
	var out []string
	for _, s := range p.Steps {
		switch {
		case s.NotCarried != "":
			out = append(out, "note: "+s.NotCarried)
		case s.Optional:
			out = append(out, "optional: "+s.SQL)
		default:
			out = append(out, s.SQL)
		}
		if s.Resync != "" {
			out = append(out, "resync: "+s.Resync)
		}
	}
	for _, w := range p.Warnings {
		out = append(out, "warning: "+w)
	}
	return out
}

// TestDiff covers the changes found by attnum and their order.
func TestDiff(t *testing.T) {
	t.Parallel()
	known := []Known{{1, "id", oidInt4, -1}, {2, "a", oidText, -1}, {3, "b", oidText, -1}, {4, "c", oidInt4, -1}}
	now := []Source{src(1, "id", "integer", oidInt4), src(2, "a2", "text", oidText), src(4, "c", "bigint", oidInt8), src(5, "d", "text", oidText)}
	var got []string
	for _, c := range Diff(known, now) {
		got = append(got, c.String())
	}
	require.Equal(t, []string{`column "b" dropped`, `column "a" renamed to "a2"`, `column "c" changed type`, `column "d" added`}, got)
	// Known columns without a type (recorded by name only) are never
	// taken as retyped.
	require.Empty(t, Diff([]Known{{Attnum: 1, Name: "id"}}, now[:1]))
}

// TestStream covers the statements a change met while streaming under
// schema_changes apply asks of the destination.
func TestStream(t *testing.T) {
	t.Parallel()
	known := func(ks ...Known) []Known { return ks }
	k := func(attnum int, name string, oid uint32) Known { return Known{attnum, name, oid, -1} }
	withDefault := func(d Dest) Dest { d.HasDefault = true; return d }
	cases := []struct {
		name  string
		m     change.Mapping
		known []Known
		now   []Source
		dest  map[string]Dest
		want  []string
	}{
		{"rename", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "b", "integer", oidInt4)}, dests("id", "a"),
			[]string{`ALTER TABLE "public"."t" RENAME COLUMN "a" TO "b"`}},
		{"replayed rename: the destination shows it already", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "b", "integer", oidInt4)}, dests("id", "b"), nil},
		{"swap goes through a temporary name", mapping(), known(k(1, "a", oidInt4), k(2, "b", oidInt4)),
			[]Source{src(1, "b", "integer", oidInt4), src(2, "a", "integer", oidInt4)}, dests("a", "b"),
			[]string{`ALTER TABLE "public"."t" RENAME COLUMN "a" TO "_pgmirror_renaming_1"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "b" TO "_pgmirror_renaming_2"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "_pgmirror_renaming_1" TO "b"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "_pgmirror_renaming_2" TO "a"`}},
		{"renamed to an excluded name: dropped", mapping("secret"), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "secret", "integer", oidInt4)}, dests("id", "a"),
			[]string{`ALTER TABLE "public"."t" DROP COLUMN "a"`}},
		{"renamed from an excluded name: added", mapping("secret"), known(k(1, "id", oidInt4), k(2, "secret", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "a", "integer", oidInt4)}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "a" integer`}},
		{"dropped, excluded dropped", mapping("x"), known(k(1, "id", oidInt4), k(2, "a", oidInt4), k(3, "x", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4)}, dests("id", "a", "x"),
			[]string{`ALTER TABLE "public"."t" DROP COLUMN "a"`}},
		{"added NOT NULL with a value for older rows", mapping(), known(k(1, "id", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), described(src(2, "f", "boolean", 16), func(s *Source) {
				s.NotNull, s.Default, s.Missing = true, "false", ptr("false")
			})}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "f" boolean DEFAULT 'false'::boolean NOT NULL`,
				`ALTER TABLE "public"."t" ALTER COLUMN "f" DROP DEFAULT`,
				`optional: ALTER TABLE "public"."t" ALTER COLUMN "f" SET DEFAULT false`}},
		{"added with a volatile default: resync", mapping(), known(k(1, "id", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), described(src(2, "at", "timestamp with time zone", 1184), func(s *Source) {
				s.Default = "clock_timestamp()"
			})}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "at" timestamp with time zone`,
				`resync: column "at" was added with values computed for every existing row (a volatile default or an identity), which the stream does not carry`,
				`optional: ALTER TABLE "public"."t" ALTER COLUMN "at" SET DEFAULT clock_timestamp()`}},
		{"added with a sequence: resync, the sequence's default left out", mapping(), known(k(1, "id", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), described(src(2, "n", "integer", oidInt4), func(s *Source) {
				s.NotNull, s.Default = true, "nextval('public.t_n_seq'::regclass)"
			})}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "n" integer`,
				`resync: column "n" was added with values computed for every existing row (a volatile default or an identity), which the stream does not carry`}},
		{"added with a default that may not run on the destination", mapping(), known(k(1, "id", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), described(src(2, "n", "integer", oidInt4), func(s *Source) {
				s.Default, s.Missing, s.NotCarried = "public.f()", ptr("7"), "calls public.f(), which is not a built-in function"
			})}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "n" integer DEFAULT '7'::integer`,
				`ALTER TABLE "public"."t" ALTER COLUMN "n" DROP DEFAULT`,
				`note: default of column "n" of public.t is not carried to the destination: it calls public.f(), which is not a built-in function`}},
		{"added bare when the catalog no longer describes it", mapping(), known(k(1, "id", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "n", "integer", oidInt4)}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "n" integer`}},
		{"retyped with a default, after the renames, with a rewrite", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), described(src(2, "b", "bigint", oidInt8), func(s *Source) { s.Default = "0" })},
			map[string]Dest{"id": {Name: "id", Type: "integer"}, "a": withDefault(Dest{Name: "a", Type: "integer"})},
			[]string{`ALTER TABLE "public"."t" RENAME COLUMN "a" TO "b"`,
				`ALTER TABLE "public"."t" ALTER COLUMN "b" DROP DEFAULT`,
				`ALTER TABLE "public"."t" ALTER COLUMN "b" TYPE bigint USING "b"::bigint`,
				`resync: column "b" changed type with a table rewrite on the source, whose new values the stream does not carry`,
				`optional: ALTER TABLE "public"."t" ALTER COLUMN "b" SET DEFAULT 0`}},
		{"retype follows the source's type exactly", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt8)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "a", "integer", oidInt4)},
			map[string]Dest{"id": {Name: "id", Type: "integer"}, "a": {Name: "a", Type: "bigint"}},
			[]string{`ALTER TABLE "public"."t" ALTER COLUMN "a" TYPE integer USING "a"::integer`,
				`resync: column "a" changed type with a table rewrite on the source, whose new values the stream does not carry`}},
		{"retyped, the column dropped on the destination by hand: added", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "a", "bigint", oidInt8)}, dests("id"),
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "a" bigint`}},
		{"retype the destination shows already", mapping(), known(k(1, "id", oidInt4), k(2, "a", oidInt4)),
			[]Source{src(1, "id", "integer", oidInt4), src(2, "a", "bigint", oidInt8)},
			map[string]Dest{"id": {Name: "id", Type: "integer"}, "a": {Name: "a", Type: "bigint"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, render(Stream(c.m, Diff(c.known, c.now), c.dest)))
		})
	}
}

// TestReshape covers the drops and renames before a table is copied again.
func TestReshape(t *testing.T) {
	t.Parallel()
	pk := Dest{Name: "id", Type: "integer", PrimaryKey: true, NotNull: true}
	d := func(name string) Dest { return Dest{Name: name, Type: "integer"} }
	cases := []struct {
		name  string
		src   []Source
		dst   []Dest
		known []Known
		want  []string
	}{
		{"renamed and dropped by attnum; a column neither side knows dropped; the key kept",
			[]Source{src(2, "b", "integer", oidInt4)}, []Dest{pk, d("a"), d("gone"), d("stray")},
			[]Known{{Attnum: 2, Name: "a"}, {Attnum: 3, Name: "gone"}},
			[]string{`ALTER TABLE "public"."t" DROP COLUMN "gone"`, `ALTER TABLE "public"."t" DROP COLUMN "stray"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "a" TO "b"`}},
		{"swap", []Source{src(1, "id", "integer", oidInt4), src(2, "b", "integer", oidInt4), src(3, "a", "integer", oidInt4)},
			[]Dest{pk, d("a"), d("b")}, []Known{{Attnum: 1, Name: "id"}, {Attnum: 2, Name: "a"}, {Attnum: 3, Name: "b"}},
			[]string{`ALTER TABLE "public"."t" RENAME COLUMN "a" TO "_pgmirror_renaming_2"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "b" TO "_pgmirror_renaming_3"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "_pgmirror_renaming_2" TO "b"`,
				`ALTER TABLE "public"."t" RENAME COLUMN "_pgmirror_renaming_3" TO "a"`}},
		// The name is taken by a column that stays: the old column keeps
		// its name (no column is left under a temporary one).
		{"rename to a name a staying column has", []Source{src(1, "id", "integer", oidInt4), src(2, "b", "integer", oidInt4), src(3, "a2", "integer", oidInt4)},
			[]Dest{pk, d("a"), d("b")}, []Known{{Attnum: 1, Name: "id"}, {Attnum: 2, Name: "a"}}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, render(Reshape(mapping(), c.src, c.dst, c.known)))
		})
	}
}

// TestSyncTable covers sync-schema's and the pre-copy rules by name.
func TestSyncTable(t *testing.T) {
	t.Parallel()
	id := src(1, "id", "integer", oidInt4)
	id.Described = true
	pk := Dest{Name: "id", Type: "integer", PrimaryKey: true, NotNull: true}
	identity := described(src(2, "n", "integer", oidInt4), func(s *Source) { s.Identity, s.NotNull = true, true })
	cases := []struct {
		name string
		mode Mode
		src  []Source
		dst  []Dest
		want []string
	}{
		{"an identity added: its older rows are NULL here", Sync, []Source{id, identity}, []Dest{pk},
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "n" integer`,
				`warning: column "n" of "public"."t" was added with NULL in the rows the destination already had; if the source's older rows have values in it (a volatile default, a sequence or an identity, or a table rewrite since the column was added), resync the table`}},
		{"an identity added before a copy: no warning", Copying, []Source{id, identity}, []Dest{pk},
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "n" integer`}},
		{"NOT NULL with a value for older rows: added nullable", Sync,
			[]Source{id, described(src(2, "f", "boolean", 16), func(s *Source) { s.NotNull, s.Default, s.Missing = true, "false", ptr("false") })},
			[]Dest{pk},
			[]string{`ALTER TABLE "public"."t" ADD COLUMN "f" boolean DEFAULT 'false'::boolean`,
				`ALTER TABLE "public"."t" ALTER COLUMN "f" DROP DEFAULT`,
				`optional: ALTER TABLE "public"."t" ALTER COLUMN "f" SET DEFAULT false`}},
		{"a wider destination type is kept, a narrower one retyped", Sync,
			[]Source{id, src(2, "w", "integer", oidInt4), src(3, "v", "bigint", oidInt8)},
			[]Dest{pk, {Name: "w", Type: "bigint"}, {Name: "v", Type: "integer", HasDefault: true}},
			[]string{`ALTER TABLE "public"."t" ALTER COLUMN "v" DROP DEFAULT`,
				`ALTER TABLE "public"."t" ALTER COLUMN "v" TYPE bigint USING "v"::bigint`}},
		{"columns the source no longer has are kept", Sync, []Source{id},
			[]Dest{pk, {Name: "req", Type: "text", NotNull: true}, {Name: "dflt", Type: "text", NotNull: true, HasDefault: true}},
			[]string{`ALTER TABLE "public"."t" ALTER COLUMN "req" DROP NOT NULL`,
				`warning: column "req" of public.t no longer exists on source table public.t; it is kept on the destination and no longer NOT NULL, so new rows leave it NULL`,
				`warning: column "dflt" of public.t no longer exists on source table public.t; it is kept on the destination`}},
		{"a generated column added with its expression", Sync,
			[]Source{id, described(src(2, "g", "integer", oidInt4), func(s *Source) { s.Generated, s.GenerationExpr = true, "(id * 2)" })},
			[]Dest{pk}, []string{`ALTER TABLE "public"."t" ADD COLUMN "g" integer GENERATED ALWAYS AS ((id * 2)) STORED`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, render(SyncTable(mapping(), c.src, c.dst, c.mode, false)))
		})
	}
}

// TestAttributes covers the NOT NULL and default changes of captured DDL.
func TestAttributes(t *testing.T) {
	t.Parallel()
	src := []Source{
		{Name: "id", NotNull: true},
		{Name: "a", NotNull: true, Default: "'x'::text"},
		{Name: "b"},
		{Name: "s", Default: "nextval('public.s'::regclass)"},
		{Name: "h", Default: "public.f()", NotCarried: "calls public.f()"},
		{Name: "skip", NotNull: true},
		{Name: "g", Generated: true},
	}
	dest := map[string]Dest{
		"id": {Name: "id", NotNull: true, PrimaryKey: true},
		"a":  {Name: "a"},
		"b":  {Name: "b", NotNull: true, Default: ptr("'y'::text")},
		"s":  {Name: "s"},
		"h":  {Name: "h"},
		"g":  {Name: "g"},
	}
	require.Equal(t, []string{
		`ALTER TABLE "public"."t" ALTER COLUMN "a" SET NOT NULL`,
		`ALTER TABLE "public"."t" ALTER COLUMN "a" SET DEFAULT 'x'::text`,
		`ALTER TABLE "public"."t" ALTER COLUMN "b" DROP NOT NULL`,
		`ALTER TABLE "public"."t" ALTER COLUMN "b" DROP DEFAULT`,
	}, render(Attributes(mapping("skip"), src, dest)))
}

// TestNoRewrite lists the type changes that keep the stored values (no
// resync) and some that do not.
func TestNoRewrite(t *testing.T) {
	t.Parallel()
	varchar := func(n int32) int32 { return n + 4 }
	numeric := func(p, s int32) int32 { return p<<16 | s + 4 }
	require.True(t, NoRewrite(oidVarchar, varchar(10), oidVarchar, varchar(20)))
	require.True(t, NoRewrite(oidVarchar, varchar(10), oidVarchar, -1))
	require.True(t, NoRewrite(oidVarchar, varchar(10), oidText, -1))
	require.True(t, NoRewrite(oidNumeric, numeric(10, 2), oidNumeric, numeric(12, 2)))
	require.True(t, NoRewrite(oidNumeric, numeric(10, 2), oidNumeric, -1))
	require.False(t, NoRewrite(oidVarchar, varchar(20), oidVarchar, varchar(10)))
	require.False(t, NoRewrite(oidNumeric, numeric(10, 2), oidNumeric, numeric(12, 4)))
	require.False(t, NoRewrite(oidInt4, -1, oidText, -1))
	require.False(t, NoRewrite(oidText, -1, oidInt4, -1))
}
