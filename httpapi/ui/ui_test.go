package ui_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pgmirror/pgmirror/httpapi/ui"
)

// TestServesEmbeddedFiles checks each console file's type and headers, and
// that anything else under /ui is a JSON 404.
func TestServesEmbeddedFiles(t *testing.T) {
	mux := http.NewServeMux()
	ui.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for path, want := range map[string]struct{ ctype, contains string }{
		"/ui":         {"text/html; charset=utf-8", `<script src="/ui/app.js"`},
		"/ui/app.js":  {"text/javascript; charset=utf-8", "sessionStorage"},
		"/ui/app.css": {"text/css; charset=utf-8", "status-running"},
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != want.ctype || !strings.Contains(string(body), want.contains) {
			t.Errorf("GET %s: %d %q, body has %q: %v", path, resp.StatusCode, resp.Header.Get("Content-Type"), want.contains, strings.Contains(string(body), want.contains))
		}
		if got := resp.Header.Get("Content-Security-Policy"); got != ui.ContentSecurityPolicy || !strings.HasPrefix(got, "default-src 'self'") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, got)
		}
		if resp.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: X-Frame-Options %q", path, resp.Header.Get("X-Frame-Options"))
		}
	}

	for _, path := range []string{"/ui/missing.js", "/ui/ui.go", "/ui/static"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error string `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 404 || err != nil || !strings.Contains(body.Error, "/ui") {
			t.Errorf("GET %s: %d, error %q (%v); want a JSON 404", path, resp.StatusCode, body.Error, err)
		}
	}
}

// TestNoMarkupFromData keeps the script from putting API data into the page
// as markup: it builds every node with DOM calls and textContent.
func TestNoMarkupFromData(t *testing.T) {
	mux := http.NewServeMux()
	ui.Register(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/app.js", nil))
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "localStorage"} {
		if strings.Contains(rec.Body.String(), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}
