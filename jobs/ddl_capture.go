package jobs

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/ddl"
	"github.com/pgmirror/pgmirror/engine/ownership"
)

// ensureDDLCapture installs the DDL capture trigger on the source again
// when a mirror with capture_ddl finds it missing (removed by hand, or by
// the deletion of another mirror of the database that raced this one's
// creation). A source user that may not install it gets a WARN in the
// mirror's log and the mirror goes on without: schema changes other than
// added columns are then not applied.
func (r *mirrorRun) ensureDDLCapture(ctx context.Context, src *pgx.Conn, m db.Mirror) error {
	if !m.CaptureDDL {
		return nil
	}
	installed, current, err := ddl.Installed(ctx, src)
	if err != nil || current {
		return err
	}
	if installed {
		// Installed by an older pgmirror: its functions are updated in
		// place (the triggers and the key stay).
		if err := ddl.Install(ctx, src); errors.Is(err, ownership.ErrForeignOwner) {
			return err
		} else if err != nil {
			r.log(ctx, db.LevelWarn, "DDL capture trigger not updated", map[string]any{
				"error":  err.Error(),
				"action": "the trigger installed by an older pgmirror keeps working; a column renamed in the same transaction as an index or constraint on it may leave that index or constraint out until capture_ddl can update it"})
		}
		return nil
	}
	err = ddl.Install(ctx, src)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		r.log(ctx, db.LevelInfo, "DDL capture trigger installed", map[string]any{
			"event_triggers": []string{ddl.CommandEndTrigger, ddl.SQLDropTrigger},
			"note":           "capture_ddl is on and the source database lacked the trigger; schema changes made while it was missing were not captured"})
		return nil
	case errors.Is(err, ddl.ErrNotPermitted), errors.As(err, &pgErr):
		r.log(ctx, db.LevelWarn, "DDL capture trigger missing", map[string]any{
			"error":  err.Error(),
			"action": "capture_ddl is on but the source database has no DDL capture trigger and pgmirror cannot install it; index, constraint, default and NOT NULL changes are not applied until a superuser source peer lets it install the trigger"})
		return nil
	default:
		return err
	}
}

// The run's reporter hears of the captured schema changes it applies.
var _ cdc.DDLReporter = (*batchReporter)(nil)
