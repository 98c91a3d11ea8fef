package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

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
	// GET /v1/auth/me says so, for the console's banner.
	var me struct {
		DefaultPassword bool `json:"default_password"`
	}
	s.token = oldToken
	s.mustDo("GET", "/v1/auth/me", nil, 200, &me)
	if !me.DefaultPassword {
		t.Fatal("GET /v1/auth/me: default_password false while the admin's password is the default")
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
	status, newToken := s.login("admin", "new-admin-secret")
	if status != 200 {
		t.Fatalf("login with SERVICE_ADMIN_PASSWORD: status %d", status)
	}
	s.token = newToken
	s.mustDo("GET", "/v1/auth/me", nil, 200, &me)
	if me.DefaultPassword {
		t.Fatal("GET /v1/auth/me: default_password true after SERVICE_ADMIN_PASSWORD replaced the default")
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
		{"SERVICE_TOKEN_TTL=30s", "or 0 for tokens that do not expire"},
		{"SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=yes", "use true or false"},
		{"SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=1", "use true or false"},
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

// tokenClaimsOf reads a token's claims without checking its signature.
func tokenClaimsOf(t *testing.T, token string) jwt.MapClaims {
	t.Helper()
	var claims jwt.MapClaims
	if _, _, err := jwt.NewParser().ParseUnverified(token, &claims); err != nil {
		t.Fatalf("parse token: %v", err)
	}
	return claims
}

// requireStatus sends a request with token and requires the status and,
// for errors, fragments of the error message.
func (s *service) requireStatus(token, method, path string, body any, want int, fragments ...string) {
	s.t.Helper()
	saved := s.token
	defer func() { s.token = saved }()
	s.token = token
	var raw json.RawMessage
	if got := s.do(method, path, body, &raw); got != want {
		s.t.Fatalf("%s %s: status %d, want %d: %s", method, path, got, want, raw)
	}
	var out struct {
		Error string `json:"error"`
	}
	if len(fragments) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			s.t.Fatalf("%s %s: not an error body: %s", method, path, raw)
		}
	}
	for _, f := range fragments {
		if !strings.Contains(out.Error, f) {
			s.t.Fatalf("%s %s: error %q does not contain %q", method, path, out.Error, f)
		}
	}
}

// loginRaw logs in and returns the token and the response's fields.
func (s *service) loginRaw(username, password string) (string, map[string]json.RawMessage) {
	s.t.Helper()
	saved := s.token
	defer func() { s.token = saved }()
	s.token = ""
	var out map[string]json.RawMessage
	s.mustDo("POST", "/v1/auth/login", map[string]string{"username": username, "password": password}, 200, &out)
	var token string
	if err := json.Unmarshal(out["token"], &token); err != nil || token == "" {
		s.t.Fatalf("login %s: no token in %v", username, out)
	}
	return token, out
}

// TestTokenContract runs the service as the API specification describes its
// tokens, then with the two hardening settings: by default tokens carry no
// expiry, survive restarts and a password change, and die only with the
// user or the JWT secret; with SERVICE_TOKEN_TTL they expire (tokens already
// out included) and with SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true a
// password change revokes them.
func TestTokenContract(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	const secret = "token-contract-test-secret-0123456789abcdef"
	s := startService(t, catalog, "SERVICE_JWT_SECRET="+secret)
	admin := s.token
	s.mustDo("POST", "/v1/users", map[string]string{"username": "vic", "password": "vic-password-1", "role": "viewer"}, 201, nil)

	// Defaults: no expiry in the token or the response.
	vic, out := s.loginRaw("vic", "vic-password-1")
	for _, field := range []string{"expires_at", "expires_in"} {
		if _, ok := out[field]; ok {
			t.Fatalf("login response has %s by default: %v", field, out)
		}
	}
	if _, ok := tokenClaimsOf(t, vic)["exp"]; ok {
		t.Fatalf("default token carries exp: %v", tokenClaimsOf(t, vic))
	}

	// A password change (an authed endpoint a viewer may call) leaves the
	// token valid; the new password applies to later logins.
	var changed struct {
		Message string `json:"message"`
	}
	s.token = vic
	s.mustDo("POST", "/v1/auth/change-password", map[string]string{"current_password": "vic-password-1", "new_password": "vic-password-2"}, 200, &changed)
	s.token = admin
	if !strings.Contains(changed.Message, "stay valid") {
		t.Fatalf("change-password message: %q", changed.Message)
	}
	s.requireStatus(vic, "GET", "/v1/auth/me", nil, 200)
	s.requireStatus(vic, "GET", "/v1/mirrors", nil, 200)
	if status, _ := s.login("vic", "vic-password-1"); status != 401 {
		t.Fatalf("login with the old password: status %d, want 401", status)
	}
	s.loginRaw("vic", "vic-password-2")

	// Tokens survive a restart (same secret).
	s.kill()
	s = startService(t, catalog, "SERVICE_JWT_SECRET="+secret, "SERVICE_TOKEN_TTL=0", "SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=false")
	s.requireStatus(vic, "GET", "/v1/auth/me", nil, 200)

	// Hardened: tokens expire and a password change revokes them.
	s.kill()
	s = startService(t, catalog, "SERVICE_JWT_SECRET="+secret, "SERVICE_TOKEN_TTL=1h", "SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true")
	admin = s.token
	hardened, out := s.loginRaw("vic", "vic-password-2")
	if string(out["expires_in"]) != "3600" {
		t.Fatalf("SERVICE_TOKEN_TTL=1h: expires_in %s, want 3600", out["expires_in"])
	}
	claims := tokenClaimsOf(t, hardened)
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		t.Fatalf("hardened token has no exp: %v", claims)
	}
	iat, err := claims.GetIssuedAt()
	if err != nil || iat == nil || exp.Sub(iat.Time) != time.Hour {
		t.Fatalf("hardened token: exp - iat is not 1h: %v", claims)
	}
	// The token without exp from before is younger than the lifetime: valid.
	s.requireStatus(vic, "GET", "/v1/auth/me", nil, 200)
	// Signed with the service's secret: older than the lifetime, or past its
	// exp, the token is refused as expired.
	sign := func(change func(jwt.MapClaims)) string {
		c := jwt.MapClaims{}
		for k, v := range claims {
			c[k] = v
		}
		change(c)
		token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return token
	}
	s.requireStatus(sign(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), "GET", "/v1/auth/me", nil, 401, "token expired")
	s.requireStatus(sign(func(c jwt.MapClaims) {
		delete(c, "exp")
		c["iat"] = time.Now().Add(-2 * time.Hour).Unix()
	}), "GET", "/v1/auth/me", nil, 401, "token expired")
	s.requireStatus(sign(func(c jwt.MapClaims) {}), "GET", "/v1/auth/me", nil, 200)

	var revoked struct {
		Message string `json:"message"`
		Token   string `json:"token"`
	}
	s.token = hardened
	s.mustDo("POST", "/v1/auth/change-password", map[string]string{"current_password": "vic-password-2", "new_password": "vic-password-3"}, 200, &revoked)
	s.token = admin
	if !strings.Contains(revoked.Message, "revoked") {
		t.Fatalf("change-password message with revocation: %q", revoked.Message)
	}
	for _, token := range []string{vic, hardened} {
		s.requireStatus(token, "GET", "/v1/auth/me", nil, 401, "Token revoked", "log in again")
	}
	s.requireStatus(revoked.Token, "GET", "/v1/auth/me", nil, 200)

	// A deleted user's tokens are refused.
	s.mustDo("DELETE", "/v1/users/vic", nil, 200, nil)
	s.requireStatus(revoked.Token, "GET", "/v1/auth/me", nil, 401, "no longer exists")

	// Rotating the JWT secret invalidates every token, with the defaults too.
	s.kill()
	s = startService(t, catalog, "SERVICE_JWT_SECRET="+strings.Repeat("r", 40))
	s.requireStatus(admin, "GET", "/v1/auth/me", nil, 401, "Invalid token")
	s.requireStatus(s.token, "GET", "/v1/auth/me", nil, 200)
}
