package cutover

// Foreign keys at the cut-over: while a mirror runs, the destination has
// none of the source's foreign keys (CDC does not apply changes in the
// source's order across tables). Once every change is applied the
// destination matches the source, and the source's foreign keys between
// mirrored tables are created there: NOT VALID first (no scan, a short
// lock), then VALIDATE CONSTRAINT, which checks the existing rows and fails
// on a row whose referenced row is missing.

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// ForeignKey is a source foreign key between two mirrored tables, as it is
// to be created on the destination.
type ForeignKey struct {
	// Name is the constraint's name (the source's).
	Name string
	// Source and SourceRef are the referencing and referenced source tables.
	Source, SourceRef change.TableName
	// Table and Ref are the destination tables that take their places.
	Table, Ref change.TableName
	// Clause is the constraint's definition for the destination: FOREIGN
	// KEY (...) REFERENCES <Ref> (...) with the source's match type,
	// actions and deferrability.
	Clause string
	// Validated says that the source has checked every row (a NOT VALID
	// foreign key on the source stays NOT VALID on the destination).
	Validated bool
}

// AddSQL is the statement that creates the foreign key, NOT VALID.
func (fk ForeignKey) AddSQL() string {
	return "ALTER TABLE " + fk.Table.Quoted() + " ADD CONSTRAINT " + sqlquote.Ident(fk.Name) + " " + fk.Clause + " NOT VALID"
}

// ValidateSQL is the statement that checks the existing rows.
func (fk ForeignKey) ValidateSQL() string {
	return "ALTER TABLE " + fk.Table.Quoted() + " VALIDATE CONSTRAINT " + sqlquote.Ident(fk.Name)
}

// String names the foreign key for users: name on table, referencing what.
func (fk ForeignKey) String() string {
	return fmt.Sprintf("%s on %s (references %s)", fk.Name, fk.Table, fk.Ref)
}

const foreignKeysSQL = `
SELECT k.conname, n.nspname, c.relname, rn.nspname, r.relname, k.convalidated,
       k.confmatchtype::text, k.confupdtype::text, k.confdeltype::text, k.condeferrable, k.condeferred,
       ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.i)::text[],
       ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.i)::text[]
FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_class r ON r.oid = k.confrelid
JOIN pg_catalog.pg_namespace rn ON rn.oid = r.relnamespace
WHERE k.contype = 'f' AND k.conparentid = 0
  AND (n.nspname, c.relname) IN (SELECT * FROM unnest($1::text[], $2::text[]))
ORDER BY n.nspname, c.relname, k.conname`

// SourceForeignKeys reads the foreign keys of the mapped source tables and
// returns those that can be created on the destination (both tables
// mirrored, no excluded column), with destination names. Every other one is
// described in warnings.
func SourceForeignKeys(ctx context.Context, src *pgx.Conn, mappings []change.Mapping) (fks []ForeignKey, warnings []string, err error) {
	bySource := map[change.TableName]change.Mapping{}
	schemas, names := make([]string, len(mappings)), make([]string, len(mappings))
	for i, m := range mappings {
		bySource[m.Source] = m
		schemas[i], names[i] = m.Source.Schema, m.Source.Name
	}
	rows, err := src.Query(ctx, foreignKeysSQL, schemas, names)
	if err != nil {
		return nil, nil, fmt.Errorf("read the source's foreign keys: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var fk ForeignKey
		var match, onUpdate, onDelete string
		var deferrable, deferred bool
		var cols, refCols []string
		if err := rows.Scan(&fk.Name, &fk.Source.Schema, &fk.Source.Name, &fk.SourceRef.Schema, &fk.SourceRef.Name, &fk.Validated,
			&match, &onUpdate, &onDelete, &deferrable, &deferred, &cols, &refCols); err != nil {
			return nil, nil, fmt.Errorf("read the source's foreign keys: %w", err)
		}
		m := bySource[fk.Source]
		ref, mirrored := bySource[fk.SourceRef]
		if !mirrored {
			warnings = append(warnings, fmt.Sprintf("foreign key %s of %s references %s, which the mirror does not carry: not created on the destination", fk.Name, fk.Source, fk.SourceRef))
			continue
		}
		if col, ok := excluded(m, cols); ok {
			warnings = append(warnings, fmt.Sprintf("foreign key %s of %s uses column %s, which the mirror excludes: not created on the destination", fk.Name, fk.Source, col))
			continue
		}
		if col, ok := excluded(ref, refCols); ok {
			warnings = append(warnings, fmt.Sprintf("foreign key %s of %s references column %s of %s, which the mirror excludes: not created on the destination", fk.Name, fk.Source, col, fk.SourceRef))
			continue
		}
		fk.Table, fk.Ref = m.Destination, ref.Destination
		fk.Clause = "FOREIGN KEY (" + sqlquote.Idents(cols) + ") REFERENCES " + fk.Ref.Quoted() + " (" + sqlquote.Idents(refCols) + ")" +
			matchClause(match) + " ON UPDATE " + action(onUpdate) + " ON DELETE " + action(onDelete)
		if deferrable {
			fk.Clause += " DEFERRABLE"
			if deferred {
				fk.Clause += " INITIALLY DEFERRED"
			}
		}
		fks = append(fks, fk)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read the source's foreign keys: %w", err)
	}
	return fks, warnings, nil
}

func excluded(m change.Mapping, cols []string) (string, bool) {
	for _, c := range cols {
		for _, x := range m.ExcludeColumns {
			if c == x {
				return c, true
			}
		}
	}
	return "", false
}

func matchClause(t string) string {
	switch t {
	case "f":
		return " MATCH FULL"
	case "p":
		return " MATCH PARTIAL"
	}
	return "" // MATCH SIMPLE, the default
}

func action(t string) string {
	switch t {
	case "r":
		return "RESTRICT"
	case "c":
		return "CASCADE"
	case "n":
		return "SET NULL"
	case "d":
		return "SET DEFAULT"
	}
	return "NO ACTION"
}

// ErrForeignKey matches (errors.Is) a foreign key the destination's rows
// do not satisfy, or that the destination refused.
var ErrForeignKey = errors.New("foreign key not created on the destination")

// CreateForeignKey creates fk on the destination NOT VALID and then
// validates it (unless the source's is NOT VALID too). It reports whether
// it created it: a constraint of that name on the table is left alone. A
// failure, a violating row included, is an error matching ErrForeignKey
// that names the foreign key; the constraint is then dropped again.
func CreateForeignKey(ctx context.Context, dst *pgx.Conn, fk ForeignKey) (bool, error) {
	var exists bool
	err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
		WHERE conrelid = to_regclass($1) AND conname = $2)`, fk.Table.Quoted(), fk.Name).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look for foreign key %s on the destination: %w", fk, err)
	}
	if exists {
		return false, nil
	}
	if _, err := dst.Exec(ctx, fk.AddSQL()); err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrForeignKey, fk, err)
	}
	if !fk.Validated {
		return true, nil
	}
	if _, err := dst.Exec(ctx, fk.ValidateSQL()); err != nil {
		var pgErr *pgconn.PgError
		why := err.Error()
		if errors.As(err, &pgErr) && pgErr.Code == "23503" {
			why = fmt.Sprintf("rows of %s on the destination reference rows of %s that do not exist there (%s)", fk.Table, fk.Ref, pgErr.Detail)
		}
		if derr := DropForeignKey(context.WithoutCancel(ctx), dst, fk); derr != nil {
			why += "; dropping it again failed too: " + derr.Error()
		}
		return false, fmt.Errorf("%w: %s: validation failed: %s", ErrForeignKey, fk, why)
	}
	return true, nil
}

// DropForeignKey drops fk from the destination when it is there.
func DropForeignKey(ctx context.Context, dst *pgx.Conn, fk ForeignKey) error {
	if _, err := dst.Exec(ctx, "ALTER TABLE "+fk.Table.Quoted()+" DROP CONSTRAINT IF EXISTS "+sqlquote.Ident(fk.Name)); err != nil {
		return fmt.Errorf("drop foreign key %s on the destination: %w", fk, err)
	}
	return nil
}
