package capture_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/change"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var seq atomic.Int64

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), seq.Add(1))
}

type testBundle struct {
	url  string
	conn *pgx.Conn
}

func setup(t *testing.T, ddl string) *testBundle {
	t.Helper()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	if ddl != "" {
		pgtest.Exec(t, url, ddl)
	}
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &testBundle{url: url, conn: conn}
}

func tn(s, n string) change.TableName { return change.TableName{Schema: s, Name: n} }

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "mirror_1", "0abc"} {
		require.NoError(t, capture.ValidateName(ok), ok)
	}
	for _, bad := range []string{"", "A", "a-b", "a'b", "a b", string(make([]byte, 64))} {
		require.ErrorIs(t, capture.ValidateName(bad), capture.ErrInvalidName, bad)
	}
}

func TestEnsurePublication(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.a (id int PRIMARY KEY); CREATE TABLE public.b (id int PRIMARY KEY);
		CREATE SCHEMA "S x"; CREATE TABLE "S x"."T""y" (id int PRIMARY KEY);
		CREATE TABLE public.p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE public.p1 PARTITION OF public.p FOR VALUES IN (1)`)
	ctx := context.Background()
	pub := uniqueName("pub")
	tables := []change.TableName{tn("public", "a"), tn("S x", `T"y`), tn("public", "p")}

	created, err := capture.EnsurePublication(ctx, b.conn, pub, tables)
	require.NoError(t, err)
	require.True(t, created)
	var viaRoot bool
	require.NoError(t, b.conn.QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, pub).Scan(&viaRoot))
	require.True(t, viaRoot)

	// Again: it exists and covers the tables (the partitioned one through its root).
	created, err = capture.EnsurePublication(ctx, b.conn, pub, tables)
	require.NoError(t, err)
	require.False(t, created)

	// A table it does not publish is named in the error.
	_, err = capture.EnsurePublication(ctx, b.conn, pub, append(tables, tn("public", "b")))
	require.ErrorContains(t, err, "public.b")

	require.NoError(t, capture.AlterPublicationTables(ctx, b.conn, pub, []change.TableName{tn("public", "b")}))
	_, err = capture.EnsurePublication(ctx, b.conn, pub, []change.TableName{tn("public", "b")})
	require.NoError(t, err)
	_, err = capture.EnsurePublication(ctx, b.conn, pub, []change.TableName{tn("public", "a")})
	require.ErrorContains(t, err, "public.a")

	require.NoError(t, capture.DropPublication(ctx, b.conn, pub))
	require.NoError(t, capture.DropPublication(ctx, b.conn, pub))
	var n int
	require.NoError(t, b.conn.QueryRow(ctx, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, pub).Scan(&n))
	require.Zero(t, n)

	_, err = capture.EnsurePublication(ctx, b.conn, "Bad'Name", tables)
	require.ErrorIs(t, err, capture.ErrInvalidName)
}

func TestSlotLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.a (id int PRIMARY KEY)`)
	ctx := context.Background()
	slot := uniqueName("slot")

	st, err := capture.SlotState(ctx, b.conn, slot)
	require.NoError(t, err)
	require.False(t, st.Exists)

	repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	info, err := capture.CreateSlot(ctx, repl, slot, true)
	require.NoError(t, err)
	require.NotZero(t, info.ConsistentPoint)
	require.NotEmpty(t, info.SnapshotName)

	// The exported snapshot can be imported while the connection is idle.
	tx, err := b.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+info.SnapshotName+"'")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))

	repl2, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
	require.NoError(t, err)
	defer repl2.Close(ctx)
	_, err = capture.CreateSlot(ctx, repl2, slot, false)
	require.ErrorIs(t, err, capture.ErrSlotExists)

	st, err = capture.SlotState(ctx, b.conn, slot)
	require.NoError(t, err)
	require.True(t, st.Exists)
	require.False(t, st.Active)
	require.Equal(t, "reserved", st.WALStatus)
	require.Equal(t, info.ConsistentPoint, st.ConfirmedFlush)

	require.NoError(t, capture.DropSlot(ctx, b.conn, slot))
	require.NoError(t, capture.DropSlot(ctx, b.conn, slot))
	st, err = capture.SlotState(ctx, b.conn, slot)
	require.NoError(t, err)
	require.False(t, st.Exists)
}

// TestDropSlotWithConsumer drops a slot that a stream still consumes: the
// consumer is terminated and the slot dropped.
func TestDropSlotWithConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.a (id int PRIMARY KEY)`)
	ctx := context.Background()
	slot, pub := uniqueName("slot"), uniqueName("pub")
	_, err := capture.EnsurePublication(ctx, b.conn, pub, []change.TableName{tn("public", "a")})
	require.NoError(t, err)
	repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	info, err := capture.CreateSlot(ctx, repl, slot, false)
	require.NoError(t, err)
	stream, err := capture.StartStream(ctx, repl, capture.StreamConfig{Slot: slot, Publication: pub, StartLSN: info.ConsistentPoint})
	require.NoError(t, err)
	defer stream.Close()

	// A second consumer is refused with a typed error.
	repl2, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
	require.NoError(t, err)
	defer repl2.Close(ctx)
	_, err = capture.StartStream(ctx, repl2, capture.StreamConfig{Slot: slot, Publication: pub, StartLSN: info.ConsistentPoint})
	require.ErrorIs(t, err, capture.ErrSlotInUse)

	st, err := capture.SlotState(ctx, b.conn, slot)
	require.NoError(t, err)
	require.True(t, st.Active)
	require.NoError(t, capture.DropSlot(ctx, b.conn, slot))
	st, err = capture.SlotState(ctx, b.conn, slot)
	require.NoError(t, err)
	require.False(t, st.Exists)
	select {
	case <-stream.Done():
		require.Error(t, stream.Err())
	case <-time.After(10 * time.Second):
		t.Fatal("stream did not end when its slot was dropped")
	}
}

// TestStreamDecodes checks the decoded events of one transaction.
func TestStreamDecodes(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.a (id int PRIMARY KEY, v text, big text);
		CREATE TABLE public.f (x int, y text); ALTER TABLE public.f REPLICA IDENTITY FULL`)
	ctx := context.Background()
	slot, pub := uniqueName("slot"), uniqueName("pub")
	_, err := capture.EnsurePublication(ctx, b.conn, pub, []change.TableName{tn("public", "a"), tn("public", "f")})
	require.NoError(t, err)
	repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	info, err := capture.CreateSlot(ctx, repl, slot, false)
	require.NoError(t, err)
	pgtest.Exec(t, b.url, `INSERT INTO a VALUES (1, NULL, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 300) g)), (2, 'x', 'small')`)
	pgtest.Exec(t, b.url, `BEGIN; UPDATE a SET v = 'y' WHERE id = 1; UPDATE a SET id = 3 WHERE id = 2; DELETE FROM a WHERE id = 3;
		INSERT INTO f VALUES (1, 'a'); DELETE FROM f; TRUNCATE a; COMMIT`)
	stream, err := capture.StartStream(ctx, repl, capture.StreamConfig{Slot: slot, Publication: pub, StartLSN: info.ConsistentPoint})
	require.NoError(t, err)
	defer stream.Close()

	var evs []capture.Event
	timeout := time.After(20 * time.Second)
	for commits := 0; commits < 2; {
		select {
		case got := <-stream.Events():
			require.NotEmpty(t, got, "an empty hand-over")
			for _, ev := range got {
				evs = append(evs, ev)
				if ev.Kind == capture.EventCommit {
					commits++
				}
			}
		case <-timeout:
			for _, e := range evs {
				if e.Change != nil {
					t.Logf("%d %s", e.Kind, e.Change.Op)
				} else {
					t.Logf("%d", e.Kind)
				}
			}
			t.Fatalf("only %d events", len(evs))
		}
	}
	text := func(s string) change.Value { return change.Value{Kind: change.ValueText, Text: []byte(s)} }
	null := change.Value{Kind: change.ValueNull}
	unchanged := change.Value{Kind: change.ValueUnchanged}
	require.Len(t, evs, 12)
	require.Equal(t, capture.EventBegin, evs[0].Kind)
	require.Equal(t, change.OpInsert, evs[1].Change.Op)
	require.Equal(t, tn("public", "a"), evs[1].Change.Relation.Table)
	require.Equal(t, []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 25, TypeMod: -1}, {Name: "big", TypeOID: 25, TypeMod: -1}}, evs[1].Change.Relation.Columns)
	require.Equal(t, null, evs[1].Change.New[1])
	require.Equal(t, capture.EventCommit, evs[3].Kind)
	require.Greater(t, evs[3].LSN, evs[0].LSN)

	upd := evs[5].Change
	require.Equal(t, change.OpUpdate, upd.Op)
	require.Nil(t, upd.Old)
	require.Equal(t, []change.Value{text("1"), text("y"), unchanged}, upd.New)
	move := evs[6].Change
	require.True(t, move.OldKeyOnly)
	require.Equal(t, []change.Value{text("2"), null, null}, move.Old)
	require.Equal(t, text("3"), move.New[0])
	del := evs[7].Change
	require.Equal(t, change.OpDelete, del.Op)
	require.True(t, del.OldKeyOnly)
	require.Equal(t, text("3"), del.Old[0])
	fdel := evs[9].Change
	require.Equal(t, change.OpDelete, fdel.Op)
	require.False(t, fdel.OldKeyOnly)
	require.Equal(t, []change.Value{text("1"), text("a")}, fdel.Old)
	trunc := evs[10].Change
	require.Equal(t, change.OpTruncate, trunc.Op)
	require.Len(t, trunc.Truncated, 1)
	require.Equal(t, capture.EventCommit, evs[11].Kind)
}

// TestStreamBinary streams an insert, an update of the key and a delete in
// pgoutput binary mode, where values arrive in their types' binary send
// format, and in text mode, where they still arrive as text.
func TestStreamBinary(t *testing.T) {
	t.Parallel()
	b := setup(t, `CREATE TABLE public.a (id int8 PRIMARY KEY, n int4, v text, d bytea)`)
	ctx := context.Background()
	pub := uniqueName("pub")
	_, err := capture.EnsurePublication(ctx, b.conn, pub, []change.TableName{tn("public", "a")})
	require.NoError(t, err)
	type mode struct {
		binary bool
		repl   *pgconn.PgConn
		slot   string
		start  change.LSN
	}
	var modes []*mode
	for _, binary := range []bool{true, false} {
		repl, err := capture.ConnectReplication(ctx, &pgtest.ConnConfig(t, b.url).Config)
		require.NoError(t, err)
		defer repl.Close(ctx)
		slot := uniqueName("slot")
		info, err := capture.CreateSlot(ctx, repl, slot, false)
		require.NoError(t, err)
		modes = append(modes, &mode{binary: binary, repl: repl, slot: slot, start: info.ConsistentPoint})
	}
	pgtest.Exec(t, b.url, `INSERT INTO a VALUES (1, -2, 'x', '\xdead')`)
	pgtest.Exec(t, b.url, `UPDATE a SET id = 300, n = NULL`)
	pgtest.Exec(t, b.url, `DELETE FROM a`)

	int8v := func(v int64) change.Value {
		return change.Value{Kind: change.ValueBinary, Text: binary.BigEndian.AppendUint64(nil, uint64(v))}
	}
	int4v := func(v int32) change.Value {
		return change.Value{Kind: change.ValueBinary, Text: binary.BigEndian.AppendUint32(nil, uint32(v))}
	}
	bin := func(b ...byte) change.Value { return change.Value{Kind: change.ValueBinary, Text: b} }
	text := func(s string) change.Value { return change.Value{Kind: change.ValueText, Text: []byte(s)} }
	null := change.Value{Kind: change.ValueNull}
	for _, m := range modes {
		stream, err := capture.StartStream(ctx, m.repl, capture.StreamConfig{Slot: m.slot, Publication: pub, StartLSN: m.start, Binary: m.binary})
		require.NoError(t, err)
		defer stream.Close()
		var changes []*change.Change
		timeout := time.After(20 * time.Second)
		for commits := 0; commits < 3; {
			select {
			case got, ok := <-stream.Events():
				if !ok {
					t.Fatalf("binary %t: stream ended: %v", m.binary, stream.Err())
				}
				for _, ev := range got {
					if ev.Kind == capture.EventCommit {
						commits++
					}
					if ev.Change != nil {
						changes = append(changes, ev.Change)
					}
				}
			case <-timeout:
				t.Fatalf("binary %t: %d changes", m.binary, len(changes))
			}
		}
		require.Len(t, changes, 3)
		ins, upd, del := changes[0], changes[1], changes[2]
		require.Equal(t, change.OpInsert, ins.Op)
		require.Equal(t, change.OpUpdate, upd.Op)
		require.Equal(t, change.OpDelete, del.Op)
		require.True(t, upd.OldKeyOnly)
		require.True(t, del.OldKeyOnly)
		if m.binary {
			require.Equal(t, []change.Value{int8v(1), int4v(-2), bin('x'), bin(0xde, 0xad)}, ins.New)
			require.Equal(t, []change.Value{int8v(1), null, null, null}, upd.Old)
			require.Equal(t, []change.Value{int8v(300), null, bin('x'), bin(0xde, 0xad)}, upd.New)
			require.Equal(t, []change.Value{int8v(300), null, null, null}, del.Old)
		} else {
			require.Equal(t, []change.Value{text("1"), text("-2"), text("x"), text(`\xdead`)}, ins.New)
			require.Equal(t, []change.Value{text("1"), null, null, null}, upd.Old)
			require.Equal(t, []change.Value{text("300"), null, text("x"), text(`\xdead`)}, upd.New)
			require.Equal(t, []change.Value{text("300"), null, null, null}, del.Old)
		}
	}
}

// TestEnsurePublicationGeneratedColumns: on PostgreSQL 18, an existing
// publication that publishes stored generated columns is refused (pgmirror
// never writes them; the destination computes them), saying how to fix it;
// one created by pgmirror publishes none.
func TestEnsurePublicationGeneratedColumns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.MajorCluster(t, 18))
	pgtest.Exec(t, url, `CREATE TABLE public.a (id int PRIMARY KEY, g int GENERATED ALWAYS AS (id * 2) STORED, v int GENERATED ALWAYS AS (id + 1));
		CREATE PUBLICATION gen FOR TABLE public.a WITH (publish_generated_columns = stored)`)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = capture.EnsurePublication(ctx, conn, "gen", []change.TableName{tn("public", "a")})
	require.ErrorContains(t, err, "publish_generated_columns = none")
	pgtest.Exec(t, url, `ALTER PUBLICATION gen SET (publish_generated_columns = none)`)
	_, err = capture.EnsurePublication(ctx, conn, "gen", []change.TableName{tn("public", "a")})
	require.NoError(t, err)
	created, err := capture.EnsurePublication(ctx, conn, "own", []change.TableName{tn("public", "a")})
	require.NoError(t, err)
	require.True(t, created)
	var gencols string
	require.NoError(t, conn.QueryRow(ctx, `SELECT pubgencols::text FROM pg_publication WHERE pubname = 'own'`).Scan(&gencols))
	require.Equal(t, "n", gencols)
}
