package metrics

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHandlerToken serves the metrics with a token on a real HTTP server:
// the bearer scheme is accepted in any case, as by the API; a wrong token,
// another scheme or none is a JSON 401.
func TestHandlerToken(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(New().Handler("s3cret-token"))
	defer server.Close()
	for _, c := range []struct {
		header string
		want   int
	}{
		{"Bearer s3cret-token", http.StatusOK},
		{"bearer s3cret-token", http.StatusOK},
		{"BEARER s3cret-token", http.StatusOK},
		{"Bearer  s3cret-token ", http.StatusOK},
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer other", http.StatusUnauthorized},
		{"Basic s3cret-token", http.StatusUnauthorized},
		{"Bearers3cret-token", http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodGet, server.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error string }
		if c.want == http.StatusUnauthorized {
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Error == "" {
				t.Errorf("%q: want a JSON error, got %v", c.header, err)
			}
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("Authorization %q: status %d, want %d", c.header, resp.StatusCode, c.want)
		}
	}
}
