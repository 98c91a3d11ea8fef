package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/pgtest"
)

// composeFile is the part of deploy/compose.yaml the test reads.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Volumes     []string          `yaml:"volumes"`
		Build       struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
	} `yaml:"services"`
}

// composeValue resolves the compose interpolations ${VAR:-default} and
// ${VAR:?message} in v with values from vars (else the default, else "").
func composeValue(v string, vars map[string]string) string {
	return regexp.MustCompile(`\$\{([A-Z_]+)(?::[-?]([^}]*))?\}`).ReplaceAllStringFunc(v, func(m string) string {
		parts := regexp.MustCompile(`\$\{([A-Z_]+)(:([-?])([^}]*))?\}`).FindStringSubmatch(m)
		if val, ok := vars[parts[1]]; ok {
			return val
		}
		if parts[3] == "-" {
			return parts[4]
		}
		return ""
	})
}

// TestDeployFiles checks the container files without Docker (no registry
// here, see deploy/README.md): the compose file has the catalog, a logical
// source, a destination, pgmirror built from the Dockerfile and Prometheus
// scraping /metrics; pgmirror's settings there are documented, accepted, and
// serve against a real catalog; the Dockerfile builds a versioned static
// binary into a non-root image with a health check that works.
func TestDeployFiles(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../deploy/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	for _, name := range []string{"catalog", "source", "destination", "pgmirror", "prometheus"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("deploy/compose.yaml has no %s service", name)
		}
	}
	if !slices.Contains(c.Services["source"].Command, "wal_level=logical") {
		t.Errorf("the source service does not run with wal_level=logical: %v", c.Services["source"].Command)
	}
	svc := c.Services["pgmirror"]
	if svc.Build.Context != ".." || svc.Build.Dockerfile != "Dockerfile" {
		t.Errorf("pgmirror is not built from the repository's Dockerfile: %+v", svc.Build)
	}
	if !slices.Contains(svc.Ports, "8112:8112") {
		t.Errorf("pgmirror ports %v, want 8112:8112", svc.Ports)
	}
	docs, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"PGMIRROR_ENCRYPTION_KEY": testEncryptionKey, "PGMIRROR_ADMIN_PASSWORD": testAdminPassword}
	env := map[string]string{}
	for k, v := range svc.Environment {
		if !strings.Contains(string(docs), "`"+k+"`") {
			t.Errorf("deploy/compose.yaml sets %s, which docs/configuration.md does not document", k)
		}
		env[k] = composeValue(v, vars)
	}
	for _, must := range []string{"SERVICE_DATABASE_URL", "SERVICE_ENCRYPTION_KEY", "SERVICE_ADMIN_PASSWORD"} {
		if env[must] == "" {
			t.Errorf("deploy/compose.yaml does not set %s for pgmirror", must)
		}
	}
	if _, err := loadConfig(func(k string) string { return env[k] }); err != nil {
		t.Errorf("pgmirror rejects the compose settings: %v", err)
	}

	raw, err = os.ReadFile("../../deploy/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	var prom struct {
		ScrapeConfigs []struct {
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(raw, &prom); err != nil {
		t.Fatalf("deploy/prometheus.yml: %v", err)
	}
	if len(prom.ScrapeConfigs) == 0 || prom.ScrapeConfigs[0].MetricsPath != "/metrics" ||
		len(prom.ScrapeConfigs[0].StaticConfigs) == 0 || !slices.Contains(prom.ScrapeConfigs[0].StaticConfigs[0].Targets, "pgmirror:8112") {
		t.Errorf("deploy/prometheus.yml does not scrape pgmirror:8112/metrics: %+v", prom)
	}

	raw, err = os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(raw)
	for _, want := range []string{"CGO_ENABLED=0", "-X main.version=${VERSION}", "USER nonroot", "EXPOSE 8112",
		`HEALTHCHECK`, `"healthcheck"`, `ENTRYPOINT ["/usr/local/bin/pgmirror"]`} {
		if !strings.Contains(dockerfile, want) {
			t.Errorf("Dockerfile lacks %s", want)
		}
	}
	if n := strings.Count(dockerfile, "\nFROM "); n != 2 {
		t.Errorf("Dockerfile has %d stages, want a build stage and a runtime stage", n)
	}

	// The binary serves with the compose settings (the catalog URL pointed at
	// a real test catalog), and its health check tells it from a dead port.
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	var extra []string
	for k, v := range env {
		if k != "SERVICE_DATABASE_URL" && k != "SERVICE_PORT" {
			extra = append(extra, k+"="+v)
		}
	}
	s := startService(t, catalog, extra...)
	port := strings.TrimPrefix(s.baseURL, "http://127.0.0.1:")
	check := exec.Command(binary, "healthcheck")
	check.Env = append(os.Environ(), "SERVICE_PORT="+port)
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "healthy") {
		t.Errorf("pgmirror healthcheck against a live service: %v %s", err, out)
	}
	dead, err := localpg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	check = exec.Command(binary, "healthcheck")
	check.Env = append(os.Environ(), "SERVICE_PORT="+strconv.Itoa(dead))
	if out, err := check.CombinedOutput(); err == nil {
		t.Errorf("pgmirror healthcheck succeeded against a port nobody listens on: %s", out)
	}
}
