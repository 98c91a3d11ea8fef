// Package origin marks the transactions pgmirror writes on a destination
// with a PostgreSQL replication origin, so that a mirror reading from that
// database can tell them from the application's and leave them out: two
// mirrors in opposite directions over the same tables then never feed each
// other, and a cut-over's roll-back mirror carries only the application's
// writes.
//
// Every origin pgmirror creates is named Prefix + the mirror's uid (the
// applier's, Name), or that name + "_c" + a number (a snapshot or table
// copy's connection, one origin per connection: PostgreSQL lets one
// session at a time use an origin). A reader skips every transaction whose
// origin name starts with Prefix (IsPgmirror).
//
// The functions behind it (pg_replication_origin_create and
// pg_replication_origin_session_setup, and their companions) need superuser
// on PostgreSQL 15 and earlier unless EXECUTE on them was granted to the
// destination user; Permitted tells, and the callers then go on without
// marking (the API's cycle check still refuses the configurations that
// would loop).
//
// Each origin in use takes one of the destination's replication state
// entries (max_replication_slots of them) until it is dropped: copy origins
// are dropped when their connection is done (Release), the applier's when
// the mirror is deleted (DropMirror).
package origin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Prefix starts the name of every replication origin pgmirror creates.
const Prefix = "pgmirror_"

// ErrNotPermitted matches (errors.Is) a destination user that may not
// create or use replication origins.
var ErrNotPermitted = errors.New("the destination user may not use replication origins")

// ErrNoFreeState matches (errors.Is) a destination whose replication state
// entries are all in use: every session that marks its writes with an origin
// takes one of the destination's max_replication_slots.
var ErrNoFreeState = errors.New("the destination has no free replication state for an origin (raise max_replication_slots on the destination)")

// Name is the origin that marks the transactions mirror uid's applier
// commits on its destination.
func Name(mirrorUID string) string { return Prefix + mirrorUID }

// NameOrNone is Name(mirrorUID), or "" for an empty uid (nothing to mark).
func NameOrNone(mirrorUID string) string {
	if mirrorUID == "" {
		return ""
	}
	return Name(mirrorUID)
}

// IsPgmirror reports whether an origin name is one of pgmirror's.
func IsPgmirror(name string) bool { return strings.HasPrefix(name, Prefix) }

// DB is what the functions need: a *pgx.Conn or a pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Functions are the functions pgmirror calls, as GRANT EXECUTE names them.
var Functions = []string{
	"pg_replication_origin_create(text)",
	"pg_replication_origin_drop(text)",
	"pg_replication_origin_oid(text)",
	"pg_replication_origin_session_setup(text)",
	"pg_replication_origin_session_reset()",
}

// GrantHint is the advice for a destination user without the privileges.
var GrantHint = "run, as a superuser on the destination database: GRANT EXECUTE ON FUNCTION " +
	strings.Join(prefixed(Functions), ", ") + " TO <the destination peer's user>"

func prefixed(fns []string) []string {
	out := make([]string, len(fns))
	for i, f := range fns {
		out[i] = "pg_catalog." + f
	}
	return out
}

// Permitted reports whether the connection's user may execute every one of
// Functions (a superuser always may).
func Permitted(ctx context.Context, conn DB) (bool, error) {
	var ok bool
	err := conn.QueryRow(ctx, `SELECT bool_and(has_function_privilege(f, 'EXECUTE')) FROM unnest($1::text[]) AS f`,
		prefixed(Functions)).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("check the privileges on replication origins: %w", err)
	}
	return ok, nil
}

// Ensure creates the origin name when it does not exist.
func Ensure(ctx context.Context, conn DB, name string) error {
	_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_create($1)
		WHERE pg_catalog.pg_replication_origin_oid($1) IS NULL`, name)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		return nil // created meanwhile by another session
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return fmt.Errorf("create replication origin %s: %w: %w", name, ErrNotPermitted, err)
	}
	return fmt.Errorf("create replication origin %s: %w", name, err)
}

// Setup creates the origin name when needed and marks every transaction the
// session of conn commits from now on with it. It fails when another
// session uses the origin (SQLSTATE 55006).
func Setup(ctx context.Context, conn DB, name string) error {
	if err := Ensure(ctx, conn, name); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_session_setup($1)`, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("use replication origin %s: %w: %w", name, ErrNotPermitted, err)
	}
	if errors.As(err, &pgErr) && pgErr.Code == "53400" {
		return fmt.Errorf("use replication origin %s: %w: %w", name, ErrNoFreeState, err)
	}
	if err != nil {
		return fmt.Errorf("use replication origin %s: %w", name, err)
	}
	return nil
}

// maxCopyOrigins bounds the copy origins tried by SetupCopy.
const maxCopyOrigins = 256

// SetupCopy marks the session of conn with a copy origin of mirror uid: the
// first of Name(uid)+"_c1", "_c2", ... that no other session uses. It
// returns the origin's name, to be given to Release when the connection is
// done.
func SetupCopy(ctx context.Context, conn DB, mirrorUID string) (string, error) {
	for i := 1; i <= maxCopyOrigins; i++ {
		name := fmt.Sprintf("%s_c%d", Name(mirrorUID), i)
		err := Setup(ctx, conn, name)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" {
			continue // in use by another connection
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
	return "", fmt.Errorf("no free replication origin among %d for the copies of mirror %s", maxCopyOrigins, mirrorUID)
}

// Release ends the session's use of the origin name (set up by Setup or
// SetupCopy on conn, with no transaction open) and drops it, freeing its
// replication state entry.
func Release(ctx context.Context, conn DB, name string) error {
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_session_reset()`); err != nil {
		return fmt.Errorf("stop using replication origin %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_drop($1)
		WHERE pg_catalog.pg_replication_origin_oid($1) IS NOT NULL`, name); err != nil {
		return fmt.Errorf("drop replication origin %s: %w", name, err)
	}
	return nil
}

// DropMirror drops every origin of mirror uid (its applier's and any copy
// origin left by an interrupted copy). An origin still in use by a session
// fails it.
func DropMirror(ctx context.Context, conn DB, mirrorUID string) error {
	name := Name(mirrorUID)
	_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_drop(roname) FROM pg_catalog.pg_replication_origin
		WHERE roname = $1 OR (left(roname, length($1) + 2) = $1 || '_c' AND substr(roname, length($1) + 3) ~ '^[0-9]+$')`, name)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("drop the replication origins of mirror %s: %w: %w", mirrorUID, ErrNotPermitted, err)
	}
	if err != nil {
		return fmt.Errorf("drop the replication origins of mirror %s: %w", mirrorUID, err)
	}
	return nil
}
