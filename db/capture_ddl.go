package db

import (
	"context"
	"fmt"
)

// MirrorOthersCaptureDDL reports whether a live mirror other than mirrorID
// captures DDL (capture_ddl) on the same source database as mirrorID: the
// same source peer, or a peer with the same host, port and database. The
// event trigger on that database is shared by all of them.
func (s *Store) MirrorOthersCaptureDDL(ctx context.Context, mirrorID int64) (bool, error) {
	var found bool
	err := s.q.QueryRow(ctx, `SELECT EXISTS (
	SELECT 1 FROM mirrors m JOIN peers sp ON sp.id = m.source_peer_id,
	              mirrors o JOIN peers op ON op.id = o.source_peer_id
	WHERE m.id = $1 AND o.id <> m.id AND o.deleted_at IS NULL AND o.capture_ddl
	  AND (op.id = sp.id OR (lower(op.host) = lower(sp.host) AND op.port = sp.port AND op.database = sp.database)))`,
		mirrorID).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look up mirrors capturing DDL beside mirror %d: %w", mirrorID, translate(err))
	}
	return found, nil
}

// MirrorSetCaptureDDL turns the capture of DDL of the mirror on or off.
func (s *Store) MirrorSetCaptureDDL(ctx context.Context, mirrorID int64, on bool) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET capture_ddl = $2, updated_at = now() WHERE id = $1`, mirrorID, on)
	if err != nil {
		return fmt.Errorf("set capture_ddl of mirror %d: %w", mirrorID, translate(err))
	}
	return nil
}

// MirrorOthersCaptureDDLSlots returns the replication slot names of the live
// mirrors other than mirrorID that capture DDL, whatever their source peer.
// Two peers may name one database differently (a host name and its address,
// a proxy), so the caller asks the source database whether one of these slots
// is its own (ddl.SlotsInDatabase) before removing the shared trigger.
func (s *Store) MirrorOthersCaptureDDLSlots(ctx context.Context, mirrorID int64) ([]string, error) {
	rows, err := s.q.Query(ctx, `SELECT DISTINCT replication_slot_name FROM mirrors
	WHERE id <> $1 AND deleted_at IS NULL AND capture_ddl ORDER BY 1`, mirrorID)
	if err != nil {
		return nil, fmt.Errorf("look up the slots of mirrors capturing DDL beside mirror %d: %w", mirrorID, translate(err))
	}
	defer rows.Close()
	var slots []string
	for rows.Next() {
		var slot string
		if err := rows.Scan(&slot); err != nil {
			return nil, fmt.Errorf("look up the slots of mirrors capturing DDL beside mirror %d: %w", mirrorID, err)
		}
		slots = append(slots, slot)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up the slots of mirrors capturing DDL beside mirror %d: %w", mirrorID, translate(err))
	}
	return slots, nil
}
