package ddl

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/ownership"
	"github.com/pgmirror/pgmirror/engine/session"
)

// A _pgmirror schema, a function in it or the signing key's table that
// another role (not the peer's user, not a superuser) owns is refused by
// Install, before anything is created or replaced, and by ReadKey; the
// other role's objects are left as they were.
func TestInstallRefusesForeignObjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	admin := connect(t, url)
	var dbName string
	require.NoError(t, admin.QueryRow(ctx, `SELECT current_database()`).Scan(&dbName))
	role := "foreign_" + strings.ReplaceAll(dbName, "-", "_")
	_, err := admin.Exec(ctx, `CREATE ROLE `+role)
	require.NoError(t, err)
	conn, err := session.Connect(ctx, pgtest.ConnConfig(t, url))
	require.NoError(t, err)
	defer conn.Close(ctx)
	triggers := func() int {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger WHERE evtname IN ($1, $2)`, CommandEndTrigger, SQLDropTrigger).Scan(&n))
		return n
	}

	// The schema, made by the other role beforehand.
	_, err = admin.Exec(ctx, `CREATE SCHEMA _pgmirror AUTHORIZATION `+role)
	require.NoError(t, err)
	err = Install(ctx, conn)
	require.ErrorIs(t, err, ownership.ErrForeignOwner)
	require.ErrorContains(t, err, `schema _pgmirror is owned by role "`+role+`"`)
	require.Zero(t, triggers(), "nothing is installed")
	var tables int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relnamespace = '_pgmirror'::regnamespace`).Scan(&tables))
	require.Zero(t, tables, "no key table in the other role's schema")
	_, err = admin.Exec(ctx, `DROP SCHEMA _pgmirror CASCADE`)
	require.NoError(t, err)

	// A function in pgmirror's schema, made by a role that was let create
	// objects there: it is not replaced (CREATE OR REPLACE would keep its
	// owner).
	_, err = admin.Exec(ctx, `CREATE SCHEMA _pgmirror; GRANT USAGE, CREATE ON SCHEMA _pgmirror TO `+role+`;
		SET ROLE `+role+`;
		CREATE FUNCTION _pgmirror.pgmirror_ddl_emit(body jsonb) RETURNS void LANGUAGE plpgsql AS $$BEGIN RAISE NOTICE 'attacker'; END$$;
		RESET ROLE`)
	require.NoError(t, err)
	err = Install(ctx, conn)
	require.ErrorIs(t, err, ownership.ErrForeignOwner)
	require.ErrorContains(t, err, `function _pgmirror.pgmirror_ddl_emit(jsonb) is owned by role "`+role+`"`)
	var src, owner string
	require.NoError(t, admin.QueryRow(ctx, `SELECT prosrc, proowner::regrole::text FROM pg_proc WHERE oid = '_pgmirror.pgmirror_ddl_emit(jsonb)'::regprocedure`).Scan(&src, &owner))
	require.Contains(t, src, "attacker", "the other role's function is left as it was")
	require.Equal(t, role, owner)
	require.Zero(t, triggers())
	_, err = admin.Exec(ctx, `DROP FUNCTION _pgmirror.pgmirror_ddl_emit(jsonb); REVOKE CREATE ON SCHEMA _pgmirror FROM `+role)
	require.NoError(t, err)

	// A clean install, then the key's table handed to the other role: the
	// key is not read, and the trigger functions are not replaced.
	require.NoError(t, Install(ctx, conn))
	_, err = ReadKey(ctx, conn)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `ALTER TABLE _pgmirror.pgmirror_ddl_key OWNER TO `+role)
	require.NoError(t, err)
	_, err = ReadKey(ctx, conn)
	require.ErrorIs(t, err, ownership.ErrForeignOwner)
	require.ErrorContains(t, err, `table _pgmirror.pgmirror_ddl_key is owned by role "`+role+`"`)
	require.ErrorIs(t, Install(ctx, conn), ownership.ErrForeignOwner)
}
