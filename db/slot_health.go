package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the catalog queries of the slot monitor (jobs/slot_monitor.go),
// which reads each mirror's replication slot on its source and records how
// much WAL the source keeps for it.

// SlotWALMissing is the slot_wal_status recorded when the mirror's slot does
// not exist on the source (PostgreSQL's own values are reserved, extended,
// unreserved and lost).
const SlotWALMissing = "missing"

// SlotWatch is a mirror whose replication slot the slot monitor reads.
type SlotWatch struct {
	MirrorID      int64
	Name          string
	SourcePeerID  int64
	Slot          string
	SlotWALStatus *string // as last recorded
	// LastLSN is the mirror's last replicated position (nil before any).
	LastLSN *string
}

// MirrorsWithSlot returns the live mirrors whose slot may exist on the
// source: those that created it (a stopped mirror keeps its slot too).
func (s *Store) MirrorsWithSlot(ctx context.Context) ([]SlotWatch, error) {
	rows, err := s.q.Query(ctx, `
		SELECT id, name, source_peer_id, replication_slot_name, slot_wal_status, last_lsn::text
		FROM mirrors WHERE deleted_at IS NULL AND created_slot
		ORDER BY source_peer_id, id`)
	if err != nil {
		return nil, fmt.Errorf("list mirrors with a slot: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SlotWatch, error) {
		var w SlotWatch
		err := row.Scan(&w.MirrorID, &w.Name, &w.SourcePeerID, &w.Slot, &w.SlotWALStatus, &w.LastLSN)
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list mirrors with a slot: %w", err)
	}
	return out, nil
}

// SlotHealth is what the slot monitor read about one slot.
type SlotHealth struct {
	// LagBytes is the WAL between the source's current position and the
	// slot's confirmed_flush_lsn; nil when the slot is missing or has no
	// confirmed position yet.
	LagBytes *int64
	// WALStatus is pg_replication_slots.wal_status (nil when the server
	// reports none), or SlotWALMissing.
	WALStatus *string
	// CheckedAt is when the source was read; zero means now on the
	// catalog's clock (which also gives updated_at and the log times).
	CheckedAt time.Time
}

// MirrorRecordSlotHealth stores a slot reading on a live mirror. It returns
// the wal status recorded before (nil if none) and found = false when the
// mirror is gone.
func (s *Store) MirrorRecordSlotHealth(ctx context.Context, mirrorID int64, h SlotHealth) (previous *string, found bool, err error) {
	var checkedAt *time.Time
	if !h.CheckedAt.IsZero() {
		checkedAt = &h.CheckedAt
	}
	err = s.q.QueryRow(ctx, `
		UPDATE mirrors m SET slot_lag_bytes = $2, slot_wal_status = $3, slot_checked_at = coalesce($4, now())
		FROM (SELECT id, slot_wal_status FROM mirrors WHERE id = $1 FOR UPDATE) old
		WHERE m.id = old.id AND m.deleted_at IS NULL
		RETURNING old.slot_wal_status`, mirrorID, h.LagBytes, h.WALStatus, checkedAt).Scan(&previous)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("record slot health of mirror %d: %w", mirrorID, err)
	}
	return previous, true, nil
}
