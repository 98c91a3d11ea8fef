package origin_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
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
	require.Error(t, origin.Setup(ctx, b, origin.Name(uid)), "an origin in use by another session")
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
