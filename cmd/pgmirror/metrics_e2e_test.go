package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// scrape reads GET /metrics with the bearer token and parses it with
// Prometheus' text parser.
func (s *service) scrape(token string) map[string]*dto.MetricFamily {
	s.t.Helper()
	req, err := http.NewRequest("GET", s.baseURL+"/metrics", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		s.t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		s.t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// metricValue returns the value of the series of family name whose labels
// include labels, and whether there is one.
func metricValue(families map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	f := families[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics scrapes /metrics through a mirror's life: the token gates it,
// snapshot progress moves during a slow copy, the change counters match the
// rows written, the status series follow the mirror, and lag_seconds grows
// while the mirror is paused under writes and falls back after resume (in
// the scrape and in GET /v1/mirrors/{name}).
func TestMetrics(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	const total = 200000
	exec1(t, src, fmt.Sprintf(`CREATE TABLE public.big (id bigint PRIMARY KEY, pad text);
		INSERT INTO public.big SELECT g, repeat(md5(g::text), 3) FROM generate_series(1, %d) g;
		ANALYZE public.big;`, total))
	const token = "metrics-token-for-the-test"
	s := startService(t, catalog, "SERVICE_METRICS_TOKEN="+token, "SERVICE_SLOT_MONITOR_INTERVAL=1s")
	s.createPeer("src", src)
	s.createPeer("dst", dst)

	// The token gates /metrics, with a JSON error.
	resp, err := http.Get(s.baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 401 || e["error"] == "" {
		t.Errorf("GET /metrics without the token: %d %v (%v), want 401 with an error", resp.StatusCode, e, err)
	}
	resp.Body.Close()
	if _, ok := s.scrape(token)["go_goroutines"]; !ok {
		t.Error("no Go runtime series in /metrics")
	}

	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "met", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"snapshot_num_rows_per_partition": 2000, "snapshot_max_parallel_workers": 1, "snapshot_num_tables_in_parallel": 1,
		"table_mappings": []any{mapping("public", "big", "public", "big")},
	}, 201, nil)
	s.dumpOnFailure("met")

	// Snapshot progress: rows copied seen strictly between 0 and the total,
	// with the estimate.
	table := map[string]string{"mirror": "met", "table": "public.big"}
	var midway float64
	for deadline := time.Now().Add(60 * time.Second); midway == 0; time.Sleep(20 * time.Millisecond) {
		f := s.scrape(token)
		copied, ok := metricValue(f, "pgmirror_snapshot_rows_copied", table)
		if ok && copied > 0 && copied < total {
			est, _ := metricValue(f, "pgmirror_snapshot_rows_estimated", table)
			if est < total/2 || est > total*2 {
				t.Fatalf("pgmirror_snapshot_rows_estimated %v, want about %d", est, total)
			}
			midway = copied
		} else if s.mirror("met").Status == "running" {
			t.Fatal("the snapshot ended before /metrics showed it midway")
		} else if time.Now().After(deadline) {
			t.Fatal("no snapshot progress in /metrics within 60 s")
		}
	}
	s.waitStatus("met", "running", 60*time.Second)
	if _, ok := metricValue(s.scrape(token), "pgmirror_snapshot_rows_copied", table); ok {
		t.Error("pgmirror_snapshot_rows_copied still reported after the snapshot")
	}
	t.Logf("snapshot seen at %v of %d rows", midway, total)

	// CDC: the counters match the rows written.
	exec1(t, src, `INSERT INTO public.big SELECT g, 'new' FROM generate_series(300001, 300500) g`)
	exec1(t, src, `UPDATE public.big SET pad = 'upd' WHERE id BETWEEN 1 AND 120`)
	exec1(t, src, `DELETE FROM public.big WHERE id BETWEEN 121 AND 150`)
	waitEqual(t, src, dst, "public.big", "public.big", "id, pad", 60*time.Second)
	want := map[string]float64{"insert": 500, "update": 120, "delete": 30}
	waitFor(t, "the change counters to match the rows written", 20*time.Second, func() bool {
		f := s.scrape(token)
		for op, n := range want {
			if v, _ := metricValue(f, "pgmirror_changes_applied_total", map[string]string{"mirror": "met", "table": "public.big", "op": op}); v != n {
				return false
			}
		}
		return true
	})
	f := s.scrape(token)
	if n, _ := metricValue(f, "pgmirror_batch_changes", map[string]string{"mirror": "met"}); n < 1 {
		t.Error("no pgmirror_batch_changes observations")
	}
	waitFor(t, "the status series (River's leader reports them)", 30*time.Second, func() bool {
		v, ok := metricValue(s.scrape(token), "pgmirror_mirror_status", map[string]string{"mirror": "met", "status": "running"})
		return ok && v == 1
	})

	// Paused under writes: lag grows, in /metrics and in the status record.
	lagOf := func() (float64, bool) {
		return metricValue(s.scrape(token), "pgmirror_mirror_lag_seconds", map[string]string{"mirror": "met"})
	}
	s.mustDo("POST", "/v1/mirrors/met/pause", nil, 200, nil)
	exec1(t, src, `INSERT INTO public.big VALUES (400001, 'while paused')`)
	var first float64
	waitFor(t, "lag_seconds above 0 while paused under writes", 30*time.Second, func() bool {
		v, ok := lagOf()
		first = v
		return ok && v > 0
	})
	exec1(t, src, `INSERT INTO public.big VALUES (400002, 'while paused')`)
	waitFor(t, "lag_seconds growing while paused", 30*time.Second, func() bool {
		v, _ := lagOf()
		return v >= first+1
	})
	var m struct {
		LagSeconds *float64 `json:"lag_seconds"`
	}
	s.mustDo("GET", "/v1/mirrors/met", nil, 200, &m)
	if m.LagSeconds == nil || *m.LagSeconds < first {
		t.Errorf("GET mirror lag_seconds %v while paused, want >= %v", m.LagSeconds, first)
	}

	// Resumed: it catches up and the lag falls back near 0.
	s.mustDo("POST", "/v1/mirrors/met/resume", nil, 200, nil)
	waitEqual(t, src, dst, "public.big", "public.big", "id, pad", 60*time.Second)
	waitFor(t, "lag_seconds back under 2 s after resume", 60*time.Second, func() bool {
		v, ok := lagOf()
		return ok && v < 2
	})
	s.mustDo("GET", "/v1/mirrors/met", nil, 200, &m)
	if m.LagSeconds == nil || *m.LagSeconds >= 5 {
		t.Errorf("GET mirror lag_seconds %v after resume, want < 5", m.LagSeconds)
	}
	if strings.Contains(s.output.String(), token) {
		t.Error("the metrics token appears in the process log")
	}
}
