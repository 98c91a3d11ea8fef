package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// TestMirrorTablesSetStatusAll: nil and empty id lists mean every table of
// the mirror (a nil slice reaches PostgreSQL as NULL); a list means those.
func TestMirrorTablesSetStatusAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	m := createMirror(t, store, "m1", mapping("a", "a2"), mapping("b", "b2"))
	other := createMirror(t, store, "m2", mapping("c", "c2"))
	statuses := func(id int64) []string {
		tables, err := store.MirrorTables(ctx, id)
		require.NoError(t, err)
		var out []string
		for _, tb := range tables {
			out = append(out, string(tb.Status))
		}
		return out
	}
	require.NoError(t, store.MirrorTablesSetStatus(ctx, m.ID, nil, db.TableStatusRunning))
	require.Equal(t, []string{"running", "running"}, statuses(m.ID))
	require.NoError(t, store.MirrorTablesSetStatus(ctx, m.ID, []int64{}, db.TableStatusPending))
	require.Equal(t, []string{"pending", "pending"}, statuses(m.ID))
	tables, err := store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.NoError(t, store.MirrorTablesSetStatus(ctx, m.ID, []int64{tables[1].ID}, db.TableStatusSnapshotting))
	require.Equal(t, []string{"pending", "snapshotting"}, statuses(m.ID))
	require.Equal(t, []string{"pending"}, statuses(other.ID), "another mirror's tables are not touched")
}

// TestSlotHealth: readings are stored on live mirrors only, return the
// previous wal status, and do not touch updated_at.
func TestSlotHealth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	m := createMirror(t, store, "m1", mapping("a", "a2"))
	watches, err := store.MirrorsWithSlot(ctx)
	require.NoError(t, err)
	require.Empty(t, watches, "a mirror that has not created its slot is not watched")
	require.NoError(t, store.MirrorSetCreated(ctx, m.ID, false, true))
	watches, err = store.MirrorsWithSlot(ctx)
	require.NoError(t, err)
	require.Len(t, watches, 1)
	require.Equal(t, "slot_m1", watches[0].Slot)

	before, err := store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	lag, reserved := int64(12345), "reserved"
	checked := time.Now().UTC().Truncate(time.Millisecond)
	prev, found, err := store.MirrorRecordSlotHealth(ctx, m.ID, db.SlotHealth{LagBytes: &lag, WALStatus: &reserved, CheckedAt: checked})
	require.NoError(t, err)
	require.True(t, found)
	require.Nil(t, prev)
	after, err := store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Equal(t, lag, *after.SlotLagBytes)
	require.Equal(t, "reserved", *after.SlotWALStatus)
	require.True(t, checked.Equal(*after.SlotCheckedAt))
	require.True(t, before.UpdatedAt.Equal(after.UpdatedAt), "a slot reading alone does not touch updated_at")

	missing := db.SlotWALMissing
	prev, _, err = store.MirrorRecordSlotHealth(ctx, m.ID, db.SlotHealth{WALStatus: &missing, CheckedAt: time.Now()})
	require.NoError(t, err)
	require.Equal(t, "reserved", *prev)
	after, err = store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.Nil(t, after.SlotLagBytes)

	// Other writes still touch updated_at.
	require.NoError(t, store.MirrorSetLastLSN(ctx, m.ID, "0/10"))
	touched, err := store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.True(t, touched.UpdatedAt.After(after.UpdatedAt))
}
