package db

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file holds the catalog side of lost changes: a mirror table whose
// changes may be missing on the destination because the mirror's
// replication slot was missing, recreated, invalidated or moved past what
// the mirror had applied. The mark stays until a copy of the table (table
// or full resync) or a verification that finds it equal, either taken at
// or after the position from which the slot delivers changes again.

// LostReason says why a table's changes may be lost
// (mirror_tables.lost_changes_reason).
type LostReason string

// Reasons recorded with lost changes.
const (
	// LostSlotMissing: the slot monitor found the mirror's slot gone.
	LostSlotMissing LostReason = "slot_missing"
	// LostSlotRecreated: a run found the slot gone and created it again.
	LostSlotRecreated LostReason = "slot_recreated"
	// LostSlotInvalidated: the source removed WAL the slot still needed
	// (wal_status lost, or invalidated on newer servers).
	LostSlotInvalidated LostReason = "slot_invalidated"
	// LostSlotBehind: the slot's confirmed position lies past everything
	// pgmirror applied or confirmed (someone recreated or advanced it).
	LostSlotBehind LostReason = "slot_behind"
)

// LostTable is a mirror table marked as possibly missing changes.
type LostTable struct {
	// Table is the source table, schema.table.
	Table string `json:"table"`
	// SinceLSN is the source position after which changes may be missing
	// (the mirror's applied position when the loss was found); nil when
	// unknown.
	SinceLSN *string `json:"since_lsn"`
	// UntilLSN is where the slot delivers changes again (the new slot's
	// start); nil while the slot is missing or invalidated.
	UntilLSN *string `json:"until_lsn"`
	// DetectedAt is when pgmirror found it.
	DetectedAt time.Time `json:"detected_at"`
	// Reason is one of the Lost* constants.
	Reason LostReason `json:"reason"`
}

// lostChangesColumn selects a mirror's marked tables (LostTable) as JSON,
// in mapping order (the last of mirrorColumns).
const lostChangesColumn = `coalesce((SELECT jsonb_agg(jsonb_build_object(
		'table', t.source_schema || '.' || t.source_table, 'since_lsn', t.lost_changes_since_lsn::text,
		'until_lsn', t.lost_changes_until_lsn::text, 'detected_at', t.lost_changes_at, 'reason', t.lost_changes_reason)
		ORDER BY t.position, t.id)
	FROM mirror_tables t WHERE t.mirror_id = m.id AND t.lost_changes_at IS NOT NULL), '[]')`

// LostChanges describes one finding of lost changes for MirrorRecordLostChanges.
type LostChanges struct {
	// SinceLSN is the mirror's applied position ("" when unknown).
	SinceLSN string
	// UntilLSN is the new slot's start ("" while there is none).
	UntilLSN string
	// Reason is one of the Lost* constants.
	Reason LostReason
	// OnlyIfSettled records nothing unless the mirror is running, paused
	// or in error with no control action pending (the slot monitor: a slot
	// dropped by a full resync or a cut-over is not a loss).
	OnlyIfSettled bool
}

// MirrorRecordLostChanges marks every table of the mirror that replicates
// (all but dropped ones) as possibly missing changes. A table marked
// already keeps its first detection time and the earliest since position;
// the until position and the reason are the latest. It returns the tables
// whose mark it set or changed (source schema.table) and those among them
// that were not marked before; a finding that repeats one recorded (same
// reason, no until position) changes nothing and returns none.
func (s *Store) MirrorRecordLostChanges(ctx context.Context, mirrorID int64, l LostChanges) (tables, added []string, err error) {
	rows, err := s.q.Query(ctx, `
		WITH old AS (
			SELECT t.id, t.lost_changes_at IS NULL AS fresh FROM mirror_tables t
			WHERE t.mirror_id = $1 AND t.status <> 'dropped'
			  AND (NOT $5 OR EXISTS (SELECT 1 FROM mirrors m WHERE m.id = $1 AND m.deleted_at IS NULL AND m.created_slot
			                          AND m.status IN ('running', 'paused', 'error') AND m.pending_action IS NULL))
			FOR UPDATE OF t)
		UPDATE mirror_tables t SET
			lost_changes_since_lsn = CASE WHEN old.fresh THEN $2::pg_lsn ELSE least(t.lost_changes_since_lsn, $2::pg_lsn) END,
			lost_changes_until_lsn = CASE WHEN old.fresh THEN $3::pg_lsn ELSE coalesce(greatest(t.lost_changes_until_lsn, $3::pg_lsn), t.lost_changes_until_lsn) END,
			lost_changes_at = coalesce(t.lost_changes_at, now()),
			lost_changes_reason = $4
		FROM old WHERE t.id = old.id
		  -- The same finding again (the slot monitor, every pass while the
		  -- slot stays missing) changes nothing.
		  AND NOT (NOT old.fresh AND $3::pg_lsn IS NULL AND t.lost_changes_reason = $4)
		RETURNING t.source_schema || '.' || t.source_table, old.fresh, t.position`,
		mirrorID, nullIfEmpty(l.SinceLSN), nullIfEmpty(l.UntilLSN), l.Reason, l.OnlyIfSettled)
	if err != nil {
		return nil, nil, fmt.Errorf("record lost changes of mirror %d: %w", mirrorID, translate(err))
	}
	defer rows.Close()
	type marked struct {
		name  string
		fresh bool
		pos   int
	}
	var all []marked
	for rows.Next() {
		var m marked
		if err := rows.Scan(&m.name, &m.fresh, &m.pos); err != nil {
			return nil, nil, fmt.Errorf("record lost changes of mirror %d: %w", mirrorID, err)
		}
		all = append(all, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("record lost changes of mirror %d: %w", mirrorID, translate(err))
	}
	slices.SortFunc(all, func(a, b marked) int { return cmp.Compare(a.pos, b.pos) })
	for _, m := range all {
		tables = append(tables, m.name)
		if m.fresh {
			added = append(added, m.name)
		}
	}
	return tables, added, nil
}

// MirrorTableLostChangesCopied clears the mark of a table that was copied
// as of source position at (its snapshot), when the slot delivers its
// changes from at or before that position, or in any case when the copy
// came from the slot's own snapshot (fromSlot: a full snapshot, whose slot
// is new). It reports whether it cleared a mark.
func (s *Store) MirrorTableLostChangesCopied(ctx context.Context, tableID int64, at string, fromSlot bool) (bool, error) {
	tag, err := s.q.Exec(ctx, `
		UPDATE mirror_tables SET lost_changes_since_lsn = NULL, lost_changes_until_lsn = NULL, lost_changes_at = NULL, lost_changes_reason = NULL
		WHERE id = $1 AND lost_changes_at IS NOT NULL
		  AND ($3 OR (lost_changes_until_lsn IS NOT NULL AND lost_changes_until_lsn <= $2::pg_lsn))`,
		tableID, at, fromSlot)
	if err != nil {
		return false, fmt.Errorf("clear lost changes of mirror table %d: %w", tableID, translate(err))
	}
	return tag.RowsAffected() > 0, nil
}

// MirrorLostChangesVerified clears the marks of the given source tables
// (schema.table) that a verification found equal at source position at,
// when the slot delivers their changes from at or before it. It returns
// the tables cleared.
func (s *Store) MirrorLostChangesVerified(ctx context.Context, mirrorID int64, tables []string, at string) ([]string, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	rows, err := s.q.Query(ctx, `
		UPDATE mirror_tables SET lost_changes_since_lsn = NULL, lost_changes_until_lsn = NULL, lost_changes_at = NULL, lost_changes_reason = NULL
		WHERE mirror_id = $1 AND source_schema || '.' || source_table = ANY($2::text[])
		  AND lost_changes_at IS NOT NULL AND lost_changes_until_lsn IS NOT NULL AND lost_changes_until_lsn <= $3::pg_lsn
		RETURNING source_schema || '.' || source_table`, mirrorID, tables, at)
	if err != nil {
		return nil, fmt.Errorf("clear lost changes of mirror %d: %w", mirrorID, translate(err))
	}
	cleared, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("clear lost changes of mirror %d: %w", mirrorID, translate(err))
	}
	return cleared, nil
}

// MirrorConfirmCeiling returns the highest source position the mirror's
// runs may confirm to its slot beyond what they applied (see
// MirrorRaiseConfirmCeiling); found is false before the first.
func (s *Store) MirrorConfirmCeiling(ctx context.Context, mirrorID int64) (lsn string, found bool, err error) {
	err = s.q.QueryRow(ctx, `SELECT lsn::text FROM mirror_confirm_ceilings WHERE mirror_id = $1`, mirrorID).Scan(&lsn)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the confirm ceiling of mirror %d: %w", mirrorID, translate(err))
	}
	return lsn, true, nil
}

// MirrorRaiseConfirmCeiling records lsn as the mirror's confirm ceiling
// unless a higher one is recorded; it returns the ceiling now recorded.
func (s *Store) MirrorRaiseConfirmCeiling(ctx context.Context, mirrorID int64, lsn string) (string, error) {
	var out string
	err := s.q.QueryRow(ctx, `
		INSERT INTO mirror_confirm_ceilings AS c (mirror_id, lsn) VALUES ($1, $2::pg_lsn)
		ON CONFLICT (mirror_id) DO UPDATE SET lsn = greatest(c.lsn, excluded.lsn), updated_at = now()
		RETURNING lsn::text`, mirrorID, lsn).Scan(&out)
	if err != nil {
		return "", fmt.Errorf("record the confirm ceiling of mirror %d: %w", mirrorID, translate(err))
	}
	return out, nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
