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

	// A token without exp (as issued before tokens expired) is no longer accepted.
	noExp := jwt.MapClaims{}
	for k, v := range claims {
		if k != "exp" {
			noExp[k] = v
		}
	}
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(noExp), nil, http.StatusUnauthorized, "Invalid token")

	// A token of an older token version is revoked, even though it has not expired.
	old := jwt.MapClaims{}
	for k, v := range claims {
		old[k] = v
	}
	old["ver"] = claims["ver"].(float64) - 1
	b.requireError(http.MethodGet, "/v1/auth/me", b.resign(old), nil, http.StatusUnauthorized, "Token revoked")
}

func TestTokenDefaultLifetime(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claims := tokenClaims(t, b.adminToken)
	exp, err := claims.GetExpirationTime()
	require.NoError(t, err)
	iat, err := claims.GetIssuedAt()
	require.NoError(t, err)
	require.Equal(t, 12*time.Hour, exp.Sub(iat.Time), "default lifetime")
}
