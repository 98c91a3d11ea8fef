package schemasync

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
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
// longer has and renames those the source renamed (colsync.Reshape), and
// returns the destination table as it is then.
func reshapeColumns(ctx context.Context, tx pgx.Tx, s source, dt Table, known KnownColumns, log *ddlLog) (Table, error) {
	k := make([]colsync.Known, 0, len(known))
	for attnum, name := range known {
		k = append(k, colsync.Known{Attnum: attnum, Name: name})
	}
	slices.SortFunc(k, func(x, y colsync.Known) int { return x.Attnum - y.Attnum })
	w, err := execPlan(ctx, tx, log, colsync.Reshape(s.m, colsyncSources(s.table), colsyncDests(dt), k))
	if err != nil {
		return dt, err
	}
	log.warnings = append(log.warnings, w...)
	return describe(ctx, tx, s.m.Destination)
}
