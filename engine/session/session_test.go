package session_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/session"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

// The settings every session starts with, on regular and replication
// connections.
func TestSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	cfg := pgtest.ConnConfig(t, url)
	conn, err := session.Connect(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var dateStyle, app, interval, encoding string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('DateStyle'), current_setting('application_name'), current_setting('IntervalStyle'),
		current_setting('client_encoding')`).Scan(&dateStyle, &app, &interval, &encoding))
	require.Equal(t, []string{"ISO, YMD", "pgmirror", "postgres", "UTF8"}, []string{dateStyle, app, interval, encoding})
	require.Empty(t, cfg.RuntimeParams["DateStyle"], "the caller's configuration is not changed")

	repl, err := session.ConnectReplication(ctx, &cfg.Config)
	require.NoError(t, err)
	defer repl.Close(ctx)
	require.Equal(t, "ISO, YMD", repl.ParameterStatus("DateStyle"))
	require.Equal(t, "UTF8", repl.ParameterStatus("client_encoding"))
	require.Equal(t, "pgmirror", repl.ParameterStatus("application_name"))

	// Names resolve in pg_catalog only, on both kinds of connection: a
	// function a database user planted in public is not found.
	_, err = conn.Exec(ctx, `CREATE FUNCTION public.pgmirror_planted() RETURNS int LANGUAGE sql AS 'SELECT 1'`)
	require.NoError(t, err)
	var path string
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path))
	require.Equal(t, "pg_catalog, pg_temp", path)
	_, err = conn.Exec(ctx, `SELECT pgmirror_planted()`)
	require.ErrorContains(t, err, "does not exist")
	// SetLocal writes the list as a list (a string literal would name one
	// schema "pg_catalog, pg_temp").
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, session.SetLocal("search_path", session.SearchPath)+"; "+session.SetLocal("DateStyle", "ISO, YMD"))
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&path))
	require.Equal(t, "pg_catalog, pg_temp", path)
	require.NoError(t, tx.Rollback(ctx))
	res := repl.Exec(ctx, `SHOW search_path`)
	results, err := res.ReadAll()
	require.NoError(t, err)
	require.Equal(t, "pg_catalog, pg_temp", string(results[0].Rows[0][0]))

	named := cfg.Copy()
	named.RuntimeParams["application_name"] = "pgmirror snapshot"
	conn2, err := session.Connect(ctx, named)
	require.NoError(t, err)
	defer conn2.Close(ctx)
	require.NoError(t, conn2.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app))
	require.Equal(t, "pgmirror snapshot", app)
}

// Classify on real failures.
func TestClassify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	cfg := pgtest.ConnConfig(t, url)

	// Nobody listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedPort := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	refused := cfg.Copy()
	refused.Port = uint16(closedPort)
	_, err = session.Connect(ctx, refused)
	require.Equal(t, session.Unreachable, session.Classify(err), "refused: %v", err)

	// Something listens and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	mute := cfg.Copy()
	mute.Port = uint16(silent.Addr().(*net.TCPAddr).Port)
	mute.ConnectTimeout = 300 * time.Millisecond
	_, err = session.Connect(ctx, mute)
	require.Equal(t, session.Unreachable, session.Classify(err), "timeout: %v", err)

	// The server answers and refuses: a wrong password, a missing database.
	admin, err := session.Connect(ctx, cfg)
	require.NoError(t, err)
	defer admin.Close(ctx)
	role := fmt.Sprintf("classify_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'right-secret'`, role))
	require.NoError(t, err)
	wrong := cfg.Copy()
	wrong.User, wrong.Password = role, "wrong-secret-value"
	_, err = session.Connect(ctx, wrong)
	require.Equal(t, session.Rejected, session.Classify(err), "wrong password: %v", err)
	require.NotContains(t, err.Error(), "wrong-secret-value")
	missing := cfg.Copy()
	missing.Database = "no_such_database"
	_, err = session.Connect(ctx, missing)
	require.Equal(t, session.Rejected, session.Classify(err), "missing database: %v", err)

	// A session the server ends (pg_terminate_backend: admin_shutdown), and
	// a closed connection used again.
	victim, err := session.Connect(ctx, cfg)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, victim.PgConn().PID())
	require.NoError(t, err)
	_, err = victim.Exec(ctx, `SELECT 1`)
	require.Equal(t, session.Unreachable, session.Classify(err), "terminated: %v", err)
	_, err = victim.Exec(ctx, `SELECT 1`)
	require.Equal(t, session.Unreachable, session.Classify(err), "used after close: %v", err)

	// Not connection failures.
	_, err = admin.Exec(ctx, `SELECT 1/0`)
	require.Equal(t, session.Other, session.Classify(err))
	require.Equal(t, session.Other, session.Classify(errors.New("anything")))
	require.Equal(t, session.Other, session.Classify(context.Canceled))
	require.Equal(t, session.Other, session.Classify(nil))
	require.Equal(t, "postgres://u:********@h", session.Scrub("postgres://u:pw1@h", "pw1"))
	require.Equal(t, "x", session.Scrub("x", ""))
}

// TestScrub checks that Scrub masks a password where a connection string
// holds one, whatever it is, and does not act as an oracle elsewhere: a
// short password that happens to equal a user name or a letter of the
// message leaves the message as it is.
func TestScrub(t *testing.T) {
	t.Parallel()
	long := "Zq8-long-random-secret-42"
	for _, c := range []struct{ msg, password, want string }{
		{"postgres://u:pw1@h", "pw1", "postgres://u:********@h"},
		{"x", "", "x"},
		{"cannot parse `postgres://peer:anything@db:5432/x`: bad port", "other", "cannot parse `postgres://peer:********@db:5432/x`: bad port"},
		{"cannot parse `host=h password=a user=u`", "a", "cannot parse `host=h password=******** user=u`"},
		{"cannot parse `host=h password='a b\\' c' user=u`", "a b' c", "cannot parse `host=h password=******** user=u`"},
		{"postgres://h/db?sslpassword=s3cret&sslmode=require", "s3cret", "postgres://h/db?sslpassword=********&sslmode=require"},
		// The oracle of substring masking: a weak password must not show.
		{"failed to connect to `user=peeruser database=app`: password authentication failed for user \"peeruser\"", "peeruser",
			"failed to connect to `user=peeruser database=app`: password authentication failed for user \"peeruser\""},
		{"database \"alpha\" does not exist", "a", "database \"alpha\" does not exist"},
		// A long password is masked wherever it appears.
		{"server said: " + long + " is wrong", long, "server said: ******** is wrong"},
	} {
		require.Equal(t, c.want, session.Scrub(c.msg, c.password), "Scrub(%q, %q)", c.msg, c.password)
	}
}
