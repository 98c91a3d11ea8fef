package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestSchemaMappingsInCatalog stores a schema mapping with the mirror,
// adds a table found in the schema, marks a table dropped, brings it back
// when it exists again, and checks that "all tables" status changes leave
// dropped tables alone.
func TestSchemaMappingsInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	src, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "src", Host: "h", Port: 1, User: "u", Password: "p", Database: "d", SSLMode: "disable"})
	require.NoError(t, err)
	a := mapping("a", "a")
	tx, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	m, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{
		Name: "s", SourcePeerID: src.ID, DestinationPeerID: src.ID,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 1, CDCBatchSize: 1, PublicationName: "pub_s", ReplicationSlotName: "slot_s",
		Tables: []change.Mapping{a, mapping("x", "x")}, SchemaMappings: []db.SchemaMapping{{SourceSchema: "public", DestinationSchema: "public"}},
		FromSchema: map[change.TableName]bool{a.Source: true},
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	schemas, err := store.MirrorSchemaMappings(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, []db.SchemaMapping{{SourceSchema: "public", DestinationSchema: "public"}}, schemas)
	tables, err := store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.True(t, tables[0].FromSchemaMapping)
	require.False(t, tables[1].FromSchemaMapping)

	// A table created in the schema joins as pending with a copy requested, once.
	b := mapping("b", "b")
	added, err := store.MirrorTableAddFromSchema(ctx, m.ID, b)
	require.NoError(t, err)
	require.True(t, added)
	added, err = store.MirrorTableAddFromSchema(ctx, m.ID, b)
	require.NoError(t, err)
	require.False(t, added, "a table the mirror has is not added twice")
	tables, err = store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.Len(t, tables, 3)
	require.Equal(t, "b", tables[2].SourceTable)
	require.Equal(t, 2, tables[2].Position)
	require.Equal(t, db.TableStatusPending, tables[2].Status)
	require.NotNil(t, tables[2].ResyncRequestedAt)
	require.True(t, tables[2].FromSchemaMapping)

	// Dropped: once; "all tables" updates leave it alone; back when created again.
	dropped, err := store.MirrorTableSetDropped(ctx, tables[0].ID)
	require.NoError(t, err)
	require.True(t, dropped)
	dropped, err = store.MirrorTableSetDropped(ctx, tables[0].ID)
	require.NoError(t, err)
	require.False(t, dropped)
	require.NoError(t, store.MirrorTablesSetStatus(ctx, m.ID, nil, db.TableStatusRunning))
	tables, err = store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, db.TableStatusDropped, tables[0].Status)
	require.Equal(t, db.TableStatusRunning, tables[1].Status)
	added, err = store.MirrorTableAddFromSchema(ctx, m.ID, a)
	require.NoError(t, err)
	require.True(t, added, "a dropped table created again is copied again")
	tables, err = store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, db.TableStatusPending, tables[0].Status)
	require.NotNil(t, tables[0].ResyncRequestedAt)

	// PUT tables without the schema mapping removes it.
	tx, err = store.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = store.With(tx).MirrorTablesReplace(ctx, m.ID, []change.Mapping{mapping("x", "x")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	schemas, err = store.MirrorSchemaMappings(ctx, m.ID)
	require.NoError(t, err)
	require.Empty(t, schemas)
}
