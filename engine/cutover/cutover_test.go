package cutover_test

import (
	"context"
	"errors"
	"os"
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
	require.Error(t, err)
	require.Contains(t, err.Error(), "lock source table public.plain")
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
}
