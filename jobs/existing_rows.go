package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// existingRows returns what the copy of each of tables does with the rows
// its destination table holds, for tablesync.Config.Existing, and the
// Taken function that records the tables as taken over once they were
// checked and emptied.
//
// A table's first copy follows the mirror's existing_destination_rows,
// also that of a table a mapped schema gained on the source after the
// mirror started (it comes with a copy requested, but its destination
// table, which may have existed before, was never taken over). Every
// later copy (a full resync, which takes every table over, a table
// resync, or a copy that restarts after the table was taken over)
// truncates the table: its rows are the mirror's. A table kept (keep) is
// taken over when its copy ends (MirrorTableSnapshotted), so that a
// restarted first copy upserts again instead of truncating.
func (r *mirrorRun) existingRows(m db.Mirror, tables []db.MirrorTable) (map[change.TableName]tablesync.ExistingRows, func(context.Context) error) {
	existing := map[change.TableName]tablesync.ExistingRows{}
	var take []int64
	for _, t := range tables {
		if t.DestinationTakenAt != nil || (t.ResyncRequestedAt != nil && !t.FromSchemaMapping) {
			continue // truncated
		}
		switch m.ExistingDestinationRows {
		case db.ExistingRowsKeep:
			existing[t.Destination()] = tablesync.KeepRows
		case db.ExistingRowsTruncate:
			take = append(take, t.ID)
		default:
			existing[t.Destination()] = tablesync.RefuseRows
			take = append(take, t.ID)
		}
	}
	taken := func(ctx context.Context) error {
		if len(take) == 0 {
			return nil
		}
		return r.store.MirrorTablesTakeDestination(ctx, m.ID, take)
	}
	return existing, taken
}

// refusedCopy handles the end of a copy of tables: when err is a refusal of
// destination rows, nothing was truncated or copied, so the tables of their
// first copy go back to pending (a table being copied blocks pause, and
// pausing is how existing_destination_rows is changed), and the error says
// what the operator can do. Other errors are returned as they are.
func (r *mirrorRun) refusedCopy(ctx context.Context, m db.Mirror, tables []db.MirrorTable, err error) error {
	var refused *tablesync.ExistingRowsError
	var noKey *tablesync.NoPrimaryKeyError
	if !errors.As(err, &refused) && !errors.As(err, &noKey) {
		return err
	}
	var first []int64
	for _, t := range tables {
		if t.DestinationTakenAt == nil && t.ResyncRequestedAt == nil {
			first = append(first, t.ID)
		}
	}
	if len(first) > 0 {
		if serr := r.store.MirrorTablesSetStatus(ctx, m.ID, first, db.TableStatusPending); serr != nil {
			r.logger.Warn("set refused tables back to pending", "error", serr)
		}
	}
	return explainExistingRows(m, err)
}

// explainExistingRows adds to a copy's refusal of destination rows what
// the operator can do about it.
func explainExistingRows(m db.Mirror, err error) error {
	var refused *tablesync.ExistingRowsError
	var noKey *tablesync.NoPrimaryKeyError
	switch {
	case errors.As(err, &refused):
		return fmt.Errorf("%w (existing_destination_rows is %s). Empty the tables, or pause the mirror and set existing_destination_rows "+
			"to truncate (replace their rows) or keep (copy over them with upserts by primary key) with PUT /v1/mirrors/%s/tables, then resume it",
			err, m.ExistingDestinationRows, m.Name)
	case errors.As(err, &noKey):
		return fmt.Errorf("%w (existing_destination_rows is keep). Add a primary key to the tables, empty them, or pause the mirror and set "+
			"existing_destination_rows to truncate with PUT /v1/mirrors/%s/tables, then resume it", err, m.Name)
	}
	return err
}
