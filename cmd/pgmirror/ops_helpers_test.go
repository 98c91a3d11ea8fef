package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// Helpers of the control, outage and slot health tests.

// fullStatus is the mirror status record with the fields beyond the ones
// mirrorStatus (harness_test.go) reads.
type fullStatus struct {
	mirrorStatus
	NextRetryAt   *time.Time `json:"next_retry_at"`
	SlotLagBytes  *int64     `json:"slot_lag_bytes"`
	SlotWALStatus *string    `json:"slot_wal_status"`
	SlotCheckedAt *time.Time `json:"slot_checked_at"`
}

func (s *service) full(name string) fullStatus {
	s.t.Helper()
	var raw json.RawMessage
	s.mustDo("GET", "/v1/mirrors/"+name, nil, 200, &raw)
	var m fullStatus
	if err := json.Unmarshal(raw, &m); err != nil {
		s.t.Fatalf("decode %s: %v", raw, err)
	}
	return m
}

// waitMirror waits until cond holds for the mirror's status record.
func (s *service) waitMirror(name, what string, timeout time.Duration, cond func(fullStatus) bool) fullStatus {
	s.t.Helper()
	return waitUntil(s.t, timeout, func() (fullStatus, bool) {
		m := s.full(name)
		return m, cond(m)
	}, func(m fullStatus) string {
		return fmt.Sprintf("mirror %s: timed out after %s waiting for %s; last status %q error_count %d error %q lag %v wal %v",
			name, timeout, what, m.Status, m.ErrorCount, m.ErrorMessage, deref(m.SlotLagBytes), derefS(m.SlotWALStatus))
	})
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func derefS(p *string) any {
	if p == nil {
		return nil
	}
	return *p
}

// logsWith returns the mirror's log entries (newest first) with the given message.
func (s *service) logsWith(name, message string) []logEntry {
	s.t.Helper()
	var out []logEntry
	for _, e := range s.logs(name, "") {
		if e.Message == message {
			out = append(out, e)
		}
	}
	return out
}

// waitLog waits for a log entry with the given message that matches cond
// (nil: any) and returns the newest such entry.
func (s *service) waitLog(name, message string, timeout time.Duration, cond func(logEntry) bool) logEntry {
	s.t.Helper()
	return waitUntil(s.t, timeout, func() (logEntry, bool) {
		for _, e := range s.logsWith(name, message) {
			if cond == nil || cond(e) {
				return e, true
			}
		}
		return logEntry{}, false
	}, func(logEntry) string {
		var msgs []string
		for _, e := range s.logs(name, "") {
			msgs = append(msgs, e.Level+" "+e.Message)
		}
		return fmt.Sprintf("mirror %s: no log entry %q after %s; log has (newest first): %s", name, message, timeout, strings.Join(msgs, " | "))
	})
}

// countLogs counts the log entries with message.
func (s *service) countLogs(name, message string) int {
	s.t.Helper()
	return len(s.logsWith(name, message))
}

func stopCluster(t *testing.T, c *localpg.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func restartCluster(t *testing.T, c *localpg.Cluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
}

// queryInt64 runs a query that returns one integer.
func queryInt64(t *testing.T, dbURL, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	queryOne(t, dbURL, &n, sql, args...)
	return n
}

// queryOne runs a query that returns one value and scans it into dest.
func queryOne(t *testing.T, dbURL string, dest any, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, sql, args...).Scan(dest); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// noDuplicates fails the test when the table has two rows with the same key.
func noDuplicates(t *testing.T, dbURL, table, key string) {
	t.Helper()
	if n := queryInt64(t, dbURL, `SELECT count(*) FROM (SELECT `+key+` FROM `+table+` GROUP BY `+key+` HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%s has %d duplicated keys (%s)", table, n, key)
	}
}

// loadTables are the tables the tolerant load writes: one with a primary
// key and one without (REPLICA IDENTITY FULL), where a change applied twice
// would show as a duplicate row.
const loadTables = `
CREATE TABLE public.items (id bigserial PRIMARY KEY, n int NOT NULL, v text);
CREATE TABLE public.events (k int, v text);
ALTER TABLE public.events REPLICA IDENTITY FULL;
INSERT INTO public.items (n, v) SELECT g, 'init' FROM generate_series(1, 2000) g;
INSERT INTO public.events SELECT g % 100, 'init' FROM generate_series(1, 1000) g;`

// loadMappings maps the load tables onto the same names.
func loadMappings() []any {
	return []any{mapping("public", "items", "public", "items"), mapping("public", "events", "public", "events")}
}

// startLoadMirror creates the load tables on src, starts a service on a new
// catalog database with the peers "src" and "dst", and a mirror called name
// of the load tables (1 s sync interval), and waits until it runs.
func startLoadMirror(t *testing.T, name, src, dst string) *service {
	t.Helper()
	return startLoadMirrorOn(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)), name, src, dst)
}

// startLoadMirrorOn is startLoadMirror with the given catalog database.
func startLoadMirrorOn(t *testing.T, catalog, name, src, dst string) *service {
	t.Helper()
	exec1(t, src, loadTables)
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": name, "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": loadMappings(),
	}, 201, nil)
	s.dumpOnFailure(name)
	s.waitStatus(name, "running", 60*time.Second)
	return s
}

// checkLoadEqual waits until both load tables are equal on both sides and
// the destination has no duplicated primary key.
func checkLoadEqual(t *testing.T, src, dst string, timeout time.Duration) {
	t.Helper()
	waitEqual(t, src, dst, "public.items", "public.items", "id, n, v", timeout)
	waitEqual(t, src, dst, "public.events", "public.events", "k, v", timeout)
	noDuplicates(t, dst, "public.items", "id")
}

// load runs small transactions on the load tables until it is stopped:
// inserts, updates and deletes on both tables. It keeps going through
// errors (the source may be down for a while) by reconnecting.
type load struct {
	committed atomic.Int64
	failed    atomic.Int64
	stop      chan struct{}
	done      chan struct{}
}

func startLoad(dbURL string) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	go l.run(dbURL)
	return l
}

func (l *load) run(dbURL string) {
	defer close(l.done)
	rng := rand.New(rand.NewPCG(7, 11))
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := func() error {
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, dbURL)
				if err != nil {
					return err
				}
				conn = c
			}
			k := rng.IntN(100)
			return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO public.items (n, v) VALUES ($1, 'load')`, k); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, `INSERT INTO public.events (k, v) VALUES ($1, 'load'), ($1, 'load')`, k); err != nil {
					return err
				}
				switch rng.IntN(3) {
				case 0:
					_, err := tx.Exec(ctx, `UPDATE public.items SET n = n + 1, v = v || 'u' WHERE id = (SELECT max(id) - $1 FROM public.items)`, k)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `UPDATE public.events SET v = v || 'u' WHERE ctid = (SELECT ctid FROM public.events WHERE k = $1 LIMIT 1)`, k)
					return err
				case 1:
					_, err := tx.Exec(ctx, `DELETE FROM public.items WHERE id = (SELECT min(id) + $1 FROM public.items)`, k)
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `DELETE FROM public.events WHERE ctid = (SELECT ctid FROM public.events WHERE k = $1 LIMIT 1)`, k)
					return err
				}
				return nil
			})
		}()
		cancel()
		if err != nil {
			l.failed.Add(1)
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		l.committed.Add(1)
		time.Sleep(5 * time.Millisecond)
	}
}

// end stops the load and returns the number of committed transactions.
func (l *load) end() int64 {
	close(l.stop)
	<-l.done
	return l.committed.Load()
}

// dumpJobsOnFailure logs the catalog's River jobs when the test fails.
func dumpJobsOnFailure(t *testing.T, catalogURL string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, catalogURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT id, kind, state, args::text, attempt, scheduled_at, coalesce(errors::text, '') FROM river_job ORDER BY id`)
		if err != nil {
			return
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var attempt int
			var kind, state, args, errs string
			var at time.Time
			if rows.Scan(&id, &kind, &state, &args, &attempt, &at, &errs) == nil {
				t.Logf("river_job %d %s %s %s attempt %d scheduled %s %s", id, kind, state, args, attempt, at.Format(time.RFC3339), errs)
			}
		}
	})
}

// getJSON is a GET that reports errors instead of failing the test, for
// goroutines other than the test's.
func getJSON(s *service, path string, out any) error {
	req, err := http.NewRequest("GET", s.baseURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: status %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// dumpOnFailure logs, when the test fails, the mirror's log entries and the
// service's own log lines other than River's (the harness shows only the
// raw tail, which River's debug lines fill).
func (s *service) dumpOnFailure(name string) {
	s.t.Cleanup(func() {
		if !s.t.Failed() {
			return
		}
		var out struct {
			Logs []logEntry `json:"logs"`
		}
		if err := getJSON(s, "/v1/mirrors/"+name+"/logs?limit=80", &out); err == nil {
			for i := len(out.Logs) - 1; i >= 0; i-- {
				e := out.Logs[i]
				s.t.Logf("mirror log %s: %s %s %v", name, e.Level, e.Message, e.Details)
			}
		}
		var lines []string
		for _, line := range strings.Split(s.output.String(), "\n") {
			// River's lines and the test's own polling requests would
			// crowd out what the service did.
			if !strings.Contains(line, "component=river") && !strings.Contains(line, `msg="http request"`) && strings.TrimSpace(line) != "" {
				lines = append(lines, line)
			}
		}
		if len(lines) > 80 {
			lines = lines[len(lines)-80:]
		}
		s.t.Logf("pgmirror log without River lines and HTTP requests:\n%s", strings.Join(lines, "\n"))
		// The goroutines of the service, to see where a run hangs.
		before := len(s.output.String())
		if s.cmd.Process != nil && s.cmd.Process.Signal(syscall.SIGQUIT) == nil {
			select {
			case <-s.done:
			case <-time.After(5 * time.Second):
			}
			if out := s.output.String(); len(out) > before {
				s.t.Logf("pgmirror goroutines (SIGQUIT):\n%s", out[before:])
			}
		}
	})
}

// waitGrown waits until counter has grown by at least more since the call:
// a load has committed that many more transactions. Tests wait for work
// done rather than for time to pass.
func waitGrown(t *testing.T, what string, counter *atomic.Int64, more int64, timeout time.Duration) {
	t.Helper()
	from := counter.Load()
	waitFor(t, fmt.Sprintf("%d more %s (from %d)", more, what, from), timeout, func() bool {
		return counter.Load()-from >= more
	})
}

// waitMore waits until the load has committed n more transactions.
func (l *load) waitMore(t *testing.T, n int64, timeout time.Duration) {
	t.Helper()
	waitGrown(t, "load transactions", &l.committed, n, timeout)
}

// waitAppliedMoves waits until the applied position recorded on the
// destination dbURL (one mirror) moves past where it stands now: the
// mirror is streaming and committing batches.
func waitAppliedMoves(t *testing.T, dbURL string, timeout time.Duration) {
	t.Helper()
	from := appliedLSN(t, dbURL)
	waitFor(t, fmt.Sprintf("the applied position to move past %s", from), timeout, func() bool {
		return appliedLSN(t, dbURL) > from
	})
}

// waitStreaming waits until the load has committed n more transactions and
// the mirror has applied a batch since: both sides are busy with the load.
func waitStreaming(t *testing.T, l *load, dst string, n int64, timeout time.Duration) {
	t.Helper()
	l.waitMore(t, n, timeout)
	waitAppliedMoves(t, dst, timeout)
}

// holdsFor checks cond again and again for d and fails the test the first
// time it does not hold: for what must stay true while nothing may happen
// (a paused mirror applies nothing), where no event marks the end.
func holdsFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
	}
}
