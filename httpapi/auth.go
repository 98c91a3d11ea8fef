package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/pgmirror/pgmirror/db"
)

// claims are the contents of an API token: the user by id (sub) and
// username, the user's token version (ver), when it was issued (iat) and,
// when the service has a token lifetime, an expiry (exp).
type claims struct {
	Username string `json:"username"`
	// Version is the user's token version when the token was issued; a
	// role change (or a password change when revocation is on) increments
	// the stored one, revoking the token.
	Version int64 `json:"ver"`
	jwt.RegisteredClaims
}

// tokenLeeway is the clock skew allowed when checking a token's times.
const tokenLeeway = 5 * time.Second

// issueToken signs a token for u. It carries an expiry only when the
// service has a token lifetime; expires is then that expiry, else zero.
func (h *handlers) issueToken(u db.User) (token string, expires time.Time, err error) {
	now := time.Now()
	c := claims{
		Username: u.Username,
		Version:  u.TokenVersion,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:  strconv.FormatInt(u.ID, 10),
			IssuedAt: jwt.NewNumericDate(now),
			Issuer:   "pgmirror",
		},
	}
	if h.tokenTTL > 0 {
		expires = now.Add(h.tokenTTL)
		c.ExpiresAt = jwt.NewNumericDate(expires)
	}
	token, err = jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(h.secret)
	return token, expires, err
}

// tokenExpiry gives the expires_at and expires_in of a response for a token
// that expires at expires: both nil (left out) for a token without expiry.
func (h *handlers) tokenExpiry(expires time.Time) (*time.Time, *int64) {
	if expires.IsZero() {
		return nil, nil
	}
	at, in := expires.UTC(), int64(h.tokenTTL.Seconds())
	return &at, &in
}

// tokenDescription describes the tokens of a service with the given
// settings, for the OpenAPI document.
func tokenDescription(ttl time.Duration, revokeOnPasswordChange bool) string {
	d := "Token from POST /v1/auth/login. "
	if ttl > 0 {
		d += "Tokens expire after the service's token lifetime (expires_at and expires_in in the login response). "
	} else {
		d += "Tokens do not expire: they stay valid until the JWT signing secret is rotated. "
	}
	if revokeOnPasswordChange {
		d += "Changing a password revokes every token of the user issued before. "
	} else {
		d += "Changing a password does not invalidate existing tokens; the new password applies to later logins. "
	}
	return d + "Deleting a user, or changing its role, revokes its tokens."
}

// errTokenSubject means a token's subject is not a user id.
var errTokenSubject = errors.New("token subject is not a user id")

// errTokenTooOld means a token was issued longer ago than the token
// lifetime (it may carry a later expiry, or none, from before the lifetime
// was set or shortened).
var errTokenTooOld = fmt.Errorf("%w: issued longer ago than the token lifetime", jwt.ErrTokenExpired)

// errTokenNoIssuedAt means a token lacks the iat claim, which the token
// lifetime is counted from (the service always sets it).
var errTokenNoIssuedAt = errors.New("token has no issued-at time")

// parseToken verifies an HS256 token and returns its claims and the user id
// it names. A token's expiry, when it has one, is always checked. With a
// token lifetime, a token is also refused once it was issued longer ago than
// the lifetime, whatever its expiry says or whether it has one, so that
// setting or shortening SERVICE_TOKEN_TTL bounds the tokens already out. An
// expired token gives an error matching jwt.ErrTokenExpired.
func (h *handlers) parseToken(raw string) (claims, int64, error) {
	var c claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return h.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer("pgmirror"),
		jwt.WithLeeway(tokenLeeway))
	if err != nil {
		return claims{}, 0, err
	}
	if h.tokenTTL > 0 {
		if c.IssuedAt == nil {
			return claims{}, 0, errTokenNoIssuedAt
		}
		if time.Since(c.IssuedAt.Time) > h.tokenTTL+tokenLeeway {
			return claims{}, 0, errTokenTooOld
		}
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil {
		return claims{}, 0, errTokenSubject
	}
	return c, id, nil
}

type userKey struct{}

// currentUser returns the authenticated user of the request.
func currentUser(ctx context.Context) db.User {
	u, _ := ctx.Value(userKey{}).(db.User)
	return u
}

// authMiddleware enforces each operation's permission level. It loads the
// token's user from the catalog on every request, so deleted users are
// rejected and an increment of the user's token version (a role change, or
// a password change when revocation is on) revokes older tokens at once. It
// also keeps the client address for login throttling and records audited
// operations.
func (h *handlers) authMiddleware(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		var forwardedFor []string
		if len(h.logins.limits.TrustedProxies) > 0 {
			ctx.EachHeader(func(name, value string) {
				if strings.EqualFold(name, "X-Forwarded-For") {
					forwardedFor = append(forwardedFor, value)
				}
			})
		}
		ctx = huma.WithValue(ctx, clientAddrKey{}, clientAddress(ctx.RemoteAddr(), forwardedFor, h.logins.limits.TrustedProxies))
		perm, _ := ctx.Operation().Metadata["permission"].(permission)
		if perm == open {
			next(ctx)
			return
		}
		header := ctx.Header("Authorization")
		scheme, raw, ok := strings.Cut(header, " ")
		if header == "" || !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized,
				"Missing bearer token: log in with POST /v1/auth/login and send the header Authorization: Bearer <token>")
			return
		}
		c, id, err := h.parseToken(strings.TrimSpace(raw))
		if errors.Is(err, jwt.ErrTokenExpired) {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "token expired: log in again with POST /v1/auth/login")
			return
		}
		if err != nil {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "Invalid token: log in again with POST /v1/auth/login")
			return
		}
		u, err := h.store.UserGetByID(ctx.Context(), id)
		if err != nil || u.Username != c.Username {
			if err != nil && !errors.Is(err, db.ErrNotFound) {
				writeError(api, ctx, h.internal(ctx.Context(), "check the token", err))
				return
			}
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "Invalid token: its user no longer exists; log in again with POST /v1/auth/login")
			return
		}
		if c.Version != u.TokenVersion {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "Token revoked: the tokens of user "+strconv.Quote(u.Username)+
				" issued before a change of its password or role (or before an operator revoked them) are no longer valid; log in again with POST /v1/auth/login")
			return
		}
		ctx = huma.WithValue(ctx, userKey{}, u)
		setAccessUser(ctx.Context(), u.Username)
		ctx, finish := h.startAudit(ctx, u)
		if perm == adminOnly && u.Role != db.RoleAdmin {
			_ = huma.WriteErr(api, ctx, http.StatusForbidden, "Forbidden: this operation needs the admin role, and user "+strconv.Quote(u.Username)+" is a "+string(u.Role))
			finish()
			return
		}
		next(ctx)
		finish()
	}
}

var (
	dummyHashOnce sync.Once
	dummyHash     []byte
)

// compareDummy spends as long as a real password check, so that unknown
// usernames cannot be told apart by timing.
func compareDummy(password string) {
	dummyHashOnce.Do(func() {
		dummyHash, _ = bcrypt.GenerateFromPassword([]byte("pgmirror-dummy-password"), db.BcryptCost)
	})
	_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
}

func checkPasswordLength(field, password string) error {
	if len(password) > 72 {
		return errorf(http.StatusBadRequest, "Invalid request: %s is %d bytes long; passwords are limited to 72 bytes (a bcrypt limit): choose a shorter one", field, len(password))
	}
	return nil
}

type loginInput struct {
	Body struct {
		Username string `json:"username" minLength:"1" maxLength:"128" doc:"Username."`
		Password string `json:"password" minLength:"1" doc:"Password."`
	}
}

// noStore is the Cache-Control of answers that carry a token: no cache
// (a browser's, a proxy's) may keep one.
const noStore = "no-store"

type loginOutput struct {
	CacheControl string `header:"Cache-Control" doc:"no-store: the answer holds a token."`
	Body         struct {
		Token     string      `json:"token" doc:"Bearer token (JWT) for the Authorization header. By default it does not expire and stays valid until the JWT signing secret is rotated; see expires_at."`
		Username  string      `json:"username"`
		Role      db.UserRole `json:"role"`
		ExpiresAt *time.Time  `json:"expires_at,omitempty" doc:"When the token expires; present only when the service sets a token lifetime (SERVICE_TOKEN_TTL). Absent: the token does not expire."`
		ExpiresIn *int64      `json:"expires_in,omitempty" doc:"Seconds until the token expires; present only with expires_at."`
	}
}

type meOutput struct {
	Body struct {
		Username        string      `json:"username"`
		Role            db.UserRole `json:"role"`
		DefaultPassword bool        `json:"default_password" doc:"True while the user's password is still the well-known default \"admin\" (the first admin account's password when SERVICE_ADMIN_PASSWORD is unset), which anyone can guess: change it with change-password."`
	}
}

type changePasswordInput struct {
	Body struct {
		CurrentPassword string `json:"current_password" minLength:"1"`
		NewPassword     string `json:"new_password" minLength:"1" doc:"At most 72 bytes."`
	}
}

type messageOutput struct {
	Body struct {
		Message string `json:"message"`
	}
}

type changePasswordOutput struct {
	CacheControl string `header:"Cache-Control" doc:"no-store: the answer holds a token."`
	Body         struct {
		Message   string     `json:"message"`
		Token     string     `json:"token" doc:"A new token for the caller. Tokens issued before stay valid unless the service revokes them on a password change (SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true)."`
		ExpiresAt *time.Time `json:"expires_at,omitempty" doc:"When the new token expires; present only when the service sets a token lifetime."`
		ExpiresIn *int64     `json:"expires_in,omitempty" doc:"Seconds until the new token expires; present only with expires_at."`
	}
}

func message(msg string) *messageOutput {
	out := &messageOutput{}
	out.Body.Message = msg
	return out
}

func (h *handlers) registerAuth(api huma.API) {
	register(api, open, huma.Operation{
		OperationID: "login", Method: http.MethodPost, Path: "/v1/auth/login", Tags: []string{"Auth"}, MaxBodyBytes: loginMaxBody,
		Summary: "Log in",
		Description: "Exchange a username and password for a bearer token. By default tokens do not expire: they stay valid until the JWT signing secret is rotated " +
			"(a service with SERVICE_TOKEN_TTL set issues tokens that expire, and says when in expires_at). " +
			"Too many failed logins for a user name or from a client address within the throttling window are answered 429 with Retry-After, " +
			"even when the password is right.",
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusTooManyRequests},
	}, h.login)
	register(api, authed, huma.Operation{
		OperationID: "me", Method: http.MethodGet, Path: "/v1/auth/me", Tags: []string{"Auth"},
		Summary: "Current user", Description: "The user the token belongs to, and whether its password is still the default \"admin\" (default_password).",
	}, h.me)
	register(api, authed, huma.Operation{
		OperationID: "change-password", Method: http.MethodPost, Path: "/v1/auth/change-password", Tags: []string{"Auth"},
		Summary: "Change own password",
		Description: "The new password applies to later logins. Existing tokens stay valid, unless the service revokes them on a password change " +
			"(SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true: every token of the user issued before, including the one sent, is then refused). " +
			"Returns a new token either way. Setting the current password again changes nothing and revokes nothing.",
		Errors: []int{http.StatusBadRequest, http.StatusTooManyRequests},
	}, h.changePassword)
}

func (h *handlers) login(ctx context.Context, in *loginInput) (*loginOutput, error) {
	if err := checkPasswordLength("password", in.Body.Password); err != nil {
		return nil, err
	}
	u, err := h.verifyPassword(ctx, in.Body.Username, in.Body.Password, "log in")
	if errors.Is(err, errWrongPassword) {
		return nil, errorf(http.StatusUnauthorized, "Invalid credentials")
	}
	if err != nil {
		return nil, err
	}
	token, expires, err := h.issueToken(u)
	if err != nil {
		return nil, h.internal(ctx, "issue a token", err)
	}
	out := &loginOutput{CacheControl: noStore}
	out.Body.Token, out.Body.Username, out.Body.Role = token, u.Username, u.Role
	out.Body.ExpiresAt, out.Body.ExpiresIn = h.tokenExpiry(expires)
	return out, nil
}

// errWrongPassword means the user does not exist or the password is wrong.
var errWrongPassword = errors.New("wrong username or password")

// verifyPassword checks a user's password the one way every password is
// checked (login, and the current password of change-password):
//   - refused with 429 while the user name or the client address has used up
//     its failed attempts; checked again once a password check slot is held,
//     so parallel attempts overshoot the limit by at most the number of slots;
//   - the comparison holds one of the process's password check slots, and an
//     unknown user costs as long as a wrong password (no timing difference);
//   - a failure is counted for the user name and the address, a success
//     clears the user name's failures.
//
// It returns errWrongPassword for an unknown user or a wrong password, and
// API errors (429, 500) otherwise; what names the operation in a 500.
func (h *handlers) verifyPassword(ctx context.Context, username, password, what string) (db.User, error) {
	addr := clientAddr(ctx)
	refuseThrottled := func() error {
		who, retryAfter, err := h.logins.throttled(ctx, username, addr)
		if err != nil {
			return h.internal(ctx, what, err)
		}
		if who != "" {
			return tooManyRequests(retryAfter, "Too many failed logins for %s: try again in %d seconds", who, retryAfter)
		}
		return nil
	}
	if err := refuseThrottled(); err != nil {
		return db.User{}, err
	}
	release, err := h.logins.acquire(ctx)
	if err != nil {
		return db.User{}, err
	}
	defer release()
	if err := refuseThrottled(); err != nil {
		return db.User{}, err
	}
	u, err := h.store.UserGetByUsername(ctx, username)
	switch {
	case errors.Is(err, db.ErrNotFound):
		compareDummy(password)
	case err != nil:
		return db.User{}, h.internal(ctx, what, err)
	case bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(password)) == nil:
		if err := h.logins.succeed(ctx, username); err != nil {
			return db.User{}, h.internal(ctx, what, err)
		}
		return u, nil
	}
	if err := h.logins.fail(ctx, username, addr); err != nil {
		return db.User{}, h.internal(ctx, what, err)
	}
	return db.User{}, errWrongPassword
}

func (h *handlers) me(ctx context.Context, _ *struct{}) (*meOutput, error) {
	u := currentUser(ctx)
	out := &meOutput{}
	out.Body.Username, out.Body.Role = u.Username, u.Role
	out.Body.DefaultPassword = h.defaults.isDefault(u.PasswordHash)
	return out, nil
}

// defaultPasswords remembers, per stored password hash, whether it is the
// hash of db.DefaultAdminPassword: a bcrypt comparison costs tens of
// milliseconds of CPU, and the console asks GET /v1/auth/me every few
// seconds. A changed password has another hash (bcrypt salts each one),
// so an answer never goes stale; the map is emptied when it grows past a
// few hundred hashes.
type defaultPasswords struct {
	mu     sync.Mutex
	hashes map[string]bool
}

// isDefault reports whether hash is a hash of db.DefaultAdminPassword.
func (d *defaultPasswords) isDefault(hash string) bool {
	if hash == "" {
		return false
	}
	d.mu.Lock()
	known, ok := d.hashes[hash]
	d.mu.Unlock()
	if ok {
		return known
	}
	is := bcrypt.CompareHashAndPassword([]byte(hash), []byte(db.DefaultAdminPassword)) == nil
	d.mu.Lock()
	if d.hashes == nil || len(d.hashes) >= 256 {
		d.hashes = map[string]bool{}
	}
	d.hashes[hash] = is
	d.mu.Unlock()
	return is
}

func (h *handlers) changePassword(ctx context.Context, in *changePasswordInput) (*changePasswordOutput, error) {
	if err := checkPasswordLength("new_password", in.Body.NewPassword); err != nil {
		return nil, err
	}
	self := currentUser(ctx)
	setAuditTarget(ctx, self.Username)
	// The current password can be guessed like a login: it is checked the same way.
	u, err := h.verifyPassword(ctx, self.Username, in.Body.CurrentPassword, "change the password")
	if errors.Is(err, errWrongPassword) {
		return nil, errorf(http.StatusUnauthorized, "Current password is incorrect")
	}
	if err != nil {
		return nil, err
	}
	out := &changePasswordOutput{CacheControl: noStore}
	if in.Body.NewPassword == in.Body.CurrentPassword {
		setAuditDetails(ctx, map[string]any{"changed": false})
		out.Body.Message = "Password unchanged: the new password is the current one; existing tokens stay valid"
	} else {
		hash, err := db.HashPassword(in.Body.NewPassword)
		if err != nil {
			return nil, h.internal(ctx, "hash the new password", err)
		}
		setAuditDetails(ctx, map[string]any{"changed": true, "fields": []string{"password"}, "tokens_revoked": h.revokeOnPasswordChange})
		err = h.auditedTx(ctx, func(tx pgx.Tx) error {
			var err error
			u, err = h.store.With(tx).UserSetPasswordHash(ctx, u.ID, hash, h.revokeOnPasswordChange)
			return err
		})
		if err != nil {
			return nil, h.internal(ctx, "change the password", err)
		}
		if h.revokeOnPasswordChange {
			out.Body.Message = "Password changed: every token issued before is revoked; use the token in this response or log in again"
		} else {
			out.Body.Message = "Password changed: the new password applies to later logins; tokens issued before stay valid"
		}
	}
	token, expires, err := h.issueToken(u)
	if err != nil {
		return nil, h.internal(ctx, "issue a token", err)
	}
	out.Body.Token = token
	out.Body.ExpiresAt, out.Body.ExpiresIn = h.tokenExpiry(expires)
	return out, nil
}
