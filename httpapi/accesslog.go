package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"regexp"
	"time"
)

// requestIDHeader carries the request id in both directions.
const requestIDHeader = "X-Request-Id"

// saneRequestID is what a client-sent request id must look like to be kept.
var saneRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

type requestIDKey struct{}

// accessEntry collects what the access log line needs to know that only
// inner layers learn (the authenticated user).
type accessEntry struct {
	user string
}

type accessKey struct{}

// requestID returns the client's X-Request-Id when it is sane, otherwise a
// new random one (32 hex characters).
func requestID(r *http.Request) string {
	if id := r.Header.Get(requestIDHeader); saneRequestID.MatchString(id) {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// withAccess starts the access log of request r: it sets the request id in
// the response header and the context, and returns the request to serve and
// the function that writes the access line once the response is done.
func (rt *root) withAccess(w *trackingWriter, r *http.Request) (*http.Request, func()) {
	start := time.Now()
	id := requestID(r)
	w.Header().Set(requestIDHeader, id)
	entry := &accessEntry{}
	ctx := context.WithValue(r.Context(), requestIDKey{}, id)
	ctx = context.WithValue(ctx, accessKey{}, entry)
	r = r.WithContext(ctx)
	return r, func() {
		status := w.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []slog.Attr{slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Duration("duration", time.Since(start)),
			slog.Int64("bytes", w.bytes), slog.String("remote", r.RemoteAddr)}
		if entry.user != "" {
			attrs = append(attrs, slog.String("user", entry.user))
		}
		rt.logger.LogAttrs(ctx, slog.LevelInfo, "http request", attrs...)
	}
}

// setAccessUser records the authenticated user for the access log line.
func setAccessUser(ctx context.Context, username string) {
	if e, ok := ctx.Value(accessKey{}).(*accessEntry); ok {
		e.user = username
	}
}

// requestIDHandler adds request_id to every record logged with the context
// of a request, so each line written while serving it can be matched with
// its access line.
type requestIDHandler struct{ slog.Handler }

// withRequestIDs returns logger with request ids added from the context.
func withRequestIDs(logger *slog.Logger) *slog.Logger {
	if _, ok := logger.Handler().(requestIDHandler); ok {
		return logger
	}
	return slog.New(requestIDHandler{logger.Handler()})
}

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
