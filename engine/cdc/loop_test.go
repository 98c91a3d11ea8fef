package cdc_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// reversed returns a bundle that replicates b's destination back into b's
// source (a publication and slot on b's destination), both runs marking
// their writes with their own origins.
func reversed(t *testing.T, b *testBundle) *testBundle {
	t.Helper()
	return fromDest(t, b, b.src, func(m change.Mapping) change.TableName { return m.Source })
}

// fromDest returns a bundle that replicates b's destination (a publication
// and slot there) into the database at dst, each of b's destination tables
// into the table to names, marking its writes with its own origin.
func fromDest(t *testing.T, b *testBundle, dst string, to func(change.Mapping) change.TableName) *testBundle {
	t.Helper()
	n, slot, pub := newSlot(t, b.dst, b.cfg.Tables, true)
	mappings := make([]change.Mapping, len(b.cfg.Tables))
	for i, m := range b.cfg.Tables {
		mappings[i] = change.Mapping{Source: m.Destination, Destination: to(m)}
	}
	r := &testBundle{src: b.dst, dst: dst, rep: &recorder{}, cfg: b.cfg}
	r.cfg.MirrorUID = fmt.Sprintf("mirror-%d", n)
	r.cfg.Source, r.cfg.Dest = b.cfg.Dest, pgtest.ConnConfig(t, dst)
	r.cfg.SlotName, r.cfg.PublicationName = slot, pub
	r.cfg.Tables = mappings
	r.cfg.Origin = origin.Name(r.cfg.MirrorUID)
	return r
}

// TestOppositeMirrorsDoNotLoop runs two mirrors in opposite directions over
// one table while both sides write to it: each applies exactly the changes
// written on its source (none comes back through the other), both sides
// end equal, and nothing moves any more once the writes stop.
func TestOppositeMirrorsDoNotLoop(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, side text NOT NULL, n int NOT NULL);
		CREATE TABLE public.scratch (id int PRIMARY KEY)`
	ab := setup(t, ddl, ddl, same("public", "items"), same("public", "scratch"))
	ab.cfg.Origin = origin.Name(ab.cfg.MirrorUID)
	ba := reversed(t, ab)
	dropOrigins(t, ab.dst, ab.cfg.MirrorUID)
	dropOrigins(t, ab.src, ba.cfg.MirrorUID)
	rab, rba := ab.start(t), ba.start(t)

	// Each side writes its own keys (odd on a, even on b) in many small
	// transactions at once: 40 inserts, 40 updates and 10 deletes each,
	// plus one truncate of scratch on a.
	write := func(url, side string, first int) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		require.NoError(t, err)
		defer conn.Close(ctx)
		for i := range 40 {
			id := first + 2*i
			_, err := conn.Exec(ctx, `INSERT INTO items VALUES ($1, $2, 0)`, id, side)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, `UPDATE items SET n = n + 1 WHERE id = $1`, id)
			require.NoError(t, err)
			if i%4 == 0 {
				_, err = conn.Exec(ctx, `DELETE FROM items WHERE id = $1`, id)
				require.NoError(t, err)
			}
		}
	}
	pgtest.Exec(t, ab.src, `INSERT INTO scratch SELECT generate_series(1, 5)`)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); write(ab.src, "a", 1) }()
	go func() { defer wg.Done(); write(ab.dst, "b", 2) }()
	wg.Wait()
	pgtest.Exec(t, ab.src, `TRUNCATE scratch`)

	// Both sides end with 30 rows of each: a's reach b and b's reach a.
	for _, url := range []string{ab.src, ab.dst} {
		require.Eventually(t, func() bool {
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				return false
			}
			defer conn.Close(context.Background())
			var n int
			return conn.QueryRow(context.Background(), `SELECT count(*) FROM items`).Scan(&n) == nil && n == 60
		}, 60*time.Second, 100*time.Millisecond)
	}
	ab.waitEqual(t, rab, `SELECT * FROM items`, `SELECT * FROM items`)
	ab.waitEqual(t, rab, `SELECT * FROM scratch`, `SELECT * FROM scratch`)
	// Looping changes would keep coming back; give them time to show.
	time.Sleep(3 * time.Second)
	require.NoError(t, rab.halt(t))
	require.NoError(t, rba.halt(t))

	abCounts, baCounts := allCounts(ab.rep), allCounts(ba.rep)
	require.Equal(t, change.Counts{Inserted: 40, Updated: 40, Deleted: 10}, abCounts["public.items"], "a to b applied a's writes only")
	require.Equal(t, change.Counts{Inserted: 40, Updated: 40, Deleted: 10}, baCounts["public.items"], "b to a applied b's writes only")
	require.Equal(t, change.Counts{Inserted: 5, Truncated: 1}, abCounts["public.scratch"])
	require.Zero(t, baCounts["public.scratch"], "b to a carried nothing of scratch: its rows and truncate came from a")
	ab.waitEqual(t, nil, `SELECT * FROM items`, `SELECT * FROM items`)
	conn, err := pgx.Connect(context.Background(), ab.src)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT side || count(*) FROM items GROUP BY side ORDER BY side`)
	require.NoError(t, err)
	sides, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"a30", "b30"}, sides)

	// The origins exist on each destination under the mirrors' names.
	for _, c := range []struct{ url, name string }{{ab.dst, ab.cfg.Origin}, {ab.src, ba.cfg.Origin}} {
		conn, err := pgx.Connect(context.Background(), c.url)
		require.NoError(t, err)
		var n int
		require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_origin WHERE roname = $1`, c.name).Scan(&n))
		conn.Close(context.Background())
		require.Equal(t, 1, n, "origin %s", c.name)
	}
}

// allCounts sums every count of every batch, truncates included, by source
// table.
func allCounts(r *recorder) map[string]change.Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]change.Counts{}
	for _, b := range r.batches {
		for table, c := range b.Tables {
			o := out[table.String()]
			o.Add(c)
			out[table.String()] = o
		}
	}
	return out
}

// dropOrigins drops the origins of mirror uid on the database at url when
// the test ends (origins belong to the cluster, not the database).
func dropOrigins(t *testing.T, url, uid string) {
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_ = origin.DropMirror(ctx, conn, uid)
	})
}

// lockedBuffer is a log sink for several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestOriginNotPermitted: a destination user that may not use replication
// origins gets a warning saying what to grant, and the run applies all the
// same, unmarked.
func TestOriginNotPermitted(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, v text)`
	b := setup(t, ddl, ddl, same("public", "items"))
	role := fmt.Sprintf("cdc_origin_%d_%d", os.Getpid(), nameSeq.Add(1))
	var dbname string
	admin, err := pgx.Connect(context.Background(), b.dst)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT current_database()`).Scan(&dbname))
	pgtest.Exec(t, b.dst, `CREATE ROLE `+role+` LOGIN PASSWORD 'pw';
		GRANT CREATE ON DATABASE `+pgx.Identifier{dbname}.Sanitize()+` TO `+role+`;
		GRANT ALL ON public.items TO `+role)
	t.Cleanup(func() { pgtest.Exec(t, b.dst, `DROP OWNED BY `+role+` CASCADE; DROP ROLE `+role) })
	b.cfg.Dest = b.cfg.Dest.Copy()
	b.cfg.Dest.User, b.cfg.Dest.Password = role, "pw"
	b.cfg.Origin = origin.Name(b.cfg.MirrorUID)
	var log lockedBuffer
	b.cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	r := b.start(t)
	pgtest.Exec(t, b.src, `INSERT INTO items SELECT g, 'v' || g FROM generate_series(1, 20) g`)
	b.waitEqual(t, r, `SELECT * FROM items`, `SELECT * FROM items`)
	require.NoError(t, r.halt(t))
	require.Contains(t, log.String(), "may not use replication origins")
	require.Contains(t, log.String(), "GRANT EXECUTE ON FUNCTION pg_catalog.pg_replication_origin_create(text)")
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_origin WHERE roname = $1`, b.cfg.Origin).Scan(&n))
	require.Zero(t, n)
}

// TestReverseRunSkipsCopies: a copy into b (a snapshot or table resync:
// truncate and COPY, marked with copy origins) while a run replicates b
// back into a is not carried back: a keeps its rows, and the reverse run
// applies nothing but the application's write that follows.
func TestReverseRunSkipsCopies(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.items (id int PRIMARY KEY, v text)`
	ab := setup(t, ddl, ddl, same("public", "items"))
	pgtest.Exec(t, ab.src, `INSERT INTO items SELECT g, 'a' || g FROM generate_series(1, 1000) g`)
	// b holds a row the copy replaces (its truncate is marked too).
	pgtest.Exec(t, ab.dst, `INSERT INTO items VALUES (-1, 'stale')`)
	ba := reversed(t, ab)
	dropOrigins(t, ab.dst, ab.cfg.MirrorUID)
	rba := ba.start(t)
	err := tablesync.Run(context.Background(), tablesync.Config{
		Source: ab.cfg.Source, Dest: ab.cfg.Dest, Tables: ab.cfg.Tables, MaxParallelWorkers: 2, RowsPerPartition: 300,
		OriginMirrorUID: ab.cfg.MirrorUID,
	}, nil)
	require.NoError(t, err)
	ab.waitEqual(t, nil, `SELECT * FROM items`, `SELECT * FROM items`)
	pgtest.Exec(t, ab.dst, `UPDATE items SET v = 'changed on b' WHERE id = 7`)
	ba.waitEqual(t, rba, `SELECT * FROM items WHERE id = 7`, `SELECT * FROM items WHERE id = 7`)
	time.Sleep(time.Second)
	require.NoError(t, rba.halt(t))
	require.Equal(t, change.Counts{Updated: 1}, allCounts(ba.rep)["public.items"], "b to a carried the application's update only")
	ab.waitEqual(t, nil, `SELECT * FROM items`, `SELECT * FROM items`)
}
