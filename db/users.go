package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"
)

// BcryptCost is the bcrypt cost of stored password hashes.
const BcryptCost = bcrypt.DefaultCost

// ErrPasswordTooLong means the password exceeds bcrypt's 72-byte limit.
var ErrPasswordTooLong = errors.New("password is longer than 72 bytes")

// HashPassword returns the bcrypt hash of password, or ErrPasswordTooLong.
func HashPassword(password string) (string, error) {
	if len(password) > 72 {
		return "", ErrPasswordTooLong
	}
	h, err := bcrypt.GenerateFromPassword([]byte(password), BcryptCost)
	if err != nil {
		if errors.Is(err, bcrypt.ErrPasswordTooLong) {
			return "", ErrPasswordTooLong
		}
		return "", fmt.Errorf("hash password: %w", err)
	}
	return string(h), nil
}

const userColumns = `id, username, password_hash, role, token_version, created_at, updated_at`

func scanUser(row pgx.Row) (User, error) {
	var u User
	err := row.Scan(&u.ID, &u.Username, &u.PasswordHash, &u.Role, &u.TokenVersion, &u.CreatedAt, &u.UpdatedAt)
	return u, err
}

// EnsureAdmin creates an admin account with the given username and password
// unless a user of that name exists; an existing account is never changed.
func (s *Store) EnsureAdmin(ctx context.Context, username, password string) error {
	hash, err := HashPassword(password)
	if err != nil {
		return fmt.Errorf("ensure admin %q: %w", username, err)
	}
	_, err = s.q.Exec(ctx, `INSERT INTO users (username, password_hash, role) VALUES ($1, $2, 'admin') ON CONFLICT (username) DO NOTHING`,
		username, hash)
	if err != nil {
		return fmt.Errorf("ensure admin %q: %w", username, translate(err))
	}
	return nil
}

// DefaultAdminPassword is the default admin's password when
// SERVICE_ADMIN_PASSWORD is unset. Anyone can guess it.
const DefaultAdminPassword = "admin"

// AdminPassword says how the default admin's stored password relates to the
// default and to the configured one; see ReconcileAdminPassword.
type AdminPassword int

// Outcomes of ReconcileAdminPassword.
const (
	// AdminPasswordOK: the stored password is not the default and matches the
	// configured one (or none is configured).
	AdminPasswordOK AdminPassword = iota
	// AdminPasswordDefault: the stored password is still the default "admin"
	// and no other password is configured.
	AdminPasswordDefault
	// AdminPasswordReplaced: the stored password was the default "admin"; it
	// has just been replaced by the configured one.
	AdminPasswordReplaced
	// AdminPasswordKept: the configured password differs from the stored one,
	// which is not the default; the stored one was kept.
	AdminPasswordKept
)

// ReconcileAdminPassword checks the stored password of the admin account
// username (created by EnsureAdmin) at startup. configured is the password
// from the environment, "" when none is set. While the stored password is
// still DefaultAdminPassword and a different one is configured, the stored
// one is replaced, and every token issued under the default password is
// revoked (whatever the revocation setting: anyone could log in with it). Concurrent callers agree: the update only applies
// to the exact hash that was read, and a caller that loses the race checks
// again. A stored password that is not the default is never overwritten.
func (s *Store) ReconcileAdminPassword(ctx context.Context, username, configured string) (AdminPassword, error) {
	for attempt := 0; ; attempt++ {
		u, err := s.UserGetByUsername(ctx, username)
		if err != nil {
			return 0, fmt.Errorf("check admin password: %w", err)
		}
		isDefault := bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(DefaultAdminPassword)) == nil
		switch {
		case isDefault && (configured == "" || configured == DefaultAdminPassword):
			return AdminPasswordDefault, nil
		case !isDefault && configured != "" && bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte(configured)) != nil:
			return AdminPasswordKept, nil
		case !isDefault:
			return AdminPasswordOK, nil
		}
		hash, err := HashPassword(configured)
		if err != nil {
			return 0, fmt.Errorf("check admin password of %q: %w", username, err)
		}
		tag, err := s.q.Exec(ctx, `UPDATE users SET password_hash = $3, token_version = token_version + 1
			WHERE id = $1 AND password_hash = $2`, u.ID, u.PasswordHash, hash)
		if err != nil {
			return 0, fmt.Errorf("replace the default admin password of %q: %w", username, translate(err))
		}
		if tag.RowsAffected() == 1 {
			return AdminPasswordReplaced, nil
		}
		if attempt == 3 {
			return 0, fmt.Errorf("replace the default admin password of %q: the password kept changing under us", username)
		}
		// Another replica (or someone else) changed it first: look again.
	}
}

// UserCreate creates a user with an already hashed password. A taken
// username gives ErrConflict.
func (s *Store) UserCreate(ctx context.Context, username, passwordHash string, role UserRole) (User, error) {
	return userCreate(ctx, s.q, username, passwordHash, role)
}

func userCreate(ctx context.Context, q Executor, username, passwordHash string, role UserRole) (User, error) {
	u, err := scanUser(q.QueryRow(ctx, `INSERT INTO users (username, password_hash, role) VALUES ($1, $2, $3) RETURNING `+userColumns,
		username, passwordHash, role))
	if err != nil {
		return User{}, fmt.Errorf("create user %q: %w", username, translate(err))
	}
	return u, nil
}

// UserGetByID returns the user with the given id.
func (s *Store) UserGetByID(ctx context.Context, id int64) (User, error) {
	u, err := scanUser(s.q.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE id = $1`, id))
	if err != nil {
		return User{}, fmt.Errorf("get user %d: %w", id, translate(err))
	}
	return u, nil
}

// UserGetByUsername returns the user with the given username.
func (s *Store) UserGetByUsername(ctx context.Context, username string) (User, error) {
	u, err := scanUser(s.q.QueryRow(ctx, `SELECT `+userColumns+` FROM users WHERE username = $1`, username))
	if err != nil {
		return User{}, fmt.Errorf("get user %q: %w", username, translate(err))
	}
	return u, nil
}

// UserList returns every user ordered by id.
func (s *Store) UserList(ctx context.Context) ([]User, error) {
	rows, err := s.q.Query(ctx, `SELECT `+userColumns+` FROM users ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	users, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (User, error) { return scanUser(r) })
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	return users, nil
}

// UserSetPasswordHash replaces a user's password hash and returns the user
// as stored. With revokeTokens it also increments the user's token version,
// which revokes every token issued before; without, earlier tokens stay
// valid.
func (s *Store) UserSetPasswordHash(ctx context.Context, id int64, passwordHash string, revokeTokens bool) (User, error) {
	u, err := scanUser(s.q.QueryRow(ctx, `UPDATE users SET password_hash = $2,
		token_version = token_version + CASE WHEN $3::boolean THEN 1 ELSE 0 END
		WHERE id = $1 RETURNING `+userColumns, id, passwordHash, revokeTokens))
	if err != nil {
		return User{}, fmt.Errorf("set password of user %d: %w", id, translate(err))
	}
	return u, nil
}

// UserDelete deletes the user with the given username.
func (s *Store) UserDelete(ctx context.Context, username string) error {
	return userDelete(ctx, s.q, username)
}

func userDelete(ctx context.Context, q Executor, username string) error {
	var id int64
	if err := q.QueryRow(ctx, `DELETE FROM users WHERE username = $1 RETURNING id`, username).Scan(&id); err != nil {
		return fmt.Errorf("delete user %q: %w", username, translate(err))
	}
	return nil
}
