package main

import (
	"strings"
	"testing"
	"time"
)

const existingRowsSource = `
CREATE TABLE public.orders (id int PRIMARY KEY, v text);
INSERT INTO public.orders SELECT g, 'src ' || g FROM generate_series(1, 100) g;
CREATE TABLE public.kept (id int PRIMARY KEY, v text);
INSERT INTO public.kept SELECT g, 'src ' || g FROM generate_series(1, 50) g;
CREATE TABLE public.added (id int PRIMARY KEY, v text);
INSERT INTO public.added SELECT g, 'src ' || g FROM generate_series(1, 20) g;`

const existingRowsDest = `
CREATE TABLE public.orders (id int PRIMARY KEY, v text);
INSERT INTO public.orders VALUES (1, 'live 1'), (1000, 'live 1000');
CREATE TABLE public.kept (id int PRIMARY KEY, v text);
INSERT INTO public.kept VALUES (1, 'old 1'), (-1, 'only on the destination');
CREATE TABLE public.added (id int PRIMARY KEY, v text);`

func mirrorRequest(name, mode string, tables ...string) map[string]any {
	var mappings []any
	for _, t := range tables {
		mappings = append(mappings, mapping("public", t, "public", t))
	}
	body := map[string]any{"name": name, "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": mappings}
	if mode != "" {
		body["existing_destination_rows"] = mode
	}
	return body
}

// tableCounters is a table's counters in GET /v1/mirrors/{name}.
type tableCounters struct {
	TableName    string `json:"table_name"`
	RowsInserted int64  `json:"rows_inserted"`
	Truncates    int64  `json:"truncates"`
}

func (s *service) tableCounters(name string) []tableCounters {
	s.t.Helper()
	var m struct {
		Tables []tableCounters `json:"tables"`
	}
	s.mustDo("GET", "/v1/mirrors/"+name, nil, 200, &m)
	return m.Tables
}

// TestExistingDestinationRows runs each way a mirror's first copy treats
// rows its destination tables already hold, on real clusters:
//   - refuse (the default): creating the mirror answers 409 naming the
//     table, and the destination keeps its rows; a table added with PUT
//     tables that gets rows after the check fails the mirror at its copy
//     with an error naming it and saying what to do, the rows intact; set
//     to truncate with PUT tables, the copy then replaces them;
//   - keep: the source's rows are upserted over the destination's (an old
//     version updated, a row only on the destination left), and CDC
//     follows; a table resync still truncates;
//   - truncate: the destination ends equal to the source; a TRUNCATE on
//     the source is applied and counted in the table's truncates.
func TestExistingDestinationRows(t *testing.T) {
	t.Parallel()
	_, src, dst, s := newEnv(t, existingRowsSource)
	exec1(t, dst, existingRowsDest)

	// refuse: the API refuses and nothing is touched.
	var refused map[string]any
	if got := s.do("POST", "/v1/mirrors", mirrorRequest("m-orders", "", "orders"), &refused); got != 409 {
		t.Fatalf("create over a table with rows: status %d, want 409: %v", got, refused)
	}
	msg, _ := refused["error"].(string)
	for _, want := range []string{"table public.orders", "already holds rows", `"truncate"`, `"keep"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("409 error %q does not say %q", msg, want)
		}
	}
	if n, _ := tableDigest(t, dst, "public.orders", "id, v"); n != 2 {
		t.Errorf("destination orders has %d rows after a refused create, want its 2", n)
	}

	// keep: upserted over the old copy, CDC follows, a resync truncates.
	s.mustDo("POST", "/v1/mirrors", mirrorRequest("m-kept", "keep", "kept"), 201, nil)
	s.dumpOnFailure("m-kept")
	s.waitStatus("m-kept", "running", 60*time.Second)
	exec1(t, src, `UPDATE public.kept SET v = 'changed' WHERE id = 2`)
	waitEqual(t, src, dst, "(SELECT * FROM public.kept WHERE id > 0) k", "(SELECT * FROM public.kept WHERE id > 0) k", "id, v", 30*time.Second)
	if n, _ := tableDigest(t, dst, "(SELECT * FROM public.kept WHERE id = -1 AND v = 'only on the destination') k", "id, v"); n != 1 {
		t.Error("keep removed the row only the destination had")
	}
	s.mustDo("POST", "/v1/mirrors/m-kept/resync/public.kept", nil, 200, nil)
	waitEqual(t, src, dst, "public.kept", "public.kept", "id, v", 60*time.Second)

	// truncate: replaced; a source TRUNCATE is applied and counted.
	s.mustDo("POST", "/v1/mirrors", mirrorRequest("m-orders", "truncate", "orders"), 201, nil)
	s.dumpOnFailure("m-orders")
	s.waitStatus("m-orders", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, v", 30*time.Second)
	exec1(t, src, `TRUNCATE public.orders; INSERT INTO public.orders VALUES (7, 'after the truncate')`)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, v", 30*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for {
		c := s.tableCounters("m-orders")
		if len(c) == 1 && c[0].Truncates == 1 && c[0].RowsInserted == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters of m-orders %+v, want 1 truncate and 1 insert", c)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// refuse in the worker: the table passes the API's check while empty,
	// and has a row when the copy starts.
	s.mustDo("POST", "/v1/mirrors/m-kept/pause", nil, 200, nil)
	s.waitStatus("m-kept", "paused", 30*time.Second)
	s.mustDo("PUT", "/v1/mirrors/m-kept/tables", map[string]any{"table_mappings": []any{
		mapping("public", "kept", "public", "kept"), mapping("public", "added", "public", "added")},
		"existing_destination_rows": "refuse"}, 200, nil)
	exec1(t, dst, `INSERT INTO public.added VALUES (1, 'live')`)
	s.mustDo("POST", "/v1/mirrors/m-kept/resume", nil, 200, nil)
	m := s.waitMirror("m-kept", "the copy of added refused", 60*time.Second, func(m fullStatus) bool { return m.Status == "error" })
	for _, want := range []string{"table public.added", "holds rows", "existing_destination_rows", "PUT /v1/mirrors/m-kept/tables"} {
		if !strings.Contains(m.ErrorMessage, want) {
			t.Errorf("error_message %q does not say %q", m.ErrorMessage, want)
		}
	}
	if n, _ := tableDigest(t, dst, "(SELECT * FROM public.added WHERE v = 'live') a", "id, v"); n != 1 {
		t.Error("the refused copy changed the destination's row")
	}
	s.mustDo("POST", "/v1/mirrors/m-kept/pause", nil, 200, nil)
	s.waitStatus("m-kept", "paused", 30*time.Second)
	s.mustDo("PUT", "/v1/mirrors/m-kept/tables", map[string]any{"table_mappings": []any{
		mapping("public", "kept", "public", "kept"), mapping("public", "added", "public", "added")},
		"existing_destination_rows": "truncate"}, 200, nil)
	s.mustDo("POST", "/v1/mirrors/m-kept/resume", nil, 200, nil)
	s.waitStatus("m-kept", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.added", "public.added", "id, v", 60*time.Second)
	waitEqual(t, src, dst, "public.kept", "public.kept", "id, v", 30*time.Second)
}
