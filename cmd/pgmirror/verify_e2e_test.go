package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

type verifyTable struct {
	Table           string   `json:"table"`
	Method          string   `json:"method"`
	RowsSource      int64    `json:"rows_source"`
	RowsDestination int64    `json:"rows_destination"`
	Chunks          int      `json:"chunks"`
	ChunksDiffering int      `json:"chunks_differing"`
	RowsDiffering   int64    `json:"rows_differing"`
	Missing         []string `json:"missing"`
	Extra           []string `json:"extra"`
	Different       []string `json:"different"`
	Skipped         string   `json:"skipped"`
}

type verifyResult struct {
	ID            int64         `json:"id"`
	State         string        `json:"state"`
	LSN           *string       `json:"lsn"`
	Error         *string       `json:"error"`
	RowsDiffering *int64        `json:"rows_differing"`
	Tables        []verifyTable `json:"tables"`
}

// runVerify starts a verification of the mirror and waits until it ends.
func (s *service) runVerify(t *testing.T, name string, body any) verifyResult {
	t.Helper()
	var v verifyResult
	s.mustDo("POST", "/v1/mirrors/"+name+"/verify", body, 202, &v)
	require.Equal(t, "running", v.State)
	return s.waitVerify(t, name, v.ID)
}

func (s *service) waitVerify(t *testing.T, name string, id int64) verifyResult {
	t.Helper()
	return waitUntil(t, 90*time.Second, func() (verifyResult, bool) {
		var v verifyResult
		s.mustDo("GET", fmt.Sprintf("/v1/mirrors/%s/verifications/%d", name, id), nil, 200, &v)
		return v, v.State != "running"
	}, func(v verifyResult) string { return fmt.Sprintf("verification %d still running: %+v", id, v) })
}

func byName(v verifyResult) map[string]verifyTable {
	out := map[string]verifyTable{}
	for _, t := range v.Tables {
		out[t.Table] = t
	}
	return out
}

// Through the API, while a write load runs: repeated verifications find
// the mirror exact; direct changes on the destination are reported with
// their keys (and rows, for the table without a key); the log has the
// entries; cancel and a verification whose replica died end with a reason.
func TestVerifyMirror(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	s := startLoadMirrorOn(t, catalog, "ver", src, dst)
	l := startLoad(src)
	l.waitMore(t, 50, 30*time.Second)
	for i := range 3 {
		v := s.runVerify(t, "ver", nil)
		require.Equal(t, "done", v.State, "run %d: %+v", i, v)
		require.NotNil(t, v.LSN)
		require.Len(t, v.Tables, 2)
		for _, tb := range v.Tables {
			require.Empty(t, tb.Skipped)
			require.Zero(t, tb.RowsDiffering, "run %d, false difference in %+v", i, tb)
			require.Zero(t, tb.ChunksDiffering, "run %d: %+v", i, tb)
			require.Equal(t, tb.RowsSource, tb.RowsDestination)
			require.Positive(t, tb.RowsSource)
		}
		require.Equal(t, int64(0), *v.RowsDiffering)
	}
	l.end()
	checkLoadEqual(t, src, dst, 60*time.Second)

	changed := queryInt64(t, dst, `SELECT min(id) FROM public.items`)
	deleted := queryInt64(t, dst, `SELECT max(id) FROM public.items`)
	exec1(t, dst, fmt.Sprintf(`UPDATE public.items SET v = 'changed' WHERE id = %d;
		DELETE FROM public.items WHERE id = %d;`, changed, deleted)+`
		INSERT INTO public.items (id, n, v) VALUES (999999, 1, 'extra');
		INSERT INTO public.events VALUES (-1, 'extra')`)
	v := s.runVerify(t, "ver", map[string]any{"tables": []string{"public.items", "public.events"}})
	require.Equal(t, "done", v.State, "%+v", v)
	items, events := byName(v)["public.items"], byName(v)["public.events"]
	require.Equal(t, []string{fmt.Sprintf("(id)=('%d')", changed)}, items.Different)
	require.Equal(t, []string{fmt.Sprintf("(id)=('%d')", deleted)}, items.Missing)
	require.Equal(t, []string{"(id)=('999999')"}, items.Extra)
	require.Equal(t, int64(3), items.RowsDiffering)
	require.Equal(t, "multiset", events.Method)
	require.Equal(t, []string{"(-1,extra)"}, events.Extra)
	require.Equal(t, int64(4), *v.RowsDiffering)
	done := s.waitLog("ver", "Verification completed", 10*time.Second, func(e logEntry) bool { return e.Level == "WARN" })
	require.NotNil(t, done)
	require.NotEmpty(t, s.logsWith("ver", "Verification started"))
	require.NotEmpty(t, s.logsWith("ver", "Verification table compared"))

	// Repair: refused while a table without a key differs; once that is
	// fixed by hand, the keyed table's differing ranges are copied again
	// beside running CDC and the repair's own comparison finds it equal.
	require.Equal(t, 409, s.do("POST", fmt.Sprintf("/v1/mirrors/ver/verifications/%d/repair", v.ID), nil, nil))
	exec1(t, dst, `DELETE FROM public.events WHERE k = -1`)
	v = s.runVerify(t, "ver", map[string]any{"tables": []string{"public.items"}})
	require.Equal(t, int64(3), *v.RowsDiffering)
	l = startLoad(src)
	var repair verifyResult
	s.mustDo("POST", fmt.Sprintf("/v1/mirrors/ver/verifications/%d/repair", v.ID), nil, 202, &repair)
	repaired := s.waitVerify(t, "ver", repair.ID)
	require.Equal(t, "done", repaired.State, "%+v %s", repaired, derefS(repaired.Error))
	require.Equal(t, int64(0), *repaired.RowsDiffering, "%+v", repaired)
	require.NotEmpty(t, s.logsWith("ver", "Verification repair applied"))
	l.end()
	checkLoadEqual(t, src, dst, 60*time.Second)
	require.Equal(t, 409, s.do("POST", fmt.Sprintf("/v1/mirrors/ver/verifications/%d/repair", repair.ID), nil, nil))

	// Bad requests.
	require.Equal(t, 400, s.do("POST", "/v1/mirrors/ver/verify", map[string]any{"tables": []string{"public.nope"}}, nil))
	require.Equal(t, 404, s.do("POST", "/v1/mirrors/nope/verify", nil, nil))
	require.Equal(t, 404, s.do("GET", "/v1/mirrors/ver/verifications/999999", nil, nil))

	// Cancel: a running verification ends cancelled; cancelling again is 409.
	var started verifyResult
	s.mustDo("POST", "/v1/mirrors/ver/verify", nil, 202, &started)
	var cancelled verifyResult
	s.mustDo("DELETE", fmt.Sprintf("/v1/mirrors/ver/verifications/%d", started.ID), nil, 200, &cancelled)
	require.Equal(t, "cancelled", cancelled.State)
	require.Equal(t, 409, s.do("DELETE", fmt.Sprintf("/v1/mirrors/ver/verifications/%d", started.ID), nil, nil))
	require.Equal(t, "cancelled", s.waitVerify(t, "ver", started.ID).State)

	// A verification whose job went silent (its replica died) is marked
	// failed with the reason, never left running.
	var id int64
	queryOne(t, catalog, &id, `INSERT INTO verifications (mirror_id, updated_at) SELECT id, now() - interval '2 minutes' FROM mirrors WHERE name = 'ver' RETURNING id`)
	stale := s.waitVerify(t, "ver", id)
	require.Equal(t, "failed", stale.State)
	require.Contains(t, *stale.Error, "replica running this verification stopped")

	// A paused mirror cannot be verified.
	s.mustDo("POST", "/v1/mirrors/ver/pause", nil, 200, nil)
	s.waitStatus("ver", "paused", 30*time.Second)
	require.Equal(t, 409, s.do("POST", "/v1/mirrors/ver/verify", nil, nil))
}

// A cut-over compares checksums at the cut-over position (by default for
// tables up to the size limit) and refuses to complete when a row differs
// although the row counts agree; with verify false it compares counts only.
func TestCutoverVerifiesChecksums(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	s := startLoadMirrorOn(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)), "cut", src, dst)
	checkLoadEqual(t, src, dst, 60*time.Second)
	exec1(t, dst, `UPDATE public.items SET v = 'changed' WHERE id = 7`)
	var failed struct {
		Error string `json:"error"`
	}
	require.Equal(t, 409, s.do("POST", "/v1/mirrors/cut/cutover", map[string]any{"quiet_seconds": 1}, &failed))
	require.Contains(t, failed.Error, "checksums differ")
	require.Contains(t, failed.Error, "(id)=('7')")
	require.Equal(t, "running", s.mirror("cut").Status)

	var done struct {
		Status  string `json:"status"`
		Cutover struct {
			Steps []struct {
				Name string `json:"name"`
			} `json:"steps"`
		} `json:"cutover"`
	}
	s.mustDo("POST", "/v1/mirrors/cut/cutover", map[string]any{"quiet_seconds": 1, "verify": false}, 200, &done)
	require.Equal(t, "completed", done.Status)
	for _, step := range done.Cutover.Steps {
		require.NotEqual(t, "verify_checksums", step.Name)
	}
}

// verify_interval starts verifications on its own; the latest result is in
// GET mirror and in /metrics, where a difference shows.
func TestVerifySchedule(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	exec1(t, src, loadTables)
	s := startService(t, catalog, "SERVICE_VERIFY_SCHEDULE_INTERVAL=1s", "SERVICE_METRICS_TOKEN=metrics-token-for-tests")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "sched", "source_peer": "src", "destination_peer": "dst",
		"cdc_sync_interval_seconds": 1, "table_mappings": loadMappings()}, 201, nil)
	s.dumpOnFailure("sched")
	s.waitStatus("sched", "running", 60*time.Second)
	require.Equal(t, 400, s.do("PUT", "/v1/mirrors/sched/verify-interval", map[string]any{"verify_interval_seconds": 30}, nil))
	s.mustDo("PUT", "/v1/mirrors/sched/verify-interval", map[string]any{"verify_interval_seconds": 3600}, 200, nil)

	type mirrorView struct {
		Verification struct {
			VerifyIntervalSeconds int `json:"verify_interval_seconds"`
			Last                  *struct {
				ID            int64  `json:"id"`
				LSN           string `json:"lsn"`
				RowsDiffering int64  `json:"rows_differing"`
			} `json:"last"`
		} `json:"verification"`
	}
	var m mirrorView
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		s.mustDo("GET", "/v1/mirrors/sched", nil, 200, &m)
		if m.Verification.Last != nil || time.Now().After(deadline) {
			break
		}
	}
	require.Equal(t, 3600, m.Verification.VerifyIntervalSeconds)
	require.NotNil(t, m.Verification.Last, "no scheduled verification within 60 s")
	require.Zero(t, m.Verification.Last.RowsDiffering)
	var list []struct {
		RequestedBy string `json:"requested_by"`
	}
	s.mustDo("GET", "/v1/mirrors/sched/verifications", nil, 200, &list)
	require.Len(t, list, 1, "one verification per interval")
	require.Equal(t, "schedule", list[0].RequestedBy)

	exec1(t, dst, `DELETE FROM public.items WHERE id = (SELECT min(id) FROM public.items)`)
	v := s.runVerify(t, "sched", nil)
	require.Equal(t, int64(1), *v.RowsDiffering)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got, ok := metricValue(s.scrape("metrics-token-for-tests"), "pgmirror_mirror_verify_rows_differing", map[string]string{"mirror": "sched"})
		if ok && got == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "pgmirror_mirror_verify_rows_differing = %v (%v), want 1", got, ok)
	}
	at, ok := metricValue(s.scrape("metrics-token-for-tests"), "pgmirror_mirror_verified_timestamp_seconds", map[string]string{"mirror": "sched"})
	require.True(t, ok)
	require.InDelta(t, float64(time.Now().Unix()), at, 120)
	_, ok = metricValue(s.scrape("metrics-token-for-tests"), "pgmirror_mirror_verified_lsn_bytes", map[string]string{"mirror": "sched"})
	require.True(t, ok)
	s.mustDo("PUT", "/v1/mirrors/sched/verify-interval", map[string]any{"verify_interval_seconds": 0}, 200, nil)
}

// A verification whose pgmirror process is killed (kill -9) either
// completes after the restart or is marked failed with the reason: it is
// never left running.
func TestVerifySurvivesRestart(t *testing.T) {
	t.Parallel()
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	exec1(t, src, `CREATE TABLE public.wide (id bigint PRIMARY KEY, pad text);
		INSERT INTO public.wide SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 300000) g`)
	s := startService(t, catalog)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "vrs", "source_peer": "src", "destination_peer": "dst",
		"cdc_sync_interval_seconds": 1, "table_mappings": []any{mapping("public", "wide", "public", "wide")}}, 201, nil)
	s.waitStatus("vrs", "running", 120*time.Second)
	var v verifyResult
	s.mustDo("POST", "/v1/mirrors/vrs/verify", nil, 202, &v)
	// Kill the process while the verification runs (its log says it started).
	s.waitLog("vrs", "Verification started", 30*time.Second, nil)
	s.kill()

	s2 := startService(t, catalog)
	s2.dumpOnFailure("vrs")
	end := s2.waitVerify(t, "vrs", v.ID)
	switch end.State {
	case "done":
		require.Equal(t, int64(0), *end.RowsDiffering)
	case "failed":
		require.Contains(t, *end.Error, "replica running this verification stopped")
	default:
		t.Fatalf("verification ended %s after the restart", end.State)
	}
	// A new verification works on the restarted service.
	again := s2.runVerify(t, "vrs", nil)
	require.Equal(t, "done", again.State, "%+v", again)
}
