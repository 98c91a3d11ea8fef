package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestExistingRowsRefusedByWorker: the worker checks the destination
// tables again before the initial snapshot. The destination database does
// not exist yet when the mirror is created (so the API cannot check it);
// it appears with a table that holds rows, and the worker fails the mirror
// with an error naming the table instead of truncating it, the row intact.
// Emptied, the table is copied at the next retry.
func TestExistingRowsRefusedByWorker(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, `CREATE TABLE public.o (id int PRIMARY KEY, v text);
		INSERT INTO public.o SELECT g, 'src' FROM generate_series(1, 10) g`)
	later := dst[:strings.LastIndex(dst, "/")+1] + "later_" + fmt.Sprint(time.Now().UnixNano())
	s.createPeer("later", later)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "w", "source_peer": "src", "destination_peer": "later",
		"cdc_sync_interval_seconds": 1, "table_mappings": []any{mapping("public", "o", "public", "o")}}, 201, nil)
	s.dumpOnFailure("w")
	s.waitMirror("w", "a failure to reach the missing database", 30*time.Second, func(m fullStatus) bool { return m.Status == "error" })

	exec1(t, dst, "CREATE DATABASE "+later[strings.LastIndex(later, "/")+1:])
	t.Cleanup(func() {
		pgtest.Exec(t, dst, "DROP DATABASE IF EXISTS "+later[strings.LastIndex(later, "/")+1:]+" WITH (FORCE)")
	})
	exec1(t, later, `CREATE TABLE public.o (id int PRIMARY KEY, v text); INSERT INTO public.o VALUES (1, 'live')`)
	s.mustDo("POST", "/v1/mirrors/w/retry", nil, 200, nil)
	m := s.waitMirror("w", "the snapshot refused", 60*time.Second, func(m fullStatus) bool {
		return m.Status == "error" && strings.Contains(m.ErrorMessage, "public.o")
	})
	for _, want := range []string{"table public.o already holds rows", "existing_destination_rows", "Empty the tables"} {
		if !strings.Contains(m.ErrorMessage, want) {
			t.Errorf("error_message %q does not say %q", m.ErrorMessage, want)
		}
	}
	if n, _ := tableDigest(t, later, "(SELECT * FROM public.o WHERE v = 'live') o", "id, v"); n != 1 {
		t.Error("the refused snapshot changed the destination's row")
	}

	exec1(t, later, `DELETE FROM public.o`)
	s.mustDo("POST", "/v1/mirrors/w/retry", nil, 200, nil)
	s.waitStatus("w", "running", 60*time.Second)
	waitEqual(t, src, later, "public.o", "public.o", "id, v", 30*time.Second)
}
