package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// login logs in and returns the status and the token.
func (s *service) login(username, password string) (int, string) {
	s.t.Helper()
	var out struct {
		Token     string `json:"token"`
		ExpiresIn int64  `json:"expires_in"`
	}
	status := s.do("POST", "/v1/auth/login", map[string]string{"username": username, "password": password}, &out)
	return status, out.Token
}

// startPlain starts the service on catalog with env and waits for /health
// only (it does not log in).
func startPlain(t *testing.T, catalog string, env ...string) *service {
	t.Helper()
	s := launchService(t, catalog, env...)
	s.waitHealthy()
	return s
}

// requireOutput requires a line of the service's output to contain every
// fragment.
func (s *service) requireOutput(fragments ...string) {
	s.t.Helper()
	for _, line := range strings.Split(s.output.String(), "\n") {
		all := true
		for _, f := range fragments {
			all = all && strings.Contains(line, f)
		}
		if all {
			return
		}
	}
	s.t.Fatalf("no output line contains %q:\n%s", fragments, tail(s.output.String(), 4000))
}

func TestDefaultAdminPassword(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))

	// First start without SERVICE_ADMIN_PASSWORD: the default works, with a loud warning.
	s := startPlain(t, catalog, "SERVICE_ADMIN_PASSWORD=")
	s.requireOutput("level=WARN", "default password", "admin")
	status, oldToken := s.login("admin", "admin")
	if status != 200 {
		t.Fatalf("default admin login: status %d", status)
	}
	s.kill()

	// The warning comes back at every start while the password is the default.
	s = startPlain(t, catalog, "SERVICE_ADMIN_PASSWORD=")
	s.requireOutput("level=WARN", "still has the default password")
	s.kill()

	// Restart with SERVICE_ADMIN_PASSWORD: it replaces the default; the
	// default and every token issued under it stop working.
	s = startPlain(t, catalog, "SERVICE_ADMIN_PASSWORD=new-admin-secret")
	s.requireOutput("level=WARN", "was replaced by SERVICE_ADMIN_PASSWORD")
	if strings.Contains(s.output.String(), "new-admin-secret") {
		t.Fatalf("the admin password appears in the log:\n%s", s.output.String())
	}
	if status, _ := s.login("admin", "admin"); status != 401 {
		t.Fatalf("old default password after the change: status %d, want 401", status)
	}
	s.token = oldToken
	if status := s.do("GET", "/v1/auth/me", nil, nil); status != 401 {
		t.Fatalf("token issued under the default password: status %d, want 401", status)
	}
	if status, _ := s.login("admin", "new-admin-secret"); status != 200 {
		t.Fatalf("login with SERVICE_ADMIN_PASSWORD: status %d", status)
	}
	s.kill()

	// A later different SERVICE_ADMIN_PASSWORD does not overwrite a password
	// that is not the default: the stored one is kept, with a warning.
	s = startPlain(t, catalog, "SERVICE_ADMIN_PASSWORD=yet-another-secret", "SERVICE_TOKEN_TTL=2h")
	s.requireOutput("level=WARN", "stored password was kept")
	if status, _ := s.login("admin", "yet-another-secret"); status != 401 {
		t.Fatalf("login with the new variable: status %d, want 401", status)
	}
	var out struct {
		ExpiresIn int64 `json:"expires_in"`
	}
	s.token = ""
	s.mustDo("POST", "/v1/auth/login", map[string]string{"username": "admin", "password": "new-admin-secret"}, 200, &out)
	if out.ExpiresIn != 7200 {
		t.Fatalf("SERVICE_TOKEN_TTL=2h: expires_in %d, want 7200", out.ExpiresIn)
	}
	if strings.Contains(s.output.String(), "still has the default password") {
		t.Fatalf("default password warning without the default password:\n%s", s.output.String())
	}
}

func TestAuthSettingsRejected(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ setting, want string }{
		{"SERVICE_TOKEN_TTL=30s", "from 1m to 30d"},
		{"SERVICE_TOKEN_TTL=31d", "from 1m to 30d"},
		{"SERVICE_TOKEN_TTL=forever", "duration"},
		{"SERVICE_TOKEN_TTL=-1h", "duration"},
		{"SERVICE_LOGIN_MAX_FAILURES=0", "whole number"},
		{"SERVICE_LOGIN_MAX_FAILURES_PER_ADDRESS=many", "whole number"},
		{"SERVICE_LOGIN_FAILURE_WINDOW=2d", "from 1s to 1d"},
		{"SERVICE_TRUSTED_PROXIES=10.0.0.0/8,proxy.local", "neither an IP address nor a network"},
	} {
		cmd := exec.Command(binary, "serve")
		cmd.Env = append(os.Environ(), c.setting, "SERVICE_DATABASE_URL=postgres://127.0.0.1:1/none")
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("%s: the service started", c.setting)
		}
		name, _, _ := strings.Cut(c.setting, "=")
		if !strings.Contains(string(out), name) || !strings.Contains(string(out), c.want) {
			t.Fatalf("%s: the error does not name the variable and say %q: %s", c.setting, c.want, out)
		}
	}
}
