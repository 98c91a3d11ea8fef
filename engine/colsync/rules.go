package colsync

import (
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Mode says how closely the destination follows the source's columns.
type Mode int

// The modes.
const (
	// Follow is schema_changes apply while streaming: the destination
	// takes the source's type exactly (the source converted its values),
	// a NOT NULL column added with a value for the older rows is added NOT
	// NULL, and a change whose values the stream does not carry asks for a
	// resync.
	Follow Mode = iota
	// Copying is the table about to be emptied and copied again: added
	// columns get what new rows need, the copy brings the values.
	Copying
	// Sync is sync-schema and a column the stream met that the destination
	// lacks: columns are added nullable, a destination type that holds
	// every source value is kept, and rows whose values the destination
	// cannot know are reported in a warning.
	Sync
)

// Plan is what the rules ask of the destination for one table.
type Plan struct {
	// Steps run in order; a Step without SQL is a note.
	Steps []Step
	// Warnings say what was left as it is and what to do about it.
	Warnings []string
}

func (p *Plan) add(s ...Step) { p.Steps = append(p.Steps, s...) }
func (p *Plan) warn(format string, args ...any) {
	p.Warnings = append(p.Warnings, fmt.Sprintf(format, args...))
}

// table names a mapping's two tables for the rules.
type table struct {
	dest, source change.TableName
	name         string // dest, quoted
}

func newTable(m change.Mapping) table {
	return table{dest: m.Destination, source: m.Source, name: m.Destination.Quoted()}
}

func (t table) alter(format string, args ...any) Step {
	return Step{SQL: "ALTER TABLE " + t.name + " " + fmt.Sprintf(format, args...)}
}

// NotCarriedNote says that the default or generation expression of source
// column c of table is left out on the destination, and why.
func NotCarriedNote(c Source, table change.TableName) string {
	if c.Generated {
		return fmt.Sprintf("generated column %s of %s is not carried to the destination as generated: its expression %s; the destination's column is a plain column that stays NULL",
			sqlquote.Ident(c.Name), table, c.NotCarried)
	}
	return fmt.Sprintf("default of column %s of %s is not carried to the destination: it %s", sqlquote.Ident(c.Name), table, c.NotCarried)
}

// ColumnDef is source column c's definition in ADD COLUMN: its name, type
// and generation expression (virtual only when the destination has
// virtual generated columns, stored otherwise).
func ColumnDef(c Source, virtual bool) string {
	def := sqlquote.Ident(c.Name) + " " + c.Type
	switch {
	case c.Generated && c.Virtual && virtual:
		def += " GENERATED ALWAYS AS (" + c.GenerationExpr + ") VIRTUAL"
	case c.Generated:
		def += " GENERATED ALWAYS AS (" + c.GenerationExpr + ") STORED"
	}
	return def
}

// defaultStep sets source column c's default on the destination (after an
// addition or a type change): left out for a default drawing from a
// sequence (UsesSequence), a note when its expression may not run there,
// else optional, since the destination may reject it.
func (t table) defaultStep(c Source, rejected string) []Step {
	switch {
	case !c.Described || c.Default == "" || UsesSequence(c.Default):
		return nil
	case c.NotCarried != "":
		return []Step{{NotCarried: NotCarriedNote(c, t.source)}}
	}
	s := t.alter("ALTER COLUMN %s SET DEFAULT %s", sqlquote.Ident(c.Name), c.Default)
	s.Optional = true
	s.Rejected = fmt.Sprintf(rejected, sqlquote.Ident(c.Name), t.name, c.Default)
	return []Step{s}
}

// addColumn adds source column c, which the destination lacks. The rows the
// destination has get the value the source's older rows have (Missing),
// then the source's default is set for new rows. A column whose older rows
// got values computed one by one (a volatile default, a sequence, an
// identity) asks for a resync while following, and is reported in a
// warning under Sync.
func (t table) addColumn(p *Plan, c Source, mode Mode, virtual bool) {
	col := sqlquote.Ident(c.Name)
	if c.Generated {
		if c.NotCarried != "" {
			p.Warnings = append(p.Warnings, NotCarriedNote(c, t.source))
			c.Generated = false
		}
		p.add(t.alter("ADD COLUMN %s", ColumnDef(c, virtual)))
		return
	}
	add := t.alter("ADD COLUMN %s", ColumnDef(c, virtual))
	missing := c.Described && c.Missing != nil
	computed := c.Described && !missing && (c.Default != "" || c.Identity)
	if missing {
		add.SQL += " DEFAULT " + sqlquote.Literal(*c.Missing) + "::" + c.Type
		if c.NotNull && mode == Follow {
			add.SQL += " NOT NULL"
		}
	}
	if computed && mode == Follow {
		add.Resync = fmt.Sprintf("column %s was added with values computed for every existing row (a volatile default or an identity), which the stream does not carry", col)
	}
	p.add(add)
	if missing {
		p.add(t.alter("ALTER COLUMN %s DROP DEFAULT", col))
	}
	for _, s := range t.defaultStep(c, "column %s of %s was added without the source's default %s, since the destination rejected it") {
		if s.NotCarried != "" && mode != Follow {
			p.Warnings = append(p.Warnings, s.NotCarried)
			continue
		}
		p.add(s)
	}
	if computed && mode == Sync {
		p.warn("column %s of %s was added with NULL in the rows the destination already had; if the source's older rows have values in it (a volatile default, a sequence or an identity, or a table rewrite since the column was added), resync the table",
			col, t.name)
	}
}

// retype gives destination column d source column c's type: a default of
// the old type is dropped first (it may not cast to the new one; the
// source changed its own along) and the source's set after. Following, a
// change the source made with a table rewrite asks for a resync. from is
// the known type (Follow only).
func (t table) retype(p *Plan, c Source, d Dest, from Known, mode Mode) {
	col := sqlquote.Ident(c.Name)
	if d.HasDefault {
		p.add(t.alter("ALTER COLUMN %s DROP DEFAULT", col))
	}
	s := t.alter("ALTER COLUMN %s TYPE %s USING %s::%s", col, c.Type, col, c.Type)
	if mode == Follow && !NoRewrite(from.TypeOID, from.TypeMod, c.TypeOID, c.TypeMod) {
		s.Resync = fmt.Sprintf("column %s changed type with a table rewrite on the source, whose new values the stream does not carry", col)
	}
	p.add(s)
	if !d.HasDefault {
		return
	}
	for _, s := range t.defaultStep(c, "column %s of %s changed type without the source's default %s, since the destination rejected it") {
		if s.NotCarried != "" && mode != Follow {
			p.Warnings = append(p.Warnings, s.NotCarried)
			continue
		}
		p.add(s)
	}
}

// needsRetype reports whether destination type dst must change for source
// type src: following, unless it is the same; otherwise unless it holds
// every value of src (Compatible).
func needsRetype(src, dst string, mode Mode) bool {
	if mode == Follow {
		return src != dst
	}
	return !Compatible(src, dst)
}

// kept handles destination column d that the source no longer has and
// that stays: it loses its NOT NULL (outside the primary key, without a
// default) so that new rows can leave it NULL.
func (t table) kept(p *Plan, d Dest) {
	w := fmt.Sprintf("column %s of %s no longer exists on source table %s; it is kept on the destination",
		sqlquote.Ident(d.Name), t.dest, t.source)
	switch {
	case d.PrimaryKey && d.NotNull && !d.HasDefault && !d.Generated && !d.Identity:
		w += ", but it is part of the destination's primary key, so new rows will fail until the key is changed"
	case Relax(d):
		p.add(t.alter("ALTER COLUMN %s DROP NOT NULL", sqlquote.Ident(d.Name)))
		w += " and no longer NOT NULL, so new rows leave it NULL"
	}
	p.Warnings = append(p.Warnings, w)
}

// Relax reports whether destination column d, which the source does not
// send (dropped or renamed there, and kept here), must lose its NOT NULL
// for new rows to be inserted: NOT NULL without a default, not generated,
// outside the primary key.
func Relax(d Dest) bool {
	return d.NotNull && !d.HasDefault && !d.Generated && !d.Identity && !d.PrimaryKey
}
