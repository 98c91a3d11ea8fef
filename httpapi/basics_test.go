package httpapi_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthOpenAPIAndDocs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var health map[string]string
	b.mustDecode(http.MethodGet, "/health", "", nil, http.StatusOK, &health)
	require.Equal(t, map[string]string{"status": "ok"}, health)

	raw := b.mustDo(http.MethodGet, "/openapi.json", "", nil, http.StatusOK)
	var spec struct {
		Paths      map[string]map[string]struct{ Responses map[string]any }
		Components struct {
			Schemas         map[string]struct{ Properties map[string]any }
			SecuritySchemes map[string]any
		}
	}
	require.NoError(t, json.Unmarshal(raw, &spec))
	require.Contains(t, spec.Paths, "/v1/mirrors/{name}/resync/{table}")
	require.Contains(t, spec.Components.SecuritySchemes, "bearer")
	errSchema, ok := spec.Components.Schemas["ApiError"]
	require.True(t, ok, "error schema missing: %v", spec.Components.Schemas)
	require.Len(t, errSchema.Properties, 1)
	require.Contains(t, errSchema.Properties, "error")
	for path, ops := range spec.Paths {
		for method, op := range ops {
			require.NotContains(t, op.Responses, "422", "%s %s documents 422", method, path)
		}
	}
	require.Contains(t, spec.Paths["/v1/peers"]["post"].Responses, "400")
	require.NotContains(t, string(raw), "$schema")

	status, page := b.do(http.MethodGet, "/docs", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(page), `<script src="/docs/docs.js"></script>`)
	require.NotContains(t, string(page), "http://")
	require.NotContains(t, string(page), "https://")
	status, script := b.do(http.MethodGet, "/docs/docs.js", "", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(script), `fetch("/openapi.json")`)
	require.NotContains(t, string(script), "http://")
	require.NotContains(t, string(script), "https://")
}

func TestRoutingErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.requireError(http.MethodGet, "/v1/nothing", b.adminToken, nil, http.StatusNotFound, "/v1/nothing")
	b.requireError(http.MethodGet, "/", "", nil, http.StatusNotFound)
	msg := b.requireError(http.MethodPatch, "/v1/peers", b.adminToken, nil, http.StatusMethodNotAllowed, "PATCH")
	require.Contains(t, msg, "GET")

	b.requireError(http.MethodPost, "/v1/auth/login", "", `{"username": "admin", "password": `, http.StatusBadRequest, "Malformed JSON")
	b.requireError(http.MethodPost, "/v1/auth/login", "", nil, http.StatusBadRequest, "body is required")
	huge := `{"username": "admin", "password": "` + strings.Repeat("x", 1<<20+10) + `"}`
	b.requireError(http.MethodPost, "/v1/auth/login", "", huge, http.StatusRequestEntityTooLarge, "4 KiB")
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, `[1,2]`, http.StatusBadRequest)
}

// TestResponseHeadersAndOddRequests checks the headers every answer gets
// (X-Content-Type-Options: nosniff; Cache-Control: no-store where a token
// is in the body) and that a path with empty, '.' or '..' segments and
// oversized headers get JSON errors, never a redirect or plain text.
func TestResponseHeadersAndOddRequests(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct {
		method, path, token string
		body                any
		want                int
	}{
		{http.MethodGet, "/health", "", nil, http.StatusOK},
		{http.MethodGet, "/v1/users", b.adminToken, nil, http.StatusOK},
		{http.MethodGet, "/v1/users", "", nil, http.StatusUnauthorized},
		{http.MethodGet, "/nothing", "", nil, http.StatusNotFound},
		{http.MethodGet, "/docs", "", nil, http.StatusOK},
	} {
		status, header, _ := b.doHeaders(c.method, c.path, c.token, c.body)
		require.Equal(t, c.want, status, c.path)
		require.Equal(t, "nosniff", header.Get("X-Content-Type-Options"), c.path)
		if c.path == "/docs" {
			// The page changes with the binary: asked again, never stored with a token.
			require.Equal(t, "no-cache", header.Get("Cache-Control"), c.path)
			continue
		}
		require.Empty(t, header.Get("Cache-Control"), c.path)
	}
	status, header, _ := b.doHeaders(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "viewer", "password": "viewer-password"})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "no-store", header.Get("Cache-Control"))
	token := b.login("viewer", "viewer-password")
	status, header, _ = b.doHeaders(http.MethodPost, "/v1/auth/change-password", token,
		map[string]any{"current_password": "viewer-password", "new_password": "viewer-password"})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "no-store", header.Get("Cache-Control"))

	addr := strings.TrimPrefix(b.server.URL, "http://")
	raw := func(request string) (*http.Response, string) {
		conn, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer conn.Close()
		_, err = io.WriteString(conn, request)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	for _, p := range []string{"//v1/users", "/v1/./users", "/v1/peers/../users", "/v1//users", "/v1/users/"} {
		resp, body := raw("GET " + p + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + b.adminToken + "\r\nConnection: close\r\n\r\n")
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s: %s", p, body)
		require.Empty(t, resp.Header.Get("Location"), p)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"), p)
		requireErrorShape(t, []byte(body), p)
		require.Contains(t, body, "/v1/users)", p)
	}
	// A user name with an escaped slash and dots is still reachable.
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "a/../", "password": "pw-123456", "role": "viewer"}, http.StatusCreated)
	b.mustDo(http.MethodDelete, "/v1/users/"+url.PathEscape("a/../"), b.adminToken, nil, http.StatusOK)
	resp, body := raw("GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\nConnection: close\r\n\r\n")
	require.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode, body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	requireErrorShape(t, []byte(body))
	require.Contains(t, body, "64 KiB")
}
