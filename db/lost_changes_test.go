package db_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// Lost changes in the catalog: a finding marks every replicating table, a
// repeated one changes nothing, a later one completes the range; a copy or
// a verification clears a table only from the slot's new start on; the
// mirror and its tables show the marks.
func TestLostChangesInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	m := createMirror(t, store, "lost", mapping("a", "a"), mapping("b", "b"), mapping("c", "c"))
	_, err := store.Pool().Exec(ctx, `UPDATE mirror_tables SET status = CASE source_table WHEN 'c' THEN 'dropped' ELSE 'running' END WHERE mirror_id = $1`, m.ID)
	require.NoError(t, err)
	_, err = store.Pool().Exec(ctx, `UPDATE mirrors SET status = 'running', created_slot = true WHERE id = $1`, m.ID)
	require.NoError(t, err)

	// The slot monitor finds the slot missing.
	tables, added, err := store.MirrorRecordLostChanges(ctx, m.ID, db.LostChanges{SinceLSN: "0/100", Reason: db.LostSlotMissing, OnlyIfSettled: true})
	require.NoError(t, err)
	require.Equal(t, []string{"public.a", "public.b"}, tables, "a dropped table is not marked")
	require.Equal(t, tables, added)
	// Again: nothing changes.
	tables, added, err = store.MirrorRecordLostChanges(ctx, m.ID, db.LostChanges{SinceLSN: "0/200", Reason: db.LostSlotMissing, OnlyIfSettled: true})
	require.NoError(t, err)
	require.Empty(t, tables)
	require.Empty(t, added)
	// The run creates it again: the range is complete, since stays.
	tables, added, err = store.MirrorRecordLostChanges(ctx, m.ID, db.LostChanges{SinceLSN: "0/180", UntilLSN: "0/500", Reason: db.LostSlotRecreated})
	require.NoError(t, err)
	require.Equal(t, []string{"public.a", "public.b"}, tables)
	require.Empty(t, added)

	got, err := store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Len(t, got.LostChanges, 2)
	l := got.LostChanges[0]
	require.Equal(t, "public.a", l.Table)
	require.Equal(t, "0/100", *l.SinceLSN)
	require.Equal(t, "0/500", *l.UntilLSN)
	require.Equal(t, db.LostSlotRecreated, l.Reason)
	require.False(t, l.DetectedAt.IsZero())
	mt, err := store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.NotNil(t, mt[0].LostChanges)
	require.Nil(t, mt[2].LostChanges)

	// A copy from before the slot's new start clears nothing; one from at
	// or after it does.
	cleared, err := store.MirrorTableLostChangesCopied(ctx, mt[0].ID, "0/400", false)
	require.NoError(t, err)
	require.False(t, cleared)
	cleared, err = store.MirrorTableLostChangesCopied(ctx, mt[0].ID, "0/500", false)
	require.NoError(t, err)
	require.True(t, cleared)
	// A verification likewise.
	done, err := store.MirrorLostChangesVerified(ctx, m.ID, []string{"public.b"}, "0/4FF")
	require.NoError(t, err)
	require.Empty(t, done)
	done, err = store.MirrorLostChangesVerified(ctx, m.ID, []string{"public.b"}, "0/600")
	require.NoError(t, err)
	require.Equal(t, []string{"public.b"}, done)
	got, err = store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Empty(t, got.LostChanges)

	// A mirror in a resync (pending action) is not marked by the monitor.
	_, err = store.Pool().Exec(ctx, `UPDATE mirrors SET pending_action = 'resync' WHERE id = $1`, m.ID)
	require.NoError(t, err)
	tables, _, err = store.MirrorRecordLostChanges(ctx, m.ID, db.LostChanges{Reason: db.LostSlotMissing, OnlyIfSettled: true})
	require.NoError(t, err)
	require.Empty(t, tables)

	// The confirm ceiling only rises.
	_, found, err := store.MirrorConfirmCeiling(ctx, m.ID)
	require.NoError(t, err)
	require.False(t, found)
	at, err := store.MirrorRaiseConfirmCeiling(ctx, m.ID, "0/900")
	require.NoError(t, err)
	require.Equal(t, "0/900", at)
	at, err = store.MirrorRaiseConfirmCeiling(ctx, m.ID, "0/800")
	require.NoError(t, err)
	require.Equal(t, "0/900", at)
}
