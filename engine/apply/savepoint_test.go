package apply

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// TestSavepoints: an Early applier's batch undoes what it wrote and what it
// buffered since a savepoint (nested ones forgotten with it), keeps what
// came before, goes on with staging tables made again, and reports the
// counts of what it committed only.
func TestSavepoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, conn, rel := testApplier(t, Config{Early: true, ChunkSize: 100, RowStatementsUpTo: -1})
	row := func(op change.Op, id int, v string) *change.Change {
		vals := []change.Value{{Kind: change.ValueText, Text: fmt.Append(nil, id)}, {Kind: change.ValueText, Text: []byte(v)}}
		if op == change.OpDelete {
			vals[1] = change.Value{Kind: change.ValueNull}
			return &change.Change{Op: op, Relation: rel, Old: vals}
		}
		return &change.Change{Op: op, Relation: rel, New: vals}
	}
	apply := func(op change.Op, from, to int, v string) {
		t.Helper()
		for id := from; id <= to; id++ {
			require.NoError(t, a.Apply(ctx, row(op, id, v)))
		}
	}
	require.NoError(t, a.Begin(ctx))
	apply(change.OpInsert, 1, 250, "kept") // written in part, buffered in part
	require.NoError(t, a.Savepoint(ctx, "s1"))
	apply(change.OpUpdate, 1, 150, "rolled back") // chunks written through a staging table
	require.NoError(t, a.Savepoint(ctx, "s2"))
	apply(change.OpInsert, 251, 300, "rolled back")
	require.NoError(t, a.RollbackToSavepoint(ctx, "s1"))
	require.Error(t, a.RollbackToSavepoint(ctx, "s2"), "a savepoint set after the one rolled back to is gone")
	require.NoError(t, a.Savepoint(ctx, "s3"))
	apply(change.OpUpdate, 201, 250, "updated")
	apply(change.OpInsert, 301, 320, "new")
	require.NoError(t, a.Savepoint(ctx, "s4"))
	apply(change.OpDelete, 1, 10, "")
	require.NoError(t, a.RollbackToSavepoint(ctx, "s4"))
	counts, err := a.Commit(ctx, 0x100, 1)
	require.NoError(t, err)
	require.Equal(t, change.Counts{Inserted: 250 + 20, Updated: 50}, counts[rel.Table])

	rows, err := conn.Query(ctx, `SELECT v, count(*), min(id), max(id) FROM public.t GROUP BY v ORDER BY v`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var v string
		var n, lo, hi int
		err := r.Scan(&v, &n, &lo, &hi)
		return fmt.Sprintf("%s: %d (%d-%d)", v, n, lo, hi), err
	})
	require.NoError(t, err)
	require.Equal(t, []string{"kept: 200 (1-200)", "new: 20 (301-320)", "updated: 50 (201-250)"}, got)
}
