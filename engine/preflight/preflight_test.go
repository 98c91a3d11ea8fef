package preflight_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/preflight"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func tbl(schema, name string) change.TableName { return change.TableName{Schema: schema, Name: name} }

func TestCheck(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `
		CREATE SCHEMA "Sales";
		CREATE TABLE "Sales"."Orders" (id int PRIMARY KEY);
		CREATE TABLE nopk (a int);
		CREATE TABLE full_ident (a int);
		ALTER TABLE full_ident REPLICA IDENTITY FULL;
		CREATE TABLE ident_idx (a int NOT NULL);
		CREATE UNIQUE INDEX ident_idx_a ON ident_idx (a);
		ALTER TABLE ident_idx REPLICA IDENTITY USING INDEX ident_idx_a;
		CREATE TABLE nothing (id int PRIMARY KEY);
		ALTER TABLE nothing REPLICA IDENTITY NOTHING;
		CREATE VIEW v AS SELECT 1 AS x;
		CREATE TABLE parted_pk (id int, PRIMARY KEY (id)) PARTITION BY RANGE (id);
		CREATE TABLE parted_pk_1 PARTITION OF parted_pk FOR VALUES FROM (0) TO (10);
		CREATE TABLE parted (id int) PARTITION BY RANGE (id);
		CREATE TABLE parted_ok PARTITION OF parted FOR VALUES FROM (0) TO (10);
		ALTER TABLE parted_ok REPLICA IDENTITY FULL;
		CREATE TABLE parted_bad PARTITION OF parted FOR VALUES FROM (10) TO (20);
	`)
	conn := connect(t, url)
	ctx := context.Background()

	require.NoError(t, preflight.Check(ctx, conn, []change.TableName{
		tbl("Sales", "Orders"), tbl("public", "full_ident"), tbl("public", "ident_idx"), tbl("public", "parted_pk"),
	}))

	cases := []struct {
		name  string
		table change.TableName
		check string
		want  string
	}{
		{"missing table", tbl("public", "nope"), "tables_exist", "table public.nope does not exist"},
		{"case matters", tbl("sales", "orders"), "tables_exist", "table sales.orders does not exist"},
		{"view", tbl("public", "v"), "tables_exist", "public.v in the source database is not a table"},
		{"no primary key", tbl("public", "nopk"), "replica_identity", `ALTER TABLE "public"."nopk" REPLICA IDENTITY FULL`},
		{"identity nothing", tbl("public", "nothing"), "replica_identity", "table public.nothing has neither a primary key nor REPLICA IDENTITY FULL"},
		{"partition without identity", tbl("public", "parted"), "replica_identity", "its partition public.parted_bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := preflight.Check(ctx, conn, []change.TableName{tbl("Sales", "Orders"), tc.table})
			var f *preflight.Failure
			require.ErrorAs(t, err, &f)
			require.Equal(t, tc.check, f.Check)
			require.Contains(t, f.Error(), tc.want)
		})
	}

	// Checked as the destination (a cut-over's reverse mirror reads it),
	// the advice names the destination, where the fix belongs.
	err := preflight.CheckAs(ctx, conn, []change.TableName{tbl("public", "nopk")}, "destination")
	var f *preflight.Failure
	require.ErrorAs(t, err, &f)
	require.Contains(t, f.Error(), `ALTER TABLE "public"."nopk" REPLICA IDENTITY FULL on the destination`)
	require.NotContains(t, f.Error(), "source")
	err = preflight.CheckAs(ctx, conn, []change.TableName{tbl("public", "nope")}, "destination")
	require.ErrorAs(t, err, &f)
	require.Contains(t, f.Error(), "does not exist in the destination database")

	pgtest.Exec(t, url, `ALTER TABLE parted_bad REPLICA IDENTITY FULL`)
	require.NoError(t, preflight.Check(ctx, conn, []change.TableName{tbl("public", "parted")}))
}

func TestWalLevelNotLogical(t *testing.T) {
	t.Parallel()
	c := pgtest.NewCluster(t, false)
	conn := connect(t, c.URL("postgres"))
	err := preflight.Check(context.Background(), conn, nil)
	var f *preflight.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, "wal_level", f.Check)
	require.Contains(t, f.Error(), "wal_level=replica")
	require.Contains(t, f.Error(), "wal_level = logical")
}

func TestUserTables(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, url, `
		CREATE SCHEMA app; CREATE SCHEMA _pgmirror;
		CREATE TABLE app.b (id int PRIMARY KEY);
		CREATE TABLE a (id int);
		CREATE TABLE _pgmirror.applied (id int);
		CREATE VIEW v AS SELECT 1;
		CREATE TABLE parted (id int) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10);
	`)
	got, err := preflight.UserTables(context.Background(), connect(t, url))
	require.NoError(t, err)
	require.Equal(t, []change.TableName{tbl("app", "b"), tbl("public", "a"), tbl("public", "parted")}, got)
}

// TestPartitionedOnPostgreSQL12: a PostgreSQL 12 source cannot publish a
// partitioned table; the check says to map its partitions, which pass.
func TestPartitionedOnPostgreSQL12(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.MajorCluster(t, 12))
	pgtest.Exec(t, url, `
		CREATE TABLE p (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k);
		CREATE TABLE p1 PARTITION OF p FOR VALUES IN (1);
		CREATE TABLE plain (id int PRIMARY KEY)`)
	conn := connect(t, url)
	err := preflight.Check(context.Background(), conn, []change.TableName{tbl("public", "plain"), tbl("public", "p")})
	var f *preflight.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, "tables_exist", f.Check)
	require.Contains(t, f.Message, "public.p in the source database is a partitioned table")
	require.Contains(t, f.Message, "PostgreSQL 12.")
	require.Contains(t, f.Message, "map its partitions one by one")
	require.NoError(t, preflight.Check(context.Background(), conn, []change.TableName{tbl("public", "plain"), tbl("public", "p1")}))
}
