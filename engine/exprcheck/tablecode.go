package exprcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrForeignCode matches (errors.Is) the error of GuardWrites: pgmirror
// refuses to write into a table whose owner is another role and whose
// writes would run that role's code with pgmirror's privileges.
var ErrForeignCode = errors.New("destination table runs code of another role")

// tableCodeSQL lists what runs when rows are written into table $1 in a
// session whose session_replication_role is replica ($2) or origin:
// triggers and rules that fire, and the node trees of its CHECK
// constraints, defaults and generated columns, index expressions and
// predicates, and (for a role subject to row-level security, $3) its
// policies. Each row is a description, whether the object is code of its
// own (a trigger or a rule), and the node trees of its expressions.
const tableCodeSQL = `
SELECT 'trigger ' || pg_catalog.quote_ident(t.tgname) || ' (' || pg_catalog.quote_ident(fn.nspname) || '.' || pg_catalog.quote_ident(f.proname) || '())', true, ''
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc f ON f.oid = t.tgfoid JOIN pg_catalog.pg_namespace fn ON fn.oid = f.pronamespace
WHERE t.tgrelid = $1 AND NOT t.tgisinternal
  -- pgmirror's own read-only triggers of a cut-over (engine/cutover)
  AND NOT (fn.nspname = '_pgmirror' AND f.proname = 'refuse_writes' AND t.tgname IN ('pgmirror_read_only', 'pgmirror_read_only_truncate'))
  AND (t.tgenabled = 'A' OR t.tgenabled = CASE WHEN $2 THEN 'R' ELSE 'O' END)
UNION ALL
SELECT 'rule ' || pg_catalog.quote_ident(r.rulename), true, ''
FROM pg_catalog.pg_rewrite r
WHERE r.ev_class = $1 AND r.ev_type <> '1'
  AND (r.ev_enabled = 'A' OR r.ev_enabled = CASE WHEN $2 THEN 'R' ELSE 'O' END)
UNION ALL
SELECT 'constraint ' || pg_catalog.quote_ident(k.conname), false,
       pg_catalog.concat_ws(' ', k.conbin::text,
         (SELECT pg_catalog.concat_ws(' ', i.indexprs::text, i.indpred::text) FROM pg_catalog.pg_index i WHERE i.indexrelid = k.conindid),
         (SELECT pg_catalog.string_agg(':opno ' || op::text, ' ') FROM pg_catalog.unnest(k.conexclop) op))
FROM pg_catalog.pg_constraint k WHERE k.conrelid = $1 AND k.contype IN ('c', 'u', 'x', 'p')
UNION ALL
SELECT 'index ' || pg_catalog.quote_ident(c.relname), false, pg_catalog.concat_ws(' ', i.indexprs::text, i.indpred::text)
FROM pg_catalog.pg_index i JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1 AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
UNION ALL
SELECT CASE WHEN a.attgenerated <> '' THEN 'generated column ' ELSE 'default of column ' END || pg_catalog.quote_ident(a.attname), false, d.adbin::text
FROM pg_catalog.pg_attrdef d JOIN pg_catalog.pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
WHERE d.adrelid = $1 AND NOT a.attisdropped
UNION ALL
SELECT 'type of column ' || pg_catalog.quote_ident(a.attname), false, ':consttype ' || a.atttypid::text
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid >= 16384
UNION ALL
SELECT 'policy ' || pg_catalog.quote_ident(p.polname), false, pg_catalog.concat_ws(' ', p.polqual::text, p.polwithcheck::text)
FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
WHERE p.polrelid = $1 AND $3 AND c.relrowsecurity`

// TableCode lists the code that writing rows into the table whose OID is
// table runs, and that exprcheck does not allow, read from the catalog of
// the database the table is in (q): every trigger and rule that fires
// (with session_replication_role replica or not), and every constraint,
// index, default, generated column, column type and, when rls says the
// writing role is subject to row-level security, policy whose expressions
// fail the check. Each entry names the object and why.
func TableCode(ctx context.Context, q Querier, table uint32, replica, rls bool) ([]string, error) {
	rows, err := q.Query(ctx, tableCodeSQL, table, replica, rls)
	if err != nil {
		return nil, fmt.Errorf("list the code of table %d: %w", table, err)
	}
	type object struct {
		What string
		Code bool
		Tree string
	}
	objects, err := pgx.CollectRows(rows, pgx.RowToStructByPos[object])
	if err != nil {
		return nil, fmt.Errorf("list the code of table %d: %w", table, err)
	}
	chk := New(q)
	var out []string
	for _, o := range objects {
		if o.Code {
			out = append(out, o.What)
			continue
		}
		reason, err := chk.Check(ctx, o.Tree)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			out = append(out, o.What+" ("+reason+")")
		}
	}
	return out, nil
}

// Execer is a Querier that also runs statements; *pgx.Conn and pgx.Tx
// satisfy it.
type Execer interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// GuardWrites is called, inside the transaction that is about to write
// into table (qualified and quoted name) on conn, when the table's owner,
// or the owner of a domain or composite type of its columns, is neither
// the session's role nor a superuser. It locks the table
// against changes of its definition (ROW EXCLUSIVE, as the writes would)
// and returns an error matching ErrForeignCode when writing would run code
// the owner controls with the session's privileges (TableCode). A table
// without such code may be written as usual.
func GuardWrites(ctx context.Context, conn Execer, table, owner string, replica bool) error {
	var oid uint32
	var rls bool
	err := conn.QueryRow(ctx, `SELECT $1::pg_catalog.regclass::pg_catalog.oid,
       NOT (r.rolsuper OR r.rolbypassrls)
FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER`, table).Scan(&oid, &rls)
	if err != nil {
		return fmt.Errorf("look up destination table %s: %w", table, err)
	}
	if _, err := conn.Exec(ctx, "LOCK TABLE "+table+" IN ROW EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("lock destination table %s: %w", table, err)
	}
	code, err := TableCode(ctx, conn, oid, replica, rls)
	if err != nil {
		return err
	}
	if len(code) == 0 {
		return nil
	}
	return fmt.Errorf("%w: writing into destination table %s would run code that role %s controls (it owns the table or types of its columns) with the privileges of the destination peer's user: %s; "+
		"pgmirror does not write into it. Drop or disable that code (ALTER TABLE %s DISABLE TRIGGER ... / DISABLE RULE ...), or connect the destination peer as role %s, "+
		"or, once you have checked that the code and every function it calls cannot be changed by %s, make the peer's user the table's owner (ALTER TABLE %s OWNER TO ...); then retry the mirror",
		ErrForeignCode, table, owner, strings.Join(code, ", "), table, owner, owner, table)
}
