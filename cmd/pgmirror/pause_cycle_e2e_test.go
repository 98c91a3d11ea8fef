package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestPauseChangeResumeCycles pauses a mirror under a write load, changes
// its schema_changes setting and resumes it, many times over. Every resume
// must start a run that follows the setting just stored: rows written after
// the resume reach the destination, and a table created in the mapped schema
// afterwards pauses the mirror under stop and is left out with a WARN under
// warn. A resume that starts no run, or a run that keeps the setting it
// started with, fails here.
func TestPauseChangeResumeCycles(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, `
CREATE SCHEMA app;
CREATE TABLE app.a (id bigserial PRIMARY KEY, n int NOT NULL, v text);`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "pc", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1, "schema_changes": "warn",
		"table_mappings": []any{mapping("app", "*", "app", "*")},
	}, 201, nil)
	s.dumpOnFailure("pc")
	dumpJobsOnFailure(t, catalog)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var lines []string
		for _, line := range strings.Split(s.output.String(), "\n") {
			if strings.Contains(line, "component=river") && !strings.Contains(line, "migration") {
				lines = append(lines, line)
			}
		}
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		t.Logf("River lines:\n%s", strings.Join(lines, "\n"))
		var status, desired string
		queryOne(t, catalog, &status, `SELECT status FROM mirrors WHERE name = 'pc'`)
		queryOne(t, catalog, &desired, `SELECT desired_state FROM mirrors WHERE name = 'pc'`)
		t.Logf("catalog: status %s, desired_state %s", status, desired)
		var entries string
		queryOne(t, catalog, &entries, `SELECT string_agg(id || ' ' || created_at || ' ' || level || ' ' || message || ' ' || coalesce(details->>'table', ''), E'\n' ORDER BY id) FROM mirror_logs`)
		t.Logf("catalog mirror_logs:\n%s", entries)
	})
	s.waitStatus("pc", "running", 60*time.Second)

	// A steady write load on app.a for the whole test, bounded in time.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var written atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, src)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for ctx.Err() == nil {
			if _, err := conn.Exec(ctx, `INSERT INTO app.a (n, v) SELECT g, 'load' FROM generate_series(1, 20) g`); err == nil {
				written.Add(20)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// replicating checks that a run streams: a marker row written now
	// reaches the destination.
	replicating := func(step string, marker int) {
		t.Helper()
		exec1(t, src, `INSERT INTO app.a (n, v) VALUES ($1, 'marker')`, marker)
		waitFor(t, fmt.Sprintf("%s: marker %d on the destination", step, marker), 45*time.Second, func() bool {
			return queryInt64(t, dst, `SELECT count(*) FROM app.a WHERE v = 'marker' AND n = $1`, marker) == 1
		})
	}
	hasEntry := func(message, level, table string) bool {
		for _, e := range s.logs("pc", "") {
			if e.Message == message && e.Level == level && e.Details["table"] == table {
				return true
			}
		}
		return false
	}

	const cycles = 6
	for i := 1; i <= cycles; i++ {
		table := fmt.Sprintf("app.t%d", i)
		// Odd cycles create the table under warn, so that the run started
		// by the resume under stop meets it as it prepares; even cycles
		// create it after that resume, so that the streaming run meets it.
		createdFirst := i%2 == 1
		if createdFirst {
			exec1(t, src, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, table))
			waitFor(t, fmt.Sprintf("cycle %d: Schema change not applied for %s", i, table), 60*time.Second, func() bool {
				return hasEntry("Schema change not applied", "WARN", table)
			})
		}

		// pause, switch to stop, resume: the new run pauses before the
		// table is added.
		s.mustDo("POST", "/v1/mirrors/pc/pause", nil, 200, nil)
		s.waitStatus("pc", "paused", 60*time.Second)
		s.mustDo("PATCH", "/v1/mirrors/pc", map[string]any{"schema_changes": "stop"}, 200, nil)
		s.mustDo("POST", "/v1/mirrors/pc/resume", nil, 200, nil)
		if !createdFirst {
			replicating(fmt.Sprintf("cycle %d after resume under stop", i), 2*i)
			exec1(t, src, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY)`, table))
		}
		waitFor(t, fmt.Sprintf("cycle %d: Mirror paused before a schema change for %s", i, table), 60*time.Second, func() bool {
			return hasEntry("Mirror paused before a schema change", "WARN", table)
		})
		s.waitStatus("pc", "paused", 60*time.Second)

		// switch to warn, resume: the table stays out and the stream goes on.
		s.mustDo("PATCH", "/v1/mirrors/pc", map[string]any{"schema_changes": "warn"}, 200, nil)
		s.mustDo("POST", "/v1/mirrors/pc/resume", nil, 200, nil)
		replicating(fmt.Sprintf("cycle %d after resume under warn", i), 2*i+1)
		if m := s.mirror("pc"); m.Status != "running" {
			t.Fatalf("cycle %d: status %s after resume under warn, want running", i, m.Status)
		}
		if tableStatusOf(s.mirror("pc"), table) != "" {
			t.Fatalf("cycle %d: %s was added to the mirror under warn or stop", i, table)
		}
		// Left out, the table would pause the next run under stop again:
		// it goes before the next cycle.
		exec1(t, src, fmt.Sprintf(`DROP TABLE %s`, table))
	}
	cancel()
	wg.Wait()
	waitEqual(t, src, dst, "app.a", "app.a", "id, n, v", 60*time.Second)
	if written.Load() == 0 {
		t.Fatal("the write load wrote nothing")
	}
}
