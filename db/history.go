package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// HistoryGap is the longest time between two samples of a mirror over which
// a rate is computed: a longer gap (the mirror stopped streaming, or moved
// to another replica for a while) gives a sample without rates.
const HistoryGap = 2 * time.Minute

// HistoryMeasure is what a replica knows of one mirror it streams at a
// history sample: the newest lag measure of its worker.
type HistoryMeasure struct {
	MirrorID   int64
	LagSeconds float64
}

// MetricsSample is one row of a mirror's lag and throughput history.
type MetricsSample struct {
	At                time.Time `db:"at"`
	LagSeconds        *float64  `db:"lag_seconds"`
	RowsSynced        int64     `db:"rows_synced"`
	RowsPerSecond     *float64  `db:"rows_per_second"`
	LSN               *string   `db:"lsn"`
	WALBytesPerSecond *float64  `db:"wal_bytes_per_second"`
}

// MirrorRecordHistory writes one history sample, at the catalog's current
// time, for each measured mirror whose lock the replica named replica holds
// now (read from pg_locks through the replica's lock connection): a replica
// that lost a mirror to another one, or whose lock connection is gone,
// writes nothing for it, so that two replicas never both sample a mirror.
// Each sample takes the sum of the mirror's rows_synced and its last_lsn
// from the catalog and the rates since the mirror's previous sample (null
// after a gap longer than HistoryGap or when a counter went back), all in
// one statement whatever the number of mirrors. It returns the samples
// written.
func (s *Store) MirrorRecordHistory(ctx context.Context, replica string, measures []HistoryMeasure) (int64, error) {
	if len(measures) == 0 {
		return 0, nil
	}
	ids := make([]int64, len(measures))
	lags := make([]float64, len(measures))
	for i, m := range measures {
		ids[i], lags[i] = m.MirrorID, max(0, m.LagSeconds)
	}
	tag, err := s.q.Exec(ctx, `
		INSERT INTO mirror_metrics_history (mirror_id, at, lag_seconds, rows_synced, rows_per_second, lsn, wal_bytes_per_second)
		SELECT u.id, statement_timestamp(), u.lag, r.rows,
			CASE WHEN p.at IS NOT NULL AND r.rows >= p.rows_synced THEN (r.rows - p.rows_synced) / extract(epoch FROM statement_timestamp() - p.at) END,
			m.last_lsn,
			CASE WHEN p.at IS NOT NULL AND m.last_lsn >= p.lsn THEN (m.last_lsn - p.lsn)::float8 / extract(epoch FROM statement_timestamp() - p.at) END
		FROM unnest($1::bigint[], $2::float8[]) AS u(id, lag)
		JOIN mirrors m ON m.id = u.id AND m.deleted_at IS NULL
		CROSS JOIN LATERAL (SELECT coalesce(sum(t.rows_synced), 0)::bigint AS rows FROM mirror_tables t WHERE t.mirror_id = u.id) r
		LEFT JOIN LATERAL (SELECT h.at, h.rows_synced, h.lsn FROM mirror_metrics_history h
			WHERE h.mirror_id = u.id AND h.at < statement_timestamp() AND h.at > statement_timestamp() - $5::interval
			ORDER BY h.at DESC LIMIT 1) p ON true
		WHERE EXISTS (SELECT 1 FROM pg_locks l JOIN replicas rp ON rp.lock_pid = l.pid
			WHERE rp.name = $3 AND l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $4::oid
			  AND l.objid::bigint = u.id AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
		ON CONFLICT (mirror_id, at) DO NOTHING`,
		ids, lags, replica, int64(mirrorLockClass), HistoryGap)
	if err != nil {
		return 0, fmt.Errorf("record history samples of %d mirrors: %w", len(measures), translate(err))
	}
	return tag.RowsAffected(), nil
}

// MirrorHistory returns the mirror's samples taken after since, oldest
// first: the newest limit of them when there are more.
func (s *Store) MirrorHistory(ctx context.Context, mirrorID int64, since time.Time, limit int) ([]MetricsSample, error) {
	rows, err := s.q.Query(ctx, `SELECT at, lag_seconds, rows_synced, rows_per_second, lsn::text AS lsn, wal_bytes_per_second FROM (
			SELECT * FROM mirror_metrics_history WHERE mirror_id = $1 AND at > $2 ORDER BY at DESC LIMIT $3
		) h ORDER BY at`, mirrorID, since, limit)
	if err != nil {
		return nil, fmt.Errorf("read history of mirror %d: %w", mirrorID, translate(err))
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[MetricsSample])
	if err != nil {
		return nil, fmt.Errorf("read history of mirror %d: %w", mirrorID, translate(err))
	}
	if out == nil {
		out = []MetricsSample{}
	}
	return out, nil
}

// HistoryPruneBatch is how many history rows one prune statement deletes
// at most, so that pruning a large backlog never holds long locks or makes
// one huge transaction.
const HistoryPruneBatch = 10000

// MirrorHistoryPrune deletes history samples older than olderThan in
// batches of at most batch rows (HistoryPruneBatch when 0), each its own
// statement, and stops after maxBatches batches (what is left goes at the
// next prune). It returns the rows deleted.
func (s *Store) MirrorHistoryPrune(ctx context.Context, olderThan time.Time, batch, maxBatches int) (int64, error) {
	if batch <= 0 {
		batch = HistoryPruneBatch
	}
	var total int64
	for range maxBatches {
		tag, err := s.q.Exec(ctx, `DELETE FROM mirror_metrics_history WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM mirror_metrics_history WHERE at < $1 LIMIT $2))`, olderThan, batch)
		if err != nil {
			return total, fmt.Errorf("prune history older than %s: %w", olderThan.Format(time.RFC3339), translate(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			break
		}
	}
	return total, nil
}

// MirrorRowsSynced returns, for every live mirror with tables, the sum of
// its tables' rows_synced (rows copied plus row changes applied), by
// mirror id, in one query.
func (s *Store) MirrorRowsSynced(ctx context.Context) (map[int64]int64, error) {
	rows, err := s.q.Query(ctx, `SELECT t.mirror_id, coalesce(sum(t.rows_synced), 0)::bigint
		FROM mirror_tables t JOIN mirrors m ON m.id = t.mirror_id AND m.deleted_at IS NULL GROUP BY t.mirror_id`)
	if err != nil {
		return nil, fmt.Errorf("sum rows synced: %w", translate(err))
	}
	out := map[int64]int64{}
	var id, n int64
	if _, err := pgx.ForEachRow(rows, []any{&id, &n}, func() error {
		out[id] = n
		return nil
	}); err != nil {
		return nil, fmt.Errorf("sum rows synced: %w", translate(err))
	}
	return out, nil
}
