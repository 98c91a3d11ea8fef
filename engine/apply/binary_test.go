package apply_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
)

// typesDDL has a column of each type the binary test covers.
const typesDDL = `(k int8 %s, i2 int2, i4 int4, n numeric, t text, b bytea, j jsonb, ts timestamptz, u uuid, bo bool, f float8, a int4[])`

// typesRows are source rows with edge values (and a row of NULLs): rows 1 to
// 4 in src, later versions of them (and rows 5, 6, 20) in src2.
const typesRows = `
	INSERT INTO src VALUES
		(1, -32768, 2147483647, 12345678901234567890.000123456789, E'tab\there "q" \\ back\nline', '\x00ff10', '{"a": [1, 2.50, null], "b": "x"}',
			'2024-02-29 23:59:59.999999+05:30', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', true, '-0', '{1,NULL,3}'),
		(2, 0, 0, 'NaN', '', '\x', 'null', 'infinity', '00000000-0000-0000-0000-000000000000', false, 'Infinity', '{}'),
		(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
		(4, 7, -7, -0.5, 'x', '\x01', '[]', '1970-01-01 00:00:00+00', 'ffffffff-ffff-ffff-ffff-ffffffffffff', true, 1e-300, '{{1,2},{3,4}}');
	INSERT INTO src2 VALUES
		(1, 32767, -2147483648, 0.000000000000000000001, 'changed', '\xdeadbeef', '{"nested": {"deep": [true, false]}}',
			'1999-12-31 23:59:59.5-08', '123e4567-e89b-12d3-a456-426614174000', false, 'NaN', '{-1}'),
		(2, 2, 2, 2.20, 'two', '\x02', '"s"', '-infinity', '11111111-1111-1111-1111-111111111111', true, '-Infinity', '{2,NULL}'),
		(5, 5, 5, 5, 'five', '\x05', '5', '2000-01-01 00:00:00+00', '55555555-5555-5555-5555-555555555555', true, 5.5, '{5}'),
		(6, 6, 6, 6e20, 'six', '\x06', '{"six": 6}', '2001-01-01 00:00:00.000001+00', '66666666-6666-6666-6666-666666666666', false, 6.02e23, '{6,6}'),
		(20, 20, 20, -20, 'twenty', '\x20', '[20]', '2020-02-20 20:20:20+00', '20202020-2020-2020-2020-202020202020', true, 20.25, '{20}')`

// TestBinaryEqualsText: values given as binary bytes (as pgoutput's binary
// mode sends them) end up on the destination byte for byte as the same
// values given as text, through every path: staging (insert, update,
// unchanged TOAST, delete, missing row), a row moved to a new key, and a
// table without a key (COPY, and updates and deletes matched on the old
// row).
func TestBinaryEqualsText(t *testing.T) {
	t.Parallel()
	// Once through staging tables and set-based statements, once with a
	// statement per key (Config.RowStatementsUpTo).
	for _, rowsUpTo := range []int{-1, 100} {
		t.Run(fmt.Sprintf("row statements up to %d keys", rowsUpTo), func(t *testing.T) {
			t.Parallel()
			testBinaryEqualsText(t, rowsUpTo)
		})
	}
}

func testBinaryEqualsText(t *testing.T, rowsUpTo int) {
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, fmt.Sprintf(`CREATE TABLE src `+typesDDL+`; CREATE TABLE src2 `+typesDDL, "PRIMARY KEY", "PRIMARY KEY")+";"+typesRows+";"+
		fmt.Sprintf(`CREATE TABLE text_k `+typesDDL+`; CREATE TABLE bin_k `+typesDDL+`; CREATE TABLE text_o `+typesDDL+`; CREATE TABLE bin_o `+typesDDL,
			"PRIMARY KEY", "PRIMARY KEY", "", ""))
	conn := connect(t, dst)

	for _, format := range []int16{0, 1} {
		prefix := map[int16]string{0: "text", 1: "bin"}[format]
		src := readImages(t, conn, "src", format)
		src2 := readImages(t, conn, "src2", format)
		keyed := &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "src"}, ReplicaIdentity: change.IdentityDefault, Columns: src.columns}
		ordered := &change.Relation{ID: 2, Table: change.TableName{Schema: "public", Name: "src_o"}, ReplicaIdentity: change.IdentityFull, Columns: src.columns}
		cfg := apply.Config{MirrorUID: prefix, RowStatementsUpTo: rowsUpTo, Mappings: []change.Mapping{
			{Source: keyed.Table, Destination: change.TableName{Schema: "public", Name: prefix + "_k"}},
			{Source: ordered.Table, Destination: change.TableName{Schema: "public", Name: prefix + "_o"}},
		}}
		if format == 1 {
			types := checkedTypes(src.columns)
			cfg.Binary = true
			cfg.BinaryTypes = map[change.TableName]map[string]uint32{keyed.Table: types, ordered.Table: types}
		}
		a, err := apply.New(ctx, connect(t, dst), cfg)
		require.NoError(t, err)

		keyOnly := func(row []change.Value) []change.Value {
			out := make([]change.Value, len(row))
			for i := range out {
				out[i] = null
			}
			out[0] = row[0]
			return out
		}
		withUnchanged := func(row []change.Value, cols ...int) []change.Value {
			out := append([]change.Value(nil), row...)
			for _, c := range cols {
				out[c] = unchanged
			}
			return out
		}
		batches := [][]*change.Change{
			{ // the rows arrive
				{Op: change.OpInsert, Relation: keyed, New: src.rows[1]},
				{Op: change.OpInsert, Relation: keyed, New: src.rows[2]},
				{Op: change.OpInsert, Relation: keyed, New: src.rows[3]},
				{Op: change.OpInsert, Relation: keyed, New: src.rows[4]},
				{Op: change.OpInsert, Relation: ordered, New: src.rows[1]},
				{Op: change.OpInsert, Relation: ordered, New: src.rows[2]},
				{Op: change.OpInsert, Relation: ordered, New: src.rows[3]},
				{Op: change.OpInsert, Relation: ordered, New: src.rows[4]},
			},
			{ // they change
				{Op: change.OpUpdate, Relation: keyed, New: src2.rows[1]},
				{Op: change.OpUpdate, Relation: keyed, New: withUnchanged(src2.rows[2], 4, 6)},
				{Op: change.OpDelete, Relation: keyed, Old: keyOnly(src.rows[4]), OldKeyOnly: true},
				{Op: change.OpInsert, Relation: keyed, New: src2.rows[5]},
				{Op: change.OpUpdate, Relation: keyed, New: src2.rows[6]}, // missing on the destination
				{Op: change.OpUpdate, Relation: ordered, Old: src.rows[1], New: src2.rows[1]},
				{Op: change.OpUpdate, Relation: ordered, Old: src.rows[2], New: withUnchanged(src2.rows[2], 4, 6)},
				{Op: change.OpDelete, Relation: ordered, Old: src.rows[4]},
				{Op: change.OpUpdate, Relation: ordered, Old: src.rows[3], New: src2.rows[5]},
			},
			{ // a row moves to a new key keeping unchanged values
				{Op: change.OpUpdate, Relation: keyed, Old: keyOnly(src2.rows[2]), OldKeyOnly: true, New: withUnchanged(src2.rows[20], 6)},
			},
		}
		for i, batch := range batches {
			require.NoError(t, a.Begin(ctx))
			for _, c := range batch {
				require.NoError(t, a.Apply(ctx, c))
			}
			_, err := a.Commit(ctx, change.LSN(0x100*(i+1)), int64(i+1))
			require.NoError(t, err, "%s batch %d", prefix, i+1)
		}
	}

	dump := func(table string) string {
		var s string
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(string_agg(x::text, E'\n' ORDER BY x::text), '') FROM `+pgx.Identifier{table}.Sanitize()+` x`).Scan(&s))
		return s
	}
	require.Equal(t, dump("text_k"), dump("bin_k"))
	require.Equal(t, dump("text_o"), dump("bin_o"))
	// The text path is right: the keyed table holds src2's rows 1, 5 and 6,
	// src's row 3, and row 20 with row 2's jsonb; the other has src2's rows
	// 1 and 5 and row 2 with src's t and j.
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT array_agg(x::text ORDER BY k) FROM bin_k x) = (SELECT array_agg(x::text ORDER BY k) FROM (
			SELECT * FROM src2 WHERE k IN (1, 5, 6) UNION ALL SELECT * FROM src WHERE k = 3
			UNION ALL SELECT k, i2, i4, n, t, b, (SELECT j FROM src WHERE k = 2), ts, u, bo, f, a FROM src2 WHERE k = 20) x)
		AND (SELECT array_agg(x::text ORDER BY k) FROM bin_o x) = (SELECT array_agg(x::text ORDER BY k) FROM (
			SELECT * FROM src2 WHERE k IN (1, 5)
			UNION ALL SELECT k, i2, i4, n, (SELECT t FROM src WHERE k = 2), b, (SELECT j FROM src WHERE k = 2), ts, u, bo, f, a FROM src2 WHERE k = 2) x)`).Scan(&ok))
	require.True(t, ok, "keyed:\n%s\nordered:\n%s", dump("bin_k"), dump("bin_o"))
}

// checkedTypes are the binary types of columns, as a run checks them
// (Config.BinaryTypes of their table).
func checkedTypes(columns []change.Column) map[string]uint32 {
	types := map[string]uint32{}
	for _, c := range columns {
		types[c.Name] = c.TypeOID
	}
	return types
}

// images are the rows of a table by key, as values in one format.
type images struct {
	columns []change.Column
	rows    map[int64][]change.Value
}

// readImages reads table's rows as a source would send them: in text
// (format 0) or binary (format 1) form, with the columns' type OIDs.
func readImages(t *testing.T, conn *pgx.Conn, table string, format int16) images {
	t.Helper()
	ctx := context.Background()
	res := conn.PgConn().ExecParams(ctx, `SELECT * FROM `+pgx.Identifier{table}.Sanitize()+` ORDER BY k`, nil, nil, nil, []int16{format}).Read()
	require.NoError(t, res.Err)
	var keys []int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(k ORDER BY k) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&keys))
	out := images{rows: map[int64][]change.Value{}}
	for _, f := range res.FieldDescriptions {
		out.columns = append(out.columns, change.Column{Name: f.Name, TypeOID: f.DataTypeOID, Key: f.Name == "k"})
	}
	kind := change.ValueText
	if format == 1 {
		kind = change.ValueBinary
	}
	for i, row := range res.Rows {
		vals := make([]change.Value, len(row))
		for j, b := range row {
			if b == nil {
				vals[j] = null
			} else {
				vals[j] = change.Value{Kind: kind, Text: append([]byte{}, b...)}
			}
		}
		out.rows[keys[i]] = vals
	}
	return out
}

// TestBinaryMismatch: in binary mode a relation with a column whose type
// was not checked, or a text value among binary ones, fails with
// ErrBinaryMismatch.
func TestBinaryMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.child (id int PRIMARY KEY, parent_id int, note text)`)
	rel := &change.Relation{ID: 2, Table: childRel.Table, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "parent_id", TypeOID: 23}, {Name: "note", TypeOID: 25}}}
	checked := map[string]uint32{"id": 23, "parent_id": 23, "note": 25}
	a, err := apply.New(ctx, connect(t, dst), apply.Config{MirrorUID: "m", Mappings: mappings()[1:], Binary: true,
		BinaryTypes: map[change.TableName]map[string]uint32{rel.Table: checked}})
	require.NoError(t, err)
	int4 := func(v byte) change.Value { return change.Value{Kind: change.ValueBinary, Text: []byte{0, 0, 0, v}} }

	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{int4(1), null, change.Value{Kind: change.ValueBinary, Text: []byte("n")}}}))
	_, err = a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)

	require.NoError(t, a.Begin(ctx))
	require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{int4(2), null, text("text")}}))
	_, err = a.Commit(ctx, 0x200, 2)
	require.ErrorIs(t, err, apply.ErrBinaryMismatch)
	require.NoError(t, a.Rollback(ctx))

	for _, columns := range [][]change.Column{
		{{Name: "id", TypeOID: 20, Key: true}, {Name: "parent_id", TypeOID: 23}, {Name: "note", TypeOID: 25}},
		{{Name: "id", TypeOID: 23, Key: true}, {Name: "parent_id", TypeOID: 23}, {Name: "note", TypeOID: 25}, {Name: "added", TypeOID: 25}},
	} {
		changed := &change.Relation{ID: 2, Table: rel.Table, ReplicaIdentity: change.IdentityDefault, Columns: columns}
		require.NoError(t, a.Begin(ctx))
		err = a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: changed, New: make([]change.Value, len(columns))})
		require.ErrorIs(t, err, apply.ErrBinaryMismatch)
		require.NoError(t, a.Rollback(ctx))
	}
	var n int
	require.NoError(t, connect(t, dst).QueryRow(ctx, `SELECT count(*) FROM child`).Scan(&n))
	require.Equal(t, 1, n)
}
