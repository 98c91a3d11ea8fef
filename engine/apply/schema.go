package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/positions"
)

// This file handles a mapped table's columns changing on the source while
// CDC runs (Config.SchemaChanges). pgoutput describes a table again
// (a Relation message) before the first change after DDL; the message names
// the live columns in attnum order with their types, but not their attnums.
// The applier keeps what it knew of each table's columns, by attnum, in
// _pgmirror.source_columns on the destination, written in the batch
// transaction that also applies the resulting DDL and records the applied
// position: a restart finds the state that matches the destination, and a
// replay derives the same changes, each of which is skipped when the
// destination already shows it. What each change does to the destination
// is decided by package engine/colsync (Diff, Stream), which the paths
// before a copy and for captured DDL follow too; this file matches the
// stream's columns with attnums (align), reads the catalogs, executes the
// steps and reports them.

// SchemaMode is what the applier does when a mapped source table's columns
// change.
type SchemaMode string

// The schema modes.
const (
	// SchemaApply applies each change to the destination at its position.
	SchemaApply SchemaMode = "apply"
	// SchemaWarn reports the change and leaves the destination's schema as
	// it is (dropped and renamed columns are kept and made nullable; a
	// column the destination lacks is reported as ErrMissingColumn).
	SchemaWarn SchemaMode = "warn"
	// SchemaStop returns a SchemaStopError before the first change that
	// would alter the destination's schema.
	SchemaStop SchemaMode = "stop"
)

// SchemaStopError is returned by Apply under SchemaStop when a source table's
// columns changed in a way that would alter the destination's schema. The
// batch must be rolled back; nothing of the change was applied.
type SchemaStopError struct {
	// Table is the source table.
	Table change.TableName
	// Changes describe what changed, one entry per column.
	Changes []string
	// At is the commit position of the source transaction in which the
	// change was met (set by the CDC run, which then applies everything
	// before that transaction and stops there).
	At change.LSN
}

func (e *SchemaStopError) Error() string {
	return fmt.Sprintf("source table %s changed (%s) and schema_changes is stop: the destination was left as it is", e.Table, strings.Join(e.Changes, "; "))
}

// SourceColumn is a column of a source table as the source catalog holds it
// now (pg_attribute), dropped ones included.
type SourceColumn struct {
	Attnum  int
	Name    string
	Dropped bool
	TypeOID uint32
	TypeMod int32
	// Type is format_type with only pg_catalog on the search path (built-in
	// types unqualified, others schema-qualified): usable in DDL on the
	// destination.
	Type    string
	NotNull bool
	// Default is the default's expression ("" for none).
	Default string
	// Missing is the value rows older than the column have (attmissingval),
	// set when it was added with a non-volatile default without a rewrite.
	Missing   *string
	Generated bool
	Identity  bool
	// DefaultNotCarried says why Default may not be evaluated on the
	// destination (see engine/exprcheck); "" when it may.
	DefaultNotCarried string
}

// SourceCatalog reads the source's catalog for the applier.
type SourceCatalog interface {
	// Columns returns every column of table with attnum > 0, dropped ones
	// included, in attnum order.
	Columns(ctx context.Context, table change.TableName) ([]SourceColumn, error)
	// FormatType returns format_type(oid, typmod) as SourceColumn.Type.
	FormatType(ctx context.Context, oid uint32, typmod int32) (string, error)
	// EnsureTypes creates on the destination, in dst's open transaction,
	// the user-defined source types oids (and their dependencies) that it
	// lacks, and returns the statements executed and what was left out (a
	// domain's CHECK calling a user function).
	EnsureTypes(ctx context.Context, dst *pgx.Conn, oids []uint32) (ddl, warnings []string, err error)
}

// SchemaHooks receive what the applier does with schema changes. Every
// field is optional.
type SchemaHooks struct {
	// Applied is called with each statement executed on the destination,
	// once the batch that carries it committed.
	Applied func(ctx context.Context, table change.TableName, statement string)
	// Warned is called under SchemaWarn with each change left alone, once
	// the batch that met it committed.
	Warned func(ctx context.Context, table change.TableName, what string)
	// Resync is called when a change may have changed values the stream
	// does not carry (a column retyped with a table rewrite, a column added
	// with a volatile default): the table must be copied again. An error
	// fails the batch.
	Resync func(ctx context.Context, table change.TableName, reason string) error
	// NotCarried is called with what a change left out on the destination
	// (a column default whose expression may not run there, see
	// SourceColumn.DefaultNotCarried), once the batch committed.
	NotCarried func(ctx context.Context, table change.TableName, warning string)
}

// knownColumn is a source column as the applier last knew it.
type knownColumn = positions.SourceColumn

// syntheticAttnum starts the attnums given to columns whose attnum could
// not be read from the source catalog (PostgreSQL's are at most 1600).
const syntheticAttnum = 10000

func (a *Applier) loadKnown(ctx context.Context, table change.TableName) ([]knownColumn, error) {
	if k, ok := a.known[table]; ok {
		return k, nil
	}
	out, err := positions.SourceColumns(ctx, a.conn, a.cfg.MirrorUID, table)
	if err != nil {
		return nil, err
	}
	a.known[table] = out
	return out, nil
}

// saveKnown records cols as the known columns of table, in the batch
// transaction.
func (a *Applier) saveKnown(ctx context.Context, table change.TableName, cols []knownColumn) error {
	if err := a.begin(ctx); err != nil {
		return err
	}
	if err := positions.SetSourceColumns(ctx, a.conn, a.cfg.MirrorUID, table, cols); err != nil {
		return err
	}
	a.known[table] = cols
	return nil
}

func sameKnown(known []knownColumn, rel *change.Relation) bool {
	if len(known) != len(rel.Columns) {
		return false
	}
	for i, c := range rel.Columns {
		k := known[i]
		if k.Name != c.Name || k.TypeOID != c.TypeOID || k.TypeMod != c.TypeMod {
			return false
		}
	}
	return true
}

// catalogView indexes the source catalog's columns.
type catalogView struct {
	byAttnum map[int]SourceColumn
	byName   map[string]int // live columns
	live     []int          // live, not generated attnums in order
}

func newCatalogView(cols []SourceColumn) catalogView {
	v := catalogView{byAttnum: map[int]SourceColumn{}, byName: map[string]int{}}
	for _, c := range cols {
		v.byAttnum[c.Attnum] = c
		if !c.Dropped {
			v.byName[c.Name] = c.Attnum
			if !c.Generated {
				v.live = append(v.live, c.Attnum)
			}
		}
	}
	return v
}

// align gives each column of rel an attnum, from the known columns and the
// source catalog now (which may be ahead of the stream). Columns keep their
// attnum order, and new columns come after every known one. In order:
//  1. a column named as a known column is that column;
//  2. otherwise the catalog's attnum for its name, when it fits between its
//     neighbours (a renamed column, or a new one);
//  3. otherwise a known column left over between its neighbours with the
//     same type is taken as renamed, unless the catalog shows that one
//     dropped and a newer column to take instead;
//  4. otherwise it is new.
func align(known []knownColumn, rel *change.Relation, cat catalogView) []int {
	out := make([]int, len(rel.Columns))
	used := map[int]bool{}
	knownAt := map[int]knownColumn{}
	maxKnown := 0
	for _, k := range known {
		knownAt[k.Attnum] = k
		maxKnown = max(maxKnown, k.Attnum)
	}
	j := 0
	for i, c := range rel.Columns {
		for k := j; k < len(known); k++ {
			if known[k].Name == c.Name {
				out[i], used[known[k].Attnum], j = known[k].Attnum, true, k+1
				break
			}
		}
	}
	bounds := func(i int) (lo, hi int) {
		hi = 1 << 30
		for p := i - 1; p >= 0; p-- {
			if out[p] != 0 {
				lo = out[p]
				break
			}
		}
		for n := i + 1; n < len(out); n++ {
			if out[n] != 0 {
				hi = out[n]
				break
			}
		}
		return lo, hi
	}
	for i, c := range rel.Columns {
		if out[i] != 0 {
			continue
		}
		lo, hi := bounds(i)
		if at, ok := cat.byName[c.Name]; ok && at > lo && at < hi && !used[at] {
			if _, isKnown := knownAt[at]; isKnown || at > maxKnown {
				out[i], used[at] = at, true
			}
		}
	}
	synthetic := max(maxKnown, syntheticAttnum)
	for i, c := range rel.Columns {
		if out[i] != 0 {
			continue
		}
		lo, hi := bounds(i)
		for _, k := range known {
			if used[k.Attnum] || k.Attnum <= lo || k.Attnum >= hi || k.TypeOID != c.TypeOID {
				continue
			}
			if sc, ok := cat.byAttnum[k.Attnum]; ok && sc.Dropped {
				if at := newerLive(cat, maxKnown, lo, hi, used); at != 0 {
					out[i], used[at] = at, true
					break
				}
			}
			out[i], used[k.Attnum] = k.Attnum, true
			break
		}
		if out[i] != 0 {
			continue
		}
		if at := newerLive(cat, maxKnown, lo, hi, used); at != 0 {
			out[i], used[at] = at, true
			continue
		}
		synthetic++
		out[i], used[synthetic] = synthetic, true
	}
	return out
}

// newerLive returns the first live catalog attnum after every known one,
// between lo and hi and not used, or 0.
func newerLive(cat catalogView, maxKnown, lo, hi int, used map[int]bool) int {
	for _, at := range cat.live {
		if at > maxKnown && at > lo && at < hi && !used[at] {
			return at
		}
	}
	return 0
}

// diffColumns lists the changes from known to rel given rel's attnums
// (colsync.Diff).
func diffColumns(known []knownColumn, rel *change.Relation, attnums []int) []colsync.Change {
	k := make([]colsync.Known, len(known))
	for i, c := range known {
		k[i] = colsync.Known{Attnum: c.Attnum, Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod}
	}
	now := make([]colsync.Source, len(rel.Columns))
	for i, c := range rel.Columns {
		now[i] = colsync.Source{Attnum: attnums[i], Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod}
	}
	return colsync.Diff(k, now)
}

// reconcile compares rel with the known columns of its table and, by the
// schema mode, applies the differences to the destination (in the batch
// transaction, after writing what was buffered), reports them, or stops.
// Under SchemaApply the checked binary types follow (settleBinary).
func (a *Applier) reconcile(ctx context.Context, m *change.Mapping, rel *change.Relation) error {
	known, err := a.loadKnown(ctx, rel.Table)
	if err != nil {
		return err
	}
	if known != nil && sameKnown(known, rel) {
		return nil
	}
	if a.cfg.Early {
		return fmt.Errorf("columns of %s differ from those recorded: %w", rel.Table, ErrNotEarly)
	}
	cat, err := a.sourceCatalog(ctx, rel.Table)
	if err != nil {
		return err
	}
	if known == nil {
		// First description of a table whose columns were not recorded
		// when it was copied (by an older pgmirror): what the destination
		// was created or copied from. Attnums come from the catalog by
		// name.
		var none []knownColumn
		return a.saveKnown(ctx, rel.Table, newKnown(rel, align(none, rel, cat)))
	}
	return a.applyColumnChanges(ctx, m, rel, known, align(known, rel, cat), cat)
}

// sourceCatalog reads the source catalog's columns of table now (none
// without a SourceCatalog).
func (a *Applier) sourceCatalog(ctx context.Context, table change.TableName) (catalogView, error) {
	if a.cfg.Source == nil {
		return newCatalogView(nil), nil
	}
	cols, err := a.cfg.Source.Columns(ctx, table)
	if err != nil {
		return catalogView{}, fmt.Errorf("read source columns of %s: %w", table, err)
	}
	return newCatalogView(cols), nil
}

// CapturedColumn is a column of a source table as a captured schema change
// describes it at its position in the stream.
type CapturedColumn struct {
	Attnum int
	Name   string
	// TypeOID and TypeMod are its type; TypeOID is 0 when the capture did
	// not say (a trigger installed by an older pgmirror).
	TypeOID uint32
	TypeMod int32
	// Stored reports a stored generated column, which the stream does not
	// carry.
	Stored bool
}

// ColumnsCaptured reconciles the known columns of source table with its
// live columns as a captured schema change describes them, by attnum, at
// its place in the batch: a column renamed, dropped, added or retyped in
// the transaction is applied to the destination (or stops the run) as a
// new description in the stream would do it, before the captured indexes
// and constraints that may name it, and even when no row of the table
// follows in the transaction. The stream's next description of the table
// then finds the columns known. Under SchemaWarn, for a table without
// known columns or without a mapping, it does nothing. Columns without a
// type (an older trigger) are taken only by attnums known already: renames
// and drops are applied, additions and type changes wait for the stream's
// description.
func (a *Applier) ColumnsCaptured(ctx context.Context, table change.TableName, cols []CapturedColumn) error {
	m := a.mappings[table]
	if m == nil || a.cfg.SchemaChanges == "" || a.cfg.SchemaChanges == SchemaWarn {
		return nil
	}
	known, err := a.loadKnown(ctx, table)
	if err != nil || known == nil {
		return err
	}
	rel, attnums := capturedRelation(table, known, cols)
	if len(rel.Columns) == 0 || sameKnown(known, rel) {
		return nil
	}
	cat, err := a.sourceCatalog(ctx, table)
	if err != nil {
		return err
	}
	// The table's current plan keeps the old columns: pgoutput describes
	// the table again before its next change, and planFor then finds the
	// columns known.
	return a.applyColumnChanges(ctx, m, rel, known, attnums, cat)
}

// capturedRelation describes table as the stream would from captured
// columns, with their attnums: stored generated columns are left out, and
// a column without a type takes the known one's, or is left out when its
// attnum is not known.
func capturedRelation(table change.TableName, known []knownColumn, cols []CapturedColumn) (*change.Relation, []int) {
	byAttnum := map[int]knownColumn{}
	for _, k := range known {
		byAttnum[k.Attnum] = k
	}
	rel := &change.Relation{Table: table}
	var attnums []int
	for _, c := range cols {
		if c.Stored {
			continue
		}
		col := change.Column{Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod}
		if c.TypeOID == 0 {
			k, ok := byAttnum[c.Attnum]
			if !ok {
				continue
			}
			col.TypeOID, col.TypeMod = k.TypeOID, k.TypeMod
		}
		rel.Columns = append(rel.Columns, col)
		attnums = append(attnums, c.Attnum)
	}
	return rel, attnums
}

// applyColumnChanges applies the differences between the known columns
// and rel (whose columns have the attnums given) by the schema mode, and
// records rel's columns as known.
func (a *Applier) applyColumnChanges(ctx context.Context, m *change.Mapping, rel *change.Relation, known []knownColumn, attnums []int, cat catalogView) error {
	mode := a.cfg.SchemaChanges
	changes := diffColumns(known, rel, attnums)
	next := newKnown(rel, attnums)
	if len(changes) == 0 {
		return a.saveKnown(ctx, rel.Table, next)
	}
	delete(a.tables, m.Destination)
	dest, err := a.destTable(ctx, m.Destination)
	if err != nil {
		return err
	}
	if err := a.describeChanges(ctx, m, dest, changes, cat); err != nil {
		return err
	}
	plan := colsync.Stream(*m, changes, dest.colsync())
	steps := plan.Steps
	switch {
	case len(steps) == 0:
	case mode == SchemaStop:
		stop := &SchemaStopError{Table: rel.Table}
		for _, c := range changes {
			stop.Changes = append(stop.Changes, c.String())
		}
		return stop
	case mode == SchemaApply:
		if err := a.flush(ctx); err != nil {
			return err
		}
		if err := a.begin(ctx); err != nil {
			return err
		}
		if err := a.ensureTypes(ctx, m, rel, changes); err != nil {
			return err
		}
		for _, s := range steps {
			if err := a.execStep(ctx, rel.Table, s); err != nil {
				return err
			}
		}
		delete(a.tables, m.Destination)
		if err := a.settleBinary(ctx, m, rel, changes); err != nil {
			return err
		}
		for _, s := range steps {
			if s.Resync != "" && a.cfg.SchemaHooks.Resync != nil {
				if err := a.cfg.SchemaHooks.Resync(ctx, rel.Table, s.Resync); err != nil {
					return err
				}
			}
		}
	default:
		for _, c := range changes {
			a.schemaDone = append(a.schemaDone, schemaReport{table: rel.Table, warning: c.String()})
		}
	}
	return a.saveKnown(ctx, rel.Table, next)
}

func newKnown(rel *change.Relation, attnums []int) []knownColumn {
	out := make([]knownColumn, len(rel.Columns))
	for i, c := range rel.Columns {
		out[i] = knownColumn{Attnum: attnums[i], Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod}
	}
	slices.SortFunc(out, func(x, y knownColumn) int { return x.Attnum - y.Attnum })
	return out
}

// ensureTypes creates on the destination the user-defined types that added
// and retyped columns need, in the batch transaction.
func (a *Applier) ensureTypes(ctx context.Context, m *change.Mapping, rel *change.Relation, changes []colsync.Change) error {
	var oids []uint32
	for _, c := range changes {
		if c.Kind != colsync.Drop && c.Col.TypeOID >= firstNormalObjectID && !m.Excluded(c.Name) {
			oids = append(oids, c.Col.TypeOID)
		}
	}
	if len(oids) == 0 || a.cfg.Source == nil {
		return nil
	}
	ddl, warnings, err := a.cfg.Source.EnsureTypes(ctx, a.conn, oids)
	if err != nil {
		return fmt.Errorf("create the types of new source columns of %s on the destination: %w", rel.Table, err)
	}
	for _, w := range warnings {
		a.schemaDone = append(a.schemaDone, schemaReport{table: rel.Table, notCarried: w})
	}
	for _, stmt := range ddl {
		a.schemaDone = append(a.schemaDone, schemaReport{table: rel.Table, statement: stmt})
	}
	return nil
}

// describeChanges gives the columns that changes may add or retype on the
// destination (dest) their SQL type, and what the source catalog now says
// of them (NOT NULL, default, the value of older rows, identity) when it
// still has the column: under the same name for an addition, at the same
// attnum for a type change. colsync.Stream decides from them.
func (a *Applier) describeChanges(ctx context.Context, m *change.Mapping, dest *destTable, changes []colsync.Change, cat catalogView) error {
	for i := range changes {
		c := &changes[i]
		_, has := dest.columns[c.Name]
		var typed bool
		switch c.Kind {
		case colsync.Add:
			typed = !m.Excluded(c.Name) && !has
		case colsync.Rename:
			typed = m.Excluded(c.OldName) && !m.Excluded(c.Name) && !has
		case colsync.Retype:
			typed = !m.Excluded(c.Name)
		}
		if !typed {
			continue
		}
		typ, err := a.sourceType(ctx, c.Col, cat)
		if err != nil {
			return err
		}
		c.Col.Type = typ
		sc, ok := cat.byAttnum[c.Attnum]
		if !ok || sc.Dropped || (c.Kind != colsync.Retype && sc.Name != c.Name) {
			continue
		}
		c.Col.Described, c.Col.NotNull, c.Col.Default, c.Col.Missing = true, sc.NotNull, sc.Default, sc.Missing
		c.Col.Identity, c.Col.NotCarried = sc.Identity, sc.DefaultNotCarried
	}
	return nil
}

// colsync returns the destination table's columns for colsync.
func (d *destTable) colsync() map[string]colsync.Dest {
	out := make(map[string]colsync.Dest, len(d.columns))
	for name, c := range d.columns {
		out[name] = colsync.Dest{Name: name, Type: c.typ, HasDefault: c.hasDefault, PrimaryKey: d.pk[name]}
	}
	return out
}

// sourceType is the SQL type of a column as the source describes it now.
func (a *Applier) sourceType(ctx context.Context, c colsync.Source, cat catalogView) (string, error) {
	if sc, ok := cat.byAttnum[c.Attnum]; ok && !sc.Dropped && sc.TypeOID == c.TypeOID && sc.TypeMod == c.TypeMod && sc.Type != "" {
		return sc.Type, nil
	}
	if a.cfg.Source == nil {
		return "", fmt.Errorf("the type of source column %q is unknown (no source catalog)", c.Name)
	}
	return a.cfg.Source.FormatType(ctx, c.TypeOID, c.TypeMod)
}

// execStep runs one statement in the batch transaction and reports it.
func (a *Applier) execStep(ctx context.Context, table change.TableName, s colsync.Step) error {
	if s.NotCarried != "" {
		a.schemaDone = append(a.schemaDone, schemaReport{table: table, notCarried: s.NotCarried})
		return nil
	}
	if s.SQL == "" {
		return nil
	}
	if s.Optional {
		if _, err := a.conn.Exec(ctx, "SAVEPOINT pgmirror_schema_step"); err != nil {
			return fmt.Errorf("apply schema change to the destination: %w", err)
		}
		if _, err := a.conn.Exec(ctx, s.SQL); err != nil {
			if _, rerr := a.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT pgmirror_schema_step"); rerr != nil {
				return fmt.Errorf("apply schema change to the destination: %s: %w", s.SQL, rerr)
			}
			a.log.Warn("the destination rejected a column default of the source; it was left out", "table", table.String(), "warning", s.Rejected, "statement", s.SQL, "error", err.Error())
			return nil
		}
		if _, err := a.conn.Exec(ctx, "RELEASE SAVEPOINT pgmirror_schema_step"); err != nil {
			return fmt.Errorf("apply schema change to the destination: %w", err)
		}
	} else if _, err := a.conn.Exec(ctx, s.SQL); err != nil {
		return fmt.Errorf("apply schema change to the destination: %s: %w", s.SQL, err)
	}
	a.schemaDone = append(a.schemaDone, schemaReport{table: table, statement: s.SQL})
	return nil
}

// schemaReport is a schema change applied or warned about in the open
// batch, reported once the batch commits.
type schemaReport struct {
	table     change.TableName
	statement string // applied
	warning   string // warned about
	// notCarried: left out on the destination, and why.
	notCarried string
}

// reportSchema hands the schema changes of the batch just committed to the
// hooks.
func (a *Applier) reportSchema(ctx context.Context) {
	for _, r := range a.schemaDone {
		if r.notCarried != "" {
			a.log.Warn("expression not carried to the destination", "table", r.table.String(), "warning", r.notCarried)
			if a.cfg.SchemaHooks.NotCarried != nil {
				a.cfg.SchemaHooks.NotCarried(ctx, r.table, r.notCarried)
			}
			continue
		}
		if r.statement != "" {
			a.log.Info("Schema change applied", "table", r.table.String(), "statement", r.statement)
			if a.cfg.SchemaHooks.Applied != nil {
				a.cfg.SchemaHooks.Applied(ctx, r.table, r.statement)
			}
			continue
		}
		a.log.Warn("source table changed; the destination's schema is left as it is (schema_changes is warn)", "table", r.table.String(), "change", r.warning)
		if a.cfg.SchemaHooks.Warned != nil {
			a.cfg.SchemaHooks.Warned(ctx, r.table, r.warning)
		}
	}
	a.schemaDone = nil
}

// settleBinary updates the checked binary types of the table after its
// destination was altered: renamed columns keep their entry under the new
// name; added and retyped columns get one when the destination's type is
// the source's and built in, or an enum (created from the source's), whose
// binary forms are the same on both sides.
// Others stay unchecked, and checkBinary ends the run so that the next one
// decides the format again.
func (a *Applier) settleBinary(ctx context.Context, m *change.Mapping, rel *change.Relation, changes []colsync.Change) error {
	if !a.cfg.Binary {
		return nil
	}
	types := a.cfg.BinaryTypes[rel.Table]
	if types == nil {
		return nil
	}
	dest, err := a.destTable(ctx, m.Destination)
	if err != nil {
		return err
	}
	for _, c := range changes {
		switch c.Kind {
		case colsync.Drop:
			delete(types, c.OldName)
		case colsync.Rename:
			if oid, ok := types[c.OldName]; ok {
				delete(types, c.OldName)
				types[c.Name] = oid
			}
		case colsync.Retype, colsync.Add:
			dc, ok := dest.columns[c.Name]
			switch {
			case !ok:
			case dc.typeOID == c.Col.TypeOID && c.Col.TypeOID < firstNormalObjectID:
				types[c.Name] = c.Col.TypeOID
			case c.Col.TypeOID >= firstNormalObjectID:
				// The source's enum, created under the same name
				// (ensureTypes): its binary form is the label.
				var enum bool
				if err := a.conn.QueryRow(ctx, `SELECT typtype = 'e' FROM pg_catalog.pg_type WHERE oid = $1`, dc.typeOID).Scan(&enum); err != nil {
					return fmt.Errorf("read destination type of column %q: %w", c.Name, err)
				}
				if enum {
					types[c.Name] = c.Col.TypeOID
				}
			}
		}
	}
	return nil
}

// firstNormalObjectID is PostgreSQL's first OID of objects not built in.
const firstNormalObjectID = 16384
