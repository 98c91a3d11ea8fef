package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
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
	deadline := time.Now().Add(timeout)
	for {
		m := s.full(name)
		if cond(m) {
			return m
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("mirror %s: timed out after %s waiting for %s; last status %q error_count %d error %q lag %v wal %v",
				name, timeout, what, m.Status, m.ErrorCount, m.ErrorMessage, deref(m.SlotLagBytes), derefS(m.SlotWALStatus))
		}
		time.Sleep(250 * time.Millisecond)
	}
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
	deadline := time.Now().Add(timeout)
	for {
		for _, e := range s.logsWith(name, message) {
			if cond == nil || cond(e) {
				return e
			}
		}
		if time.Now().After(deadline) {
			var msgs []string
			for _, e := range s.logs(name, "") {
				msgs = append(msgs, e.Level+" "+e.Message)
			}
			s.t.Fatalf("mirror %s: no log entry %q after %s; log has (newest first): %s", name, message, timeout, strings.Join(msgs, " | "))
		}
		time.Sleep(250 * time.Millisecond)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// noDuplicates fails the test when the table has two rows with the same key.
func noDuplicates(t *testing.T, dbURL, table, key string) {
	t.Helper()
	if n := queryInt64(t, dbURL, `SELECT count(*) FROM (SELECT `+key+` FROM `+table+` GROUP BY `+key+` HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%s has %d duplicated keys (%s)", table, n, key)
	}
}
