package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// ExecSchemaChange applies a schema change of destination table dest at its
// place among the batch's changes: it writes what is buffered into the open
// batch's destination transaction, then calls fn with the connection inside
// that transaction (the change commits or rolls back with the batch, and so
// with the applied position), and then reads dest again, so that the
// changes after it see its new NOT NULL columns and unique indexes.
func (a *Applier) ExecSchemaChange(ctx context.Context, dest change.TableName, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	if !a.inBatch {
		return errors.New("apply schema change: no batch open")
	}
	if err := a.flush(ctx); err != nil {
		return err
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	a.lastPlan = nil
	if err := fn(ctx, a.conn); err != nil {
		return err
	}
	old := a.tables[dest]
	if old == nil {
		return nil
	}
	delete(a.tables, dest)
	t, err := a.destTable(ctx, dest)
	if err != nil {
		return fmt.Errorf("after a schema change: %w", err)
	}
	// Plans share the table's description: update it in place.
	*old = *t
	a.tables[dest] = old
	return nil
}
