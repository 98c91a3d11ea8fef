package httpapi_test

import (
	"encoding/json"
	"net/http"
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
	require.Contains(t, string(page), `fetch("/openapi.json")`)
	require.NotContains(t, string(page), "http://")
	require.NotContains(t, string(page), "https://")
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
