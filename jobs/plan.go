package jobs

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// What a run does is decided in two pure functions, from the catalog and
// what the run found on the peers, so that every case can be tested on its
// own (plan_test.go): schemaPreparation before anything else, then
// nextPhase. The iteration (mirror_drive.go) gathers the facts, calls them
// and carries out the answer.

// schemaStep is how a run prepares the destination tables.
type schemaStep int

const (
	// schemaCreate: the first setup creates what is missing and checks
	// what exists (schemasync.EnsureTablesReport).
	schemaCreate schemaStep = iota + 1
	// schemaFollow: later runs follow source DDL made since (added
	// columns, changed types) and create tables added to the mirror.
	schemaFollow
	// schemaNone: a requested schema sync does it itself, with its own log.
	schemaNone
)

// schemaPreparation decides how a run of m prepares the destination tables.
func schemaPreparation(m db.Mirror) schemaStep {
	switch {
	case m.EffectiveStatus() == db.StatusInitializing:
		return schemaCreate
	case m.PendingAction != nil && *m.PendingAction == db.ActionSyncSchema:
		return schemaNone
	}
	return schemaFollow
}

// phase is what a run does once the destination tables are prepared.
type phase int

const (
	// phaseCutover carries out the requested cut-over.
	phaseCutover phase = iota + 1
	// phaseAction carries out a requested resync or schema sync, then the
	// run decides again.
	phaseAction
	// phaseSlotTaken fails: a slot of the mirror's name exists that this
	// mirror did not create.
	phaseSlotTaken
	// phaseSnapshot copies every table from a new slot's snapshot (the
	// first snapshot, a full resync, or tables to copy with no slot or no
	// applied position to continue from), then streams.
	phaseSnapshot
	// phaseNewSlot creates the slot without a copy (a mirror without
	// initial snapshot) or recreates a missing or invalidated one, then
	// streams.
	phaseNewSlot
	// phaseCopyTables copies some tables (a table resync, tables added)
	// while CDC replicates the others.
	phaseCopyTables
	// phaseCDC marks tables that wait for nothing running and streams.
	phaseCDC
)

var phaseNames = map[phase]string{
	phaseCutover: "cutover", phaseAction: "action", phaseSlotTaken: "slot_taken", phaseSnapshot: "snapshot",
	phaseNewSlot: "new_slot", phaseCopyTables: "copy_tables", phaseCDC: "cdc",
}

func (p phase) String() string { return phaseNames[p] }

// runFacts are what nextPhase decides from: the catalog's mirror and
// tables, the source's slot, and whether the destination holds the
// mirror's applied position.
type runFacts struct {
	mirror      db.Mirror
	tables      []db.MirrorTable
	slot        capture.SlotStatus
	hasPosition bool
}

// nextPhase decides what a run does next.
func nextPhase(f runFacts) phase {
	m := f.mirror
	if m.PendingAction != nil {
		if *m.PendingAction == db.ActionCutover {
			return phaseCutover
		}
		return phaseAction
	}
	if f.slot.Exists && !m.CreatedSlot {
		return phaseSlotTaken
	}
	usable := slotUsable(f.slot)
	toCopy := len(m.TablesToCopy(f.tables)) > 0
	switch {
	case toCopy && (m.InFullSnapshot() || !usable || !f.hasPosition):
		return phaseSnapshot
	case !usable:
		return phaseNewSlot
	case toCopy:
		return phaseCopyTables
	}
	return phaseCDC
}

// phaseInputs is what the phases of one iteration work with: the mirror
// and its tables as the iteration read them, the peers, the iteration's
// connections to them, and the source's slot.
type phaseInputs struct {
	m                db.Mirror
	tables           []db.MirrorTable
	mappings         []change.Mapping
	srcPeer, dstPeer db.Peer
	src, dst         *pgx.Conn
	slot             capture.SlotStatus
	// applied is the mirror's applied position on the destination, when
	// hasPosition says there is one.
	applied     change.LSN
	hasPosition bool
	// schemas are the source schemas the mirror maps as a whole.
	schemas []db.SchemaMapping
	// prepared are the shapes of the source tables to copy, read before
	// their destination tables were prepared (tablesync.Config.Prepared).
	prepared tablesync.Shapes
}

// Steps of a run, named in error log entries (details.operation) and
// deciding their message.
const (
	opSetup    = "setup"
	opSnapshot = "snapshot"
	opCDC      = "cdc"
	opSchema   = "sync_schema"
	opCutover  = "cutover"
)

// stepError is a failure of one step of a run. Its text is the cause's;
// the step decides the log message (failureMessage).
type stepError struct {
	step string
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }
func (e *stepError) Unwrap() error { return e.err }

// inStep wraps err as a failure of step, unless it is nil or already a
// step's failure (the innermost step names it).
func inStep(step string, err error) error {
	var se *stepError
	if err == nil || errors.As(err, &se) {
		return err
	}
	return &stepError{step: step, err: err}
}

// failedStep names the step err failed in (setup when none says).
func failedStep(err error) string {
	var se *stepError
	if errors.As(err, &se) {
		return se.step
	}
	return opSetup
}
