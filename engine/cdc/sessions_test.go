package cdc_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/session"
)

// TestRunUsesGivenSessions: a run given open sessions applies on the
// destination session it was given (no second destination session), and a
// run started again after a stop connects anew, since the first one closed
// them.
func TestRunUsesGivenSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "items"))
	src, err := session.Connect(ctx, b.cfg.Source)
	require.NoError(t, err)
	dst, err := session.Connect(ctx, b.cfg.Dest)
	require.NoError(t, err)
	givenPID := dst.PgConn().PID()
	sessions := cdc.NewSessions(src, dst)
	b.cfg.Sessions = sessions
	// Without watchers a run holds two destination sessions: the one it
	// applies on and the flush poll's.
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 100) g`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)

	// The applied position was written on the given session: the only
	// pgmirror sessions on the destination are it and the flush poll's.
	dc, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dc.Close(ctx)
	var pids []uint32
	rows, err := dc.Query(ctx,
		`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 ORDER BY pid`, session.ApplicationName)
	require.NoError(t, err)
	for rows.Next() {
		var pid uint32
		require.NoError(t, rows.Scan(&pid))
		pids = append(pids, pid)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, pids, givenPID, "the run applies on the destination session it was given")
	require.Len(t, pids, 2, "the given session and the flush poll's, no third one")
	require.NoError(t, r.halt(t))
	require.True(t, src.IsClosed() && dst.IsClosed(), "the run closes the sessions it took")

	// Started again with the same (now empty) Sessions: it connects itself.
	r = b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO items VALUES (101, 'again')`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	require.NoError(t, r.halt(t))
	sessions.Close() // nothing left: a no-op
}
