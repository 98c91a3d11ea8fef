package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocsPageSecurity checks that /docs and the files it is made of are
// served under a strict Content-Security-Policy (no inline script or
// style, nothing from another origin, no framing) with X-Frame-Options
// DENY, and that the page holds no inline script, style or event handler
// that such a policy would block.
func TestDocsPageSecurity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	get := func(path string) (*http.Response, string) {
		resp, err := http.Get(b.server.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	resp, page := get("/docs")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))

	// The page: only scripts and style sheets of its own, nothing inline.
	require.NotContains(t, page, "<style")
	require.NotRegexp(t, `(?i)\sstyle\s*=`, page)
	require.NotRegexp(t, `(?i)\son[a-z]+\s*=`, page, "inline event handler")
	require.NotRegexp(t, `(?i)javascript:`, page)
	scripts := regexp.MustCompile(`(?i)<script([^>]*)>`).FindAllStringSubmatch(page, -1)
	require.NotEmpty(t, scripts)
	for _, s := range scripts {
		require.Regexp(t, `src="/docs/[a-z]+\.js"`, s[1], "inline script in /docs")
	}
	require.Equal(t, len(scripts), strings.Count(page, `></script>`), "a script element with content")
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(page, -1)
	require.Len(t, refs, 2, "the page loads its script and its style sheet")

	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	for _, path := range append([]string{"/docs"}, refs[0][1], refs[1][1]) {
		resp, body := get(path)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NotEmpty(t, body, path)
		if ext := filepath.Ext(path); ext != "" {
			require.Equal(t, types[ext], resp.Header.Get("Content-Type"), path)
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, directive := range []string{"frame-ancestors 'none'", "script-src 'self'", "style-src 'self'", "object-src 'none'", "base-uri 'none'"} {
			require.Contains(t, csp, directive, path)
		}
		require.NotContains(t, csp, "unsafe-inline", path)
		require.NotContains(t, csp, "unsafe-eval", path)
		require.NotContains(t, csp, "http", path, "another origin allowed")
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"), path)
		require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), path)
	}
	resp, _ = get("/docs/other.js")
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// docsRenderer runs the page's script in Node.js with a minimal document
// (the elements the script uses) and the service's real /openapi.json, and
// prints what it rendered: the title, the number of operations, how many
// the filter "mirrors" leaves visible, and whether the script failed.
const docsRenderer = `
const fs = require("fs");
const [script, specFile, query] = process.argv.slice(2);
function node(tag) {
  return { tag, attrs: {}, children: [], hidden: false, textContent: "", listeners: {},
    setAttribute(k, v) { this.attrs[k] = String(v); }, getAttribute(k) { return this.attrs[k]; },
    appendChild(c) { this.children.push(c); return c; },
    addEventListener(ev, f) { this.listeners[ev] = f; } };
}
const byId = { title: node("h1"), description: node("p"), filter: node("input"), ops: node("div") };
const all = [];
global.document = {
  getElementById: (id) => byId[id],
  createElement: (tag) => { const n = node(tag); all.push(n); return n; },
  createTextNode: (text) => ({ tag: "#text", text }),
  querySelectorAll: (sel) => all.filter((n) => n.tag === sel),
};
const spec = JSON.parse(fs.readFileSync(specFile, "utf8"));
global.fetch = (url) => Promise.resolve({ ok: url === "/openapi.json", status: url === "/openapi.json" ? 200 : 404, json: () => Promise.resolve(spec) });
process.on("unhandledRejection", (e) => { console.log(JSON.stringify({ error: String(e) })); process.exit(1); });
eval(fs.readFileSync(script, "utf8"));
setTimeout(() => {
  const details = all.filter((n) => n.tag === "details");
  byId.filter.listeners.input({ target: { value: query } });
  console.log(JSON.stringify({ title: byId.title.textContent, description: byId.description.textContent,
    operations: details.length, visible: details.filter((d) => !d.hidden).length }));
}, 50);
`

// TestDocsPageRenders runs /docs/docs.js on the service's own OpenAPI
// document: one entry per operation, the filter works, and the title is the
// document's. It needs Node.js, as the page's script is JavaScript.
func TestDocsPageRenders(t *testing.T) {
	t.Parallel()
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node on PATH to run the page's script")
	}
	b := setup(t)
	dir := t.TempDir()
	fetch := func(path, file string) []byte {
		resp, err := http.Get(b.server.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), body, 0o600))
		return body
	}
	fetch("/docs/docs.js", "docs.js")
	rawSpec := fetch("/openapi.json", "openapi.json")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "render.js"), []byte(docsRenderer), 0o600))

	var spec struct {
		Info  struct{ Title, Version string }
		Paths map[string]map[string]json.RawMessage
	}
	require.NoError(t, json.Unmarshal(rawSpec, &spec))
	operations, mirrorOps := 0, 0
	for path, item := range spec.Paths {
		for method := range item {
			if method == "get" || method == "post" || method == "put" || method == "patch" || method == "delete" {
				operations++
				if strings.Contains(path, "mirrors") {
					mirrorOps++
				}
			}
		}
	}
	cmd := exec.Command(nodeBin, filepath.Join(dir, "render.js"), filepath.Join(dir, "docs.js"), filepath.Join(dir, "openapi.json"), "mirrors")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	var got struct {
		Error              string
		Title, Description string
		Operations         int
		Visible            int
	}
	require.NoError(t, json.Unmarshal(out, &got), "%s", out)
	require.Empty(t, got.Error)
	require.Equal(t, spec.Info.Title+" "+spec.Info.Version, got.Title)
	require.NotContains(t, got.Description, "Could not load")
	require.Equal(t, operations, got.Operations, "one entry per operation")
	require.Greater(t, operations, 30)
	require.Equal(t, mirrorOps, got.Visible, "the filter leaves the operations on mirrors")
}
