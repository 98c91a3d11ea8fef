package colsync

import (
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Stream plans what changes (from Diff: the known columns against the
// stream's new description of the table) need on the destination table of
// m while streaming under schema_changes apply (mode Follow), leaving out
// what the destination dest (its columns by name) shows already: a replay
// after a restart, a change made by hand. Every Change.Col that is added or
// retyped needs its Type.
//
// Drops, renames and additions come first, in the order of changes; type
// changes and the second half of renames through a temporary name (names
// that swap) come after every rename, since they name the new column.
func Stream(m change.Mapping, changes []Change, dest map[string]Dest) Plan {
	t := newTable(m)
	has := func(name string) bool { _, ok := dest[name]; return ok }
	sources := renameSources(changes)
	var p, finals Plan
	for _, c := range changes {
		oldEx, newEx := m.Excluded(c.OldName), m.Excluded(c.Name)
		switch c.Kind {
		case Drop:
			if !oldEx && has(c.OldName) {
				p.add(t.alter("DROP COLUMN %s", sqlquote.Ident(c.OldName)))
			}
		case Rename:
			if t.rename(&p, &finals, c, oldEx, newEx, has, sources) {
				t.addColumn(&p, c.Col, Follow, false)
			}
		case Retype:
			if newEx {
				continue
			}
			d, ok := dest[c.Name]
			if !ok {
				d, ok = dest[c.OldName]
			}
			switch {
			case !ok:
				// Dropped on the destination by hand: added with the
				// new type, as sync-schema would.
				t.addColumn(&finals, c.Col, Follow, false)
			case needsRetype(c.Col.Type, d.Type, Follow):
				t.retype(&finals, c.Col, d, c.Old, Follow)
			}
		case Add:
			if !newEx && !has(c.Name) {
				t.addColumn(&p, c.Col, Follow, false)
			}
		}
	}
	p.Steps = append(p.Steps, finals.Steps...)
	p.Warnings = append(p.Warnings, finals.Warnings...)
	return p
}

// Reshape plans, for the destination table of m that pgmirror created and
// that is about to be emptied and copied again, the drops and renames that
// bring its columns dst to the source's columns src: a destination column
// the source no longer has is dropped (outside the primary key): by its
// known attnum, or by name when the known columns do not name it; a column
// the source renamed since the destination last followed it (known) is
// renamed rather than added beside the old one, as Stream does it. SyncTable
// (mode Copying) then adds and retypes on the table as it is after these.
func Reshape(m change.Mapping, src []Source, dst []Dest, known []Known) Plan {
	t := newTable(m)
	byAttnum, byName := map[int]bool{}, map[string]bool{}
	for _, c := range src {
		byAttnum[c.Attnum], byName[c.Name] = true, true
	}
	knownAttnum := map[string]int{}
	for _, k := range known {
		knownAttnum[k.Name] = k.Attnum
	}
	var p, finals Plan
	left := map[string]bool{}
	for _, d := range dst {
		left[d.Name] = true
		if m.Excluded(d.Name) || d.PrimaryKey {
			continue
		}
		gone := !byName[d.Name]
		if attnum, ok := knownAttnum[d.Name]; ok {
			gone = !byAttnum[attnum]
		}
		if gone {
			p.add(t.alter("DROP COLUMN %s", sqlquote.Ident(d.Name)))
			delete(left, d.Name)
		}
	}
	var renames []Change
	for _, c := range Diff(known, src) {
		if c.Kind == Rename && left[c.OldName] {
			renames = append(renames, c)
		}
	}
	has := func(name string) bool { return left[name] }
	sources := renameSources(renames)
	for _, c := range renames {
		// A name the mapping excludes now is added by SyncTable.
		t.rename(&p, &finals, c, m.Excluded(c.OldName), m.Excluded(c.Name), has, sources)
	}
	p.Steps = append(p.Steps, finals.Steps...)
	return p
}

// SyncTable plans, by name, what the destination table of m (columns dst)
// needs to take the rows of its source table (columns src) under mode Sync
// or Copying: columns it lacks are added (AddColumn's rules), a column
// whose type cannot hold every source value (Compatible) gets the source's
// type, and a column the source no longer has is kept, losing its NOT NULL
// where new rows would need it (Relax), with a warning. Excluded and
// generated columns are left alone; nothing is dropped.
func SyncTable(m change.Mapping, src []Source, dst []Dest, mode Mode, virtualGenerated bool) Plan {
	t := newTable(m)
	dest := map[string]Dest{}
	for _, d := range dst {
		dest[d.Name] = d
	}
	srcNames := map[string]bool{}
	var p Plan
	for _, c := range src {
		srcNames[c.Name] = true
		if m.Excluded(c.Name) {
			continue
		}
		d, ok := dest[c.Name]
		switch {
		case !ok:
			t.addColumn(&p, c, mode, virtualGenerated)
		case c.Generated || d.Generated:
			// Generated on either side: nothing is copied into it.
		case needsRetype(c.Type, d.Type, mode):
			t.retype(&p, c, d, Known{}, mode)
		}
	}
	for _, d := range dst {
		if !srcNames[d.Name] && !m.Excluded(d.Name) {
			t.kept(&p, d)
		}
	}
	return p
}

// Attributes plans the NOT NULL and DEFAULT changes that bring the columns
// both sides have (by name) to the source's, for a captured schema change:
// excluded, generated and identity columns are left alone, and so are
// defaults drawing from a sequence on either side (UsesSequence) and
// defaults whose expression may not run on the destination (NotCarried,
// reported by the capture). A NOT NULL of the destination's primary key
// stays.
func Attributes(m change.Mapping, src []Source, dest map[string]Dest) Plan {
	t := newTable(m)
	var p Plan
	for _, c := range src {
		have, ok := dest[c.Name]
		if !ok || c.Generated || c.Identity || have.Generated || have.Identity || m.Excluded(c.Name) {
			continue
		}
		col := sqlquote.Ident(c.Name)
		switch {
		case c.NotNull && !have.NotNull:
			p.add(t.alter("ALTER COLUMN %s SET NOT NULL", col))
		case !c.NotNull && have.NotNull && !have.PrimaryKey:
			p.add(t.alter("ALTER COLUMN %s DROP NOT NULL", col))
		}
		haveDef := ""
		if have.Default != nil {
			haveDef = *have.Default
		}
		if UsesSequence(c.Default) || UsesSequence(haveDef) || c.NotCarried != "" {
			continue
		}
		switch {
		case c.Default == "" && have.Default != nil:
			p.add(t.alter("ALTER COLUMN %s DROP DEFAULT", col))
		case c.Default != "" && (have.Default == nil || haveDef != c.Default):
			p.add(t.alter("ALTER COLUMN %s SET DEFAULT %s", col, c.Default))
		}
	}
	return p
}

// renameSources returns the old names of the renames among changes.
func renameSources(changes []Change) map[string]bool {
	out := map[string]bool{}
	for _, c := range changes {
		if c.Kind == Rename {
			out[c.OldName] = true
		}
	}
	return out
}

// rename renames the column of rename c on the destination (has tells the
// names it has now; sources are the names renamed away in the same
// change): a name another rename frees goes through a temporary name, whose
// second half goes to finals; a name taken by a column that stays is left
// alone. A column the mapping excludes under its new name is dropped; one
// it excluded under its old name must be added, which rename reports.
func (t table) rename(p, finals *Plan, c Change, oldEx, newEx bool, has func(string) bool, sources map[string]bool) (add bool) {
	switch {
	case oldEx && newEx:
	case oldEx:
		return !has(c.Name)
	case newEx:
		if has(c.OldName) {
			p.add(t.alter("DROP COLUMN %s", sqlquote.Ident(c.OldName)))
		}
	case has(c.OldName) && !has(c.Name):
		p.add(t.alter("RENAME COLUMN %s TO %s", sqlquote.Ident(c.OldName), sqlquote.Ident(c.Name)))
	case has(c.OldName) && sources[c.Name]:
		tmp := sqlquote.Ident(fmt.Sprintf("_pgmirror_renaming_%d", c.Attnum))
		p.add(t.alter("RENAME COLUMN %s TO %s", sqlquote.Ident(c.OldName), tmp))
		finals.add(t.alter("RENAME COLUMN %s TO %s", tmp, sqlquote.Ident(c.Name)))
	}
	return false
}
