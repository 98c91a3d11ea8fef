package cutover_test

import (
	"context"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func TestReadOnlyTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `CREATE TABLE plain (id int PRIMARY KEY, v text);
		CREATE TABLE "Odd ""name""" (id int PRIMARY KEY);
		CREATE TABLE parted (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
		CREATE TABLE other (id int PRIMARY KEY);
		INSERT INTO plain VALUES (1, 'a')`)
	tables := []change.TableName{{Schema: "public", Name: "plain"}, {Schema: "public", Name: `Odd "name"`}, {Schema: "public", Name: "parted"}}
	admin := connect(t, url)

	// A transaction writing a table holds the lock back: MakeReadOnly waits
	// for it, up to its lock timeout.
	writer := connect(t, url)
	wtx, err := writer.Begin(ctx)
	require.NoError(t, err)
	_, err = wtx.Exec(ctx, `INSERT INTO plain VALUES (2, 'in flight')`)
	require.NoError(t, err)
	err = cutover.MakeReadOnly(ctx, admin, tables, "mirror m's cut-over", 300*time.Millisecond)
	require.ErrorIs(t, err, cutover.ErrLockBusy)
	require.Contains(t, err.Error(), "lock source table public.plain against writes")
	for _, tb := range tables { // those before it in order were made writable again
		ro, err := cutover.IsReadOnly(ctx, admin, tb)
		require.NoError(t, err)
		require.False(t, ro, "a cut-over that could not lock changed nothing: %s", tb)
	}
	require.NoError(t, wtx.Commit(ctx))

	require.NoError(t, cutover.MakeReadOnly(ctx, admin, tables, "mirror m's cut-over", 5*time.Second))
	app := connect(t, url)
	for _, stmt := range []string{
		`INSERT INTO plain VALUES (3, 'x')`, `UPDATE plain SET v = 'y'`, `DELETE FROM plain`, `TRUNCATE plain`,
		`INSERT INTO "Odd ""name""" VALUES (1)`, `INSERT INTO parted_1 VALUES (1, 1)`, `INSERT INTO parted VALUES (2, 1)`,
	} {
		_, err := app.Exec(ctx, stmt)
		require.Error(t, err, stmt)
		require.Equal(t, "25006", sqlState(err), stmt)
		require.Contains(t, err.Error(), "mirror m's cut-over", stmt)
	}
	_, err = app.Exec(ctx, `INSERT INTO other VALUES (1)`)
	require.NoError(t, err, "tables outside the mirror stay writable")
	n, err := cutover.CountRows(ctx, app, tables[0])
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "reads go on")
	ro, err := cutover.IsReadOnly(ctx, app, tables[0])
	require.NoError(t, err)
	require.True(t, ro)

	// A replication apply session (a reverse mirror) still writes.
	repl := connect(t, url)
	_, err = repl.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = repl.Exec(ctx, `INSERT INTO plain VALUES (4, 'reverse')`)
	require.NoError(t, err)

	// Twice is fine (a cut-over tried again), and MakeWritable undoes it.
	require.NoError(t, cutover.MakeReadOnly(ctx, admin, tables, "again", 5*time.Second))
	require.NoError(t, cutover.MakeWritable(ctx, admin, tables))
	_, err = app.Exec(ctx, `INSERT INTO plain VALUES (5, 'z'); INSERT INTO parted_1 VALUES (1, 1); TRUNCATE "Odd ""name"""`)
	require.NoError(t, err)
	ro, err = cutover.IsReadOnly(ctx, app, tables[0])
	require.NoError(t, err)
	require.False(t, ro)

	// A table that was read-only before stays so when a later one is busy;
	// the ones this call made read-only are writable again.
	require.NoError(t, cutover.MakeReadOnly(ctx, admin, tables[1:2], "before", 5*time.Second))
	wtx, err = writer.Begin(ctx)
	require.NoError(t, err)
	_, err = wtx.Exec(ctx, `INSERT INTO plain VALUES (20, 'in flight')`)
	require.NoError(t, err)
	err = cutover.MakeReadOnly(ctx, admin, tables, "again", 300*time.Millisecond)
	require.ErrorIs(t, err, cutover.ErrLockBusy)
	require.NoError(t, wtx.Rollback(ctx))
	for i, want := range []bool{false, true, false} {
		ro, err := cutover.IsReadOnly(ctx, admin, tables[i])
		require.NoError(t, err)
		require.Equal(t, want, ro, tables[i].String())
	}
}

// TestReadOnlyNoDeadlock makes tables read-only again and again while
// writers run transactions that write two of them in opposite orders and
// read a third: the lock never closes a deadlock cycle with them (no
// 40P01, on either side), and each attempt either makes every table
// read-only or gives up with ErrLockBusy having changed nothing. (Locking
// the tables one by one in one transaction deadlocked here within a few
// rounds.)
func TestReadOnlyNoDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `CREATE TABLE a (id bigserial PRIMARY KEY, v int);
		CREATE TABLE b (id bigserial PRIMARY KEY, v int);
		CREATE TABLE c (id int PRIMARY KEY);
		INSERT INTO c VALUES (1)`)
	tables := []change.TableName{{Schema: "public", Name: "b"}, {Schema: "public", Name: "c"}, {Schema: "public", Name: "a"}}
	admin := connect(t, url)

	const writers = 6
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var committed, refused atomic.Int64
	var mu sync.Mutex
	var unexpected []string
	for w := range writers {
		conn := connect(t, url)
		first, second := "a", "b"
		if w%2 == 1 {
			first, second = "b", "a"
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				select {
				case <-stop:
					return
				default:
				}
				// Read c, write one table, wait a little holding its lock, then the other.
				_, err := conn.Exec(ctx, `BEGIN; SELECT count(*) FROM c; INSERT INTO `+first+` (v) VALUES (1);
					SELECT pg_sleep(0.002); INSERT INTO `+second+` (v) VALUES (2); COMMIT`)
				switch code := sqlState(err); {
				case err == nil:
					committed.Add(1)
				case code == "25006": // read-only: the cut-over's triggers refused it
					refused.Add(1)
					_, _ = conn.Exec(ctx, `ROLLBACK`)
				default:
					_, _ = conn.Exec(ctx, `ROLLBACK`)
					mu.Lock()
					unexpected = append(unexpected, err.Error())
					mu.Unlock()
				}
			}
		}()
	}
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})

	const rounds = 15
	locked, busy := 0, 0
	for i := range rounds {
		before := committed.Load()
		for committed.Load() < before+5 { // the writers are busy again
			time.Sleep(5 * time.Millisecond)
		}
		err := cutover.MakeReadOnly(ctx, admin, tables, "round", 5*time.Second)
		switch {
		case err == nil:
			locked++
			for _, tb := range tables {
				ro, err := cutover.IsReadOnly(ctx, admin, tb)
				require.NoError(t, err)
				require.True(t, ro, "round %d: %s", i, tb)
			}
			_, err = admin.Exec(ctx, `INSERT INTO a (v) VALUES (3)`)
			require.Equal(t, "25006", sqlState(err), "round %d: the table refuses writes", i)
			require.NoError(t, cutover.MakeWritable(ctx, admin, tables))
		case errors.Is(err, cutover.ErrLockBusy):
			busy++
			require.NotEqual(t, "40P01", sqlState(err), "round %d", i)
			for _, tb := range tables {
				ro, rerr := cutover.IsReadOnly(ctx, admin, tb)
				require.NoError(t, rerr)
				require.False(t, ro, "round %d: a refused attempt changed nothing", i)
			}
		default:
			t.Fatalf("round %d: %v", i, err)
		}
	}
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, unexpected, "writers failed otherwise than refused (deadlocks?)")
	t.Logf("%d rounds: %d read-only, %d busy; writers committed %d transactions, %d refused while read-only", rounds, locked, busy, committed.Load(), refused.Load())
	require.Greater(t, locked, rounds/2, "most rounds get the locks under this load")
}
