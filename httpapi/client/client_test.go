package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/httpapi"
	"github.com/pgmirror/pgmirror/httpapi/client"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

const adminPassword = "client-test-admin-password"

// serve starts the API on a new catalog database and returns its URL.
func serve(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	require.NoError(t, db.Migrate(ctx, pool, logger))
	store := db.New(pool, pgtest.Keyring(t))
	require.NoError(t, store.EnsureAdmin(ctx, "admin", adminPassword))
	secret, err := store.JWTSecret(ctx)
	require.NoError(t, err)
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	h, err := httpapi.New(httpapi.Config{Store: store, River: rc, JWTSecret: secret, Logger: logger, Version: "test"})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func openAPI(t *testing.T, base string) map[string]any {
	t.Helper()
	resp, err := http.Get(base + "/openapi.json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var doc map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	return doc
}

// TestClientCoversEveryOperation fails when the service has an operation
// the client lacks, or the client one the service lacks, or when they
// disagree on an operation's method, path or query parameters.
func TestClientCoversEveryOperation(t *testing.T) {
	t.Parallel()
	doc := openAPI(t, serve(t))
	var server, mine []string
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			if op, ok := op.(map[string]any); ok {
				var query []string
				params, _ := op["parameters"].([]any)
				for _, p := range params {
					if p := p.(map[string]any); p["in"] == "query" {
						query = append(query, p["name"].(string))
					}
				}
				server = append(server, op["operationId"].(string)+" "+strings.ToUpper(method)+" "+path+" query="+strings.Join(query, ","))
			}
		}
	}
	for _, op := range client.Operations {
		mine = append(mine, op.ID+" "+op.Method+" "+op.Path+" query="+strings.Join(op.Query, ","))
	}
	sort.Strings(server)
	sort.Strings(mine)
	require.Equal(t, server, mine, "client.Operations and the OpenAPI document differ")
}

// schemaTypes maps every schema of the OpenAPI document to the client type
// for it.
var schemaTypes = map[string]any{
	"ApiError": struct {
		Error string `json:"error"`
	}{},
	"AuditEntryBody":           client.AuditEntry{},
	"AuditOutputBody":          client.AuditPage{},
	"ChangePasswordInputBody":  client.ChangePasswordRequest{},
	"ChangePasswordOutputBody": client.ChangePasswordResponse{},
	"CutoverOptions":           client.CutoverOptions{},
	"CutoverOutputBody":        client.CutoverResponse{},
	"CutoverRecord":            client.CutoverRecord{},
	"CutoverRequest":           client.CutoverRequest{},
	"CutoverStep":              client.CutoverStep{},
	"DeletedOutputBody":        client.Deleted{},
	"HealthOutputBody":         client.Health{},
	"HistoryOutputBody":        client.History{},
	"HistorySample":            client.HistorySample{},
	"LogEntry":                 client.LogEntry{},
	"LoginInputBody":           client.LoginRequest{},
	"LoginOutputBody":          client.LoginResponse{},
	"LogsOutputBody":           client.LogPage{},
	"MeOutputBody":             client.Me{},
	"MessageOutputBody":        client.Message{},
	"MirrorConfig":             client.MirrorConfig{},
	"MirrorCreateBody":         client.MirrorCreate{},
	"MirrorStatus":             client.MirrorStatus{},
	"MirrorSummary":            client.MirrorSummary{},
	"MirrorPatchInputBody":     client.MirrorUpdate{},
	"PeerBody":                 client.Peer{},
	"PeerCreateInputBody":      client.PeerCreate{},
	"PeerTestOutputBody":       client.PeerTest{},
	"PeerUpdateInputBody":      client.PeerUpdate{},
	"ReadyOutputBody":          client.Ready{},
	"SequenceRef":              client.SequenceRef{},
	"StatusMessageOutputBody":  client.StatusMessage{},
	"TableMapping":             client.TableMapping{},
	"TableMessageOutputBody":   client.TableMessage{},
	"TableRef":                 client.TableRef{},
	"TableStatus":              client.TableStatus{},
	"TablesPutInputBody":       client.TablesPut{},
	"UserBody":                 client.User{},
	"UserCreateInputBody":      client.UserCreate{},
	"UserCreateOutputBody":     client.UserCreated{},
	"Verification":             client.Verification{},
	"VerificationTable":        client.VerificationTable{},
	"VerificationLatest":       client.VerificationLatest{},
	"MirrorVerification":       client.MirrorVerification{},
	"LostChanges":              client.LostChanges{},
	"TableLostChanges":         client.TableLostChanges{},
	"PeerWarning":              client.PeerWarning{},
	"VerifyInputBody":          client.VerifyRequest{},
	"VerifyIntervalInputBody":  client.VerifyInterval{},
	"VerifyIntervalOutputBody": client.VerifyIntervalResult{},
}

// jsonFields returns the JSON names of a struct's fields (embedded structs
// flattened, as encoding/json does) with their Go types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// kindOf is the JSON type a Go type encodes to.
func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return "string"
	case t == reflect.TypeFor[json.RawMessage](), t.Kind() == reflect.Interface:
		return "any"
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Slice:
		return "array"
	default:
		return "object"
	}
}

// TestClientTypesMatchSchemas fails when a schema of the OpenAPI document
// has no client type, or when a type's fields differ from its schema's
// properties in name or JSON type.
func TestClientTypesMatchSchemas(t *testing.T) {
	t.Parallel()
	doc := openAPI(t, serve(t))
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var problems []string
	for name, s := range schemas {
		v, ok := schemaTypes[name]
		if !ok {
			problems = append(problems, "schema "+name+" has no client type (add one and list it in schemaTypes)")
			continue
		}
		props, _ := s.(map[string]any)["properties"].(map[string]any)
		fields := jsonFields(reflect.TypeOf(v))
		for prop, ps := range props {
			ft, ok := fields[prop]
			if !ok {
				problems = append(problems, name+"."+prop+": missing in "+reflect.TypeOf(v).String())
				continue
			}
			want := kindOf(ft)
			var types []string
			switch tv := ps.(map[string]any)["type"].(type) {
			case string:
				types = []string{tv}
			case []any:
				for _, x := range tv {
					types = append(types, x.(string))
				}
			}
			if len(types) > 0 && want != "any" && !contains(types, want) && !(want == "integer" && contains(types, "number")) {
				problems = append(problems, name+"."+prop+": schema type "+strings.Join(types, "|")+", client field encodes as "+want)
			}
		}
		for f := range fields {
			if _, ok := props[f]; !ok {
				problems = append(problems, name+"."+f+": the client has a field the schema lacks")
			}
		}
	}
	for name := range schemaTypes {
		if _, ok := schemas[name]; !ok {
			problems = append(problems, "schemaTypes lists "+name+", which the document no longer has")
		}
	}
	sort.Strings(problems)
	require.Empty(t, problems, "client types and OpenAPI schemas differ:\n%s", strings.Join(problems, "\n"))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestClientAgainstServer runs the client's calls against the real API:
// login, users, peers (with a connection test against a real database),
// errors as *APIError, and connection failures.
func TestClientAgainstServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := serve(t)
	c := client.New(base, "")

	h, err := c.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, "ok", h.Status)

	_, err = c.Me(ctx)
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)
	require.NotEmpty(t, apiErr.Message)

	_, err = c.Login(ctx, client.LoginRequest{Username: "admin", Password: "wrong"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusUnauthorized, apiErr.Status)

	login, err := c.Login(ctx, client.LoginRequest{Username: "admin", Password: adminPassword})
	require.NoError(t, err)
	require.Equal(t, "admin", login.Role)
	c.Token = login.Token
	me, err := c.Me(ctx)
	require.NoError(t, err)
	require.Equal(t, "admin", me.Username)

	created, err := c.CreateUser(ctx, client.UserCreate{Username: "viewer1", Password: "viewer-password", Role: "viewer"})
	require.NoError(t, err)
	require.Equal(t, "viewer1", created.Username)
	users, err := c.ListUsers(ctx)
	require.NoError(t, err)
	require.Len(t, users, 2)

	// A peer on a real database, tested for real.
	dbURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	pgtest.Exec(t, dbURL, `CREATE TABLE items (id int PRIMARY KEY)`)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	port, _ := strconv.Atoi(u.Port())
	pw, _ := u.User.Password()
	var raw []byte
	peer, err := c.CreatePeer(client.CaptureBody(ctx, &raw), client.PeerCreate{Name: "src", Host: u.Hostname(), Port: port,
		User: u.User.Username(), Password: pw, Database: strings.TrimPrefix(u.Path, "/"), SSLMode: "disable"})
	require.NoError(t, err)
	require.Equal(t, port, peer.Port)
	require.Contains(t, string(raw), `"name":"src"`)
	_, err = c.CreatePeer(ctx, client.PeerCreate{Name: "src", Host: "h", Port: 1, User: "u", Password: "p", Database: "d"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusConflict, apiErr.Status)
	test, err := c.TestPeer(ctx, "src")
	require.NoError(t, err)
	require.True(t, test.Success, test.Error)
	require.NotEmpty(t, test.Version)
	tables, err := c.ListPeerTables(ctx, "src")
	require.NoError(t, err)
	require.Contains(t, tables, client.TableRef{Schema: "public", TableName: "items"})
	newHost := "127.0.0.1"
	updated, err := c.UpdatePeer(ctx, "src", client.PeerUpdate{Host: &newHost})
	require.NoError(t, err)
	require.Equal(t, newHost, updated.Host)
	peers, err := c.ListPeers(ctx)
	require.NoError(t, err)
	require.Len(t, peers, 1)

	_, err = c.GetMirror(ctx, "nope")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.Status)
	// Path parameters are escaped.
	_, err = c.ResyncTable(ctx, "a/b", "public.x y")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusNotFound, apiErr.Status)

	audit, err := c.AuditLog(ctx, client.AuditQuery{Action: "create-peer"})
	require.NoError(t, err)
	require.NotEmpty(t, audit.Entries)

	deleted, err := c.DeletePeer(ctx, "src")
	require.NoError(t, err)
	require.Equal(t, "src", deleted.Deleted)

	// Nothing listens here: a connection error, not an APIError.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err = client.New(closed.URL, "").Health(ctx)
	require.Error(t, err)
	require.False(t, errors.As(err, &apiErr))
	require.True(t, client.IsConnectionError(err))
}
