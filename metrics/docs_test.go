package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// seriesNames returns the names of every series pgmirror's registry can
// report (from the collectors' descriptions; nothing is collected).
func seriesNames(t *testing.T) []string {
	t.Helper()
	r := New()
	cols := []prometheus.Collector{r.changes, r.batchSeconds, r.batchChanges, r.errors, r.retries, r.snapCopied,
		r.snapEstimated, r.schemaChanges, newCatalogCollector(nil, "", nil)}
	ch := make(chan *prometheus.Desc, 100)
	for _, c := range cols {
		c.Describe(ch)
	}
	close(ch)
	re := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	names := []string{"pgmirror_river_job_outcomes_total"} // registered by WatchRiver
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the name of %s", d)
		}
		names = append(names, m[1])
	}
	return names
}

// referenced returns the pgmirror series named in text, without the
// histogram suffixes.
func referenced(text string) []string {
	var out []string
	for _, n := range regexp.MustCompile(`pgmirror_[a-z_]+`).FindAllString(text, -1) {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && strings.HasSuffix(base, "_seconds") {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

// TestMonitoringExamples: the example alert rules and Grafana dashboard in
// docs/monitoring parse, and every pgmirror series they use exists.
func TestMonitoringExamples(t *testing.T) {
	names := seriesNames(t)
	check := func(file, text string) {
		t.Helper()
		refs := referenced(text)
		if len(refs) == 0 {
			t.Fatalf("%s uses no pgmirror series", file)
		}
		for _, n := range refs {
			if !slices.Contains(names, n) {
				t.Errorf("%s uses %s, which pgmirror does not export (it has %v)", file, n, names)
			}
		}
	}

	raw, err := os.ReadFile("../docs/monitoring/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) < 6 {
		t.Fatalf("grafana-dashboard.json: title %q, %d panels", dash.Title, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			check("grafana-dashboard.json panel "+p.Title, q.Expr)
		}
	}

	raw, err = os.ReadFile("../docs/monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			check("alerts.yml "+r.Alert, r.Expr)
		}
	}
	for _, want := range []string{"PgmirrorMirrorInError", "PgmirrorMirrorLagging", "PgmirrorSlotLosingWAL", "PgmirrorSnapshotStalled", "PgmirrorChangesLost"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("alerts.yml has no %s rule", want)
		}
	}
}
