package jobs

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// roundRobinLoad inserts rows into the source tables in turn, from id
// first on, one every 5 ms on one connection, until stop is called or n
// rows are in; stop returns the number inserted.
func roundRobinLoad(t *testing.T, dbURL string, tables []string, first, n int) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	done := make(chan int, 1)
	go func() {
		i := 0
		defer func() { done <- i }()
		defer conn.Close(context.Background())
		for ; i < n; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			tbl := pgx.Identifier{"public", tables[i%len(tables)]}.Sanitize()
			if _, err := conn.Exec(ctx, `INSERT INTO `+tbl+` VALUES ($1::bigint, 'load')`, first+i); err != nil {
				return
			}
		}
	}()
	var once sync.Once
	var inserted int
	stop = func() int {
		once.Do(func() {
			cancel()
			inserted = <-done
		})
		return inserted
	}
	t.Cleanup(func() { stop() })
	return stop
}

// When a second replica joins, the first one hands it its fair share of
// the mirrors under a write load: each mirror handed over stops at a batch
// boundary on the first replica and goes on from there on the second,
// never run by both at once (sampled every 10 ms from both replicas' runs),
// without a failure, and every row written meanwhile is on the
// destination exactly once. Each mirror moves once (none is taken back by
// the first replica while its job waits for the second), and the mirrors
// then stay where they are.
func TestFairShareHandoff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 4
	tables := make([]string, n)
	for i := range tables {
		tables[i] = fmt.Sprintf("t%d", i+1)
		exec(t, e.srcURL, `CREATE TABLE public.`+tables[i]+` (id bigint PRIMARY KEY, v text NOT NULL)`)
		exec(t, e.srcURL, `INSERT INTO public.`+tables[i]+` SELECT g, 'row ' || g FROM generate_series(1, 10) g`)
	}
	a := e.startReplica("a", nil)
	mirrors := make([]db.Mirror, n)
	for i, tbl := range tables {
		mirrors[i] = e.createMirror("m"+tbl, []string{tbl})
	}
	for i, m := range mirrors {
		waitRows(t, e.dstURL, tables[i], 10, 60*time.Second)
		e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
		waitFor(t, "replica a to run "+m.Name, 30*time.Second, func() bool { return e.lockOwner(m.ID) == lockApp("a") })
	}

	stop := roundRobinLoad(t, e.srcURL, tables, 1000, 2000)
	b := e.startReplica("b", nil)
	// Sample both replicas' runs: a mirror is never run by both, and the
	// longest time a mirror is run by neither (its hand-off) is recorded.
	var both []string
	var sampleMu sync.Mutex
	unrunSince := map[int64]time.Time{}
	var longestGap time.Duration
	sampleDone := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for {
			select {
			case <-quit:
				return
			case <-time.After(10 * time.Millisecond):
			}
			for _, m := range mirrors {
				onA, onB := a.bal.hasRun(m.ID), b.bal.hasRun(m.ID)
				sampleMu.Lock()
				if onA && onB {
					both = append(both, m.Name)
				}
				since, unrun := unrunSince[m.ID]
				switch {
				case !onA && !onB && !unrun:
					unrunSince[m.ID] = time.Now()
				case (onA || onB) && unrun:
					longestGap = max(longestGap, time.Since(since))
					delete(unrunSince, m.ID)
				}
				sampleMu.Unlock()
			}
		}
	}()
	owners := func() map[string]int {
		got := map[string]int{}
		for _, m := range mirrors {
			got[e.lockOwner(m.ID)]++
		}
		return got
	}
	waitFor(t, "two mirrors on each replica", 60*time.Second, func() bool {
		o := owners()
		return o[lockApp("a")] == n/2 && o[lockApp("b")] == n/2
	}, func() string { return fmt.Sprintf("lock owners %v", owners()) })
	time.Sleep(time.Second) // the load goes on after the hand-offs
	inserted := stop()
	t.Logf("%d rows inserted during the hand-offs", inserted)
	require.Greater(t, inserted, 50, "rows inserted during the hand-offs")
	for _, tbl := range tables {
		waitEqual(t, e, tbl, 60*time.Second)
	}
	holds(t, "the mirrors stay where they are", 3*time.Second, func() bool {
		o := owners()
		return o[lockApp("a")] == n/2 && o[lockApp("b")] == n/2
	})
	close(quit)
	<-sampleDone
	sampleMu.Lock()
	require.Empty(t, both, "mirrors run by both replicas at once")
	require.Empty(t, unrunSince, "mirrors run by neither replica at the end")
	t.Logf("longest time a mirror was run by neither replica: %s", longestGap)
	require.Less(t, longestGap, time.Second, "a hand-off left its mirror without a run")
	sampleMu.Unlock()
	// b's run jobs were enqueued as a's runs were asked to stop, and waited
	// for the locks: a's runs ended without enqueueing them.
	var ahead int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM river_job WHERE queue = $1 AND args->>'handed_by' = $2`, b.bal.queue, a.bal.cfg.Locks.Name()).Scan(&ahead))
	require.Equal(t, n/2, ahead, "run jobs of hand-offs enqueued ahead on b's adoption queue")
	require.Equal(t, n/2, a.log.count("handing the mirror to a replica below its share"), "hand-offs of replica a")
	require.Zero(t, b.log.count("handing the mirror to a replica below its share"), "hand-offs of replica b")
	// No mirror handed to b was taken back by a meanwhile (and handed
	// again): a mirror moves once.
	require.Zero(t, a.log.count("mirror has no worker: adopting it"), "mirrors replica a adopted")
	for _, m := range mirrors {
		got := e.mirror(m.ID)
		require.Equal(t, db.StatusRunning, got.Status, "mirror %s", m.Name)
		require.Zero(t, got.ErrorCount, "failures of mirror %s", m.Name)
	}
	for _, tbl := range tables {
		insertRow(t, e.srcURL, tbl, 9000)
		waitEqual(t, e, tbl, 30*time.Second)
	}
}

// insertRow inserts row id into the public source table.
func insertRow(t *testing.T, dbURL, table string, id int) {
	t.Helper()
	exec(t, dbURL, `INSERT INTO `+pgx.Identifier{"public", table}.Sanitize()+` VALUES ($1::bigint, 'row ' || $1::bigint)`, id)
}
