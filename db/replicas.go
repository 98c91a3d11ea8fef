package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MirrorWorker is the replica that runs a mirror: the one whose lock
// connection holds the mirror's lock, and when it last reported.
type MirrorWorker struct {
	Name   string
	SeenAt time.Time
}

// MirrorWorkers returns the worker of every mirror that has one, by mirror
// id. It reads pg_locks, so it tells who holds each lock right now: a
// replica that died holds nothing.
func (s *Store) MirrorWorkers(ctx context.Context) (map[int64]MirrorWorker, error) {
	rows, err := s.q.Query(ctx, `
		SELECT l.objid::bigint, r.name, r.seen_at
		FROM pg_locks l JOIN replicas r ON r.lock_pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.classid = $1::oid
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, int64(mirrorLockClass))
	if err != nil {
		return nil, fmt.Errorf("read mirror workers: %w", translate(err))
	}
	out := map[int64]MirrorWorker{}
	var (
		id int64
		w  MirrorWorker
	)
	if _, err := pgx.ForEachRow(rows, []any{&id, &w.Name, &w.SeenAt}, func() error {
		out[id] = w
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read mirror workers: %w", translate(err))
	}
	return out, nil
}

// Replica is a pgmirror process serving the catalog.
type Replica struct {
	Name          string
	MirrorWorkers int // its SERVICE_MIRROR_WORKERS
	Running       int // mirror locks its lock connection holds now
	StartedAt     time.Time
	SeenAt        time.Time // its last report
}

// LiveReplicas returns the replicas that reported within ReplicaLiveFor
// and whose lock connection is still open, by name, with the mirrors each
// runs now (read from pg_locks, not from their last report).
func (s *Store) LiveReplicas(ctx context.Context) ([]Replica, error) {
	rows, err := s.q.Query(ctx, `
		SELECT name, mirror_workers,
		       (SELECT count(*) FROM pg_locks l WHERE l.pid = r.lock_pid AND l.locktype = 'advisory' AND l.granted
		          AND l.objsubid = 2 AND l.classid = $2::oid)::int,
		       started_at, seen_at FROM replicas r
		WHERE seen_at > now() - make_interval(secs => $1)
		  AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.lock_pid)
		ORDER BY name`, ReplicaLiveFor.Seconds(), int64(mirrorLockClass))
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replica, error) {
		var r Replica
		err := row.Scan(&r.Name, &r.MirrorWorkers, &r.Running, &r.StartedAt, &r.SeenAt)
		return r, err
	})
	if err != nil {
		return nil, fmt.Errorf("read replicas: %w", translate(err))
	}
	return out, nil
}

// LagWithoutWorker is the lag to show of a mirror that should be streaming
// (status running, desired running) but has no worker: the last measure
// plus the time since it was taken, so that it grows while nobody runs the
// mirror. Other mirrors get Lag.
func (m Mirror) LagWithoutWorker(now time.Time) *float64 {
	if m.Status != StatusRunning || m.DesiredState != DesiredRunning || m.DeletedAt != nil ||
		m.LagSeconds == nil || m.LagMeasuredAt == nil {
		return m.Lag(now)
	}
	lag := *m.LagSeconds + max(0, now.Sub(*m.LagMeasuredAt).Seconds())
	return &lag
}

// LagMeasure is one streaming worker's measure of a mirror's lag (see
// MirrorRecordLag).
type LagMeasure struct {
	MirrorID      int64
	LagSeconds    float64
	MeasuredAt    time.Time
	AppliedCommit time.Time // zero: not known yet, the stored one is kept
}

// MirrorsSequencesSynced records, for many mirrors in one statement, when
// their destination sequences were last set in step (see
// MirrorSequencesSynced).
func (s *Store) MirrorsSequencesSynced(ctx context.Context, synced map[int64]time.Time) error {
	if len(synced) == 0 {
		return nil
	}
	ids := make([]int64, 0, len(synced))
	at := make([]time.Time, 0, len(synced))
	for id, t := range synced {
		ids = append(ids, id)
		at = append(at, t)
	}
	_, err := s.q.Exec(ctx, `UPDATE mirrors m SET sequences_synced_at = u.at
		FROM unnest($1::bigint[], $2::timestamptz[]) AS u(id, at) WHERE m.id = u.id`, ids, at)
	if err != nil {
		return fmt.Errorf("record sequence sync of %d mirrors: %w", len(synced), translate(err))
	}
	return nil
}

// MirrorRecordLags stores the lag measures of many mirrors in one
// statement: a replica writes those of all the mirrors it streams
// together, so that its catalog writes do not grow with them. Measures of
// mirrors deleted meanwhile are skipped.
func (s *Store) MirrorRecordLags(ctx context.Context, measures []LagMeasure) error {
	if len(measures) == 0 {
		return nil
	}
	ids := make([]int64, len(measures))
	lags := make([]float64, len(measures))
	at := make([]time.Time, len(measures))
	applied := make([]*time.Time, len(measures))
	for i, m := range measures {
		ids[i], lags[i], at[i] = m.MirrorID, max(0, m.LagSeconds), m.MeasuredAt
		if !m.AppliedCommit.IsZero() {
			a := m.AppliedCommit
			applied[i] = &a
		}
	}
	_, err := s.q.Exec(ctx, `INSERT INTO mirror_lag (mirror_id, lag_seconds, measured_at, applied_commit_at)
		SELECT u.id, u.lag, u.at, u.applied FROM unnest($1::bigint[], $2::float8[], $3::timestamptz[], $4::timestamptz[]) AS u(id, lag, at, applied)
		WHERE EXISTS (SELECT 1 FROM mirrors m WHERE m.id = u.id)
		ON CONFLICT (mirror_id) DO UPDATE SET lag_seconds = EXCLUDED.lag_seconds, measured_at = EXCLUDED.measured_at,
			applied_commit_at = coalesce(EXCLUDED.applied_commit_at, mirror_lag.applied_commit_at)`,
		ids, lags, at, applied)
	if err != nil {
		return fmt.Errorf("record lag of %d mirrors: %w", len(measures), translate(err))
	}
	return nil
}
