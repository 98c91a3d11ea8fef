package db

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CutoverState is where a mirror's last cut-over stands (Cutover.State).
type CutoverState string

// Cut-over states.
const (
	CutoverRequested CutoverState = "requested"
	CutoverRunning   CutoverState = "running"
	CutoverCompleted CutoverState = "completed"
	CutoverFailed    CutoverState = "failed"
)

// StepState is where one step of a cut-over stands (CutoverStep.State).
type StepState string

// Cut-over step states.
const (
	StepRunning StepState = "running"
	StepDone    StepState = "done"
	StepFailed  StepState = "failed"
)

// Cutover is a mirror's last cut-over (mirrors.cutover, JSON): what was
// asked, how far it got, and how it ended.
type Cutover struct {
	State       CutoverState   `json:"state"`
	RequestedAt time.Time      `json:"requested_at"`
	RequestedBy string         `json:"requested_by,omitempty"`
	StartedAt   *time.Time     `json:"started_at,omitempty"`
	FinishedAt  *time.Time     `json:"finished_at,omitempty"`
	Options     CutoverOptions `json:"options"`
	// TargetLSN is the source position everything before which is applied
	// (the marker written once the source was quiet).
	TargetLSN string        `json:"target_lsn,omitempty"`
	Steps     []CutoverStep `json:"steps"`
	Error     string        `json:"error,omitempty"`
	// ReverseMirror names the mirror created in the other direction.
	ReverseMirror string `json:"reverse_mirror,omitempty"`
	// RowCountsOnly names the tables whose checksums the cut-over did not
	// compare (size limit, verify false): only their row counts were.
	RowCountsOnly []string `json:"row_counts_only,omitempty"`
	// Warnings name what the cut-over did not carry to the destination
	// (foreign keys it could not create, triggers, grants, policies,
	// publications, roles, extensions the destination lacks).
	Warnings []string `json:"warnings,omitempty"`
}

// CutoverOptions are the choices of a cut-over request.
type CutoverOptions struct {
	// LockSource makes the mirrored source tables read-only (a trigger that
	// refuses writes) before the final position is taken.
	LockSource bool `json:"lock_source"`
	// DropSlot drops the mirror's replication slot (and the publication it
	// created) once the cut-over completed.
	DropSlot bool `json:"drop_slot"`
	// TimeoutSeconds bounds applying the changes up to the final position.
	TimeoutSeconds int `json:"timeout_seconds"`
	// QuietSeconds is how long the source must show no changes to the
	// mirrored tables (without LockSource).
	QuietSeconds int `json:"quiet_seconds"`
	// Verify: compare checksums of every table (true), of none (false), or
	// of the tables up to a size limit (nil; see defaults.CutoverChecksumMaxBytes).
	Verify *bool `json:"verify,omitempty"`
	// ReverseMirrorName, when set, names the mirror created from the
	// destination back to the source; its publication and slot names.
	ReverseMirrorName          string `json:"reverse_mirror_name,omitempty"`
	ReversePublicationName     string `json:"reverse_publication_name,omitempty"`
	ReverseReplicationSlotName string `json:"reverse_replication_slot_name,omitempty"`
}

// CutoverStep is one step of a cut-over with its time.
type CutoverStep struct {
	Name       string         `json:"name"`
	State      StepState      `json:"state"`
	StartedAt  time.Time      `json:"started_at"`
	DurationMS int64          `json:"duration_ms"`
	Detail     map[string]any `json:"detail,omitempty"`
	Error      string         `json:"error,omitempty"`
}

// Finished reports whether the cut-over has ended (completed or failed).
func (c *Cutover) Finished() bool {
	return c != nil && (c.State == CutoverCompleted || c.State == CutoverFailed)
}

// MirrorRequestCutover records a cut-over request for the mirror's worker.
func (s *Store) MirrorRequestCutover(ctx context.Context, id int64, c Cutover) error {
	return s.updateMirror(ctx, "request a cut-over of", id,
		`UPDATE mirrors SET pending_action = 'cutover', cutover = $2 WHERE id = $1 AND deleted_at IS NULL`, c)
}

// MirrorCutoverProgress writes the progress of the mirror's running
// cut-over.
func (s *Store) MirrorCutoverProgress(ctx context.Context, id int64, c Cutover) error {
	if _, err := s.q.Exec(ctx, `UPDATE mirrors SET cutover = $2 WHERE id = $1 AND pending_action = 'cutover'`, id, c); err != nil {
		return fmt.Errorf("record cut-over progress of mirror %d: %w", id, translate(err))
	}
	return nil
}

// MirrorCutoverFailed records a failed cut-over and clears the request: the
// mirror goes on as before.
func (s *Store) MirrorCutoverFailed(ctx context.Context, id int64, c Cutover) error {
	if _, err := s.q.Exec(ctx, `UPDATE mirrors SET cutover = $2, pending_action = NULL WHERE id = $1 AND pending_action = 'cutover'`, id, c); err != nil {
		return fmt.Errorf("record failed cut-over of mirror %d: %w", id, translate(err))
	}
	return nil
}

// MirrorCutoverComplete moves the mirror to its final status completed
// with the cut-over's record. It returns ErrNotFound when the mirror is
// gone or no longer waits for this cut-over.
func (s *Store) MirrorCutoverComplete(ctx context.Context, id int64, c Cutover) error {
	return s.updateMirror(ctx, "complete the cut-over of", id,
		`UPDATE mirrors SET status = 'completed', pending_action = NULL, cutover = $2,
			error_message = NULL, error_count = 0, resume_status = NULL, next_retry_at = NULL
		WHERE id = $1 AND deleted_at IS NULL AND pending_action = 'cutover'`, c)
}

// MirrorCutoverFinalRecord writes the record of a completed mirror's
// cut-over once its last steps ran; slotDropped says that its slot (and the
// publication it created) are gone, so that deleting the mirror does not
// look for them.
func (s *Store) MirrorCutoverFinalRecord(ctx context.Context, id int64, c Cutover, slotDropped bool) error {
	_, err := s.q.Exec(ctx, `UPDATE mirrors SET cutover = $2,
			created_slot = created_slot AND NOT $3, created_publication = created_publication AND NOT $3,
			slot_lag_bytes = CASE WHEN $3 THEN NULL ELSE slot_lag_bytes END,
			slot_wal_status = CASE WHEN $3 THEN NULL ELSE slot_wal_status END,
			slot_checked_at = CASE WHEN $3 THEN NULL ELSE slot_checked_at END
		WHERE id = $1 AND status = 'completed'`, id, c, slotDropped)
	if err != nil {
		return fmt.Errorf("record the cut-over of mirror %d: %w", id, translate(err))
	}
	return nil
}

// BeginTx starts a catalog transaction.
func (s *Store) BeginTx(ctx context.Context) (pgx.Tx, error) {
	tx, err := s.q.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin catalog transaction: %w", translate(err))
	}
	return tx, nil
}
