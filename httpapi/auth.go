package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/pgmirror/pgmirror/db"
)

// claims are the contents of an API token. Tokens do not expire; they name
// the user by id (sub) and username.
type claims struct {
	Username string `json:"username"`
	jwt.RegisteredClaims
}

func (h *handlers) issueToken(u db.User) (string, error) {
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{
		Username: u.Username,
		RegisteredClaims: jwt.RegisteredClaims{
			Subject:  strconv.FormatInt(u.ID, 10),
			IssuedAt: jwt.NewNumericDate(time.Now()),
			Issuer:   "pgmirror",
		},
	})
	return t.SignedString(h.secret)
}

// parseToken verifies an HS256 token and returns the user id and username
// it names.
func (h *handlers) parseToken(raw string) (int64, string, error) {
	var c claims
	_, err := jwt.ParseWithClaims(raw, &c, func(*jwt.Token) (any, error) { return h.secret, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer("pgmirror"))
	if err != nil {
		return 0, "", err
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil {
		return 0, "", errors.New("token subject is not a user id")
	}
	return id, c.Username, nil
}

type userKey struct{}

// currentUser returns the authenticated user of the request.
func currentUser(ctx context.Context) db.User {
	u, _ := ctx.Value(userKey{}).(db.User)
	return u
}

// authMiddleware enforces each operation's permission level. It loads the
// token's user from the catalog on every request, so deleted users are
// rejected and role changes apply at once.
func (h *handlers) authMiddleware(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
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
		id, username, err := h.parseToken(strings.TrimSpace(raw))
		if err != nil {
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "Invalid token: log in again with POST /v1/auth/login")
			return
		}
		u, err := h.store.UserGetByID(ctx.Context(), id)
		if err != nil || u.Username != username {
			if err != nil && !errors.Is(err, db.ErrNotFound) {
				writeError(api, ctx, h.internal(ctx.Context(), "check the token", err))
				return
			}
			_ = huma.WriteErr(api, ctx, http.StatusUnauthorized, "Invalid token: its user no longer exists; log in again with POST /v1/auth/login")
			return
		}
		if perm == adminOnly && u.Role != db.RoleAdmin {
			_ = huma.WriteErr(api, ctx, http.StatusForbidden, "Forbidden: this operation needs the admin role, and user "+strconv.Quote(u.Username)+" is a "+u.Role)
			return
		}
		next(huma.WithValue(ctx, userKey{}, u))
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
		Username string `json:"username" minLength:"1" doc:"Username."`
		Password string `json:"password" minLength:"1" doc:"Password."`
	}
}

type loginOutput struct {
	Body struct {
		Token    string `json:"token" doc:"Bearer token (JWT) for the Authorization header. It does not expire."`
		Username string `json:"username"`
		Role     string `json:"role" enum:"admin,viewer"`
	}
}

type meOutput struct {
	Body struct {
		Username string `json:"username"`
		Role     string `json:"role" enum:"admin,viewer"`
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

func message(msg string) *messageOutput {
	out := &messageOutput{}
	out.Body.Message = msg
	return out
}

func (h *handlers) registerAuth(api huma.API) {
	register(api, open, huma.Operation{
		OperationID: "login", Method: http.MethodPost, Path: "/v1/auth/login", Tags: []string{"Auth"},
		Summary: "Log in", Description: "Exchange a username and password for a bearer token.",
		Errors: []int{http.StatusBadRequest, http.StatusUnauthorized},
	}, h.login)
	register(api, authed, huma.Operation{
		OperationID: "me", Method: http.MethodGet, Path: "/v1/auth/me", Tags: []string{"Auth"},
		Summary: "Current user", Description: "The user the token belongs to.",
	}, h.me)
	register(api, authed, huma.Operation{
		OperationID: "change-password", Method: http.MethodPost, Path: "/v1/auth/change-password", Tags: []string{"Auth"},
		Summary: "Change own password", Description: "Existing tokens stay valid; the new password applies to later logins.",
		Errors: []int{http.StatusBadRequest},
	}, h.changePassword)
}

func (h *handlers) login(ctx context.Context, in *loginInput) (*loginOutput, error) {
	if err := checkPasswordLength("password", in.Body.Password); err != nil {
		return nil, err
	}
	invalid := errorf(http.StatusUnauthorized, "Invalid credentials")
	u, err := h.store.UserGetByUsername(ctx, in.Body.Username)
	if errors.Is(err, db.ErrNotFound) {
		compareDummy(in.Body.Password)
		return nil, invalid
	}
	if err != nil {
		return nil, h.internal(ctx, "log in", err)
	}
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(in.Body.Password)) != nil {
		return nil, invalid
	}
	token, err := h.issueToken(u)
	if err != nil {
		return nil, h.internal(ctx, "issue a token", err)
	}
	out := &loginOutput{}
	out.Body.Token, out.Body.Username, out.Body.Role = token, u.Username, u.Role
	return out, nil
}

func (h *handlers) me(ctx context.Context, _ *struct{}) (*meOutput, error) {
	u := currentUser(ctx)
	out := &meOutput{}
	out.Body.Username, out.Body.Role = u.Username, u.Role
	return out, nil
}

func (h *handlers) changePassword(ctx context.Context, in *changePasswordInput) (*messageOutput, error) {
	if err := checkPasswordLength("new_password", in.Body.NewPassword); err != nil {
		return nil, err
	}
	u := currentUser(ctx)
	if bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(in.Body.CurrentPassword)) != nil {
		return nil, errorf(http.StatusUnauthorized, "Current password is incorrect")
	}
	hash, err := db.HashPassword(in.Body.NewPassword)
	if err != nil {
		return nil, h.internal(ctx, "hash the new password", err)
	}
	if err := h.store.UserSetPasswordHash(ctx, u.ID, hash); err != nil {
		return nil, h.internal(ctx, "change the password", err)
	}
	return message("Password changed; existing tokens stay valid and the new password applies to later logins"), nil
}
