// Package pgtest gives tests real PostgreSQL databases on throwaway local
// clusters.
//
// A test package calls Run from its TestMain. The first test that asks for a
// database starts the clusters it needs (one logical "source" cluster and one
// "destination" cluster per test binary), and every test gets a fresh,
// uniquely named database of its own, so tests can run in parallel. Run stops
// the clusters and removes their directories when the tests are done.
//
// Clusters run the distribution's PostgreSQL 15 unless PGMIRROR_TEST_PG_MAJOR
// names another major (12 to 18, installed by scripts/install-pg-majors.sh)
// for the whole suite; NewClusterVersion and MajorCluster start a given
// major for the version matrix tests.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/secretbox"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

var (
	mu       sync.Mutex
	clusters = map[string]*localpg.Cluster{}
	// roleLocks serialise the start of one role's shared cluster.
	roleLocks = map[string]*sync.Mutex{}
	tempDirs  []string
	dbSeq     atomic.Int64
)

// Run runs the tests of m, then stops every cluster started for them.
// Use it as: func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
func Run(m *testing.M) int {
	code := m.Run()
	StopAll()
	return code
}

// StopAll stops every cluster this package started and removes its files.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, c := range clusters {
		_ = c.StopImmediate(ctx)
		delete(clusters, name)
	}
	for _, d := range tempDirs {
		_ = os.RemoveAll(d)
	}
	tempDirs = nil
}

// NewCluster starts a private cluster for one test (for tests that stop,
// restart or crash the server). It is stopped when the test ends.
func NewCluster(tb testing.TB, logical bool) *localpg.Cluster {
	tb.Helper()
	return newPrivateCluster(tb, localpg.Config{Logical: logical, BinDir: BinDir(tb, SuiteMajor(tb))})
}

// NewClusterVersion starts a private cluster of the given PostgreSQL major
// for one test; it is stopped when the test ends. The test is skipped when
// that major is not installed (it fails instead under
// PGMIRROR_TEST_REQUIRE_MAJORS=1, which make test sets).
func NewClusterVersion(tb testing.TB, major int, logical bool) *localpg.Cluster {
	tb.Helper()
	return newPrivateCluster(tb, localpg.Config{Logical: logical, BinDir: BinDir(tb, major)})
}

// MajorCluster is the shared logical cluster of the given PostgreSQL major
// (started on first use, stopped by StopAll): tests of a version matrix
// share one per major and each take a database of their own. It skips or
// fails like NewClusterVersion when the major is not installed.
func MajorCluster(tb testing.TB, major int) *localpg.Cluster {
	tb.Helper()
	return sharedBin(tb, "pg"+strconv.Itoa(major), BinDir(tb, major))
}

// SuiteMajor is the PostgreSQL major that the suite's clusters run:
// PGMIRROR_TEST_PG_MAJOR, or 0 for the default (the distribution's 15).
func SuiteMajor(tb testing.TB) int {
	tb.Helper()
	v := os.Getenv("PGMIRROR_TEST_PG_MAJOR")
	if v == "" {
		return 0
	}
	major, err := strconv.Atoi(v)
	if err != nil || major < 12 || major > 18 {
		tb.Fatalf("pgtest: PGMIRROR_TEST_PG_MAJOR=%q: want a PostgreSQL major from 12 to 18", v)
	}
	return major
}

// BinDir returns the directory of the server binaries of major (0: the
// default ones). When they are missing it skips the test, or fails it under
// PGMIRROR_TEST_REQUIRE_MAJORS=1 (on Linux x86-64, the only platform the
// packaged binaries exist for) and for the suite's own major.
func BinDir(tb testing.TB, major int) string {
	tb.Helper()
	if pgbin := os.Getenv("PGBIN"); major == 0 && pgbin != "" {
		dir, err := localpg.FindBinDir(pgbin)
		if err != nil {
			tb.Fatalf("pgtest: %v", err)
		}
		return dir
	}
	dir, err := localpg.BinDirForMajor(major)
	if err == nil {
		return dir
	}
	if major == 0 || major == SuiteMajor(tb) || RequireMajors() {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Skipf("pgtest: %v", err)
	return ""
}

// RequireMajors reports whether a missing PostgreSQL major fails a test
// rather than skipping it: PGMIRROR_TEST_REQUIRE_MAJORS=1 (make test) on
// Linux x86-64, unless PGMIRROR_SKIP_PG_MAJORS=1 skipped their installation.
func RequireMajors() bool {
	return os.Getenv("PGMIRROR_TEST_REQUIRE_MAJORS") == "1" && os.Getenv("PGMIRROR_SKIP_PG_MAJORS") != "1" &&
		runtime.GOOS == "linux" && runtime.GOARCH == "amd64"
}

// NewClusterWith starts a private cluster with extra postgresql.conf
// settings (name to value) for one test. It is stopped when the test ends.
func NewClusterWith(tb testing.TB, logical bool, settings map[string]string) *localpg.Cluster {
	tb.Helper()
	return newPrivateCluster(tb, localpg.Config{Logical: logical, Settings: settings, BinDir: BinDir(tb, SuiteMajor(tb))})
}

// newPrivateCluster starts a cluster with cfg in a new temporary directory
// and stops it when the test ends.
func newPrivateCluster(tb testing.TB, cfg localpg.Config) *localpg.Cluster {
	tb.Helper()
	dir, err := localpg.TempDir("", "pgmirror-test-")
	if err != nil {
		tb.Fatalf("pgtest: create temp dir: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg.DataDir = dir + "/data"
	c, err := localpg.Start(ctx, cfg)
	if err != nil {
		os.RemoveAll(dir)
		tb.Fatalf("pgtest: start cluster: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = c.StopImmediate(ctx)
		os.RemoveAll(dir)
	})
	return c
}

// shared returns the shared cluster of the given role, starting it on first use.
func shared(tb testing.TB, role string) *localpg.Cluster {
	tb.Helper()
	return sharedBin(tb, role, BinDir(tb, SuiteMajor(tb)))
}

// sharedBin returns the shared cluster named role, starting it with the
// binaries in binDir on first use.
func sharedBin(tb testing.TB, role, binDir string) *localpg.Cluster {
	tb.Helper()
	// Clusters of different roles start at the same time; one role's
	// starts one after the other (the second finds the first's cluster).
	mu.Lock()
	if c, ok := clusters[role]; ok {
		mu.Unlock()
		return c
	}
	starting, ok := roleLocks[role]
	if !ok {
		starting = &sync.Mutex{}
		roleLocks[role] = starting
	}
	mu.Unlock()
	starting.Lock()
	defer starting.Unlock()
	mu.Lock()
	c, ok := clusters[role]
	mu.Unlock()
	if ok {
		return c
	}
	dir, err := localpg.TempDir("", "pgmirror-"+role+"-")
	if err != nil {
		tb.Fatalf("pgtest: create temp dir: %v", err)
	}
	mu.Lock()
	tempDirs = append(tempDirs, dir)
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err = localpg.Start(ctx, localpg.Config{DataDir: dir + "/data", Logical: true, BinDir: binDir})
	if err != nil {
		tb.Fatalf("pgtest: start %s cluster: %v", role, err)
	}
	mu.Lock()
	clusters[role] = c
	mu.Unlock()
	return c
}

// SourceCluster is the shared logical cluster that tests use as mirror source.
func SourceCluster(tb testing.TB) *localpg.Cluster { return shared(tb, "source") }

// DestCluster is the shared cluster that tests use as mirror destination.
func DestCluster(tb testing.TB) *localpg.Cluster { return shared(tb, "dest") }

// CatalogCluster is the shared cluster that holds catalog databases.
// It runs the default PostgreSQL (15) whatever PGMIRROR_TEST_PG_MAJOR says:
// that variable is about the peers pgmirror replicates between.
func CatalogCluster(tb testing.TB) *localpg.Cluster {
	tb.Helper()
	return sharedBin(tb, "catalog", BinDir(tb, 0))
}

// DropReplicationOrigins drops, on every shared cluster started so far,
// the replication origins whose names start with one of prefixes and that
// no session has set up. An origin belongs to a cluster, not to a
// database, so dropping a test's databases leaves its mirrors' origins
// behind, and every origin that recorded progress keeps one of the
// cluster's max_replication_slots replication states until it is dropped.
func DropReplicationOrigins(tb testing.TB, prefixes ...string) {
	tb.Helper()
	if len(prefixes) == 0 {
		return
	}
	mu.Lock()
	var all []*localpg.Cluster
	for _, c := range clusters {
		all = append(all, c)
	}
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range all {
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err != nil {
			tb.Logf("pgtest: drop replication origins: %v", err)
			continue
		}
		_, err = conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_drop(o.roname)
			FROM pg_catalog.pg_replication_origin o
			WHERE EXISTS (SELECT FROM pg_catalog.unnest($1::text[]) p WHERE pg_catalog.starts_with(o.roname, p))
			  AND NOT EXISTS (SELECT FROM pg_catalog.pg_replication_origin_status s
			                  WHERE s.local_id = o.roident AND s.acquired_by <> 0)`, prefixes)
		if err != nil {
			tb.Logf("pgtest: drop replication origins: %v", err)
		}
		conn.Close(ctx)
	}
}

// NewDatabase creates a fresh database on c and returns its URL. The
// database is dropped when the test ends (replication slots in it first).
func NewDatabase(tb testing.TB, c *localpg.Cluster) string {
	tb.Helper()
	return NewDatabaseWith(tb, c, "")
}

// NewDatabaseWith is NewDatabase with options for CREATE DATABASE (for
// example "ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0").
func NewDatabaseWith(tb testing.TB, c *localpg.Cluster, options string) string {
	tb.Helper()
	name := fmt.Sprintf("t_%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		tb.Fatalf("pgtest: connect to cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+sqlquote.Ident(name)+" "+options); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() { dropDatabase(c, name) })
	return c.URL(name)
}

func dropDatabase(c *localpg.Cluster, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	// Slots keep a database alive: drop them (terminating their consumers) first.
	_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name)
	for i := 0; i < 50; i++ {
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+sqlquote.Ident(name)+" WITH (FORCE)"); err != nil {
		// PostgreSQL 12 has no FORCE: end the sessions, then drop.
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name)
		time.Sleep(100 * time.Millisecond)
		_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+sqlquote.Ident(name))
	}
}

// Pool opens a pool on url that is closed when the test ends.
func Pool(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Exec runs SQL statements on url and fails the test on error.
func Exec(tb testing.TB, url string, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		tb.Fatalf("pgtest: exec %q: %v", sql, err)
	}
}

// Keyring returns a keyring with a new random key, for a catalog store
// (db.New) in a test.
func Keyring(tb testing.TB) *secretbox.Keyring {
	tb.Helper()
	raw, err := secretbox.GenerateKey()
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	keys, err := secretbox.NewKeyring(raw)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	return keys
}

// FindText returns "table.column" for every column of every table in the
// public schema whose text (text, varchar, json, jsonb, arrays of them: any
// column cast to text) contains needle. Tests use it to show that a secret
// is stored nowhere in clear text.
func FindText(tb testing.TB, pool *pgxpool.Pool, needle string) []string {
	tb.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `SELECT table_name, column_name FROM information_schema.columns
		WHERE table_schema = 'public' ORDER BY table_name, ordinal_position`)
	if err != nil {
		tb.Fatalf("pgtest: list columns: %v", err)
	}
	type column struct{ table, name string }
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.table, &c.name)
	})
	if err != nil {
		tb.Fatalf("pgtest: list columns: %v", err)
	}
	var found []string
	for _, c := range cols {
		var hit bool
		q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE strpos(%s::text, $1) > 0)`,
			sqlquote.Qualified("public", c.table), sqlquote.Ident(c.name))
		if err := pool.QueryRow(ctx, q, needle).Scan(&hit); err != nil {
			tb.Fatalf("pgtest: search %s.%s: %v", c.table, c.name, err)
		}
		if hit {
			found = append(found, c.table+"."+c.name)
		}
	}
	return found
}

// ConnConfig parses url into a connection configuration.
func ConnConfig(tb testing.TB, url string) *pgx.ConnConfig {
	tb.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: parse %s: %v", url, err)
	}
	return cfg
}
