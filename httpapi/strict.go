package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/danielgtaylor/huma/v2"
)

// Strict request bodies.
//
// Go's encoding/json matches object keys to struct fields case-insensitively
// and keeps the last of repeated keys, while Huma validates the first key
// that matches a field exactly. {"role": "viewer", "Role": "admin"} was
// therefore validated as viewer and stored as admin. strictBody walks the
// raw JSON of every request body against the operation's schema before Huma
// sees it and rejects, with a 400 naming the key:
//   - a key that differs from a schema field only by case (PORT, Role),
//   - a key repeated in the same object,
//   - an object or array where the schema wants a string, number or
//     boolean (Huma's uniqueItems check panics on such items).
//
// Unknown keys that are not case variants are left to Huma's own validation
// (additionalProperties is false for every body), and so is malformed JSON.

// maxSchemaDepth bounds how deep the walk follows the schema; values below
// it are skipped without recursion. Request bodies of this API are 3 levels
// deep.
const maxSchemaDepth = 32

func init() {
	// Validate field names case-sensitively too, so that Huma and
	// encoding/json never look at different keys.
	huma.ValidateStrictCasing = true
}

// humaContext names huma.Context for embedding: embedded under its own name
// the field would hide the interface's Context method.
type humaContext = huma.Context

// bodyContext replaces a huma.Context's body with bytes already read.
type bodyContext struct {
	humaContext
	body io.Reader
}

func (c *bodyContext) BodyReader() io.Reader { return c.body }

// SetReadDeadline does nothing: the body is already read. (A deadline left
// on the connection after the body is read makes net/http's background read
// fail when it passes, which cancels the request's context while the
// handler still works, for example on a slow peer connection.)
func (c *bodyContext) SetReadDeadline(time.Time) error { return nil }

// strictBody returns the middleware that reads request bodies, bounded in
// time and size, and checks their keys. readTimeout, when not zero, caps
// each operation's body read timeout (the server's SERVICE_HTTP_READ_TIMEOUT).
//
// A body that does not arrive in time (408) or is larger than the
// operation's limit (413) is answered at once; root then closes the
// connection after the answer instead of waiting for the rest of the body.
func strictBody(api huma.API, readTimeout time.Duration) func(huma.Context, func(huma.Context)) {
	registry := api.OpenAPI().Components.Schemas
	return func(ctx huma.Context, next func(huma.Context)) {
		op := ctx.Operation()
		if op.RequestBody == nil || op.RequestBody.Content["application/json"] == nil {
			next(ctx)
			return
		}
		if length, err := strconv.ParseInt(ctx.Header("Content-Length"), 10, 64); err == nil && length > op.MaxBodyBytes {
			_ = huma.WriteErr(api, ctx, http.StatusRequestEntityTooLarge, tooLarge(op.MaxBodyBytes))
			return
		}
		timeout := op.BodyReadTimeout
		if readTimeout > 0 && (timeout <= 0 || readTimeout < timeout) {
			timeout = readTimeout
		}
		if timeout > 0 {
			_ = ctx.SetReadDeadline(time.Now().Add(timeout))
		}
		// Read one byte more than the limit to tell a body of the limit's
		// size from a larger one.
		raw, err := io.ReadAll(io.LimitReader(ctx.BodyReader(), op.MaxBodyBytes+1))
		if err != nil {
			// The deadline stays: root ends the connection after the answer.
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() {
				_ = huma.WriteErr(api, ctx, http.StatusRequestTimeout, "Request body was not received in time: send the whole body within "+timeout.String())
				return
			}
			_ = huma.WriteErr(api, ctx, http.StatusBadRequest, "Could not read the request body: "+err.Error())
			return
		}
		if int64(len(raw)) > op.MaxBodyBytes {
			_ = huma.WriteErr(api, ctx, http.StatusRequestEntityTooLarge, tooLarge(op.MaxBodyBytes))
			return
		}
		if !utf8.Valid(raw) {
			_ = huma.WriteErr(api, ctx, http.StatusBadRequest, "Invalid request: the body is not valid UTF-8: send JSON text encoded as UTF-8")
			return
		}
		// The whole body is read: no deadline may be left on the connection
		// (it would make net/http's background read fail when it passes,
		// which cancels the request's context while the handler still works).
		_ = ctx.SetReadDeadline(time.Time{})
		w := &keyWalker{dec: json.NewDecoder(bytes.NewReader(raw)), registry: registry}
		if problem := w.check(op.RequestBody.Content["application/json"].Schema); problem != "" {
			_ = huma.WriteErr(api, ctx, http.StatusBadRequest, "Invalid request: "+problem)
			return
		}
		next(&bodyContext{humaContext: ctx, body: bytes.NewReader(raw)})
	}
}

// tooLarge is the message of a 413 for an operation whose limit is max bytes.
func tooLarge(max int64) string {
	size := strconv.FormatInt(max, 10) + " bytes"
	switch {
	case max >= 1<<20 && max%(1<<20) == 0:
		size = strconv.FormatInt(max>>20, 10) + " MiB"
	case max >= 1<<10 && max%(1<<10) == 0:
		size = strconv.FormatInt(max>>10, 10) + " KiB"
	}
	return "Request body is too large: the limit of this endpoint is " + size + "; send a smaller body"
}

// keyWalker reads one JSON value token by token and compares object keys
// with a schema.
type keyWalker struct {
	dec      *json.Decoder
	registry huma.Registry
}

// errMalformed stops the walk on JSON the decoder rejects; Huma reports it.
var errMalformed = errors.New("malformed JSON")

// problemError is a rejected body; its text is shown to the client.
type problemError struct{ msg string }

func (e *problemError) Error() string { return e.msg }

// check returns what is wrong with the body, or "" when the keys are fine
// (or the JSON is malformed, which Huma reports).
func (w *keyWalker) check(s *huma.Schema) string {
	w.dec.UseNumber()
	err := w.value(s, "", 0)
	var p *problemError
	if errors.As(err, &p) {
		return p.msg
	}
	return ""
}

func (w *keyWalker) resolve(s *huma.Schema) *huma.Schema {
	for i := 0; s != nil && s.Ref != "" && i < maxSchemaDepth; i++ {
		s = w.registry.SchemaFromRef(s.Ref)
	}
	return s
}

// value walks one value at path whose schema is s (nil when unknown).
func (w *keyWalker) value(s *huma.Schema, path string, depth int) error {
	if depth > maxSchemaDepth {
		s = nil
	}
	s = w.resolve(s)
	tok, err := w.dec.Token()
	if err != nil {
		return errMalformed
	}
	delim, isDelim := tok.(json.Delim)
	if !isDelim {
		// A scalar: Huma checks its type and bounds. PostgreSQL cannot
		// store a NUL character in text.
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return &problemError{at(path) + "text must be UTF-8 without NUL (\\u0000) characters"}
		}
		return nil
	}
	if s == nil {
		return w.skip()
	}
	if scalar(s.Type) {
		got := "an object"
		if delim == '[' {
			got = "an array"
		}
		return &problemError{fmt.Sprintf("%sexpected %s, got %s", at(path), s.Type, got)}
	}
	if delim == '[' {
		for i := 0; w.dec.More(); i++ {
			if err := w.value(s.Items, path+"["+strconv.Itoa(i)+"]", depth+1); err != nil {
				return err
			}
		}
		_, err := w.dec.Token() // ]
		return orMalformed(err)
	}
	return w.object(s, path, depth)
}

// object walks the keys of an object whose opening brace has been read.
func (w *keyWalker) object(s *huma.Schema, path string, depth int) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return errMalformed
		}
		key, _ := tok.(string)
		if strings.ContainsRune(key, 0) {
			return &problemError{at(path) + "keys must be UTF-8 without NUL (\\u0000) characters"}
		}
		if seen[key] {
			return &problemError{fmt.Sprintf("%skey %q appears more than once; send each field once", at(path), key)}
		}
		seen[key] = true
		prop, known := s.Properties[key]
		if !known {
			if field := foldMatch(s, key); field != "" {
				return &problemError{fmt.Sprintf("%skey %q is not a field: field names are case-sensitive, use %q", at(path), key, field)}
			}
		}
		if err := w.value(prop, join(path, key), depth+1); err != nil {
			return err
		}
	}
	_, err := w.dec.Token() // }
	return orMalformed(err)
}

// skip reads the rest of a value whose opening delimiter has been read,
// without recursion.
func (w *keyWalker) skip() error {
	for open := 1; open > 0; {
		tok, err := w.dec.Token()
		if err != nil {
			return errMalformed
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			open++
		case json.Delim(']'), json.Delim('}'):
			open--
		}
	}
	return nil
}

// foldMatch returns the field of s that key matches only when case is
// ignored (as encoding/json would match it), or "".
func foldMatch(s *huma.Schema, key string) string {
	fields := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		fields = append(fields, name)
	}
	sort.Strings(fields)
	for _, name := range fields {
		if strings.EqualFold(name, key) {
			return name
		}
	}
	return ""
}

func scalar(t string) bool {
	return t == huma.TypeString || t == huma.TypeNumber || t == huma.TypeInteger || t == huma.TypeBoolean
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// at prefixes a message with the location of the problem: nothing for the
// body itself, else a field path such as "table_mappings[0]: ".
func at(path string) string {
	if path == "" {
		return ""
	}
	return path + ": "
}

func orMalformed(err error) error {
	if err != nil {
		return errMalformed
	}
	return nil
}
