package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file holds the catalog queries of the worker side: the River jobs that
// drive mirrors write status, counters and errors through these methods.

// mirrorLockClass is the first key of the two-key session advisory lock that
// the worker running a mirror holds (the second key is the mirror id). It
// reads "pgm" in ASCII. pg_locks shows it as classid, the mirror id as objid.
const mirrorLockClass = 0x70676d

// MirrorLock is a session advisory lock on one mirror. A run holds it on
// its replica's LockHolder connection; the API and the cleanup job take it
// for a moment on a pool connection of their own (MirrorTryLock). Whoever
// holds it is the one consumer of the mirror's replication slot; when the
// holder's process dies, PostgreSQL releases the lock with the session.
type MirrorLock struct {
	conn     *pgxpool.Conn // a lock of MirrorTryLock
	holder   *LockHolder   // a lock of LockHolder.TryLock
	lost     chan struct{} // closed when the holder's connection died
	mirrorID int64
}

// MirrorTryLock takes the mirror's lock without waiting, on a pool
// connection held until Release: for short waits (the API, the cleanup
// job), not for runs (LockHolder). It returns nil and no error when another
// session holds it.
func (s *Store) MirrorTryLock(ctx context.Context, mirrorID int64) (*MirrorLock, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire catalog connection for mirror lock: %w", translate(err))
	}
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", int32(mirrorLockClass), int32(mirrorID)).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("try lock of mirror %d: %w", mirrorID, translate(err))
	}
	if !ok {
		conn.Release()
		return nil, nil
	}
	return &MirrorLock{conn: conn, mirrorID: mirrorID}, nil
}

// MirrorLockWait takes the mirror's lock, waiting at most timeout.
func (s *Store) MirrorLockWait(ctx context.Context, mirrorID int64, timeout time.Duration) (*MirrorLock, error) {
	deadline := time.Now().Add(timeout)
	for {
		lock, err := s.MirrorTryLock(ctx, mirrorID)
		if err != nil || lock != nil {
			return lock, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("mirror %d is still being run by another worker after %s", mirrorID, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Lost is closed when the lock is gone with the connection that held it
// (nil, never closed, for a lock of MirrorTryLock).
func (l *MirrorLock) Lost() <-chan struct{} {
	if l.lost == nil {
		return nil
	}
	return l.lost
}

// Release unlocks and returns the connection. A connection that can no longer
// unlock is closed, which releases the lock on the server.
func (l *MirrorLock) Release() {
	if l.holder != nil {
		l.holder.unlock(l)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.conn.Exec(ctx, "UNLISTEN *")
	if _, err := l.conn.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", int32(mirrorLockClass), int32(l.mirrorID)); err != nil {
		_ = l.conn.Hijack().Close(ctx)
		return
	}
	l.conn.Release()
}

// MirrorsWithoutWorker returns the live mirrors that want to run but have no
// worker: nobody holds their lock and no run job of kind runKind waits for
// them in queue (jobs in other queues, such as a replica's own adoption
// queue, are fetched at once by their replica or not at all). The
// supervisor enqueues a run job for each; this is how a mirror whose replica
// died is taken over.
func (s *Store) MirrorsWithoutWorker(ctx context.Context, runKind, queue string) ([]int64, error) {
	rows, err := s.q.Query(ctx, `
		SELECT m.id FROM mirrors m
		WHERE m.deleted_at IS NULL
		  AND m.desired_state = 'running'
		  AND m.status NOT IN ('paused', 'stopped', 'completed')
		  AND NOT EXISTS (
		      SELECT 1 FROM pg_locks l
		      WHERE l.locktype = 'advisory' AND l.granted
		        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		        AND l.classid = $1::oid AND l.objid = m.id::oid AND l.objsubid = 2)
		  AND NOT EXISTS (
		      SELECT 1 FROM river_job j
		      WHERE j.kind = $2 AND j.queue = $3 AND j.state IN ('available', 'scheduled', 'retryable', 'pending')
		        AND (j.args->>'mirror_id')::bigint = m.id)
		ORDER BY m.id`, int64(mirrorLockClass), runKind, queue)
	if err != nil {
		return nil, fmt.Errorf("list mirrors without worker: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list mirrors without worker: %w", err)
	}
	return ids, nil
}

// DeletedMirrorsWithoutCleanup returns soft-deleted mirrors that have no
// cleanup job waiting or running (for example after the job was discarded).
func (s *Store) DeletedMirrorsWithoutCleanup(ctx context.Context, cleanupKind string) ([]int64, error) {
	rows, err := s.q.Query(ctx, `
		SELECT m.id FROM mirrors m
		WHERE m.deleted_at IS NOT NULL
		  AND NOT EXISTS (
		      SELECT 1 FROM river_job j
		      WHERE j.kind = $1 AND j.state IN ('available', 'scheduled', 'retryable', 'pending', 'running')
		        AND (j.args->>'mirror_id')::bigint = m.id)
		ORDER BY m.id`, cleanupKind)
	if err != nil {
		return nil, fmt.Errorf("list deleted mirrors: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list deleted mirrors: %w", err)
	}
	return ids, nil
}

// MirrorSetStatus moves a live mirror to status. The catalog's trigger
// rejects illegal transitions. Leaving error or reaching running resets the
// error fields when clearError is set.
func (s *Store) MirrorSetStatus(ctx context.Context, mirrorID int64, status MirrorStatus, clearError bool) error {
	_, err := s.q.Exec(ctx, `
		UPDATE mirrors SET status = $2,
		  error_message = CASE WHEN $3 THEN NULL ELSE error_message END,
		  error_count   = CASE WHEN $3 THEN 0 ELSE error_count END,
		  resume_status = CASE WHEN $3 THEN NULL ELSE resume_status END,
		  next_retry_at = CASE WHEN $3 THEN NULL ELSE next_retry_at END
		WHERE id = $1 AND deleted_at IS NULL AND desired_state = 'running' AND status <> 'completed'`, mirrorID, status, clearError)
	if err != nil {
		return fmt.Errorf("set status of mirror %d to %s: %w", mirrorID, status, err)
	}
	return nil
}

// MirrorSetPausedIfRequested moves a mirror whose desired state is paused to
// status paused (the worker calls it after it stopped at a batch boundary).
func (s *Store) MirrorSetPausedIfRequested(ctx context.Context, mirrorID int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET status = 'paused'
		WHERE id = $1 AND desired_state = 'paused' AND status IN ('running', 'error', 'paused')`, mirrorID)
	if err != nil {
		return fmt.Errorf("mark mirror %d paused: %w", mirrorID, err)
	}
	return nil
}

// MirrorSetCreated records that this mirror created its publication and/or
// slot, so that deleting the mirror drops them (and only them).
func (s *Store) MirrorSetCreated(ctx context.Context, mirrorID int64, publication, slot bool) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET
		created_publication = created_publication OR $2,
		created_slot = created_slot OR $3 WHERE id = $1`, mirrorID, publication, slot)
	if err != nil {
		return fmt.Errorf("record created objects of mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorClearPendingAction clears a control request once it is carried out.
func (s *Store) MirrorClearPendingAction(ctx context.Context, mirrorID int64, action PendingAction) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET pending_action = NULL WHERE id = $1 AND pending_action = $2`, mirrorID, action)
	if err != nil {
		return fmt.Errorf("clear %s request of mirror %d: %w", action, mirrorID, err)
	}
	return nil
}

// MirrorFailure is what the worker records when a mirror fails.
type MirrorFailure struct {
	Message     string
	RetryAt     time.Time
	Stop        bool // the failure is final: move to stopped
	MaxFailures int  // consecutive failures after which the mirror stops; 0 = never
}

// MirrorRecordFailure moves the mirror to error (or stopped), remembering
// the status to return to, and returns the new consecutive error count.
func (s *Store) MirrorRecordFailure(ctx context.Context, mirrorID int64, f MirrorFailure) (count int, stopped bool, err error) {
	err = s.q.QueryRow(ctx, `
		UPDATE mirrors SET
		  resume_status = CASE WHEN status IN ('initializing', 'snapshotting', 'running') THEN status ELSE resume_status END,
		  error_count   = error_count + 1,
		  error_message = $2,
		  next_retry_at = $3,
		  status = CASE WHEN $4 OR ($5 > 0 AND error_count + 1 >= $5) THEN 'stopped' ELSE 'error' END
		WHERE id = $1 AND deleted_at IS NULL AND desired_state = 'running' AND status NOT IN ('stopped', 'completed')
		RETURNING error_count, status = 'stopped'`, mirrorID, f.Message, f.RetryAt, f.Stop, f.MaxFailures).Scan(&count, &stopped)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("record failure of mirror %d: %w", mirrorID, err)
	}
	return count, stopped, nil
}

// MirrorTablesSetStatus sets the status of the given mirror tables (all of
// the mirror's tables when ids is empty or nil, except dropped ones: their
// source table is gone).
func (s *Store) MirrorTablesSetStatus(ctx context.Context, mirrorID int64, ids []int64, status TableStatus) error {
	// pgx sends a nil slice as NULL, and cardinality(NULL) is NULL, not 0:
	// without the IS NULL test "all tables" matched none (a full resync
	// then copied nothing).
	_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET status = $3
		WHERE mirror_id = $1 AND (($2::bigint[] IS NULL OR cardinality($2::bigint[]) = 0) AND status <> 'dropped' OR id = ANY($2))`, mirrorID, ids, status)
	if err != nil {
		return fmt.Errorf("set table status of mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorTableSnapshotted records a finished table copy: status running,
// rows_synced set to the rows copied, the destination table taken over, and
// the resync request (if any) cleared.
func (s *Store) MirrorTableSnapshotted(ctx context.Context, tableID int64, rows int64, requestSeen *time.Time) error {
	_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET status = 'running', rows_synced = $2, last_synced_at = now(),
		destination_taken_at = coalesce(destination_taken_at, now()),
		resync_requested_at = CASE WHEN resync_requested_at IS NOT DISTINCT FROM $3 THEN NULL ELSE resync_requested_at END
		WHERE id = $1`, tableID, rows, requestSeen)
	if err != nil {
		return fmt.Errorf("record snapshot of table %d: %w", tableID, err)
	}
	return nil
}

// MirrorTableSnapshotProgress records the rows copied so far of a table
// being snapshotted, so that rows_synced moves during the copy. It leaves a
// table that is no longer snapshotting alone: MirrorTableSnapshotted sets
// the final count.
func (s *Store) MirrorTableSnapshotProgress(ctx context.Context, tableID int64, rows int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET rows_synced = $2 WHERE id = $1 AND status = 'snapshotting'`, tableID, rows)
	if err != nil {
		return fmt.Errorf("record snapshot progress of table %d: %w", tableID, err)
	}
	return nil
}

// MirrorTableSnapshotStarted records the source's row estimate of a table
// whose snapshot starts, and sets its rows_synced back to 0 (the copy
// counts from there).
func (s *Store) MirrorTableSnapshotStarted(ctx context.Context, tableID int64, estimate int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET rows_estimated = $2, rows_synced = 0 WHERE id = $1`, tableID, estimate)
	if err != nil {
		return fmt.Errorf("record snapshot start of table %d: %w", tableID, err)
	}
	return nil
}

// MirrorRecordProgress stores what CDC applied since the last call: the
// mirror's last LSN and batch, and each table's counters (keyed by mirror
// table id). A mirror in error that applies a batch is healthy again.
func (s *Store) MirrorRecordProgress(ctx context.Context, mirrorID int64, lsn string, batchID int64, tables map[int64]change.Counts) error {
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record progress of mirror %d: %w", mirrorID, err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE mirrors SET last_lsn = $2::pg_lsn, last_sync_batch_id = $3
		WHERE id = $1 AND (last_lsn IS NULL OR last_lsn <= $2::pg_lsn)`, mirrorID, lsn, batchID); err != nil {
		return fmt.Errorf("record progress of mirror %d: %w", mirrorID, err)
	}
	for id, c := range tables {
		if _, err := tx.Exec(ctx, `UPDATE mirror_tables SET
			rows_inserted = rows_inserted + $2, rows_updated = rows_updated + $3, rows_deleted = rows_deleted + $4,
			rows_synced = rows_synced + $2 + $3 + $4, truncates = truncates + $5, last_synced_at = now()
			WHERE id = $1`, id, c.Inserted, c.Updated, c.Deleted, c.Truncated); err != nil {
			return fmt.Errorf("record progress of mirror table %d: %w", id, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record progress of mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorSetLastLSN records the position after a snapshot (batch id kept).
func (s *Store) MirrorSetLastLSN(ctx context.Context, mirrorID int64, lsn string) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET last_lsn = $2::pg_lsn WHERE id = $1`, mirrorID, lsn)
	if err != nil {
		return fmt.Errorf("set last LSN of mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorPurge deletes a soft-deleted mirror's row (its tables and logs go
// with it) once its slot and publication are dropped.
func (s *Store) MirrorPurge(ctx context.Context, mirrorID int64) error {
	_, err := s.q.Exec(ctx, `DELETE FROM mirrors WHERE id = $1 AND deleted_at IS NOT NULL`, mirrorID)
	if err != nil {
		return fmt.Errorf("purge mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorMarkRunning moves the mirror to running as its CDC phase starts,
// clearing the error message. The consecutive error count stays until the
// mirror has been healthy for a while (MirrorResetErrorCount).
func (s *Store) MirrorMarkRunning(ctx context.Context, mirrorID int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET status = 'running', error_message = NULL, resume_status = NULL, next_retry_at = NULL
		WHERE id = $1 AND deleted_at IS NULL AND desired_state = 'running' AND status NOT IN ('stopped', 'completed')`, mirrorID)
	if err != nil {
		return fmt.Errorf("mark mirror %d running: %w", mirrorID, err)
	}
	return nil
}

// MirrorResetErrorCount resets the consecutive error count of a healthy mirror.
func (s *Store) MirrorResetErrorCount(ctx context.Context, mirrorID int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET error_count = 0 WHERE id = $1 AND error_count <> 0 AND status = 'running'`, mirrorID)
	if err != nil {
		return fmt.Errorf("reset error count of mirror %d: %w", mirrorID, err)
	}
	return nil
}

// MirrorTablesTakeDestination records that the mirror took the destination
// tables of the given mirror tables over (all of the mirror's tables when
// ids is empty): later copies of them truncate them first. A table taken
// over earlier keeps its time.
func (s *Store) MirrorTablesTakeDestination(ctx context.Context, mirrorID int64, ids []int64) error {
	_, err := s.q.Exec(ctx, `UPDATE mirror_tables SET destination_taken_at = coalesce(destination_taken_at, now())
		WHERE mirror_id = $1 AND ($2::bigint[] IS NULL OR cardinality($2::bigint[]) = 0 OR id = ANY($2))`, mirrorID, ids)
	if err != nil {
		return fmt.Errorf("record destination tables of mirror %d as taken over: %w", mirrorID, err)
	}
	return nil
}

// MirrorSetExistingDestinationRows changes what the first copy of a table
// of the mirror does with rows its destination table holds.
func (s *Store) MirrorSetExistingDestinationRows(ctx context.Context, mirrorID int64, mode ExistingRows) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET existing_destination_rows = $2 WHERE id = $1`, mirrorID, mode)
	if err != nil {
		return fmt.Errorf("set existing_destination_rows of mirror %d: %w", mirrorID, translate(err))
	}
	return nil
}

// JobFetched reports whether River's job id was fetched by a worker (it is
// running, or ended already, or is gone), as opposed to waiting in its
// queue. A hand-off asks the giving run to stop once the receiver's job is
// fetched (jobs/handoff_lock.go).
func (s *Store) JobFetched(ctx context.Context, id int64) (bool, error) {
	var waiting bool
	err := s.q.QueryRow(ctx, `SELECT state IN ('available', 'scheduled', 'retryable', 'pending') FROM river_job WHERE id = $1`, id).Scan(&waiting)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the state of job %d: %w", id, translate(err))
	}
	return !waiting, nil
}
