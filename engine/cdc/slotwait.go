package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// slotIdleWait bounds how long a run waits, before it starts replication,
// for the slot's previous consumer (the walsender of a stream that was just
// closed, by this run or a run before) to let go.
const slotIdleWait = 10 * time.Second

// waitSlotIdle waits until no walsender uses the slot (or it is missing),
// at most slotIdleWait, so that START_REPLICATION does not fail on the
// source (an ERROR in its server log) when the previous consumer is still
// exiting. A slot still in use after the wait is left to StartStream to
// report (ErrSlotInUse).
func waitSlotIdle(ctx context.Context, conn *pgx.Conn, slot string) error {
	deadline := time.Now().Add(slotIdleWait)
	for {
		var active bool
		err := conn.QueryRow(ctx, `SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name OPERATOR(pg_catalog.=) $1`, slot).Scan(&active)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && !active) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("check whether slot %s is in use: %w", slot, err)
		}
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
