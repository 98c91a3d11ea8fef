// Package ui is pgmirror's web console: a static page, one script and one
// style sheet, embedded in the binary and served at /ui. The script logs in
// through the JSON API (POST /v1/auth/login), keeps the token in the
// browser's sessionStorage and sends it as a bearer token on every call;
// the console uses no cookies, so there is no cross-site request to forge.
package ui

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"path"
)

//go:embed static
var static embed.FS

// ContentSecurityPolicy is sent with every console answer: the page loads
// only its own script, style sheet and API, nothing inline and nothing from
// another origin, and may not be framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// contentTypes are the types of the files the console is made of; a file of
// another kind is not served.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// Register mounts the console on mux: GET /ui is the page, GET /ui/{file}
// its script and style sheet.
func Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { serveFile(w, "index.html") })
	mux.HandleFunc("GET /ui/{file}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "index.html" {
			http.Redirect(w, r, "/ui", http.StatusMovedPermanently)
			return
		}
		serveFile(w, name)
	})
}

func serveFile(w http.ResponseWriter, name string) {
	ctype, ok := contentTypes[path.Ext(name)]
	var body []byte
	var err error
	if ok {
		body, err = static.ReadFile("static/" + name)
	}
	if !ok || err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		b, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("No console file /ui/%s: open /ui for the web console", name)})
		_, _ = w.Write(b)
		return
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	// The files change with the binary: a browser asks again each time.
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(body)
}
