package ownership_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/session"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

var seq atomic.Int64

// Check passes objects of the session's login role and of superusers, and
// names the first object of another role, also while the session has SET
// ROLE to that role.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	conn, err := session.Connect(ctx, pgtest.ConnConfig(t, url))
	require.NoError(t, err)
	defer conn.Close(ctx)
	other := fmt.Sprintf("ownership_other_%d_%d", time.Now().UnixNano()%1_000_000, seq.Add(1))
	exec := func(sql string) {
		t.Helper()
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err)
	}
	exec(`CREATE ROLE ` + other)

	require.NoError(t, ownership.Check(ctx, conn), "no _pgmirror")
	exec(`CREATE SCHEMA _pgmirror; CREATE TABLE _pgmirror.t (x int); CREATE FUNCTION _pgmirror.f() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	require.NoError(t, ownership.Check(ctx, conn), "everything the session's user (a superuser) owns")

	exec(`ALTER FUNCTION _pgmirror.f() OWNER TO ` + other)
	err = ownership.Check(ctx, conn)
	var foreign *ownership.ForeignOwnerError
	require.True(t, errors.As(err, &foreign), "%v", err)
	require.ErrorIs(t, err, ownership.ErrForeignOwner)
	require.Equal(t, "function _pgmirror.f()", foreign.Object)
	require.Equal(t, other, foreign.Owner)
	require.Equal(t, "postgres", foreign.User)

	// SET ROLE to the owner does not make its objects the peer's.
	exec(`SET ROLE ` + other)
	require.ErrorIs(t, ownership.Check(ctx, conn), ownership.ErrForeignOwner)
	exec(`RESET ROLE`)

	// The schema comes first.
	exec(`ALTER SCHEMA _pgmirror OWNER TO ` + other)
	require.ErrorContains(t, ownership.Check(ctx, conn), `schema _pgmirror is owned by role "`+other+`"`)
	exec(`ALTER SCHEMA _pgmirror OWNER TO postgres; ALTER TABLE _pgmirror.t OWNER TO ` + other)
	require.ErrorContains(t, ownership.Check(ctx, conn), `table _pgmirror.t is owned by role "`+other+`"`)

	// A superuser's objects are trusted.
	exec(`ALTER ROLE ` + other + ` SUPERUSER`)
	require.NoError(t, ownership.Check(ctx, conn))
	exec(`ALTER ROLE ` + other + ` NOSUPERUSER; DROP SCHEMA _pgmirror CASCADE; DROP ROLE ` + other)
}
