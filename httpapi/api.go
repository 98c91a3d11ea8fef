package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/httpapi/ui"
)

// Config configures the API handler.
type Config struct {
	// Store is the catalog.
	Store *db.Store
	// LagBoard holds the newest lag measures of the mirrors this process
	// streams: they are answered where newer than the catalog's. Nil:
	// the catalog's only.
	LagBoard *db.LagBoard
	// River enqueues jobs inside catalog transactions (an insert-only client
	// is enough).
	River *river.Client[pgx.Tx]
	// JWTSecret signs and verifies tokens; at least 32 bytes.
	JWTSecret []byte
	// Logger receives request failures. Defaults to slog.Default().
	Logger *slog.Logger
	// Version is the service version shown in the OpenAPI document.
	Version string
	// TokenTTL is how long a token from login is valid. Zero (the default)
	// issues tokens without an expiry, as the API specification says; when
	// set, every token must carry an expiry and is refused once it is older
	// than TokenTTL, including tokens issued before TokenTTL was set.
	TokenTTL time.Duration
	// RevokeTokensOnPasswordChange makes a password change revoke every
	// token the user held before it. By default (false) earlier tokens stay
	// valid and the new password applies to later logins.
	RevokeTokensOnPasswordChange bool
	// Login throttles password guessing; zero fields take their defaults.
	Login LoginLimits
	// Metrics, when set, serves GET /metrics (Prometheus text format,
	// outside the OpenAPI document; it does its own authentication).
	Metrics http.Handler
	// ReadTimeout, when not zero, is the server's read timeout: a request
	// body must arrive within it (and within 5 s), else the answer is 408.
	ReadTimeout time.Duration
	// AllowSocketPeers lets a peer's host be a Unix-socket directory (an
	// absolute path). Off by default: a socket connection can authenticate
	// as pgmirror's own operating-system user (peer authentication), beyond
	// the credentials the peer gives.
	AllowSocketPeers bool
}

// handlers holds the dependencies of every operation.
type handlers struct {
	store    *db.Store
	river    *river.Client[pgx.Tx]
	secret   []byte
	logger   *slog.Logger
	version  string
	tokenTTL time.Duration
	// revokeOnPasswordChange is Config.RevokeTokensOnPasswordChange.
	revokeOnPasswordChange bool
	logins                 *loginGuard
	// allowSocketPeers: Config.AllowSocketPeers.
	allowSocketPeers bool
	// defaults remembers which stored password hashes are of the default
	// password (GET /v1/auth/me).
	defaults *defaultPasswords
	// lagBoard: Config.LagBoard.
	lagBoard *db.LagBoard
}

// New returns the HTTP handler serving the whole API.
func New(cfg Config) (http.Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("httpapi: Config.Store is required")
	}
	if cfg.River == nil {
		return nil, errors.New("httpapi: Config.River is required")
	}
	if len(cfg.JWTSecret) < 32 {
		return nil, errors.New("httpapi: Config.JWTSecret must be at least 32 bytes")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = withRequestIDs(cfg.Logger)
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.TokenTTL < 0 {
		return nil, errors.New("httpapi: Config.TokenTTL must not be negative (zero issues tokens without an expiry)")
	}
	h := &handlers{store: cfg.Store, river: cfg.River, secret: cfg.JWTSecret, logger: cfg.Logger, version: cfg.Version,
		tokenTTL: cfg.TokenTTL, revokeOnPasswordChange: cfg.RevokeTokensOnPasswordChange, logins: newLoginGuard(cfg.Store, cfg.Login),
		allowSocketPeers: cfg.AllowSocketPeers, defaults: &defaultPasswords{}, lagBoard: cfg.LagBoard}

	mux := http.NewServeMux()
	hcfg := huma.DefaultConfig("pgmirror API", cfg.Version)
	hcfg.CreateHooks = nil
	hcfg.DocsPath = ""
	hcfg.SchemasPath = ""
	hcfg.OpenAPIPath = "/openapi"
	hcfg.Info.Description = "Manage PostgreSQL-to-PostgreSQL change-data-capture mirrors. " +
		"Every error response is a JSON object {\"error\": \"message\"}. Log in with POST /v1/auth/login " +
		"and send the token as Authorization: Bearer <token>."
	hcfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		securityScheme: {Type: "http", Scheme: "bearer", BearerFormat: "JWT",
			Description: tokenDescription(cfg.TokenTTL, cfg.RevokeTokensOnPasswordChange)},
	}
	hcfg.OnAddOperation = append(hcfg.OnAddOperation, documentValidationAs400)
	hcfg.Servers = documentServers()
	api := humago.New(mux, hcfg)
	api.UseMiddleware(commaLists, h.authMiddleware(api), strictBody(api, cfg.ReadTimeout))

	h.registerHealth(api)
	h.registerReady(api)
	h.registerAuth(api)
	h.registerUsers(api)
	h.registerPeers(api)
	h.registerMirrors(api)
	h.registerControl(api)
	h.registerMirrorSettings(api)
	h.registerCutover(api)
	h.registerVerify(api)
	h.registerLogs(api)
	h.registerHistory(api)
	h.registerAudit(api)
	foldPatternDescriptions(api.OpenAPI())
	documentVocabulary(api.OpenAPI())
	registerDocs(mux)
	ui.Register(mux)
	if cfg.Metrics != nil {
		mux.Handle("GET /metrics", cfg.Metrics)
	}

	return &root{mux: mux, logger: cfg.Logger}, nil
}

// root adds the logger to each request's context (for error logging),
// turns a panic into a JSON 500 and a log line, and answers unknown routes
// and wrong methods with JSON errors instead of ServeMux's plain text.
type root struct {
	mux    *http.ServeMux
	logger *slog.Logger
}

func (rt *root) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// No browser may guess another content type than the one sent.
	w.Header().Set("X-Content-Type-Options", "nosniff")
	tw := &trackingWriter{ResponseWriter: w}
	if r.ProtoMajor == 1 && r.Body != nil && r.Body != http.NoBody {
		tw.body = &eofReader{ReadCloser: r.Body}
		r.Body = tw.body
	}
	r, logAccess := rt.withAccess(tw, r)
	defer logAccess()
	r = r.WithContext(context.WithValue(r.Context(), loggerKey{}, rt.logger))
	defer rt.recoverPanic(tw, r)
	if headerSize(r) > MaxHeaderBytes {
		writeJSONError(tw, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("Request headers are too large: the limit is %d KiB; send fewer or shorter headers", MaxHeaderBytes>>10))
		return
	}
	if p := r.URL.EscapedPath(); p != "/" && path.Clean(p) != p {
		// ServeMux would answer with a redirect to the clean path, in HTML.
		// (Like ServeMux, this looks at the escaped path: a name with an
		// escaped slash, such as a user "a/..%2F", stays reachable.)
		writeJSONError(tw, http.StatusNotFound, fmt.Sprintf("No endpoint at %s: use the path without empty, '.' or '..' segments or a trailing slash (%s)", p, path.Clean("/"+p)))
		return
	}
	if _, pattern := rt.mux.Handler(r); pattern != "" {
		rt.mux.ServeHTTP(tw, r)
		return
	}
	// No route matched: let the mux decide between 404 and 405 (and the
	// Allow header), then answer in JSON.
	rec := httptest.NewRecorder()
	rt.mux.ServeHTTP(rec, r)
	status := rec.Code
	msg := fmt.Sprintf("No endpoint at %s; see /docs for the list of endpoints", r.URL.Path)
	if status == http.StatusMethodNotAllowed {
		allow := rec.Header().Get("Allow")
		w.Header().Set("Allow", allow)
		msg = fmt.Sprintf("Method %s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow)
	} else if status != http.StatusNotFound {
		status = http.StatusNotFound
	}
	writeJSONError(tw, status, msg)
}

// MaxHeaderBytes is the most a request's line and headers may take; more is
// answered 431 in JSON. The HTTP server's own limit, whose answer is plain
// text, must be larger.
const MaxHeaderBytes = 64 << 10

// headerSize is about the size of r's request line and headers on the wire.
func headerSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: \r\n") + len(r.Host)
	for k, values := range r.Header {
		for _, v := range values {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// recoverPanic answers a request whose handler, middleware or validation
// panicked with a JSON 500 and logs the panic with its stack in one line.
// When part of the response was already sent, the connection is aborted
// instead, so that the client never takes a truncated body for a whole one.
func (rt *root) recoverPanic(w *trackingWriter, r *http.Request) {
	v := recover()
	if v == nil {
		return
	}
	if v == http.ErrAbortHandler {
		panic(v)
	}
	rt.logger.ErrorContext(r.Context(), "panic while serving a request", slog.String("method", r.Method),
		slog.String("path", r.URL.Path), slog.String("panic", fmt.Sprint(v)), slog.String("stack", string(debug.Stack())))
	if w.started {
		panic(http.ErrAbortHandler)
	}
	writeJSONError(w, http.StatusInternalServerError, "Internal server error: the request failed unexpectedly; the cause is in the server log")
}

// trackingWriter records whether the response has started, its status and
// how many body bytes were written (for the access log).
//
// An HTTP/1 answer that starts before the request body was read to its end
// (a 408 or 413, a 401 before the body was looked at, a route that takes no
// body) closes the connection: it carries Connection: close, and reading
// from the connection stops soon after (drainTime). Otherwise net/http
// would wait for the rest of the body (up to 256 KiB of it) before sending
// the answer, with no time limit once a body read deadline has been set,
// so that a client could hold a connection open forever by never finishing
// its body.
type trackingWriter struct {
	http.ResponseWriter
	// body is the request body of an HTTP/1 request that has one.
	body    *eofReader
	started bool
	status  int
	bytes   int64
}

func (w *trackingWriter) WriteHeader(status int) {
	if !w.started {
		w.status = status
		w.start()
	}
	w.started = true
	w.ResponseWriter.WriteHeader(status)
}

func (w *trackingWriter) Write(b []byte) (int, error) {
	if !w.started {
		w.status = http.StatusOK
		w.start()
	}
	w.started = true
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// start runs once, before the response's header is sent.
func (w *trackingWriter) start() {
	if w.body == nil || w.body.done.Load() {
		return
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w.ResponseWriter).SetReadDeadline(time.Now().Add(drainTime))
}

// drainTime is how long net/http may go on reading what is left of a body
// (at most 256 KiB) after an answer that closes the connection. Reading it
// lets the connection close with a FIN: closing a socket with unread data
// sends a reset, which can make the client lose the answer.
const drainTime = 500 * time.Millisecond

// eofReader is a request body that records whether it was read to its end.
type eofReader struct {
	io.ReadCloser
	done atomic.Bool
}

func (r *eofReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err == io.EOF {
		r.done.Store(true)
	}
	return n, err
}

// Unwrap gives http.ResponseController (read deadlines, flushing) the
// underlying writer.
func (w *trackingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := jsonMarshal(errorBody{Error: msg})
	_, _ = w.Write(b)
}

type loggerKey struct{}

// apiError is the body of every error response.
type apiError struct {
	status  int
	headers http.Header
	Message string `json:"error" doc:"What went wrong and what to do about it." example:"peer \"src\" does not exist"`
}

type errorBody struct {
	Error string `json:"error"`
}

func (e *apiError) Error() string  { return e.Message }
func (e *apiError) GetStatus() int { return e.status }

// GetHeaders returns headers sent with the error (Retry-After of a 503 or a
// 429). Never nil: huma.ErrorWithHeaders adds to it.
func (e *apiError) GetHeaders() http.Header {
	if e.headers == nil {
		e.headers = http.Header{}
	}
	return e.headers
}

// retryAfter is the Retry-After (seconds) of the 503 sent while the catalog
// is unreachable.
const retryAfter = "5"

// errUnavailable is the answer to any request that needs the catalog while
// it cannot be reached.
func errUnavailable() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, headers: http.Header{"Retry-After": {retryAfter}},
		Message: "Service unavailable: the catalog database cannot be reached; retry in " + retryAfter +
			" seconds (GET /ready answers 200 once the service can serve requests again)"}
}

// writeError sends err, an *apiError or any other error (a 500), from a
// middleware, with the error's headers.
func writeError(api huma.API, ctx huma.Context, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{status: http.StatusInternalServerError, Message: "Internal server error; the cause is in the server log"}
	}
	for k, values := range e.headers {
		for _, v := range values {
			ctx.AppendHeader(k, v)
		}
	}
	_ = huma.WriteErr(api, ctx, e.status, e.Message)
}

func init() {
	// Huma's error constructors are package variables; they must be set
	// before any operation is registered.
	huma.NewError = newError
	huma.NewErrorWithContext = func(ctx huma.Context, status int, msg string, errs ...error) huma.StatusError {
		if status < 500 || len(errs) == 0 || ctx == nil {
			return newError(status, msg, errs...)
		}
		// An error a handler returned without turning it into an apiError.
		err := db.Translate(errors.Join(errs...))
		logger, _ := ctx.Context().Value(loggerKey{}).(*slog.Logger)
		if errors.Is(err, db.ErrUnavailable) {
			if logger != nil {
				logger.WarnContext(ctx.Context(), "request failed: catalog unavailable", slog.String("method", ctx.Method()),
					slog.String("path", ctx.URL().Path), slog.Any("error", err))
			}
			ctx.SetHeader("Retry-After", retryAfter)
			return errUnavailable()
		}
		if logger != nil {
			logger.ErrorContext(ctx.Context(), "request failed", slog.String("method", ctx.Method()),
				slog.String("path", ctx.URL().Path), slog.Any("error", err))
		}
		return newError(status, msg, errs...)
	}
}

// maxProblems is how many problems of a request an error names at most.
const maxProblems = 5

// newError builds the {"error": ...} body. Validation failures (422) become
// 400 and list each problem by location; a 500 never shows internal text.
func newError(status int, msg string, errs ...error) huma.StatusError {
	if status >= 500 {
		if msg == "" || len(errs) > 0 {
			msg = "Internal server error; the cause is in the server log"
		}
		return &apiError{status: status, Message: msg}
	}
	var parts []string
	for _, err := range errs {
		if err == nil {
			continue
		}
		var d *huma.ErrorDetail
		if errors.As(err, &d) {
			// Never echo d.Value: it may hold a password.
			loc := strings.TrimPrefix(strings.TrimPrefix(d.Location, "body."), "body")
			if loc != "" {
				parts = append(parts, loc+": "+d.Message)
			} else {
				parts = append(parts, d.Message)
			}
			continue
		}
		parts = append(parts, err.Error())
	}
	if len(parts) > maxProblems {
		// A body can have thousands of problems (unknown keys); name a few.
		parts = append(parts[:maxProblems], fmt.Sprintf("and %d more problems", len(parts)-maxProblems))
	}
	switch {
	case status == http.StatusBadRequest && msg == "validation failed" && len(parts) > 0:
		// Huma reports a body that is not valid JSON as a 400 "validation failed".
		msg = "Malformed JSON body: " + strings.Join(parts, "; ")
	case status == http.StatusUnprocessableEntity:
		status = http.StatusBadRequest
		msg = "Invalid request: " + strings.Join(parts, "; ")
	case status == http.StatusRequestEntityTooLarge && strings.HasPrefix(msg, "request body is too large"):
		// Huma's own message; strictBody answers before Huma reads a body.
		msg = "Request body is too large; send a smaller body"
	case msg == "request body is required":
		msg = "Request body is required: send a JSON object with Content-Type: application/json"
	case len(parts) > 0:
		msg = strings.TrimSuffix(msg+": "+strings.Join(parts, "; "), ": ")
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &apiError{status: status, Message: msg}
}

// documentValidationAs400 rewrites the 422 responses Huma documents into
// the 400 this API actually sends.
func documentValidationAs400(_ *huma.OpenAPI, op *huma.Operation) {
	if r, ok := op.Responses["422"]; ok {
		delete(op.Responses, "422")
		if _, has := op.Responses["400"]; !has {
			r.Description = "Bad Request"
			op.Responses["400"] = r
		}
	}
}

// Permission levels of operations.
type permission int

const (
	open permission = iota
	authed
	adminOnly
)

const securityScheme = "bearer"

// Request body limits (413 above them): what the largest valid body of an
// operation needs, so that nobody can make the service read and parse
// megabytes where a few hundred bytes are expected.
const (
	// loginMaxBody bounds the body of the unauthenticated login.
	loginMaxBody = 4 << 10
	// defaultMaxBody bounds the bodies of users, passwords, cut-overs.
	defaultMaxBody = 16 << 10
	// peerMaxBody bounds a peer's body: up to 64 KiB of PEM certificates.
	peerMaxBody = 256 << 10
	// mirrorMaxBody bounds a mirror's body: up to 1000 table mappings with
	// their excluded columns.
	mirrorMaxBody = 1 << 20
)

// register adds an operation with its permission level: security metadata
// for the middleware and the OpenAPI document, and the documented errors.
func register[I, O any](api huma.API, perm permission, op huma.Operation, handler func(context.Context, *I) (*O, error)) {
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata["permission"] = perm
	switch perm {
	case authed:
		op.Security = []map[string][]string{{securityScheme: {}}}
		op.Errors = append(op.Errors, http.StatusUnauthorized)
		op.Description += " Permission: authed (any valid token)."
	case adminOnly:
		op.Security = []map[string][]string{{securityScheme: {}}}
		op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
		op.Description += " Permission: adminOnly."
	default:
		// An explicit empty list: no authentication (OpenAPI's way of
		// saying so, which linters require).
		op.Security = []map[string][]string{}
		op.Description += " Permission: open."
	}
	if op.Path != "/health" {
		// Everything but /health needs the catalog.
		op.Errors = append(op.Errors, http.StatusServiceUnavailable)
	}
	if op.MaxBodyBytes == 0 {
		op.MaxBodyBytes = defaultMaxBody
	}
	op.Description = strings.TrimSpace(op.Description)
	checkAudited(op)
	huma.Register(api, op, handler)
	documentParameterVocabulary[I](api.OpenAPI(), op)
}

// internal turns an error the handler did not expect into the API's answer.
// It is the one place where catalog errors become HTTP errors:
//   - the catalog cannot be reached: 503 with Retry-After;
//   - a catalog constraint rejected the write: 409 for unique, foreign key
//     and exclusion constraints, 400 for check and not-null constraints;
//   - text PostgreSQL cannot store (a NUL character, or bytes that are not
//     UTF-8, in a path, query or JSON string; SQLSTATE 22021 or 22P05): 400;
//   - anything else: logged, and a 500 without internal detail.
//
// what says what the request was doing ("create the peer").
func (h *handlers) internal(ctx context.Context, what string, err error) error {
	err = db.Translate(err)
	var ce *db.ConstraintError
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, db.ErrUnavailable):
		h.logger.WarnContext(ctx, "request failed: catalog unavailable", slog.String("operation", what), slog.Any("error", err))
		return errUnavailable()
	case errors.As(err, &ce) && errors.Is(ce, db.ErrConflict):
		return errorf(http.StatusConflict, "Conflict: could not %s because the catalog refused it (%s): the name or value is already used, or still referenced", what, ce.Message)
	case errors.As(err, &ce):
		return errorf(http.StatusBadRequest, "Invalid request: could not %s because the catalog refused a value (%s): check the fields against docs/api.md", what, ce.Message)
	case errors.As(err, &pgErr) && (pgErr.Code == "22021" || pgErr.Code == "22P05"):
		return errorf(http.StatusBadRequest, "Invalid request: text in the path, query or body must be UTF-8 without NUL (\\u0000) characters")
	}
	h.logger.ErrorContext(ctx, "request failed", slog.String("operation", what), slog.Any("error", err))
	return &apiError{status: http.StatusInternalServerError, Message: "Internal server error while trying to " + what + "; the cause is in the server log"}
}

func errorf(status int, format string, args ...any) error {
	return &apiError{status: status, Message: fmt.Sprintf(format, args...)}
}
