package schemasync

import (
	"context"
	"fmt"
	"slices"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// This file decides which expressions of the source reach the
// destination. pgmirror's destination role (often a superuser) evaluates
// whatever it creates there: a CHECK when it is added and at every row
// written, a default or generated expression at every insert, an index
// expression when the index is built and at every write, a domain's CHECK
// at every value of that type. An expression is carried only when
// exprcheck allows every function, operator and type it uses; otherwise
// the object is left out (a domain without that CHECK, a column without
// that default, a generated column as a plain column) and a warning names
// the table, the object and the reason.

// checkColumns sets Column.NotCarried for the columns of t (read from the
// source, through chk's database) whose default or generation expression
// may not run on the destination.
func checkColumns(ctx context.Context, chk *exprcheck.Checker, t *Table) error {
	for i := range t.Columns {
		c := &t.Columns[i]
		if c.ExprTree == "" {
			continue
		}
		reason, err := chk.Check(ctx, c.ExprTree)
		if err != nil {
			return fmt.Errorf("check the expressions of %s: %w", t.Name, err)
		}
		c.NotCarried = reason
	}
	return nil
}

// checkDomains marks the CHECK constraints and defaults of the domains in
// g that may not run on the destination; createTypeSQL leaves them out.
func (g *typeGraph) checkDomains(ctx context.Context, chk *exprcheck.Checker) error {
	for _, t := range g.types {
		if t.Kind != 'd' || !t.userDefined() {
			continue
		}
		for i := range t.Constraints {
			reason, err := chk.Check(ctx, t.Constraints[i].Tree)
			if err != nil {
				return fmt.Errorf("check the constraints of domain %s: %w", t.Expr, err)
			}
			t.Constraints[i].NotCarried = reason
		}
		if t.DefaultTree != "" {
			reason, err := chk.Check(ctx, t.DefaultTree)
			if err != nil {
				return fmt.Errorf("check the default of domain %s: %w", t.Expr, err)
			}
			t.DefaultNotCarried = reason
		}
	}
	return nil
}

// notCarriedColumn is the warning for a column whose default or
// generation expression is left out (colsync.NotCarriedNote).
func notCarriedColumn(c Column, table change.TableName) string {
	return colsync.NotCarriedNote(colsync.Source{Name: c.Name, Generated: c.Generated, NotCarried: c.NotCarried}, table)
}

// ExpressionsNotCarried lists, for the cut-over's report, the expressions
// of the mapped source tables that pgmirror leaves out because they may
// not run with the destination role's privileges (column defaults,
// generated columns, check, unique and exclusion constraints, indexes, and
// CHECK constraints and defaults of the domains their columns use) and
// that the destination lacks: each as "what on table (reason)".
func ExpressionsNotCarried(ctx context.Context, src, dst Conn, mappings []change.Mapping) ([]string, error) {
	var out []string
	for _, m := range mappings {
		sources, graph, err := readSources(ctx, src, []change.Mapping{m}, false)
		if err != nil {
			return nil, err
		}
		_, constraints, indexes, err := readDeferred(ctx, src, m)
		if err != nil {
			return nil, err
		}
		dt, err := Describe(ctx, dst, m.Destination)
		if err != nil {
			return nil, fmt.Errorf("destination: %w", err)
		}
		for _, c := range sources[0].table.Columns {
			if c.NotCarried == "" || m.Excluded(c.Name) {
				continue
			}
			dc, ok := dt.Column(c.Name)
			switch {
			case c.Generated && (!ok || !dc.Generated):
				out = append(out, fmt.Sprintf("generated column %s on %s (%s)", sqlquote.Ident(c.Name), m.Destination, c.NotCarried))
			case !c.Generated && c.Default != "" && (!ok || dc.Default == ""):
				out = append(out, fmt.Sprintf("default of column %s on %s (%s)", sqlquote.Ident(c.Name), m.Destination, c.NotCarried))
			}
		}
		for _, o := range constraints {
			if o.notCarried == "" {
				continue
			}
			var has bool
			if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = $1 AND conname = $2)`, dt.OID, o.name).Scan(&has); err != nil {
				return nil, fmt.Errorf("destination: look up constraint %s of %s: %w", sqlquote.Ident(o.name), m.Destination, err)
			}
			if !has {
				out = append(out, fmt.Sprintf("constraint %s on %s (%s)", sqlquote.Ident(o.name), m.Destination, o.notCarried))
			}
		}
		for _, o := range indexes {
			if o.notCarried == "" {
				continue
			}
			var has bool
			if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_index WHERE indrelid = $1 AND indexrelid::pg_catalog.regclass::text IN ($2, $3))`,
				dt.OID, o.name, change.TableName{Schema: m.Destination.Schema, Name: o.name}.Quoted()).Scan(&has); err != nil {
				return nil, fmt.Errorf("destination: look up index %s of %s: %w", sqlquote.Ident(o.name), m.Destination, err)
			}
			if !has {
				out = append(out, fmt.Sprintf("index %s on %s (%s)", sqlquote.Ident(o.name), m.Destination, o.notCarried))
			}
		}
		for _, t := range graph.creationOrder(typeRoots(sources)) {
			for _, c := range t.Constraints {
				if c.NotCarried == "" {
					continue
				}
				var has bool
				if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k JOIN pg_catalog.pg_type t ON t.oid = k.contypid
JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = $1 AND t.typname = $2 AND k.conname = $3)`, t.Schema, t.Name, c.Name).Scan(&has); err != nil {
					return nil, fmt.Errorf("destination: look up constraint %s of domain %s: %w", sqlquote.Ident(c.Name), t.Expr, err)
				}
				if !has {
					item := fmt.Sprintf("CHECK constraint %s of domain %s (%s)", sqlquote.Ident(c.Name), t.Expr, c.NotCarried)
					if !slices.Contains(out, item) {
						out = append(out, item)
					}
				}
			}
		}
	}
	return out, nil
}
