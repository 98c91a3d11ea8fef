package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// This file gives a batch savepoints, so that an applier writing a
// streamed transaction while it streams (Config.Early) can undo a
// subtransaction the source rolled back, as PostgreSQL's parallel apply
// does: a savepoint at the first change of each subtransaction, and a
// rollback to it when the source rolls that subtransaction back. What is
// buffered is written before a savepoint, so the changes folded into one
// chunk never straddle it.

// savepoint is a savepoint of the open batch and the batch's counts when
// it was set.
type savepoint struct {
	name   string
	counts map[change.TableName]change.Counts
}

// Savepoint writes what is buffered and sets savepoint name in the open
// batch.
func (a *Applier) Savepoint(ctx context.Context, name string) error {
	if !a.inBatch {
		return errors.New("savepoint: no batch open")
	}
	if err := a.flush(ctx); err != nil {
		return err
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	if _, err := a.conn.PgConn().Exec(ctx, "SAVEPOINT "+sqlquote.Ident(name)).ReadAll(); err != nil {
		return fmt.Errorf("set savepoint on the destination: %w", err)
	}
	counts := make(map[change.TableName]change.Counts, len(a.counts))
	for t, c := range a.counts {
		counts[t] = *c
	}
	a.savepoints = append(a.savepoints, savepoint{name: name, counts: counts})
	return nil
}

// RollbackToSavepoint drops what is buffered, undoes the batch's writes
// since savepoint name and forgets it and the savepoints set after it; the
// batch's counts are those of that moment again.
func (a *Applier) RollbackToSavepoint(ctx context.Context, name string) error {
	if !a.inBatch {
		return errors.New("roll back to savepoint: no batch open")
	}
	i := len(a.savepoints) - 1
	for i >= 0 && a.savepoints[i].name != name {
		i--
	}
	if i < 0 {
		return fmt.Errorf("roll back to savepoint %s: no such savepoint in the batch", name)
	}
	if _, err := a.conn.PgConn().Exec(ctx, "ROLLBACK TO SAVEPOINT "+sqlquote.Ident(name)).ReadAll(); err != nil {
		return fmt.Errorf("roll back to savepoint on the destination: %w", err)
	}
	kept, counts := a.savepoints[:i], a.savepoints[i].counts
	// Staging tables created since the savepoint are gone: forget every
	// plan (they are made again, with new staging tables, as needed).
	a.reset()
	a.savepoints = kept
	for t, c := range counts {
		a.counts[t] = &c
	}
	return nil
}
