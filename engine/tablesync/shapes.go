package tablesync

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

// Shapes are source tables' columns as a copy records them (the live,
// not generated columns, by attnum, with names and types), by table.
type Shapes map[change.TableName][]positions.SourceColumn

// ShapeOf is the shape of a described source table: what a copy records
// as the mirror's known columns and what Config.Prepared is compared with.
func ShapeOf(t schemasync.Table) []positions.SourceColumn {
	var out []positions.SourceColumn
	for _, c := range t.Columns {
		if !c.Generated {
			out = append(out, positions.SourceColumn{Attnum: c.Attnum, Name: c.Name, TypeOID: c.TypeOID, TypeMod: c.TypeMod})
		}
	}
	return out
}

// ReadShapes reads the current shapes of the source tables on conn. A
// caller reads them before it prepares the destination tables for a copy
// and passes them as Config.Prepared.
func ReadShapes(ctx context.Context, conn schemasync.Conn, tables []change.TableName) (Shapes, error) {
	out := make(Shapes, len(tables))
	for _, t := range tables {
		desc, err := schemasync.Describe(ctx, conn, t)
		if err != nil {
			return nil, fmt.Errorf("read the columns of source table %s: %w", t, err)
		}
		out[t] = ShapeOf(desc)
	}
	return out, nil
}

// SourceChangedError is Run's answer when a source table's columns in the
// copy's snapshot differ from those its destination table was prepared
// from (Config.Prepared): a column change committed between the
// preparation and the snapshot is in neither the destination nor the
// stream after the snapshot. Nothing was copied or truncated; preparing
// the destination again and taking a new snapshot copies the table right.
type SourceChangedError struct {
	// Tables are the source tables whose columns changed.
	Tables []change.TableName
}

func (e *SourceChangedError) Error() string {
	return fmt.Sprintf("the columns of source %s changed while the copy started: the destination is prepared again and the copy starts over",
		tablesPhrase(e.Tables))
}

// changedSources lists the source tables of mappings whose shape in the
// snapshot (srcs, in the same order) differs from the prepared one; tables
// without a prepared shape are not compared.
func changedSources(mappings []change.Mapping, srcs []sourceTable, prepared Shapes) []change.TableName {
	var changed []change.TableName
	for i, m := range mappings {
		want, ok := prepared[m.Source]
		if ok && !slices.Equal(want, ShapeOf(srcs[i].desc)) {
			changed = append(changed, m.Source)
		}
	}
	slices.SortFunc(changed, func(a, b change.TableName) int { return strings.Compare(a.String(), b.String()) })
	return changed
}
