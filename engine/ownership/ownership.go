// Package ownership checks that pgmirror's own objects on a peer, the
// schema _pgmirror and everything in it, belong to a role pgmirror may
// trust: the peer's user (session_user: the role the peer's settings log
// in as, whatever role the session may have SET since) or a superuser.
//
// pgmirror creates _pgmirror with CREATE SCHEMA IF NOT EXISTS and its
// functions with CREATE OR REPLACE FUNCTION. Both keep an object that
// exists already, with its owner: a database owner who created _pgmirror
// (or a function, or the DDL signing key's table, in it) before pgmirror
// did would own what pgmirror then uses, and could change it afterwards to
// sign its own DDL messages or to run code as whoever fires pgmirror's
// event triggers. So every place that creates or trusts these objects
// calls Check first (and again after creating, in the same transaction
// where there is one), and refuses to go on with a *ForeignOwnerError.
package ownership

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Schema is the schema of pgmirror's objects on a peer.
const Schema = "_pgmirror"

// ErrForeignOwner matches (errors.Is) every *ForeignOwnerError.
var ErrForeignOwner = errors.New("an object of pgmirror's schema _pgmirror is owned by another role")

// ForeignOwnerError is an object of pgmirror's on a peer that a role other
// than the peer's user, and not a superuser, owns.
type ForeignOwnerError struct {
	// Object says what it is, for example `schema _pgmirror` or
	// `function _pgmirror.pgmirror_ddl_emit(jsonb)`.
	Object string
	// Owner is the role that owns it.
	Owner string
	// User is the peer's user (session_user).
	User string
}

func (e *ForeignOwnerError) Error() string {
	return fmt.Sprintf("%s is owned by role %q, which is neither the peer's user %q nor a superuser: "+
		"pgmirror does not use objects in its schema %s that another role created, since that role could change them to act with the peer's privileges. "+
		"Find out who created it; then drop it (DROP SCHEMA %s CASCADE drops pgmirror's metadata there too) or, if it is pgmirror's, "+
		"give it to the peer's user (ALTER ... OWNER TO %q), and try again",
		e.Object, e.Owner, e.User, Schema, Schema, e.User)
}

// Is makes errors.Is(err, ErrForeignOwner) true.
func (e *ForeignOwnerError) Is(target error) bool { return target == ErrForeignOwner }

// Querier runs a query that returns rows: a *pgx.Conn, a pgx.Tx or a pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// checkSQL lists the schema _pgmirror, every relation, function, type and
// operator in it, pgmirror's event triggers and the functions they run,
// whose owner is neither session_user nor a superuser. Names print
// schema-qualified (the session's search_path is pg_catalog).
const checkSQL = `
WITH objects (ord, object, owner) AS (
  SELECT 1, 'schema ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(n.nspname), n.nspowner
    FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) $1
  UNION ALL
  SELECT 2, CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'p' THEN 'table ' WHEN 'S' THEN 'sequence ' WHEN 'i' THEN 'index '
              WHEN 'v' THEN 'view ' WHEN 'm' THEN 'materialized view ' WHEN 'f' THEN 'foreign table ' ELSE 'relation ' END
            OPERATOR(pg_catalog.||) c.oid::pg_catalog.regclass::pg_catalog.text, c.relowner
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
    WHERE n.nspname OPERATOR(pg_catalog.=) $1
  UNION ALL
  SELECT 3, 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text, p.proowner
    FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
    WHERE n.nspname OPERATOR(pg_catalog.=) $1
  UNION ALL
  SELECT 4, 'type ' OPERATOR(pg_catalog.||) t.oid::pg_catalog.regtype::pg_catalog.text, t.typowner
    FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) t.typnamespace
    WHERE n.nspname OPERATOR(pg_catalog.=) $1
  UNION ALL
  SELECT 5, 'operator ' OPERATOR(pg_catalog.||) o.oid::pg_catalog.regoperator::pg_catalog.text, o.oprowner
    FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
    WHERE n.nspname OPERATOR(pg_catalog.=) $1
  UNION ALL
  SELECT 6, 'event trigger ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(e.evtname), e.evtowner
    FROM pg_catalog.pg_event_trigger e WHERE e.evtname OPERATOR(pg_catalog.~~) 'pgmirror\_%'
  UNION ALL
  SELECT 7, 'function ' OPERATOR(pg_catalog.||) p.oid::pg_catalog.regprocedure::pg_catalog.text
            OPERATOR(pg_catalog.||) ' of event trigger ' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(e.evtname), p.proowner
    FROM pg_catalog.pg_event_trigger e JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) e.evtfoid
    WHERE e.evtname OPERATOR(pg_catalog.~~) 'pgmirror\_%'
)
SELECT o.object, r.rolname::pg_catalog.text, SESSION_USER::pg_catalog.text
FROM objects o JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) o.owner
WHERE r.rolname OPERATOR(pg_catalog.<>) SESSION_USER AND NOT r.rolsuper
ORDER BY o.ord, o.object
LIMIT 1`

// Check returns a *ForeignOwnerError naming the first object of pgmirror's
// on q's database (the schema _pgmirror, anything in it, pgmirror's event
// triggers and their functions) that a role other than the session's
// login role (session_user) owns, unless that role is a superuser. A database without _pgmirror
// passes.
func Check(ctx context.Context, q Querier) error {
	rows, err := q.Query(ctx, checkSQL, Schema)
	if err != nil {
		return fmt.Errorf("check the owners of pgmirror's objects in schema %s: %w", Schema, err)
	}
	defer rows.Close()
	if rows.Next() {
		var e ForeignOwnerError
		if err := rows.Scan(&e.Object, &e.Owner, &e.User); err != nil {
			return fmt.Errorf("check the owners of pgmirror's objects in schema %s: %w", Schema, err)
		}
		return &e
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("check the owners of pgmirror's objects in schema %s: %w", Schema, err)
	}
	return nil
}
