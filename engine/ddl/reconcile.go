package ddl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Querier runs statements on the destination (a connection inside the
// transaction the changes are applied in).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Result is what Reconcile did.
type Result struct {
	// Applied are the statements executed, in order.
	Applied []string
	// Warnings say what was left out: statements the destination rejected
	// (each undone on its own, the others stay), objects whose name is
	// taken on the destination.
	Warnings []string
}

// createdComment marks the destination tables pgmirror created (see
// engine/schemasync): only those follow the source's indexes and
// constraints.
const createdComment = "Created by pgmirror"

// Plan returns the statements that bring the destination table of m to
// what msg describes, without executing them, and warnings about what
// cannot be done. Nothing is planned for a destination table that pgmirror
// did not create (it is left as it is) or that does not exist.
func Plan(ctx context.Context, conn Querier, m change.Mapping, msg Message) (stmts, warnings []string, err error) {
	var oid uint32
	var comment string
	// Only the session's role or a superuser may own it: another role
	// could write the comment on a table of its own.
	err = conn.QueryRow(ctx, `SELECT c.oid, CASE WHEN c.relowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER)
    OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = c.relowner)
  THEN COALESCE(pg_catalog.obj_description(c.oid, 'pg_class'), '') ELSE '' END
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, m.Destination.Schema, m.Destination.Name).Scan(&oid, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, []string{fmt.Sprintf("destination table %s does not exist", m.Destination)}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("destination: look up table %s: %w", m.Destination, err)
	}
	if !strings.HasPrefix(comment, createdComment) {
		return nil, []string{fmt.Sprintf("destination table %s was not created by pgmirror: its indexes, constraints and column defaults are left as they are", m.Destination)}, nil
	}
	var restore string
	if err := conn.QueryRow(ctx, `SELECT current_setting('search_path'), set_config('search_path', 'pg_catalog', true)`).Scan(&restore, new(string)); err != nil {
		return nil, nil, fmt.Errorf("destination: set the search path: %w", err)
	}
	defer func() {
		if _, rerr := conn.Exec(ctx, `SELECT set_config('search_path', $1, true)`, restore); rerr != nil && err == nil {
			err = fmt.Errorf("destination: restore the search path: %w", rerr)
		}
	}()
	p := &planner{conn: conn, m: m, oid: oid}
	if err := p.read(ctx); err != nil {
		return nil, nil, err
	}
	switch msg.Kind {
	case "drop":
		p.drop(msg.Drop)
	case "state":
		p.indexes(msg.Indexes)
		p.constraints(msg.Constraints)
		p.columns(msg.Columns)
	}
	return p.stmts, p.warnings, p.err
}

// Reconcile brings the destination table of m to what msg describes (see
// Plan) and returns what it executed. Each statement runs under a
// savepoint: one the destination rejects is undone alone and reported in
// Result.Warnings. Only a failure to talk to the destination is an error.
// Call it inside the transaction the changes after msg are applied in.
// Each statement is sent alone with the extended protocol, which runs one
// statement at most.
func Reconcile(ctx context.Context, conn *pgx.Conn, m change.Mapping, msg Message) (Result, error) {
	stmts, warnings, err := Plan(ctx, conn, m, msg)
	if err != nil {
		return Result{}, err
	}
	res := Result{Warnings: warnings}
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, "SAVEPOINT pgmirror_schema_change"); err != nil {
			return res, fmt.Errorf("destination: savepoint: %w", err)
		}
		err := conn.PgConn().ExecParams(ctx, stmt, nil, nil, nil, nil).Read().Err
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr):
			if _, rerr := conn.Exec(ctx, "ROLLBACK TO SAVEPOINT pgmirror_schema_change"); rerr != nil {
				return res, fmt.Errorf("destination: roll back to savepoint after %s: %w", stmt, rerr)
			}
			res.Warnings = append(res.Warnings, fmt.Sprintf("the destination rejected %s: %s", stmt, pgErr.Message))
		case err != nil:
			return res, fmt.Errorf("destination: %s: %w", stmt, err)
		default:
			res.Applied = append(res.Applied, stmt)
		}
		if _, err := conn.Exec(ctx, "RELEASE SAVEPOINT pgmirror_schema_change"); err != nil {
			return res, fmt.Errorf("destination: release savepoint: %w", err)
		}
	}
	return res, nil
}

type destIndex struct {
	name, def, prefix string
	unique            bool
	owned             bool // the primary key's, or backs a constraint
}

func (ix destIndex) rest() string { return strings.TrimPrefix(ix.def, ix.prefix) }

type destConstraint struct {
	name, typ, def string
	validated      bool
}

type destColumn struct {
	notNull, generated, pk bool
	def                    *string
}

type planner struct {
	conn        Querier
	m           change.Mapping
	oid         uint32
	indexByName map[string]destIndex
	conByName   map[string]destConstraint
	cols        map[string]destColumn
	// relations are the names of the relations in the destination schema.
	relations map[string]bool
	stmts     []string
	warnings  []string
	err       error
}

func (p *planner) read(ctx context.Context) error {
	dst := p.m.Destination
	rows, err := p.conn.Query(ctx, `SELECT ic.relname::text, pg_get_indexdef(i.indexrelid),
       'CREATE ' || CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' || quote_ident(ic.relname) || ' ON ' ||
         CASE WHEN c.relkind = 'p' THEN 'ONLY ' ELSE '' END || quote_ident(n.nspname) || '.' || quote_ident(c.relname) || ' USING ',
       i.indisunique,
       i.indisprimary OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid AND k.contype IN ('p', 'u', 'x'))
FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.indrelid = $1`, p.oid)
	if err != nil {
		return fmt.Errorf("destination: read indexes of %s: %w", dst, err)
	}
	ixs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (destIndex, error) {
		var ix destIndex
		return ix, r.Scan(&ix.name, &ix.def, &ix.prefix, &ix.unique, &ix.owned)
	})
	if err != nil {
		return fmt.Errorf("destination: read indexes of %s: %w", dst, err)
	}
	p.indexByName = map[string]destIndex{}
	for _, ix := range ixs {
		p.indexByName[ix.name] = ix
	}
	rows, err = p.conn.Query(ctx, `SELECT conname::text, contype::text, pg_get_constraintdef(oid), convalidated
FROM pg_constraint WHERE conrelid = $1 AND contype IN ('c', 'u', 'x')`, p.oid)
	if err != nil {
		return fmt.Errorf("destination: read constraints of %s: %w", dst, err)
	}
	cons, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (destConstraint, error) {
		var c destConstraint
		return c, r.Scan(&c.name, &c.typ, &c.def, &c.validated)
	})
	if err != nil {
		return fmt.Errorf("destination: read constraints of %s: %w", dst, err)
	}
	p.conByName = map[string]destConstraint{}
	for _, c := range cons {
		p.conByName[c.name] = c
	}
	rows, err = p.conn.Query(ctx, `SELECT a.attname::text, a.attnotnull, a.attgenerated <> '' OR a.attidentity <> '',
       COALESCE(a.attnum = ANY (i.indkey), false), pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, p.oid)
	if err != nil {
		return fmt.Errorf("destination: read columns of %s: %w", dst, err)
	}
	p.cols = map[string]destColumn{}
	for rows.Next() {
		var name string
		var c destColumn
		if err := rows.Scan(&name, &c.notNull, &c.generated, &c.pk, &c.def); err != nil {
			rows.Close()
			return fmt.Errorf("destination: read columns of %s: %w", dst, err)
		}
		p.cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("destination: read columns of %s: %w", dst, err)
	}
	rows, err = p.conn.Query(ctx, `SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`, dst.Schema)
	if err != nil {
		return fmt.Errorf("destination: read relations of schema %s: %w", dst.Schema, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("destination: read relations of schema %s: %w", dst.Schema, err)
	}
	p.relations = map[string]bool{}
	for _, n := range names {
		p.relations[n] = true
	}
	return nil
}

func (p *planner) add(format string, args ...any) {
	p.stmts = append(p.stmts, fmt.Sprintf(format, args...))
}

func (p *planner) warn(format string, args ...any) {
	p.warnings = append(p.warnings, fmt.Sprintf(format, args...))
}

// qualified returns the destination schema-qualified name of relation name.
func (p *planner) qualified(name string) string {
	return sqlquote.Ident(p.m.Destination.Schema) + "." + sqlquote.Ident(name)
}

// drop plans the drop of an index or constraint the source dropped, when
// the destination table has it (an index backing a constraint goes with
// its constraint).
func (p *planner) drop(d Drop) {
	switch d.Object {
	case "index":
		if ix, ok := p.indexByName[d.Name]; ok && !ix.owned {
			p.add("DROP INDEX %s", p.qualified(d.Name))
		}
	case "constraint":
		if _, ok := p.conByName[d.Name]; ok {
			p.add("ALTER TABLE %s DROP CONSTRAINT %s", p.m.Destination.Quoted(), sqlquote.Ident(d.Name))
		}
	}
}

// indexes plans the indexes of the source the destination lacks or has
// with another definition; an index of the same definition under a name
// the source no longer has is renamed (ALTER INDEX ... RENAME).
func (p *planner) indexes(src []Index) {
	want := map[string]bool{}
	for _, ix := range src {
		want[ix.Name] = true
	}
	renamed := map[string]bool{}
	for _, ix := range src {
		if ix.NotCarried != "" {
			continue // Screen said why; the destination keeps what it has
		}
		rest, ok := strings.CutPrefix(ix.Def, ix.Prefix)
		if !ok {
			p.warn("index %s of %s is not created on %s: its definition %q has an unexpected form", sqlquote.Ident(ix.Name), p.m.Source, p.m.Destination, ix.Def)
			continue
		}
		unique := ""
		if ix.Unique {
			unique = "UNIQUE "
		}
		create := fmt.Sprintf("CREATE %sINDEX %s ON %s USING %s", unique, sqlquote.Ident(ix.Name), p.m.Destination.Quoted(), rest)
		if have, ok := p.indexByName[ix.Name]; ok {
			if have.owned || (have.rest() == rest && have.unique == ix.Unique) {
				continue
			}
			p.add("DROP INDEX %s", p.qualified(ix.Name))
			p.stmts = append(p.stmts, create)
			continue
		}
		if old := p.renameCandidate(rest, ix.Unique, want, renamed); old != "" {
			renamed[old] = true
			p.add("ALTER INDEX %s RENAME TO %s", p.qualified(old), sqlquote.Ident(ix.Name))
			continue
		}
		if p.relations[ix.Name] {
			p.warn("index %s of %s is not created on %s: schema %s already has a relation of that name",
				sqlquote.Ident(ix.Name), p.m.Source, p.m.Destination, sqlquote.Ident(p.m.Destination.Schema))
			continue
		}
		p.stmts = append(p.stmts, create)
	}
}

// renameCandidate returns a destination index (not a constraint's) with
// definition rest under a name the source does not have, or "".
func (p *planner) renameCandidate(rest string, unique bool, want, taken map[string]bool) string {
	for name, ix := range p.indexByName {
		if !ix.owned && !want[name] && !taken[name] && ix.unique == unique && ix.rest() == rest {
			return name
		}
	}
	return ""
}

// constraintBody is a constraint definition without its NOT VALID mark.
func constraintBody(def string) string { return strings.TrimSuffix(def, " NOT VALID") }

// constraints plans the source's check, unique and exclusion constraints
// the destination lacks, has with another definition (dropped and added
// again), under another name (renamed) or not validated yet (VALIDATE).
func (p *planner) constraints(src []Constraint) {
	want := map[string]bool{}
	for _, c := range src {
		want[c.Name] = true
	}
	renamed := map[string]bool{}
	table := p.m.Destination.Quoted()
	for _, c := range src {
		if c.NotCarried != "" {
			continue // Screen said why; the destination keeps what it has
		}
		have, ok := p.conByName[c.Name]
		if !ok {
			for name, d := range p.conByName {
				if !want[name] && !renamed[name] && d.typ == c.Type && constraintBody(d.def) == constraintBody(c.Def) {
					renamed[name] = true
					p.add("ALTER TABLE %s RENAME CONSTRAINT %s TO %s", table, sqlquote.Ident(name), sqlquote.Ident(c.Name))
					have, ok = d, true
					break
				}
			}
		}
		switch {
		case !ok:
			p.add("ALTER TABLE %s ADD CONSTRAINT %s %s", table, sqlquote.Ident(c.Name), c.Def)
		case constraintBody(have.def) != constraintBody(c.Def) || have.typ != c.Type:
			p.add("ALTER TABLE %s DROP CONSTRAINT %s", table, sqlquote.Ident(c.Name))
			p.add("ALTER TABLE %s ADD CONSTRAINT %s %s", table, sqlquote.Ident(c.Name), c.Def)
		case c.Validated && !have.validated:
			p.add("ALTER TABLE %s VALIDATE CONSTRAINT %s", table, sqlquote.Ident(c.Name))
		}
	}
}

// columns plans NOT NULL and DEFAULT changes of the columns both sides
// have, by the rules of colsync.Attributes.
func (p *planner) columns(src []Column) {
	cols := make([]colsync.Source, len(src))
	for i, c := range src {
		cols[i] = colsync.Source{Attnum: c.Attnum, Name: c.Name, NotNull: c.NotNull, Generated: c.Generated, NotCarried: c.NotCarried}
		if c.Default != nil {
			cols[i].Default = *c.Default
		}
	}
	dest := make(map[string]colsync.Dest, len(p.cols))
	for name, c := range p.cols {
		dest[name] = colsync.Dest{Name: name, NotNull: c.notNull, Default: c.def, HasDefault: c.def != nil, Generated: c.generated, PrimaryKey: c.pk}
	}
	for _, s := range colsync.Attributes(p.m, cols, dest).Steps {
		p.stmts = append(p.stmts, s.SQL)
	}
}
