package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// mirrorColumns selects a mirror joined with its peers' names, each column
// named as the Mirror field it fills (scanMirror matches them by name,
// ignoring case and underscores).
const mirrorColumns = `m.id, m.uid::text AS uid, m.name, m.source_peer_id, m.destination_peer_id,
	sp.name AS source_peer, dp.name AS destination_peer,
	coalesce((SELECT jsonb_agg(jsonb_build_object('source_schema', s.source_schema, 'destination_schema', s.destination_schema)
		ORDER BY s.position, s.id) FROM mirror_schema_mappings s WHERE s.mirror_id = m.id), '[]') AS schema_mappings,
	m.snapshot_num_rows_per_partition, m.snapshot_max_parallel_workers, m.snapshot_num_tables_in_parallel,
	m.cdc_sync_interval_seconds, m.cdc_batch_size, m.do_initial_snapshot, m.existing_destination_rows, m.schema_changes,
	m.publication_name, m.replication_slot_name, m.created_publication, m.created_slot,
	m.status, m.desired_state, m.resume_status, m.pending_action, m.error_message,
	m.error_count, m.next_retry_at, m.last_lsn::text AS last_lsn, m.last_sync_batch_id,
	m.slot_lag_bytes, m.slot_wal_status, m.slot_checked_at,
	m.deleted_at, m.created_at, m.updated_at, m.sequences_synced_at, m.cutover, m.sequences,
	ml.lag_seconds, ml.measured_at AS lag_measured_at, ml.applied_commit_at, m.capture_ddl,
	` + lostChangesColumn + ` AS lost_changes`

const mirrorFrom = ` FROM mirrors m JOIN peers sp ON sp.id = m.source_peer_id JOIN peers dp ON dp.id = m.destination_peer_id
	LEFT JOIN mirror_lag ml ON ml.mirror_id = m.id`

func scanMirror(row pgx.CollectableRow) (Mirror, error) {
	return pgx.RowToStructByName[Mirror](row)
}

// queryMirror returns the one mirror that sql (selecting mirrorColumns)
// finds; pgx.ErrNoRows when it finds none.
func queryMirror(ctx context.Context, q Executor, sql string, args ...any) (Mirror, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return Mirror{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanMirror)
}

// MirrorGetByID returns the mirror with the given id, including one that has
// been deleted through the API (DeletedAt set) but not yet cleaned up.
func (s *Store) MirrorGetByID(ctx context.Context, id int64) (Mirror, error) {
	m, err := queryMirror(ctx, s.q, `SELECT `+mirrorColumns+mirrorFrom+` WHERE m.id = $1`, id)
	if err != nil {
		return Mirror{}, fmt.Errorf("get mirror %d: %w", id, translate(err))
	}
	return m, nil
}

// MirrorGetByName returns the live (not deleted) mirror with the given name.
func (s *Store) MirrorGetByName(ctx context.Context, name string) (Mirror, error) {
	return mirrorGetByName(ctx, s.q, name, false)
}

// MirrorGetByNameForUpdate returns the live mirror with the given name and
// locks its row until the transaction ends (call it on a Store from With),
// so that a control request sees and changes a
// consistent status.
func (s *Store) MirrorGetByNameForUpdate(ctx context.Context, name string) (Mirror, error) {
	return mirrorGetByName(ctx, s.q, name, true)
}

func mirrorGetByName(ctx context.Context, q Executor, name string, forUpdate bool) (Mirror, error) {
	sql := `SELECT ` + mirrorColumns + mirrorFrom + ` WHERE m.name = $1 AND m.deleted_at IS NULL`
	if forUpdate {
		sql += ` FOR UPDATE OF m`
	}
	m, err := queryMirror(ctx, q, sql, name)
	if err != nil {
		return Mirror{}, fmt.Errorf("get mirror %q: %w", name, translate(err))
	}
	return m, nil
}

// MirrorList returns every live mirror ordered by name.
func (s *Store) MirrorList(ctx context.Context) ([]Mirror, error) {
	rows, err := s.q.Query(ctx, `SELECT `+mirrorColumns+mirrorFrom+` WHERE m.deleted_at IS NULL ORDER BY m.name`)
	if err != nil {
		return nil, fmt.Errorf("list mirrors: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanMirror)
	if err != nil {
		return nil, fmt.Errorf("list mirrors: %w", err)
	}
	if out == nil {
		out = []Mirror{}
	}
	return out, nil
}

const mirrorTableColumns = `id, mirror_id, position, source_schema, source_table, destination_schema, destination_table,
	exclude_columns, status, resync_requested_at, rows_synced, rows_inserted, rows_updated, rows_deleted, last_synced_at, rows_estimated,
	truncates, destination_taken_at, from_schema_mapping,
	lost_changes_since_lsn::text, lost_changes_until_lsn::text, lost_changes_at, lost_changes_reason`

func scanMirrorTable(row pgx.Row) (MirrorTable, error) {
	var t MirrorTable
	var lost LostTable
	var lostAt *time.Time
	var lostReason *LostReason
	err := row.Scan(&t.ID, &t.MirrorID, &t.Position, &t.SourceSchema, &t.SourceTable, &t.DestinationSchema, &t.DestinationTable,
		&t.ExcludeColumns, &t.Status, &t.ResyncRequestedAt, &t.RowsSynced, &t.RowsInserted, &t.RowsUpdated, &t.RowsDeleted, &t.LastSyncedAt, &t.RowsEstimated,
		&t.Truncates, &t.DestinationTakenAt, &t.FromSchemaMapping,
		&lost.SinceLSN, &lost.UntilLSN, &lostAt, &lostReason)
	if lostAt != nil {
		lost.Table, lost.DetectedAt, lost.Reason = t.Source().String(), *lostAt, *lostReason
		t.LostChanges = &lost
	}
	if t.ExcludeColumns == nil {
		t.ExcludeColumns = []string{}
	}
	return t, err
}

// MirrorTables returns the table mappings of a mirror ordered by position.
func (s *Store) MirrorTables(ctx context.Context, mirrorID int64) ([]MirrorTable, error) {
	return mirrorTables(ctx, s.q, mirrorID)
}

// MirrorTablesByMirror returns the tables of every mirror not deleted, by
// mirror id, in one query (each mirror's in the order MirrorTables gives).
func (s *Store) MirrorTablesByMirror(ctx context.Context) (map[int64][]MirrorTable, error) {
	rows, err := s.q.Query(ctx, `SELECT `+mirrorTableColumns+` FROM mirror_tables t
		WHERE EXISTS (SELECT 1 FROM mirrors m WHERE m.id = t.mirror_id AND m.deleted_at IS NULL)
		ORDER BY t.mirror_id, t.position, t.id`)
	if err != nil {
		return nil, fmt.Errorf("list the tables of every mirror: %w", err)
	}
	defer rows.Close()
	out := map[int64][]MirrorTable{}
	for rows.Next() {
		t, err := scanMirrorTable(rows)
		if err != nil {
			return nil, fmt.Errorf("list the tables of every mirror: %w", err)
		}
		out[t.MirrorID] = append(out[t.MirrorID], t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the tables of every mirror: %w", err)
	}
	return out, nil
}

func mirrorTables(ctx context.Context, q Executor, mirrorID int64) ([]MirrorTable, error) {
	rows, err := q.Query(ctx, `SELECT `+mirrorTableColumns+` FROM mirror_tables WHERE mirror_id = $1 ORDER BY position, id`, mirrorID)
	if err != nil {
		return nil, fmt.Errorf("list tables of mirror %d: %w", mirrorID, err)
	}
	defer rows.Close()
	out := []MirrorTable{}
	for rows.Next() {
		t, err := scanMirrorTable(rows)
		if err != nil {
			return nil, fmt.Errorf("list tables of mirror %d: %w", mirrorID, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables of mirror %d: %w", mirrorID, err)
	}
	return out, nil
}
