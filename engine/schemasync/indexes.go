package schemasync

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// sourceConstraintsSQL lists the check, unique and exclusion constraints of
// table $1 with their definitions, whether they use one of the columns $2
// (the excluded ones), and whether their index is the replica identity.
const sourceConstraintsSQL = `
SELECT c.conname::text, pg_catalog.pg_get_constraintdef(c.oid),
       EXISTS (SELECT 1 FROM pg_catalog.unnest(c.conkey) k
               JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k
               WHERE a.attname = ANY ($2::text[])),
       COALESCE((SELECT i.indisreplident FROM pg_catalog.pg_index i WHERE i.indexrelid = c.conindid), false),
       c.contype <> 'c',
       pg_catalog.concat_ws(' ', c.conbin::text,
         (SELECT pg_catalog.concat_ws(' ', i.indexprs::text, i.indpred::text) FROM pg_catalog.pg_index i WHERE i.indexrelid = c.conindid),
         (SELECT pg_catalog.string_agg(':opno ' || op::text, ' ') FROM pg_catalog.unnest(c.conexclop) op))
FROM pg_catalog.pg_constraint c
WHERE c.conrelid = $1 AND c.contype IN ('c', 'u', 'x')
ORDER BY c.contype, c.conname`

// sourceIndexesSQL lists the indexes of table $1 that back no constraint:
// name, definition, the prefix of the definition up to USING as
// pg_get_indexdef prints it, whether they use an excluded column ($2), and
// whether they are the replica identity.
const sourceIndexesSQL = `
SELECT ic.relname::text, pg_catalog.pg_get_indexdef(i.indexrelid),
       'CREATE ' || CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END || 'INDEX ' ||
         pg_catalog.quote_ident(ic.relname) || ' ON ' || CASE WHEN tc.relkind = 'p' THEN 'ONLY ' ELSE '' END ||
         pg_catalog.quote_ident(tn.nspname) || '.' || pg_catalog.quote_ident(tc.relname) || ' USING ',
       EXISTS (SELECT 1 FROM pg_catalog.unnest(i.indkey::int2[]) k
               JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k
               WHERE a.attname = ANY ($2::text[])),
       i.indisreplident, i.indisunique, pg_catalog.concat_ws(' ', i.indexprs::text, i.indpred::text)
FROM pg_catalog.pg_index i
JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
JOIN pg_catalog.pg_class tc ON tc.oid = i.indrelid
JOIN pg_catalog.pg_namespace tn ON tn.oid = tc.relnamespace
WHERE i.indrelid = $1 AND NOT i.indisprimary
  AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint c
                  WHERE c.conindid = i.indexrelid AND c.conrelid = i.indrelid AND c.contype IN ('p', 'u', 'x'))
ORDER BY ic.relname`

// deferredObject is a constraint or index of a source table that the
// destination gets after the table's copy.
type deferredObject struct {
	name string
	def  string
	// prefix is what pg_get_indexdef printed before the access method.
	prefix string
	// usesExcluded: it uses a column the mapping excludes.
	usesExcluded bool
	// replicaIdentity: its index is the replica identity index.
	replicaIdentity bool
	// unique: a unique or exclusion constraint, or a unique index.
	unique bool
	// tree holds the node trees of its expressions (and exclusion
	// operators as ":opno N"); notCarried says why they may not run on
	// the destination ("" when they may).
	tree, notCarried string
}

// DeferredSet selects what AddIndexesAndConstraints creates.
type DeferredSet int

const (
	// AfterCopy is what a table gets once its snapshot copy is done: check
	// constraints and non-unique indexes. Unique and exclusion constraints
	// and unique indexes are left out while CDC applies changes: a batch is
	// collapsed to the final state of each key and applied with set-based
	// statements, so values that rows swap within one batch (a unique
	// "position" column being reordered) would violate them for a moment,
	// and PostgreSQL checks a non-deferrable unique index row by row; the
	// batch would fail the same way on every retry.
	AfterCopy DeferredSet = iota + 1
	// AtCutover adds the unique and exclusion constraints and unique
	// indexes: for the switch-over, once everything is applied and no
	// further batch comes.
	AtCutover
)

// AddIndexesAndConstraints gives the destination table of m the check
// constraints (NOT VALID ones stay NOT VALID) and secondary indexes of its
// source table, under their source names, and with set AtCutover also its
// unique and exclusion constraints and unique indexes (see DeferredSet for
// why they wait). It is meant to run after the table's snapshot copy
// (AfterCopy), so that they do not slow the copy down, and does nothing
// for tables that EnsureTables did not create (those are left as they
// are).
//
// It is idempotent: a constraint of the same name on the table, or a
// relation of the index's name in the destination schema, is skipped.
// Foreign keys are left out: see docs/operations.md, "Destination foreign
// keys". Each object is created in a transaction of its own; one that the
// destination rejects (it uses an excluded column, a function the
// destination lacks, ...) is reported in warnings and the others are still
// created. It returns the statements executed.
func AddIndexesAndConstraints(ctx context.Context, src, dst Conn, m change.Mapping, set DeferredSet) (ddl, warnings []string, err error) {
	dstOID, created, err := createdByPgmirror(ctx, dst, m.Destination)
	if err != nil || !created {
		return nil, nil, err
	}
	srcTable, constraints, indexes, err := readDeferred(ctx, src, m)
	if err != nil {
		return nil, nil, err
	}
	log := &ddlLog{}
	if err := addNotNull(ctx, dst, m, srcTable, log); err != nil {
		return nil, nil, err
	}
	skip := func(o deferredObject, what string) bool {
		switch {
		case o.unique && set != AtCutover:
			return true
		case o.usesExcluded:
			log.warn("%s %s of %s is not created on %s: it uses an excluded column", what, sqlquote.Ident(o.name), m.Source, m.Destination)
			return true
		case o.notCarried != "":
			log.warn("%s %s of %s is not carried to the destination: it %s", what, sqlquote.Ident(o.name), m.Source, o.notCarried)
			return true
		case o.replicaIdentity && len(srcTable.PrimaryKey) == 0:
			return true // the destination's UNIQUE constraint on the replica identity stands for it
		}
		return false
	}
	for _, c := range constraints {
		if skip(c, "constraint") {
			continue
		}
		var exists bool
		if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint WHERE conrelid = $1 AND conname = $2)`,
			dstOID, c.name).Scan(&exists); err != nil {
			return nil, nil, fmt.Errorf("destination: look up constraint %s of %s: %w", sqlquote.Ident(c.name), m.Destination, err)
		}
		if exists {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s", m.Destination.Quoted(), sqlquote.Ident(c.name), c.def)
		if err := execDeferred(ctx, dst, log, stmt); err != nil {
			return nil, nil, err
		}
	}
	for _, ix := range indexes {
		if skip(ix, "index") {
			continue
		}
		if err := addIndex(ctx, dst, m, dstOID, ix, log); err != nil {
			return nil, nil, err
		}
	}
	// The source's replica identity, once the index it may name exists.
	stmt, warning, err := replicaIdentityDDL(ctx, dst, m, srcTable, set == AtCutover)
	if err != nil {
		return nil, nil, fmt.Errorf("destination: %w", err)
	}
	if warning != "" {
		log.warn("%s", warning)
	}
	if stmt != "" {
		if err := execDeferred(ctx, dst, log, stmt); err != nil {
			return nil, nil, err
		}
	}
	return log.statements, log.warnings, nil
}

// addIndex creates source index ix on destination table m.Destination
// (oid dstOID) unless it is there already; an index whose name another
// relation of the schema has, or whose definition has an unexpected form,
// is left out with a warning.
func addIndex(ctx context.Context, dst Conn, m change.Mapping, dstOID uint32, ix deferredObject, log *ddlLog) error {
	stmt, ok := rewriteIndexDef(ix, m.Destination)
	if !ok {
		log.warn("index %s of %s is not created on %s: its definition %q has an unexpected form", sqlquote.Ident(ix.name), m.Source, m.Destination, ix.def)
		return nil
	}
	var onTable *uint32
	err := dst.QueryRow(ctx, `SELECT i.indrelid FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_index i ON i.indexrelid = c.oid
WHERE n.nspname = $1 AND c.relname = $2`, m.Destination.Schema, ix.name).Scan(&onTable)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("destination: look up index %s of %s: %w", sqlquote.Ident(ix.name), m.Destination, err)
	case onTable == nil || *onTable != dstOID:
		log.warn("index %s of %s is not created on %s: schema %s already has a relation of that name; create the index under another name",
			sqlquote.Ident(ix.name), m.Source, m.Destination, sqlquote.Ident(m.Destination.Schema))
		return nil
	default:
		return nil // already there
	}
	return execDeferred(ctx, dst, log, stmt)
}

// addNotNull makes the columns of destination table m.Destination NOT
// NULL where the source's are and the destination's are not (a column added
// before a copy, which could not be NOT NULL while the table still held its
// older rows). Each statement runs on its own; one the destination rejects
// is reported in the warnings.
func addNotNull(ctx context.Context, dst Conn, m change.Mapping, srcTable Table, log *ddlLog) error {
	dt, err := Describe(ctx, dst, m.Destination)
	if err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	for _, sc := range srcTable.Columns {
		if !sc.NotNull || sc.Generated || m.Excluded(sc.Name) {
			continue
		}
		if dc, ok := dt.Column(sc.Name); !ok || dc.NotNull {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL", m.Destination.Quoted(), sqlquote.Ident(sc.Name))
		if err := execDeferred(ctx, dst, log, stmt); err != nil {
			return err
		}
	}
	return nil
}

// createdByPgmirror returns the OID of destination table name and whether
// EnsureTables created it: its comment says so and its owner is the
// session's role or a superuser (another role could write that comment on
// a table of its own, to have pgmirror alter it).
func createdByPgmirror(ctx context.Context, dst Conn, name change.TableName) (uint32, bool, error) {
	var oid uint32
	var comment string
	err := dst.QueryRow(ctx, `SELECT c.oid, CASE WHEN c.relowner = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER)
    OR (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.oid = c.relowner)
  THEN COALESCE(pg_catalog.obj_description(c.oid, 'pg_class'), '') ELSE '' END
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, name.Schema, name.Name).Scan(&oid, &comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, fmt.Errorf("destination: look up table %s: %w", name, ErrTableNotFound)
	}
	if err != nil {
		return 0, false, fmt.Errorf("destination: look up table %s: %w", name, err)
	}
	return oid, strings.HasPrefix(comment, createdComment), nil
}

// readDeferred describes the source table of m and reads its constraints
// and indexes.
func readDeferred(ctx context.Context, src Conn, m change.Mapping) (Table, []deferredObject, []deferredObject, error) {
	var table Table
	var constraints, indexes []deferredObject
	excluded := m.ExcludeColumns
	if excluded == nil {
		excluded = []string{}
	}
	err := withCatalogPath(ctx, src, func(tx pgx.Tx) error {
		var err error
		if table, err = describe(ctx, tx, m.Source); err != nil {
			return fmt.Errorf("source: %w", err)
		}
		rows, err := tx.Query(ctx, sourceConstraintsSQL, table.OID, excluded)
		if err != nil {
			return fmt.Errorf("source: read constraints of %s: %w", m.Source, err)
		}
		constraints, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (deferredObject, error) {
			var o deferredObject
			return o, row.Scan(&o.name, &o.def, &o.usesExcluded, &o.replicaIdentity, &o.unique, &o.tree)
		})
		if err != nil {
			return fmt.Errorf("source: read constraints of %s: %w", m.Source, err)
		}
		rows, err = tx.Query(ctx, sourceIndexesSQL, table.OID, excluded)
		if err != nil {
			return fmt.Errorf("source: read indexes of %s: %w", m.Source, err)
		}
		indexes, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (deferredObject, error) {
			var o deferredObject
			return o, row.Scan(&o.name, &o.def, &o.prefix, &o.usesExcluded, &o.replicaIdentity, &o.unique, &o.tree)
		})
		if err != nil {
			return fmt.Errorf("source: read indexes of %s: %w", m.Source, err)
		}
		chk := exprcheck.New(tx)
		for _, list := range [][]deferredObject{constraints, indexes} {
			for i := range list {
				if list[i].notCarried, err = chk.Check(ctx, list[i].tree); err != nil {
					return fmt.Errorf("source: check the expressions of %s: %w", m.Source, err)
				}
			}
		}
		return nil
	})
	return table, constraints, indexes, err
}

// rewriteIndexDef turns the source's CREATE INDEX statement of ix into one
// for destination table dst: IF NOT EXISTS, the destination table's name,
// and the rest (access method, keys, INCLUDE, WHERE) verbatim.
func rewriteIndexDef(ix deferredObject, dst change.TableName) (string, bool) {
	rest, ok := strings.CutPrefix(ix.def, ix.prefix)
	if !ok {
		return "", false
	}
	unique := ""
	if strings.HasPrefix(ix.prefix, "CREATE UNIQUE ") {
		unique = "UNIQUE "
	}
	return fmt.Sprintf("CREATE %sINDEX IF NOT EXISTS %s ON %s USING %s", unique, sqlquote.Ident(ix.name), dst.Quoted(), rest), true
}

// execDeferred runs stmt in a transaction of its own with only pg_catalog
// on the search path and no statement timeout. A statement the destination
// rejects becomes a warning; other failures (a lost connection) are
// returned.
func execDeferred(ctx context.Context, dst Conn, log *ddlLog, stmt string) error {
	tx, err := dst.Begin(ctx)
	if err != nil {
		return fmt.Errorf("destination: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog; SET LOCAL statement_timeout = 0"); err != nil {
		return fmt.Errorf("destination: set up DDL transaction: %w", err)
	}
	_, err = tx.Exec(ctx, stmt)
	if err == nil {
		err = tx.Commit(ctx)
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		log.warn("the destination rejected %s: %s", stmt, pgErr.Message)
	case err != nil:
		return fmt.Errorf("destination: execute %s: %w", stmt, err)
	default:
		log.statements = append(log.statements, stmt)
	}
	return nil
}

// RestoreIdentityAlways makes the identity columns of m's destination table
// GENERATED ALWAYS where they are on the source: EnsureTables creates them
// BY DEFAULT so that replication can write the source's values, and at a
// cut-over, once no batch follows, they become as the source has them. Like
// AddIndexesAndConstraints it does nothing for tables that EnsureTables did
// not create, and it is idempotent. It returns the statements executed.
func RestoreIdentityAlways(ctx context.Context, src, dst Conn, m change.Mapping) ([]string, error) {
	dstOID, created, err := createdByPgmirror(ctx, dst, m.Destination)
	if err != nil || !created {
		return nil, err
	}
	table, err := Describe(ctx, src, m.Source)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	var ddl []string
	for _, c := range table.Columns {
		if !c.Identity || !c.IdentityAlways || m.Excluded(c.Name) {
			continue
		}
		var identity string
		err := dst.QueryRow(ctx, `SELECT attidentity::text FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attname = $2 AND NOT attisdropped`,
			dstOID, c.Name).Scan(&identity)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return ddl, fmt.Errorf("destination: identity of %s.%s: %w", m.Destination, sqlquote.Ident(c.Name), err)
		}
		if identity != "d" {
			continue
		}
		stmt := "ALTER TABLE " + m.Destination.Quoted() + " ALTER COLUMN " + sqlquote.Ident(c.Name) + " SET GENERATED ALWAYS"
		if _, err := dst.Exec(ctx, stmt); err != nil {
			return ddl, fmt.Errorf("destination: %s: %w", stmt, err)
		}
		ddl = append(ddl, stmt)
	}
	return ddl, nil
}
