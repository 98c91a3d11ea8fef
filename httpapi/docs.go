package httpapi

import (
	_ "embed"
	"net/http"
)

// docsPage renders /openapi.json in the browser without loading anything
// from the network.
//
//go:embed docs.html
var docsPage []byte

func serveDocs(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write(docsPage)
}
