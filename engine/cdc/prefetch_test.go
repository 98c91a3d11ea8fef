package cdc_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestIdleRunDescribesTables: a run whose stream is idle reads the
// description of every mapped destination table ahead, so that the first
// change of each after the run starts does not wait for it; those first
// changes are then applied without describing the tables again.
func TestIdleRunDescribesTables(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.a (id int PRIMARY KEY); CREATE TABLE public.b (id int PRIMARY KEY)`
	b := setup(t, ddl, ddl, same("public", "a"), same("public", "b"))
	tracer := &describeTracer{count: map[string]int{}}
	b.cfg.Dest.Tracer = tracer
	r := b.start(t)
	require.Eventually(t, func() bool { return tracer.described("a") == 1 && tracer.described("b") == 1 },
		20*time.Second, 50*time.Millisecond, "the idle run did not describe its destination tables ahead")

	pgtest.Exec(t, b.src, `INSERT INTO public.a VALUES (1); INSERT INTO public.b VALUES (1)`)
	q := `SELECT (SELECT count(*) FROM public.a) + (SELECT count(*) FROM public.b)`
	b.waitEqual(t, r, q, q)
	require.Equal(t, 1, tracer.described("a"), "the first change of a described its table again")
	require.Equal(t, 1, tracer.described("b"), "the first change of b described its table again")
}

// describeTracer counts, per table name, the destination's queries of a
// table's description (the applier's query of its columns and keys).
type describeTracer struct {
	mu    sync.Mutex
	count map[string]int
}

func (d *describeTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "format_type(a.atttypid, a.atttypmod)") && len(data.Args) == 2 {
		if name, ok := data.Args[1].(string); ok {
			d.mu.Lock()
			d.count[name]++
			d.mu.Unlock()
		}
	}
	return ctx
}

func (d *describeTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (d *describeTracer) described(table string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.count[table]
}
