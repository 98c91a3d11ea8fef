package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
)

type userBody struct {
	ID        int64       `json:"id"`
	Username  string      `json:"username"`
	Role      db.UserRole `json:"role"`
	CreatedAt time.Time   `json:"created_at"`
}

type userListOutput struct {
	Body []userBody
}

type userCreateInput struct {
	Body struct {
		Username string      `json:"username" minLength:"1" maxLength:"128"`
		Password string      `json:"password" minLength:"1" doc:"At most 72 bytes."`
		Role     db.UserRole `json:"role"`
	}
}

type userCreateOutput struct {
	Body struct {
		ID       int64       `json:"id"`
		Username string      `json:"username"`
		Role     db.UserRole `json:"role"`
	}
}

type usernamePath struct {
	Username string `path:"username" doc:"Username."`
}

type deletedOutput struct {
	Body struct {
		Deleted string `json:"deleted"`
	}
}

func deleted(name string) *deletedOutput {
	out := &deletedOutput{}
	out.Body.Deleted = name
	return out
}

func (h *handlers) registerUsers(api huma.API) {
	register(api, adminOnly, huma.Operation{
		OperationID: "list-users", Method: http.MethodGet, Path: "/v1/users", Tags: []string{"Users"},
		Summary: "List users",
	}, h.listUsers)
	register(api, adminOnly, huma.Operation{
		OperationID: "create-user", Method: http.MethodPost, Path: "/v1/users", Tags: []string{"Users"},
		Summary: "Create a user", DefaultStatus: http.StatusCreated,
		Errors: []int{http.StatusBadRequest, http.StatusConflict},
	}, h.createUser)
	register(api, adminOnly, huma.Operation{
		OperationID: "delete-user", Method: http.MethodDelete, Path: "/v1/users/{username}", Tags: []string{"Users"},
		Summary: "Delete a user", Description: "Their tokens stop working at once. You cannot delete your own account.",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound},
	}, h.deleteUser)
}

func (h *handlers) listUsers(ctx context.Context, _ *struct{}) (*userListOutput, error) {
	users, err := h.store.UserList(ctx)
	if err != nil {
		return nil, h.internal(ctx, "list users", err)
	}
	out := &userListOutput{Body: make([]userBody, 0, len(users))}
	for _, u := range users {
		out.Body = append(out.Body, userBody{ID: u.ID, Username: u.Username, Role: u.Role, CreatedAt: u.CreatedAt})
	}
	return out, nil
}

func (h *handlers) createUser(ctx context.Context, in *userCreateInput) (*userCreateOutput, error) {
	if err := checkName("username", in.Body.Username); err != nil {
		return nil, err
	}
	if err := checkPasswordLength("password", in.Body.Password); err != nil {
		return nil, err
	}
	setAuditTarget(ctx, in.Body.Username)
	setAuditDetails(ctx, map[string]any{"role": in.Body.Role})
	hash, err := db.HashPassword(in.Body.Password)
	if err != nil {
		return nil, h.internal(ctx, "hash the password", err)
	}
	var u db.User
	err = h.auditedTx(ctx, func(tx pgx.Tx) error {
		var err error
		u, err = h.store.With(tx).UserCreate(ctx, in.Body.Username, hash, in.Body.Role)
		return err
	})
	if db.Violates(err, db.ConstraintUsername) {
		return nil, errorf(http.StatusConflict, "User %q already exists: choose another username", in.Body.Username)
	}
	if err != nil {
		return nil, h.internal(ctx, "create the user", err)
	}
	out := &userCreateOutput{}
	out.Body.ID, out.Body.Username, out.Body.Role = u.ID, u.Username, u.Role
	return out, nil
}

func (h *handlers) deleteUser(ctx context.Context, in *usernamePath) (*deletedOutput, error) {
	if in.Username == currentUser(ctx).Username {
		return nil, errorf(http.StatusBadRequest, "You cannot delete your own account: log in as another admin to delete %q", in.Username)
	}
	err := h.auditedTx(ctx, func(tx pgx.Tx) error { return h.store.With(tx).UserDelete(ctx, in.Username) })
	if errors.Is(err, db.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, "User %q does not exist", in.Username)
	}
	if err != nil {
		return nil, h.internal(ctx, "delete the user", err)
	}
	return deleted(in.Username), nil
}
