package schemasync

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// TestSyncTypesBuiltinOnly: tables whose columns use only built-in types
// need no destination transaction: SyncTypes returns at once while another
// session holds the schemasync lock (every starting run calls it, and would
// otherwise queue there), and a user-defined enum still gets its labels,
// under the lock.
func TestSyncTypesBuiltinOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.src.Exec(b.ctx, `CREATE TABLE public.plain (id bigint PRIMARY KEY, v text, n int[], at timestamptz);
		CREATE TYPE public.mood AS ENUM ('ok', 'sad');
		CREATE TABLE public.moody (id bigint PRIMARY KEY, m public.mood)`)
	require.NoError(t, err)
	plain := change.Mapping{Source: change.TableName{Schema: "public", Name: "plain"}, Destination: change.TableName{Schema: "public", Name: "plain"}}
	moody := change.Mapping{Source: change.TableName{Schema: "public", Name: "moody"}, Destination: change.TableName{Schema: "public", Name: "moody"}}

	holder := connect(t, b.dstURL)
	tx, err := holder.Begin(b.ctx)
	require.NoError(t, err)
	_, err = tx.Exec(b.ctx, lockSQL)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	ddl, err := SyncTypes(ctx, b.src, b.dst, []change.Mapping{plain})
	require.NoError(t, err, "built-in types only: no wait for the schemasync lock")
	require.Empty(t, ddl)

	done := make(chan error, 1)
	go func() {
		_, err := SyncTypes(b.ctx, b.src, b.dst, []change.Mapping{moody})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a user-defined type was synced without the schemasync lock: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	require.NoError(t, tx.Rollback(b.ctx))
	require.NoError(t, <-done)
	var labels int
	require.NoError(t, b.dst.QueryRow(b.ctx, `SELECT count(*) FROM pg_catalog.pg_enum e JOIN pg_catalog.pg_type t ON t.oid = e.enumtypid WHERE t.typname = 'mood'`).Scan(&labels))
	require.Equal(t, 2, labels)
}
