package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

// Tables created and dropped on the source.
//
// A mirror that maps whole schemas (db.SchemaMapping) follows their tables:
// every schema check (when a run prepares, and every SchemaCheckInterval
// while CDC streams) lists the schemas' tables on the source, and a table
// the mirror does not have yet is added to its tables as pending with a
// copy requested. The CDC phase stops at a batch boundary, and the next
// iteration creates the destination table ("Schema change applied"), adds
// the table to the publication and copies it beside running CDC
// (copyTablesDuringCDC): its rows as of the copy's snapshot, then its
// changes from the copy's position on. The rows inserted by the
// transaction that created the table, and those written before the copy,
// are in the snapshot; those after it come from the stream: each lands
// once.
//
// A table of the mirror that no longer exists on the source is marked
// dropped with a WARN entry: it stops replicating and its destination table
// is kept; the mirror goes on with its other tables. A dropped table that
// exists again (created anew under its name) is copied again.

// msgSourceTableDropped is the WARN entry of a source table that was dropped.
const msgSourceTableDropped = "Source table dropped; its destination table is kept"

// Log messages of source schema changes (the catalogue is in db).
const (
	msgSchemaChangeApplied    = db.MsgSchemaChangeApplied
	msgSchemaChangeNotApplied = db.MsgSchemaChangeNotApplied
	msgPausedForSchemaChange  = db.MsgPausedForSchemaChange
)

// schemaChangeApplied logs and counts a source schema change applied to the
// destination's schema.
func (r *mirrorRun) schemaChangeApplied(ctx context.Context, table change.TableName, statement string) {
	r.log(ctx, db.LevelInfo, msgSchemaChangeApplied, map[string]any{"table": table.String(), "statement": statement})
	r.cfg.Metrics.SchemaChangeApplied(r.name)
	r.logger.Info("schema change applied", "table", table.String(), "statement", statement)
}

// followSourceTables brings the mirror's tables in line with the source's:
// tables that disappeared are marked dropped, dropped ones that are back
// and tables new in a mapped schema are made to be copied. It returns the
// tables that replicate (all but the dropped ones) and whether it changed
// any table of the mirror.
func (r *mirrorRun) followSourceTables(ctx context.Context, src *pgx.Conn, m db.Mirror, tables []db.MirrorTable) ([]db.MirrorTable, bool, error) {
	var live, dropped []change.TableName
	byName := map[change.TableName]db.MirrorTable{}
	for _, t := range tables {
		byName[t.Source()] = t
		if t.Status == db.TableStatusDropped {
			dropped = append(dropped, t.Source())
		} else {
			live = append(live, t.Source())
		}
	}
	gone, changed, err := r.markDroppedTables(ctx, src, live, byName)
	if err != nil {
		return nil, false, err
	}
	attached, err := r.followAttachedPartitions(ctx, src, tables, gone)
	if err != nil {
		return nil, false, err
	}
	changed = changed || attached
	// The run's copy of the mirror may predate the publication's creation.
	if !m.CreatedPublication {
		if fresh, err := r.store.MirrorGetByID(ctx, m.ID); err == nil {
			m.CreatedPublication = fresh.CreatedPublication
		}
	}
	if m.CreatedPublication {
		recreated, err := r.followRecreatedTables(ctx, src, m, tables, gone)
		if err != nil {
			return nil, false, err
		}
		changed = changed || recreated
	}
	back, err := r.addTablesBack(ctx, src, m, dropped, byName)
	if err != nil {
		return nil, false, err
	}
	joined, err := r.addSchemaTables(ctx, src, m, tables, byName)
	if err != nil {
		return nil, false, err
	}
	changed = changed || back || joined
	if changed {
		if tables, err = r.store.MirrorTables(ctx, m.ID); err != nil {
			return nil, false, err
		}
	}
	return replicating(tables), changed, nil
}

// markDroppedTables marks the live tables of the mirror that are gone from
// the source as dropped, each with a warning; it returns the gone ones and
// whether it marked any.
func (r *mirrorRun) markDroppedTables(ctx context.Context, src *pgx.Conn, live []change.TableName, byName map[change.TableName]db.MirrorTable) ([]change.TableName, bool, error) {
	gone, err := preflight.MissingTables(ctx, src, live)
	if err != nil {
		return nil, false, fmt.Errorf("check the mirror's source tables: %w", err)
	}
	changed := false
	for _, name := range gone {
		t := byName[name]
		done, err := r.store.MirrorTableSetDropped(ctx, t.ID)
		if err != nil {
			return nil, false, err
		}
		if done {
			changed = true
			r.logger.Warn("source table dropped; its destination table is kept", "table", name.String())
			r.log(ctx, db.LevelWarn, msgSourceTableDropped, map[string]any{"table": name.String(),
				"destination_table": t.Destination().String(),
				"note":              "the table no longer replicates (status dropped); the mirror goes on with its other tables. A table of that name created again on the source is copied again"})
		}
	}
	return gone, changed, nil
}

// addTablesBack makes the dropped tables that exist on the source again to
// be copied anew (their destination table is taken over already, so the
// copy truncates it); a table attached as a partition is not back, its rows
// replicate through its root. It reports whether it added any.
func (r *mirrorRun) addTablesBack(ctx context.Context, src *pgx.Conn, m db.Mirror, dropped []change.TableName, byName map[change.TableName]db.MirrorTable) (bool, error) {
	if len(dropped) == 0 {
		return false, nil
	}
	missing := map[change.TableName]bool{}
	still, err := preflight.MissingTables(ctx, src, dropped)
	if err != nil {
		return false, fmt.Errorf("check the mirror's dropped source tables: %w", err)
	}
	for _, t := range still {
		missing[t] = true
	}
	partitions, err := preflight.PartitionRoots(ctx, src, dropped)
	if err != nil {
		return false, err
	}
	for t := range partitions {
		if byName[t].FromSchemaMapping {
			missing[t] = true
		}
	}
	changed := false
	for _, name := range dropped {
		if missing[name] {
			continue
		}
		ok, err := r.addSourceTable(ctx, src, m, byName[name].Mapping())
		if err != nil {
			return false, err
		}
		changed = changed || ok
	}
	return changed, nil
}

// addSchemaTables adds the tables new in a mapped schema of the source,
// except one whose destination table the mirror writes already (a
// warning, once, says so). It reports whether it added any.
func (r *mirrorRun) addSchemaTables(ctx context.Context, src *pgx.Conn, m db.Mirror, tables []db.MirrorTable, byName map[change.TableName]db.MirrorTable) (bool, error) {
	dests := map[change.TableName]change.TableName{}
	for _, t := range tables {
		dests[t.Destination()] = t.Source()
	}
	changed := false
	for _, sm := range m.SchemaMappings {
		found, _, err := preflight.SchemaTables(ctx, src, sm.SourceSchema)
		if err != nil {
			return false, err
		}
		for _, name := range found {
			if _, known := byName[name]; known {
				continue
			}
			dest := sm.Destination(name)
			if other, taken := dests[dest]; taken {
				r.warnOnce(ctx, "taken:"+name.String(), "Table created on the source not replicated", map[string]any{
					"table": name.String(), "destination_table": dest.String(),
					"reason": fmt.Sprintf("the mirror writes %s to that destination table already", other),
					"action": "map the table by name to another destination table (PUT /v1/mirrors/" + m.Name + "/tables)"})
				continue
			}
			ok, err := r.addSourceTable(ctx, src, m, change.Mapping{Source: name, Destination: dest})
			if err != nil {
				return false, err
			}
			if ok {
				changed = true
				dests[dest] = name
			}
		}
	}
	return changed, nil
}

// followAttachedPartitions handles tables of the mirror, found in a mapped
// schema, that the source attached as partitions of another table of the
// mirror (ALTER TABLE ... ATTACH PARTITION). Their changes now reach the
// stream as changes of the root (the publication publishes through it), so
// each is marked dropped (its destination table is kept, as for a dropped
// table), and the rows it held when attached, which no change carried into
// the root, are brought by a resync of the root beside running CDC. It
// reports whether it changed any table of the mirror.
func (r *mirrorRun) followAttachedPartitions(ctx context.Context, src *pgx.Conn, tables []db.MirrorTable, gone []change.TableName) (bool, error) {
	live := map[change.TableName]db.MirrorTable{}
	var candidates []change.TableName
	for _, t := range tables {
		if t.Status == db.TableStatusDropped || slices.Contains(gone, t.Source()) {
			continue
		}
		live[t.Source()] = t
		if t.FromSchemaMapping {
			candidates = append(candidates, t.Source())
		}
	}
	roots, err := preflight.PartitionRoots(ctx, src, candidates)
	if err != nil {
		return false, err
	}
	changed := false
	for _, name := range candidates {
		root, ok := roots[name]
		if !ok {
			continue
		}
		rt, mapped := live[root]
		if !mapped || root == name {
			continue
		}
		t := live[name]
		done, err := r.store.MirrorTableSetDropped(ctx, t.ID)
		if err != nil {
			return false, err
		}
		if !done {
			continue
		}
		changed = true
		r.logger.Warn("source table attached as a partition; its destination table is kept", "table", name.String(), "root", root.String())
		r.log(ctx, db.LevelWarn, msgSourceTableDropped, map[string]any{"table": name.String(),
			"destination_table": t.Destination().String(), "attached_to": root.String(),
			"note": fmt.Sprintf("the table was attached as a partition of %s: its rows now replicate through that table, which is copied again to take the rows it had when attached; this table no longer replicates (status dropped)", root)})
		if rt.Status == db.TableStatusRunning && rt.ResyncRequestedAt == nil {
			if err := r.store.MirrorTableRequestResync(ctx, r.mirrorID, root); err != nil {
				return false, err
			}
			r.log(ctx, db.LevelInfo, db.MsgTableResyncStarted, map[string]any{"table": root.String(),
				"reason": fmt.Sprintf("table %s was attached to it as a partition with rows the stream does not carry", name)})
		}
	}
	return changed, nil
}

// followRecreatedTables handles tables of the mirror that the source
// dropped and created again under the same name between two checks (in one
// migration, say): the table was never seen missing, but the new one is not
// in the mirror's publication (the drop took the old one out of it), so
// none of its changes would reach the stream while the mirror showed it
// running. Under schema_changes apply it is copied anew (a table resync:
// the run's start puts it back into the publication and brings the
// destination table to its columns); under warn a WARN entry says so
// (once); under stop the mirror is paused before it. It reports whether it
// changed any table of the mirror.
func (r *mirrorRun) followRecreatedTables(ctx context.Context, src *pgx.Conn, m db.Mirror, tables []db.MirrorTable, gone []change.TableName) (bool, error) {
	var candidates []change.TableName
	for _, t := range tables {
		if t.Status == db.TableStatusRunning && t.ResyncRequestedAt == nil && !slices.Contains(gone, t.Source()) {
			candidates = append(candidates, t.Source())
		}
	}
	recreated, err := preflight.Unpublished(ctx, src, m.PublicationName, candidates)
	if err != nil || len(recreated) == 0 {
		return false, err
	}
	changed := false
	for _, name := range recreated {
		switch schemaPolicy(m) {
		case db.SchemaChangesWarn:
			r.warnOnce(ctx, "recreated:"+name.String(), msgSchemaChangeNotApplied, map[string]any{
				"table": name.String(), "change": "table dropped and created again on the source",
				"reason": "schema_changes is warn: the new table is not copied, and its changes do not replicate",
				"action": "resync the table (POST /v1/mirrors/" + m.Name + "/resync/" + name.String() + ") or set schema_changes to apply"})
			continue
		case db.SchemaChangesStop:
			if err := r.pauseBefore(ctx, m.ID, name, "table dropped and created again on the source", map[string]any{
				"table": name.String(), "changes": []string{"table dropped and created again on the source"},
				"action": "schema_changes is stop: nothing was changed. Set schema_changes to apply (the table is then copied anew) or resync the table, then resume the mirror"}); err != nil {
				return false, err
			}
			return false, errRunEnded
		}
		if err := r.store.MirrorTableRequestResync(ctx, m.ID, name); err != nil {
			return false, err
		}
		changed = true
		r.log(ctx, db.LevelWarn, "Source table dropped and created again", map[string]any{"table": name.String(),
			"note": "the table was dropped and created again under the same name on the source: it is copied anew into its destination table while the other tables keep replicating"})
		r.log(ctx, db.LevelInfo, db.MsgTableResyncStarted, map[string]any{"table": name.String(),
			"reason": "the source table was dropped and created again"})
	}
	return changed, nil
}

// pauseBefore pauses the mirror, as POST pause does, before a source table
// change met under schema_changes stop. The WARN entry is written first, on
// a context that outlives the run: pausing makes the control watcher cancel
// the run's context, and an entry kept for later would be lost with the run.
func (r *mirrorRun) pauseBefore(ctx context.Context, mirrorID int64, table change.TableName, what string, details map[string]any) error {
	ctx = context.WithoutCancel(ctx)
	r.log(ctx, db.LevelWarn, msgPausedForSchemaChange, details)
	r.logger.Warn("mirror paused before a source table change (schema_changes is stop)", "table", table.String(), "change", what)
	return r.store.MirrorPause(ctx, mirrorID)
}

// schemaPolicy is what the mirror does with source schema changes that
// would alter the destination's schema (schema_changes; apply when unset).
func schemaPolicy(m db.Mirror) db.SchemaChanges {
	if m.SchemaChanges == "" {
		return db.SchemaChangesApply
	}
	return m.SchemaChanges
}

// addSourceTable adds the source table of mp (new in a mapped schema, or
// dropped and created again) to the mirror's tables to be copied, unless it
// cannot identify its rows: added to the publication it would make the
// source refuse its updates and deletes, so it waits (with a WARN entry)
// until it has a primary key or replica identity. Under schema_changes warn
// the table is left out with a WARN entry; under stop the mirror is paused
// before it (errRunEnded).
func (r *mirrorRun) addSourceTable(ctx context.Context, src *pgx.Conn, m db.Mirror, mp change.Mapping) (bool, error) {
	switch schemaPolicy(m) {
	case db.SchemaChangesWarn:
		r.warnOnce(ctx, "policy:"+mp.Source.String(), msgSchemaChangeNotApplied, map[string]any{
			"table": mp.Source.String(), "change": "table created on the source",
			"reason": "schema_changes is warn: the table is not added to the mirror and not created on the destination",
			"action": "to replicate it, map it by name (PUT /v1/mirrors/" + m.Name + "/tables) or set schema_changes to apply"})
		return false, nil
	case db.SchemaChangesStop:
		if err := r.pauseBefore(ctx, m.ID, mp.Source, "table created on the source", map[string]any{
			"table": mp.Source.String(), "changes": []string{"table created on the source, to be created on the destination as " + mp.Destination.String()},
			"action": "schema_changes is stop: nothing was added. Set schema_changes to apply (the table is then created and copied) or warn (it is left out), " +
				"or map it by name with PUT /v1/mirrors/" + m.Name + "/tables, then resume the mirror"}); err != nil {
			return false, err
		}
		return false, errRunEnded
	}
	err := preflight.ReplicaIdentity(ctx, src, []change.TableName{mp.Source}, "source")
	var f *preflight.Failure
	if errors.As(err, &f) {
		r.warnOnce(ctx, "identity:"+mp.Source.String(), "Table created on the source not replicated yet", map[string]any{
			"table": mp.Source.String(), "reason": f.Message,
			"note": "pgmirror adds the table as soon as it can identify its rows"})
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check source table %s: %w", mp.Source, err)
	}
	added, err := r.store.MirrorTableAddFromSchema(ctx, m.ID, mp)
	if err != nil || !added {
		return false, err
	}
	r.log(ctx, db.LevelInfo, "Table created on the source added to the mirror", map[string]any{
		"table": mp.Source.String(), "destination_table": mp.Destination.String(),
		"note": "the table is created on the destination and copied while the other tables keep replicating"})
	return true, nil
}

// warned holds the warnings of followSourceTables already logged, per
// mirror and process, so that a table left out is not reported at every
// check.
var warned sync.Map

func (r *mirrorRun) warnOnce(ctx context.Context, key, message string, details map[string]any) {
	if _, done := warned.LoadOrStore(fmt.Sprintf("%d:%s", r.mirrorID, key), true); done {
		return
	}
	r.log(ctx, db.LevelWarn, message, details)
}

// replicating returns tables without the dropped ones.
func replicating(tables []db.MirrorTable) []db.MirrorTable {
	out := make([]db.MirrorTable, 0, len(tables))
	for _, t := range tables {
		if t.Status != db.TableStatusDropped {
			out = append(out, t)
		}
	}
	return out
}

// createAddedTables creates on the destination the tables that joined the
// mirror from a mapped schema as the source created them (pending with a
// copy requested, MirrorTableAddFromSchema), logging each statement as
// "Schema change applied". A table that exists there already is checked
// and used (nothing to log). Creating is idempotent: a run that dies after
// it finds the table and goes on. (Tables a PUT tables expanded a schema
// to are created like any other added table.)
func (r *mirrorRun) createAddedTables(ctx context.Context, src, dst *pgx.Conn, tables []db.MirrorTable) error {
	for _, t := range tables {
		if !t.FromSchemaMapping || t.Status != db.TableStatusPending || t.ResyncRequestedAt == nil {
			continue
		}
		report, err := schemasync.EnsureTablesReport(ctx, src, dst, []change.Mapping{t.Mapping()})
		if err != nil {
			return fmt.Errorf("create destination table %s for source table %s: %w", t.Destination(), t.Source(), err)
		}
		for _, stmt := range report.DDL {
			r.schemaChangeApplied(ctx, t.Source(), stmt)
		}
		for _, w := range report.Warnings {
			r.log(ctx, db.LevelWarn, "Destination table differs from the source", map[string]any{"warning": w})
		}
	}
	return nil
}

// wakeOnSchemaTable is the CDC run's OnUnmappedTable of a mirror that maps
// schemas: a change of a table of a mapped schema that the run does not
// replicate (a publication with FOR TABLES IN SCHEMA sends the tables
// created there at once) wakes followSchemas for a check now.
func wakeOnSchemaTable(schemas []db.SchemaMapping, wake chan<- struct{}) func(change.TableName) {
	mapped := map[string]bool{}
	for _, sm := range schemas {
		mapped[sm.SourceSchema] = true
	}
	return func(t change.TableName) {
		if !mapped[t.Schema] {
			return
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// followSchemas checks the mapped schemas' tables every
// SchemaCheckInterval while the CDC phase streams, and at once when wake
// fires, and stops the phase at a batch boundary when a table is to be
// copied, so that the next iteration adds it.
func (r *mirrorRun) followSchemas(ctx context.Context, m db.Mirror, srcPeer db.Peer, wake <-chan struct{}) {
	tick := time.NewTicker(r.cfg.SchemaCheckInterval)
	defer tick.Stop()
	var src *pgx.Conn
	defer func() {
		if src != nil {
			closeConn(src)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-wake:
		}
		var err error
		if src == nil || src.IsClosed() {
			if src, err = connectPeer(ctx, "source", srcPeer); err != nil {
				src = nil
				continue // the CDC run notices a lost peer itself
			}
		}
		tables, err := r.store.MirrorTables(ctx, m.ID)
		if err != nil {
			continue // the catalog may be away; CDC goes on
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, changed, err := r.followSourceTables(cctx, src, m, tables)
		cancel()
		if errors.Is(err, errRunEnded) {
			r.stopCDC(reasonPaused) // paused before a schema change
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				r.logger.Warn("check the source's tables", "error", err)
			}
			closeConn(src)
			src = nil
			continue
		}
		if changed {
			r.stopCDC(reasonAction)
			return
		}
	}
}
