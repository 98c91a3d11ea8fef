package cutover

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// reverseDestSQL reads what a reverse mirror needs of the destination
// database it will read: wal_level, the peer user's attributes and CREATE
// on the database (for the publication), and the free replication slots
// and WAL senders.
const reverseDestSQL = `
SELECT pg_catalog.current_setting('wal_level'), r.rolname::text, r.rolsuper, r.rolreplication,
       pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'),
       pg_catalog.current_setting('max_replication_slots')::int - (SELECT pg_catalog.count(*) FROM pg_catalog.pg_replication_slots)::int,
       pg_catalog.current_setting('max_wal_senders')::int -
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_stat_activity WHERE backend_type = 'walsender')::int
FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER`

// notOwnedSQL lists the tables of ($1, $2) that the current user cannot
// put into a publication: it does not own them (nor is a member of their
// owner).
const notOwnedSQL = `
SELECT pg_catalog.format('%s.%s', n.nspname, c.relname)
FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) AS want(schema_name, table_name)
JOIN pg_catalog.pg_namespace n ON n.nspname = want.schema_name
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = want.table_name
WHERE NOT pg_catalog.pg_has_role(CURRENT_USER, c.relowner, 'USAGE')
ORDER BY 1`

// reverseSourceSQL reads whether the source peer's user may set
// session_replication_role (a superuser, or from PostgreSQL 15 a user
// granted SET on it), which a reverse mirror's apply needs to write into
// source tables that lock_source made read-only.
const reverseSourceSQL = `
SELECT r.rolname::text, r.rolsuper OR (pg_catalog.current_setting('server_version_num')::int >= 150000
       AND pg_catalog.has_parameter_privilege('session_replication_role', 'SET'))
FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER`

// reverseSourceSQL14 is reverseSourceSQL for servers before 15, which
// lack has_parameter_privilege.
const reverseSourceSQL14 = `
SELECT r.rolname::text, r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER`

// ReverseProblems lists what would keep a cut-over from creating a reverse
// mirror (reverse_mirror_name) that reads the destination tables dstTables
// on dst and writes them back into the source src, each as a sentence that
// says what to do; none when a reverse mirror can be created. These are
// the cut-over's own checks for a reverse mirror (wal_level logical on the
// destination, a destination user with REPLICATION, destination tables
// that exist and identify their rows) and what its later steps need (a
// free replication slot and WAL sender on the destination, a destination
// user that may create a publication of those tables, and a source user
// that may write into tables lock_source made read-only). An error means a
// database could not be queried.
func ReverseProblems(ctx context.Context, src, dst *pgx.Conn, dstTables []change.TableName) ([]string, error) {
	var problems []string
	var walLevel, user string
	var super, replication, create bool
	var freeSlots, freeSenders int
	if err := dst.QueryRow(ctx, reverseDestSQL).Scan(&walLevel, &user, &super, &replication, &create, &freeSlots, &freeSenders); err != nil {
		return nil, fmt.Errorf("check the destination for a reverse mirror: %w", err)
	}
	if walLevel != "logical" {
		problems = append(problems, fmt.Sprintf("the destination runs with wal_level=%s, but a reverse mirror reads its changes: set wal_level = logical there (ALTER SYSTEM SET wal_level = logical, and restart it)", walLevel))
	}
	if !super && !replication {
		problems = append(problems, fmt.Sprintf("the destination peer's user %s lacks the REPLICATION attribute that a reverse mirror's replication slot needs: ALTER ROLE %s REPLICATION on the destination", user, sqlquote.Ident(user)))
	}
	if freeSlots <= 0 {
		problems = append(problems, "the destination has no free replication slot (max_replication_slots) for a reverse mirror: raise max_replication_slots there (a restart) or drop an unused slot")
	}
	if freeSenders <= 0 {
		problems = append(problems, "the destination has no free WAL sender (max_wal_senders) for a reverse mirror: raise max_wal_senders there (a restart)")
	}
	if !super && !create {
		problems = append(problems, fmt.Sprintf("the destination peer's user %s may not create the reverse mirror's publication: GRANT CREATE ON DATABASE ... TO %s on the destination", user, sqlquote.Ident(user)))
	}
	for _, check := range []func(context.Context, preflight.Queryer, []change.TableName, string) error{preflight.TablesExist, preflight.ReplicaIdentity} {
		err := check(ctx, dst, dstTables, "destination")
		var failure *preflight.Failure
		switch {
		case errors.As(err, &failure):
			problems = append(problems, failure.Message+" (a reverse mirror reads it)")
		case err != nil:
			return nil, fmt.Errorf("check the destination tables for a reverse mirror: %w", err)
		}
	}
	if !super {
		schemas, names := make([]string, len(dstTables)), make([]string, len(dstTables))
		for i, t := range dstTables {
			schemas[i], names[i] = t.Schema, t.Name
		}
		rows, err := dst.Query(ctx, notOwnedSQL, schemas, names)
		if err != nil {
			return nil, fmt.Errorf("check the owners of the destination tables: %w", err)
		}
		notOwned, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("check the owners of the destination tables: %w", err)
		}
		if len(notOwned) > 0 {
			problems = append(problems, fmt.Sprintf("the destination peer's user %s does not own %s, so it cannot publish them for a reverse mirror: make it their owner (or a member of their owner's role) on the destination",
				user, strings.Join(notOwned, ", ")))
		}
	}
	var version int
	if err := src.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return nil, fmt.Errorf("check the source for a reverse mirror: %w", err)
	}
	query := reverseSourceSQL
	if version < 150000 {
		query = reverseSourceSQL14
	}
	var srcUser string
	var mayReplica bool
	if err := src.QueryRow(ctx, query).Scan(&srcUser, &mayReplica); err != nil {
		return nil, fmt.Errorf("check the source for a reverse mirror: %w", err)
	}
	if !mayReplica {
		hint := "make it a superuser"
		if version >= 150000 {
			hint = fmt.Sprintf("GRANT SET ON PARAMETER session_replication_role TO %s on the source", sqlquote.Ident(srcUser))
		}
		problems = append(problems, fmt.Sprintf("the source peer's user %s may not set session_replication_role, so a reverse mirror cannot write into source tables that a cut-over with lock_source made read-only: %s, or drop the read-only triggers before the reverse mirror carries writes back",
			srcUser, hint))
	}
	return problems, nil
}
