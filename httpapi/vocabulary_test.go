package httpapi_test

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

func strs[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// The OpenAPI document's enums are the catalog's vocabularies: every enum
// in it is one of db's lists (or the verification method, which is not a
// catalog value), the fields that carry a vocabulary list it whole, and a
// request with a value outside one is refused with the values named.
func TestOpenAPIEnumsAreTheVocabulary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw := b.mustDo(http.MethodGet, "/openapi.json", "", nil, http.StatusOK)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(raw, &doc))

	lists := map[string][]string{
		"mirror status": strs(db.MirrorStatuses), "desired state": strs(db.DesiredStates),
		"table status": strs(db.TableStatuses), "existing rows": strs(db.ExistingRowsValues),
		"schema changes": strs(db.SchemaChangesModes), "verification state": strs(db.VerificationStates),
		"cut-over state": strs(db.CutoverStates), "step state": strs(db.StepStates),
		"lost reason": strs(db.LostReasons), "log level": strs(db.LogLevels), "user role": strs(db.UserRoles),
		"ssl mode": strs(db.SSLModes), "audit result": strs(db.AuditResults),
		"audit target type": strs(db.AuditTargetTypes), "peer role": strs(db.PeerRoles),
	}
	// found: where each enum of the document stands, by its values.
	found := map[string][]string{}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if e, ok := x["enum"].([]any); ok {
				var values []string
				for _, s := range e {
					values = append(values, s.(string))
				}
				key := strings.Join(values, ",")
				found[key] = append(found[key], where)
			}
			for k, sub := range x {
				walk(where+"/"+k, sub)
			}
		case []any:
			for _, sub := range x {
				walk(where, sub)
			}
		}
	}
	walk("", doc)
	known := map[string]string{"key_ranges,multiset,": "verification method",
		"name,-name,status,-status,lag,-lag,created,-created": "mirror list order"}
	for name, l := range lists {
		known[strings.Join(l, ",")] = name
	}
	var unknown []string
	for key, where := range found {
		if _, ok := known[key]; !ok {
			unknown = append(unknown, key+" at "+strings.Join(where, ", "))
		}
	}
	sort.Strings(unknown)
	require.Empty(t, unknown, "enums that are not a vocabulary list")
	for _, name := range []string{"mirror status", "table status", "schema changes", "existing rows", "cut-over state",
		"step state", "verification state", "lost reason", "log level", "user role", "ssl mode", "audit result",
		"audit target type", "peer role", "desired state"} {
		require.NotEmpty(t, found[strings.Join(lists[name], ",")], "no field lists the %s values", name)
	}
	// The query parameters take theirs too.
	require.Contains(t, strings.Join(found[strings.Join(lists["log level"], ",")], " "), "parameters")
	require.Contains(t, strings.Join(found[strings.Join(lists["audit target type"], ",")], " "), "parameters")

	// Validation uses the same lists.
	out := b.mustDo(http.MethodGet, "/v1/audit?target_type=table", b.adminToken, nil, http.StatusBadRequest)
	require.Contains(t, string(out), "user, peer, mirror")
}
