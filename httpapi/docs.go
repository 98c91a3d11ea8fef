package httpapi

import (
	_ "embed"
	"net/http"
)

// The API's reference page: /docs renders /openapi.json in the browser
// without loading anything from the network. Its script and style sheet are
// files of their own (/docs/docs.js, /docs/docs.css) so that the page runs
// under the same strict Content-Security-Policy as the console: nothing
// inline, nothing from another origin, no framing.
var (
	//go:embed docs.html
	docsPage []byte
	//go:embed docs.js
	docsScript []byte
	//go:embed docs.css
	docsStyle []byte
)

// docsContentSecurityPolicy lets the page load its own script and style
// sheet and fetch /openapi.json, and nothing else; no page may frame it.
const docsContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// registerDocs mounts GET /docs and the files it is made of on mux.
func registerDocs(mux *http.ServeMux) {
	mux.HandleFunc("GET /docs", serveDoc("text/html; charset=utf-8", docsPage))
	mux.HandleFunc("GET /docs/docs.js", serveDoc("text/javascript; charset=utf-8", docsScript))
	mux.HandleFunc("GET /docs/docs.css", serveDoc("text/css; charset=utf-8", docsStyle))
}

func serveDoc(contentType string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Security-Policy", docsContentSecurityPolicy)
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		// The files change with the binary: a browser asks again each time.
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	}
}
