package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
)

// Cut-over request defaults and bounds.
const (
	cutoverDefaultTimeout = 300
	cutoverDefaultQuiet   = 5
	cutoverDefaultWait    = 60
	// cutoverMaxWait keeps the wait well inside the HTTP write timeout
	// (at least 2 minutes).
	cutoverMaxWait = 90
)

type cutoverRequest struct {
	LockSource        *bool  `json:"lock_source,omitempty" doc:"Make the mirrored source tables read-only first (an EXCLUSIVE lock drains the transactions writing them, then triggers refuse every write; replication sessions such as a reverse mirror's still write). Needs the source peer's user to own the tables and CREATE on the database. Default false: the operator has stopped the writes."`
	DropSlot          *bool  `json:"drop_slot,omitempty" doc:"Drop the mirror's replication slot (and the publication it created) once the cut-over completed, so the old source keeps no WAL for it. Default true."`
	TimeoutSeconds    *int   `json:"timeout_seconds,omitempty" minimum:"1" maximum:"86400" doc:"How long applying the source's remaining changes may take. Default 300."`
	QuietSeconds      *int   `json:"quiet_seconds,omitempty" minimum:"0" maximum:"3600" doc:"Without lock_source: how long the source must show no change to the mirrored tables before the final position is taken. Default 5."`
	ReverseMirrorName string `json:"reverse_mirror_name,omitempty" maxLength:"128" pattern:"^[A-Za-z0-9][A-Za-z0-9_.-]*$" patternDescription:"letters, digits, '_', '.' and '-', starting with a letter or digit" doc:"Create a mirror of this name from the destination back to the source, starting exactly at the cut-over (no snapshot), so that a switch can be rolled back without losing the writes made on the new side. Needs wal_level = logical on the destination and a destination user with REPLICATION."`
	Verify            *bool  `json:"verify,omitempty" doc:"Compare checksums of every table's rows at the cut-over position (besides row counts) and refuse to complete on a difference. Default: for tables of at most SERVICE_CUTOVER_CHECKSUM_MAX_BYTES (1 GiB) on the source (pg_table_size); false compares row counts only. Tables not compared are named in warnings and row_counts_only, and the message says row counts only for them. A mirror whose tables may miss changes (lost_changes) is refused whatever this says."`
	WaitSeconds       *int   `json:"wait_seconds,omitempty" minimum:"0" maximum:"90" doc:"How long the request waits for the cut-over to end: 200 when it completed, 409 when a step failed, 202 with its progress when it still runs (follow it with GET /v1/mirrors/{name}). Default 60."`
}

type cutoverInput struct {
	Name string `path:"name" doc:"Mirror name."`
	Body *cutoverRequest
}

// cutoverRecord is a mirror's last cut-over as the API shows it.
type cutoverRecord struct {
	State         db.CutoverState `json:"state"`
	RequestedAt   time.Time       `json:"requested_at"`
	RequestedBy   string          `json:"requested_by,omitempty"`
	StartedAt     *time.Time      `json:"started_at,omitempty"`
	FinishedAt    *time.Time      `json:"finished_at,omitempty"`
	Options       cutoverOptions  `json:"options"`
	TargetLSN     string          `json:"target_lsn,omitempty" doc:"Source position up to which every change is on the destination."`
	Steps         []cutoverStep   `json:"steps"`
	Error         string          `json:"error,omitempty"`
	ReverseMirror string          `json:"reverse_mirror,omitempty" doc:"The mirror created back from the destination to the source."`
	Warnings      []string        `json:"warnings" doc:"What the cut-over did not check or carry to the destination, each with the objects named: tables whose checksums were not compared (row counts only: over the size limit, or verify false), source foreign keys it could not create (a referenced table outside the mirror, an excluded column), the expressions pgmirror left out because they call code that would run with the destination peer's privileges (user functions, built-ins that run SQL), and the triggers, row-level security policies, grants, publications, roles and extensions around the mirrored tables that the destination lacks. [] when there is nothing."`
	RowCountsOnly []string        `json:"row_counts_only" doc:"Tables whose checksums the cut-over did not compare: only their row counts were (over SERVICE_CUTOVER_CHECKSUM_MAX_BYTES, or verify false). [] when every table's checksums were compared."`
}

type cutoverOptions struct {
	LockSource        bool   `json:"lock_source"`
	DropSlot          bool   `json:"drop_slot"`
	TimeoutSeconds    int    `json:"timeout_seconds"`
	QuietSeconds      int    `json:"quiet_seconds"`
	ReverseMirrorName string `json:"reverse_mirror_name,omitempty"`
}

type cutoverStep struct {
	Name       string         `json:"name" doc:"check, make_source_read_only, apply_changes, check_source_quiet, sync_sequences, create_constraints, create_foreign_keys, verify_row_counts, verify_checksums, prepare_reverse_mirror, make_destination_writable, complete, drop_slot."`
	State      db.StepState   `json:"state"`
	StartedAt  time.Time      `json:"started_at"`
	DurationMS int64          `json:"duration_ms"`
	Detail     map[string]any `json:"detail,omitempty"`
	Error      string         `json:"error,omitempty"`
}

func cutoverResponse(c *db.Cutover) *cutoverRecord {
	if c == nil {
		return nil
	}
	out := &cutoverRecord{State: c.State, RequestedAt: c.RequestedAt, RequestedBy: c.RequestedBy, StartedAt: c.StartedAt,
		FinishedAt: c.FinishedAt, TargetLSN: c.TargetLSN, Error: c.Error, ReverseMirror: c.ReverseMirror, Warnings: nonNilStrings(c.Warnings),
		RowCountsOnly: nonNilStrings(c.RowCountsOnly),
		Options: cutoverOptions{LockSource: c.Options.LockSource, DropSlot: c.Options.DropSlot, TimeoutSeconds: c.Options.TimeoutSeconds,
			QuietSeconds: c.Options.QuietSeconds, ReverseMirrorName: c.Options.ReverseMirrorName},
		Steps: make([]cutoverStep, len(c.Steps))}
	for i, s := range c.Steps {
		out.Steps[i] = cutoverStep{Name: s.Name, State: s.State, StartedAt: s.StartedAt, DurationMS: s.DurationMS, Detail: s.Detail, Error: s.Error}
	}
	return out
}

type cutoverOutput struct {
	Status int
	Body   struct {
		Message  string          `json:"message"`
		Status   db.MirrorStatus `json:"status" doc:"The mirror's status: completed once the cut-over completed."`
		Warnings []string        `json:"warnings" doc:"What the cut-over did not check or carry to the destination (cutover.warnings): tables with row counts only (checksums not compared, with the reason), and what the application needs created there. [] when there is nothing, or while the cut-over runs."`
		Cutover  *cutoverRecord  `json:"cutover"`
	}
}

func (h *handlers) registerCutover(api huma.API) {
	register(api, adminOnly, huma.Operation{
		OperationID: "cutover-mirror", Method: http.MethodPost, Path: "/v1/mirrors/{name}/cutover", Tags: []string{"Mirror control"},
		Summary: "Switch over to the destination",
		Description: "Once the application's writes to the source have stopped (or with lock_source, which makes the source tables read-only): " +
			"applies every change up to the source's current position, checks that the source stays quiet, sets the destination's sequences exactly, " +
			"adds the unique constraints and indexes that wait for the cut-over, compares the row counts of every table, and moves the mirror to " +
			"its final status completed (optionally dropping its slot and creating a reverse mirror). A failed step leaves the mirror replicating " +
			"as before. The mirror must be running. Every step and its time is in the response, in GET /v1/mirrors/{name} (cutover) and in the logs. " +
			"See docs/operations.md, \"Switching over to the destination\".",
		Errors: []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict},
	}, h.cutover)
}

func (h *handlers) cutover(ctx context.Context, in *cutoverInput) (*cutoverOutput, error) {
	req := cutoverRequest{}
	if in.Body != nil {
		req = *in.Body
	}
	opts, wait := cutoverSettings(req)
	if opts.ReverseMirrorName == in.Name {
		return nil, errorf(http.StatusBadRequest, "Invalid request: reverse_mirror_name %q is the mirror's own name: choose another", opts.ReverseMirrorName)
	}
	setAuditDetails(ctx, map[string]any{"lock_source": opts.LockSource, "drop_slot": opts.DropSlot, "reverse_mirror_name": opts.ReverseMirrorName})
	if opts.ReverseMirrorName != "" {
		if _, err := h.store.MirrorGetByName(ctx, opts.ReverseMirrorName); err == nil {
			return nil, errorf(http.StatusConflict, "Mirror %q already exists: choose another reverse_mirror_name", opts.ReverseMirrorName)
		} else if !errors.Is(err, db.ErrNotFound) {
			return nil, h.internal(ctx, "check the reverse mirror's name", err)
		}
	}
	requested := time.Now().UTC().Truncate(time.Millisecond)
	err := h.controlTx(ctx, in.Name, func(tx pgx.Tx, m db.Mirror) error {
		return h.requestCutover(ctx, tx, m, opts, requested)
	})
	if err != nil {
		return nil, err
	}
	m, err := h.waitCutover(ctx, in.Name, requested, time.Duration(wait)*time.Second)
	if err != nil {
		return nil, err
	}
	return cutoverAnswer(in.Name, m, requested)
}

// cutoverSettings are the options of a cut-over request with the defaults
// filled in, and how long the request waits for the cut-over (seconds).
func cutoverSettings(req cutoverRequest) (db.CutoverOptions, int) {
	opts := db.CutoverOptions{
		LockSource: req.LockSource != nil && *req.LockSource, DropSlot: req.DropSlot == nil || *req.DropSlot,
		TimeoutSeconds: cutoverDefaultTimeout, QuietSeconds: cutoverDefaultQuiet, ReverseMirrorName: req.ReverseMirrorName,
		Verify: req.Verify,
	}
	if req.TimeoutSeconds != nil {
		opts.TimeoutSeconds = *req.TimeoutSeconds
	}
	if req.QuietSeconds != nil {
		opts.QuietSeconds = *req.QuietSeconds
	}
	wait := cutoverDefaultWait
	if req.WaitSeconds != nil {
		wait = min(*req.WaitSeconds, cutoverMaxWait)
	}
	return opts, wait
}

// requestCutover records a cut-over request on mirror m (locked in tx) and
// enqueues the run that carries it out, or refuses it: the mirror must be
// running with every table running, nothing else in progress and no
// changes lost. The reverse mirror's names are chosen here, under the
// names lock.
func (h *handlers) requestCutover(ctx context.Context, tx pgx.Tx, m db.Mirror, opts db.CutoverOptions, requested time.Time) error {
	if m.Status != db.StatusRunning || m.DesiredState != db.DesiredRunning {
		return errorf(http.StatusConflict, "Cannot cut over mirror %q: its status is %s; a cut-over needs a running mirror", m.Name, m.Status)
	}
	tables, err := h.store.With(tx).MirrorTables(ctx, m.ID)
	if err != nil {
		return err
	}
	if err := busy(m, tables, "cut over"); err != nil {
		return err
	}
	for _, t := range tables {
		if t.Status != db.TableStatusRunning {
			return errorf(http.StatusConflict, "Cannot cut over mirror %q: table %s.%s is %s; wait until every table is running", m.Name, t.SourceSchema, t.SourceTable, t.Status)
		}
	}
	if lost := lostChangesResponse(m); lost != nil {
		// Whatever verify says: nothing the cut-over checks proves
		// these tables equal.
		return errorf(http.StatusConflict, "Cannot cut over mirror %q: changes were lost (its replication slot: %s): %s", m.Name, lost.Reason, lost.Action)
	}
	if opts.ReverseMirrorName != "" {
		if err := h.store.With(tx).LockMirrorNames(ctx); err != nil {
			return err
		}
		pub, slot, err := chooseNames(ctx, func(ctx context.Context, slot, pub string) (string, error) {
			return h.store.With(tx).MirrorUsingSlotOrPublication(ctx, slot, pub)
		}, opts.ReverseMirrorName, "", "")
		if err != nil {
			return err
		}
		opts.ReversePublicationName, opts.ReverseReplicationSlotName = pub, slot
	}
	record := db.Cutover{State: db.CutoverRequested, RequestedAt: requested, RequestedBy: currentUser(ctx).Username,
		Options: opts, Steps: []db.CutoverStep{}}
	if err := h.store.With(tx).MirrorRequestCutover(ctx, m.ID, record); err != nil {
		return err
	}
	if err := h.store.With(tx).LogInsert(ctx, m.ID, db.LevelInfo, "Cut-over requested", map[string]any{
		"user": currentUser(ctx).Username, "lock_source": opts.LockSource, "drop_slot": opts.DropSlot,
		"reverse_mirror_name": opts.ReverseMirrorName}); err != nil {
		return err
	}
	return h.enqueueRun(ctx, tx, m.ID)
}

// cutoverAnswer is the answer to the cut-over requested at requested, as
// far as it got: 200 completed, 202 still running, 409 failed or replaced.
func cutoverAnswer(name string, m db.Mirror, requested time.Time) (*cutoverOutput, error) {
	out := &cutoverOutput{}
	out.Body.Status, out.Body.Cutover, out.Body.Warnings = m.Status, cutoverResponse(m.Cutover), []string{}
	if out.Body.Cutover != nil && m.Cutover.RequestedAt.Equal(requested) {
		out.Body.Warnings = out.Body.Cutover.Warnings
	}
	switch {
	case m.Cutover == nil || !m.Cutover.RequestedAt.Equal(requested):
		return nil, errorf(http.StatusConflict, "The cut-over of mirror %q was replaced or withdrawn while it ran: see GET /v1/mirrors/%s", name, name)
	case m.Cutover.State == db.CutoverFailed:
		return nil, errorf(http.StatusConflict, "%s. Its steps are in GET /v1/mirrors/%s (cutover)", m.Cutover.Error, name)
	case m.Cutover.State == db.CutoverCompleted:
		out.Status = http.StatusOK
		out.Body.Message = completedMessage(name, m.Cutover)
		if m.Cutover.ReverseMirror != "" {
			out.Body.Message += fmt.Sprintf("; mirror %q carries the destination's changes back to the source", m.Cutover.ReverseMirror)
		}
	default:
		out.Status = http.StatusAccepted
		out.Body.Message = fmt.Sprintf("Cut-over of mirror %q is in progress: follow it with GET /v1/mirrors/%s (cutover)", name, name)
	}
	return out, nil
}

// completedMessage says what a completed cut-over checked, and no more:
// "the destination holds every change" only when every table's checksums
// compared equal; tables with row counts only are named.
func completedMessage(name string, c *db.Cutover) string {
	if len(c.RowCountsOnly) == 0 {
		return fmt.Sprintf("Mirror %q is cut over: the destination holds every change up to source position %s (row counts and checksums of every table compared equal) and may take the writes now", name, c.TargetLSN)
	}
	return fmt.Sprintf("Mirror %q is cut over: every change up to source position %s was applied and the destination may take the writes now; "+
		"row counts only for %s: their checksums were not compared (see warnings), so rows that differ with equal counts would not have been found; "+
		"a verification of the tables (POST /v1/mirrors/%s/verify before the cut-over, or compare them by hand now) proves them",
		name, c.TargetLSN, strings.Join(c.RowCountsOnly, ", "), name)
}

// settled reports whether a cut-over has ended, including the slot's drop
// that follows the completion when it was asked for.
func settled(c *db.Cutover) bool {
	switch {
	case !c.Finished():
		return false
	case c.State == db.CutoverFailed || !c.Options.DropSlot:
		return true
	}
	return slices.ContainsFunc(c.Steps, func(s db.CutoverStep) bool { return s.Name == "drop_slot" })
}

// waitCutover waits up to wait for the cut-over requested at requested to
// end, and returns the mirror as it then is.
func (h *handlers) waitCutover(ctx context.Context, name string, requested time.Time, wait time.Duration) (db.Mirror, error) {
	deadline := time.Now().Add(wait)
	for {
		m, err := h.store.MirrorGetByName(ctx, name)
		if errors.Is(err, db.ErrNotFound) {
			return db.Mirror{}, errorf(http.StatusConflict, "Mirror %q was deleted during its cut-over", name)
		}
		if err != nil {
			return db.Mirror{}, h.internal(ctx, "read the cut-over's progress", err)
		}
		if m.Cutover == nil || !m.Cutover.RequestedAt.Equal(requested) || settled(m.Cutover) || !time.Now().Before(deadline) {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return m, nil
		case <-time.After(250 * time.Millisecond):
		}
	}
}
