package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/httpapi"
)

// resign signs claims with the catalog's JWT secret, as only the service can.
func (b *bundle) resign(claims jwt.MapClaims) string {
	b.t.Helper()
	secret, err := b.store.JWTSecret(b.t.Context()) // stored encrypted: decrypt it as the service does
	require.NoError(b.t, err)
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	require.NoError(b.t, err)
	return token
}

func tokenClaims(t *testing.T, token string) jwt.MapClaims {
	t.Helper()
	var claims jwt.MapClaims
	_, _, err := jwt.NewParser().ParseUnverified(token, &claims)
	require.NoError(t, err)
	return claims
}

func TestTokenExpiry(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) { cfg.TokenTTL = 90 * time.Minute })

	var out struct {
		Token     string
		ExpiresAt time.Time `json:"expires_at"`
		ExpiresIn int64     `json:"expires_in"`
	}
	before := time.Now()
	b.mustDecode(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "viewer", "password": "viewer-password"}, http.StatusOK, &out)
	require.Equal(t, int64(90*60), out.ExpiresIn)
	require.WithinDuration(t, before.Add(90*time.Minute), out.ExpiresAt, 5*time.Second)
	claims := tokenClaims(t, out.Token)
	exp, err := claims.GetExpirationTime()
	require.NoError(t, err)
	require.Equal(t, out.ExpiresAt.Unix(), exp.Unix(), "the token's exp claim is the expires_at of the response")
	b.mustDo(http.MethodGet, "/v1/auth/me", out.Token, nil, http.StatusOK)

	// The same claims, expired a minute ago: refused with the expiry message.
	expired := jwt.MapClaims{}
	for k, v := range claims {
		expired[k] = v
	}
	expired["exp"] = time.Now().Add(-time.Minute).Unix()
	msg := b.requireError(http.MethodGet, "/v1/auth/me", b.resign(expired), nil, http.StatusUnauthorized, "token expired: log in again")
	require.NotContains(t, msg, "Invalid")
	b.requireError(http.MethodGet, "/v1/peers", b.resign(expired), nil, http.StatusUnauthorized, "token expired")
	// Expired and forged: the signature is checked first, so it is just invalid.
	forged, err := jwt.NewWithClaims(jwt.SigningMethodHS256, expired).SignedString([]byte("not-the-secret-not-the-secret-not-the-secret"))
	require.NoError(t, err)
	b.requireError(http.MethodGet, "/v1/auth/me", forged, nil, http.StatusUnauthorized, "Invalid token")

	// Setting a lifetime bounds the tokens already out, counted from iat: a
	// token without exp (issued while tokens did not expire) works while it
	// is younger than the lifetime and is refused as expired after; so is a
	// token whose exp lies beyond the lifetime (issued under a longer one).
	noExp := jwt.MapClaims{}
	for k, v := range claims {
		if k != "exp" {
			noExp[k] = v
		}
	}
	b.mustDo(http.MethodGet, "/v1/auth/me", b.resign(noExp), nil, http.StatusOK)
	noExp["iat"] = time.Now().Add(-91 * time.Minute).Unix()
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(noExp), nil, http.StatusUnauthorized, "token expired: log in again")
	longLived := jwt.MapClaims{}
	for k, v := range claims {
		longLived[k] = v
	}
	longLived["iat"] = time.Now().Add(-2 * time.Hour).Unix()
	longLived["exp"] = time.Now().Add(28 * 24 * time.Hour).Unix()
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(longLived), nil, http.StatusUnauthorized, "token expired: log in again")
	// Without iat there is nothing to count the lifetime from.
	delete(noExp, "iat")
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(noExp), nil, http.StatusUnauthorized, "Invalid token")

	// A token of an older token version is revoked, even though it has not expired.
	old := jwt.MapClaims{}
	for k, v := range claims {
		old[k] = v
	}
	old["ver"] = claims["ver"].(float64) - 1
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(old), nil, http.StatusUnauthorized, "Token revoked")
}

// TestTokenDefaultNoExpiry checks the API specification's default: tokens
// carry no exp, the login response says nothing of an expiry, and a token
// stays valid however old it is; an exp it does carry is still honoured.
func TestTokenDefaultNoExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out map[string]any
	b.mustDecode(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "viewer", "password": "viewer-password"}, http.StatusOK, &out)
	require.NotContains(t, out, "expires_at")
	require.NotContains(t, out, "expires_in")
	token, _ := out["token"].(string)
	claims := tokenClaims(t, token)
	require.NotContains(t, claims, "exp", "default tokens do not expire")
	require.Contains(t, claims, "iat")
	b.mustDo(http.MethodGet, "/v1/auth/me", token, nil, http.StatusOK)

	// Issued a year ago: still valid.
	old := jwt.MapClaims{}
	for k, v := range claims {
		old[k] = v
	}
	old["iat"] = time.Now().Add(-365 * 24 * time.Hour).Unix()
	b.mustDo(http.MethodGet, "/v1/auth/me", b.resign(old), nil, http.StatusOK)
	// A token that carries an expiry in the past (issued while the service
	// had a lifetime) is refused.
	old["exp"] = time.Now().Add(-time.Minute).Unix()
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(old), nil, http.StatusUnauthorized, "token expired")
}

// TestTokenExpiresOnTime lets a token issued with a one-second lifetime run
// out for real (past the five seconds of clock leeway).
func TestTokenExpiresOnTime(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) { cfg.TokenTTL = time.Second })
	token := b.login("viewer", "viewer-password")
	b.mustDo(http.MethodGet, "/v1/auth/me", token, nil, http.StatusOK)
	time.Sleep(6500 * time.Millisecond)
	b.requireError(http.MethodGet, "/v1/auth/me", token, nil, http.StatusUnauthorized, "token expired: log in again")
}
