package cdc

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/pgmirror/pgmirror/engine/change"
)

// ConfirmCeiling bounds what runs confirm to the mirror's slot beyond the
// changes they applied on the destination.
//
// A run confirms the end of every transaction it applied, and also the
// ends of transactions with nothing to replicate and the source's WAL end
// while idle, so that the source does not keep WAL for nothing. The
// latter positions lie past the applied position that the destination
// records. With a ceiling, a run confirms those only up to Limit; the
// ceiling's recorder records a higher position durably (the catalog) and
// the ceiling is raised to it, following Wanted: periodically (the
// caller calls Settle) and when a run stops, so that its last status
// update confirms the WAL it read past its last transaction. So the slot's confirmed position is never past
// both the destination's applied position and the recorded ceiling, unless
// someone else moved the slot (recreated or advanced it): changes between
// the applied position and the slot's were then never delivered.
//
// A ConfirmCeiling is safe for concurrent use; one serves every run of a
// mirror in turn.
type ConfirmCeiling struct {
	limit  atomic.Uint64
	wanted atomic.Uint64
	record CeilingRecorder
}

// CeilingRecorder records lsn durably as the mirror's confirm ceiling (it
// only ever raises the recorded one).
type CeilingRecorder func(ctx context.Context, lsn change.LSN) error

// NewConfirmCeiling returns a ceiling at lsn (a position recorded already)
// whose Settle records higher ones with record (nil: Settle does nothing
// and only Raise moves it).
func NewConfirmCeiling(lsn change.LSN, record CeilingRecorder) *ConfirmCeiling {
	c := &ConfirmCeiling{record: record}
	c.limit.Store(uint64(lsn))
	c.wanted.Store(uint64(lsn))
	return c
}

// Limit returns the ceiling.
func (c *ConfirmCeiling) Limit() change.LSN { return change.LSN(c.limit.Load()) }

// Wanted returns the highest position a run wanted to confirm so far.
func (c *ConfirmCeiling) Wanted() change.LSN { return change.LSN(c.wanted.Load()) }

// Raise moves the ceiling up to lsn (never down); call it once lsn is
// recorded.
func (c *ConfirmCeiling) Raise(lsn change.LSN) { storeMax(&c.limit, lsn) }

// Settle records the highest position a run wanted to confirm, when it is
// above the ceiling, and raises the ceiling to it.
func (c *ConfirmCeiling) Settle(ctx context.Context) error {
	want := c.Wanted()
	if c.record == nil || want <= c.Limit() {
		return nil
	}
	if err := c.record(ctx, want); err != nil {
		return fmt.Errorf("record the confirm ceiling %s: %w", want, err)
	}
	c.Raise(want)
	return nil
}

// want notes that a run wants to confirm lsn.
func (c *ConfirmCeiling) want(lsn change.LSN) { storeMax(&c.wanted, lsn) }

func storeMax(v *atomic.Uint64, lsn change.LSN) {
	for {
		old := v.Load()
		if uint64(lsn) <= old || v.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}
