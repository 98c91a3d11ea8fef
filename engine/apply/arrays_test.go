package apply_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
)

// scalarDDL has a column of each kind of built-in scalar type that chunks
// of updates are written from arrays for.
const scalarDDL = `(k int8 PRIMARY KEY, i2 int2, i4 int4, n numeric(30,10), t text, vc varchar(20), b bytea, j jsonb, ts timestamptz,
	u uuid, bo bool, f float8, d date, iv interval)`

// TestUpdatesFromArrays: a binary chunk of complete-row updates, deletes
// and new rows is written from one array per column instead of through a
// staging table, and ends as the same changes given as text (which go
// through the staging table): every value and NULL, and a row the
// destination lacks inserted. A chunk with an unchanged TOAST value, and a
// table with a text key, still go through the staging table.
func TestUpdatesFromArrays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE src `+scalarDDL+`; CREATE TABLE src2 `+scalarDDL+`;
		CREATE TABLE text_s `+scalarDDL+`; CREATE TABLE bin_s `+scalarDDL+`;
		CREATE TABLE tk (k text PRIMARY KEY, v int4);
		INSERT INTO src SELECT g, g % 100, g, g / 7.0, 'row ' || g, 'v' || g, decode(md5(g::text), 'hex'), jsonb_build_object('g', g),
			'2024-01-01 00:00:00+00'::timestamptz + g * interval '1 minute', md5(g::text)::uuid, g % 2 = 0, g / 3.0,
			date '2024-01-01' + g, g * interval '1 second' FROM generate_series(1, 40) g;
		INSERT INTO src2 SELECT k, -i2, i4 * 2, -n, E'changed\t"' || t || E'"\n', vc || 'x', b || '\x00'::bytea, j || '{"u": true}',
			ts + interval '1 day', md5(k::text || 'x')::uuid, NOT bo, -f, d - 1, iv * 2 FROM src;
		UPDATE src2 SET i2 = NULL, t = NULL, j = NULL, ts = NULL WHERE k % 5 = 0;
		INSERT INTO src2 VALUES (41, 41, 41, 41, 'new', 'new', '\x41', '41', 'infinity', '41414141-4141-4141-4141-414141414141', true, 'NaN', 'infinity', '41 days');
		INSERT INTO src2 SELECT k + 30, i2, i4, n, t, vc, b, j, ts, md5(k::text || 'y')::uuid, bo, f, d, iv FROM src2 WHERE k IN (12, 13)`)
	conn := connect(t, dst)

	for _, format := range []int16{0, 1} {
		prefix := map[int16]string{0: "text", 1: "bin"}[format]
		src := readImages(t, conn, "src", format)
		src2 := readImages(t, conn, "src2", format)
		rel := &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "src"}, ReplicaIdentity: change.IdentityDefault, Columns: src.columns}
		cfg := apply.Config{MirrorUID: prefix, RowStatementsUpTo: -1, Mappings: []change.Mapping{
			{Source: rel.Table, Destination: change.TableName{Schema: "public", Name: prefix + "_s"}},
		}}
		if format == 1 {
			cfg.Binary = true
			cfg.BinaryTypes = map[change.TableName]map[string]uint32{rel.Table: checkedTypes(src.columns)}
		}
		session := connect(t, dst)
		a, err := apply.New(ctx, session, cfg)
		require.NoError(t, err)
		apply1 := func(lsn change.LSN, changes []*change.Change) {
			t.Helper()
			require.NoError(t, a.Begin(ctx))
			for _, c := range changes {
				require.NoError(t, a.Apply(ctx, c))
			}
			_, err := a.Commit(ctx, lsn, 1)
			require.NoError(t, err, prefix)
		}
		// One chunk of updates (of a row the destination lacks too),
		// deletes and new rows.
		var inserts, changes []*change.Change
		for k := int64(1); k <= 40; k++ {
			if k != 17 { // 17 is missing on the destination
				inserts = append(inserts, &change.Change{Op: change.OpInsert, Relation: rel, New: src.rows[k]})
			}
			if k >= 31 && k <= 35 {
				old := make([]change.Value, len(src.columns))
				for i := range old {
					old[i] = null
				}
				old[0] = src.rows[k][0]
				changes = append(changes, &change.Change{Op: change.OpDelete, Relation: rel, Old: old, OldKeyOnly: true})
				continue
			}
			changes = append(changes, &change.Change{Op: change.OpUpdate, Relation: rel, New: src2.rows[k]})
		}
		changes = append(changes,
			&change.Change{Op: change.OpUpdate, Relation: rel, New: src2.rows[41]}, // missing too
			&change.Change{Op: change.OpInsert, Relation: rel, New: src2.rows[42]},
			&change.Change{Op: change.OpInsert, Relation: rel, New: src2.rows[43]})
		apply1(0x100, inserts)
		apply1(0x200, changes)

		// Only a text chunk needed a staging table.
		var staging int
		require.NoError(t, session.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()`).Scan(&staging))
		require.Equal(t, format == 0, staging > 0, "%s: %d staging tables", prefix, staging)
	}
	dump := func(query string) string {
		var s string
		require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(string_agg(x::text, E'\n' ORDER BY x.k), '') FROM (`+query+`) x`).Scan(&s))
		return s
	}
	const want = `SELECT * FROM src2 WHERE k NOT BETWEEN 31 AND 35`
	require.Equal(t, dump(want), dump(`SELECT * FROM text_s`))
	require.Equal(t, dump(want), dump(`SELECT * FROM bin_s`))

	// A chunk with an unchanged value and a table with a text key go
	// through the staging table (their updates cannot be written from
	// arrays) and are still applied.
	for _, tc := range []struct {
		name    string
		table   string
		columns []change.Column
	}{
		{"text key", "tk", []change.Column{{Name: "k", TypeOID: 25, Key: true}, {Name: "v", TypeOID: 23}}},
		{"unchanged value", "bin_s", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			session := connect(t, dst)
			table := change.TableName{Schema: "public", Name: tc.table}
			var rel *change.Relation
			var rows [][]change.Value
			src2 := readImages(t, conn, "src2", 1)
			if tc.columns != nil {
				pgtest.Exec(t, dst, `INSERT INTO tk SELECT g::text, g FROM generate_series(1, 20) g`)
				rel = &change.Relation{ID: 2, Table: table, ReplicaIdentity: change.IdentityDefault, Columns: tc.columns}
				for g := byte(1); g <= 20; g++ {
					rows = append(rows, []change.Value{{Kind: change.ValueBinary, Text: fmt.Appendf(nil, "%d", g)}, {Kind: change.ValueBinary, Text: []byte{0, 0, 1, g}}})
				}
			} else {
				rel = &change.Relation{ID: 2, Table: table, ReplicaIdentity: change.IdentityDefault, Columns: src2.columns}
				for k := int64(1); k <= 20; k++ {
					row := append([]change.Value(nil), src2.rows[k]...)
					row[1] = change.Value{Kind: change.ValueBinary, Text: []byte{0, 7}}
					if k == 3 {
						row[4] = unchanged
					}
					rows = append(rows, row)
				}
			}
			a, err := apply.New(ctx, session, apply.Config{MirrorUID: "x", RowStatementsUpTo: -1, Binary: true,
				BinaryTypes: map[change.TableName]map[string]uint32{table: checkedTypes(rel.Columns)},
				Mappings:    []change.Mapping{{Source: table, Destination: table}}})
			require.NoError(t, err)
			require.NoError(t, a.Begin(ctx))
			for _, row := range rows {
				require.NoError(t, a.Apply(ctx, &change.Change{Op: change.OpUpdate, Relation: rel, New: row}))
			}
			_, err = a.Commit(ctx, 0x300, 1)
			require.NoError(t, err)
			var staging int
			require.NoError(t, session.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()`).Scan(&staging))
			require.Positive(t, staging, "the chunk went through a staging table")
			var applied int
			query := `SELECT count(*) FROM tk WHERE v = 256 + k::int`
			if tc.columns == nil {
				query = `SELECT count(*) FROM bin_s b JOIN src2 s USING (k) WHERE b.i2 = 7 AND b.t IS NOT DISTINCT FROM s.t AND k <= 20`
			}
			require.NoError(t, conn.QueryRow(ctx, query).Scan(&applied))
			require.Equal(t, 20, applied)
		})
	}
}

// TestDenseKeysMergeJoin: a chunk whose integer keys are dense is written
// with one walk along the key's index (a merge join: one index scan),
// sparse keys by a lookup per row, and both end right: updates, deletes,
// keys on both sides of zero, an updated row the destination lacks, int8
// keys at the type's ends. The planner settings are back to the session's
// after each chunk, inside the open transaction.
func TestDenseKeysMergeJoin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE r4 (k int4 PRIMARY KEY, v int8); INSERT INTO r4 SELECT g, g FROM generate_series(-1000, 3000) g;
		DELETE FROM r4 WHERE k = 1001;
		CREATE TABLE r8 (k int8 PRIMARY KEY, v int8); INSERT INTO r8 SELECT g, g FROM generate_series(1, 100000) g;
		INSERT INTO r8 VALUES (-9223372036854775808, 0), (9223372036854775807, 0); ANALYZE r4, r8`)
	conn := connect(t, dst)
	session := connect(t, dst)
	int4 := func(v int64) change.Value {
		return change.Value{Kind: change.ValueBinary, Text: binary.BigEndian.AppendUint32(nil, uint32(int32(v)))}
	}
	int8 := func(v int64) change.Value {
		return change.Value{Kind: change.ValueBinary, Text: binary.BigEndian.AppendUint64(nil, uint64(v))}
	}
	rel4 := &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "r4"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "k", TypeOID: 23, Key: true}, {Name: "v", TypeOID: 20}}}
	rel8 := &change.Relation{ID: 2, Table: change.TableName{Schema: "public", Name: "r8"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "k", TypeOID: 20, Key: true}, {Name: "v", TypeOID: 20}}}
	a, err := apply.New(ctx, session, apply.Config{MirrorUID: "m", RowStatementsUpTo: -1, ChunkSize: 1000, Binary: true,
		BinaryTypes: map[change.TableName]map[string]uint32{rel4.Table: checkedTypes(rel4.Columns), rel8.Table: checkedTypes(rel8.Columns)},
		Mappings:    []change.Mapping{{Source: rel4.Table, Destination: rel4.Table}, {Source: rel8.Table, Destination: rel8.Table}}})
	require.NoError(t, err)

	// scans is how many index scans and sequential scans the open
	// transaction started on table (each lookup of a nested loop is an
	// index scan).
	scans := func(table string) (index, seq int64) {
		require.NoError(t, session.QueryRow(ctx, `SELECT coalesce(idx_scan, 0), seq_scan FROM pg_stat_xact_user_tables WHERE relname = $1`, table).Scan(&index, &seq))
		return index, seq
	}
	chunk := func(name, table string, changes []*change.Change, dense bool) {
		t.Helper()
		index0, seq0 := scans(table)
		for _, c := range changes {
			require.NoError(t, a.Apply(ctx, c))
		}
		index, seq := scans(table)
		walk := index-index0 <= 3 && seq == seq0
		if dense {
			require.True(t, walk, "%s: dense keys are read in one walk along the index (%d index scans, %d sequential)", name, index-index0, seq-seq0)
		} else {
			require.False(t, walk, "%s: sparse keys are not read by walking the index from the smallest to the largest", name)
		}
		var nestloop, hashjoin string
		require.NoError(t, session.QueryRow(ctx, `SELECT current_setting('enable_nestloop'), current_setting('enable_hashjoin')`).Scan(&nestloop, &hashjoin))
		require.Equal(t, []string{"on", "on"}, []string{nestloop, hashjoin}, "%s: planner settings restored", name)
	}
	update := func(rel *change.Relation, enc func(int64) change.Value, k int64) *change.Change {
		return &change.Change{Op: change.OpUpdate, Relation: rel, New: []change.Value{enc(k), int8(-k)}}
	}
	require.NoError(t, a.Begin(ctx))
	var changes []*change.Change
	for k := int64(-500); k < 500; k++ { // dense, across zero
		changes = append(changes, update(rel4, int4, k))
	}
	chunk("dense updates", "r4", changes, true)
	changes = changes[:0]
	for k := int64(1001); k <= 3000; k += 2 { // every other key: sparse; 1001 is missing
		changes = append(changes, update(rel4, int4, k))
	}
	chunk("sparse updates", "r4", changes, false)
	changes = changes[:0]
	for k := int64(-1000); k < 0; k++ { // dense deletes
		changes = append(changes, &change.Change{Op: change.OpDelete, Relation: rel4, Old: []change.Value{int4(k), null}, OldKeyOnly: true})
	}
	chunk("dense deletes", "r4", changes, true)
	_, err = a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)

	// int8 keys from one end of the type to the other: sparse.
	require.NoError(t, a.Begin(ctx))
	changes = changes[:0]
	for k := int64(1); k <= 998; k++ {
		changes = append(changes, update(rel8, int8, k))
	}
	changes = append(changes,
		&change.Change{Op: change.OpUpdate, Relation: rel8, New: []change.Value{int8(math.MinInt64), int8(math.MaxInt64)}},
		update(rel8, int8, math.MaxInt64))
	chunk("int8 keys end to end", "r8", changes, false)
	_, err = a.Commit(ctx, 0x200, 2)
	require.NoError(t, err)

	var wrong int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM r4 WHERE v IS DISTINCT FROM CASE
		WHEN k < 0 AND k >= -500 THEN -k WHEN k BETWEEN 0 AND 499 THEN -k WHEN k > 1000 AND k % 2 = 1 THEN -k ELSE k END`).Scan(&wrong))
	require.Zero(t, wrong)
	var rows, below, missing int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE k < 0), count(*) FILTER (WHERE k = 1001 AND v = -1001) FROM r4`).Scan(&rows, &below, &missing))
	require.Equal(t, []int{3000 + 1, 0, 1}, []int{rows, below, missing}, "deletes applied, the missing row 1001 inserted")
	var r8 string
	require.NoError(t, conn.QueryRow(ctx, `SELECT string_agg(k || ':' || v, ',' ORDER BY k) FROM r8 WHERE k < 1 OR k > 100000 OR (k <= 998 AND v <> -k) OR (k > 998 AND v <> k)`).Scan(&r8))
	require.Equal(t, "-9223372036854775808:9223372036854775807,9223372036854775807:-9223372036854775807", r8)
}
