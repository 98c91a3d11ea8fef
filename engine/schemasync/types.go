package schemasync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// firstNormalOID is FirstNormalObjectId: OIDs below it belong to objects
// that initdb creates, and are the same in every cluster of a major version.
const firstNormalOID = 16384

// queryer runs catalog queries; pgx.Tx satisfies it.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// pgType is what this package knows of one pg_type row (and, for user-defined
// types, of what it takes to create it again elsewhere).
type pgType struct {
	OID          uint32
	Schema, Name string
	Kind         byte   // typtype: b, c, d, e, p, r, m
	Expr         string // format_type(oid, NULL), qualified outside pg_catalog
	Elem         uint32 // element type of an array type, else 0
	Base         uint32 // base type of a domain
	BaseExpr     string // format_type(typbasetype, typtypmod)
	RelID        uint32 // pg_class row of a composite type
	RangeSubtype uint32
	RangeExpr    string // format_type(rngsubtype, NULL)
	MultiRange   uint32 // the range type of a multirange type
	BinaryIO     bool   // has typsend and typreceive
	NotNull      bool   // domain NOT NULL
	Default      string // domain default expression
	DefaultTree  string // its node tree (typdefaultbin)
	// DefaultNotCarried says why the domain's default is left out on the
	// destination (checkDomains).
	DefaultNotCarried string

	Labels      []string // enum labels in sort order
	Attrs       []typeAttr
	Constraints []domainConstraint
}

type typeAttr struct {
	Name string
	Expr string
	OID  uint32
}

type domainConstraint struct {
	Name string
	Def  string
	Tree string // conbin
	// NotCarried says why the constraint is left out on the destination
	// (checkDomains).
	NotCarried string
}

func (t *pgType) userDefined() bool {
	return t.Schema != "pg_catalog" && t.Schema != "information_schema"
}

func (t *pgType) qualified() string {
	return change.TableName{Schema: t.Schema, Name: t.Name}.Quoted()
}

func (t *pgType) kindName() string {
	switch t.Kind {
	case 'b':
		return "base type"
	case 'c':
		return "composite type"
	case 'd':
		return "domain"
	case 'e':
		return "enum"
	case 'p':
		return "pseudo-type"
	case 'r':
		return "range type"
	case 'm':
		return "multirange type"
	}
	return fmt.Sprintf("type of kind %q", t.Kind)
}

// typeGraph holds the types that a set of columns uses, directly or through
// arrays, domains, composites and ranges.
type typeGraph struct {
	types map[uint32]*pgType
	srv   pgversion.Server // of the database the types are read from; read on first use
}

func newTypeGraph() *typeGraph { return &typeGraph{types: map[uint32]*pgType{}} }

// typeSQL reads a type; its two version-dependent expressions come from
// typeSQLFor.
const typeSQL = `
SELECT t.oid, n.nspname, t.typname, t.typtype, pg_catalog.format_type(t.oid, NULL),
       %s,
       t.typbasetype, CASE WHEN t.typbasetype <> 0 THEN pg_catalog.format_type(t.typbasetype, t.typtypmod) ELSE '' END,
       t.typrelid, COALESCE(r.rngsubtype, 0), COALESCE(pg_catalog.format_type(r.rngsubtype, NULL), ''),
       %s, t.typsend <> 0 AND t.typreceive <> 0, t.typnotnull,
       COALESCE(pg_catalog.pg_get_expr(t.typdefaultbin, 0), ''), COALESCE(t.typdefaultbin::text, '')
FROM pg_catalog.pg_type t
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
LEFT JOIN pg_catalog.pg_range r ON r.rngtypid = t.oid
WHERE t.oid = $1`

// typeSQLFor returns typeSQL for a server: from PostgreSQL 14 an array is
// a type whose subscript handler is array_subscript_handler and a
// multirange names its range in pg_range.rngmultitypid; before, an array is
// a variable-length type with an element type (fixed-length types such as
// point have one too, and are no arrays) and there are no multiranges.
func typeSQLFor(srv pgversion.Server) string {
	if srv.Multiranges() {
		return fmt.Sprintf(typeSQL,
			`CASE WHEN t.typsubscript = 'pg_catalog.array_subscript_handler'::pg_catalog.regproc THEN t.typelem ELSE 0 END`,
			`COALESCE((SELECT mr.rngtypid FROM pg_catalog.pg_range mr WHERE mr.rngmultitypid = t.oid), 0)`)
	}
	return fmt.Sprintf(typeSQL, `CASE WHEN t.typelem <> 0 AND t.typlen = -1 THEN t.typelem ELSE 0 END`, `0::oid`)
}

// load reads type oid and every type it depends on. The caller's transaction
// must have only pg_catalog on its search path.
func (g *typeGraph) load(ctx context.Context, q queryer, oid uint32) error {
	if oid == 0 || g.types[oid] != nil {
		return nil
	}
	if g.srv.Num == 0 {
		srv, err := pgversion.Read(ctx, q)
		if err != nil {
			return err
		}
		g.srv = srv
	}
	key := builtinKey{major: g.srv.Major(), oid: oid}
	if cached, ok := builtinTypes.Load(key); ok {
		t := *cached.(*pgType)
		g.types[oid] = &t
		return g.loadDeps(ctx, q, &t)
	}
	t := &pgType{}
	err := q.QueryRow(ctx, typeSQLFor(g.srv), oid).Scan(&t.OID, &t.Schema, &t.Name, &t.Kind, &t.Expr, &t.Elem,
		&t.Base, &t.BaseExpr, &t.RelID, &t.RangeSubtype, &t.RangeExpr, &t.MultiRange, &t.BinaryIO,
		&t.NotNull, &t.Default, &t.DefaultTree)
	if err != nil {
		return fmt.Errorf("read type %d: %w", oid, err)
	}
	g.types[oid] = t
	if t.userDefined() {
		if err := g.loadDetails(ctx, q, t); err != nil {
			return fmt.Errorf("read type %s: %w", t.Expr, err)
		}
	} else if oid < firstGenObjectID {
		c := *t
		builtinTypes.Store(key, &c)
	}
	return g.loadDeps(ctx, q, t)
}

// firstGenObjectID is PostgreSQL's FirstGenObjectId: objects with a lower
// oid are the built-in ones of the catalog's initial contents, the same on
// every cluster of a major version.
const firstGenObjectID = 10000

// builtinKey names a built-in type of a major version.
type builtinKey struct {
	major int
	oid   uint32
}

// builtinTypes holds the built-in types read so far (*pgType by
// builtinKey): they never change, and every table's columns use some, so
// a run's setup reads each once per process instead of once per table and
// run.
var builtinTypes sync.Map

// loadDeps loads the types t depends on.
func (g *typeGraph) loadDeps(ctx context.Context, q queryer, t *pgType) error {
	deps := []uint32{t.Elem, t.Base, t.RangeSubtype, t.MultiRange}
	for _, a := range t.Attrs {
		deps = append(deps, a.OID)
	}
	for _, d := range deps {
		if err := g.load(ctx, q, d); err != nil {
			return err
		}
	}
	return nil
}

// loadDetails reads what creating t again requires: enum labels, composite
// attributes, domain constraints.
func (g *typeGraph) loadDetails(ctx context.Context, q queryer, t *pgType) error {
	switch t.Kind {
	case 'e':
		rows, err := q.Query(ctx, `SELECT enumlabel::text FROM pg_catalog.pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder`, t.OID)
		if err != nil {
			return err
		}
		if t.Labels, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
	case 'c':
		rows, err := q.Query(ctx, `
SELECT attname::text, pg_catalog.format_type(atttypid, atttypmod), atttypid
FROM pg_catalog.pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped
ORDER BY attnum`, t.RelID)
		if err != nil {
			return err
		}
		if t.Attrs, err = pgx.CollectRows(rows, pgx.RowToStructByPos[typeAttr]); err != nil {
			return err
		}
	case 'd':
		rows, err := q.Query(ctx, `
SELECT conname::text, pg_catalog.pg_get_constraintdef(oid), COALESCE(conbin::text, ''), ''
FROM pg_catalog.pg_constraint
WHERE contypid = $1 AND contype = 'c'
ORDER BY conname`, t.OID)
		if err != nil {
			return err
		}
		if t.Constraints, err = pgx.CollectRows(rows, pgx.RowToStructByPos[domainConstraint]); err != nil {
			return err
		}
	}
	return nil
}

// binarySafe reports whether values of type oid can travel in binary COPY
// format between two databases whose types have the same definitions: the
// type has binary I/O and its binary form embeds no OID that differs between
// databases (arrays of user-defined types carry the element's OID, composite
// values carry each attribute's OID).
func (g *typeGraph) binarySafe(oid uint32) bool {
	t := g.types[oid]
	if t == nil || !t.BinaryIO {
		return false
	}
	switch {
	case t.Kind == 'c':
		return false
	case t.Kind == 'd':
		return g.binarySafe(t.Base)
	case t.Elem != 0:
		return t.Elem < firstNormalOID && g.binarySafe(t.Elem)
	case t.Kind == 'r':
		return g.binarySafe(t.RangeSubtype)
	case t.Kind == 'm':
		return g.binarySafe(t.MultiRange)
	}
	return true
}

// creationOrder returns the user-defined types among roots and their
// dependencies that must exist on a destination, dependencies first. Array
// and multirange types are left out: creating their element or range type
// creates them.
func (g *typeGraph) creationOrder(roots []uint32) []*pgType {
	var order []*pgType
	seen := map[uint32]bool{}
	var visit func(oid uint32)
	visit = func(oid uint32) {
		t := g.types[oid]
		if t == nil || seen[oid] {
			return
		}
		seen[oid] = true
		visit(t.Elem)
		visit(t.Base)
		visit(t.RangeSubtype)
		visit(t.MultiRange)
		for _, a := range t.Attrs {
			visit(a.OID)
		}
		if t.userDefined() && t.Elem == 0 && t.Kind != 'm' && t.Kind != 'p' {
			order = append(order, t)
		}
	}
	for _, oid := range roots {
		visit(oid)
	}
	return order
}

// createTypeSQL returns the statement that creates t.
func createTypeSQL(t *pgType) (string, error) {
	var b strings.Builder
	switch t.Kind {
	case 'e':
		fmt.Fprintf(&b, "CREATE TYPE %s AS ENUM (", t.qualified())
		for i, l := range t.Labels {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sqlquote.Literal(l))
		}
		b.WriteString(")")
	case 'c':
		fmt.Fprintf(&b, "CREATE TYPE %s AS (", t.qualified())
		for i, a := range t.Attrs {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", sqlquote.Ident(a.Name), a.Expr)
		}
		b.WriteString(")")
	case 'd':
		fmt.Fprintf(&b, "CREATE DOMAIN %s AS %s", t.qualified(), t.BaseExpr)
		if t.Default != "" && t.DefaultNotCarried == "" {
			fmt.Fprintf(&b, " DEFAULT %s", t.Default)
		}
		if t.NotNull {
			b.WriteString(" NOT NULL")
		}
		for _, c := range t.Constraints {
			if c.NotCarried == "" {
				fmt.Fprintf(&b, " CONSTRAINT %s %s", sqlquote.Ident(c.Name), c.Def)
			}
		}
	case 'r':
		fmt.Fprintf(&b, "CREATE TYPE %s AS RANGE (SUBTYPE = %s)", t.qualified(), t.RangeExpr)
	default:
		return "", fmt.Errorf("type %s is a %s that pgmirror cannot create: create it on the destination (for an extension's type, install the extension there)", t.Expr, t.kindName())
	}
	return b.String(), nil
}

// ensureTypes creates on the destination (tx, with only pg_catalog on its
// search path) the user-defined types in order that it lacks, and adds enum
// labels the destination's copy of an enum lacks.
func ensureTypes(ctx context.Context, tx Execer, order []*pgType, log *ddlLog) error {
	for _, t := range order {
		var dstOID uint32
		var dstKind byte
		err := tx.QueryRow(ctx, `
SELECT t.oid, t.typtype FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE n.nspname = $1 AND t.typname = $2`, t.Schema, t.Name).Scan(&dstOID, &dstKind)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			stmt, err := createTypeSQL(t)
			if err != nil {
				return err
			}
			if err := ensureSchema(ctx, tx, t.Schema, log); err != nil {
				return err
			}
			if err := log.exec(ctx, tx, stmt); err != nil {
				return err
			}
			for _, c := range t.Constraints {
				if c.NotCarried != "" {
					log.warn("CHECK constraint %s of domain %s is not carried to the destination: it %s; the domain was created without it",
						sqlquote.Ident(c.Name), t.Expr, c.NotCarried)
				}
			}
			if t.Default != "" && t.DefaultNotCarried != "" {
				log.warn("default of domain %s is not carried to the destination: it %s; the domain was created without it", t.Expr, t.DefaultNotCarried)
			}
		case err != nil:
			return fmt.Errorf("look up type %s on the destination: %w", t.Expr, err)
		case dstKind != t.Kind:
			existing := pgType{Kind: dstKind}
			return fmt.Errorf("type %s is a %s on the source but a %s on the destination", t.Expr, t.kindName(), existing.kindName())
		case t.Kind == 'e':
			if err := addEnumLabels(ctx, tx, t, dstOID, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// EnsureTypesIn creates in dst, an open transaction of the caller, the
// user-defined types among the source types oids (and those they depend
// on) that the destination lacks, and adds the enum labels its copies
// lack, as the first setup does. It returns the statements executed and
// warnings about what was left out (a domain's CHECK or default that calls
// a user function). The transaction's search_path is pg_catalog meanwhile
// and restored after.
func EnsureTypesIn(ctx context.Context, src Conn, dst Execer, oids []uint32) (ddl, warnings []string, err error) {
	graph := newTypeGraph()
	err = withCatalogPath(ctx, src, func(tx pgx.Tx) error {
		for _, oid := range oids {
			if err := graph.load(ctx, tx, oid); err != nil {
				return err
			}
		}
		return graph.checkDomains(ctx, exprcheck.New(tx))
	})
	if err != nil {
		return nil, nil, fmt.Errorf("source: %w", err)
	}
	order := graph.creationOrder(oids)
	if len(order) == 0 {
		return nil, nil, nil
	}
	var searchPath string
	if err := dst.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&searchPath); err != nil {
		return nil, nil, fmt.Errorf("destination: read search_path: %w", err)
	}
	if _, err := dst.Exec(ctx, `SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)`); err != nil {
		return nil, nil, fmt.Errorf("destination: set search_path: %w", err)
	}
	log := &ddlLog{}
	if err := ensureTypes(ctx, dst, order, log); err != nil {
		return nil, nil, fmt.Errorf("destination: %w", err)
	}
	if _, err := dst.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, searchPath); err != nil {
		return nil, nil, fmt.Errorf("destination: restore search_path: %w", err)
	}
	return log.statements, log.warnings, nil
}

// addEnumLabels adds to the destination's enum (dstOID) the source labels it
// lacks, each at its source position.
func addEnumLabels(ctx context.Context, tx Execer, t *pgType, dstOID uint32, log *ddlLog) error {
	rows, err := tx.Query(ctx, `SELECT enumlabel::text FROM pg_catalog.pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder`, dstOID)
	if err != nil {
		return fmt.Errorf("read labels of enum %s on the destination: %w", t.Expr, err)
	}
	labels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read labels of enum %s on the destination: %w", t.Expr, err)
	}
	have := map[string]bool{}
	for _, l := range labels {
		have[l] = true
	}
	for i, l := range t.Labels {
		if have[l] {
			continue
		}
		stmt := fmt.Sprintf("ALTER TYPE %s ADD VALUE %s", t.qualified(), sqlquote.Literal(l))
		switch {
		case i > 0:
			stmt += " AFTER " + sqlquote.Literal(t.Labels[i-1])
		case len(labels) > 0:
			stmt += " BEFORE " + sqlquote.Literal(labels[0])
		}
		if err := log.exec(ctx, tx, stmt); err != nil {
			return err
		}
		have[l] = true
	}
	return nil
}
