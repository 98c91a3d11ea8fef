package apply_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
)

// statementLog records the SQL a connection sends through pgx's query
// path.
type statementLog struct {
	mu  sync.Mutex
	sql []string
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	l.sql = append(l.sql, data.SQL)
	l.mu.Unlock()
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the statements logged since the last call.
func (l *statementLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.sql
	l.sql = nil
	return out
}

func guardQueries(stmts []string) int {
	n := 0
	for _, s := range stmts {
		if strings.Contains(s, "LOCK TABLE") || strings.Contains(s, "pg_trigger") {
			n++
		}
	}
	return n
}

// TestWriteGuard: a batch into a table the session's role owns sends no
// query beyond the writes; a table another role owns without code of its
// own is written after the guard (which locks it and lists its code); one
// whose owner has an ENABLE ALWAYS trigger calling its function is refused
// before anything is written, as is a table of the session's role with a
// column of the tenant's domain whose CHECK calls its function; the
// functions never run.
func TestWriteGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := fmt.Sprintf("tenant_%d_%d", os.Getpid(), seq.Add(1))
	pgtest.Exec(t, dst, `CREATE ROLE `+role+`;
CREATE SCHEMA canary; CREATE SEQUENCE canary.seq;
CREATE TABLE public.mine (id int PRIMARY KEY, v text);
CREATE TABLE public.theirs (id int PRIMARY KEY, v text CHECK (v <> ''));
CREATE TABLE public.trapped (id int PRIMARY KEY, v text);
ALTER TABLE public.theirs OWNER TO `+role+`; ALTER TABLE public.trapped OWNER TO `+role+`;
GRANT CREATE ON SCHEMA public TO `+role+`;
SET ROLE `+role+`;
CREATE FUNCTION public.spy() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN BEGIN PERFORM pg_catalog.nextval('canary.seq'); EXCEPTION WHEN insufficient_privilege THEN NULL; END; RETURN NEW; END$f$;
CREATE TRIGGER spying BEFORE INSERT ON public.trapped FOR EACH ROW EXECUTE FUNCTION public.spy();
ALTER TABLE public.trapped ENABLE ALWAYS TRIGGER spying;
CREATE FUNCTION public.ok(text) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $f$
BEGIN BEGIN PERFORM pg_catalog.nextval('canary.seq'); EXCEPTION WHEN insufficient_privilege THEN NULL; END; RETURN true; END$f$;
CREATE DOMAIN public.checked AS text CHECK (public.ok(VALUE));
RESET ROLE;
CREATE TABLE public.typed (id int PRIMARY KEY, v public.checked)`)
	cfg := pgtest.ConnConfig(t, dst)
	trace := &statementLog{}
	cfg.Tracer = trace
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	rel := func(id uint32, name string) *change.Relation {
		return &change.Relation{ID: id, Table: change.TableName{Schema: "public", Name: name}, ReplicaIdentity: change.IdentityDefault,
			Columns: []change.Column{{Name: "id", Key: true}, {Name: "v"}}}
	}
	mine, theirs, trapped, typed := rel(1, "mine"), rel(2, "theirs"), rel(3, "trapped"), rel(4, "typed")
	var maps []change.Mapping
	for _, r := range []*change.Relation{mine, theirs, trapped, typed} {
		maps = append(maps, change.Mapping{Source: r.Table, Destination: r.Table})
	}
	a, err := apply.New(ctx, conn, apply.Config{MirrorUID: "m", Mappings: maps})
	require.NoError(t, err)
	insert := func(r *change.Relation, id int) *change.Change {
		return &change.Change{Op: change.OpInsert, Relation: r, New: []change.Value{text(fmt.Sprint(id)), text("v")}}
	}

	for i := 1; i <= 3; i++ {
		trace.take()
		require.NoError(t, applyBatch(t, a, change.LSN(i), []*change.Change{insert(mine, i)}))
		require.Zero(t, guardQueries(trace.take()), "a table the session's role owns costs no guard query")
	}
	for i := 1; i <= 2; i++ {
		require.NoError(t, applyBatch(t, a, change.LSN(10+i), []*change.Change{insert(theirs, i)}))
		stmts := trace.take()
		require.Equal(t, 2, guardQueries(stmts), "every batch guards a table another role owns: %v", stmts)
	}
	err = applyBatch(t, a, 20, []*change.Change{insert(trapped, 1)})
	require.ErrorIs(t, err, exprcheck.ErrForeignCode)
	require.Contains(t, err.Error(), `trigger spying (public.spy())`)
	require.NoError(t, a.Rollback(ctx))
	// A table of the session's role whose column has the tenant's domain:
	// the domain's owner may add a CHECK at any time.
	err = applyBatch(t, a, 21, []*change.Change{insert(typed, 1)})
	require.ErrorIs(t, err, exprcheck.ErrForeignCode)
	require.Contains(t, err.Error(), `type of column v (uses type checked, which calls public.ok(text), which is not a built-in function)`)
	require.NoError(t, a.Rollback(ctx))
	var n, called int
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM public.trapped), (SELECT CASE WHEN is_called THEN 1 ELSE 0 END FROM canary.seq)`).Scan(&n, &called))
	require.Zero(t, n)
	require.Zero(t, called, "the owner's trigger ran with the applier's privileges")
	require.False(t, errors.Is(err, apply.ErrForeignKeyViolation))
}
