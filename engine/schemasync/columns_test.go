package schemasync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestSyncColumnsAddedIdentity: a column added on the source with values
// computed for every existing row (an identity, a serial) and then added by
// sync-schema leaves the destination's older rows NULL there; a warning
// says so and says to resync, as the stream resyncs such a table itself.
func TestSyncColumnsAddedIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id integer PRIMARY KEY); INSERT INTO t VALUES (1), (2)`)
	name := change.TableName{Schema: "public", Name: "t"}
	m := change.Mapping{Source: name, Destination: name}
	_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err)
	pgtest.Exec(t, b.dstURL, `INSERT INTO t VALUES (1), (2)`)

	pgtest.Exec(t, b.srcURL, `ALTER TABLE t ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY, ADD COLUMN s serial`)
	ddl, warnings, err := SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{m})
	require.NoError(t, err, "ddl: %v", ddl)
	require.Len(t, warnings, 2, "%v", warnings)
	require.Contains(t, warnings[0], `column "n" of "public"."t" was added with NULL in the rows the destination already had`)
	require.Contains(t, warnings[1], `column "s" of "public"."t" was added with NULL in the rows the destination already had`)
	for _, stmt := range ddl {
		require.NotContains(t, stmt, "nextval", "a default drawing from the source's sequence is not set")
	}
	var nulls int
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT count(*) FROM t WHERE n IS NULL AND s IS NULL`).Scan(&nulls))
	require.Equal(t, 2, nulls)
}

// TestReshapeForCopyRenames: before a copy, a column the source renamed to
// a name the mapping excludes is dropped (as the stream drops it), and a
// rename whose new name a staying destination column holds leaves the old
// column under its name: no column is left under a temporary name.
func TestReshapeForCopyRenames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `CREATE TABLE t (id integer PRIMARY KEY, a integer, b integer, c integer)`)
	name := change.TableName{Schema: "public", Name: "t"}
	_, err := EnsureTables(b.ctx, b.src, b.dst, []change.Mapping{{Source: name, Destination: name}})
	require.NoError(t, err)
	known := KnownColumns{1: "id", 2: "a", 3: "b", 4: "c"}
	// a becomes excluded; b's name is taken by a destination column
	// pgmirror does not know of (x, added by hand, is kept).
	pgtest.Exec(t, b.dstURL, `ALTER TABLE t ADD COLUMN x integer`)
	pgtest.Exec(t, b.srcURL, `ALTER TABLE t RENAME COLUMN a TO secret; ALTER TABLE t RENAME COLUMN b TO x`)

	m := change.Mapping{Source: name, Destination: name, ExcludeColumns: []string{"secret"}}
	ddl, warnings, err := ReshapeForCopy(b.ctx, b.src, b.dst, m, known)
	require.NoError(t, err, "ddl: %v", ddl)
	require.Contains(t, ddl, `ALTER TABLE "public"."t" DROP COLUMN "a"`)
	dt, err := Describe(b.ctx, b.dst, name)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"id", "b", "c", "x"}, columnNames(dt.Columns), "ddl: %v, warnings: %v", ddl, warnings)
}
