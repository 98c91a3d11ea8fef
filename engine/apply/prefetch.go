package apply

import (
	"context"

	"github.com/pgmirror/pgmirror/engine/change"
)

// Prefetch reads ahead, for the mapped source table src, what the table's
// first change in this session would read from the destination before it
// can be applied: the destination table's description and the source
// columns recorded for it (a few round trips, tens of milliseconds on a
// busy host, which that change would otherwise wait for). A caller
// prefetches between batches while its stream is idle.
//
// A table that cannot be described now (its destination table is missing,
// a query fails) is left to its first change, which reports why: Prefetch
// returns an error only when the connection is broken. An unmapped table,
// one described already, or an applier for large transactions
// (Config.Early, which describes only what its transaction touches) does
// nothing.
func (a *Applier) Prefetch(ctx context.Context, src change.TableName) error {
	m := a.mappings[src]
	if m == nil || a.cfg.Early || a.inBatch || a.current[src] != nil {
		return nil
	}
	if _, ok := a.tables[m.Destination]; !ok {
		if _, err := a.destTable(ctx, m.Destination); err != nil {
			if a.conn.IsClosed() {
				return err
			}
			a.log.Debug("destination table not described ahead; its first change will", "table", m.Destination.String(), "error", err)
			return nil
		}
	}
	if a.cfg.SchemaChanges != "" {
		if _, err := a.loadKnown(ctx, src); err != nil {
			if a.conn.IsClosed() {
				return err
			}
			a.log.Debug("recorded source columns not read ahead; the table's first change will", "table", src.String(), "error", err)
		}
	}
	return nil
}
