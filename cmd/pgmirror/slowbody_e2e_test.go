package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestSlowAndOversizedBodies opens raw connections that send a request body
// which never completes (Content-Length larger than what is sent) or that
// is larger than the route's limit, against the real server with a 2 s
// read timeout. Every such request must be answered with a JSON error and
// the connection closed by the server within the read timeout (plus a
// small margin), whatever the route: before, a body that never arrived held
// the connection open with no time limit.
func TestSlowAndOversizedBodies(t *testing.T) {
	t.Parallel()
	const readTimeout = 2 * time.Second
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)), "SERVICE_HTTP_READ_TIMEOUT="+readTimeout.String(),
		"SERVICE_HOST=127.0.0.1")
	addr := strings.TrimPrefix(s.baseURL, "http://")
	admin := "Authorization: Bearer " + s.token + "\r\n"
	big := "{" + strings.Repeat(`"k":1,`, 1000) // 6 KB, more than login's 4 KiB

	cases := []struct {
		name    string
		request string // headers and the part of the body that is sent
		status  int
		message string
	}{
		{"login, body never completes", "POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
			http.StatusRequestTimeout, "not received in time"},
		{"create user, body never completes", "POST /v1/users HTTP/1.1\r\nHost: x\r\n" + admin + "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"username\":",
			http.StatusRequestTimeout, "not received in time"},
		{"create mirror, body never completes", "POST /v1/mirrors HTTP/1.1\r\nHost: x\r\n" + admin + "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{",
			http.StatusRequestTimeout, "not received in time"},
		{"login, declared too large", "POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n" + big,
			http.StatusRequestEntityTooLarge, "limit of this endpoint is 4 KiB"},
		{"login, too large and never completes", "POST /v1/auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n", len(big), big), http.StatusRequestEntityTooLarge, "limit of this endpoint is 4 KiB"},
		{"no token, body never completes", "POST /v1/users HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
			http.StatusUnauthorized, ""},
		{"route without a body", "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
			http.StatusOK, ""},
		{"unknown route", "POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{",
			http.StatusNotFound, "No endpoint"},
	}
	// All at once, as a client holding connections would.
	var wg sync.WaitGroup
	for _, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := slowRequest(addr, c.request, c.status, c.message, readTimeout+1500*time.Millisecond); err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
		}()
	}
	wg.Wait()

	// Headers over the API's 64 KiB limit: a JSON 431 (net/http's own,
	// plain text, only comes far above it).
	if err := slowRequest(addr, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "+strings.Repeat("a", 100<<10)+"\r\n\r\n",
		http.StatusRequestHeaderFieldsTooLarge, "64 KiB", time.Second); err != nil {
		t.Errorf("large headers: %v", err)
	}

	// The service still serves ordinary requests.
	var health struct{ Status string }
	s.mustDo(http.MethodGet, "/health", nil, http.StatusOK, &health)
}

// slowRequest sends request on a new connection and never sends more. It
// requires, within limit of sending, an answer with status whose JSON error
// (for an error status) contains message, and the server closing the
// connection.
func slowRequest(addr, request string, status int, message string, limit time.Duration) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, request); err != nil {
		return err
	}
	// Wait well past the limit so that a connection left open shows as
	// such instead of as an early error.
	_ = conn.SetReadDeadline(start.Add(limit + 5*time.Second))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return fmt.Errorf("no answer after %s: %w", time.Since(start), err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read the answer's body: %w", err)
	}
	if resp.StatusCode != status {
		return fmt.Errorf("status %d, want %d: %s", resp.StatusCode, status, raw)
	}
	if status >= 400 {
		var body struct{ Error string }
		if err := json.Unmarshal(raw, &body); err != nil || body.Error == "" || !strings.Contains(body.Error, message) {
			return fmt.Errorf("want a JSON error containing %q, got %q (%v)", message, raw, err)
		}
	}
	if !resp.Close {
		return errors.New("the answer does not say Connection: close")
	}
	// The server closes the connection: EOF (or a reset), not a timeout.
	_, err = r.ReadByte()
	closed := time.Since(start)
	var netErr net.Error
	switch {
	case err == nil:
		return errors.New("the server sent more after the answer")
	case errors.As(err, &netErr) && netErr.Timeout():
		return fmt.Errorf("the connection was still open after %s", closed)
	case closed > limit:
		return fmt.Errorf("the connection was closed after %s, want at most %s", closed, limit)
	}
	return nil
}
