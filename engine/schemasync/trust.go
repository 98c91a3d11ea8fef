package schemasync

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
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
// generation expression is left out.
func notCarriedColumn(c Column, table change.TableName) string {
	if c.Generated {
		return fmt.Sprintf("generated column %s of %s is not carried to the destination as generated: its expression %s; the destination's column is a plain column that stays NULL",
			change.QuoteIdent(c.Name), table, c.NotCarried)
	}
	return fmt.Sprintf("default of column %s of %s is not carried to the destination: it %s", change.QuoteIdent(c.Name), table, c.NotCarried)
}
