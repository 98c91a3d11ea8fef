package cdc

import (
	"context"

	"github.com/pgmirror/pgmirror/engine/change"
)

// Holder lets a verification hold a running mirror at a source position for
// an instant, so that it can open a destination snapshot that holds exactly
// the transactions committed before that position (Config.Holder).
//
// The run asks HoldFloor at the begin of every source transaction; it must
// not block. When the transaction's commit LSN is at or after the floor, the
// run first commits its open batch on the destination (every transaction
// received before this one is then visible there) and calls Hold with the
// commit LSN of the waiting transaction and the run's applied position (the
// end LSN of the last transaction applied). Hold decides, and returns within
// a bounded time: it may wait until the exact position is known, announce
// that the run is held, wait to be released, or give up. Then the run applies
// the transaction and goes on.
//
// The rule a verification builds on: pgoutput sends transactions in the order
// of their commit records, and the Begin message carries the commit record's
// LSN. A slot created with an exported snapshot at consistent point X decodes
// exactly the transactions whose commit record starts at or after X, and its
// snapshot sees exactly those whose commit record lies before X. So a run held
// at the first transaction whose commit LSN is at or after X has applied
// exactly what that snapshot sees (docs/consistency.md).
type Holder interface {
	// HoldFloor returns the lowest commit LSN at which the run must call
	// Hold before applying a transaction, or 0 when no hold is wanted.
	HoldFloor() change.LSN
	// Hold is called before the transaction committing at next is applied,
	// with everything before it committed on the destination. It returns
	// within a bounded time (an instant, for the mirror's sake), or when
	// ctx ends.
	Hold(ctx context.Context, next, applied change.LSN)
}

// maybeHold runs the Holder at the begin of the transaction committing at
// next (see Holder).
func (r *runner) maybeHold(ctx context.Context, next change.LSN) error {
	h := r.cfg.Holder
	if h == nil {
		return nil
	}
	floor := h.HoldFloor()
	if floor == 0 || next < floor {
		return nil
	}
	if r.applier.InBatch() {
		if err := r.commit(ctx); err != nil {
			return err
		}
	}
	h.Hold(ctx, next, r.applied)
	return nil
}
