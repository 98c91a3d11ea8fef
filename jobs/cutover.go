package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/seqsync"
)

// Steps of a cut-over, in order (docs/operations.md, "Switching over to the
// destination").
const (
	stepCheck          = "check"
	stepReadOnly       = "make_source_read_only"
	stepApply          = "apply_changes"
	stepQuiet          = "check_source_quiet"
	stepSequences      = "sync_sequences"
	stepConstraints    = "create_constraints"
	stepForeignKeys    = "create_foreign_keys"
	stepVerify         = "verify_row_counts"
	stepWritable       = "make_destination_writable"
	stepPrepareReverse = "prepare_reverse_mirror"
	stepComplete       = "complete"
	stepDropSlot       = "drop_slot"
)

// errRunEnded ends the run without a failure: the mirror reached a final
// status.
var errRunEnded = errors.New("the mirror's run has ended")

// cutoverLockTimeout bounds the attempts to lock the source tables when
// they are made read-only (cutover.MakeReadOnly: each attempt gives up
// before it could deadlock, and is tried again until this is spent).
const cutoverLockTimeout = 30 * time.Second

// cutoverStepError is a cut-over step that failed.
type cutoverStepError struct {
	step string
	err  error
}

func (e *cutoverStepError) Error() string { return fmt.Sprintf("step %s: %v", e.step, e.err) }
func (e *cutoverStepError) Unwrap() error { return e.err }

// cutoverRun carries out one cut-over request of a mirror: every step is
// recorded in the mirror's cutover record (GET shows it) and logged with its
// time. A failed step undoes what the cut-over changed on the peers and
// leaves the mirror replicating as before.
type cutoverRun struct {
	run              *mirrorRun
	m                db.Mirror
	tables           []db.MirrorTable
	mappings         []change.Mapping
	srcPeer, dstPeer db.Peer
	src, dst         *pgx.Conn
	record           db.Cutover

	madeReadOnly   bool                 // this attempt made the source tables read-only
	reverseSlot    bool                 // this attempt created the reverse mirror's slot
	reversePubMade bool                 // ... and its publication
	foreignKeys    []cutover.ForeignKey // this attempt created these on the destination
	madeWritable   []change.TableName   // this attempt made these read-only destination tables writable

	// countsOnly are the tables whose checksums were not compared (row
	// counts only), countsOnlyWarnings say why (checksumTables).
	countsOnly         []string
	countsOnlyWarnings []string
}

// cutover carries out the mirror's requested cut-over. It returns
// errRunEnded when the mirror completed, errAgain when the cut-over failed
// (recorded; the mirror goes on replicating), or the error that ended the
// run (the request stays pending and is carried out again by the next run).
func (r *mirrorRun) cutover(ctx context.Context, in *phaseInputs) error {
	m, tables, srcPeer, dstPeer, src, dst := in.m, in.tables, in.srcPeer, in.dstPeer, in.src, in.dst
	if m.Cutover == nil {
		// A request without its record cannot be carried out.
		return r.store.MirrorClearPendingAction(ctx, m.ID, db.ActionCutover)
	}
	c := &cutoverRun{run: r, m: m, tables: tables, mappings: toMappings(tables), srcPeer: srcPeer, dstPeer: dstPeer,
		src: src, dst: dst, record: *m.Cutover}
	now := time.Now().UTC()
	c.record.State, c.record.StartedAt, c.record.Steps, c.record.Error, c.record.TargetLSN = db.CutoverRunning, &now, []db.CutoverStep{}, "", ""
	c.record.Warnings, c.record.RowCountsOnly = nil, nil
	c.save(ctx)
	r.log(ctx, db.LevelInfo, "Cut-over started", map[string]any{"options": c.record.Options})
	err := c.steps(ctx)
	if err == nil {
		return errRunEnded
	}
	var stepErr *cutoverStepError
	if !errors.As(err, &stepErr) || ctx.Err() != nil {
		// Not a step's verdict (the catalog failed, the run is cancelled):
		// undo, and let the run's failure handling retry the request.
		c.undo(context.WithoutCancel(ctx))
		return err
	}
	return c.fail(ctx, stepErr)
}

// steps runs the cut-over's steps in order.
func (c *cutoverRun) steps(ctx context.Context) error {
	opts := c.record.Options
	if err := c.step(ctx, stepCheck, c.check); err != nil {
		return err
	}
	if opts.LockSource {
		if err := c.step(ctx, stepReadOnly, c.makeReadOnly); err != nil {
			return err
		}
	}
	if err := c.step(ctx, stepApply, c.applyAll); err != nil {
		return err
	}
	if err := c.step(ctx, stepQuiet, c.checkQuiet); err != nil {
		return err
	}
	if err := c.step(ctx, stepSequences, c.syncSequences); err != nil {
		return err
	}
	if err := c.step(ctx, stepConstraints, c.createConstraints); err != nil {
		return err
	}
	if err := c.step(ctx, stepForeignKeys, c.createForeignKeys); err != nil {
		return err
	}
	if err := c.step(ctx, stepVerify, c.verifyRowCounts); err != nil {
		return err
	}
	if tables, err := c.checksumTables(ctx); err != nil {
		return err
	} else if len(tables) > 0 {
		if err := c.step(ctx, stepChecksums, func(ctx context.Context) (map[string]any, error) {
			return c.verifyChecksums(ctx, tables)
		}); err != nil {
			return err
		}
	}
	if opts.ReverseMirrorName != "" {
		if err := c.step(ctx, stepPrepareReverse, c.prepareReverse); err != nil {
			return err
		}
	}
	if readOnly, err := c.readOnlyDestinationTables(ctx); err != nil {
		return err
	} else if len(readOnly) > 0 {
		if err := c.step(ctx, stepWritable, func(ctx context.Context) (map[string]any, error) {
			// Also after a failure: some of them may be writable already.
			c.madeWritable = readOnly
			return map[string]any{"tables": len(readOnly)}, cutover.MakeWritable(ctx, c.dst, readOnly)
		}); err != nil {
			return err
		}
	}
	c.listNotCarried(ctx)
	if len(c.countsOnly) > 0 {
		c.record.RowCountsOnly = c.countsOnly
		// First: what was not checked, then what was not carried.
		c.record.Warnings = append(append([]string{}, c.countsOnlyWarnings...), c.record.Warnings...)
		c.run.log(ctx, db.LevelWarn, "Cut-over: row counts only", map[string]any{"tables": c.countsOnly, "warnings": c.countsOnlyWarnings})
	}
	if err := c.step(ctx, stepComplete, c.complete); err != nil {
		return err
	}
	dropped := opts.DropSlot && c.dropSlot(ctx)
	if err := c.run.store.MirrorCutoverFinalRecord(ctx, c.m.ID, c.record, dropped); err != nil {
		c.run.logger.Warn("record the completed cut-over", "error", err)
	}
	return nil
}

// step runs one step, records it with its time and logs it.
func (c *cutoverRun) step(ctx context.Context, name string, fn func(context.Context) (map[string]any, error)) error {
	started := time.Now()
	c.record.Steps = append(c.record.Steps, db.CutoverStep{Name: name, State: db.StepRunning, StartedAt: started.UTC()})
	i := len(c.record.Steps) - 1
	if name != stepComplete {
		c.save(ctx)
	}
	detail, err := fn(ctx)
	if hook := c.run.cfg.hooks.afterCutoverStep; err == nil && hook != nil && name != stepComplete {
		err = hook(name)
	}
	st := &c.record.Steps[i]
	st.DurationMS = time.Since(started).Milliseconds()
	st.Detail = detail
	if err != nil {
		st.State, st.Error = db.StepFailed, err.Error()
		return &cutoverStepError{step: name, err: err}
	}
	st.State = db.StepDone
	if name != stepComplete { // complete recorded the step itself
		c.save(ctx)
	}
	c.run.log(ctx, db.LevelInfo, "Cut-over step completed", map[string]any{"step": name, "duration_ms": st.DurationMS, "detail": detail})
	return nil
}

// save writes the cut-over record to the catalog.
func (c *cutoverRun) save(ctx context.Context) {
	if err := c.run.store.MirrorCutoverProgress(ctx, c.m.ID, c.record); err != nil {
		c.run.logger.Warn("record cut-over progress", "error", err)
	}
}

// fail records the failed step, undoes the cut-over's changes on the peers
// and lets the mirror go on as before.
func (c *cutoverRun) fail(ctx context.Context, stepErr *cutoverStepError) error {
	c.undo(ctx)
	now := time.Now().UTC()
	c.record.State, c.record.FinishedAt = db.CutoverFailed, &now
	c.record.Error = fmt.Sprintf("Cut-over failed at step %s: %v; the mirror keeps replicating as before", stepErr.step, stepErr.err)
	if err := c.run.store.MirrorCutoverFailed(ctx, c.m.ID, c.record); err != nil {
		return err
	}
	c.run.log(ctx, db.LevelError, "Cut-over failed", map[string]any{"step": stepErr.step, "error": stepErr.err.Error(),
		"action": "the mirror keeps replicating; fix the cause and request the cut-over again (docs/operations.md)"})
	c.run.logger.Error("cut-over failed", "step", stepErr.step, "error", stepErr.err)
	return errAgain
}

// undo reverts what this attempt changed on the peers: read-only source
// tables become writable, foreign keys it created on the destination and
// a reverse slot and publication are dropped, and destination tables it
// made writable refuse writes again.
func (c *cutoverRun) undo(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if len(c.foreignKeys) > 0 {
		c.dropForeignKeys(ctx)
	}
	if len(c.madeWritable) > 0 {
		c.destinationReadOnlyAgain(ctx)
	}
	if c.madeReadOnly {
		src, err := connectPeer(ctx, "source", c.srcPeer)
		if err == nil {
			err = cutover.MakeWritable(ctx, src, c.sourceTables())
			closeConn(src)
		}
		if err != nil {
			c.run.log(ctx, db.LevelWarn, "Source tables left read-only", map[string]any{"error": err.Error(),
				"action": "drop the triggers pgmirror_read_only and pgmirror_read_only_truncate of the mirrored source tables by hand"})
		} else {
			c.madeReadOnly = false
		}
	}
	if c.reverseSlot || c.reversePubMade {
		dst, err := connectPeer(ctx, "destination", c.dstPeer)
		if err != nil {
			c.run.logger.Warn("drop the reverse mirror's slot", "error", err)
			return
		}
		defer closeConn(dst)
		if c.reverseSlot {
			if err := capture.DropSlot(ctx, dst, c.record.Options.ReverseReplicationSlotName); err != nil {
				c.run.logger.Warn("drop the reverse mirror's slot", "error", err)
			}
		}
		if c.reversePubMade {
			if err := capture.DropPublication(ctx, dst, c.record.Options.ReversePublicationName); err != nil {
				c.run.logger.Warn("drop the reverse mirror's publication", "error", err)
			}
		}
	}
}

// destinationReadOnlyAgain makes the destination tables this attempt made
// writable refuse writes again: an earlier cut-over the other way made
// them read-only, and the applications still write to this mirror's
// source.
func (c *cutoverRun) destinationReadOnlyAgain(ctx context.Context) {
	dst, err := connectPeer(ctx, "destination", c.dstPeer)
	if err == nil {
		note := fmt.Sprintf("pgmirror mirror %q replicates into it (its cut-over to this database failed)", c.m.Name)
		err = cutover.MakeReadOnly(ctx, dst, c.madeWritable, note, 10*time.Second)
		closeConn(dst)
	}
	if err != nil {
		c.run.log(ctx, db.LevelWarn, "Destination tables left writable", map[string]any{"error": err.Error(), "tables": tableNameStrings(c.madeWritable),
			"action": "the applications still write to the source: keep them from writing to the destination tables until a cut-over completes"})
		return
	}
	c.madeWritable = nil
}

// tableNameStrings returns the names of tables.
func tableNameStrings(tables []change.TableName) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.String()
	}
	return out
}

func (c *cutoverRun) sourceTables() []change.TableName {
	out := make([]change.TableName, len(c.mappings))
	for i, m := range c.mappings {
		out[i] = m.Source
	}
	return out
}

func (c *cutoverRun) destinationTables() []change.TableName {
	out := make([]change.TableName, len(c.mappings))
	for i, m := range c.mappings {
		out[i] = m.Destination
	}
	return out
}

// check refuses a cut-over that cannot succeed before anything changes.
func (c *cutoverRun) check(ctx context.Context) (map[string]any, error) {
	for _, t := range c.tables {
		if t.Status != db.TableStatusRunning || t.ResyncRequestedAt != nil {
			return nil, fmt.Errorf("table %s.%s is %s, not replicating: wait until every table is running", t.SourceSchema, t.SourceTable, t.Status)
		}
	}
	if err := c.refuseLostChanges(ctx, c.run.store); err != nil {
		return nil, err
	}
	srv, err := pgversion.Read(ctx, c.src)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	if err := srv.Check("source"); err != nil {
		return nil, err
	}
	if !srv.Markers() {
		return nil, fmt.Errorf("the source runs %s, whose stream passes no marker on: a cut-over cannot mark its final position there", srv)
	}
	if c.record.Options.ReverseMirrorName == "" {
		return map[string]any{"tables": len(c.tables)}, nil
	}
	var walLevel string
	var replication bool
	if err := c.dst.QueryRow(ctx, `SELECT current_setting('wal_level'), (SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)`).
		Scan(&walLevel, &replication); err != nil {
		return nil, fmt.Errorf("check the destination for a reverse mirror: %w", err)
	}
	if walLevel != "logical" {
		return nil, fmt.Errorf("a reverse mirror reads the destination's changes, but its wal_level is %s: set wal_level = logical there and restart it, or leave reverse_mirror_name out", walLevel)
	}
	if !replication {
		return nil, fmt.Errorf("a reverse mirror needs a replication slot on the destination, but the destination peer's user lacks the REPLICATION attribute: ALTER ROLE ... REPLICATION, or leave reverse_mirror_name out")
	}
	if err := preflight.CheckAs(ctx, c.dst, c.destinationTables(), "destination"); err != nil {
		return nil, fmt.Errorf("the destination tables cannot be replicated back (reverse_mirror_name): %w", err)
	}
	if other, err := c.run.store.MirrorGetByName(ctx, c.record.Options.ReverseMirrorName); err == nil {
		return nil, fmt.Errorf("mirror %q already exists: choose another reverse_mirror_name", other.Name)
	} else if !errors.Is(err, db.ErrNotFound) {
		return nil, err
	}
	return map[string]any{"tables": len(c.tables), "reverse_mirror": c.record.Options.ReverseMirrorName}, nil
}

// makeReadOnly makes the mapped source tables refuse writes.
func (c *cutoverRun) makeReadOnly(ctx context.Context) (map[string]any, error) {
	note := fmt.Sprintf("pgmirror mirror %q switched it over to its destination", c.m.Name)
	if err := cutover.MakeReadOnly(ctx, c.src, c.sourceTables(), note, cutoverLockTimeout); err != nil {
		// MakeReadOnly made writable again what it had made read-only,
		// unless it could not (a connection lost meanwhile): the undo then
		// drops the triggers on a new connection.
		c.madeReadOnly = errors.Is(err, cutover.ErrLeftReadOnly)
		return nil, err
	}
	c.madeReadOnly = true
	return map[string]any{"tables": len(c.mappings)}, nil
}

// drain applies every source transaction committed before a marker written
// now, within the request's timeout, and returns the marker's position and
// the changes applied.
func (c *cutoverRun) drain(ctx context.Context) (change.LSN, int64, map[string]int64, error) {
	marker, err := cdc.EmitMarker(ctx, c.src, "cutover "+c.m.UID)
	if err != nil {
		return 0, 0, nil, err
	}
	cfg, err := c.run.cdcConfig(c.m, c.srcPeer, c.dstPeer, c.mappings, nil)
	if err != nil {
		return 0, 0, nil, err
	}
	cfg.StopAt = marker
	timeout := time.Duration(c.record.Options.TimeoutSeconds) * time.Second
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep := &countingReporter{batchReporter: newBatchReporter(c.run, c.m, c.mappings), tables: map[string]int64{}}
	err = streamHandingOver(dctx, cfg, rep, nil)
	rep.close(context.WithoutCancel(ctx))
	if err != nil && ctx.Err() == nil && dctx.Err() != nil {
		return marker, rep.changes, rep.tables, fmt.Errorf("the changes up to source position %s were not all applied within timeout_seconds (%d s): the mirror is too far behind; wait until its lag_seconds is small and try again, or give a longer timeout", marker, c.record.Options.TimeoutSeconds)
	}
	if err != nil {
		return marker, rep.changes, rep.tables, err
	}
	return marker, rep.changes, rep.tables, nil
}

// applyAll applies everything the source committed so far.
func (c *cutoverRun) applyAll(ctx context.Context) (map[string]any, error) {
	marker, changes, _, err := c.drain(ctx)
	if err != nil {
		return nil, err
	}
	return map[string]any{"source_lsn": marker.String(), "changes_applied": changes}, nil
}

// checkQuiet makes sure the source no longer writes the mapped tables: after
// the quiet period, everything committed since the last step is applied,
// and that must be nothing. The position reached is the cut-over's target.
func (c *cutoverRun) checkQuiet(ctx context.Context) (map[string]any, error) {
	quiet := time.Duration(c.record.Options.QuietSeconds) * time.Second
	if c.record.Options.LockSource {
		quiet = 0 // the tables refuse writes
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(quiet):
	}
	marker, changes, tables, err := c.drain(ctx)
	if err != nil {
		return nil, err
	}
	detail := map[string]any{"source_lsn": marker.String(), "quiet_seconds": quiet.Seconds(), "changes_applied": changes}
	if changes > 0 {
		var names []string
		for t, n := range tables {
			names = append(names, fmt.Sprintf("%s (%d)", t, n))
		}
		return detail, fmt.Errorf("the source is still writing: %d changes to the mirrored tables committed during the check (%s); they are applied and the mirror keeps replicating: stop the application's writes to the source, or request the cut-over with lock_source: true, and try again",
			changes, strings.Join(names, ", "))
	}
	c.record.TargetLSN = marker.String()
	return detail, nil
}

// syncSequences sets the destination's sequences to the source's values,
// which no longer move.
func (c *cutoverRun) syncSequences(ctx context.Context) (map[string]any, error) {
	pairs, warnings, ddl, err := planSequences(ctx, c.src, c.dst, c.mappings, listedSequences(c.m))
	if err != nil {
		return nil, err
	}
	res, err := seqsync.Sync(ctx, c.src, c.dst, pairs)
	if err != nil {
		return nil, err
	}
	if err := c.run.store.MirrorSequencesSynced(ctx, c.m.ID, time.Now()); err != nil {
		c.run.logger.Warn("record sequence sync", "error", err)
	}
	moved := make([]string, len(res.Moved))
	for i, t := range res.Moved {
		moved[i] = t.String()
	}
	return map[string]any{"sequences_checked": res.Checked, "sequences_moved": moved, "warnings": nonNil(warnings), "ddl_statements": nonNil(ddl)}, nil
}

// createConstraints gives the tables pgmirror created what waited for the
// cut-over: unique and exclusion constraints, unique indexes, and identity
// columns GENERATED ALWAYS where the source has them so.
func (c *cutoverRun) createConstraints(ctx context.Context) (map[string]any, error) {
	var all, warned []string
	for _, m := range c.mappings {
		ddl, warnings, err := schemasync.AddIndexesAndConstraints(ctx, c.src, c.dst, m, schemasync.AtCutover)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", m.Destination, err)
		}
		all = append(all, ddl...)
		warned = append(warned, warnings...)
		ddl, err = schemasync.RestoreIdentityAlways(ctx, c.src, c.dst, m)
		all = append(all, ddl...)
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", m.Destination, err)
		}
	}
	if len(warned) > 0 {
		c.run.log(ctx, db.LevelWarn, "Cut-over: constraints not created", map[string]any{"warnings": warned})
	}
	return map[string]any{"ddl_statements": nonNil(all), "warnings": nonNil(warned)}, nil
}

// createForeignKeys creates the source's foreign keys between mirrored
// tables on the destination, NOT VALID and then validated: the destination
// holds every change now, so its rows must satisfy them. One that fails
// (a row without its referenced row, a destination that refuses it) fails
// the step by name, and the undo drops those created before it. Those it
// cannot create (a referenced table outside the mirror, an excluded
// column) are warnings.
func (c *cutoverRun) createForeignKeys(ctx context.Context) (map[string]any, error) {
	fks, warnings, err := cutover.SourceForeignKeys(ctx, c.src, c.mappings)
	if err != nil {
		return nil, err
	}
	c.record.Warnings = append(c.record.Warnings, warnings...)
	var created, existing []string
	for _, fk := range fks {
		made, err := cutover.CreateForeignKey(ctx, c.dst, fk)
		if err != nil {
			return map[string]any{"created": nonNil(created), "warnings": nonNil(warnings)},
				fmt.Errorf("%w; fix the destination's rows (or drop the foreign key on the source) and request the cut-over again", err)
		}
		if made {
			c.foreignKeys = append(c.foreignKeys, fk)
			created = append(created, fk.String())
		} else {
			existing = append(existing, fk.String())
		}
	}
	return map[string]any{"created": nonNil(created), "existing": nonNil(existing), "warnings": nonNil(warnings)}, nil
}

// dropForeignKeys drops the foreign keys this attempt created: the mirror
// goes on replicating, and its apply may not be able to skip them.
func (c *cutoverRun) dropForeignKeys(ctx context.Context) {
	dst, err := connectPeer(ctx, "destination", c.dstPeer)
	if err == nil {
		defer closeConn(dst)
		for len(c.foreignKeys) > 0 && err == nil {
			if err = cutover.DropForeignKey(ctx, dst, c.foreignKeys[0]); err == nil {
				c.foreignKeys = c.foreignKeys[1:]
			}
		}
	}
	if err != nil {
		names := make([]string, len(c.foreignKeys))
		for i, fk := range c.foreignKeys {
			names[i] = fk.String()
		}
		c.run.log(ctx, db.LevelWarn, "Destination foreign keys left in place", map[string]any{"error": err.Error(), "foreign_keys": names,
			"action": "drop them on the destination by hand (ALTER TABLE ... DROP CONSTRAINT ...) or they may reject the mirror's changes"})
	}
}

// listNotCarried adds to the record's warnings what the source has around
// the mirrored tables that pgmirror does not carry and the destination
// lacks (cutover.NotCarried), and logs them. A failure to list them is
// logged only.
func (c *cutoverRun) listNotCarried(ctx context.Context) {
	warnings, err := cutover.NotCarried(ctx, c.src, c.dst, c.mappings, c.m.PublicationName)
	if err != nil {
		c.run.log(ctx, db.LevelWarn, "Cut-over: could not list what the mirror does not carry", map[string]any{"error": err.Error()})
		return
	}
	c.record.Warnings = append(c.record.Warnings, warnings...)
	if len(c.record.Warnings) > 0 {
		c.run.log(ctx, db.LevelWarn, "Cut-over: not carried to the destination", map[string]any{"warnings": c.record.Warnings,
			"action": "the destination takes the application's writes now: create what it needs of these there"})
	}
}

// verifyRowCounts compares the row count of every table on both sides.
func (c *cutoverRun) verifyRowCounts(ctx context.Context) (map[string]any, error) {
	counts := map[string]any{}
	var differ []string
	for _, m := range c.mappings {
		s, err := cutover.CountRows(ctx, c.src, m.Source)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		d, err := cutover.CountRows(ctx, c.dst, m.Destination)
		if err != nil {
			return nil, fmt.Errorf("destination: %w", err)
		}
		counts[m.Source.String()] = map[string]int64{"source": s, "destination": d}
		if s != d {
			differ = append(differ, fmt.Sprintf("%s has %d rows on the source and %d on the destination (%s)", m.Source, s, d, m.Destination))
		}
	}
	detail := map[string]any{"tables": counts}
	if len(differ) > 0 {
		// Counts show some differences, not all: rows of other tables (or
		// more rows of these) may differ with equal counts.
		return detail, fmt.Errorf("row counts differ after every change was applied: %s; equal counts do not prove the other tables equal: "+
			"run a verification with repair (POST /v1/mirrors/%s/verify, then POST /v1/mirrors/%s/verifications/{id}/repair), which finds and fixes every differing row of every table, "+
			"or resync every table (POST /v1/mirrors/%s/resync); then try again",
			strings.Join(differ, "; "), c.m.Name, c.m.Name, c.m.Name)
	}
	return detail, nil
}

// readOnlyDestinationTables returns the destination tables that an earlier
// cut-over made read-only: this mirror goes back the other way (a reverse
// mirror cut over for a roll-back), so they take writes again.
func (c *cutoverRun) readOnlyDestinationTables(ctx context.Context) ([]change.TableName, error) {
	var out []change.TableName
	for _, t := range c.destinationTables() {
		ro, err := cutover.IsReadOnly(ctx, c.dst, t)
		if err != nil {
			return nil, err
		}
		if ro {
			out = append(out, t)
		}
	}
	return out, nil
}

// prepareReverse creates the reverse mirror's publication and slot on the
// destination now, before anything can write there: the reverse mirror
// starts exactly at the cut-over.
func (c *cutoverRun) prepareReverse(ctx context.Context) (map[string]any, error) {
	opts := c.record.Options
	created, err := capture.EnsurePublication(ctx, c.dst, opts.ReversePublicationName, c.destinationTables())
	if err != nil {
		return nil, fmt.Errorf("publication on the destination: %w", err)
	}
	c.reversePubMade = created
	slot, err := capture.SlotState(ctx, c.dst, opts.ReverseReplicationSlotName)
	if err != nil {
		return nil, err
	}
	if slot.Exists {
		// Left by an earlier attempt of this cut-over (the destination took
		// no writes since): start it again here.
		if err := capture.DropSlot(ctx, c.dst, opts.ReverseReplicationSlotName); err != nil {
			return nil, err
		}
	}
	repl, err := openReplication(ctx, c.dstPeer)
	if err != nil {
		return nil, err
	}
	defer closeReplication(repl)
	info, err := capture.CreateSlot(ctx, repl, opts.ReverseReplicationSlotName, false)
	if err != nil {
		return nil, fmt.Errorf("replication slot on the destination: %w", err)
	}
	c.reverseSlot = true
	return map[string]any{"publication": opts.ReversePublicationName, "publication_created": created,
		"slot": opts.ReverseReplicationSlotName, "lsn": info.ConsistentPoint.String()}, nil
}

// complete moves the mirror to completed, and creates the reverse mirror,
// in one catalog transaction.
func (c *cutoverRun) complete(ctx context.Context) (map[string]any, error) {
	opts := c.record.Options
	now := time.Now().UTC()
	c.record.State, c.record.FinishedAt = db.CutoverCompleted, &now
	c.record.Steps[len(c.record.Steps)-1].State = db.StepDone
	if opts.ReverseMirrorName != "" {
		c.record.ReverseMirror = opts.ReverseMirrorName
	}
	tx, err := c.run.store.BeginTx(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	// Lost changes found while the cut-over ran (the slot monitor) stop
	// it here, before anything is final.
	if err := c.refuseLostChanges(ctx, c.run.store.With(tx)); err != nil {
		return nil, err
	}
	if opts.ReverseMirrorName != "" {
		if err := c.createReverse(ctx, tx); err != nil {
			return nil, err
		}
	}
	if err := c.run.store.With(tx).MirrorCutoverComplete(ctx, c.m.ID, c.record); err != nil {
		if errors.Is(err, db.ErrNotFound) {
			return nil, errors.New("the mirror was deleted or its cut-over request withdrawn")
		}
		return nil, err
	}
	details := map[string]any{"target_lsn": c.record.TargetLSN, "source_read_only": opts.LockSource}
	if opts.ReverseMirrorName != "" {
		details["reverse_mirror"] = opts.ReverseMirrorName
	}
	if err := c.run.store.With(tx).LogInsert(ctx, c.m.ID, db.LevelInfo, "Cut-over completed", details); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("complete the cut-over in the catalog: %w", err)
	}
	c.madeReadOnly, c.reverseSlot, c.reversePubMade, c.foreignKeys, c.madeWritable = false, false, false, nil, nil // they stay
	c.run.logger.Info("cut-over completed", "target_lsn", c.record.TargetLSN, "reverse_mirror", opts.ReverseMirrorName)
	return details, nil
}

// createReverse inserts the reverse mirror, owner of the slot and
// publication prepareReverse made, and enqueues its run.
func (c *cutoverRun) createReverse(ctx context.Context, tx pgx.Tx) error {
	opts := c.record.Options
	store := c.run.store
	if err := store.With(tx).LockMirrorNames(ctx); err != nil {
		return err
	}
	if user, err := store.With(tx).MirrorUsingSlotOrPublication(ctx, opts.ReverseReplicationSlotName, opts.ReversePublicationName); err != nil {
		return err
	} else if user != "" {
		return fmt.Errorf("mirror %q took the reverse mirror's slot or publication name meanwhile: request the cut-over again", user)
	}
	reverse := make([]change.Mapping, len(c.mappings))
	for i, m := range c.mappings {
		reverse[i] = change.Mapping{Source: m.Destination, Destination: m.Source}
	}
	rm, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{
		Name: opts.ReverseMirrorName, SourcePeerID: c.m.DestinationPeerID, DestinationPeerID: c.m.SourcePeerID,
		SnapshotNumRowsPerPartition: c.m.SnapshotNumRowsPerPartition, SnapshotMaxParallelWorkers: c.m.SnapshotMaxParallelWorkers,
		SnapshotNumTablesInParallel: c.m.SnapshotNumTablesInParallel, CDCSyncIntervalSeconds: c.m.CDCSyncIntervalSeconds,
		CDCBatchSize: c.m.CDCBatchSize, DoInitialSnapshot: false,
		PublicationName: opts.ReversePublicationName, ReplicationSlotName: opts.ReverseReplicationSlotName,
		Tables: reverse, CreatedPublication: c.reversePubMade, CreatedSlot: true, Sequences: c.m.Sequences,
	})
	if errors.Is(err, db.ErrConflict) {
		return fmt.Errorf("mirror %q was created meanwhile: choose another reverse_mirror_name", opts.ReverseMirrorName)
	}
	if err != nil {
		return err
	}
	if err := store.With(tx).LogInsert(ctx, rm.ID, db.LevelInfo, "Reverse mirror created by a cut-over", map[string]any{
		"of": c.m.Name, "slot": opts.ReverseReplicationSlotName,
		"note": "no snapshot: the slot was created at the cut-over, before the destination took writes"}); err != nil {
		return err
	}
	if _, err := river.ClientFromContext[pgxTx](ctx).InsertTx(ctx, tx, MirrorRunArgs{MirrorID: rm.ID}, nil); err != nil {
		return fmt.Errorf("enqueue the reverse mirror's run: %w", err)
	}
	return nil
}

// dropSlot drops the completed mirror's slot (and its publication, when
// the mirror created it) and reports whether it did. A failure is logged:
// deleting the mirror drops them later.
func (c *cutoverRun) dropSlot(ctx context.Context) bool {
	started := time.Now()
	step := db.CutoverStep{Name: stepDropSlot, State: db.StepDone, StartedAt: started.UTC()}
	err := capture.DropSlot(ctx, c.src, c.m.ReplicationSlotName)
	if err == nil && c.m.CreatedPublication {
		err = capture.DropPublication(ctx, c.src, c.m.PublicationName)
	}
	step.DurationMS = time.Since(started).Milliseconds()
	step.Detail = map[string]any{"slot": c.m.ReplicationSlotName}
	if err != nil {
		step.State, step.Error = db.StepFailed, err.Error()
		c.run.log(ctx, db.LevelWarn, "Cut-over: replication slot not dropped", map[string]any{"slot": c.m.ReplicationSlotName, "error": err.Error(),
			"action": "the slot keeps WAL on the source: delete the mirror (DELETE /v1/mirrors/" + c.m.Name + ") or drop it by hand"})
	} else {
		c.run.log(ctx, db.LevelInfo, "Cut-over step completed", map[string]any{"step": stepDropSlot, "duration_ms": step.DurationMS, "detail": step.Detail})
	}
	c.record.Steps = append(c.record.Steps, step)
	return err == nil
}

// countingReporter is the batch reporter of a cut-over's drain: it also
// counts the changes applied, per source table.
type countingReporter struct {
	*batchReporter
	changes int64
	tables  map[string]int64
}

func (c *countingReporter) BatchApplied(ctx context.Context, b cdc.Batch) error {
	c.changes += b.Changes
	for t, n := range b.Tables {
		c.tables[t.String()] += n.Rows() + n.Truncated
	}
	return c.batchReporter.BatchApplied(ctx, b)
}

// refuseLostChanges fails while a table of the mirror may miss changes
// (lost_changes.go): the cut-over cannot prove the destination equal,
// whatever the request's verify says.
func (c *cutoverRun) refuseLostChanges(ctx context.Context, store tableLister) error {
	tables, err := store.MirrorTables(ctx, c.m.ID)
	if err != nil {
		return err
	}
	if lost := lostTableNames(tables); len(lost) > 0 {
		return fmt.Errorf("changes were lost: %s", LostChangesAction(c.m.Name, lost))
	}
	return nil
}

// lostTableNames returns the source names of the tables marked as
// possibly missing changes.
func lostTableNames(tables []db.MirrorTable) []string {
	var out []string
	for _, t := range tables {
		if t.LostChanges != nil {
			out = append(out, t.Source().String())
		}
	}
	return out
}
