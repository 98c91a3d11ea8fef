package positions_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func TestPositions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDatabase(t, pgtest.DestCluster(t)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	require.NoError(t, positions.Ensure(ctx, conn))
	require.NoError(t, positions.Ensure(ctx, conn), "twice is fine")
	// A table that went missing is created again.
	_, err = conn.Exec(ctx, `DROP TABLE _pgmirror.flushes`)
	require.NoError(t, err)
	require.NoError(t, positions.Ensure(ctx, conn))
	_, err = conn.Exec(ctx, `SELECT 1 FROM _pgmirror.flushes`)
	require.NoError(t, err, "flushes created again")

	orders := change.TableName{Schema: "public", Name: "orders"}
	items := change.TableName{Schema: "public", Name: "items"}
	dotted := change.TableName{Schema: "a.b", Name: "c"}
	_, _, found, err := positions.Applied(ctx, conn, "m1")
	require.NoError(t, err)
	require.False(t, found)

	// A slot without a copy: the first start position sticks.
	did, err := positions.StartAt(ctx, conn, "m1", 0x100, 0)
	require.NoError(t, err)
	require.True(t, did)
	did, err = positions.StartAt(ctx, conn, "m1", 0x200, 0)
	require.NoError(t, err)
	require.False(t, did, "a mirror with a position keeps it")
	lsn, _, found, err := positions.Applied(ctx, conn, "m1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, change.LSN(0x100), lsn)

	// Table copies stand at their own positions; the other mirror's are apart.
	require.NoError(t, positions.TableCopied(ctx, conn, "m1", orders, 0x150))
	require.NoError(t, positions.TableCopied(ctx, conn, "m1", dotted, 0x160))
	require.NoError(t, positions.TableCopied(ctx, conn, "m1", items, 0x170))
	require.NoError(t, positions.TableCopied(ctx, conn, "m2", orders, 0x999))
	got, unknown, err := positions.Tables(ctx, conn, "m1", []change.TableName{orders, dotted})
	require.NoError(t, err)
	require.Equal(t, map[change.TableName]change.LSN{orders: 0x150, dotted: 0x160}, got)
	require.Equal(t, []string{"public.items"}, unknown, "a table no longer mapped")
	require.NoError(t, positions.Forget(ctx, conn, "m1", unknown))

	// A copy starting again forgets where the table stood.
	require.NoError(t, positions.CopyStarting(ctx, conn, "m1", []change.TableName{dotted}))
	got, _, err = positions.Tables(ctx, conn, "m1", []change.TableName{orders, dotted, items})
	require.NoError(t, err)
	require.Equal(t, map[change.TableName]change.LSN{orders: 0x150}, got)

	// Inside a batch: move one, forget another, all or nothing.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, positions.SetTables(ctx, tx, "m1", map[change.TableName]change.LSN{items: 0x180}, []change.TableName{orders}))
	require.NoError(t, tx.Rollback(ctx))
	got, _, err = positions.Tables(ctx, conn, "m1", []change.TableName{orders, items})
	require.NoError(t, err)
	require.Equal(t, map[change.TableName]change.LSN{orders: 0x150}, got, "a rolled back batch changes nothing")

	// A snapshot puts the mirror at its point and every table with it.
	require.NoError(t, positions.SnapshotTaken(ctx, conn, "m1", 0x300, 7))
	lsn, batch, _, err := positions.Applied(ctx, conn, "m1")
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x300), lsn)
	require.Equal(t, int64(7), batch)
	got, unknown, err = positions.Tables(ctx, conn, "m1", []change.TableName{orders, items})
	require.NoError(t, err)
	require.Empty(t, got)
	require.Empty(t, unknown)
	got, _, err = positions.Tables(ctx, conn, "m2", []change.TableName{orders})
	require.NoError(t, err)
	require.Equal(t, map[change.TableName]change.LSN{orders: 0x999}, got, "other mirrors are left alone")

	flushed, err := positions.FlushWAL(ctx, conn, "m1")
	require.NoError(t, err)
	require.NotZero(t, flushed)
}
