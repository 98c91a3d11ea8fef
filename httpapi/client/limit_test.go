package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// TestResponseTooLarge checks that the client stops reading at its limit,
// whether the server streams without end or announces a large length, for
// successful and error answers alike, and reads any size when told to.
func TestResponseTooLarge(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/mirrors": // endless
			_, _ = w.Write([]byte("["))
			chunk := []byte(strings.Repeat(`{"name":"x"},`, 1000))
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/v1/peers": // announced, and an error
			w.Header().Set("Content-Length", strconv.Itoa(64<<20))
			w.WriteHeader(http.StatusBadGateway)
		case "/v1/users": // just over a small limit
			_, _ = w.Write([]byte(`[{"username":"` + strings.Repeat("u", 2000) + `"}]`))
		}
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c := client.New(srv.URL, "")
	var tooLarge *client.ResponseTooLargeError
	if _, err := c.ListMirrors(ctx); !errors.As(err, &tooLarge) || tooLarge.Limit != client.DefaultMaxResponseBytes || tooLarge.Operation != "list-mirrors" {
		t.Fatalf("endless body: %v", err)
	}
	if client.IsConnectionError(tooLarge) {
		t.Fatal("a response too large counts as a connection error")
	}
	if _, err := c.ListPeers(ctx); !errors.As(err, &tooLarge) {
		t.Fatalf("announced 64 MiB: %v", err)
	}
	c.MaxResponseBytes = 1000
	if _, err := c.ListUsers(ctx); !errors.As(err, &tooLarge) || tooLarge.Limit != 1000 {
		t.Fatalf("over a 1000-byte limit: %v", err)
	}
	c.MaxResponseBytes = -1
	if users, err := c.ListUsers(ctx); err != nil || len(users) != 1 {
		t.Fatalf("no limit: %v %v", users, err)
	}
}
