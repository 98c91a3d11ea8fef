package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// lockedBuffer is a log destination safe for the server's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestPanicBecomesJSON500 serves handlers that panic through the API's root
// handler: before anything is written the client gets a JSON 500 and the log
// one line with the panic and its stack; after the response started, the
// connection is aborted rather than a truncated body passed off as whole.
func TestPanicBecomesJSON500(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom: unhashable item") })
	mux.HandleFunc("GET /half", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"partial":`))
		panic("half written")
	})
	srv := httptest.NewServer(&root{mux: mux, logger: slog.New(slog.NewTextHandler(logs, nil))})
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/boom")
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body map[string]string
	require.NoError(t, json.Unmarshal(raw, &body), "%s", raw)
	require.Contains(t, body["error"], "Internal server error")
	require.NotContains(t, body["error"], "boom", "the panic value stays in the log")

	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(l, "msg=\"http request\"") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, 1, "one log line per panic: %s", logs.String())
	require.Contains(t, lines[0], "panic while serving a request")
	require.Contains(t, lines[0], "boom: unhashable item")
	require.Contains(t, lines[0], "path=/boom")
	require.Contains(t, lines[0], "recover_internal_test.go", "the stack is logged")

	// The status line may or may not have reached the client; either way
	// the response must end in an error.
	resp, err = http.Get(srv.URL + "/half")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	require.Error(t, err, "a response cut short by a panic must not look complete")
	require.Contains(t, logs.String(), "half written")
}

// TestPanicCarriesRequestID: the JSON 500 of a panic returns the request id,
// and both the panic line and the access line (status 500) carry it.
func TestPanicCarriesRequestID(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom") })
	srv := httptest.NewServer(&root{mux: mux, logger: withRequestIDs(slog.New(slog.NewTextHandler(logs, nil)))})
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/boom", nil)
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "panic-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Equal(t, "panic-1", resp.Header.Get("X-Request-Id"))

	out := logs.String()
	var panicLine, accessLine string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, "panic while serving a request"):
			panicLine = l
		case strings.Contains(l, `msg="http request"`):
			accessLine = l
		}
	}
	require.Contains(t, panicLine, "request_id=panic-1", out)
	require.Contains(t, accessLine, "request_id=panic-1", out)
	require.Contains(t, accessLine, "status=500", out)
}
