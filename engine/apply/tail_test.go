package apply_test

import (
	"context"
	"encoding/binary"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// countingConn counts the writes to the server: a pipelined round trip is
// one write.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func int8Value(n int64) change.Value {
	return change.Value{Kind: change.ValueBinary, Text: binary.BigEndian.AppendUint64(nil, uint64(n))}
}

func binText(s string) change.Value { return change.Value{Kind: change.ValueBinary, Text: []byte(s)} }

// TestSmallBatchOneRoundTrip: a small batch of inserts and deletes (nothing
// to check before COMMIT) costs one round trip: its row statements go with
// the applied position and COMMIT. A failing statement among them leaves the
// batch open for Rollback, and nothing of it is on the destination.
func TestSmallBatchOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, dst, `CREATE TABLE public.t (id int8 PRIMARY KEY, v text CHECK (v <> 'bad'))`)
	cfg, err := pgx.ParseConfig(dst)
	require.NoError(t, err)
	var writes atomic.Int64
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, positions.Ensure(ctx, conn))

	rel := &change.Relation{ID: 1, Table: change.TableName{Schema: "public", Name: "t"}, ReplicaIdentity: change.IdentityDefault,
		Columns: []change.Column{{Name: "id", Key: true, TypeOID: 20}, {Name: "v", TypeOID: 25}}}
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "tail", Binary: true,
		BinaryTypes: map[change.TableName]map[string]uint32{rel.Table: {"id": 20, "v": 25}},
		Mappings:    []change.Mapping{{Source: rel.Table, Destination: rel.Table}}})
	require.NoError(t, err)
	batch := func(id int64, lsn change.LSN, changes ...*change.Change) error {
		require.NoError(t, a.Begin(ctx))
		for _, c := range changes {
			require.NoError(t, a.Apply(ctx, c))
		}
		_, err := a.Commit(ctx, lsn, id)
		return err
	}
	insert := func(id int64, v string) *change.Change {
		return &change.Change{Op: change.OpInsert, Relation: rel, New: []change.Value{int8Value(id), binText(v)}}
	}
	remove := func(id int64) *change.Change {
		return &change.Change{Op: change.OpDelete, Relation: rel, OldKeyOnly: true, Old: []change.Value{int8Value(id), {Kind: change.ValueNull}}}
	}
	// The first batch prepares the statements (a round trip each).
	require.NoError(t, batch(1, 0x100, insert(1, "a"), insert(2, "b"), remove(2)))

	before := writes.Load()
	require.NoError(t, batch(2, 0x200, insert(3, "c"), insert(4, "d"), remove(1)))
	require.Equal(t, int64(1), writes.Load()-before, "round trips of a small batch")
	require.Equal(t, int64(2), queryInt(t, dst, `SELECT count(*) FROM t WHERE id IN (3, 4)`))

	err = batch(3, 0x300, insert(5, "e"), insert(6, "bad"))
	require.ErrorContains(t, err, "apply insert to")
	require.NoError(t, a.Rollback(ctx))
	require.Zero(t, queryInt(t, dst, `SELECT count(*) FROM t WHERE id IN (5, 6)`))
	lsn, id, _, err := positions.Applied(ctx, conn, "tail")
	require.NoError(t, err)
	require.Equal(t, change.LSN(0x200), lsn)
	require.Equal(t, int64(2), id)

	// The commit's own statements ran prepared, planned once for the
	// session, not parsed and planned at each batch: two committed batches,
	// two executions each.
	var runs int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT coalesce(sum(generic_plans + custom_plans), 0)::int8 FROM pg_catalog.pg_prepared_statements
		WHERE name IN ('pgmirror_set_applied', 'pgmirror_wal_positions')`).Scan(&runs))
	require.Equal(t, int64(4), runs, "executions of the prepared commit statements")
}

func queryInt(t *testing.T, url, sql string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, connect(t, url).QueryRow(context.Background(), sql).Scan(&n))
	return n
}
