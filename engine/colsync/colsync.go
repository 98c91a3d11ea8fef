package colsync

import (
	"fmt"
	"slices"
	"strings"
)

// Source is a source table's column as the rules need it.
type Source struct {
	// Attnum is the column's number (pg_attribute.attnum), which a rename
	// keeps.
	Attnum int
	Name   string
	// Type is the column's SQL type as format_type prints it with only
	// pg_catalog on the search path, usable in DDL on the destination.
	Type    string
	TypeOID uint32
	TypeMod int32
	// Described reports that the fields below were read from the source
	// catalog. While streaming they are only when the catalog (which may be
	// ahead of the stream) still has the column under the name and type the
	// stream describes; otherwise the column is added bare.
	Described bool
	NotNull   bool
	// Default is the default's expression ("" for none).
	Default string
	// Missing is the value rows older than the column have (attmissingval):
	// set when it was added with a default that is not volatile, without a
	// table rewrite.
	Missing *string
	// Identity reports an identity column.
	Identity bool
	// Generated reports a generated column, GenerationExpr its expression
	// and Virtual a virtual one (PostgreSQL 18).
	Generated      bool
	GenerationExpr string
	Virtual        bool
	// NotCarried says why the default or generation expression may not run
	// on the destination (engine/exprcheck); "" when it may.
	NotCarried string
}

// Dest is a destination table's column.
type Dest struct {
	Name string
	// Type is format_type with only pg_catalog on the search path.
	Type    string
	NotNull bool
	// Default is the default's expression, nil for none (Attributes);
	// HasDefault reports one.
	Default    *string
	HasDefault bool
	Generated  bool
	Identity   bool
	PrimaryKey bool
}

// Known is a source column as the destination last followed it: what the
// mirror recorded with the destination's shape (_pgmirror.source_columns).
// TypeOID is 0 when only the name was recorded.
type Known struct {
	Attnum  int
	Name    string
	TypeOID uint32
	TypeMod int32
}

// ChangeKind is what happened to one source column.
type ChangeKind string

// The change kinds, in the order Diff returns them.
const (
	Drop   ChangeKind = "drop"
	Rename ChangeKind = "rename"
	Retype ChangeKind = "type"
	Add    ChangeKind = "add"
)

var kindOrder = map[ChangeKind]int{Drop: 0, Rename: 1, Retype: 2, Add: 3}

// Change is one difference between the known columns and the source's
// columns now, matched by attnum.
type Change struct {
	Kind   ChangeKind
	Attnum int
	// OldName is the known name (drop, rename, type); Name the name now.
	OldName, Name string
	// Old is the known column (drop, rename, type).
	Old Known
	// Col is the source column now (rename, type, add).
	Col Source
}

// String describes the change for the mirror's log.
func (c Change) String() string {
	switch c.Kind {
	case Drop:
		return fmt.Sprintf("column %q dropped", c.OldName)
	case Rename:
		return fmt.Sprintf("column %q renamed to %q", c.OldName, c.Name)
	case Retype:
		return fmt.Sprintf("column %q changed type", c.Name)
	default:
		return fmt.Sprintf("column %q added", c.Name)
	}
}

// Diff lists the changes from the known columns to the source's columns
// now, matched by attnum: drops first, then renames, type changes and
// additions, each in attnum order. A column whose known TypeOID is 0 (only
// its name was recorded) never counts as retyped.
func Diff(known []Known, now []Source) []Change {
	byAttnum := map[int]Known{}
	for _, k := range known {
		byAttnum[k.Attnum] = k
	}
	kept := map[int]bool{}
	var out []Change
	for _, c := range now {
		k, ok := byAttnum[c.Attnum]
		if !ok {
			out = append(out, Change{Kind: Add, Attnum: c.Attnum, Name: c.Name, Col: c})
			continue
		}
		kept[k.Attnum] = true
		if k.Name != c.Name {
			out = append(out, Change{Kind: Rename, Attnum: k.Attnum, OldName: k.Name, Name: c.Name, Old: k, Col: c})
		}
		if k.TypeOID != 0 && (k.TypeOID != c.TypeOID || k.TypeMod != c.TypeMod) {
			out = append(out, Change{Kind: Retype, Attnum: k.Attnum, OldName: k.Name, Name: c.Name, Old: k, Col: c})
		}
	}
	for _, k := range known {
		if !kept[k.Attnum] {
			out = append(out, Change{Kind: Drop, Attnum: k.Attnum, OldName: k.Name, Name: k.Name, Old: k})
		}
	}
	slices.SortStableFunc(out, func(x, y Change) int { return kindOrder[x.Kind] - kindOrder[y.Kind] })
	return out
}

// Step is one thing a change needs on the destination: a statement to run,
// or a note of what was left out.
type Step struct {
	// SQL is the statement ("" for a note).
	SQL string
	// Optional marks a statement the destination may reject (a default
	// whose expression it cannot evaluate): the executor runs it under a
	// savepoint, undoes it alone on rejection and reports Rejected with
	// the destination's reason.
	Optional bool
	Rejected string
	// Resync, when set, says why the table must be copied again after the
	// statement (values the stream does not carry).
	Resync string
	// NotCarried, for a note, says what was left out on the destination
	// and why (an expression that may not run there).
	NotCarried string
}

// UsesSequence reports a default that draws from a sequence. Such a default
// is never set or changed on an existing destination column: the source's
// sequence is not the destination's, and the destination's own sequences
// (serial and identity columns) are made only when pgmirror creates the
// table.
func UsesSequence(def string) bool { return strings.Contains(def, "nextval(") }
