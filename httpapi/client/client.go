// Package client is a typed Go client of the pgmirror REST API: one method
// per operation of the OpenAPI document, with the request and response
// bodies as Go types. The pgmirror CLI and the end-to-end tests use it.
//
// Errors from the service come back as *APIError (the HTTP status and the
// {"error": "..."} message); a request that never got an answer returns the
// transport's error (see IsConnectionError). The package's tests walk the
// service's OpenAPI document and fail when it has an operation, or a body
// field, that this package lacks.
//
//	c := client.New("http://localhost:8112", "")
//	login, err := c.Login(ctx, client.LoginRequest{Username: "admin", Password: pw})
//	c.Token = login.Token
//	mirrors, err := c.ListMirrors(ctx)
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Client talks to one pgmirror service. Its fields may be changed between
// calls, not during them.
type Client struct {
	// BaseURL is the service's address, such as http://localhost:8112.
	BaseURL string
	// Token is the bearer token from Login; empty sends no Authorization.
	Token string
	// HTTPClient sends the requests; nil uses http.DefaultClient.
	HTTPClient *http.Client
	// MaxResponseBytes is the largest response body the client reads; a
	// larger one fails with *ResponseTooLargeError instead of being read
	// into memory. 0 means DefaultMaxResponseBytes; a negative value reads
	// any size.
	MaxResponseBytes int64
}

// DefaultMaxResponseBytes is the response size a Client reads at most when
// MaxResponseBytes is 0: 16 MiB, far above any answer of the service (the
// largest, a page of 500 log entries, is well under 1 MiB).
const DefaultMaxResponseBytes int64 = 16 << 20

// ResponseTooLargeError is returned when a response body is larger than
// the client's MaxResponseBytes: the address is not the pgmirror service,
// or something between them sends far more than the service does.
type ResponseTooLargeError struct {
	// Operation is the operation's ID, such as list-mirrors.
	Operation string
	// Limit is the size in bytes that the body exceeded.
	Limit int64
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("%s: the server's response is larger than %d bytes; it was not read", e.Operation, e.Limit)
}

// New returns a client of the service at baseURL that sends token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token}
}

// APIError is an error response of the service.
type APIError struct {
	// Status is the HTTP status code (4xx or 5xx).
	Status int
	// Message is the body's error field: what went wrong and what to do.
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// IsConnectionError tells whether err means that the service could not be
// reached at all (refused connection, unknown host, timeout), as opposed to
// an answer that was an error.
func IsConnectionError(err error) bool {
	var ue *url.Error
	var ne net.Error
	var oe *net.OpError
	var de *net.DNSError
	return errors.As(err, &ue) || errors.As(err, &ne) || errors.As(err, &oe) || errors.As(err, &de)
}

// Operation is one operation of the API as the OpenAPI document names it.
type Operation struct {
	ID     string
	Method string
	Path   string
	// Query lists the query parameters the client sends, in the order of
	// the document.
	Query []string
}

// The API's operations; each method of Client uses one.
var (
	OpHealth          = Operation{"health", http.MethodGet, "/health", nil}
	OpReady           = Operation{"ready", http.MethodGet, "/ready", nil}
	OpLogin           = Operation{"login", http.MethodPost, "/v1/auth/login", nil}
	OpMe              = Operation{"me", http.MethodGet, "/v1/auth/me", nil}
	OpChangePassword  = Operation{"change-password", http.MethodPost, "/v1/auth/change-password", nil}
	OpListUsers       = Operation{"list-users", http.MethodGet, "/v1/users", nil}
	OpCreateUser      = Operation{"create-user", http.MethodPost, "/v1/users", nil}
	OpDeleteUser      = Operation{"delete-user", http.MethodDelete, "/v1/users/{username}", nil}
	OpListPeers       = Operation{"list-peers", http.MethodGet, "/v1/peers", nil}
	OpCreatePeer      = Operation{"create-peer", http.MethodPost, "/v1/peers", nil}
	OpGetPeer         = Operation{"get-peer", http.MethodGet, "/v1/peers/{name}", nil}
	OpUpdatePeer      = Operation{"update-peer", http.MethodPut, "/v1/peers/{name}", nil}
	OpDeletePeer      = Operation{"delete-peer", http.MethodDelete, "/v1/peers/{name}", nil}
	OpListPeerTables  = Operation{"list-peer-tables", http.MethodGet, "/v1/peers/{name}/tables", nil}
	OpTestPeer        = Operation{"test-peer", http.MethodPost, "/v1/peers/{name}/test", nil}
	OpListMirrors     = Operation{"list-mirrors", http.MethodGet, "/v1/mirrors", []string{"status", "q", "sort", "limit", "offset"}}
	OpCreateMirror    = Operation{"create-mirror", http.MethodPost, "/v1/mirrors", nil}
	OpGetMirror       = Operation{"get-mirror", http.MethodGet, "/v1/mirrors/{name}", nil}
	OpDeleteMirror    = Operation{"delete-mirror", http.MethodDelete, "/v1/mirrors/{name}", nil}
	OpUpdateMirror    = Operation{"update-mirror", http.MethodPatch, "/v1/mirrors/{name}", nil}
	OpPauseMirror     = Operation{"pause-mirror", http.MethodPost, "/v1/mirrors/{name}/pause", nil}
	OpResumeMirror    = Operation{"resume-mirror", http.MethodPost, "/v1/mirrors/{name}/resume", nil}
	OpResyncMirror    = Operation{"resync-mirror", http.MethodPost, "/v1/mirrors/{name}/resync", nil}
	OpResyncTable     = Operation{"resync-table", http.MethodPost, "/v1/mirrors/{name}/resync/{table}", nil}
	OpRetryMirror     = Operation{"retry-mirror", http.MethodPost, "/v1/mirrors/{name}/retry", nil}
	OpSyncSchema      = Operation{"sync-schema", http.MethodPost, "/v1/mirrors/{name}/sync-schema", nil}
	OpGetTables       = Operation{"get-mirror-tables", http.MethodGet, "/v1/mirrors/{name}/tables", nil}
	OpPutTables       = Operation{"put-mirror-tables", http.MethodPut, "/v1/mirrors/{name}/tables", nil}
	OpAvailableTables = Operation{"available-tables", http.MethodGet, "/v1/mirrors/{name}/available-tables", nil}
	OpCutover         = Operation{"cutover-mirror", http.MethodPost, "/v1/mirrors/{name}/cutover", nil}
	OpMirrorHistory   = Operation{"mirror-history", http.MethodGet, "/v1/mirrors/{name}/history", []string{"since"}}
	OpMirrorLogs      = Operation{"mirror-logs", http.MethodGet, "/v1/mirrors/{name}/logs", []string{"limit", "offset", "search", "level"}}
	OpAuditLog        = Operation{"audit-log", http.MethodGet, "/v1/audit", []string{"limit", "offset", "username", "action", "target_type", "target_name", "result"}}
)

// Operations lists every operation the client implements.
var Operations = []Operation{
	OpHealth, OpReady, OpLogin, OpMe, OpChangePassword, OpListUsers, OpCreateUser, OpDeleteUser,
	OpListPeers, OpCreatePeer, OpGetPeer, OpUpdatePeer, OpDeletePeer, OpListPeerTables, OpTestPeer,
	OpListMirrors, OpCreateMirror, OpGetMirror, OpDeleteMirror, OpUpdateMirror, OpPauseMirror, OpResumeMirror,
	OpResyncMirror, OpResyncTable, OpRetryMirror, OpSyncSchema, OpGetTables, OpPutTables,
	OpAvailableTables, OpCutover, OpMirrorLogs, OpMirrorHistory, OpAuditLog,
}

type bodyKey struct{}

// CaptureBody returns a context that makes the client store the raw body
// of the successful response to a request made with it in *dst (for
// printing the API's own JSON).
func CaptureBody(ctx context.Context, dst *[]byte) context.Context {
	return context.WithValue(ctx, bodyKey{}, dst)
}

// Do sends op with the path parameters (in the order of the path's
// placeholders), query and JSON body (nil for none), and decodes a
// successful answer into out (nil to discard it). It returns the HTTP
// status of the answer, and an *APIError for a 4xx or 5xx.
func (c *Client) Do(ctx context.Context, op Operation, params []string, query url.Values, body, out any) (int, error) {
	path := op.Path
	for _, p := range params {
		i := strings.IndexByte(path, '{')
		j := strings.IndexByte(path, '}')
		if i < 0 || j < i {
			return 0, fmt.Errorf("%s: too many path parameters", op.ID)
		}
		path = path[:i] + url.PathEscape(p) + path[j+1:]
	}
	if strings.Contains(path, "{") {
		return 0, fmt.Errorf("%s: missing path parameters for %s", op.ID, op.Path)
	}
	for k := range query {
		if !slices.Contains(op.Query, k) {
			return 0, fmt.Errorf("%s: %s takes no query parameter %q", op.ID, op.Path, k)
		}
	}
	u := strings.TrimRight(c.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rdr io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("%s: encode the request body: %w", op.ID, err)
		}
		rdr = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, op.Method, u, rdr)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", op.ID, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := c.readBody(op, resp)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 400 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
			if e.Error == "" {
				e.Error = http.StatusText(resp.StatusCode)
			}
		}
		return resp.StatusCode, &APIError{Status: resp.StatusCode, Message: e.Error}
	}
	if dst, ok := ctx.Value(bodyKey{}).(*[]byte); ok {
		*dst = raw
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s: decode the response: %w", op.ID, err)
		}
	}
	return resp.StatusCode, nil
}

// readBody reads a response body up to the client's limit; it fails
// before reading when the announced length is over the limit already.
func (c *Client) readBody(op Operation, resp *http.Response) ([]byte, error) {
	limit := c.MaxResponseBytes
	if limit == 0 {
		limit = DefaultMaxResponseBytes
	}
	body := io.Reader(resp.Body)
	if limit > 0 {
		if resp.ContentLength > limit {
			return nil, &ResponseTooLargeError{Operation: op.ID, Limit: limit}
		}
		body = io.LimitReader(resp.Body, limit+1)
	}
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, fmt.Errorf("%s: read the response: %w", op.ID, err)
	}
	if limit > 0 && int64(len(raw)) > limit {
		return nil, &ResponseTooLargeError{Operation: op.ID, Limit: limit}
	}
	return raw, nil
}

// call is Do for the typed methods, which need no status.
func call[T any](ctx context.Context, c *Client, op Operation, params []string, query url.Values, body any) (*T, error) {
	out := new(T)
	if _, err := c.Do(ctx, op, params, query, body, out); err != nil {
		return nil, err
	}
	return out, nil
}

func list[T any](ctx context.Context, c *Client, op Operation, params ...string) ([]T, error) {
	var out []T
	if _, err := c.Do(ctx, op, params, nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func p(params ...string) []string { return params }

// Health calls GET /health.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	return call[Health](ctx, c, OpHealth, nil, nil, nil)
}

// Ready calls GET /ready.
func (c *Client) Ready(ctx context.Context) (*Ready, error) {
	return call[Ready](ctx, c, OpReady, nil, nil, nil)
}

// Login exchanges a username and password for a token. It does not set
// c.Token.
func (c *Client) Login(ctx context.Context, req LoginRequest) (*LoginResponse, error) {
	return call[LoginResponse](ctx, c, OpLogin, nil, nil, req)
}

// Me returns the token's user.
func (c *Client) Me(ctx context.Context) (*Me, error) {
	return call[Me](ctx, c, OpMe, nil, nil, nil)
}

// ChangePassword changes the caller's password.
func (c *Client) ChangePassword(ctx context.Context, req ChangePasswordRequest) (*ChangePasswordResponse, error) {
	return call[ChangePasswordResponse](ctx, c, OpChangePassword, nil, nil, req)
}

// ListUsers lists the accounts (admin).
func (c *Client) ListUsers(ctx context.Context) ([]User, error) {
	return list[User](ctx, c, OpListUsers)
}

// CreateUser creates an account (admin).
func (c *Client) CreateUser(ctx context.Context, req UserCreate) (*UserCreated, error) {
	return call[UserCreated](ctx, c, OpCreateUser, nil, nil, req)
}

// DeleteUser deletes an account (admin).
func (c *Client) DeleteUser(ctx context.Context, username string) (*Deleted, error) {
	return call[Deleted](ctx, c, OpDeleteUser, p(username), nil, nil)
}

// ListPeers lists the peers.
func (c *Client) ListPeers(ctx context.Context) ([]Peer, error) {
	return list[Peer](ctx, c, OpListPeers)
}

// CreatePeer creates a peer (admin).
func (c *Client) CreatePeer(ctx context.Context, req PeerCreate) (*Peer, error) {
	return call[Peer](ctx, c, OpCreatePeer, nil, nil, req)
}

// GetPeer returns a peer.
func (c *Client) GetPeer(ctx context.Context, name string) (*Peer, error) {
	return call[Peer](ctx, c, OpGetPeer, p(name), nil, nil)
}

// UpdatePeer changes the non-nil fields of a peer (admin).
func (c *Client) UpdatePeer(ctx context.Context, name string, req PeerUpdate) (*Peer, error) {
	return call[Peer](ctx, c, OpUpdatePeer, p(name), nil, req)
}

// DeletePeer deletes a peer that no mirror uses (admin).
func (c *Client) DeletePeer(ctx context.Context, name string) (*Deleted, error) {
	return call[Deleted](ctx, c, OpDeletePeer, p(name), nil, nil)
}

// ListPeerTables lists the tables of a peer's database.
func (c *Client) ListPeerTables(ctx context.Context, name string) ([]TableRef, error) {
	return list[TableRef](ctx, c, OpListPeerTables, name)
}

// TestPeer connects to a peer and reports the result (admin). A failed
// connection is a successful call with Success false.
func (c *Client) TestPeer(ctx context.Context, name string) (*PeerTest, error) {
	return call[PeerTest](ctx, c, OpTestPeer, p(name), nil, nil)
}

// ListMirrors lists the mirrors with basic status.
func (c *Client) ListMirrors(ctx context.Context) ([]MirrorSummary, error) {
	return list[MirrorSummary](ctx, c, OpListMirrors)
}

// CreateMirror creates and starts a mirror (admin).
func (c *Client) CreateMirror(ctx context.Context, req MirrorCreate) (*MirrorConfig, error) {
	return call[MirrorConfig](ctx, c, OpCreateMirror, nil, nil, req)
}

// GetMirror returns a mirror's status.
func (c *Client) GetMirror(ctx context.Context, name string) (*MirrorStatus, error) {
	return call[MirrorStatus](ctx, c, OpGetMirror, p(name), nil, nil)
}

// DeleteMirror deletes a mirror, its slot and publication (admin).
func (c *Client) DeleteMirror(ctx context.Context, name string) (*Deleted, error) {
	return call[Deleted](ctx, c, OpDeleteMirror, p(name), nil, nil)
}

// UpdateMirror changes the non-nil settings of a paused mirror (admin).
func (c *Client) UpdateMirror(ctx context.Context, name string, req MirrorUpdate) (*MirrorConfig, error) {
	return call[MirrorConfig](ctx, c, OpUpdateMirror, p(name), nil, req)
}

// PauseMirror pauses a mirror (admin).
func (c *Client) PauseMirror(ctx context.Context, name string) (*StatusMessage, error) {
	return call[StatusMessage](ctx, c, OpPauseMirror, p(name), nil, nil)
}

// ResumeMirror resumes a paused mirror (admin).
func (c *Client) ResumeMirror(ctx context.Context, name string) (*StatusMessage, error) {
	return call[StatusMessage](ctx, c, OpResumeMirror, p(name), nil, nil)
}

// ResyncMirror re-snapshots every table of a mirror (admin).
func (c *Client) ResyncMirror(ctx context.Context, name string) (*Message, error) {
	return call[Message](ctx, c, OpResyncMirror, p(name), nil, nil)
}

// ResyncTable re-snapshots one table, schema.table, of a mirror (admin).
func (c *Client) ResyncTable(ctx context.Context, name, table string) (*TableMessage, error) {
	return call[TableMessage](ctx, c, OpResyncTable, p(name, table), nil, nil)
}

// RetryMirror retries a mirror in error now (admin).
func (c *Client) RetryMirror(ctx context.Context, name string) (*Message, error) {
	return call[Message](ctx, c, OpRetryMirror, p(name), nil, nil)
}

// SyncSchema applies the source's schema changes to the destination (admin).
func (c *Client) SyncSchema(ctx context.Context, name string) (*Message, error) {
	return call[Message](ctx, c, OpSyncSchema, p(name), nil, nil)
}

// GetTables returns a mirror's table mappings.
func (c *Client) GetTables(ctx context.Context, name string) ([]TableMapping, error) {
	return list[TableMapping](ctx, c, OpGetTables, name)
}

// PutTables replaces a paused mirror's table mappings (admin).
func (c *Client) PutTables(ctx context.Context, name string, req TablesPut) ([]TableMapping, error) {
	var out []TableMapping
	if _, err := c.Do(ctx, OpPutTables, p(name), nil, req, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AvailableTables lists the source tables not yet in a mirror.
func (c *Client) AvailableTables(ctx context.Context, name string) ([]TableRef, error) {
	return list[TableRef](ctx, c, OpAvailableTables, name)
}

// Cutover switches a mirror over to its destination (admin). Done tells
// whether the cut-over completed within the request's wait (HTTP 200); when
// false (HTTP 202) it still runs: follow it with GetMirror. A failed step
// is an *APIError with status 409.
func (c *Client) Cutover(ctx context.Context, name string, req CutoverRequest) (resp *CutoverResponse, done bool, err error) {
	resp = new(CutoverResponse)
	status, err := c.Do(ctx, OpCutover, p(name), nil, req, resp)
	if err != nil {
		return nil, false, err
	}
	return resp, status == http.StatusOK, nil
}

// MirrorLogs returns a page of a mirror's logs, newest first.
func (c *Client) MirrorLogs(ctx context.Context, name string, q LogQuery) (*LogPage, error) {
	v := url.Values{}
	setInt(v, "limit", q.Limit)
	setInt(v, "offset", q.Offset)
	setString(v, "search", q.Search)
	setString(v, "level", q.Level)
	return call[LogPage](ctx, c, OpMirrorLogs, p(name), v, nil)
}

// MirrorHistory returns a mirror's lag and throughput samples taken after
// since (an RFC 3339 time or a duration back from now such as 6h; "" for
// the last 3 hours), oldest first.
func (c *Client) MirrorHistory(ctx context.Context, name, since string) (*History, error) {
	v := url.Values{}
	setString(v, "since", since)
	return call[History](ctx, c, OpMirrorHistory, p(name), v, nil)
}

// AuditLog returns a page of the audit log, newest first (admin).
func (c *Client) AuditLog(ctx context.Context, q AuditQuery) (*AuditPage, error) {
	v := url.Values{}
	setInt(v, "limit", q.Limit)
	setInt(v, "offset", q.Offset)
	setString(v, "username", q.Username)
	setString(v, "action", q.Action)
	setString(v, "target_type", q.TargetType)
	setString(v, "target_name", q.TargetName)
	setString(v, "result", q.Result)
	return call[AuditPage](ctx, c, OpAuditLog, nil, v, nil)
}

func setInt(v url.Values, key string, n int) {
	if n != 0 {
		v.Set(key, strconv.Itoa(n))
	}
}

func setString(v url.Values, key, s string) {
	if s != "" {
		v.Set(key, s)
	}
}
