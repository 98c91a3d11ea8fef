package apply

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestCommitPositions(t *testing.T) {
	t.Parallel()
	lsns := &pgconn.Result{CommandTag: pgconn.NewCommandTag("SELECT 1"), Rows: [][][]byte{{[]byte("1/A0"), []byte("1/80")}}}
	commit, flushed, err := commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}, lsns})
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x1_0000_00A0), commit)
	require.Equal(t, change.LSN(0x1_0000_0080), flushed)

	// COMMIT of a failed transaction answers ROLLBACK.
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("ROLLBACK")}, lsns})
	require.ErrorContains(t, err, "rolled the transaction back")
	failed := errors.New("boom")
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}, {Err: failed}})
	require.ErrorIs(t, err, failed)
	_, _, err = commitPositions([]*pgconn.Result{{CommandTag: pgconn.NewCommandTag("COMMIT")}})
	require.Error(t, err)
}

// TestFlushRecyclesEntries: a written chunk leaves its plan's block of
// entries zeroed, so an idle mirror keeps none of its last changes alive.
func TestFlushRecyclesEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, conn, rel := testApplier(t, Config{})
	require.NoError(t, a.Begin(ctx))
	const rows = entryBlock + 44
	for i := range rows {
		c := &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{
			{Kind: change.ValueText, Text: fmt.Append(nil, i)}, {Kind: change.ValueText, Text: []byte("v")}}}
		require.NoError(t, a.Apply(ctx, c))
	}
	p := a.current[rel.Table]
	require.Equal(t, entryBlock, p.entriesUsed)
	_, err := a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM public.t`).Scan(&n))
	require.Equal(t, rows, n)
	require.Zero(t, p.entriesUsed)
	require.Nil(t, p.entryOverflow)
	for i, e := range p.entryBlock {
		require.Equal(t, entry{}, e, "entry %d still holds its values", i)
	}
}

// testApplier makes a destination database with table public.t (id int
// key, v text) and returns an applier on it (cfg with the mirror and the
// table's mapping), its connection and the table's source relation.
func testApplier(t *testing.T, cfg Config) (*Applier, *pgx.Conn, *change.Relation) {
	t.Helper()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.t (id int PRIMARY KEY, v text)`)
	conn, err := pgx.Connect(ctx, dst)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	rel := &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "t"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true}, {Name: "v"}}}
	cfg.MirrorUID = "m"
	cfg.Mappings = []change.Mapping{{Source: rel.Table, Destination: rel.Table}}
	a, err := New(ctx, conn, cfg)
	require.NoError(t, err)
	return a, conn, rel
}

// TestPrefetchLeavesMissingTable: a destination table that cannot be
// described ahead is no error of Prefetch; its first change reports it.
func TestPrefetchLeavesMissingTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, conn, rel := testApplier(t, Config{})
	_, err := conn.Exec(ctx, `DROP TABLE public.t`)
	require.NoError(t, err)
	require.NoError(t, a.Prefetch(ctx, rel.Table))
	require.NoError(t, a.Begin(ctx))
	err = a.Apply(ctx, &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{
		{Kind: change.ValueText, Text: []byte("1")}, {Kind: change.ValueText, Text: []byte("v")}}})
	require.ErrorContains(t, err, "destination table public.t does not exist")
}
