// Package origin marks the transactions pgmirror writes on a destination
// with a PostgreSQL replication origin, so that a mirror reading from that
// database can tell them from the application's, and decides which of them
// such a mirror leaves out (Filter): the writes of the mirrors that close a
// loop with it (LoopMirrors: two mirrors in opposite directions over the
// same tables, or a ring), so that they never feed each other and a
// cut-over's roll-back mirror carries only the application's writes; a
// mirror reading a database that another mirror feeds from elsewhere (a
// chain) carries that mirror's writes.
//
// Every origin pgmirror creates is named Prefix + the mirror's uid (the
// applier's, Name), or that name + "_c" + a number (a snapshot or table
// copy's connection, one origin per connection: PostgreSQL lets one
// session at a time use an origin); MirrorUID reads the uid back.
//
// No statement fails on the server in normal work (a failing one writes an
// ERROR into its log, where DBAs' alerts look): a copy connection takes a
// session advisory lock per candidate name before it tries it, and the
// origin's creation and session setup run in a DO block that catches an
// origin in use inside PL/pgSQL (SetupCopy, Setup, DropMirror).
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

	"github.com/pgmirror/pgmirror/engine/sqlquote"
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

// ErrInUse matches (errors.Is) an origin that another session uses.
var ErrInUse = errors.New("the replication origin is in use by another session")

// lockClass is the first key of the session advisory lock (two-key form,
// on the destination database) that a session holds while it uses a copy
// origin; the second key is pg_catalog.hashtext of the origin's name.
// SetupCopy takes it before it tries an origin, so that pgmirror's copy
// connections pick distinct origins without a failing statement.
const lockClass = 0x70676d6f // "pgmo"

// The functions below run their SQL as DO blocks (a failing call caught
// inside PL/pgSQL is not written to the server's log) and simple-protocol
// statements, neither of which takes parameters: the origin names are
// spliced in as literals, which validName keeps to safe characters.

// validName reports whether an origin name or mirror uid may be spliced
// into SQL as a literal: letters, digits, '_' and '-' only (a mirror uid
// is a UUID).
func validName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// setupBlock is the DO block behind Setup and SetupCopy. For each
// candidate name (%[1]s over loop variable i in %[2]s) that the guard
// (%[3]s, a condition that takes the candidate's advisory lock, or true)
// lets through, it creates the origin when missing and sets the session up
// with it; an origin in use by another session (or created by one at the
// same moment) is passed over without an error reaching the server log.
// Its commit does not wait for the WAL flush: any transaction the session
// commits with the origin comes later in the WAL, and waits. The outcome
// goes into the session setting pgmirror.origin_setup: "ok:"
// and the name, "busy" (every candidate in use), "denied" (privileges),
// or "full" (no free replication state). %[4]s releases a candidate's
// guard. The session must not use an origin yet (its candidates would all
// look busy).
const setupBlock = `DO $pgmirror$
DECLARE
	n text;
	r text := 'busy';
BEGIN
	PERFORM pg_catalog.set_config('synchronous_commit', 'off', true);
	FOR i IN %[2]s LOOP
		n := %[1]s;
		CONTINUE WHEN NOT (%[3]s);
		BEGIN
			IF pg_catalog.pg_replication_origin_oid(n) IS NULL THEN
				PERFORM pg_catalog.pg_replication_origin_create(n);
			END IF;
			PERFORM pg_catalog.pg_replication_origin_session_setup(n);
			r := pg_catalog.concat('ok:', n);
		EXCEPTION
			WHEN object_in_use OR unique_violation THEN NULL;
			WHEN insufficient_privilege THEN r := 'denied';
			WHEN configuration_limit_exceeded THEN r := 'full';
		END;
		IF pg_catalog.left(r, 3) OPERATOR(pg_catalog.<>) 'ok:' THEN
			%[4]s;
		END IF;
		EXIT WHEN r OPERATOR(pg_catalog.<>) 'busy';
	END LOOP;
	PERFORM pg_catalog.set_config('pgmirror.origin_setup', r, false);
END
$pgmirror$;
SELECT pg_catalog.current_setting('pgmirror.origin_setup')`

// setup runs setupBlock with the given parts and returns the origin the
// session was set up with.
func setup(ctx context.Context, conn *pgx.Conn, what, candidate, loop, guard, unguard string) (string, error) {
	sql := fmt.Sprintf(setupBlock, candidate, loop, guard, unguard)
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			return "", fmt.Errorf("use replication origin %s: %w: %w", what, ErrNotPermitted, err)
		}
		return "", fmt.Errorf("use replication origin %s: %w", what, err)
	}
	if len(results) != 2 || len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return "", fmt.Errorf("use replication origin %s: unexpected answer", what)
	}
	r := string(results[1].Rows[0][0])
	switch {
	case strings.HasPrefix(r, "ok:"):
		return strings.TrimPrefix(r, "ok:"), nil
	case r == "busy":
		return "", fmt.Errorf("use replication origin %s: %w", what, ErrInUse)
	case r == "denied":
		return "", fmt.Errorf("use replication origin %s: %w", what, ErrNotPermitted)
	case r == "full":
		return "", fmt.Errorf("use replication origin %s: %w", what, ErrNoFreeState)
	}
	return "", fmt.Errorf("use replication origin %s: unexpected answer %q", what, r)
}

// Setup creates the origin name when needed and marks every transaction the
// session of conn commits from now on with it. It fails with ErrInUse when
// another session uses the origin, without an ERROR in the server's log.
func Setup(ctx context.Context, conn *pgx.Conn, name string) error {
	if !validName(name) {
		return fmt.Errorf("use replication origin %q: not a name pgmirror gives origins", name)
	}
	_, err := setup(ctx, conn, name, sqlquote.Literal(name), "1..1", "true", "NULL")
	return err
}

// maxCopyOrigins bounds the copy origins tried by SetupCopy.
const maxCopyOrigins = 256

// SetupCopy marks the session of conn with a copy origin of mirror uid: the
// first of Name(uid)+"_c1", "_c2", ... whose advisory lock (lockClass) no
// other session holds and that no other session uses. The session keeps
// the lock until Release. It returns the origin's name, to be given to
// Release when the connection is done. One round trip; no statement fails
// on the server.
func SetupCopy(ctx context.Context, conn *pgx.Conn, mirrorUID string) (string, error) {
	if !validName(mirrorUID) {
		return "", fmt.Errorf("use a copy origin of mirror %q: not a mirror uid", mirrorUID)
	}
	base := Name(mirrorUID)
	lock := fmt.Sprintf("%d, pg_catalog.hashtext(n)", lockClass)
	name, err := setup(ctx, conn, base+"_c*", "pg_catalog.concat("+sqlquote.Literal(base+"_c")+", i)", fmt.Sprintf("1..%d", maxCopyOrigins),
		"pg_catalog.pg_try_advisory_lock("+lock+")", "PERFORM pg_catalog.pg_advisory_unlock("+lock+")")
	if errors.Is(err, ErrInUse) {
		return "", fmt.Errorf("no free replication origin among %d for the copies of mirror %s", maxCopyOrigins, mirrorUID)
	}
	return name, err
}

// Release ends the session's use of the origin name (set up by Setup or
// SetupCopy on conn, with no transaction open), drops it, freeing its
// replication state entry, and lets go of its advisory lock.
func Release(ctx context.Context, conn *pgx.Conn, name string) error {
	if !validName(name) {
		return fmt.Errorf("drop replication origin %q: not a name pgmirror gives origins", name)
	}
	lit := sqlquote.Literal(name)
	// The lock is let go only once the drop is committed: a session that
	// takes it next must not find the origin still there and use it. The
	// commit does not wait for the WAL flush: a drop lost in a crash leaves
	// an unused origin, which the next copy takes or the mirror's deletion
	// drops.
	drop := `SELECT pg_catalog.pg_replication_origin_session_reset();
		SET LOCAL synchronous_commit = off;
		SELECT pg_catalog.pg_replication_origin_drop(roname) FROM pg_catalog.pg_replication_origin WHERE roname OPERATOR(pg_catalog.=) ` + lit
	unlock := `SELECT pg_catalog.pg_advisory_unlock(` + fmt.Sprint(lockClass) + `, pg_catalog.hashtext(` + lit + `)) FROM pg_catalog.pg_locks
		WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted
			AND classid OPERATOR(pg_catalog.=) ` + fmt.Sprint(lockClass) + `::pg_catalog.oid
			AND objid OPERATOR(pg_catalog.=) pg_catalog.hashtext(` + lit + `)::pg_catalog.oid AND objsubid OPERATOR(pg_catalog.=) 2`
	if _, err := conn.PgConn().Exec(ctx, drop).ReadAll(); err != nil {
		return fmt.Errorf("release replication origin %s: %w", name, err)
	}
	if _, err := conn.PgConn().Exec(ctx, unlock).ReadAll(); err != nil {
		return fmt.Errorf("release replication origin %s: %w", name, err)
	}
	return nil
}

// dropBlock drops every origin of the mirror whose Name is %[1]s (its
// applier's and its copy origins) that no session uses, and sets
// pgmirror.origin_drop to how many are left (in use), or "denied".
const dropBlock = `DO $pgmirror$
DECLARE
	o text;
	left_over int := 0;
	r text;
BEGIN
	FOR o IN SELECT roname FROM pg_catalog.pg_replication_origin
		WHERE roname OPERATOR(pg_catalog.=) '%[1]s' OR (pg_catalog.left(roname, %[2]d) OPERATOR(pg_catalog.=) '%[1]s_c'
			AND pg_catalog.substr(roname, %[3]d) OPERATOR(pg_catalog.~) '^[0-9]+$')
	LOOP
		BEGIN
			PERFORM pg_catalog.pg_replication_origin_drop(o);
		EXCEPTION WHEN object_in_use THEN
			left_over := left_over OPERATOR(pg_catalog.+) 1;
		END;
	END LOOP;
	PERFORM pg_catalog.set_config('pgmirror.origin_drop', left_over::text, false);
EXCEPTION WHEN insufficient_privilege THEN
	PERFORM pg_catalog.set_config('pgmirror.origin_drop', 'denied', false);
END
$pgmirror$;
SELECT pg_catalog.current_setting('pgmirror.origin_drop')`

// DropMirror drops every origin of mirror uid (its applier's and any copy
// origin left by an interrupted copy). An origin still in use by a session
// is left and makes it return an error matching ErrInUse (try again once
// that session is gone); nothing fails on the server.
func DropMirror(ctx context.Context, conn *pgx.Conn, mirrorUID string) error {
	if !validName(mirrorUID) {
		return fmt.Errorf("drop the replication origins of mirror %q: not a mirror uid", mirrorUID)
	}
	name := Name(mirrorUID)
	results, err := conn.PgConn().Exec(ctx, fmt.Sprintf(dropBlock, name, len(name)+2, len(name)+3)).ReadAll()
	if err != nil {
		return fmt.Errorf("drop the replication origins of mirror %s: %w", mirrorUID, err)
	}
	if len(results) != 2 || len(results[1].Rows) != 1 || len(results[1].Rows[0]) != 1 {
		return fmt.Errorf("drop the replication origins of mirror %s: unexpected answer", mirrorUID)
	}
	switch r := string(results[1].Rows[0][0]); r {
	case "0":
		return nil
	case "denied":
		return fmt.Errorf("drop the replication origins of mirror %s: %w", mirrorUID, ErrNotPermitted)
	default:
		return fmt.Errorf("drop the replication origins of mirror %s: %s still in use: %w", mirrorUID, r, ErrInUse)
	}
}
