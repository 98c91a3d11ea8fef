package db

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/session"
)

// ErrNotFound means the row asked for does not exist (or the mirror has been
// deleted).
var ErrNotFound = errors.New("not found")

// ErrConflict means a unique, foreign key, exclusion or restrict constraint
// rejected the write: the name is taken, or the row is still referenced.
var ErrConflict = errors.New("conflict")

// ErrInvalid means a check or not-null constraint of the catalog rejected a
// value: the caller let through input the catalog does not accept.
var ErrInvalid = errors.New("invalid value")

// ErrUnavailable means the catalog database could not be reached: the
// connection was refused or lost, the pool could not connect, or the server
// is shutting down or starting (SQLSTATE class 08, 57P01, 57P02, 57P03). The
// same request may succeed once the catalog is back.
var ErrUnavailable = errors.New("catalog database unavailable")

// ConstraintError is a catalog constraint violation (SQLSTATE class 23). It
// matches ErrConflict (unique, foreign key, exclusion, restrict) or
// ErrInvalid (check, not-null and any other) with errors.Is. Its text holds
// PostgreSQL's message, which names the table, column and constraint but
// never the rejected values.
type ConstraintError struct {
	// Code is the SQLSTATE, such as 23505.
	Code string
	// Constraint, Table and Column are what PostgreSQL reported (empty when
	// it did not say).
	Constraint string
	Table      string
	Column     string
	// Message is PostgreSQL's message without its detail (the detail may
	// show the failing row, passwords included).
	Message string
}

// Error returns "conflict: ..." or "invalid value: ..." and PostgreSQL's
// message.
func (e *ConstraintError) Error() string { return e.kind().Error() + ": " + e.Message }

// Unwrap returns ErrConflict or ErrInvalid.
func (e *ConstraintError) Unwrap() error { return e.kind() }

func (e *ConstraintError) kind() error {
	switch e.Code {
	case "23505", "23503", "23P01", "23001":
		return ErrConflict
	default:
		return ErrInvalid
	}
}

// unavailableError marks a driver error as ErrUnavailable and keeps it in
// the chain (for logs and errors.As).
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return ErrUnavailable.Error() + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// translate turns driver errors into the package's sentinels: pgx.ErrNoRows
// becomes ErrNotFound, constraint violations (class 23) a *ConstraintError
// (ErrConflict or ErrInvalid), and an unreachable catalog an error matching
// ErrUnavailable that keeps the original in its chain. Other errors, and
// errors already translated, pass through unchanged.
func translate(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	var ce *ConstraintError
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "23") {
		return &ConstraintError{Code: pgErr.Code, Constraint: pgErr.ConstraintName, Table: pgErr.TableName,
			Column: pgErr.ColumnName, Message: pgErr.Message}
	}
	if unreachable(err) {
		return &unavailableError{err: err}
	}
	return err
}

// Translate is the exported form of the store's error translation, for
// callers (db/worker.go, jobs/, httpapi/) that run their own queries or
// transactions.
func Translate(err error) error { return translate(err) }

// unreachable reports whether err says the catalog cannot be reached, as
// opposed to a query that failed on a working connection (session.Classify,
// the one classifier of connection failures).
func unreachable(err error) bool {
	return session.Classify(err) == session.Unreachable
}

// Names of the catalog's unique constraints that the API reports as a name
// already taken.
const (
	ConstraintUsername   = "users_username_key"
	ConstraintPeerName   = "peers_name_key"
	ConstraintMirrorName = "mirrors_name_live"
)

// Violates reports whether err is a violation of the named constraint.
func Violates(err error, constraint string) bool {
	var ce *ConstraintError
	return errors.As(err, &ce) && ce.Constraint == constraint
}
