package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/ddl"
)

// DDLReporter may also be implemented by a Reporter to hear of the schema
// changes captured by pgmirror's event trigger (Config.CaptureDDL) that the
// run applied on the destination.
type DDLReporter interface {
	// SchemaChangeApplied is called for each statement executed on the
	// destination, inside the batch that carries the changes after it (the
	// batch may still roll back and be applied again by a later run).
	SchemaChangeApplied(ctx context.Context, table change.TableName, statement string)
	// SchemaChangeRejected is called for what was left out: a statement
	// the destination rejected, an object whose name is taken there.
	SchemaChangeRejected(ctx context.Context, table change.TableName, warning string)
}

// schemaChange applies a schema change message at its place in the open
// transaction: for each mapped table it concerns, the destination table is
// reconciled with it in the batch's destination transaction, after the
// changes before it.
func (r *runner) schemaChange(ctx context.Context, msg *change.SchemaMessage) error {
	parsed, err := ddl.Parse(msg.Content)
	if err != nil {
		r.log.Warn("ignoring a schema change message that cannot be read", "lsn", msg.LSN.String(), "error", err.Error())
		return nil
	}
	rep, _ := r.rep.(DDLReporter)
	for _, m := range r.cfg.Tables {
		if !parsed.Concerns(m) || r.skipped(m.Source) {
			continue
		}
		if err := r.openBatch(ctx); err != nil {
			return err
		}
		var res ddl.Result
		err := r.applier.ExecSchemaChange(ctx, m.Destination, func(ctx context.Context, conn *pgx.Conn) error {
			var err error
			res, err = ddl.Reconcile(ctx, conn, m, parsed)
			return err
		})
		if err != nil {
			return fmt.Errorf("apply schema change of %s (%s) at %s: %w", m.Source, parsed.Tag, msg.LSN, err)
		}
		for _, stmt := range res.Applied {
			r.log.Info("Schema change applied", "table", m.Destination.String(), "statement", stmt, "lsn", msg.LSN.String())
			if rep != nil {
				rep.SchemaChangeApplied(ctx, m.Destination, stmt)
			}
		}
		for _, w := range res.Warnings {
			r.log.Warn("schema change not applied", "table", m.Destination.String(), "warning", w, "lsn", msg.LSN.String())
			if rep != nil {
				rep.SchemaChangeRejected(ctx, m.Destination, w)
			}
		}
	}
	return nil
}
