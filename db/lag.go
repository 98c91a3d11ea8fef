package db

import (
	"context"
	"fmt"
	"sync"
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

// LagRunBy is the lag to show of a mirror that worker w runs: Lag, except
// that when the mirror's own measure is not fresh and w's replica has
// written no lag measures for lagFresh either, the catalog has not heard
// from the stream lately (the replica could not reach it, as in the
// moments after a catalog outage) and the lag is unknown (nil), not the age
// of the last measure written before. A replica that keeps writing while
// one mirror's measure stops (a long batch) leaves that mirror to Lag's
// upper bound.
func (m Mirror) LagRunBy(w MirrorWorker, now time.Time) *float64 {
	fresh := m.LagSeconds != nil && m.LagMeasuredAt != nil && now.Sub(*m.LagMeasuredAt) < lagFresh
	if m.Status == StatusRunning && !fresh && (w.LagsWrittenAt == nil || now.Sub(*w.LagsWrittenAt) >= lagFresh) {
		return nil
	}
	return m.Lag(now)
}

// LagBoard holds the newest lag measure of each mirror this process
// streams, as its streams take them (every second). The replica writes
// them to the catalog every 2 s, and not at all while the catalog is
// unreachable: its API answers with the board's measure where it is newer
// than the catalog's (Newest). A nil board holds nothing.
//
// The board also knows whether this replica's lag writes reach the catalog
// (CatalogWrite): while they do not, and for lagUnsureFor after they do
// again, the catalog's view of which replica runs a mirror is being
// rebuilt (Unsure).
type LagBoard struct {
	mu   sync.Mutex
	m    map[int64]LagMeasure
	puts int

	catalogLost bool      // the last lag write failed
	sureFrom    time.Time // lag writes reach the catalog again; sure from then on
}

// lagUnsureFor is how long after a replica's lag writes reach the catalog
// again it is unsure of the mirrors without a worker: the runs of every
// replica take their locks back within a few seconds of the catalog's
// return (they retry every second).
const lagUnsureFor = 10 * time.Second

// CatalogWrite records whether a lag write of this replica reached the
// catalog at now.
func (b *LagBoard) CatalogWrite(ok bool, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !ok:
		b.catalogLost = true
	case b.catalogLost:
		b.catalogLost = false
		b.sureFrom = now.Add(lagUnsureFor)
	}
}

// Unsure reports whether this replica could not write to the catalog
// lately (see CatalogWrite): a mirror without a worker may be one whose run
// streams on and is taking its lock back (Mirror.LagShown).
func (b *LagBoard) Unsure(now time.Time) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.catalogLost || now.Before(b.sureFrom)
}

// lagBoardForget is how old a measure the board forgets (a mirror that
// moved to another replica or stopped here).
const lagBoardForget = time.Minute

// NewLagBoard returns an empty board.
func NewLagBoard() *LagBoard { return &LagBoard{m: map[int64]LagMeasure{}} }

// Put keeps m, unless the board holds a newer measure of the mirror; a
// measure without an applied commit time keeps the one before.
func (b *LagBoard) Put(m LagMeasure) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.m[m.MirrorID]
	if ok && old.MeasuredAt.After(m.MeasuredAt) {
		return
	}
	if m.AppliedCommit.IsZero() {
		m.AppliedCommit = old.AppliedCommit
	}
	b.m[m.MirrorID] = m
	if b.puts++; b.puts%1024 == 0 {
		for id, x := range b.m {
			if time.Since(x.MeasuredAt) > lagBoardForget {
				delete(b.m, id)
			}
		}
	}
}

// Newest returns m with the board's measure of it where that is newer than
// the catalog's.
func (b *LagBoard) Newest(m Mirror) Mirror {
	if b == nil {
		return m
	}
	b.mu.Lock()
	x, ok := b.m[m.ID]
	b.mu.Unlock()
	if !ok || (m.LagMeasuredAt != nil && !x.MeasuredAt.After(*m.LagMeasuredAt)) {
		return m
	}
	lag, at := x.LagSeconds, x.MeasuredAt
	m.LagSeconds, m.LagMeasuredAt = &lag, &at
	if !x.AppliedCommit.IsZero() {
		applied := x.AppliedCommit
		m.AppliedCommitAt = &applied
	}
	return m
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
