package origin_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/origin"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var seq atomic.Int64

func connect(t *testing.T, u string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), u)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func origins(t *testing.T, conn *pgx.Conn, uid string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT roname FROM pg_replication_origin WHERE roname = $1 OR roname LIKE $2 ORDER BY 1`,
		origin.Name(uid), origin.Name(uid)+`\_c%`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// TestSessions: Setup marks a session (another session may not take the
// same origin), SetupCopy gives each connection its own copy origin,
// Release drops one, DropMirror drops every origin of the mirror and only
// those.
func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	uid := fmt.Sprintf("origin-test-%d-%d", os.Getpid(), seq.Add(1))
	other := uid + "0"
	admin := connect(t, db)
	t.Cleanup(func() {
		_ = origin.DropMirror(context.Background(), admin, uid)
		_ = origin.DropMirror(context.Background(), admin, other)
	})
	ok, err := origin.Permitted(ctx, admin)
	require.NoError(t, err)
	require.True(t, ok, "a superuser may use origins")

	a, b, c := connect(t, db), connect(t, db), connect(t, db)
	require.NoError(t, origin.Setup(ctx, a, origin.Name(uid)))
	require.ErrorIs(t, origin.Setup(ctx, b, origin.Name(uid)), origin.ErrInUse, "an origin in use by another session")
	first, err := origin.SetupCopy(ctx, b, uid)
	require.NoError(t, err)
	second, err := origin.SetupCopy(ctx, c, uid)
	require.NoError(t, err)
	require.Equal(t, []string{origin.Name(uid) + "_c1", origin.Name(uid) + "_c2"}, []string{first, second})
	require.NoError(t, origin.Setup(ctx, connect(t, db), origin.Name(other)))
	require.True(t, origin.IsPgmirror(first))
	require.False(t, origin.IsPgmirror("pg_16400"))

	// A transaction of a marked session carries the origin in the WAL.
	var marked bool
	require.NoError(t, a.QueryRow(ctx, `SELECT pg_replication_origin_session_is_setup()`).Scan(&marked))
	require.True(t, marked)

	require.NoError(t, origin.Release(ctx, b, first))
	require.Equal(t, []string{origin.Name(uid), second}, origins(t, admin, uid))
	c.Close(ctx) // its origin stays until dropped
	require.NoError(t, origin.Release(ctx, a, origin.Name(uid)))
	// c's backend lets go of its origin when it has exited, which may be a
	// moment after Close returned.
	require.Eventually(t, func() bool { return origin.DropMirror(ctx, admin, uid) == nil },
		10*time.Second, 50*time.Millisecond, "drop the mirror's origins once no session uses them")
	require.Empty(t, origins(t, admin, uid))
	require.Equal(t, []string{origin.Name(other)}, origins(t, admin, other), "another mirror's origin stays")
}

// TestNotPermitted: a destination user that is no superuser may not use
// origins (ErrNotPermitted) until granted what GrantHint says.
func TestNotPermitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := fmt.Sprintf("origin_user_%d_%d", os.Getpid(), seq.Add(1))
	uid := role
	pgtest.Exec(t, db, `CREATE ROLE `+role+` LOGIN PASSWORD 'pw'`)
	admin := connect(t, db)
	t.Cleanup(func() {
		_ = origin.DropMirror(context.Background(), admin, uid)
		pgtest.Exec(t, db, `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	u, err := url.Parse(db)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "pw")
	conn := connect(t, u.String())
	ok, err := origin.Permitted(ctx, conn)
	require.NoError(t, err)
	require.False(t, ok)
	require.ErrorIs(t, origin.Setup(ctx, conn, origin.Name(uid)), origin.ErrNotPermitted)

	grant := strings.TrimPrefix(origin.GrantHint, "run, as a superuser on the destination database: ")
	pgtest.Exec(t, db, strings.ReplaceAll(grant, "<the destination peer's user>", role))
	ok, err = origin.Permitted(ctx, conn)
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, origin.Setup(ctx, conn, origin.Name(uid)))
	require.NoError(t, origin.Release(ctx, conn, origin.Name(uid)))
}

// TestNoFreeState: on a destination whose replication state entries are all
// taken (max_replication_slots = 1 and one session marked), Setup and
// SetupCopy fail with ErrNoFreeState, which the callers take as "run
// unmarked" instead of failing the mirror; once the first session lets go,
// the origin can be used again.
func TestNoFreeState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewDatabase(t, pgtest.NewClusterWith(t, false, map[string]string{"max_replication_slots": "1"}))
	uid := fmt.Sprintf("origin-full-%d-%d", os.Getpid(), seq.Add(1))
	a, b := connect(t, db), connect(t, db)
	require.NoError(t, origin.Setup(ctx, a, origin.Name(uid)))

	err := origin.Setup(ctx, b, origin.Name(uid+"x"))
	require.ErrorIs(t, err, origin.ErrNoFreeState)
	require.NotErrorIs(t, err, origin.ErrNotPermitted)
	_, err = origin.SetupCopy(ctx, b, uid)
	require.ErrorIs(t, err, origin.ErrNoFreeState)

	require.NoError(t, origin.Release(ctx, a, origin.Name(uid)))
	name, err := origin.SetupCopy(ctx, b, uid)
	require.NoError(t, err)
	require.NoError(t, origin.Release(ctx, b, name))
}

// serverLogErrors returns the ERROR and FATAL lines of a cluster's server
// log.
func serverLogErrors(t *testing.T, dataDir string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dataDir, "server.log"))
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "ERROR:") || strings.Contains(line, "FATAL:") {
			out = append(out, line)
		}
	}
	return out
}

// TestCopyOriginsWithoutErrors: many connections taking copy origins of one
// mirror at once each get their own, an origin held by a session outside
// the lock protocol is passed over, an origin in use makes Setup and
// DropMirror answer ErrInUse, and none of it writes an ERROR into the
// server's log.
func TestCopyOriginsWithoutErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster := pgtest.NewCluster(t, false)
	db := pgtest.NewDatabase(t, cluster)
	uid := fmt.Sprintf("origin-log-%d-%d", os.Getpid(), seq.Add(1))
	admin := connect(t, db)

	// _c1 used by a session that did not take its lock.
	outsider := connect(t, db)
	require.NoError(t, origin.Setup(ctx, outsider, origin.Name(uid)+"_c1"))
	require.ErrorIs(t, origin.Setup(ctx, admin, origin.Name(uid)+"_c1"), origin.ErrInUse)

	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		conns[i] = connect(t, db)
	}
	names := make([]string, n)
	errs := make(chan error, n)
	for i := range conns {
		go func() {
			var err error
			names[i], err = origin.SetupCopy(ctx, conns[i], uid)
			errs <- err
		}()
	}
	for range conns {
		require.NoError(t, <-errs)
	}
	seen := map[string]bool{}
	for _, name := range names {
		require.NotEqual(t, origin.Name(uid)+"_c1", name, "the outsider's origin")
		require.False(t, seen[name], "two connections got %s", name)
		seen[name] = true
	}
	require.ErrorIs(t, origin.DropMirror(ctx, admin, uid), origin.ErrInUse)
	for i, c := range conns {
		require.NoError(t, origin.Release(ctx, c, names[i]))
	}
	// A released copy origin is taken again, its lock free.
	again, err := origin.SetupCopy(ctx, conns[0], uid)
	require.NoError(t, err)
	require.True(t, seen[again])
	require.NoError(t, origin.Release(ctx, conns[0], again))
	require.NoError(t, origin.Release(ctx, outsider, origin.Name(uid)+"_c1"))
	require.NoError(t, origin.DropMirror(ctx, admin, uid))
	require.Empty(t, origins(t, admin, uid))
	var locks int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&locks))
	require.Zero(t, locks, "advisory locks left after Release")
	require.Empty(t, serverLogErrors(t, cluster.DataDir()))
}

// TestLoopMirrors: the mirrors that close a loop with a mirror are those
// writing its source from a database its destination reaches; the first
// mirror of a chain is not one of them.
func TestLoopMirrors(t *testing.T) {
	t.Parallel()
	const a, b, c, d = 1, 2, 3, 4
	cases := []struct {
		name  string
		self  string
		edges []origin.Edge
		want  []string
	}{
		{"pair", "ab", []origin.Edge{{"ab", a, b}, {"ba", b, a}}, []string{"ba"}},
		{"pair, other side", "ba", []origin.Edge{{"ab", a, b}, {"ba", b, a}}, []string{"ab"}},
		{"chain, second", "bc", []origin.Edge{{"ab", a, b}, {"bc", b, c}}, nil},
		{"chain, third", "cd", []origin.Edge{{"ab", a, b}, {"bc", b, c}, {"cd", c, d}}, nil},
		{"ring", "ab", []origin.Edge{{"ab", a, b}, {"bc", b, c}, {"ca", c, a}}, []string{"ca"}},
		{"ring, second", "bc", []origin.Edge{{"ab", a, b}, {"bc", b, c}, {"ca", c, a}}, []string{"ab"}},
		{"cut-over with a reporting copy", "bc", []origin.Edge{{"ab", a, b}, {"ba", b, a}, {"bc", b, c}}, nil},
		{"cut-over's reverse beside a reporting copy", "ba", []origin.Edge{{"ab", a, b}, {"ba", b, a}, {"bc", b, c}}, []string{"ab"}},
		{"into its own database", "aa", []origin.Edge{{"aa", a, a}, {"da", d, a}}, []string{"aa"}},
		{"unknown", "x", []origin.Edge{{"ab", a, b}}, nil},
	}
	for _, c := range cases {
		require.Equal(t, c.want, origin.LoopMirrors(c.self, c.edges), c.name)
	}
	for name, want := range map[string]string{
		"pgmirror_u1": "u1", "pgmirror_u1_c12": "u1", "pgmirror_u1_c": "u1_c", "pgmirror_u1_cx": "u1_cx", "pgmirror_": "", "pg_16400": "",
	} {
		uid, ok := origin.MirrorUID(name)
		require.Equal(t, want, uid, name)
		require.Equal(t, want != "", ok, name)
	}
}
