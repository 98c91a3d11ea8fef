package cdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// copyTable replaces the destination's copy of table with the source's rows
// as of now and returns the source WAL position of that copy (no writes run
// on the source meanwhile, so the rows are exactly the state at that LSN).
func copyTable(t *testing.T, b *testBundle, table string) change.LSN {
	t.Helper()
	ctx := context.Background()
	sc, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	var text string
	require.NoError(t, sc.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&text))
	lsn, err := change.ParseLSN(text)
	require.NoError(t, err)
	rows, err := sc.Query(ctx, `SELECT k, v FROM `+table)
	require.NoError(t, err)
	var ks []int
	var vs []string
	for rows.Next() {
		var k int
		var v string
		require.NoError(t, rows.Scan(&k, &v))
		ks, vs = append(ks, k), append(vs, v)
	}
	require.NoError(t, rows.Err())
	_, err = dc.Exec(ctx, `TRUNCATE `+table)
	require.NoError(t, err)
	_, err = dc.Exec(ctx, `INSERT INTO `+table+` SELECT * FROM unnest($1::int[], $2::text[])`, ks, vs)
	require.NoError(t, err)
	require.NoError(t, positions.TableCopied(ctx, dc, b.cfg.MirrorUID, change.TableName{Schema: "public", Name: table}, lsn))
	return lsn
}

// TestTableCopiedOnItsOwn copies one table while a run replicates only the
// other (SkipTables), then lets a normal run take over: the copied table gets
// exactly its changes after the copy, the other table nothing twice, and the
// per-table position disappears once the mirror's position passes it. Both
// tables lack a primary key, so a change applied twice would show.
func TestTableCopiedOnItsOwn(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.a (k int, v text); ALTER TABLE public.a REPLICA IDENTITY FULL;
		CREATE TABLE public.b (k int, v text); ALTER TABLE public.b REPLICA IDENTITY FULL;`
	b := setup(t, ddl, ddl, same("public", "a"), same("public", "b"))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO a SELECT g, 'a' FROM generate_series(1, 100) g; INSERT INTO b SELECT g, 'b' FROM generate_series(1, 100) g`)
	b.waitEqual(t, r, `SELECT * FROM b`, `SELECT * FROM b`)
	require.NoError(t, r.halt(t))

	// The destination's b gets damaged; a run skipping b replicates a while
	// b is "copied" in the middle of the writes.
	pgtest.Exec(t, b.dst, `DELETE FROM b WHERE k <= 50`)
	skipping := *b
	skipping.cfg.SkipTables = []change.TableName{tn("public", "b")}
	r = skipping.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO a VALUES (1000, 'before copy'); UPDATE b SET v = 'before copy' WHERE k = 1`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)
	copied := copyTable(t, b, "b")
	pgtest.Exec(t, b.src, `INSERT INTO a VALUES (1001, 'after copy'); UPDATE b SET v = 'after copy' WHERE k = 2; DELETE FROM b WHERE k = 3`)
	pgtest.Exec(t, b.src, `INSERT INTO b VALUES (2000, 'after copy'), (2000, 'after copy')`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)
	require.NoError(t, r.halt(t))

	// The skipping run confirmed nothing: the slot still holds the copy point.
	ctx := context.Background()
	sc, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer sc.Close(ctx)
	st, err := capture.SlotState(ctx, sc, b.cfg.SlotName)
	require.NoError(t, err)
	require.LessOrEqual(t, st.ConfirmedFlush, copied, "slot confirmed past the copy point while a table was being copied")

	r = b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO a VALUES (1002, 'later'); INSERT INTO b VALUES (3000, 'later')`)
	b.waitEqual(t, r, `SELECT * FROM b`, `SELECT * FROM b`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)

	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for {
		left, unknown, err := positions.Tables(ctx, dc, b.cfg.MirrorUID, nil)
		require.NoError(t, err)
		if len(left)+len(unknown) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "table position never caught up: %v", unknown)
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, r.halt(t))

	// A restart replays nothing twice.
	r = b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO a VALUES (1003, 'restart'); INSERT INTO b VALUES (4000, 'restart')`)
	b.waitEqual(t, r, `SELECT * FROM b`, `SELECT * FROM b`)
	b.waitEqual(t, r, `SELECT * FROM a`, `SELECT * FROM a`)
	require.NoError(t, r.halt(t))
}
