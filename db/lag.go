package db

import (
	"context"
	"fmt"
	"time"
)

// lagFresh is how recent the streaming worker's measure must be to be
// reported as it is; it writes one about every second.
const lagFresh = 15 * time.Second

// caughtUpFresh is how recent a measure of 0 must be: the worker measures
// between the transactions it applies, so a measure that stops coming
// while the stream runs means a batch is being applied (or waits for a
// lock) and changes are pending; its 0 is not true any more.
const caughtUpFresh = 5 * time.Second

// Lag is how many seconds the mirror is behind its source at now, as the
// catalog knows it, or nil when that is unknown:
//   - while a worker streams the mirror, its own measure (the source commit
//     time of the oldest change not yet applied, or of a heartbeat not yet
//     received, to now; 0 when nothing is pending), written about every
//     second; a 0 older than caughtUpFresh is not taken;
//   - otherwise (paused, in error, stopped, a measure older than lagFresh,
//     or a 0 older than caughtUpFresh), the time since the source commit of the last applied
//     transaction when the mirror's slot holds WAL it has not confirmed
//     (an upper bound: that WAL may hold nothing for the mirror), and 0 when
//     the slot holds none, both as of the slot monitor's last reading;
//   - nil for a completed mirror: it was cut over and follows the source no
//     more.
func (m Mirror) Lag(now time.Time) *float64 {
	if m.Status == StatusCompleted {
		return nil
	}
	if m.LagSeconds != nil && m.LagMeasuredAt != nil && now.Sub(*m.LagMeasuredAt) < lagFresh &&
		m.Status == StatusRunning && (*m.LagSeconds > 0 || now.Sub(*m.LagMeasuredAt) < caughtUpFresh) {
		lag := *m.LagSeconds
		if lag > 0 {
			lag += max(0, now.Sub(*m.LagMeasuredAt).Seconds())
		}
		return &lag
	}
	if m.SlotLagBytes == nil {
		return nil
	}
	lag := 0.0
	if *m.SlotLagBytes > 0 {
		if m.AppliedCommitAt == nil {
			return nil
		}
		lag = max(0, now.Sub(*m.AppliedCommitAt).Seconds())
	}
	return &lag
}

// MirrorRecordLag stores the streaming worker's measure of a mirror's lag
// (seconds at measuredAt) and the source commit time of the last
// transaction it applied (zero: not known yet, the stored one is kept).
func (s *Store) MirrorRecordLag(ctx context.Context, mirrorID int64, lagSeconds float64, measuredAt, appliedCommit time.Time) error {
	var applied *time.Time
	if !appliedCommit.IsZero() {
		applied = &appliedCommit
	}
	_, err := s.q.Exec(ctx, `INSERT INTO mirror_lag (mirror_id, lag_seconds, measured_at, applied_commit_at)
		VALUES ($1, $2, $3, $4)
		ON CONFLICT (mirror_id) DO UPDATE SET lag_seconds = EXCLUDED.lag_seconds, measured_at = EXCLUDED.measured_at,
			applied_commit_at = coalesce(EXCLUDED.applied_commit_at, mirror_lag.applied_commit_at)
		WHERE mirror_lag.measured_at <= EXCLUDED.measured_at`,
		mirrorID, max(0, lagSeconds), measuredAt, applied)
	if err != nil {
		return fmt.Errorf("record lag of mirror %d: %w", mirrorID, translate(err))
	}
	return nil
}

// MirrorSequencesSynced records when the mirror's destination sequences were
// last set in step with the source's.
func (s *Store) MirrorSequencesSynced(ctx context.Context, mirrorID int64, at time.Time) error {
	if _, err := s.q.Exec(ctx, `UPDATE mirrors SET sequences_synced_at = $2 WHERE id = $1`, mirrorID, at); err != nil {
		return fmt.Errorf("record sequence sync of mirror %d: %w", mirrorID, translate(err))
	}
	return nil
}
