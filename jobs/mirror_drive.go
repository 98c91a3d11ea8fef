package jobs

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// errAgain restarts the run loop (a control request was carried out).
var errAgain = errors.New("run the mirror loop again")

// drive runs the mirror's phases until the run ends.
func (r *mirrorRun) drive(ctx context.Context) error {
	for {
		err := r.iteration(ctx)
		if errors.Is(err, errAgain) {
			continue
		}
		if errors.Is(err, errRunEnded) {
			return nil
		}
		if r.copyStartsOver(ctx, err) {
			continue
		}
		var schemaStop *cdc.SchemaStopError
		if errors.As(err, &schemaStop) {
			return r.pauseForSchemaChange(ctx, schemaStop)
		}
		if errors.Is(err, cdc.ErrMissingColumn) {
			// A column added on the source: add it on the destination and
			// apply the batch again. If nothing could be added, fail.
			added, serr := r.addMissingColumns(ctx, err)
			if serr != nil {
				return serr
			}
			if added {
				continue
			}
		}
		return err
	}
}

// maxCopyRestarts bounds how often a run starts a copy over because a source
// table's columns changed while it started; then the error fails the run
// and it is retried as any other.
const maxCopyRestarts = 3

// copyStartsOver reports whether err is a copy's refusal of a source table
// whose columns changed between the destination's preparation and the
// snapshot (tablesync.SourceChangedError), which the next iteration
// prepares and copies again, logged.
func (r *mirrorRun) copyStartsOver(ctx context.Context, err error) bool {
	var changed *tablesync.SourceChangedError
	if !errors.As(err, &changed) || r.copyRestarts >= maxCopyRestarts {
		return false
	}
	r.copyRestarts++
	names := make([]string, len(changed.Tables))
	for i, t := range changed.Tables {
		names[i] = t.String()
	}
	r.log(ctx, db.LevelInfo, "Source table changed while its copy started", map[string]any{"tables": names,
		"note": "a column change was committed between the preparation of the destination table and the copy's snapshot: the destination is prepared again and the copy starts over"})
	return true
}

// sourceNames are the source tables of tables.
func sourceNames(tables []db.MirrorTable) []change.TableName {
	out := make([]change.TableName, len(tables))
	for i, t := range tables {
		out[i] = t.Source()
	}
	return out
}

// followMappings are the tables whose destination columns a run brings up
// to the source's before it starts: all of them under schema_changes warn;
// otherwise only those about to be copied (new, or resync requested),
// since CDC applies the column changes of the others at their position in
// the stream, and doing it here, ahead of the stream, would change the
// destination before changes that still have the old shape. (Their types
// and enum labels are still brought up: schemasync.SyncTypes.)
func followMappings(m db.Mirror, tables []db.MirrorTable) []change.Mapping {
	if m.SchemaChanges == db.SchemaChangesWarn {
		return toMappings(tables)
	}
	var copying []db.MirrorTable
	for _, t := range tables {
		if t.Status != db.TableStatusRunning || t.ResyncRequestedAt != nil {
			copying = append(copying, t)
		}
	}
	return toMappings(copying)
}

// reshapeForCopy brings the destination tables about to be copied (new,
// or resync requested) to their source tables' columns under
// schema_changes apply. A table's source may have changed since the
// destination last followed it, before the stream reached the change (a
// resync requested by the API, or by a type change whose batch did not
// commit; a table found in a mapped schema and migrated before its first
// copy): its columns are matched by the attnums the mirror recorded with
// the destination's shape, so a renamed column is renamed and a dropped
// one dropped instead of a new column added beside an old one that would
// stay NULL. Each statement is logged and counted as a schema change.
func (r *mirrorRun) reshapeForCopy(ctx context.Context, src, dst *pgx.Conn, m db.Mirror, tables []db.MirrorTable) error {
	mappings := followMappings(m, tables)
	if len(mappings) == 0 {
		return nil
	}
	if err := positions.Ensure(ctx, dst); err != nil {
		return err
	}
	for _, mp := range mappings {
		cols, err := positions.SourceColumns(ctx, dst, m.UID, mp.Source)
		if err != nil {
			return err
		}
		known := schemasync.KnownColumns{}
		for _, c := range cols {
			known[c.Attnum] = c.Name
		}
		ddl, warnings, err := schemasync.ReshapeForCopy(ctx, src, dst, mp, known)
		if err != nil {
			return fmt.Errorf("bring destination table %s to the columns of source table %s: %w", mp.Destination, mp.Source, err)
		}
		for _, stmt := range ddl {
			r.schemaChangeApplied(ctx, mp.Source, stmt)
		}
		for _, w := range warnings {
			r.log(ctx, db.LevelWarn, "Schema sync warning", map[string]any{"warning": w, "table": mp.Source.String(),
				"policy": "the table is about to be copied; replication goes on, and the warning says what was left as it is and what to do about it"})
		}
	}
	return nil
}

// pauseForSchemaChange pauses the mirror, as POST pause does, before a
// source column change met under schema_changes stop: CDC applied what came
// before the transaction that carries it and nothing of that one, so
// resuming starts right at the change.
func (r *mirrorRun) pauseForSchemaChange(ctx context.Context, stop *cdc.SchemaStopError) error {
	// Pausing makes the control watcher cancel ctx: log first, and on a
	// context that outlives it.
	ctx = context.WithoutCancel(ctx)
	r.log(ctx, db.LevelWarn, db.MsgPausedForSchemaChange, map[string]any{"table": stop.Table.String(), "changes": stop.Changes,
		"action": "schema_changes is stop: the destination was left as it is. Either switch the setting (PATCH /v1/mirrors/{name} with schema_changes apply or warn) " +
			"or change the destination table yourself to match, then resume the mirror (POST /v1/mirrors/{name}/resume): it continues from right before the change"})
	r.logger.Warn("mirror paused before a source schema change (schema_changes is stop)", "table", stop.Table.String(), "changes", stop.Changes)
	return r.store.MirrorPause(ctx, r.mirrorID)
}

// addMissingColumns brings the destination's columns up to the source's
// after CDC met a column the destination lacks (cause). It reports whether
// it changed anything.
func (r *mirrorRun) addMissingColumns(ctx context.Context, cause error) (bool, error) {
	added, err := r.syncMissingColumns(ctx, cause)
	return added, inStep(opSchema, err)
}

func (r *mirrorRun) syncMissingColumns(ctx context.Context, cause error) (bool, error) {
	m, err := r.store.MirrorGetByID(ctx, r.mirrorID)
	if err != nil {
		return false, err
	}
	tables, err := r.store.MirrorTables(ctx, r.mirrorID)
	if err != nil {
		return false, err
	}
	srcPeer, dstPeer, err := mirrorPeers(ctx, r.store, m)
	if err != nil {
		return false, err
	}
	src, dst, err := connectPeers(ctx, srcPeer, dstPeer)
	if err != nil {
		return false, err
	}
	defer closeConn(src)
	defer closeConn(dst)
	started := time.Now()
	tables = replicating(tables)
	mappings := toMappings(tables)
	ddl, warnings, err := schemasync.SyncColumns(ctx, src, dst, mappings)
	if err != nil {
		return false, fmt.Errorf("add the new source column on the destination (%v): %w", cause, err)
	}
	r.logSchemaWarnings(ctx, warnings)
	if len(ddl) == 0 {
		return false, nil
	}
	r.log(ctx, db.LevelInfo, "Schema sync completed", db.SchemaSyncDetails{
		Tables: tableNames(tables), DDLStatements: ddl, DurationMS: time.Since(started).Milliseconds()})
	r.logger.Info("added source columns on the destination", "ddl", ddl)
	return true, nil
}

// logEnsureReport logs what the first setup did to the destination tables:
// the tables it created (their constraints and indexes follow after each
// table's copy, "Constraints and indexes created"), those that existed and
// were left as they are, and what it could not create as on the source.
func (r *mirrorRun) logEnsureReport(ctx context.Context, tables []db.MirrorTable, report schemasync.Report, d time.Duration) {
	if len(report.DDL) > 0 {
		r.log(ctx, db.LevelInfo, "Destination tables created", db.SchemaSyncDetails{
			Tables: tableNames(tables), DDLStatements: report.DDL, DurationMS: d.Milliseconds()})
	}
	if len(report.Existing) > 0 {
		r.log(ctx, db.LevelInfo, "Existing destination tables used as they are", map[string]any{"tables": report.Existing,
			"note": "pgmirror checked their columns and changes nothing else: no defaults, identity, sequences, constraints or indexes are added"})
	}
	for _, w := range report.Warnings {
		r.log(ctx, db.LevelWarn, "Destination table differs from the source", map[string]any{"warning": w})
	}
}

// logSchemaWarnings logs what a schema sync found but left alone (columns
// dropped or renamed on the source, a default the destination rejected,
// older rows whose values in an added column cannot be known).
func (r *mirrorRun) logSchemaWarnings(ctx context.Context, warnings []string) {
	for _, w := range warnings {
		r.log(ctx, db.LevelWarn, "Schema sync warning", map[string]any{"warning": w,
			"policy": "destination columns are never dropped and replication goes on; the warning says what was left as it is and what to do about it"})
	}
}

// peerConnectError is a failure to reach a peer; it is reported as
// "Connection timeout".
type peerConnectError struct {
	role, peer string
	err        error
}

func (e *peerConnectError) Error() string {
	return fmt.Sprintf("cannot connect to %s peer %q: %v", e.role, e.peer, e.err)
}

func (e *peerConnectError) Unwrap() error { return e.err }

func connectPeer(ctx context.Context, role string, p db.Peer) (*pgx.Conn, error) {
	cfg, err := p.ConnConfig()
	if err != nil {
		return nil, fmt.Errorf("%s peer: %w", role, err)
	}
	conn, err := session.Connect(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &peerConnectError{role: role, peer: p.Name, err: err}
	}
	return conn, nil
}

// mirrorPeers loads the source and destination peers of mirror m.
func mirrorPeers(ctx context.Context, store peerReader, m db.Mirror) (src, dst db.Peer, err error) {
	if src, err = store.PeerGetByID(ctx, m.SourcePeerID); err != nil {
		return src, dst, fmt.Errorf("load source peer: %w", err)
	}
	if dst, err = store.PeerGetByID(ctx, m.DestinationPeerID); err != nil {
		return src, dst, fmt.Errorf("load destination peer: %w", err)
	}
	return src, dst, nil
}

// connectPeers opens a session on each of a mirror's peers; the caller
// closes both (closeConn). When the second fails the first is closed.
func connectPeers(ctx context.Context, srcPeer, dstPeer db.Peer) (src, dst *pgx.Conn, err error) {
	if src, err = connectPeer(ctx, "source", srcPeer); err != nil {
		return nil, nil, err
	}
	if dst, err = connectPeer(ctx, "destination", dstPeer); err != nil {
		closeConn(src)
		return nil, nil, err
	}
	return src, dst, nil
}

func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// slotExistsError is a slot of the mirror's name that this mirror did not create.
type slotExistsError struct{ slot string }

func (e *slotExistsError) Error() string {
	return fmt.Sprintf("replication slot %q already exists on the source and was not created by this mirror: drop it (SELECT pg_drop_replication_slot('%s')) or give the mirror another replication_slot_name", e.slot, e.slot)
}

// iteration prepares the mirror (peers, publication, destination tables),
// gathers the facts nextPhase decides from, and carries out its answer.
func (r *mirrorRun) iteration(ctx context.Context) error {
	r.steps = newStartSteps()
	in, err := r.prepare(ctx)
	if in != nil {
		defer in.closeConns()
	}
	if err != nil {
		return inStep(opSetup, err)
	}
	applied, _, hasPosition, err := positions.Applied(ctx, in.dst, in.m.UID)
	if err != nil {
		return inStep(opSetup, err)
	}
	in.applied, in.hasPosition = applied, hasPosition
	r.steps.done("applied position")
	next := nextPhase(runFacts{mirror: in.m, tables: in.tables, slot: in.slot, hasPosition: hasPosition})
	r.logger.Debug("next phase", "phase", next.String())
	// A phase that streams from the slot as it is checks its position
	// first; the others create it anew.
	streams := next == phaseCDC || next == phaseCopyTables || next == phaseCutover
	if err := r.checkSlotPosition(ctx, in, streams); err != nil {
		return inStep(opSetup, err)
	}
	r.steps.done("slot position")
	switch next {
	case phaseCutover:
		return inStep(opCutover, r.cutover(ctx, in))
	case phaseAction:
		if err := r.carryOutAction(ctx, in); err != nil {
			return err
		}
		return errAgain
	case phaseSlotTaken:
		return inStep(opSetup, &slotExistsError{slot: in.m.ReplicationSlotName})
	case phaseSnapshot:
		if err := inStep(opSnapshot, r.snapshot(ctx, in)); err != nil {
			return err
		}
	case phaseNewSlot:
		if err := inStep(opSetup, r.createSlotWithoutSnapshot(ctx, in)); err != nil {
			return err
		}
	case phaseCopyTables:
		return inStep(opSnapshot, r.copyTablesDuringCDC(ctx, in, in.m.TablesToCopy(in.tables)))
	case phaseCDC:
		if err := inStep(opSetup, r.startWithoutCopy(ctx, in.m, in.src, in.tables)); err != nil {
			return err
		}
	}
	// The stream starts on the setup's sessions (cdc.Sessions) rather than
	// opening two more; it keeps only those it needs for the whole run (a
	// mirror's connections to its peers stay few).
	r.steps.done("phase " + next.String())
	sessions := cdc.NewSessions(in.src, in.dst)
	in.src, in.dst = nil, nil
	defer sessions.Close()
	return inStep(opCDC, r.runCDC(ctx, in, sessions))
}

// closeConns closes the setup's peer connections, if still open.
func (in *phaseInputs) closeConns() {
	if in.src != nil {
		closeConn(in.src)
		in.src = nil
	}
	if in.dst != nil {
		closeConn(in.dst)
		in.dst = nil
	}
}

// prepare loads the mirror, its tables and peers, connects to both peers,
// checks the source, ensures the publication, prepares the destination
// tables (schemaPreparation) and pgmirror's bookkeeping there, and reads the
// slot. The connections in the result are the caller's to close, also
// when it returns an error.
func (r *mirrorRun) prepare(ctx context.Context) (*phaseInputs, error) {
	store := r.store
	m, err := store.MirrorGetByID(ctx, r.mirrorID)
	if err != nil {
		return nil, err
	}
	tables, err := store.MirrorTables(ctx, r.mirrorID)
	if err != nil {
		return nil, err
	}
	srcPeer, dstPeer, err := mirrorPeers(ctx, store, m)
	if err != nil {
		return nil, err
	}
	r.steps.done("load mirror")
	in := &phaseInputs{m: m, srcPeer: srcPeer, dstPeer: dstPeer}
	if in.src, err = connectPeer(ctx, "source", srcPeer); err != nil {
		return nil, err
	}
	r.steps.done("connect source")
	// Tables dropped on the source stop replicating; tables created in a
	// mapped schema join the mirror (schema_follow.go).
	if in.tables, _, err = r.followSourceTables(ctx, in.src, m, tables); err != nil {
		return in, err
	}
	r.steps.done("follow source tables")
	in.schemas = m.SchemaMappings
	in.mappings = toMappings(in.tables)
	tables = in.tables
	sources := make([]change.TableName, len(in.mappings))
	for i, mp := range in.mappings {
		sources[i] = mp.Source
	}
	if err := preflight.Check(ctx, in.src, sources); err != nil {
		return in, err
	}
	r.steps.done("preflight")
	if err := r.ensurePublication(ctx, in.src, m, sources); err != nil {
		return in, err
	}
	r.steps.done("publication")
	if err := r.ensureDDLCapture(ctx, in.src, m); err != nil {
		return in, err
	}
	r.steps.done("ddl capture")
	if in.dst, err = connectPeer(ctx, "destination", dstPeer); err != nil {
		return in, err
	}
	r.steps.done("connect destination")
	// The copy compares these with the tables in its snapshot: a column
	// change committed in between would be in neither the destination nor
	// the stream.
	copying := sourceNames(m.TablesToCopy(tables))
	if in.prepared, err = tablesync.ReadShapes(ctx, in.src, copying); err != nil {
		return in, err
	}
	if schemaPreparation(m) == schemaFollow {
		// Tables that joined from a mapped schema get their destination
		// table first, logged as schema changes.
		if err := r.createAddedTables(ctx, in.src, in.dst, tables); err != nil {
			return in, err
		}
	}
	if err := r.prepareDestTables(ctx, in, m, tables); err != nil {
		return in, err
	}
	if hook := r.cfg.hooks.afterDestinationPrepared; hook != nil {
		hook(ctx, copying)
	}
	r.steps.done("destination tables")
	if err := positions.Ensure(ctx, in.dst); err != nil {
		return in, err
	}
	r.steps.done("positions table")
	if err := r.checkOrigins(ctx, in.dst, dstPeer); err != nil {
		return in, err
	}
	r.steps.done("origins")
	return in, r.prepareStream(ctx, in)
}

// prepareStream is the end of prepare: the peers' identities, the origin
// filter and the slot's state.
func (r *mirrorRun) prepareStream(ctx context.Context, in *phaseInputs) error {
	rememberIdentity(ctx, in.srcPeer, in.src)
	rememberIdentity(ctx, in.dstPeer, in.dst)
	r.steps.done("identities")
	if err := r.originFilter(in.m.UID).refresh(ctx); err != nil {
		return fmt.Errorf("find the mirrors that close a loop with this one: %w", err)
	}
	r.steps.done("origin filter")
	var err error
	if in.slot, err = capture.SlotState(ctx, in.src, in.m.ReplicationSlotName); err != nil {
		return err
	}
	r.steps.done("slot state")
	return nil
}

// prepareDestTables brings the destination tables to the source's as the
// mirror's schema preparation says: created or completed (schemaCreate),
// or their columns and types followed (schemaFollow), each statement
// logged.
func (r *mirrorRun) prepareDestTables(ctx context.Context, in *phaseInputs, m db.Mirror, tables []db.MirrorTable) error {
	started := time.Now()
	switch schemaPreparation(m) {
	case schemaCreate:
		report, err := schemasync.EnsureTablesReport(ctx, in.src, in.dst, in.mappings)
		if err != nil {
			return fmt.Errorf("prepare destination tables: %w", err)
		}
		r.logEnsureReport(ctx, tables, report, time.Since(started))
	case schemaFollow:
		var ddl []string
		var err error
		if schemaPolicy(m) == db.SchemaChangesApply {
			// Tables about to be copied get the source's columns by
			// attnum (renamed, dropped, NOT NULL), each statement logged
			// as a schema change.
			if err := r.reshapeForCopy(ctx, in.src, in.dst, m, tables); err != nil {
				return fmt.Errorf("prepare destination tables: %w", err)
			}
		} else if ddl, _, err = schemasync.SyncColumns(ctx, in.src, in.dst, followMappings(m, tables)); err != nil {
			return fmt.Errorf("prepare destination tables: %w", err)
		}
		if m.SchemaChanges != db.SchemaChangesWarn {
			// Types and enum labels for every table (CDC applies the
			// columns): a label added on the source must exist before rows
			// that use it arrive.
			types, err := schemasync.SyncTypes(ctx, in.src, in.dst, in.mappings)
			if err != nil {
				return fmt.Errorf("prepare destination types: %w", err)
			}
			ddl = append(ddl, types...)
		}
		if len(ddl) > 0 {
			r.log(ctx, db.LevelInfo, "Schema sync completed", db.SchemaSyncDetails{
				Tables: tableNames(tables), DDLStatements: ddl, DurationMS: time.Since(started).Milliseconds()})
		}
	}
	return nil
}

// unmarkedWarned holds the ids of the mirrors whose log this process told
// that their destination writes cannot be marked (checkOrigins).
var unmarkedWarned sync.Map

// checkOrigins finds out whether the destination user may use replication
// origins (engine/origin) and sets r.markWrites. When it may not, the
// mirror's log gets a warning, once per mirror and process (again after
// the privileges came and went): the mirror works, but a mirror reading
// from the destination would carry pgmirror's writes back.
func (r *mirrorRun) checkOrigins(ctx context.Context, dst *pgx.Conn, dstPeer db.Peer) error {
	ok, err := origin.Permitted(ctx, dst)
	if err != nil {
		return err
	}
	r.markWrites = ok
	if ok {
		unmarkedWarned.Delete(r.mirrorID)
		return nil
	}
	if _, warned := unmarkedWarned.LoadOrStore(r.mirrorID, true); !warned {
		r.logger.Warn("the destination user may not use replication origins; pgmirror's writes on the destination are not marked", "peer", dstPeer.Name)
		r.log(ctx, db.LevelWarn, "Destination writes not marked with a replication origin", map[string]any{
			"peer": dstPeer.Name, "user": dstPeer.User,
			"effect": "the mirror works, but a mirror reading from this destination (in the opposite direction) cannot tell pgmirror's writes from the application's and would carry them back",
			"action": origin.GrantHint})
	}
	return nil
}

// originUID is the mirror uid that marks the run's destination writes, ""
// when the destination user may not use replication origins.
func (r *mirrorRun) originUID(m db.Mirror) string {
	if !r.markWrites {
		return ""
	}
	return m.UID
}

// startWithoutCopy marks tables that wait for nothing (added to a mirror
// that skips initial snapshots) running: their changes replicate from now on.
// Those that already hold rows on the source get a WARN naming the table
// resync that copies them: the destination lacks those rows until then.
func (r *mirrorRun) startWithoutCopy(ctx context.Context, m db.Mirror, src *pgx.Conn, tables []db.MirrorTable) error {
	var ids []int64
	var withRows []string
	for _, t := range tables {
		if t.Status == db.TableStatusRunning {
			continue
		}
		ids = append(ids, t.ID)
		if src == nil || t.Status != db.TableStatusPending {
			continue
		}
		var has bool
		if err := src.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+t.Source().Quoted()+`)`).Scan(&has); err != nil {
			r.logger.Warn("could not tell whether a table added without a copy holds rows", "table", t.Source().String(), "error", err)
			continue
		}
		if has {
			withRows = append(withRows, t.Source().String())
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := r.store.MirrorTablesSetStatus(ctx, m.ID, ids, db.TableStatusRunning); err != nil {
		return err
	}
	if len(withRows) > 0 {
		r.log(ctx, db.LevelWarn, "Tables added without a copy", map[string]any{
			"tables": withRows,
			"reason": "the mirror skips initial copies (do_initial_snapshot false, as a reverse mirror of a cut-over does): only changes from now on replicate, and the rows these tables already hold on the source are not on the destination",
			"action": "copy each with POST /v1/mirrors/" + m.Name + "/resync/{schema.table}"})
	}
	return nil
}

func (r *mirrorRun) ensurePublication(ctx context.Context, src *pgx.Conn, m db.Mirror, sources []change.TableName) error {
	if m.CreatedPublication {
		if _, err := capture.EnsurePublication(ctx, src, m.PublicationName, sources); err != nil {
			// Ours, but the table set changed: make it match the mapping.
			if err := capture.AlterPublicationTables(ctx, src, m.PublicationName, sources); err != nil {
				return err
			}
		}
		return nil
	}
	created, err := capture.EnsurePublication(ctx, src, m.PublicationName, sources)
	if err != nil {
		return err
	}
	if created {
		if err := r.store.MirrorSetCreated(ctx, m.ID, true, false); err != nil {
			return err
		}
		r.log(ctx, db.LevelInfo, "Publication created", map[string]any{"publication": m.PublicationName})
	} else if m.Status == db.StatusInitializing {
		r.log(ctx, db.LevelInfo, "Using existing publication", map[string]any{
			"publication": m.PublicationName,
			"note":        "the publication existed before this mirror and covers every mapped table; deleting the mirror leaves it in place"})
	}
	return nil
}

// snapshot (re)creates the slot with an exported snapshot and copies every
// table consistently with it. A snapshot that was interrupted starts over:
// the slot is dropped and recreated and the destination tables truncated.
func (r *mirrorRun) snapshot(ctx context.Context, in *phaseInputs) error {
	store := r.store
	m, srcPeer, dstPeer, src, dst, tables, slotExists := in.m, in.srcPeer, in.dstPeer, in.src, in.dst, in.tables, in.slot.Exists
	if err := store.MirrorSetStatus(ctx, m.ID, db.StatusSnapshotting, false); err != nil {
		return err
	}
	repl, err := openReplication(ctx, srcPeer)
	if err != nil {
		return err
	}
	defer closeReplication(repl)
	info, err := recreateSlot(ctx, m, src, repl, slotExists, true)
	if err != nil {
		return err
	}
	if m.CreatedSlot && !slotUsable(in.slot) && !m.InFullSnapshot() {
		// Tables were to be copied and the slot was gone: every table is
		// copied again from the new slot, so nothing stays lost.
		r.log(ctx, db.LevelWarn, "Replication slot recreated: every table is copied again", map[string]any{
			"slot": m.ReplicationSlotName, "lsn": info.ConsistentPoint.String(),
			"reason": "the slot was missing or invalidated while tables were waiting for a copy; a copy of every table from the new slot's snapshot replaces what the destination holds"})
	}
	if err := store.MirrorSetCreated(ctx, m.ID, false, true); err != nil {
		return err
	}
	if err := store.MirrorTablesSetStatus(ctx, m.ID, nil, db.TableStatusSnapshotting); err != nil {
		return err
	}
	r.log(ctx, db.LevelInfo, db.MsgSnapshotStarting, map[string]any{
		"tables": tableNames(tables), "slot": m.ReplicationSlotName, "lsn": info.ConsistentPoint.String()})
	started := time.Now()
	rep := newSnapshotReporter(r, tables)
	rep.copyLSN, rep.fromSlot = info.ConsistentPoint, true
	defer rep.endMetrics()
	srcCfg, dstCfg, err := peerConfigs(srcPeer, dstPeer)
	if err != nil {
		return err
	}
	existing, taken := r.existingRows(m, tables)
	err = tablesync.Run(ctx, tablesync.Config{
		Source:             srcCfg,
		Dest:               dstCfg,
		SnapshotName:       info.SnapshotName,
		Tables:             toMappings(tables),
		Existing:           existing,
		Taken:              taken,
		RowsPerPartition:   m.SnapshotNumRowsPerPartition,
		MaxParallelWorkers: m.SnapshotMaxParallelWorkers,
		TablesInParallel:   m.SnapshotNumTablesInParallel,
		Logger:             r.logger,
		// The setup's connections are the first copy worker's: no new
		// connection before the first row moves.
		SourceConn:             src,
		DestConn:               dst,
		OriginMirrorUID:        r.originUID(m),
		SourceColumnsMirrorUID: m.UID,
		Prepared:               in.prepared,
	}, rep)
	if err != nil {
		return r.refusedCopy(ctx, m, tables, err)
	}
	if err := positions.SnapshotTaken(ctx, dst, m.UID, info.ConsistentPoint, m.LastSyncBatchID); err != nil {
		return err
	}
	if err := store.MirrorSetLastLSN(ctx, m.ID, info.ConsistentPoint.String()); err != nil {
		return err
	}
	newSequenceSyncer(r, m, toMappings(tables)).sync(ctx, src, dst)
	r.log(ctx, db.LevelInfo, db.MsgSnapshotCompleted, db.SnapshotDetails{
		RowsSnapshotted: rep.totalRows(), DurationSeconds: time.Since(started).Seconds(), TotalPartitions: rep.totalPartitions()})
	return nil
}

// createSlotWithoutSnapshot creates the slot when the mirror starts without
// an initial snapshot, or recreates a slot that went missing or was
// invalidated (then the changes in the gap are lost, and the log says so).
func (r *mirrorRun) createSlotWithoutSnapshot(ctx context.Context, in *phaseInputs) error {
	m, srcPeer, src, dst, tables, slotExists := in.m, in.srcPeer, in.src, in.dst, in.tables, in.slot.Exists
	repl, err := openReplication(ctx, srcPeer)
	if err != nil {
		return err
	}
	defer closeReplication(repl)
	info, err := recreateSlot(ctx, m, src, repl, slotExists, false)
	if err != nil {
		return err
	}
	if m.CreatedSlot {
		// The mirror had a slot: what the source committed between the
		// mirror's position and the new slot's start never reaches the
		// destination. Recorded before the position moves to the new
		// slot's start, so that a crash in between leaves a slot past
		// the position, which the next run finds (checkSlotPosition).
		if err := r.slotRecreated(ctx, in, info.ConsistentPoint); err != nil {
			return err
		}
	}
	if err := r.store.MirrorSetCreated(ctx, m.ID, false, true); err != nil {
		return err
	}
	if _, err := positions.StartAt(ctx, dst, m.UID, info.ConsistentPoint, m.LastSyncBatchID); err != nil {
		return err
	}
	if err := r.store.MirrorSetLastLSN(ctx, m.ID, info.ConsistentPoint.String()); err != nil {
		return err
	}
	var pending []int64
	for _, t := range tables {
		if t.Status != db.TableStatusRunning {
			pending = append(pending, t.ID)
		}
	}
	if len(pending) > 0 {
		return r.store.MirrorTablesSetStatus(ctx, m.ID, pending, db.TableStatusRunning)
	}
	return nil
}

// slotRecreated records the lost changes of a mirror whose slot this run
// created again (it was missing or invalidated) at start.
func (r *mirrorRun) slotRecreated(ctx context.Context, in *phaseInputs, start change.LSN) error {
	m := in.m
	lost := db.LostChanges{UntilLSN: start.String(), Reason: db.LostSlotRecreated}
	detail := "was missing and was created again at " + start.String()
	if in.slot.Invalidated() {
		lost.Reason = db.LostSlotInvalidated
		why := "wal_status " + in.slot.WALStatus
		if in.slot.InvalidationReason != "" {
			why += ", " + in.slot.InvalidationReason
		}
		detail = fmt.Sprintf("was invalidated (%s: the source removed WAL it still needed) and was created again at %s", why, start)
	}
	switch {
	case in.hasPosition:
		lost.SinceLSN = in.applied.String()
	case m.LastLSN != nil:
		lost.SinceLSN = *m.LastLSN
	}
	return r.lostChanges(ctx, m, lost, detail)
}

// openReplication opens a replication connection to the source peer.
func openReplication(ctx context.Context, srcPeer db.Peer) (*pgconn.PgConn, error) {
	cfg, err := srcPeer.ConnConfig()
	if err != nil {
		return nil, fmt.Errorf("source peer: %w", err)
	}
	repl, err := capture.ConnectReplication(ctx, &cfg.Config)
	if err != nil {
		return nil, &peerConnectError{role: "source", peer: srcPeer.Name, err: err}
	}
	return repl, nil
}

func closeReplication(repl *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = repl.Close(ctx)
}

// recreateSlot drops the mirror's slot when it exists and creates it on
// repl, exporting a snapshot when export is set.
func recreateSlot(ctx context.Context, m db.Mirror, src *pgx.Conn, repl *pgconn.PgConn, exists, export bool) (capture.SlotInfo, error) {
	if exists {
		if err := capture.DropSlot(ctx, src, m.ReplicationSlotName); err != nil {
			return capture.SlotInfo{}, err
		}
	}
	info, err := capture.CreateSlot(ctx, repl, m.ReplicationSlotName, export)
	if errors.Is(err, capture.ErrSlotExists) {
		return capture.SlotInfo{}, &slotExistsError{slot: m.ReplicationSlotName}
	}
	return info, err
}

// carryOutAction performs a control request written by the API.
func (r *mirrorRun) carryOutAction(ctx context.Context, in *phaseInputs) error {
	m, src, dst, mappings := in.m, in.src, in.dst, in.mappings
	switch *m.PendingAction {
	case db.ActionResync:
		// Every table is copied again from a new slot's snapshot: the run
		// loop sees pending tables and takes the snapshot path, which drops
		// and recreates the slot and truncates the destination tables.
		if err := r.store.MirrorTablesSetStatus(ctx, m.ID, nil, db.TableStatusPending); err != nil {
			return err
		}
		// A resync truncates every table, also one whose first copy
		// has not happened yet.
		if err := r.store.MirrorTablesTakeDestination(ctx, m.ID, nil); err != nil {
			return err
		}
		if err := r.store.MirrorSetStatus(ctx, m.ID, db.StatusSnapshotting, false); err != nil {
			return err
		}
		r.log(ctx, db.LevelInfo, "Full resync started", map[string]any{"tables": len(mappings)})
	case db.ActionSyncSchema:
		started := time.Now()
		ddl, warnings, err := schemasync.SyncColumns(ctx, src, dst, mappings)
		if err != nil {
			return inStep(opSchema, fmt.Errorf("sync schema: %w", err))
		}
		r.logSchemaWarnings(ctx, warnings)
		names := make([]string, len(mappings))
		for i, mp := range mappings {
			names[i] = mp.Source.String()
		}
		r.log(ctx, db.LevelInfo, "Schema sync completed", db.SchemaSyncDetails{
			Tables: names, DDLStatements: nonNil(ddl), DurationMS: time.Since(started).Milliseconds()})
	}
	return r.store.MirrorClearPendingAction(ctx, m.ID, *m.PendingAction)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runCDC streams changes until the phase is asked to stop or fails.
func (r *mirrorRun) runCDC(ctx context.Context, in *phaseInputs, sessions *cdc.Sessions) error {
	m, srcPeer, dstPeer, mappings := in.m, in.srcPeer, in.dstPeer, in.mappings
	cfg, err := r.cdcConfig(m, srcPeer, dstPeer, mappings, nil)
	if err != nil {
		return err
	}
	cfg.Sessions = sessions
	if err := r.store.MirrorMarkRunning(ctx, m.ID); err != nil {
		return err
	}
	r.steps.done("mark running")
	r.steps.log(ctx, r.logger)
	r.steps = nil
	stop := r.beginCDC()
	// The budget hands the mirror back to the queue now and then; not while
	// the catalog is unreachable, since the queue lives there.
	var budget *time.Timer
	budget = time.AfterFunc(r.cfg.RunBudget, func() {
		if r.catalogLost() {
			budget.Reset(10 * time.Second)
			return
		}
		r.stopCDC(reasonBudget)
	})
	defer budget.Stop()
	if m.ErrorCount > 0 {
		// Only a mirror that failed before has a count to reset.
		healthy := time.AfterFunc(30*time.Second, func() {
			resetCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = r.store.MirrorResetErrorCount(resetCtx, m.ID)
		})
		defer healthy.Stop()
	}

	rep := newBatchReporter(r, m, mappings)
	seqCtx, stopSequences := context.WithCancel(ctx)
	var sequencesDone sync.WaitGroup
	sequencesDone.Add(1)
	go func() {
		defer sequencesDone.Done()
		r.keepSequencesInStep(seqCtx, srcPeer, dstPeer, newSequenceSyncer(r, m, mappings))
	}()
	if len(in.schemas) > 0 {
		wake := make(chan struct{}, 1)
		cfg.OnUnmappedTable = wakeOnSchemaTable(in.schemas, wake)
		sequencesDone.Add(1)
		go func() {
			defer sequencesDone.Done()
			r.followSchemas(seqCtx, m, srcPeer, wake)
		}()
	}
	err = streamHandingOver(ctx, cfg, rep, stop)
	stopSequences()
	sequencesDone.Wait()
	rep.close(ctx)
	reason := r.endCDC()
	if err != nil {
		return err
	}
	switch reason {
	case reasonPaused:
		return r.store.MirrorSetPausedIfRequested(ctx, m.ID)
	case reasonDeleted:
		return nil
	case reasonBudget:
		return errRunBudget
	case reasonLostLock:
		return errLostLock
	}
	return errAgain
}

// slotHandoverWait is how long a run waits for the slot's previous consumer
// to let go (a run of this mirror on a replica that was cut off from the
// catalog stops at its next batch boundary; a walsender of a dead connection
// exits when the source notices) before the slot in use counts as a failure.
const slotHandoverWait = 20 * time.Second

// streamHandingOver runs CDC, waiting up to slotHandoverWait while the slot
// is still in use by its previous consumer. Nothing is applied before the
// stream starts, so starting again is safe.
func streamHandingOver(ctx context.Context, cfg cdc.Config, rep cdc.Reporter, stop <-chan struct{}) error {
	deadline := time.Now().Add(slotHandoverWait)
	for {
		err := cdc.Run(ctx, cfg, rep, stop)
		if !errors.Is(err, cdc.ErrSlotInUse) || time.Now().After(deadline) {
			return err
		}
		cfg.Logger.Info("replication slot still in use by its previous consumer; waiting for it to let go", "slot", cfg.SlotName)
		select {
		case <-ctx.Done():
			return err
		case <-stop:
			return nil
		case <-time.After(time.Second):
		}
	}
}

// cdcConfig is the configuration of the mirror's CDC phase; skip are tables
// being copied meanwhile.
func (r *mirrorRun) cdcConfig(m db.Mirror, srcPeer, dstPeer db.Peer, mappings []change.Mapping, skip []change.TableName) (cdc.Config, error) {
	srcCfg, dstCfg, err := peerConfigs(srcPeer, dstPeer)
	if err != nil {
		return cdc.Config{}, err
	}
	return cdc.Config{
		MirrorUID:        m.UID,
		Source:           srcCfg,
		Dest:             dstCfg,
		SlotName:         m.ReplicationSlotName,
		PublicationName:  m.PublicationName,
		Tables:           mappings,
		SkipTables:       skip,
		BatchSize:        m.CDCBatchSize,
		SyncInterval:     time.Duration(m.CDCSyncIntervalSeconds) * time.Second,
		HeartbeatTimeout: r.cfg.HeartbeatTimeout,
		SourceWatch:      r.cfg.sources,
		DestWatch:        r.cfg.dests,
		Origin:           origin.NameOrNone(r.originUID(m)),
		Origins:          r.originFilter(m.UID).filter,
		Holder:           r.holder(),
		ConfirmCeiling:   r.ceiling.Load(),
		CaptureDDL:       m.CaptureDDL,
		SchemaChanges:    string(m.SchemaChanges),
		Logger:           r.logger,
	}, nil
}

// peerConfigs returns the connection configurations of a mirror's source
// and destination peers (their passwords decrypted).
func peerConfigs(srcPeer, dstPeer db.Peer) (src, dst *pgx.ConnConfig, err error) {
	if src, err = srcPeer.ConnConfig(); err != nil {
		return nil, nil, fmt.Errorf("source peer: %w", err)
	}
	if dst, err = dstPeer.ConnConfig(); err != nil {
		return nil, nil, fmt.Errorf("destination peer: %w", err)
	}
	return src, dst, nil
}

// fail records a failed run on the mirror and schedules the retry.
func (r *mirrorRun) fail(ctx context.Context, runErr error) error {
	m, err := r.store.MirrorGetByID(ctx, r.mirrorID)
	if err != nil {
		return err
	}
	delay := Backoff(m.ErrorCount + 1)
	retryAt := time.Now().Add(delay).UTC().Truncate(time.Millisecond)
	message := runErr.Error()
	r.cfg.Metrics.MirrorFailed(r.name)
	count, stopped, err := r.store.MirrorRecordFailure(ctx, r.mirrorID, db.MirrorFailure{
		Message: message, RetryAt: retryAt, MaxFailures: r.cfg.MaxFailures})
	if err != nil {
		return err
	}
	if count == 0 {
		return nil // deleted or paused meanwhile
	}
	step := failedStep(runErr)
	details := db.ErrorDetails{Error: message, RetryCount: count, NextRetryAt: &retryAt, Operation: step}
	if stopped {
		details.NextRetryAt = nil
	}
	if errors.Is(runErr, apply.ErrForeignKeyViolation) {
		r.log(ctx, db.LevelWarn, db.MsgForeignKeyViolation, map[string]any{"error": message,
			"action": "the destination has a foreign key that the source does not enforce in the same way; drop or relax it on the destination"})
	}
	r.log(ctx, db.LevelError, failureMessage(runErr), details)
	r.logger.Error("mirror failed", "operation", step, "error", message, "retry_count", count, "next_retry_at", retryAt, "stopped", stopped)
	if stopped {
		r.log(ctx, db.LevelError, "Mirror stopped", map[string]any{
			"reason": fmt.Sprintf("%d consecutive failures", count),
			"action": "fix the cause, then delete and recreate the mirror"})
		return nil
	}
	return river.JobSnooze(delay)
}

// failureMessage picks the catalogue message for a failure.
func failureMessage(err error) string {
	var connErr *peerConnectError
	var slotErr *slotExistsError
	switch {
	case errors.As(err, &slotErr) || errors.Is(err, capture.ErrSlotExists):
		return db.MsgSlotExists
	case errors.Is(err, cdc.ErrHeartbeatTimeout):
		return db.MsgHeartbeatTimeout
	case session.Classify(err) == session.Rejected:
		// The peer answered: a wrong password, user or database is not a
		// timeout; the error says which.
		return "Peer rejected the connection"
	case errors.As(err, &connErr) || errors.Is(err, cdc.ErrConnect) || errors.Is(err, cdc.ErrConnectionTimeout) ||
		session.Classify(err) == session.Unreachable:
		return db.MsgConnectionTimeout
	}
	switch failedStep(err) {
	case opSnapshot:
		return db.MsgSnapshotFailed
	case opCDC:
		return db.MsgCDCBatchFailed
	case opSchema:
		return "Schema sync failed"
	case opCutover:
		return "Cut-over failed"
	}
	return "Mirror setup failed"
}

// Backoff is the wait before retry number n (n >= 1) of a failed mirror:
// 5 s, 10 s, 20 s, ... doubling, at most 5 minutes.
func Backoff(n int) time.Duration {
	d := 5 * time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

func toMappings(tables []db.MirrorTable) []change.Mapping {
	out := make([]change.Mapping, len(tables))
	for i, t := range tables {
		out[i] = change.Mapping{
			Source:         change.TableName{Schema: t.SourceSchema, Name: t.SourceTable},
			Destination:    change.TableName{Schema: t.DestinationSchema, Name: t.DestinationTable},
			ExcludeColumns: t.ExcludeColumns,
		}
	}
	return out
}

func tableNames(tables []db.MirrorTable) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t.Source().String()
	}
	return out
}

// newSnapshotReporter reports the copies of tables.
func newSnapshotReporter(r *mirrorRun, tables []db.MirrorTable) *snapshotReporter {
	rep := &snapshotReporter{run: r, tables: make(map[change.TableName]db.MirrorTable, len(tables))}
	for _, t := range tables {
		rep.tables[t.Source()] = t
	}
	return rep
}

// snapshotReporter writes snapshot progress to the catalog. tablesync calls
// it from several goroutines.
type snapshotReporter struct {
	run    *mirrorRun
	tables map[change.TableName]db.MirrorTable
	// beforeDone, when set, runs before a finished table is marked running.
	beforeDone func(ctx context.Context, t change.Mapping) error
	// copyLSN is the source position the tables are copied as of, and
	// fromSlot says it is the mirror slot's own start (a full snapshot):
	// a finished table's lost changes are cleared (see
	// db.MirrorTableLostChangesCopied).
	copyLSN    change.LSN
	fromSlot   bool
	mu         sync.Mutex
	rows       int64
	partitions int
	copied     map[change.TableName]int64 // rows copied so far per source table
	estimates  map[change.TableName]int64 // the source's row estimate per source table
	shown      map[change.TableName]int64 // the rows_synced last written per source table (it only grows)
	done       map[change.TableName]bool  // tables whose copy is done (no more progress writes)
	flushed    time.Time                  // the last progress write to the catalog

	writeMu sync.Mutex                 // orders the progress writes of one reporter
	written map[change.TableName]int64 // rows_synced written per source table
}

// writeProgress writes rows as t's rows_synced unless a larger count was
// written already (partition reports and streamed counts race), so that the
// catalog's count only grows.
func (s *snapshotReporter) writeProgress(ctx context.Context, t change.Mapping, rows int64) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.written == nil {
		s.written = map[change.TableName]int64{}
	}
	if rows <= s.written[t.Source] {
		return nil
	}
	if err := s.run.store.MirrorTableSnapshotProgress(ctx, s.table(t).ID, rows); err != nil {
		return err
	}
	s.written[t.Source] = rows
	return nil
}

// RowsStreamed shows the rows of t sent to the destination so far, between
// partition commits, in its rows_synced and the snapshot metrics
// (tablesync.ProgressReporter). rows_synced only grows, and is left alone
// once the table is done (TableDone writes the exact count).
func (s *snapshotReporter) RowsStreamed(ctx context.Context, t change.Mapping, rows int64) {
	name := t.Source.String()
	s.mu.Lock()
	if s.shown == nil {
		s.shown, s.done = map[change.TableName]int64{}, map[change.TableName]bool{}
	}
	if s.done[t.Source] || rows <= s.shown[t.Source] {
		s.mu.Unlock()
		return
	}
	s.shown[t.Source] = rows
	estimate, known := s.estimates[t.Source]
	s.mu.Unlock()
	if !known {
		estimate = -1
	}
	s.run.cfg.Metrics.SnapshotProgress(s.run.name, name, rows, estimate)
	if err := s.writeProgress(ctx, t, rows); err != nil && ctx.Err() == nil {
		s.run.logger.Debug("record snapshot progress", "table", name, "error", err)
	}
}

// snapshotProgressInterval is how often at most a snapshot writes the rows
// copied so far to the catalog (rows_synced of the tables being copied).
const snapshotProgressInterval = 2 * time.Second

func (s *snapshotReporter) table(t change.Mapping) db.MirrorTable { return s.tables[t.Source] }

// EstimateKnown stores the source's row estimate of t, whose copy starts
// (tablesync.EstimateReporter).
func (s *snapshotReporter) EstimateKnown(ctx context.Context, t change.Mapping, rows int64) error {
	s.mu.Lock()
	if s.estimates == nil {
		s.estimates = map[change.TableName]int64{}
	}
	s.estimates[t.Source] = rows
	s.mu.Unlock()
	s.run.cfg.Metrics.SnapshotProgress(s.run.name, t.Source.String(), 0, rows)
	return s.run.store.MirrorTableSnapshotStarted(ctx, s.table(t).ID, rows)
}

// endMetrics removes the snapshot series of every table of the report: the
// copy ended (done, failed or cancelled).
func (s *snapshotReporter) endMetrics() {
	for name := range s.tables {
		s.run.cfg.Metrics.SnapshotEnded(s.run.name, name.String())
	}
}

func (s *snapshotReporter) TableStarted(ctx context.Context, t change.Mapping, totalPartitions int) error {
	s.mu.Lock()
	s.partitions += totalPartitions
	s.mu.Unlock()
	return nil
}

// PartitionDone logs the partition with the table's rows copied so far,
// and writes that count to the table's rows_synced: on its first partition
// and then at most every snapshotProgressInterval per mirror.
func (s *snapshotReporter) PartitionDone(ctx context.Context, t change.Mapping, partition, totalPartitions int, rows int64, d time.Duration) error {
	name := t.Source.String()
	s.mu.Lock()
	if s.copied == nil {
		s.copied = map[change.TableName]int64{}
	}
	first := s.copied[t.Source] == 0
	s.copied[t.Source] += rows
	copied := s.copied[t.Source]
	estimate, known := s.estimates[t.Source]
	if s.shown == nil {
		s.shown, s.done = map[change.TableName]int64{}, map[change.TableName]bool{}
	}
	show := max(copied, s.shown[t.Source]) // rows streamed may already be shown
	flush := rows > 0 && show > s.shown[t.Source] && (first || time.Since(s.flushed) >= snapshotProgressInterval)
	if flush {
		s.flushed = time.Now()
		s.shown[t.Source] = show
	}
	s.mu.Unlock()
	details := db.SnapshotDetails{
		Table: name, RowsSnapshotted: rows, DurationSeconds: d.Seconds(), Partition: partition, TotalPartitions: totalPartitions,
		RowsCopied: copied}
	if known {
		details.RowsEstimated = &estimate
		details.PercentDone = db.PercentDone(copied, estimate)
		s.run.cfg.Metrics.SnapshotProgress(s.run.name, name, show, estimate)
	} else {
		s.run.cfg.Metrics.SnapshotProgress(s.run.name, name, show, -1)
	}
	s.run.log(ctx, db.LevelDebug, "Snapshot partition completed", details)
	if flush {
		return s.writeProgress(ctx, t, show)
	}
	return nil
}

func (s *snapshotReporter) TableDone(ctx context.Context, t change.Mapping, rows int64, d time.Duration) error {
	s.mu.Lock()
	s.rows += rows
	if s.done == nil {
		s.shown, s.done = map[change.TableName]int64{}, map[change.TableName]bool{}
	}
	s.done[t.Source] = true
	s.mu.Unlock()
	if s.beforeDone != nil {
		if err := s.beforeDone(ctx, t); err != nil {
			return err
		}
	}
	mt := s.table(t)
	if err := s.run.store.MirrorTableSnapshotted(ctx, mt.ID, rows, mt.ResyncRequestedAt); err != nil {
		return err
	}
	if s.copyLSN != 0 {
		s.run.lostChangesCopied(ctx, mt, s.copyLSN, s.fromSlot)
	}
	done := 100.0
	s.run.log(ctx, db.LevelInfo, db.MsgTableSnapshotCompleted, db.SnapshotDetails{
		Table: t.Source.String(), RowsSnapshotted: rows, DurationSeconds: d.Seconds(), PercentDone: &done})
	s.run.cfg.Metrics.SnapshotEnded(s.run.name, t.Source.String())
	return nil
}

// TableIndexed logs the constraints and indexes created on a destination
// table after its copy (tablesync.IndexReporter).
func (s *snapshotReporter) TableIndexed(ctx context.Context, t change.Mapping, ddl, warnings []string, d time.Duration) error {
	s.run.log(ctx, db.LevelInfo, "Constraints and indexes created", map[string]any{"table": t.Destination.String(),
		"ddl_statements": nonNil(ddl), "warnings": nonNil(warnings), "duration_ms": d.Milliseconds()})
	for _, w := range warnings {
		// What was left out (an expression not carried, a statement the
		// destination rejected) is a WARN entry of its own.
		s.run.log(ctx, db.LevelWarn, "Destination table differs from the source", map[string]any{"table": t.Destination.String(), "warning": w})
	}
	return nil
}

func (s *snapshotReporter) totalRows() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows
}

func (s *snapshotReporter) totalPartitions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.partitions
}

// holder is the run's hold for verifications (nil when the run has none).
func (r *mirrorRun) holder() cdc.Holder {
	if r.hold == nil {
		return nil
	}
	return r.hold
}
