package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

// digest is a public table's row count and a hash of its rows (id and v,
// in id order): equal digests on both sides mean no row lost, none
// doubled, none different.
func digest(t *testing.T, dbURL, table string) string {
	t.Helper()
	var d string
	withConn(t, dbURL, func(conn *pgx.Conn) {
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*)::text || ' rows ' || coalesce(md5(string_agg(id::text || '=' || v, ',' ORDER BY id)), '')
			FROM public.`+pgx.Identifier{table}.Sanitize()).Scan(&d))
	})
	return d
}

// waitEqual waits until the table's digest is the same on the source and
// the destination.
func waitEqual(t *testing.T, e *lcEnv, table string, timeout time.Duration) {
	t.Helper()
	var src, dst string
	waitFor(t, "equal "+table+" on both sides", timeout, func() bool {
		src, dst = digest(t, e.srcURL, table), digest(t, e.dstURL, table)
		return src == dst
	}, func() string { return fmt.Sprintf("source %s, destination %s", src, dst) })
}

// writeLoad inserts rows from id first on into the source table, one every
// 10 ms, until stop is called or n rows are in; stop returns the number
// inserted.
func writeLoad(t *testing.T, dbURL, table string, first, n int) (stop func() int) {
	t.Helper()
	quit := make(chan struct{})
	done := make(chan int, 1)
	go func() {
		i := 0
		defer func() { done <- i }()
		for ; i < n; i++ {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if tryExec(dbURL, `INSERT INTO public.`+pgx.Identifier{table}.Sanitize()+` VALUES ($1::bigint, 'load')`, first+i) != nil {
				return
			}
		}
	}()
	var once func() int
	var inserted int
	stopped := false
	once = func() int {
		if !stopped {
			stopped = true
			close(quit)
			inserted = <-done
		}
		return inserted
	}
	t.Cleanup(func() { once() })
	return once
}

// requestResync requests a full resync as POST /v1/mirrors/{name}/resync
// does: the pending action and a run job, in one transaction.
func (e *lcEnv) requestResync(id int64) {
	e.t.Helper()
	ctx := context.Background()
	e.inTx(func(tx pgx.Tx) error {
		if err := e.store.With(tx).MirrorRequestAction(ctx, id, db.ActionResync); err != nil {
			return err
		}
		_, err := e.client.InsertTx(ctx, tx, MirrorRunArgs{MirrorID: id}, nil)
		return err
	})
}

// requestTableResync requests the resync of one table as
// POST /v1/mirrors/{name}/tables/{table}/resync does.
func (e *lcEnv) requestTableResync(id int64, table string) {
	e.t.Helper()
	ctx := context.Background()
	src := change.TableName{Schema: "public", Name: table}
	e.inTx(func(tx pgx.Tx) error {
		if err := e.store.With(tx).MirrorTableRequestResync(ctx, id, src); err != nil {
			return err
		}
		if err := e.store.With(tx).LogInsert(ctx, id, db.LevelInfo, db.MsgTableResyncStarted, map[string]string{"table": src.String()}); err != nil {
			return err
		}
		_, err := e.client.InsertTx(ctx, tx, MirrorRunArgs{MirrorID: id}, nil)
		return err
	})
}

// driftDestination changes the destination table behind the mirror's
// back: rows deleted, changed and added.
func driftDestination(t *testing.T, e *lcEnv, table string) {
	t.Helper()
	q := pgx.Identifier{"public", table}.Sanitize()
	exec(t, e.dstURL, `DELETE FROM `+q+` WHERE id <= 3`)
	exec(t, e.dstURL, `UPDATE `+q+` SET v = 'drifted' WHERE id BETWEEN 4 AND 6`)
	exec(t, e.dstURL, `INSERT INTO `+q+` VALUES (-1, 'only on the destination')`)
	require.NotEqual(t, digest(t, e.srcURL, table), digest(t, e.dstURL, table))
}

// A full resync under a write load copies every table again from a new
// snapshot and streams on from there: the destination tables, drifted
// before, end equal to the source's (no row lost, doubled or different),
// rows written during the resync included; the request is cleared and
// every table runs. A resync of one table copies it again while the other
// table keeps streaming, and ends the same way. Then a column added on the
// source arrives.
func TestRunResync(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	itemsTable(t, e.srcURL, 1000)
	exec(t, e.srcURL, `CREATE TABLE public.others (id bigint PRIMARY KEY, v text NOT NULL)`)
	exec(t, e.srcURL, `INSERT INTO public.others SELECT g, 'other ' || g FROM generate_series(1, 100) g`)
	e.startReplica("a", nil)
	m := e.createMirror("m", []string{"items", "others"})
	waitRows(t, e.dstURL, "items", 1000, 60*time.Second)
	waitRows(t, e.dstURL, "others", 100, 30*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	driftDestination(t, e, "items")
	driftDestination(t, e, "others")

	stop := writeLoad(t, e.srcURL, "items", 2000, 300)
	e.requestResync(m.ID)
	waitFor(t, "the resync's snapshot", 60*time.Second, func() bool { return e.logCount(m.ID, db.MsgSnapshotCompleted) == 2 })
	insertItem(t, e.srcURL, 5000) // after the resync's snapshot
	n := stop()
	t.Logf("%d rows inserted during the resync", n)
	require.Positive(t, n)
	waitEqual(t, e, "items", 60*time.Second)
	waitEqual(t, e, "others", 30*time.Second)
	got := e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Nil(t, got.PendingAction, "the resync request")
	require.Equal(t, int64(1), e.logCount(m.ID, "Full resync started"))
	waitTablesRunning(t, e, m.ID)

	// One table: others is copied again while items streams.
	driftDestination(t, e, "others")
	stop = writeLoad(t, e.srcURL, "items", 6000, 200)
	e.requestTableResync(m.ID, "others")
	exec(t, e.srcURL, `INSERT INTO public.others VALUES (101, 'during the table resync')`)
	waitEqual(t, e, "others", 60*time.Second)
	require.Positive(t, stop())
	insertItem(t, e.srcURL, 7000)
	exec(t, e.srcURL, `INSERT INTO public.others VALUES (102, 'after the table resync')`)
	waitEqual(t, e, "items", 30*time.Second)
	waitEqual(t, e, "others", 30*time.Second)
	for _, tbl := range waitTablesRunning(t, e, m.ID) {
		require.Nil(t, tbl.ResyncRequestedAt, "table %s after the table resync", tbl.SourceTable)
	}
	require.Equal(t, db.StatusRunning, e.mirror(m.ID).Status)
	require.Equal(t, int64(1), e.logCount(m.ID, "Starting table snapshot"), "copies of single tables")

	// A column added on the source while the mirror streams arrives: the
	// destination table gets it (schema_changes apply, the default), with
	// the values of the rows written since; the rows before keep theirs.
	exec(t, e.srcURL, `ALTER TABLE public.others ADD COLUMN note text`)
	exec(t, e.srcURL, `INSERT INTO public.others VALUES (103, 'row 103', 'with a note')`)
	exec(t, e.srcURL, `UPDATE public.others SET note = 'noted later' WHERE id = 3`)
	waitFor(t, "the added column's values on the destination", 30*time.Second, func() bool {
		return tryExec(e.dstURL, `SELECT note FROM public.others`) == nil &&
			queryInt(t, e.dstURL, `SELECT count(*) FROM public.others WHERE (id = 103 AND note = 'with a note') OR (id = 3 AND note = 'noted later')`) == 2
	})
	waitEqual(t, e, "others", 30*time.Second)
	require.Equal(t, int64(101), queryInt(t, e.dstURL, `SELECT count(*) FROM public.others WHERE note IS NULL`))
	got = e.mirror(m.ID)
	require.Equal(t, db.StatusRunning, got.Status)
	require.Zero(t, got.ErrorCount)
}

// A column change committed on the source after a table resync prepared
// the destination table and before the copy's snapshot is in neither the
// prepared destination nor the stream after the snapshot: the copy sees it
// in its snapshot, starts over with the destination prepared again, and
// the destination column gets the source's new type, so that rows that
// need it arrive.
func TestRunResyncSourceChangedBeforeSnapshot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	exec(t, e.srcURL, `CREATE TABLE public.shaped (id bigint PRIMARY KEY, v varchar(10) NOT NULL)`)
	exec(t, e.srcURL, `INSERT INTO public.shaped SELECT g, 'row ' || g FROM generate_series(1, 100) g`)
	var armed, altered atomic.Bool
	shaped := change.TableName{Schema: "public", Name: "shaped"}
	e.startReplica("a", func(c *Config) {
		c.hooks.afterDestinationPrepared = func(ctx context.Context, copying []change.TableName) {
			if slices.Contains(copying, shaped) && armed.Load() && altered.CompareAndSwap(false, true) {
				exec(t, e.srcURL, `ALTER TABLE public.shaped ALTER v TYPE varchar(20)`)
			}
		}
	})
	m := e.createMirror("m", []string{"shaped"})
	waitRows(t, e.dstURL, "shaped", 100, 60*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)

	armed.Store(true)
	e.requestTableResync(m.ID, "shaped")
	waitFor(t, "the copy to start over", 60*time.Second, func() bool {
		return e.logCount(m.ID, "Source table changed while its copy started") == 1
	}, func() string { return fmt.Sprintf("altered: %v", altered.Load()) })
	exec(t, e.srcURL, `INSERT INTO public.shaped VALUES (101, 'fifteen chars..')`)
	waitEqual(t, e, "shaped", 60*time.Second)
	var typ string
	withConn(t, e.dstURL, func(conn *pgx.Conn) {
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute
			WHERE attrelid = 'public.shaped'::regclass AND attname = 'v'`).Scan(&typ))
	})
	require.Equal(t, "character varying(20)", typ)
	got := e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Zero(t, got.ErrorCount)
	waitTablesRunning(t, e, m.ID)
}

// waitTablesRunning waits until every table of the mirror is running and
// returns them: after a resync a table is marked running a moment after
// its rows arrive.
func waitTablesRunning(t *testing.T, e *lcEnv, mirrorID int64) []db.MirrorTable {
	t.Helper()
	var tables []db.MirrorTable
	waitFor(t, "every table to run after the resync", 30*time.Second, func() bool {
		var err error
		tables, err = e.store.MirrorTables(context.Background(), mirrorID)
		require.NoError(t, err)
		for _, tbl := range tables {
			if tbl.Status != db.TableStatusRunning {
				return false
			}
		}
		return true
	}, func() string {
		var s []string
		for _, tbl := range tables {
			s = append(s, tbl.SourceTable+" "+string(tbl.Status))
		}
		return strings.Join(s, ", ")
	})
	return tables
}
