package pgtest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
)

func TestMain(m *testing.M) { os.Exit(Run(m)) }

func TestNewDatabaseIsLogical(t *testing.T) {
	t.Parallel()
	url := NewDatabase(t, SourceCluster(t))
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var level string
	if err := conn.QueryRow(context.Background(), "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level = %q, want logical", level)
	}
}

// TestMajorClusters starts a cluster of the oldest and the newest
// PostgreSQL major the version matrix uses (which starts the others) and
// checks that it runs that major, logical, with password logins (the
// packaged binaries run as the postgres OS user like Debian's).
func TestMajorClusters(t *testing.T) {
	for _, major := range []int{12, 18} {
		t.Run("pg"+strconv.Itoa(major), func(t *testing.T) {
			t.Parallel()
			url := NewDatabase(t, MajorCluster(t, major))
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var version int
			var level string
			if err := conn.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int, current_setting('wal_level')").Scan(&version, &level); err != nil {
				t.Fatal(err)
			}
			if version/10000 != major || level != "logical" {
				t.Fatalf("server_version_num %d, wal_level %s: want PostgreSQL %d, logical", version, level, major)
			}
		})
	}
}

// TestSuiteMajor: PGMIRROR_TEST_PG_MAJOR picks the binaries of the suite's
// clusters.
func TestSuiteMajor(t *testing.T) {
	BinDir(t, 13) // skips when 13 is not installed
	t.Setenv("PGMIRROR_TEST_PG_MAJOR", "13")
	dir := BinDir(t, SuiteMajor(t))
	major, err := localpg.BinDirMajor(dir)
	if err != nil {
		t.Fatal(err)
	}
	if major != 13 {
		t.Fatalf("PGMIRROR_TEST_PG_MAJOR=13 gives binaries of PostgreSQL %d (%s)", major, dir)
	}
}

// The replication origins of a test's mirrors, which outlive its
// databases, are dropped by prefix, and only those.
func TestDropReplicationOrigins(t *testing.T) {
	url := NewDatabase(t, DestCluster(t))
	prefix := fmt.Sprintf("pgmirror_droptest_%d", os.Getpid())
	Exec(t, url, `SELECT pg_replication_origin_create($1 || '_a'), pg_replication_origin_create($1 || '_a_c1'),
		pg_replication_origin_create($1 || '_b')`, prefix)
	// One with progress: it holds a replication state.
	Exec(t, url, `SELECT pg_replication_origin_advance($1 || '_a', '0/10')`, prefix)
	DropReplicationOrigins(t, prefix+"_a")
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT roname FROM pg_replication_origin WHERE roname LIKE $1 || '%' ORDER BY 1`, prefix)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != prefix+"_b" {
		t.Fatalf("origins left: %v, want only %s_b", left, prefix)
	}
	DropReplicationOrigins(t, prefix)
}
