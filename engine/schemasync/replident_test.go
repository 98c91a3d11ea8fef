package schemasync

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// destIdentity returns the replica identity of destination table name as
// "FULL", "DEFAULT", "NOTHING" or "INDEX <index name>".
func destIdentity(t *testing.T, b *testBundle, name string) string {
	t.Helper()
	var ident, index string
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT c.relreplident::text, COALESCE((SELECT ic.relname::text FROM pg_index i
		JOIN pg_class ic ON ic.oid = i.indexrelid WHERE i.indrelid = c.oid AND i.indisreplident), '')
		FROM pg_class c WHERE c.oid = $1::regclass`, name).Scan(&ident, &index))
	if ident == "i" {
		return "INDEX " + index
	}
	return map[string]string{"f": "FULL", "d": "DEFAULT", "n": "NOTHING"}[ident]
}

// TestReplicaIdentityCarried: created destination tables get the source's
// replica identity: FULL, USING INDEX over the UNIQUE constraint of a
// keyless table, FULL for a keyless partitioned table, USING INDEX of a
// table with a primary key once the cut-over created that index; a later
// change of the source's identity follows at sync-schema.
func TestReplicaIdentityCarried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pgtest.Exec(t, b.srcURL, `
		CREATE TABLE full_t (a int, b text);
		ALTER TABLE full_t REPLICA IDENTITY FULL;
		CREATE TABLE idx_t (a int NOT NULL, b int NOT NULL, c text);
		CREATE UNIQUE INDEX idx_t_ab ON idx_t (b, a);
		ALTER TABLE idx_t REPLICA IDENTITY USING INDEX idx_t_ab;
		CREATE TABLE pk_idx (id int PRIMARY KEY, code text NOT NULL);
		CREATE UNIQUE INDEX pk_idx_code ON pk_idx (code);
		ALTER TABLE pk_idx REPLICA IDENTITY USING INDEX pk_idx_code;
		CREATE TABLE plain (id int PRIMARY KEY, v text);
		CREATE TABLE parted (k int, v text) PARTITION BY LIST (k);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
		ALTER TABLE parted_1 REPLICA IDENTITY FULL;`)
	var maps []change.Mapping
	for _, name := range []string{"full_t", "idx_t", "pk_idx", "plain", "parted"} {
		maps = append(maps, change.Mapping{Source: change.TableName{Schema: "public", Name: name}, Destination: change.TableName{Schema: "copy", Name: name}})
	}
	ddl, err := EnsureTables(b.ctx, b.src, b.dst, maps)
	require.NoError(t, err)
	require.Contains(t, ddl, `ALTER TABLE "copy"."full_t" REPLICA IDENTITY FULL`)
	require.Equal(t, "FULL", destIdentity(t, b, "copy.full_t"))
	require.Equal(t, "INDEX idx_t_b_a_key", destIdentity(t, b, "copy.idx_t"), "the UNIQUE constraint standing for the source's identity index")
	require.Equal(t, "DEFAULT", destIdentity(t, b, "copy.pk_idx"), "its unique index waits for the cut-over; the primary key identifies rows until then")
	require.Equal(t, "DEFAULT", destIdentity(t, b, "copy.plain"))
	require.Equal(t, "FULL", destIdentity(t, b, "copy.parted"), "a keyless partitioned source whose partitions are FULL")

	ddl, err = EnsureTables(b.ctx, b.src, b.dst, maps)
	require.NoError(t, err)
	require.Empty(t, ddl, "a second run changes nothing")

	// After the copy nothing changes; at the cut-over the unique index is
	// created and becomes the identity.
	_, _, err = AddIndexesAndConstraints(b.ctx, b.src, b.dst, maps[2], AfterCopy)
	require.NoError(t, err)
	require.Equal(t, "DEFAULT", destIdentity(t, b, "copy.pk_idx"))
	ddl, warnings, err := AddIndexesAndConstraints(b.ctx, b.src, b.dst, maps[2], AtCutover)
	require.NoError(t, err)
	require.Empty(t, warnings)
	require.Contains(t, ddl, `ALTER TABLE "copy"."pk_idx" REPLICA IDENTITY USING INDEX "pk_idx_code"`)
	require.Equal(t, "INDEX pk_idx_code", destIdentity(t, b, "copy.pk_idx"))

	// The source changes its identity: sync-schema (and a resync's copy) follow.
	pgtest.Exec(t, b.srcURL, `ALTER TABLE plain REPLICA IDENTITY FULL; ALTER TABLE pk_idx REPLICA IDENTITY DEFAULT`)
	ddl, _, err = SyncColumns(b.ctx, b.src, b.dst, maps)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{`ALTER TABLE "copy"."plain" REPLICA IDENTITY FULL`, `ALTER TABLE "copy"."pk_idx" REPLICA IDENTITY DEFAULT`}, ddl)
	require.Equal(t, "FULL", destIdentity(t, b, "copy.plain"))
	require.Equal(t, "DEFAULT", destIdentity(t, b, "copy.pk_idx"))
	pgtest.Exec(t, b.srcURL, `ALTER TABLE plain REPLICA IDENTITY DEFAULT`)
	ddl, _, err = AddIndexesAndConstraints(b.ctx, b.src, b.dst, maps[3], AfterCopy)
	require.NoError(t, err)
	require.Contains(t, ddl, `ALTER TABLE "copy"."plain" REPLICA IDENTITY DEFAULT`)

	// A destination table pgmirror did not create is left as it is.
	pgtest.Exec(t, b.dstURL, `CREATE TABLE public.mine (a int, b text)`)
	mine := change.Mapping{Source: change.TableName{Schema: "public", Name: "full_t"}, Destination: change.TableName{Schema: "public", Name: "mine"}}
	ddl, _, err = SyncColumns(b.ctx, b.src, b.dst, []change.Mapping{mine})
	require.NoError(t, err)
	require.Empty(t, ddl)
	require.Equal(t, "DEFAULT", destIdentity(t, b, "public.mine"))
}
