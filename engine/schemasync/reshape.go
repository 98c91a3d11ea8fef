package schemasync

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// KnownColumns maps a source table's column attnums to the names its
// destination table has them under: the source's columns as the mirror last
// brought the destination to them (_pgmirror.source_columns).
type KnownColumns map[int]string

// ReshapeForCopy brings the destination table of m, which is about to be
// emptied and copied again, to its source table's columns exactly, as
// SyncColumns does and more, for a mirror that applies source schema
// changes: a column the source renamed since the destination last followed
// it (known gives the names by attnum the destination has them under) is
// renamed rather than added beside the old one, and a destination column
// the source no longer has is dropped (outside the primary key); a column
// NOT NULL on the source is made NOT NULL after the copy
// (AddIndexesAndConstraints). The copy replaces the table's rows, so no
// value is lost. A destination
// table that pgmirror did not create is only brought up by name, as
// SyncColumns does; a missing one is created.
func ReshapeForCopy(ctx context.Context, src, dst Conn, m change.Mapping, known KnownColumns) (ddl, warnings []string, err error) {
	sources, graph, err := readSources(ctx, src, []change.Mapping{m}, false)
	if err != nil {
		return nil, nil, err
	}
	s := sources[0]
	log, err := inDestination(ctx, dst, func(tx pgx.Tx, log *ddlLog) error {
		if err := ensureTypes(ctx, tx, graph.creationOrder(typeRoots(sources)), log); err != nil {
			return err
		}
		dt, err := describe(ctx, tx, m.Destination)
		switch {
		case errors.Is(err, ErrTableNotFound):
			return createTable(ctx, tx, s, log)
		case err != nil:
			return err
		}
		_, ours, err := createdByPgmirror(ctx, tx, m.Destination)
		if err != nil {
			return err
		}
		if ours {
			if dt, err = reshapeColumns(ctx, tx, s, dt, known, log); err != nil {
				return err
			}
		}
		w, err := syncTable(ctx, tx, s, dt, log, true)
		if err != nil {
			return err
		}
		log.warnings = append(log.warnings, w...)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return log.statements, log.warnings, nil
}

// reshapeColumns drops the destination columns of s that the source no
// longer has (a known attnum the source lost, or a name neither side
// knows) and renames those the source renamed (by known attnums; names
// that swap go through temporary names), and returns the destination table
// as it is then.
func reshapeColumns(ctx context.Context, tx pgx.Tx, s source, dt Table, known KnownColumns, log *ddlLog) (Table, error) {
	name := s.m.Destination.Quoted()
	byAttnum := map[int]Column{}
	for _, sc := range s.table.Columns {
		byAttnum[sc.Attnum] = sc
	}
	knownAttnum := map[string]int{}
	for attnum, n := range known {
		knownAttnum[n] = attnum
	}
	for _, dc := range dt.Columns {
		if s.m.Excluded(dc.Name) || slices.Contains(dt.PrimaryKey, dc.Name) {
			continue
		}
		gone := false
		if attnum, ok := knownAttnum[dc.Name]; ok {
			_, still := byAttnum[attnum]
			gone = !still
		} else {
			_, byName := s.table.Column(dc.Name)
			gone = !byName
		}
		if !gone {
			continue
		}
		if err := log.exec(ctx, tx, fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s", name, sqlquote.Ident(dc.Name))); err != nil {
			return dt, err
		}
	}
	dt, err := describe(ctx, tx, s.m.Destination)
	if err != nil {
		return dt, err
	}
	type rename struct{ from, to string }
	var renames []rename
	collides := false
	for _, sc := range s.table.Columns {
		old, ok := known[sc.Attnum]
		if !ok || old == sc.Name || s.m.Excluded(sc.Name) || s.m.Excluded(old) {
			continue
		}
		if _, has := dt.Column(old); !has {
			continue
		}
		if _, taken := dt.Column(sc.Name); taken {
			collides = true
		}
		renames = append(renames, rename{from: old, to: sc.Name})
	}
	if collides {
		for i, r := range renames {
			tmp := fmt.Sprintf("pgmirror_rename_%d", i)
			if err := log.exec(ctx, tx, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", name, sqlquote.Ident(r.from), sqlquote.Ident(tmp))); err != nil {
				return dt, err
			}
			renames[i].from = tmp
		}
		if dt, err = describe(ctx, tx, s.m.Destination); err != nil {
			return dt, err
		}
	}
	for _, r := range renames {
		if _, taken := dt.Column(r.to); taken {
			// Still taken by a column that is not renamed away: left as
			// it is, and the source's column is added by its name.
			continue
		}
		if err := log.exec(ctx, tx, fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", name, sqlquote.Ident(r.from), sqlquote.Ident(r.to))); err != nil {
			return dt, err
		}
	}
	return describe(ctx, tx, s.m.Destination)
}
