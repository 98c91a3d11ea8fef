package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MirrorWorker is the replica that runs a mirror: the one whose lock
// connection holds the mirror's lock, and when it last reported.
type MirrorWorker struct {
	Name   string
	SeenAt time.Time
	// LagsWrittenAt is when the replica last wrote its lag measures
	// (MirrorRecordLags); nil before the first write.
	LagsWrittenAt *time.Time
}

// MirrorWorkers returns the worker of every mirror that has one, by mirror
// id. It reads pg_locks, so it tells who holds each lock right now: a
// replica that died holds nothing.
func (s *Store) MirrorWorkers(ctx context.Context) (map[int64]MirrorWorker, error) {
	rows, err := s.q.Query(ctx, `
		SELECT l.objid::bigint, r.name, r.seen_at, r.lags_written_at
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
	if _, err := pgx.ForEachRow(rows, []any{&id, &w.Name, &w.SeenAt, &w.LagsWrittenAt}, func() error {
		out[id] = w
		w.LagsWrittenAt = nil // the next row gets a pointer of its own
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

// ConnectedReplicas returns the names of the replicas whose lock
// connection is open now: one cheap query, which a replica runs often to
// notice at once that another one died (its lock connection ends with its
// process).
func (s *Store) ConnectedReplicas(ctx context.Context) ([]string, error) {
	rows, err := s.q.Query(ctx, `
		SELECT name FROM replicas r
		WHERE EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.lock_pid)`)
	if err != nil {
		return nil, fmt.Errorf("read connected replicas: %w", translate(err))
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read connected replicas: %w", translate(err))
	}
	return names, nil
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

// LagShown is the lag the API and the metrics show of m at now: with a
// worker w, LagRunBy; without one (w nil), LagWithoutWorker, except while
// the replica asking is unsure of the catalog (it could not reach it
// lately: LagBoard.Unsure). Then the runs of every replica are taking their
// locks back, and a running mirror without a worker and without a fresh
// measure may well be streaming: its lag is unknown (nil), not the age of
// the measure written before the outage.
func (m Mirror) LagShown(w *MirrorWorker, unsure bool, now time.Time) *float64 {
	if w != nil {
		return m.LagRunBy(*w, now)
	}
	fresh := m.LagMeasuredAt != nil && now.Sub(*m.LagMeasuredAt) < lagFresh
	if unsure && !fresh && m.Status == StatusRunning {
		return nil
	}
	return m.LagWithoutWorker(now)
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
// mirrors deleted meanwhile are skipped. The replica's lags_written_at
// says when it last wrote (MirrorWorker.LagsWrittenAt), with or without
// measures.
func (s *Store) MirrorRecordLags(ctx context.Context, replica string, measures []LagMeasure) error {
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
	// The replica's lags_written_at moves in the same statement: a reader
	// that sees it fresh sees the measures written with it.
	_, err := s.q.Exec(ctx, `WITH written AS (
		INSERT INTO mirror_lag (mirror_id, lag_seconds, measured_at, applied_commit_at)
		SELECT u.id, u.lag, u.at, u.applied FROM unnest($1::bigint[], $2::float8[], $3::timestamptz[], $4::timestamptz[]) AS u(id, lag, at, applied)
		WHERE EXISTS (SELECT 1 FROM mirrors m WHERE m.id = u.id)
		ON CONFLICT (mirror_id) DO UPDATE SET lag_seconds = EXCLUDED.lag_seconds, measured_at = EXCLUDED.measured_at,
			applied_commit_at = coalesce(EXCLUDED.applied_commit_at, mirror_lag.applied_commit_at)
		WHERE mirror_lag.measured_at <= EXCLUDED.measured_at
		RETURNING 1)
	UPDATE replicas SET lags_written_at = now() WHERE name = $5`,
		ids, lags, at, applied, replica)
	if err != nil {
		return fmt.Errorf("record lag of %d mirrors: %w", len(measures), translate(err))
	}
	return nil
}

// MirrorsWantingToRun counts the live mirrors that should have a worker
// now: desired running, not paused, stopped or completed, and not waiting
// for the retry after a failure. The replicas share them out among
// themselves (jobs/share.go), whether or not they hold a worker at the
// moment.
func (s *Store) MirrorsWantingToRun(ctx context.Context) (int, error) {
	var n int
	err := s.q.QueryRow(ctx, `SELECT count(*) FROM mirrors
		WHERE deleted_at IS NULL AND desired_state = 'running' AND status NOT IN ('paused', 'stopped', 'completed')
		  AND NOT (status = 'error' AND next_retry_at IS NOT NULL AND next_retry_at > now())`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count mirrors that want to run: %w", translate(err))
	}
	return n, nil
}

// GoneReplica is a row of the replicas table whose lock connection has no
// session in the catalog any more: the replica died, or its connection
// dropped and it is connecting again (it then reports with a new lock_pid
// within a second or two).
type GoneReplica struct {
	Name    string
	LockPID *int32
	SeenAt  time.Time
}

// GoneReplicas returns the replicas whose lock connection is gone.
func (s *Store) GoneReplicas(ctx context.Context) ([]GoneReplica, error) {
	rows, err := s.q.Query(ctx, `SELECT name, lock_pid, seen_at FROM replicas r
		WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.lock_pid) ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("read gone replicas: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (GoneReplica, error) {
		var g GoneReplica
		err := row.Scan(&g.Name, &g.LockPID, &g.SeenAt)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read gone replicas: %w", translate(err))
	}
	return out, nil
}

// RescuedJobs counts what was done with the River jobs a dead process left
// running.
type RescuedJobs struct {
	// Finished: run jobs of finishKind, completed: their mirrors have no
	// worker now and are adopted by the live replicas.
	Finished int64
	// Retried: other jobs with attempts left, available again at once.
	Retried int64
	// Discarded: other jobs without attempts left.
	Discarded int64
}

// Total is the number of jobs rescued.
func (r RescuedJobs) Total() int64 { return r.Finished + r.Retried + r.Discarded }

// BuryReplica removes a replica that GoneReplicas returned, if its row is
// still as it was then (same lock_pid and seen_at: it did not connect
// again meanwhile) and its lock connection is still gone, and rescues the
// River jobs its process left running (RescueJobsOf), in one transaction.
// Jobs of finishKind waiting on ownQueue (a queue only the dead replica
// worked) are completed too: nobody would fetch them. It reports false
// when the row changed or another replica buried it first.
func (s *Store) BuryReplica(ctx context.Context, g GoneReplica, finishKind, ownQueue string) (RescuedJobs, bool, error) {
	var out RescuedJobs
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return out, false, fmt.Errorf("remove replica %s: %w", g.Name, translate(err))
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var client *string
	err = tx.QueryRow(ctx, `DELETE FROM replicas r WHERE name = $1 AND lock_pid IS NOT DISTINCT FROM $2 AND seen_at = $3
		AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = r.lock_pid)
		RETURNING job_client_id`, g.Name, g.LockPID, g.SeenAt).Scan(&client)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, false, nil
	}
	if err != nil {
		return out, false, fmt.Errorf("remove replica %s: %w", g.Name, translate(err))
	}
	why := fmt.Sprintf("the process of replica %s died (its catalog lock connection is gone): job rescued by pgmirror", g.Name)
	if client != nil {
		if out, err = rescueJobsOf(ctx, tx, *client, finishKind, why); err != nil {
			return out, false, err
		}
	}
	if ownQueue != "" {
		tag, err := tx.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now(),
				errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', greatest(attempt, 0), 'error', $3::text, 'trace', ''))
			WHERE queue = $1 AND kind = $2 AND state IN ('available', 'scheduled', 'retryable', 'pending')`, ownQueue, finishKind, why)
		if err != nil {
			return out, false, fmt.Errorf("finish the waiting jobs of replica %s: %w", g.Name, translate(err))
		}
		out.Finished += tag.RowsAffected()
	}
	if err := tx.Commit(ctx); err != nil {
		return out, false, fmt.Errorf("remove replica %s: %w", g.Name, translate(err))
	}
	return out, true, nil
}

// RescueJobsOf rescues the River jobs that the River client clientID left
// running: that client's process is known dead (an earlier process of a
// replica of the same name, see LockHolder.TakePredecessors).
func (s *Store) RescueJobsOf(ctx context.Context, clientID, finishKind string) (RescuedJobs, error) {
	return rescueJobsOf(ctx, s.q, clientID, finishKind, "an earlier process of this replica died: job rescued by pgmirror")
}

// rescueJobsOf does what River's rescuer does to a stuck job, at once, for
// the jobs whose last attempt is by clientID and which are still running:
// jobs of finishKind (mirror runs, which the balancer takes over by their
// advisory locks) are completed; others with attempts left are made
// available, the rest discarded; each gets an error entry saying why.
func rescueJobsOf(ctx context.Context, q Executor, clientID, finishKind, why string) (RescuedJobs, error) {
	var out RescuedJobs
	rows, err := q.Query(ctx, `UPDATE river_job j SET
			state = (CASE WHEN j.kind = $2 THEN 'completed' WHEN j.attempt < j.max_attempts THEN 'available' ELSE 'discarded' END)::river_job_state,
			finalized_at = CASE WHEN j.kind = $2 OR j.attempt >= j.max_attempts THEN now() END,
			scheduled_at = CASE WHEN j.kind <> $2 AND j.attempt < j.max_attempts THEN now() ELSE j.scheduled_at END,
			errors = array_append(j.errors, jsonb_build_object('at', now(), 'attempt', greatest(j.attempt, 0), 'error', $3::text, 'trace', '')),
			metadata = j.metadata || jsonb_build_object('river:rescue_count',
				coalesce(CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number' THEN (j.metadata ->> 'river:rescue_count')::int END, 0) + 1)
		WHERE j.state = 'running' AND j.attempted_by[array_upper(j.attempted_by, 1)] = $1
		RETURNING j.state::text`, clientID, finishKind, why)
	if err != nil {
		return out, fmt.Errorf("rescue the running jobs of River client %s: %w", clientID, translate(err))
	}
	var state string
	if _, err := pgx.ForEachRow(rows, []any{&state}, func() error {
		switch state {
		case "completed":
			out.Finished++
		case "available":
			out.Retried++
		default:
			out.Discarded++
		}
		return nil
	}); err != nil {
		return out, fmt.Errorf("rescue the running jobs of River client %s: %w", clientID, translate(err))
	}
	return out, nil
}
