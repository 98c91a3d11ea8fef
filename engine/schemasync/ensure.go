package schemasync

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// lockKey serialises schemasync's DDL on one destination database, so that
// two mirrors creating the same type or schema at once do not collide.
const lockSQL = `SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('pgmirror.schemasync', 0))`

// source is a source table as read for one mapping, with the types its
// destination needs.
type source struct {
	m     change.Mapping
	table Table
}

// EnsureTables makes sure every mapping's destination table exists on dst.
//
// A missing table is created (with its schema) with the source table's
// columns in order, minus excluded columns: same names and types, NOT NULL
// where the source has it, the source's primary key (or, without one, a
// UNIQUE constraint on its replica identity index). Stored generated columns
// are created as generated columns. A partitioned source table becomes a
// plain table. User-defined types that the columns use (enums, composite
// types, domains, ranges, and arrays of them) are created first under their
// source schema and name when the destination lacks them; an existing enum
// gets the labels it lacks.
//
// An existing table is used as is after a check: every replicated source
// column must exist with a Compatible type, and every other destination
// column must be nullable or have a default. Every problem found is reported
// in the returned error.
//
// Excluding a primary key or replica identity column, or a column that does
// not exist, is an error. All DDL runs in one destination transaction; the
// statements executed are returned, so a second run returns none.
func EnsureTables(ctx context.Context, src, dst Conn, mappings []change.Mapping) ([]string, error) {
	r, err := EnsureTablesReport(ctx, src, dst, mappings)
	return r.DDL, err
}

// Report is what EnsureTablesReport did on the destination.
type Report struct {
	// DDL are the statements executed, in order.
	DDL []string
	// Existing are the destination tables (qualified, quoted) that existed
	// already: they were checked and left as they are.
	Existing []string
	// Warnings describe what could not be created as on the source (a
	// generated column or default whose expression the destination cannot
	// compute, an identity created BY DEFAULT instead of ALWAYS).
	Warnings []string
}

// EnsureTablesReport is EnsureTables, and also reports the destination
// tables that existed and the warnings of the tables it created.
func EnsureTablesReport(ctx context.Context, src, dst Conn, mappings []change.Mapping) (Report, error) {
	sources, graph, err := readSources(ctx, src, mappings, true)
	if err != nil {
		return Report{}, err
	}
	log, err := inDestination(ctx, dst, func(tx pgx.Tx, log *ddlLog) error {
		if err := ensureTypes(ctx, tx, graph.creationOrder(typeRoots(sources)), log); err != nil {
			return err
		}
		for _, s := range sources {
			dt, err := describe(ctx, tx, s.m.Destination)
			switch {
			case errors.Is(err, ErrTableNotFound):
				if err := createTable(ctx, tx, s, log); err != nil {
					return err
				}
			case err != nil:
				return err
			default:
				if err := checkExisting(s, dt); err != nil {
					return err
				}
				log.existing = append(log.existing, s.m.Destination.Quoted())
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	return Report{DDL: log.statements, Existing: log.existing, Warnings: log.warnings}, nil
}

// SyncColumns brings the destination tables of mappings up to their source
// tables' columns, for sync-schema: a column the destination lacks is added
// (nullable), a column whose destination type is not Compatible with the
// source's gets the source's type (ALTER COLUMN ... TYPE ... USING
// col::type), and user-defined types are created or given new enum labels
// first. A missing destination table is created as EnsureTables does.
// Destination columns are never dropped: a destination column that the source
// no longer has is reported in warnings, and loses its NOT NULL when it has
// no default (outside the primary key) so that new rows can leave it NULL. A
// destination column wider than the source's (say bigint for integer) is
// kept.
func SyncColumns(ctx context.Context, src, dst Conn, mappings []change.Mapping) (ddl, warnings []string, err error) {
	sources, graph, err := readSources(ctx, src, mappings, false)
	if err != nil {
		return nil, nil, err
	}
	log, err := inDestination(ctx, dst, func(tx pgx.Tx, log *ddlLog) error {
		if err := ensureTypes(ctx, tx, graph.creationOrder(typeRoots(sources)), log); err != nil {
			return err
		}
		for _, s := range sources {
			dt, err := describe(ctx, tx, s.m.Destination)
			switch {
			case errors.Is(err, ErrTableNotFound):
				if err := createTable(ctx, tx, s, log); err != nil {
					return err
				}
				continue
			case err != nil:
				return err
			}
			w, err := syncTable(ctx, tx, s, dt, log)
			if err != nil {
				return err
			}
			log.warnings = append(log.warnings, w...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return log.statements, log.warnings, nil
}

// readSources describes every mapping's source table and loads the types its
// destination columns use. strict also rejects excluded columns that the
// source does not have.
func readSources(ctx context.Context, src Conn, mappings []change.Mapping, strict bool) ([]source, *typeGraph, error) {
	graph := newTypeGraph()
	var sources []source
	err := withCatalogPath(ctx, src, func(tx pgx.Tx) error {
		for _, m := range mappings {
			t, err := describe(ctx, tx, m.Source)
			if err != nil {
				return fmt.Errorf("source: %w", err)
			}
			if err := checkExclusions(t, m, strict); err != nil {
				return err
			}
			for _, c := range t.Columns {
				if !m.Excluded(c.Name) {
					if err := graph.load(ctx, tx, c.TypeOID); err != nil {
						return fmt.Errorf("read types of %s: %w", m.Source, err)
					}
				}
			}
			sources = append(sources, source{m: m, table: t})
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return sources, graph, nil
}

func checkExclusions(t Table, m change.Mapping, strict bool) error {
	for _, name := range m.ExcludeColumns {
		if _, ok := t.Column(name); !ok {
			if strict {
				return fmt.Errorf("excluded column %s does not exist in source table %s", change.QuoteIdent(name), m.Source)
			}
			continue
		}
		if slices.Contains(t.PrimaryKey, name) {
			return fmt.Errorf("column %s of %s is part of the primary key and cannot be excluded", change.QuoteIdent(name), m.Source)
		}
		if slices.Contains(t.IdentityColumns, name) {
			return fmt.Errorf("column %s of %s is part of the replica identity and cannot be excluded", change.QuoteIdent(name), m.Source)
		}
	}
	return nil
}

// typeRoots returns the types of the columns the destinations get.
func typeRoots(sources []source) []uint32 {
	var roots []uint32
	for _, s := range sources {
		for _, c := range s.table.Columns {
			if !s.m.Excluded(c.Name) {
				roots = append(roots, c.TypeOID)
			}
		}
	}
	return roots
}

// ddlLog executes DDL statements and remembers the ones that succeeded,
// the destination tables that existed already, and warnings.
type ddlLog struct {
	statements []string
	existing   []string
	warnings   []string
}

func (l *ddlLog) warn(format string, args ...any) {
	l.warnings = append(l.warnings, fmt.Sprintf(format, args...))
}

func (l *ddlLog) exec(ctx context.Context, tx pgx.Tx, stmt string) error {
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("execute %s: %w", stmt, err)
	}
	l.statements = append(l.statements, stmt)
	return nil
}

// inDestination runs fn in one destination transaction, under the schemasync
// lock and with only pg_catalog on the search path (so qualified names from
// the source resolve the same way), and commits it.
func inDestination(ctx context.Context, dst Conn, fn func(tx pgx.Tx, log *ddlLog) error) (*ddlLog, error) {
	tx, err := dst.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("destination: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	if _, err := tx.Exec(ctx, lockSQL); err != nil {
		return nil, fmt.Errorf("destination: take schema lock: %w", err)
	}
	var searchPath string
	if err := tx.QueryRow(ctx, `SELECT pg_catalog.current_setting('search_path')`).Scan(&searchPath); err != nil {
		return nil, fmt.Errorf("destination: read search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', 'pg_catalog', true)`); err != nil {
		return nil, fmt.Errorf("destination: set search_path: %w", err)
	}
	log := &ddlLog{}
	if err := fn(tx, log); err != nil {
		return nil, fmt.Errorf("destination: %w", err)
	}
	// Restore the caller's search_path in case tx is a savepoint of theirs.
	if _, err := tx.Exec(ctx, `SELECT pg_catalog.set_config('search_path', $1, true)`, searchPath); err != nil {
		return nil, fmt.Errorf("destination: restore search_path: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("destination: commit DDL: %w", err)
	}
	return log, nil
}

func ensureSchema(ctx context.Context, tx pgx.Tx, schema string, log *ddlLog) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return fmt.Errorf("look up schema %s: %w", change.QuoteIdent(schema), err)
	}
	if exists {
		return nil
	}
	return log.exec(ctx, tx, "CREATE SCHEMA IF NOT EXISTS "+change.QuoteIdent(schema))
}

func quoteIdents(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = change.QuoteIdent(n)
	}
	return strings.Join(quoted, ", ")
}

// checkExisting checks that existing destination table dt can take the rows
// of source s.
func checkExisting(s source, dt Table) error {
	var problems []error
	replicated := map[string]bool{}
	for _, sc := range s.table.Replicated(s.m) {
		replicated[sc.Name] = true
		dc, ok := dt.Column(sc.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Errorf("column %s (source type %s) is missing; sync-schema adds it",
				change.QuoteIdent(sc.Name), sc.Type))
		case dc.Generated:
			problems = append(problems, fmt.Errorf("column %s is a generated column on the destination but a replicated column (type %s) on the source",
				change.QuoteIdent(sc.Name), sc.Type))
		case !Compatible(sc.Type, dc.Type):
			problems = append(problems, fmt.Errorf("column %s has type %s on the destination, which cannot hold source type %s",
				change.QuoteIdent(sc.Name), dc.Type, sc.Type))
		}
	}
	for _, dc := range dt.Columns {
		if !replicated[dc.Name] && dc.NotNull && !dc.HasDefault && !dc.Generated {
			problems = append(problems, fmt.Errorf("column %s (type %s) is not replicated from the source but is NOT NULL without a default",
				change.QuoteIdent(dc.Name), dc.Type))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("existing table %s does not fit source table %s: %w", s.m.Destination, s.m.Source, errors.Join(problems...))
	}
	return nil
}

// syncTable adds and retypes columns of existing destination table dt to
// match source s.
func syncTable(ctx context.Context, tx pgx.Tx, s source, dt Table, log *ddlLog) (warnings []string, err error) {
	name := s.m.Destination.Quoted()
	for _, sc := range s.table.Columns {
		if s.m.Excluded(sc.Name) {
			continue
		}
		dc, ok := dt.Column(sc.Name)
		switch {
		case !ok:
			stmt := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s", name, columnDef(sc, false))
			if err := log.exec(ctx, tx, stmt); err != nil {
				return nil, err
			}
		case sc.Generated || dc.Generated:
			// Generated on either side: nothing is copied into it.
		case !Compatible(sc.Type, dc.Type):
			col := change.QuoteIdent(sc.Name)
			stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::%s", name, col, sc.Type, col, sc.Type)
			if err := log.exec(ctx, tx, stmt); err != nil {
				return nil, err
			}
		}
	}
	for _, dc := range dt.Columns {
		if _, ok := s.table.Column(dc.Name); ok || s.m.Excluded(dc.Name) {
			continue
		}
		w := fmt.Sprintf("column %s of %s no longer exists on source table %s; it is kept on the destination",
			change.QuoteIdent(dc.Name), s.m.Destination, s.m.Source)
		if dc.NotNull && !dc.HasDefault && !dc.Generated {
			if slices.Contains(dt.PrimaryKey, dc.Name) {
				w += ", but it is part of the destination's primary key, so new rows will fail until the key is changed"
			} else {
				// New rows leave it NULL: it must allow that.
				stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", name, change.QuoteIdent(dc.Name))
				if err := log.exec(ctx, tx, stmt); err != nil {
					return nil, err
				}
				w += " and no longer NOT NULL, so new rows leave it NULL"
			}
		}
		warnings = append(warnings, w)
	}
	return warnings, nil
}
