package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/httpapi"
)

// loginFrom logs in from the loopback address ip (127.0.0.1, 127.0.0.2, ...)
// and returns the status, the Retry-After header and the error message ("" on
// success).
func (b *bundle) loginFrom(ip, username, password string) (int, string, string) {
	b.t.Helper()
	return b.loginVia(ip, "", username, password)
}

// loginVia is loginFrom with an X-Forwarded-For header (unless "").
func (b *bundle) loginVia(ip, forwardedFor, username, password string) (int, string, string) {
	b.t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	defer client.CloseIdleConnections()
	body, err := json.Marshal(map[string]string{"username": username, "password": password})
	require.NoError(b.t, err)
	req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/auth/login", bytes.NewReader(body))
	require.NoError(b.t, err)
	req.Header.Set("Content-Type", "application/json")
	if forwardedFor != "" {
		req.Header.Set("X-Forwarded-For", forwardedFor)
	}
	resp, err := client.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	if resp.StatusCode == http.StatusOK {
		return resp.StatusCode, resp.Header.Get("Retry-After"), ""
	}
	requireErrorShape(b.t, raw)
	var e struct{ Error string }
	require.NoError(b.t, json.Unmarshal(raw, &e))
	return resp.StatusCode, resp.Header.Get("Retry-After"), e.Error
}

// requireThrottled requires a 429 whose Retry-After is within the window
// and whose message contains fragment.
func (b *bundle) requireThrottled(ip, username, password, fragment string, window time.Duration) {
	b.t.Helper()
	status, retryAfter, msg := b.loginFrom(ip, username, password)
	require.Equal(b.t, http.StatusTooManyRequests, status, "login of %s from %s: %s", username, ip, msg)
	require.Contains(b.t, msg, fragment)
	require.Contains(b.t, msg, "try again in")
	secs, err := strconv.Atoi(retryAfter)
	require.NoError(b.t, err, "Retry-After %q is whole seconds", retryAfter)
	require.Positive(b.t, secs)
	require.LessOrEqual(b.t, secs, int(window.Seconds()))
}

func TestLoginThrottling(t *testing.T) {
	t.Parallel()
	const window = time.Hour
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.Login = httpapi.LoginLimits{UserFailures: 3, AddressFailures: 6, Window: window}
	})
	ok := func(ip, username, password string) {
		t.Helper()
		status, _, msg := b.loginFrom(ip, username, password)
		require.Equal(t, http.StatusOK, status, "login of %s from %s: %s", username, ip, msg)
	}
	bad := func(ip, username string) {
		t.Helper()
		status, _, msg := b.loginFrom(ip, username, "wrong-password")
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, "Invalid credentials", msg)
	}

	// Per user name: three failures, then even the right password is refused,
	// from any address; other users are unaffected.
	for range 3 {
		bad("127.0.0.1", "viewer")
	}
	b.requireThrottled("127.0.0.1", "viewer", "viewer-password", `user "viewer"`, window)
	b.requireThrottled("127.0.0.2", "viewer", "viewer-password", `user "viewer"`, window)
	ok("127.0.0.1", "admin", "admin-password")
	// change-password checks the current password under the same limit.
	b.requireError(http.MethodPost, "/v1/auth/change-password", b.viewerToken,
		map[string]any{"current_password": "viewer-password", "new_password": "another"}, http.StatusTooManyRequests, `user "viewer"`)

	// Per client address: failures for any user names (unknown ones too) add
	// up; the address is refused for every user, other addresses are not.
	for _, name := range []string{"ghost-1", "ghost-2", "admin"} {
		bad("127.0.0.3", name)
		bad("127.0.0.3", name+"-again")
	}
	b.requireThrottled("127.0.0.3", "ghost-new", "whatever", "your address 127.0.0.3", window)
	b.requireThrottled("127.0.0.3", "admin", "admin-password", "your address 127.0.0.3", window)
	// X-Forwarded-For is not believed unless the peer is a trusted proxy.
	status, _, msg := b.loginVia("127.0.0.3", "198.51.100.9", "admin", "admin-password")
	require.Equal(t, http.StatusTooManyRequests, status, msg)
	ok("127.0.0.4", "admin", "admin-password")
	// admin failed once from 127.0.0.3 but succeeded since: below its limit.
	ok("127.0.0.1", "admin", "admin-password")

	// Refused attempts are not failures: they do not extend the lockout. Once
	// the window has passed (here: the failures are moved an hour back), the
	// right password works again, from the throttled address too.
	b.exec(`UPDATE login_failures SET failed_at = failed_at - $1 * interval '1 second'`, window.Seconds()+1)
	ok("127.0.0.3", "viewer", "viewer-password")
	ok("127.0.0.2", "viewer", "viewer-password")

	// The failures are in the catalog, where every replica sees them.
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM login_failures WHERE failed_at > now() - interval '1 minute'`).Scan(&n))
	require.Zero(t, n)
	bad("127.0.0.1", "viewer")
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM login_failures WHERE failed_at > now() - interval '1 minute'`).Scan(&n))
	require.Equal(t, 2, n, "one row for the user name, one for the address")
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM login_failures`).Scan(&n))
	require.Equal(t, 2, n, "failures older than the window are deleted")
}

func TestLoginConcurrencyIsBounded(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.Login = httpapi.LoginLimits{Concurrency: 1, Wait: 50 * time.Millisecond}
	})
	const n = 16
	var wg sync.WaitGroup
	statuses := make([]int, n)
	retryAfters := make([]string, n)
	msgs := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], retryAfters[i], msgs[i] = b.loginFrom("127.0.0.1", "admin", "admin-password")
		}()
	}
	wg.Wait()
	var accepted, refused int
	for i, status := range statuses {
		switch status {
		case http.StatusOK:
			accepted++
		case http.StatusTooManyRequests:
			refused++
			require.Equal(t, "1", retryAfters[i])
			require.Contains(t, msgs[i], "Too many logins at once")
		default:
			t.Fatalf("login %d: status %d: %s", i, status, msgs[i])
		}
	}
	require.Positive(t, accepted, "the first password check always gets the slot")
	require.Positive(t, refused, "%d parallel password checks cannot all run within 50 ms on one slot", n)
}

func TestLoginThrottlingBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.Login = httpapi.LoginLimits{UserFailures: 100, AddressFailures: 2, Window: time.Hour,
			TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	})
	// Two clients behind the proxy at 127.0.0.1 are counted apart.
	for range 2 {
		status, _, _ := b.loginVia("127.0.0.1", "198.51.100.1", "admin", "wrong")
		require.Equal(t, http.StatusUnauthorized, status)
	}
	status, _, msg := b.loginVia("127.0.0.1", "198.51.100.1", "admin", "admin-password")
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Contains(t, msg, "your address 198.51.100.1")
	// A client cannot escape by prepending a forged hop: the proxy appends
	// the real one, and that is the one counted.
	status, _, _ = b.loginVia("127.0.0.1", "203.0.113.5, 198.51.100.1", "admin", "admin-password")
	require.Equal(t, http.StatusTooManyRequests, status)
	status, _, msg = b.loginVia("127.0.0.1", "198.51.100.2", "admin", "admin-password")
	require.Equal(t, http.StatusOK, status, msg)
}

func TestParallelGuessesStopAtTheLimit(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.Login = httpapi.LoginLimits{UserFailures: 3, Concurrency: 1, Wait: time.Minute, Window: time.Hour}
	})
	// Twelve wrong guesses at once all pass the first check; the second one,
	// made while holding the only password check slot, stops all but three.
	const n = 12
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _, _ = b.loginFrom("127.0.0.1", "viewer", "wrong-guess")
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	require.Equal(t, map[int]int{http.StatusUnauthorized: 3, http.StatusTooManyRequests: n - 3}, count)
	var failures int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM login_failures WHERE kind = 'user' AND subject = 'viewer'`).Scan(&failures))
	require.Equal(t, 3, failures)
}

func TestLoginThrottlingWindowPasses(t *testing.T) {
	t.Parallel()
	const window = 4 * time.Second
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.Login = httpapi.LoginLimits{UserFailures: 1, Window: window}
	})
	status, _, _ := b.loginFrom("127.0.0.1", "viewer", "wrong-password")
	require.Equal(t, http.StatusUnauthorized, status)
	status, retryAfter, msg := b.loginFrom("127.0.0.1", "viewer", "viewer-password")
	require.Equal(t, http.StatusTooManyRequests, status, msg)
	secs, err := strconv.Atoi(retryAfter)
	require.NoError(t, err)
	require.LessOrEqual(t, secs, int(window.Seconds()))
	// Waiting as long as Retry-After says is enough, in real time.
	time.Sleep(time.Duration(secs) * time.Second)
	status, _, msg = b.loginFrom("127.0.0.1", "viewer", "viewer-password")
	require.Equal(t, http.StatusOK, status, msg)
}
