package httpapi_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/httpapi"
)

// logSink is a log destination safe for the server's goroutines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// linesWith returns the log lines containing every fragment.
func (s *logSink) linesWith(fragments ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
lines:
	for _, l := range strings.Split(s.buf.String(), "\n") {
		for _, f := range fragments {
			if !strings.Contains(l, f) {
				continue lines
			}
		}
		out = append(out, l)
	}
	return out
}

// sendWithID sends a GET with the given X-Request-Id (none when empty) and
// returns the status and the X-Request-Id of the response.
func sendWithID(t *testing.T, url, token, id string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Request-Id")
}

// TestAccessLog checks the access line of each request and the request id:
// kept when the client sends a sane one, generated otherwise, returned on
// every response (also 401 and unknown routes), and never a token or
// password in the log.
func TestAccessLog(t *testing.T) {
	t.Parallel()
	logs := &logSink{}
	b := setupWith(t, func(c *httpapi.Config) { c.Logger = slog.New(slog.NewTextHandler(logs, nil)) })

	status, id := sendWithID(t, b.server.URL+"/v1/peers?secret=hunter2", b.adminToken, "client-req.42_A")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "client-req.42_A", id, "a sane client request id is returned as is")
	lines := logs.linesWith(`msg="http request"`, "request_id=client-req.42_A")
	require.Len(t, lines, 1, "one access line per request")
	for _, f := range []string{"level=INFO", "method=GET", "path=/v1/peers", "status=200", "user=admin", "duration=", "bytes=", "remote=127.0.0.1"} {
		require.Contains(t, lines[0], f)
	}
	require.NotContains(t, lines[0], "hunter2", "the query string is not logged")

	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	status, id = sendWithID(t, b.server.URL+"/v1/peers", "", "")
	require.Equal(t, http.StatusUnauthorized, status)
	require.Regexp(t, hexID, id, "a request without an id gets a generated one")
	require.Len(t, logs.linesWith("request_id="+id, "status=401"), 1)

	status, id = sendWithID(t, b.server.URL+"/no/such/route", "", "bad id with spaces")
	require.Equal(t, http.StatusNotFound, status)
	require.Regexp(t, hexID, id, "an insane client id is replaced")
	require.Len(t, logs.linesWith("request_id="+id, "status=404", "path=/no/such/route"), 1)

	_, id = sendWithID(t, b.server.URL+"/health", "", strings.Repeat("a", 129))
	require.Regexp(t, hexID, id, "a too long client id is replaced")

	all := strings.Join(logs.linesWith(""), "\n")
	for _, secret := range []string{b.adminToken, b.viewerToken, "admin-password", "viewer-password", "Bearer", "hunter2"} {
		require.NotContains(t, all, secret)
	}
}
