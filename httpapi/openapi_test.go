package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// schemaKeywords are the keys a schema object may have in an OpenAPI 3.1
// document (JSON Schema 2020-12 plus OpenAPI's own); "x-" extensions are
// allowed too.
var schemaKeywords = map[string]bool{
	"$schema": true, "$id": true, "$ref": true, "$defs": true, "$comment": true, "$anchor": true,
	"type": true, "enum": true, "const": true, "title": true, "description": true, "default": true,
	"examples": true, "example": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"format": true, "contentEncoding": true, "contentMediaType": true, "contentSchema": true,
	"multipleOf": true, "maximum": true, "exclusiveMaximum": true, "minimum": true, "exclusiveMinimum": true,
	"maxLength": true, "minLength": true, "pattern": true,
	"items": true, "prefixItems": true, "maxItems": true, "minItems": true, "uniqueItems": true,
	"contains": true, "maxContains": true, "minContains": true, "unevaluatedItems": true,
	"properties": true, "patternProperties": true, "additionalProperties": true, "required": true,
	"maxProperties": true, "minProperties": true, "propertyNames": true, "dependentRequired": true,
	"dependentSchemas": true, "unevaluatedProperties": true,
	"allOf": true, "anyOf": true, "oneOf": true, "not": true, "if": true, "then": true, "else": true,
	"discriminator": true, "xml": true, "externalDocs": true,
}

// TestOpenAPIDocumentLints checks the rules of Redocly's "recommended"
// ruleset that apply to this document, so that generated clients and
// linters accept it: a servers entry, a security requirement on every
// operation (an empty list on open ones), unique operation ids, a summary
// and a success response on each, path parameters that match the path,
// defined security schemes, no unused component schemas, and no keywords
// outside the OpenAPI/JSON Schema vocabulary (Huma's patternDescription).
func TestOpenAPIDocumentLints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw := b.mustDo(http.MethodGet, "/openapi.json", "", nil, http.StatusOK)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))

	var problems []string
	fail := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}

	servers, _ := doc["servers"].([]any)
	if len(servers) == 0 {
		fail("no servers entry")
	}
	for _, s := range servers {
		u, _ := s.(map[string]any)["url"].(string)
		if u == "" || strings.Contains(u, "example.com") {
			fail("server url %q is empty or an example", u)
		}
	}

	components, _ := doc["components"].(map[string]any)
	schemes, _ := components["securitySchemes"].(map[string]any)
	schemas, _ := components["schemas"].(map[string]any)

	ids := map[string]string{}
	paramRE := regexp.MustCompile(`\{([^}]+)\}`)
	paths, _ := doc["paths"].(map[string]any)
	require.NotEmpty(t, paths)
	for path, item := range paths {
		for method, v := range item.(map[string]any) {
			op, ok := v.(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(method) + " " + path
			id, _ := op["operationId"].(string)
			if id == "" {
				fail("%s: no operationId", where)
			} else if other, dup := ids[id]; dup {
				fail("%s: operationId %q is also used by %s", where, id, other)
			}
			ids[id] = where
			if s, _ := op["summary"].(string); s == "" {
				fail("%s: no summary", where)
			}
			sec, ok := op["security"].([]any)
			if !ok {
				fail("%s: no security requirement (open operations need security: [])", where)
			}
			for _, req := range sec {
				for name := range req.(map[string]any) {
					if _, ok := schemes[name]; !ok {
						fail("%s: security scheme %q is not defined", where, name)
					}
				}
			}
			responses, _ := op["responses"].(map[string]any)
			success := false
			for code := range responses {
				if strings.HasPrefix(code, "2") {
					success = true
				}
			}
			if !success {
				fail("%s: no success response", where)
			}
			declared := map[string]bool{}
			params, _ := op["parameters"].([]any)
			for _, p := range params {
				p := p.(map[string]any)
				if p["in"] == "path" {
					declared[p["name"].(string)] = true
				}
			}
			for _, m := range paramRE.FindAllStringSubmatch(path, -1) {
				if !declared[m[1]] {
					fail("%s: path parameter %q is not declared", where, m[1])
				}
				delete(declared, m[1])
			}
			for name := range declared {
				fail("%s: parameter %q is declared in path but not in the path template", where, name)
			}
		}
	}

	// Every key of every schema is a standard keyword; every component
	// schema is referenced.
	referenced := map[string]bool{}
	var walkSchema func(where string, s map[string]any)
	var walk func(where string, v any)
	walkSchema = func(where string, s map[string]any) {
		for k, v := range s {
			switch {
			case strings.HasPrefix(k, "x-"):
			case !schemaKeywords[k]:
				fail("%s: non-standard schema keyword %q", where, k)
			case k == "$ref":
				referenced[strings.TrimPrefix(v.(string), "#/components/schemas/")] = true
			case k == "properties" || k == "$defs" || k == "patternProperties" || k == "dependentSchemas":
				for name, sub := range v.(map[string]any) {
					if m, ok := sub.(map[string]any); ok {
						walkSchema(where+"."+name, m)
					}
				}
			case k == "items" || k == "not" || k == "additionalProperties" || k == "contains" || k == "if" || k == "then" || k == "else":
				if m, ok := v.(map[string]any); ok {
					walkSchema(where+"."+k, m)
				}
			case k == "allOf" || k == "anyOf" || k == "oneOf" || k == "prefixItems":
				for _, sub := range v.([]any) {
					walkSchema(where+"."+k, sub.(map[string]any))
				}
			}
		}
	}
	// walk finds the schemas outside components (parameters, bodies).
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, sub := range v {
				if k == "schema" {
					if m, ok := sub.(map[string]any); ok {
						walkSchema(where, m)
						continue
					}
				}
				walk(where+"/"+k, sub)
			}
		case []any:
			for _, sub := range v {
				walk(where, sub)
			}
		}
	}
	walk("paths", paths)
	for name, s := range schemas {
		walkSchema(name, s.(map[string]any))
	}
	for name := range schemas {
		if !referenced[name] {
			fail("component schema %s is never used", name)
		}
	}
	sort.Strings(problems)
	redoclyLint(t, raw)
	// The validation messages still describe patterns in words.
	b.requireError(http.MethodPost, "/v1/peers", b.adminToken, map[string]any{"name": "-bad", "host": "h", "port": 5432,
		"user": "u", "password": "p", "database": "d"}, http.StatusBadRequest, "letters, digits")
	require.Empty(t, problems, "the OpenAPI document breaks lint rules:\n%s", strings.Join(problems, "\n"))
}

// redoclyLint lints the document with Redocly CLI's recommended rules when
// it is installed (make test-deps puts it in .tools/redocly; REDOCLY names
// another binary) and fails on any error; warnings are logged.
func redoclyLint(t *testing.T, doc []byte) {
	t.Helper()
	bin := os.Getenv("REDOCLY")
	if bin == "" {
		bin = filepath.Join("..", ".tools", "redocly", "node_modules", ".bin", "redocly")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Logf("Redocly CLI not installed (%v): checked the Go rules only; make test-deps installs it", err)
		return
	}
	path := filepath.Join(t.TempDir(), "openapi.json")
	require.NoError(t, os.WriteFile(path, doc, 0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "lint", "--extends=recommended", path)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "redocly lint (recommended rules) failed:\n%s", out)
	t.Logf("redocly lint: %s", bytes.TrimSpace(out[max(0, len(out)-200):]))
}
