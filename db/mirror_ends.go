package db

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MirrorEnd is where one mirror reads and writes.
type MirrorEnd struct {
	UID                             string
	Name                            string
	SourcePeerID, DestinationPeerID int64
	// Deleted: deleted through the API and not yet cleaned up (its
	// replication origins may still mark recent writes).
	Deleted bool
}

// MirrorEnds returns the ends of every mirror in the catalog, whatever its
// status, those deleted but not yet cleaned up included.
func (s *Store) MirrorEnds(ctx context.Context) ([]MirrorEnd, error) {
	rows, err := s.q.Query(ctx, `SELECT uid::text, name, source_peer_id, destination_peer_id, deleted_at IS NOT NULL FROM mirrors ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list mirror ends: %w", err)
	}
	ends, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MirrorEnd, error) {
		var e MirrorEnd
		err := r.Scan(&e.UID, &e.Name, &e.SourcePeerID, &e.DestinationPeerID, &e.Deleted)
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list mirror ends: %w", err)
	}
	return ends, nil
}
