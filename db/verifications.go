package db

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// VerificationState is where a verification stands (verifications.state).
type VerificationState string

// Verification states.
const (
	VerifyRunning   VerificationState = "running"
	VerifyDone      VerificationState = "done"
	VerifyFailed    VerificationState = "failed"
	VerifyCancelled VerificationState = "cancelled"
)

// HoldState is a step of the hand-shake between a verification job and the
// mirror's CDC run (verifications.hold_state).
type HoldState string

// Hold states.
const (
	HoldRequested HoldState = "requested"
	HoldArmed     HoldState = "armed"
	HoldHeld      HoldState = "held"
	HoldReleased  HoldState = "released"
	HoldExpired   HoldState = "expired"
)

// Verification is one comparison of a mirror's destination with its source.
type Verification struct {
	ID            int64
	MirrorID      int64
	State         VerificationState
	RequestedBy   string
	Tables        []string // requested tables; nil means all
	LSN           string   // the source position compared at ("" before it is known)
	StartedAt     time.Time
	FinishedAt    *time.Time
	Error         string
	Result        json.RawMessage // array of per-table results
	RowsDiffering *int64
	// RepairOf, when set, is the verification whose differing key ranges
	// this one repairs before it compares again.
	RepairOf    *int64
	HoldState   HoldState
	HoldFloor   string
	HoldLSN     string
	HeldApplied string
	// ReverseMirrorProblems are what would keep a cut-over from creating a
	// reverse mirror, as this verification found them; nil when not checked.
	ReverseMirrorProblems []string
}

const verificationColumns = `id, mirror_id, state, coalesce(requested_by, ''), tables, coalesce(lsn::text, ''), started_at, finished_at,
	coalesce(error, ''), result, rows_differing, repair_of, coalesce(hold_state, ''), coalesce(hold_floor::text, ''), coalesce(hold_lsn::text, ''),
	coalesce(held_applied::text, ''), reverse_mirror_problems`

func scanVerification(row pgx.Row) (Verification, error) {
	var v Verification
	err := row.Scan(&v.ID, &v.MirrorID, &v.State, &v.RequestedBy, &v.Tables, &v.LSN, &v.StartedAt, &v.FinishedAt,
		&v.Error, &v.Result, &v.RowsDiffering, &v.RepairOf, &v.HoldState, &v.HoldFloor, &v.HoldLSN, &v.HeldApplied, &v.ReverseMirrorProblems)
	return v, err
}

// VerificationSetReverseProblems records what would keep a cut-over from
// creating a reverse mirror, as verification id found it ([] for nothing).
func (s *Store) VerificationSetReverseProblems(ctx context.Context, id int64, problems []string) error {
	if problems == nil {
		problems = []string{}
	}
	body, err := json.Marshal(problems)
	if err != nil {
		return fmt.Errorf("encode reverse mirror problems: %w", err)
	}
	if _, err := s.q.Exec(ctx, `UPDATE verifications SET reverse_mirror_problems = $2, updated_at = now() WHERE id = $1`, id, body); err != nil {
		return fmt.Errorf("record verification %d: %w", id, translate(err))
	}
	return nil
}

// VerificationCreate records a new running verification of the mirror.
// repairOf, when not 0, names the verification whose differences it repairs.
func (s *Store) VerificationCreate(ctx context.Context, mirrorID int64, requestedBy string, tables []string, repairOf int64) (Verification, error) {
	v, err := scanVerification(s.q.QueryRow(ctx, `INSERT INTO verifications (mirror_id, requested_by, tables, repair_of)
		VALUES ($1, nullif($2, ''), $3, nullif($4, 0)) RETURNING `+verificationColumns, mirrorID, requestedBy, tables, repairOf))
	if err != nil {
		return Verification{}, fmt.Errorf("create verification: %w", translate(err))
	}
	return v, nil
}

// VerificationGet returns one verification of the mirror.
func (s *Store) VerificationGet(ctx context.Context, mirrorID, id int64) (Verification, error) {
	v, err := scanVerification(s.q.QueryRow(ctx, `SELECT `+verificationColumns+` FROM verifications WHERE mirror_id = $1 AND id = $2`, mirrorID, id))
	if err != nil {
		return Verification{}, fmt.Errorf("get verification %d: %w", id, translate(err))
	}
	return v, nil
}

// VerificationByID returns a verification by its id alone.
func (s *Store) VerificationByID(ctx context.Context, id int64) (Verification, error) {
	v, err := scanVerification(s.q.QueryRow(ctx, `SELECT `+verificationColumns+` FROM verifications WHERE id = $1`, id))
	if err != nil {
		return Verification{}, fmt.Errorf("get verification %d: %w", id, translate(err))
	}
	return v, nil
}

// VerificationList returns the mirror's verifications, newest first, at
// most limit.
func (s *Store) VerificationList(ctx context.Context, mirrorID int64, limit int) ([]Verification, error) {
	rows, err := s.q.Query(ctx, `SELECT `+verificationColumns+` FROM verifications WHERE mirror_id = $1 ORDER BY id DESC LIMIT $2`, mirrorID, limit)
	if err != nil {
		return nil, fmt.Errorf("list verifications: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Verification, error) { return scanVerification(row) })
	if err != nil {
		return nil, fmt.Errorf("list verifications: %w", translate(err))
	}
	return out, nil
}

// VerificationCancel cancels a running verification. It reports false when
// the verification had already ended.
func (s *Store) VerificationCancel(ctx context.Context, mirrorID, id int64) (bool, error) {
	tag, err := s.q.Exec(ctx, `UPDATE verifications SET state = 'cancelled', finished_at = now(), updated_at = now(),
		hold_state = CASE WHEN hold_state IS NULL THEN NULL ELSE 'released' END
		WHERE mirror_id = $1 AND id = $2 AND state = 'running'`, mirrorID, id)
	if err != nil {
		return false, fmt.Errorf("cancel verification %d: %w", id, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// VerificationFinish ends a running verification (done or failed) with its
// result. It reports false when it was no longer running (cancelled).
func (s *Store) VerificationFinish(ctx context.Context, id int64, state VerificationState, errText string, result any, rowsDiffering *int64) (bool, error) {
	body, err := json.Marshal(result)
	if err != nil {
		return false, fmt.Errorf("encode verification result: %w", err)
	}
	tag, err := s.q.Exec(ctx, `UPDATE verifications SET state = $2, error = nullif($3, ''), result = $4, rows_differing = $5,
		finished_at = now(), updated_at = now(), hold_state = CASE WHEN hold_state IS NULL THEN NULL ELSE 'released' END
		WHERE id = $1 AND state = 'running'`, id, state, errText, body, rowsDiffering)
	if err != nil {
		return false, fmt.Errorf("finish verification %d: %w", id, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// VerificationSetResult records partial results and the position of a
// running verification.
func (s *Store) VerificationSetResult(ctx context.Context, id int64, lsn string, result any) error {
	body, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("encode verification result: %w", err)
	}
	_, err = s.q.Exec(ctx, `UPDATE verifications SET lsn = nullif($2, '')::pg_lsn, result = $3, updated_at = now() WHERE id = $1`, id, lsn, body)
	if err != nil {
		return fmt.Errorf("record verification %d: %w", id, translate(err))
	}
	return nil
}

// VerificationSetHold moves a running verification's hold from one of the
// states in from to the state to, with the positions given (empty leaves
// one as it is; a new request clears the positions of an earlier hold). It reports whether the row was in one of those states.
func (s *Store) VerificationSetHold(ctx context.Context, id int64, from []HoldState, to HoldState, floor, at, applied string) (bool, error) {
	tag, err := s.q.Exec(ctx, `UPDATE verifications SET hold_state = $3,
		hold_floor = coalesce(nullif($4, '')::pg_lsn, hold_floor),
		hold_lsn = CASE WHEN $3 = 'requested' THEN NULL ELSE coalesce(nullif($5, '')::pg_lsn, hold_lsn) END,
		held_applied = CASE WHEN $3 = 'requested' THEN NULL ELSE coalesce(nullif($6, '')::pg_lsn, held_applied) END, updated_at = now()
		WHERE id = $1 AND state = 'running' AND coalesce(hold_state, '') = ANY($2)`, id, from, to, floor, at, applied)
	if err != nil {
		return false, fmt.Errorf("set the hold of verification %d: %w", id, translate(err))
	}
	return tag.RowsAffected() == 1, nil
}

// VerificationHoldRequest returns the mirror's running verification that
// requests or holds a hold (hold_state requested, armed or held), if any.
func (s *Store) VerificationHoldRequest(ctx context.Context, mirrorID int64) (Verification, bool, error) {
	v, err := scanVerification(s.q.QueryRow(ctx, `SELECT `+verificationColumns+` FROM verifications
		WHERE mirror_id = $1 AND state = 'running' AND hold_state IN ('requested', 'armed', 'held') ORDER BY id LIMIT 1`, mirrorID))
	if err == pgx.ErrNoRows {
		return Verification{}, false, nil
	}
	if err != nil {
		return Verification{}, false, fmt.Errorf("read hold requests: %w", translate(err))
	}
	return v, true, nil
}

// VerificationsRunning counts the mirror's running verifications.
func (s *Store) VerificationsRunning(ctx context.Context, mirrorID int64) (int, error) {
	var n int
	if err := s.q.QueryRow(ctx, `SELECT count(*) FROM verifications WHERE mirror_id = $1 AND state = 'running'`, mirrorID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count running verifications: %w", translate(err))
	}
	return n, nil
}

// VerificationTouch records that the verification's job is alive and
// returns its state (a cancelled verification's job stops).
func (s *Store) VerificationTouch(ctx context.Context, id int64) (VerificationState, error) {
	var state VerificationState
	err := s.q.QueryRow(ctx, `UPDATE verifications SET updated_at = now() WHERE id = $1 RETURNING state`, id).Scan(&state)
	if err != nil {
		return "", fmt.Errorf("touch verification %d: %w", id, translate(err))
	}
	return state, nil
}

// VerificationStaleAfter is how long a running verification may go without
// a sign of life from its job (VerificationTouch, every few seconds) before
// it is marked failed: the replica running it stopped.
const VerificationStaleAfter = 30 * time.Second

// VerificationsFailStale marks the mirror's running verifications whose job
// has not been heard of for VerificationStaleAfter failed, with the reason.
func (s *Store) VerificationsFailStale(ctx context.Context, mirrorID int64) error {
	_, err := s.q.Exec(ctx, `UPDATE verifications SET state = 'failed', finished_at = now(),
		error = 'the pgmirror replica running this verification stopped before it finished (no sign of life for ' || $2::int || ' s); start a new verification',
		hold_state = CASE WHEN hold_state IS NULL THEN NULL ELSE 'released' END
		WHERE mirror_id = $1 AND state = 'running' AND updated_at < now() - make_interval(secs => $2::int)`, mirrorID, int(VerificationStaleAfter.Seconds()))
	if err != nil {
		return fmt.Errorf("fail stale verifications: %w", translate(err))
	}
	return nil
}

// VerifyIntervalSet sets the mirror's verification interval (0 turns it off).
func (s *Store) VerifyIntervalSet(ctx context.Context, mirrorID int64, seconds int) error {
	var err error
	if seconds == 0 {
		_, err = s.q.Exec(ctx, `DELETE FROM verify_schedules WHERE mirror_id = $1`, mirrorID)
	} else {
		_, err = s.q.Exec(ctx, `INSERT INTO verify_schedules (mirror_id, interval_seconds) VALUES ($1, $2)
			ON CONFLICT (mirror_id) DO UPDATE SET interval_seconds = EXCLUDED.interval_seconds, updated_at = now()`, mirrorID, seconds)
	}
	if err != nil {
		return fmt.Errorf("set the verification interval: %w", translate(err))
	}
	return nil
}

// VerifyInterval returns the mirror's verification interval in seconds (0: off).
func (s *Store) VerifyInterval(ctx context.Context, mirrorID int64) (int, error) {
	var n int
	err := s.q.QueryRow(ctx, `SELECT coalesce((SELECT interval_seconds FROM verify_schedules WHERE mirror_id = $1), 0)`, mirrorID).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the verification interval: %w", translate(err))
	}
	return n, nil
}

// VerificationsDue returns the running mirrors whose verification interval
// has passed since their last verification started, with none running.
func (s *Store) VerificationsDue(ctx context.Context) ([]int64, error) {
	rows, err := s.q.Query(ctx, `SELECT m.id FROM verify_schedules vs JOIN mirrors m ON m.id = vs.mirror_id
		WHERE m.deleted_at IS NULL AND m.status = 'running' AND m.desired_state = 'running'
		AND NOT EXISTS (SELECT 1 FROM verifications v WHERE v.mirror_id = m.id
			AND (v.state = 'running' OR v.started_at > now() - make_interval(secs => vs.interval_seconds)))
		ORDER BY m.id`)
	if err != nil {
		return nil, fmt.Errorf("read due verifications: %w", translate(err))
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read due verifications: %w", translate(err))
	}
	return ids, nil
}

// VerificationLatest returns the mirror's newest verification that ended
// done, if any.
func (s *Store) VerificationLatest(ctx context.Context, mirrorID int64) (Verification, bool, error) {
	v, err := scanVerification(s.q.QueryRow(ctx, `SELECT `+verificationColumns+` FROM verifications
		WHERE mirror_id = $1 AND state = 'done' ORDER BY id DESC LIMIT 1`, mirrorID))
	if err == pgx.ErrNoRows {
		return Verification{}, false, nil
	}
	if err != nil {
		return Verification{}, false, fmt.Errorf("read the latest verification: %w", translate(err))
	}
	return v, true, nil
}
