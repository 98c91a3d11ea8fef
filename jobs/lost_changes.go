package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
)

// Lost changes (docs/status.md): when a mirror's slot is found missing,
// invalidated, recreated or past the mirror's position, its tables are
// marked in the catalog (db.MirrorRecordLostChanges) with the position
// range, the mirror's log gets an ERROR entry saying what to do, and the
// mark stays until a copy of the table or a verification that finds it
// equal. Every place that finds such a slot goes through lostChanges.

// LostChangesAction says what to do about tables of mirror that may miss
// changes.
func LostChangesAction(mirror string, tables []string) string {
	return fmt.Sprintf("the destination may miss source changes of %s: resync them (POST /v1/mirrors/%s/resync/{schema.table} for each, or POST /v1/mirrors/%s/resync for all), "+
		"or run a verification (POST /v1/mirrors/%s/verify, then POST /v1/mirrors/%s/verifications/{id}/repair if rows differ): "+
		"a copy or a verification that finds a table equal clears its mark; until then the mirror is not proven equal and a cut-over is refused",
		strings.Join(tables, ", "), mirror, mirror, mirror, mirror)
}

// lostMessages are the log messages (level ERROR) of each reason.
var lostMessages = map[db.LostReason]string{
	db.LostSlotMissing:     "Replication slot missing: changes were lost",
	db.LostSlotRecreated:   "Replication slot recreated: changes were lost",
	db.LostSlotInvalidated: "Replication slot invalidated: changes were lost",
	db.LostSlotBehind:      "Replication slot moved past the mirror's position: changes were lost",
}

// lostRecord is one finding of lost changes of a mirror.
type lostRecord struct {
	mirrorID int64
	mirror   string // name
	slot     string
	lost     db.LostChanges
	detail   string // what was found, for the log entry
}

// recordLostChanges marks the mirror's tables and, when it marked a table
// anew or learned where the slot starts again, logs an ERROR entry with
// what to do (through logEntry: the run's own log keeper, or the catalog).
func recordLostChanges(ctx context.Context, store lostChangesRecorder, logger interface {
	Error(msg string, args ...any)
}, logEntry func(ctx context.Context, level db.LogLevel, message string, details any), rec lostRecord) ([]string, error) {
	tables, added, err := store.MirrorRecordLostChanges(ctx, rec.mirrorID, rec.lost)
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 || (len(added) == 0 && rec.lost.UntilLSN == "") {
		return tables, nil
	}
	details := map[string]any{
		"slot": rec.slot, "reason": rec.lost.Reason, "tables": tables, "what": rec.detail,
		"since_lsn": nilIfEmpty(rec.lost.SinceLSN), "until_lsn": nilIfEmpty(rec.lost.UntilLSN),
		"effect": "changes the source made to these tables after since_lsn (up to until_lsn) may be missing on the destination; " +
			"the mirror keeps replicating new changes, but its lost_changes field says it is not proven equal",
		"action": LostChangesAction(rec.mirror, tables),
	}
	logEntry(ctx, db.LevelError, lostMessages[rec.lost.Reason], details)
	logger.Error("changes lost: the mirror's replication slot "+rec.detail, "mirror", rec.mirror, "slot", rec.slot,
		"reason", rec.lost.Reason, "since_lsn", rec.lost.SinceLSN, "until_lsn", rec.lost.UntilLSN, "tables", tables)
	return tables, nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// lostChanges records a finding of the run.
func (r *mirrorRun) lostChanges(ctx context.Context, m db.Mirror, lost db.LostChanges, detail string) error {
	_, err := recordLostChanges(ctx, r.store, r.logger, r.log, lostRecord{mirrorID: m.ID, mirror: m.Name, slot: m.ReplicationSlotName, lost: lost, detail: detail})
	return err
}

// slotUsable reports whether slot can be streamed from: it exists and is
// not invalidated.
func slotUsable(slot capture.SlotStatus) bool {
	return slot.Exists && !slot.Invalidated()
}

// checkSlotPosition runs before every phase of a run and sets the run's
// confirm ceiling (recording a first one when the mirror has none). Before
// a phase that streams from the slot as it is (check), a usable slot that
// this mirror created must not have moved past both the position applied
// on the destination and the mirror's confirm ceiling (cdc.ConfirmCeiling):
// then someone recreated or advanced it, and the changes in between were
// never delivered.
func (r *mirrorRun) checkSlotPosition(ctx context.Context, in *phaseInputs, check bool) error {
	m, slot, applied, hasPosition := in.m, in.slot, in.applied, in.hasPosition
	recorded, found, err := r.store.MirrorConfirmCeiling(ctx, m.ID)
	if err != nil {
		return err
	}
	var ceiling change.LSN
	if found {
		if ceiling, err = change.ParseLSN(recorded); err != nil {
			return fmt.Errorf("confirm ceiling of the mirror: %w", err)
		}
	}
	known := max(applied, ceiling)
	if !check {
		if c := r.ceiling.Load(); c != nil {
			c.Raise(ceiling)
		} else {
			r.ceiling.Store(cdc.NewConfirmCeiling(ceiling, r.recordCeiling))
		}
		return nil
	}
	if m.CreatedSlot && slotUsable(slot) && hasPosition && found && slot.ConfirmedFlush > known {
		if err := r.lostChanges(ctx, m, db.LostChanges{SinceLSN: applied.String(), UntilLSN: slot.ConfirmedFlush.String(), Reason: db.LostSlotBehind},
			fmt.Sprintf("confirms position %s, past the mirror's applied position %s and everything pgmirror confirmed (%s): it was recreated or advanced by someone else",
				slot.ConfirmedFlush, applied, ceiling)); err != nil {
			return err
		}
	}
	if slotUsable(slot) && slot.ConfirmedFlush > ceiling && (!found || slot.ConfirmedFlush > known) {
		// A first ceiling, or one past a loss just recorded: from here on
		// the slot's position is the mirror's.
		if recorded, err = r.store.MirrorRaiseConfirmCeiling(ctx, m.ID, slot.ConfirmedFlush.String()); err != nil {
			return err
		}
		if ceiling, err = change.ParseLSN(recorded); err != nil {
			return fmt.Errorf("confirm ceiling of the mirror: %w", err)
		}
	}
	if c := r.ceiling.Load(); c != nil {
		c.Raise(ceiling)
	} else {
		r.ceiling.Store(cdc.NewConfirmCeiling(ceiling, r.recordCeiling))
	}
	return nil
}

// ceilingEvery is how often a run records a higher confirm ceiling when
// its stream wants to confirm past the one recorded.
const ceilingEvery = 5 * time.Second

// keepCeiling records the confirm ceiling the run's streams want, every
// ceilingEvery until ctx ends (a run's stop records it too, see
// cdc.ConfirmCeiling). A catalog that does not answer only holds back the
// confirmation of transactions with nothing to replicate.
func (r *mirrorRun) keepCeiling(ctx context.Context) {
	t := time.NewTicker(ceilingEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c := r.ceiling.Load()
		if c == nil {
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Settle(wctx)
		cancel()
		if err != nil {
			r.logger.Debug("record the confirm ceiling", "error", err)
		}
	}
}

// errCatalogReconnecting refuses a catalog write while the run's catalog
// connection is being reconnected.
var errCatalogReconnecting = errors.New("the catalog connection is being reconnected")

// recordCeiling is the mirror's cdc.CeilingRecorder: it raises the
// recorded confirm ceiling to lsn.
func (r *mirrorRun) recordCeiling(ctx context.Context, lsn change.LSN) error {
	if r.catalogLost() {
		return errCatalogReconnecting
	}
	_, err := r.store.MirrorRaiseConfirmCeiling(ctx, r.mirrorID, lsn.String())
	return err
}

// lostChangesCopied clears the lost changes of table t, copied as of
// source position at (see db.MirrorTableLostChangesCopied), and logs it.
// A failure is logged only: the mark stays, which is the safe side.
func (r *mirrorRun) lostChangesCopied(ctx context.Context, t db.MirrorTable, at change.LSN, fromSlot bool) {
	cleared, err := r.store.MirrorTableLostChangesCopied(ctx, t.ID, at.String(), fromSlot)
	if err != nil {
		r.logger.Warn("clear the lost changes of a copied table", "table", t.Source().String(), "error", err)
		return
	}
	if cleared {
		r.log(ctx, db.LevelInfo, "Lost changes cleared", map[string]any{"tables": []string{t.Source().String()}, "by": "copy", "lsn": at.String(),
			"note": "the table was copied again as of this source position; the slot delivers its changes from there"})
	}
}
