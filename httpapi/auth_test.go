package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/httpapi"
)

func TestLogin(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var out struct{ Token, Username, Role string }
	b.mustDecode(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "admin", "password": "admin-password"}, http.StatusOK, &out)
	require.NotEmpty(t, out.Token)
	require.Equal(t, "admin", out.Username)
	require.Equal(t, "admin", out.Role)

	msg := b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "admin", "password": "wrong"}, http.StatusUnauthorized)
	require.Equal(t, "Invalid credentials", msg)
	msg = b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "ghost", "password": "whatever"}, http.StatusUnauthorized)
	require.Equal(t, "Invalid credentials", msg)
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "admin"}, http.StatusBadRequest, "password")
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"password": "x"}, http.StatusBadRequest, "username")
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "", "password": "x"}, http.StatusBadRequest, "username")
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "admin", "password": strings.Repeat("p", 73)}, http.StatusBadRequest, "72 bytes")
	// Usernames are at most 128 characters, so a long one is a 400, not a failed insert into login_failures.
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": strings.Repeat("u", 1000), "password": "x"}, http.StatusBadRequest, "username")
	// A login body is at most 4 KiB.
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": strings.Repeat("u", 100000), "password": "x"}, http.StatusRequestEntityTooLarge, "4 KiB")

	var me struct{ Username, Role string }
	b.mustDecode(http.MethodGet, "/v1/auth/me", b.viewerToken, nil, http.StatusOK, &me)
	require.Equal(t, "viewer", me.Username)
	require.Equal(t, "viewer", me.Role)
}

func TestTokenAttacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Take the admin token's claims and re-sign them in hostile ways.
	var claims jwt.MapClaims
	_, _, err := jwt.NewParser().ParseUnverified(b.adminToken, &claims)
	require.NoError(t, err)

	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	secret, err := b.store.JWTSecret(t.Context()) // stored encrypted: decrypt it as the service does
	require.NoError(t, err)
	hs384, err := jwt.NewWithClaims(jwt.SigningMethodHS384, claims).SignedString(secret)
	require.NoError(t, err)
	wrongSecret, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte("another-secret-another-secret-another-secret"))
	require.NoError(t, err)
	good, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	require.NoError(t, err)
	b.mustDo(http.MethodGet, "/v1/auth/me", good, nil, http.StatusOK)

	for name, token := range map[string]string{
		"alg none": none, "HS384": hs384, "wrong secret": wrongSecret, "garbage": "not.a.token", "empty segments": "..",
		"truncated": b.adminToken[:len(b.adminToken)-5],
	} {
		t.Run(name, func(t *testing.T) {
			b.requireError(http.MethodGet, "/v1/auth/me", token, nil, http.StatusUnauthorized, "Invalid token")
		})
	}
	b.requireError(http.MethodGet, "/v1/auth/me", "", nil, http.StatusUnauthorized, "Authorization: Bearer")
	// A non-Bearer scheme is no token.
	req, err := http.NewRequest(http.MethodGet, b.server.URL+"/v1/auth/me", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Basic YWRtaW46YWRtaW4tcGFzc3dvcmQ=")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestDeletedUserAndRoleChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "bob", "password": "bob-password", "role": "admin"}, http.StatusCreated)
	bob := b.login("bob", "bob-password")
	b.mustDo(http.MethodGet, "/v1/users", bob, nil, http.StatusOK)

	// Demoted (here with SQL; the catalog bumps the token version): the old
	// token is revoked; a new one has the viewer's rights.
	b.exec(`UPDATE users SET role = 'viewer' WHERE username = 'bob'`)
	b.requireError(http.MethodGet, "/v1/peers", bob, nil, http.StatusUnauthorized, "Token revoked", "log in again")
	bob = b.login("bob", "bob-password")
	b.requireError(http.MethodGet, "/v1/users", bob, nil, http.StatusForbidden, "admin")
	b.mustDo(http.MethodGet, "/v1/peers", bob, nil, http.StatusOK)
	// An update that changes neither password nor role revokes nothing.
	b.exec(`UPDATE users SET username = username WHERE username = 'bob'`)
	b.mustDo(http.MethodGet, "/v1/peers", bob, nil, http.StatusOK)

	// Deleted: the token stops working, even if a user of the same name comes back.
	b.mustDo(http.MethodDelete, "/v1/users/bob", b.adminToken, nil, http.StatusOK)
	b.requireError(http.MethodGet, "/v1/auth/me", bob, nil, http.StatusUnauthorized)
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "bob", "password": "bob-password", "role": "admin"}, http.StatusCreated)
	b.requireError(http.MethodGet, "/v1/auth/me", bob, nil, http.StatusUnauthorized)
}

// TestChangePasswordKeepsTokens checks the API specification's default:
// changing a password does not invalidate existing tokens; the new password
// applies to later logins.
func TestChangePasswordKeepsTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.viewerToken
	other := b.login("viewer", "viewer-password") // a second session of the same user
	var out map[string]any
	b.mustDecode(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "viewer-password", "new_password": "brand-new"}, http.StatusOK, &out)
	require.Contains(t, out["message"], "stay valid")
	require.NotContains(t, out, "expires_at")
	require.NotContains(t, out, "expires_in")
	fresh, _ := out["token"].(string)
	for _, token := range []string{old, other, fresh} {
		b.mustDo(http.MethodGet, "/v1/auth/me", token, nil, http.StatusOK)
		b.mustDo(http.MethodGet, "/v1/peers", token, nil, http.StatusOK)
	}
	require.NotContains(t, tokenClaims(t, fresh), "exp")
	// The new password applies to later logins, the old one no longer does.
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "viewer", "password": "viewer-password"}, http.StatusUnauthorized, "Invalid credentials")
	b.mustDo(http.MethodGet, "/v1/auth/me", b.login("viewer", "brand-new"), nil, http.StatusOK)
	// The old token can change the password again (it is still the user's).
	b.mustDo(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "brand-new", "new_password": "third"}, http.StatusOK)
	b.mustDo(http.MethodGet, "/v1/auth/me", old, nil, http.StatusOK)

	// A deleted user's tokens stay refused, revocation setting or not.
	b.mustDo(http.MethodDelete, "/v1/users/viewer", b.adminToken, nil, http.StatusOK)
	for _, token := range []string{old, other, fresh} {
		b.requireError(http.MethodGet, "/v1/auth/me", token, nil, http.StatusUnauthorized, "no longer exists")
	}
}

// TestChangePasswordRevokes checks SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE:
// a password change revokes every token the user held.
func TestChangePasswordRevokes(t *testing.T) {
	t.Parallel()
	b := setupWith(t, func(cfg *httpapi.Config) {
		cfg.TokenTTL = 12 * time.Hour
		cfg.RevokeTokensOnPasswordChange = true
	})
	old := b.viewerToken
	b.requireError(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "nope", "new_password": "new-one"}, http.StatusUnauthorized, "Current password")
	b.requireError(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "viewer-password"}, http.StatusBadRequest, "new_password")
	b.requireError(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"new_password": "x"}, http.StatusBadRequest, "current_password")
	b.requireError(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "viewer-password", "new_password": strings.Repeat("é", 40)}, http.StatusBadRequest, "72 bytes")
	b.requireError(http.MethodPost, "/v1/auth/change-password", "", map[string]any{"current_password": "a", "new_password": "b"}, http.StatusUnauthorized)

	// Setting the current password again changes nothing: tokens stay valid.
	var same struct{ Message, Token string }
	b.mustDecode(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "viewer-password", "new_password": "viewer-password"}, http.StatusOK, &same)
	require.Contains(t, same.Message, "unchanged")
	b.mustDo(http.MethodGet, "/v1/auth/me", old, nil, http.StatusOK)
	other := b.login("viewer", "viewer-password") // a second session of the same user

	var out struct {
		Message, Token string
		ExpiresIn      int64 `json:"expires_in"`
	}
	b.mustDecode(http.MethodPost, "/v1/auth/change-password", old, map[string]any{"current_password": "viewer-password", "new_password": "brand-new"}, http.StatusOK, &out)
	require.Contains(t, out.Message, "revoked")
	require.Equal(t, true, b.lastAudit("change-password").Details["tokens_revoked"])
	require.Equal(t, int64(12*3600), out.ExpiresIn)
	// Every earlier token of the user is revoked, the caller's and the other session's.
	for _, token := range []string{old, other, same.Token} {
		b.requireError(http.MethodGet, "/v1/auth/me", token, nil, http.StatusUnauthorized, "Token revoked", "log in again")
	}
	// The token in the response works, and so does a new login; other users are unaffected.
	b.mustDo(http.MethodGet, "/v1/auth/me", out.Token, nil, http.StatusOK)
	b.requireError(http.MethodPost, "/v1/auth/login", "", map[string]any{"username": "viewer", "password": "viewer-password"}, http.StatusUnauthorized, "Invalid credentials")
	b.mustDo(http.MethodGet, "/v1/auth/me", b.login("viewer", "brand-new"), nil, http.StatusOK)
	b.mustDo(http.MethodGet, "/v1/auth/me", b.adminToken, nil, http.StatusOK)
}

func TestUsers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var created struct {
		ID             int64
		Username, Role string
	}
	b.mustDecode(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "carol", "password": "pw", "role": "viewer"}, http.StatusCreated, &created)
	require.NotZero(t, created.ID)
	require.Equal(t, "carol", created.Username)
	require.Equal(t, "viewer", created.Role)

	b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "carol", "password": "pw", "role": "viewer"}, http.StatusConflict, "carol")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "dave", "password": "pw", "role": "root"}, http.StatusBadRequest, "role")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "dave", "role": "viewer"}, http.StatusBadRequest, "password")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"password": "pw", "role": "viewer"}, http.StatusBadRequest, "username")
	b.requireError(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "dave", "password": strings.Repeat("x", 73), "role": "viewer"}, http.StatusBadRequest, "72 bytes")

	var users []struct {
		ID             int64
		Username, Role string
		CreatedAt      time.Time `json:"created_at"`
		PasswordHash   *string   `json:"password_hash"`
	}
	b.mustDecode(http.MethodGet, "/v1/users", b.adminToken, nil, http.StatusOK, &users)
	require.Len(t, users, 3)
	for _, u := range users {
		require.NotZero(t, u.ID)
		require.False(t, u.CreatedAt.IsZero())
		require.Nil(t, u.PasswordHash)
	}
	raw := b.mustDo(http.MethodGet, "/v1/users", b.adminToken, nil, http.StatusOK)
	require.NotContains(t, string(raw), "$2a$")

	b.requireError(http.MethodDelete, "/v1/users/admin", b.adminToken, nil, http.StatusBadRequest, "your own account")
	b.requireError(http.MethodDelete, "/v1/users/nobody", b.adminToken, nil, http.StatusNotFound, "nobody")
	var del struct{ Deleted string }
	b.mustDecode(http.MethodDelete, "/v1/users/carol", b.adminToken, nil, http.StatusOK, &del)
	require.Equal(t, "carol", del.Deleted)
}

// TestMeDefaultPassword checks GET /v1/auth/me's default_password: true
// while the user's password is still the default "admin" (anyone can
// guess it), false once it is changed, and false for other passwords.
func TestMeDefaultPassword(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var me struct {
		Username        string `json:"username"`
		DefaultPassword *bool  `json:"default_password"`
	}
	b.mustDecode(http.MethodGet, "/v1/auth/me", b.adminToken, nil, http.StatusOK, &me)
	require.NotNil(t, me.DefaultPassword, "default_password is always present")
	require.False(t, *me.DefaultPassword, "admin-password is not the default")

	// An account whose password is the default, as the first admin's is
	// when SERVICE_ADMIN_PASSWORD is unset.
	b.mustDo(http.MethodPost, "/v1/users", b.adminToken, map[string]any{"username": "first", "password": "admin", "role": "admin"}, http.StatusCreated)
	first := b.login("first", "admin")
	for range 2 { // the second answer comes from the remembered comparison
		me.DefaultPassword = nil
		b.mustDecode(http.MethodGet, "/v1/auth/me", first, nil, http.StatusOK, &me)
		require.Equal(t, "first", me.Username)
		require.NotNil(t, me.DefaultPassword)
		require.True(t, *me.DefaultPassword, "the default password is in use")
	}
	b.mustDo(http.MethodPost, "/v1/auth/change-password", first, map[string]any{"current_password": "admin", "new_password": "not-the-default-1"}, http.StatusOK)
	me.DefaultPassword = nil
	b.mustDecode(http.MethodGet, "/v1/auth/me", first, nil, http.StatusOK, &me)
	require.NotNil(t, me.DefaultPassword)
	require.False(t, *me.DefaultPassword, "after the change the default password is no longer in use")
}
