package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
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
// destination already shows it.

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

// columnChange is one difference between the known columns and a new
// description of the table.
type columnChange struct {
	kind    string // "drop", "rename", "type", "add"
	attnum  int
	oldName string
	name    string
	oldType knownColumn
	col     change.Column
}

func (c columnChange) String() string {
	switch c.kind {
	case "drop":
		return fmt.Sprintf("column %q dropped", c.oldName)
	case "rename":
		return fmt.Sprintf("column %q renamed to %q", c.oldName, c.name)
	case "type":
		return fmt.Sprintf("column %q changed type", c.name)
	default:
		return fmt.Sprintf("column %q added", c.name)
	}
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

// diffColumns lists the changes from known to rel given rel's attnums.
func diffColumns(known []knownColumn, rel *change.Relation, attnums []int) []columnChange {
	byAttnum := map[int]knownColumn{}
	for _, k := range known {
		byAttnum[k.Attnum] = k
	}
	kept := map[int]bool{}
	var out []columnChange
	for i, c := range rel.Columns {
		k, ok := byAttnum[attnums[i]]
		if !ok {
			out = append(out, columnChange{kind: "add", attnum: attnums[i], name: c.Name, col: c})
			continue
		}
		kept[k.Attnum] = true
		if k.Name != c.Name {
			out = append(out, columnChange{kind: "rename", attnum: k.Attnum, oldName: k.Name, name: c.Name, col: c})
		}
		if k.TypeOID != c.TypeOID || k.TypeMod != c.TypeMod {
			out = append(out, columnChange{kind: "type", attnum: k.Attnum, oldName: k.Name, name: c.Name, oldType: k, col: c})
		}
	}
	for _, k := range known {
		if !kept[k.Attnum] {
			out = append(out, columnChange{kind: "drop", attnum: k.Attnum, oldName: k.Name, name: k.Name})
		}
	}
	order := map[string]int{"drop": 0, "rename": 1, "type": 2, "add": 3}
	slices.SortStableFunc(out, func(x, y columnChange) int { return order[x.kind] - order[y.kind] })
	return out
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
	steps, err := a.schemaSteps(ctx, m, dest, changes, cat)
	if err != nil {
		return err
	}
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
			if s.resync != "" && a.cfg.SchemaHooks.Resync != nil {
				if err := a.cfg.SchemaHooks.Resync(ctx, rel.Table, s.resync); err != nil {
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

// schemaStep is one statement a change needs on the destination.
type schemaStep struct {
	sql string
	// optional: a failure is rolled back to a savepoint and reported
	// instead of failing the batch (a default the destination rejects).
	optional bool
	// resync, when set, says why the table must be copied again after it.
	resync string
	// notCarried, when set, replaces the statement: what was left out
	// and why.
	notCarried string
}

// schemaSteps returns the statements that bring the destination to the
// changed source table, leaving out what the destination shows already
// (a replay after a restart, a change made by hand).
func (a *Applier) schemaSteps(ctx context.Context, m *change.Mapping, dest *destTable, changes []columnChange, cat catalogView) ([]schemaStep, error) {
	b := &stepBuilder{a: a, m: m, dest: dest, cat: cat, name: m.Destination.Quoted(), renameSources: map[string]bool{}}
	// Renames to a name another rename frees go through temporary names.
	for _, c := range changes {
		if c.kind == "rename" {
			b.renameSources[c.oldName] = true
		}
	}
	for _, c := range changes {
		oldEx, newEx := m.Excluded(c.oldName), m.Excluded(c.name)
		var err error
		switch c.kind {
		case "drop":
			if !oldEx && b.has(c.oldName) {
				b.dropColumn(c.oldName)
			}
		case "rename":
			err = b.rename(ctx, c, oldEx, newEx)
		case "type":
			if !newEx {
				err = b.retype(ctx, c)
			}
		case "add":
			if !newEx && !b.has(c.name) {
				err = b.addColumn(ctx, c)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	// Type changes run after every rename (they name the new column).
	return append(b.steps, b.finals...), nil
}

// stepBuilder gathers the statements of schemaSteps: steps first, then
// finals (type changes and what goes after every rename).
type stepBuilder struct {
	a             *Applier
	m             *change.Mapping
	dest          *destTable
	cat           catalogView
	name          string          // the destination table, quoted
	renameSources map[string]bool // columns renamed away in this change
	steps, finals []schemaStep
}

func (b *stepBuilder) has(col string) bool { _, ok := b.dest.columns[col]; return ok }

func (b *stepBuilder) dropColumn(col string) {
	b.steps = append(b.steps, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s", b.name, sqlquote.Ident(col))})
}

// rename renames a column on the destination, or adds or drops it when the
// mapping excludes its old or new name.
func (b *stepBuilder) rename(ctx context.Context, c columnChange, oldEx, newEx bool) error {
	name := b.name
	switch {
	case oldEx && newEx:
	case oldEx:
		if !b.has(c.name) {
			return b.addColumn(ctx, c)
		}
	case newEx:
		if b.has(c.oldName) {
			b.dropColumn(c.oldName)
		}
	case b.has(c.oldName) && !b.has(c.name):
		b.steps = append(b.steps, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", name, sqlquote.Ident(c.oldName), sqlquote.Ident(c.name))})
	case b.has(c.oldName) && b.renameSources[c.name]:
		tmp := fmt.Sprintf("_pgmirror_renaming_%d", c.attnum)
		b.steps = append(b.steps, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", name, sqlquote.Ident(c.oldName), sqlquote.Ident(tmp))})
		b.finals = append(b.finals, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s RENAME COLUMN %s TO %s", name, sqlquote.Ident(tmp), sqlquote.Ident(c.name))})
	}
	return nil
}

// addColumn adds the source's column c: with its missing value as a
// default for the existing rows when the source has one, marked for a
// resync when the source computed values for every row (a volatile default
// or an identity), and with the source's default after.
func (b *stepBuilder) addColumn(ctx context.Context, c columnChange) error {
	typ, err := b.a.sourceType(ctx, c.col, b.cat, c.attnum)
	if err != nil {
		return err
	}
	name, col := b.name, sqlquote.Ident(c.name)
	sc, fromCatalog := b.cat.byAttnum[c.attnum]
	fromCatalog = fromCatalog && !sc.Dropped && sc.Name == c.name
	def := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s %s", name, col, typ)
	switch {
	case fromCatalog && sc.Missing != nil:
		def += " DEFAULT " + sqlquote.Literal(*sc.Missing) + "::" + typ
		if sc.NotNull {
			def += " NOT NULL"
		}
		b.steps = append(b.steps, schemaStep{sql: def})
		b.steps = append(b.steps, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", name, col)})
	case fromCatalog && (sc.Default != "" || sc.Identity):
		// A volatile default or an identity: the source rewrote the
		// table with values the stream did not carry.
		b.steps = append(b.steps, schemaStep{sql: def,
			resync: fmt.Sprintf("column %s was added with values computed for every existing row (a volatile default or an identity), which the stream does not carry", col)})
	default:
		b.steps = append(b.steps, schemaStep{sql: def})
	}
	if fromCatalog && sc.Default != "" {
		b.steps = append(b.steps, defaultStep(b.m, col, sc))
	}
	return nil
}

// retype changes a column's type to the source's, after every rename: a
// default of the old type is dropped first and the source's set after, and
// a change the source made with a table rewrite is marked for a resync.
func (b *stepBuilder) retype(ctx context.Context, c columnChange) error {
	typ, err := b.a.sourceType(ctx, c.col, b.cat, c.attnum)
	if err != nil {
		return err
	}
	name, col := b.name, sqlquote.Ident(c.name)
	current, ok := b.dest.columns[c.name]
	if !ok {
		current, ok = b.dest.columns[c.oldName]
	}
	if ok && current.typ == typ {
		return nil
	}
	// A default of the old type may not cast to the new one (the source's
	// was changed along, which no Relation message shows): drop it first
	// and set the source's after.
	if ok && current.hasDefault {
		b.finals = append(b.finals, schemaStep{sql: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT", name, col)})
	}
	step := schemaStep{sql: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::%s", name, col, typ, col, typ)}
	if !noRewrite(c.oldType.TypeOID, c.oldType.TypeMod, c.col.TypeOID, c.col.TypeMod) {
		step.resync = fmt.Sprintf("column %s changed type with a table rewrite on the source, whose new values the stream does not carry", col)
	}
	b.finals = append(b.finals, step)
	if sc, found := b.cat.byAttnum[c.attnum]; ok && current.hasDefault && found && !sc.Dropped && sc.Default != "" {
		b.finals = append(b.finals, defaultStep(b.m, col, sc))
	}
	return nil
}

// defaultStep sets the source's default of column col (quoted), or, when
// its expression may not run on the destination, says so instead.
func defaultStep(m *change.Mapping, col string, sc SourceColumn) schemaStep {
	if sc.DefaultNotCarried != "" {
		return schemaStep{notCarried: fmt.Sprintf("default of column %s of %s is not carried to the destination: %s", col, m.Source, sc.DefaultNotCarried)}
	}
	return schemaStep{sql: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s", m.Destination.Quoted(), col, sc.Default), optional: true}
}

// ensureTypes creates on the destination the user-defined types that added
// and retyped columns need, in the batch transaction.
func (a *Applier) ensureTypes(ctx context.Context, m *change.Mapping, rel *change.Relation, changes []columnChange) error {
	var oids []uint32
	for _, c := range changes {
		if (c.kind == "add" || c.kind == "type" || c.kind == "rename") && c.col.TypeOID >= firstNormalObjectID && !m.Excluded(c.name) {
			oids = append(oids, c.col.TypeOID)
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

// sourceType is the SQL type of a column as the source describes it now.
func (a *Applier) sourceType(ctx context.Context, c change.Column, cat catalogView, attnum int) (string, error) {
	if sc, ok := cat.byAttnum[attnum]; ok && !sc.Dropped && sc.TypeOID == c.TypeOID && sc.TypeMod == c.TypeMod && sc.Type != "" {
		return sc.Type, nil
	}
	if a.cfg.Source == nil {
		return "", fmt.Errorf("the type of source column %q is unknown (no source catalog)", c.Name)
	}
	return a.cfg.Source.FormatType(ctx, c.TypeOID, c.TypeMod)
}

// execStep runs one statement in the batch transaction and reports it.
func (a *Applier) execStep(ctx context.Context, table change.TableName, s schemaStep) error {
	if s.notCarried != "" {
		a.schemaDone = append(a.schemaDone, schemaReport{table: table, notCarried: s.notCarried})
		return nil
	}
	if s.optional {
		if _, err := a.conn.Exec(ctx, "SAVEPOINT pgmirror_schema_step"); err != nil {
			return fmt.Errorf("apply schema change to the destination: %w", err)
		}
		if _, err := a.conn.Exec(ctx, s.sql); err != nil {
			if _, rerr := a.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT pgmirror_schema_step"); rerr != nil {
				return fmt.Errorf("apply schema change to the destination: %s: %w", s.sql, rerr)
			}
			a.log.Warn("the destination rejected a column default of the source; the column was added without it", "table", table.String(), "statement", s.sql, "error", err.Error())
			return nil
		}
		if _, err := a.conn.Exec(ctx, "RELEASE SAVEPOINT pgmirror_schema_step"); err != nil {
			return fmt.Errorf("apply schema change to the destination: %w", err)
		}
	} else if _, err := a.conn.Exec(ctx, s.sql); err != nil {
		return fmt.Errorf("apply schema change to the destination: %s: %w", s.sql, err)
	}
	a.schemaDone = append(a.schemaDone, schemaReport{table: table, statement: s.sql})
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
func (a *Applier) settleBinary(ctx context.Context, m *change.Mapping, rel *change.Relation, changes []columnChange) error {
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
		switch c.kind {
		case "drop":
			delete(types, c.oldName)
		case "rename":
			if oid, ok := types[c.oldName]; ok {
				delete(types, c.oldName)
				types[c.name] = oid
			}
		case "type", "add":
			dc, ok := dest.columns[c.name]
			switch {
			case !ok:
			case dc.typeOID == c.col.TypeOID && c.col.TypeOID < firstNormalObjectID:
				types[c.name] = c.col.TypeOID
			case c.col.TypeOID >= firstNormalObjectID:
				// The source's enum, created under the same name
				// (ensureTypes): its binary form is the label.
				var enum bool
				if err := a.conn.QueryRow(ctx, `SELECT typtype = 'e' FROM pg_catalog.pg_type WHERE oid = $1`, dc.typeOID).Scan(&enum); err != nil {
					return fmt.Errorf("read destination type of column %q: %w", c.name, err)
				}
				if enum {
					types[c.name] = c.col.TypeOID
				}
			}
		}
	}
	return nil
}

// firstNormalObjectID is PostgreSQL's first OID of objects not built in.
const firstNormalObjectID = 16384

// Built-in type OIDs whose type changes noRewrite knows.
const (
	oidText    = 25
	oidVarchar = 1043
	oidNumeric = 1700
	oidVarbit  = 1562
)

// noRewrite reports a type change that PostgreSQL makes without rewriting
// the table (binary-coercible, values unchanged): a longer varchar or
// bit varying, varchar to text or unbounded, a numeric with more precision
// and the same scale or unbounded.
func noRewrite(oldOID uint32, oldMod int32, newOID uint32, newMod int32) bool {
	switch {
	case oldOID == oidVarchar && newOID == oidText:
		return true
	case oldOID == oidText && newOID == oidVarchar && newMod == -1:
		return true
	case oldOID != newOID:
		return false
	case newMod == -1:
		return oldOID == oidVarchar || oldOID == oidVarbit || oldOID == oidNumeric
	case oldMod == -1:
		return false
	case oldOID == oidVarchar || oldOID == oidVarbit:
		return newMod >= oldMod
	case oldOID == oidNumeric:
		// typmod - 4 = precision << 16 | scale
		return (newMod-4)&0xffff == (oldMod-4)&0xffff && (newMod-4)>>16 >= (oldMod-4)>>16
	}
	return false
}
