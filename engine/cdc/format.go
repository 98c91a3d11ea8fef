package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

// binaryTypes decides whether the run can ask pgoutput for binary values
// and carry them untouched into binary COPY on the destination: the source
// runs PostgreSQL 14 or later, every column the source sends (excluded ones
// too) has a portable binary form, and every replicated column has the
// identical type on both sides (schemasync.BinaryCompatible). It returns the
// checked source type OID of every replicated column, or nil when the run
// must use text. The applier stops the run (apply.ErrBinaryMismatch) when a
// column arrives whose type was not checked here, and the next run decides
// again.
//
// With tracked (the run applies source column changes itself, see
// Config.SchemaChanges), columns whose types differ, or that only one side
// has, do not force text: the source may have changed ahead of the stream,
// and the applier settles each such column's format when it applies the
// change (trackedBinaryTypes).
func binaryTypes(ctx context.Context, srv pgversion.Server, src, dst *pgx.Conn, tables []change.Mapping, tracked bool) (map[change.TableName]map[string]uint32, error) {
	if !srv.BinaryOutput() {
		return nil, nil
	}
	out := make(map[change.TableName]map[string]uint32, len(tables))
	for _, m := range tables {
		st, err := schemasync.Describe(ctx, src, m.Source)
		if errors.Is(err, schemasync.ErrTableNotFound) {
			return nil, nil // the apply reports a missing table itself
		}
		if err != nil {
			return nil, fmt.Errorf("choose stream format: source: %w", err)
		}
		dt, err := schemasync.Describe(ctx, dst, m.Destination)
		if errors.Is(err, schemasync.ErrTableNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("choose stream format: destination: %w", err)
		}
		for _, c := range st.Columns {
			if !c.Generated && !c.BinarySafe {
				return nil, nil
			}
		}
		if tracked {
			out[m.Source] = trackedBinaryTypes(st, dt, m)
			continue
		}
		if !schemasync.BinaryCompatible(st, dt, m) {
			return nil, nil
		}
		cols := map[string]uint32{}
		for _, c := range st.Replicated(m) {
			cols[c.Name] = c.TypeOID
		}
		out[m.Source] = cols
	}
	return out, nil
}

// trackedBinaryTypes is binaryTypes' check of one table with tracked
// columns: the destination's built-in columns (the stream, which may be
// behind the source's catalog, sends them with their destination type until
// it reaches a change), and the replicated source columns with the
// identical portable type on the destination.
func trackedBinaryTypes(st, dt schemasync.Table, m change.Mapping) map[string]uint32 {
	cols := map[string]uint32{}
	for _, dc := range dt.Columns {
		if !dc.Generated && !m.Excluded(dc.Name) && dc.BinarySafe && dc.TypeOID < firstNormalOID {
			cols[dc.Name] = dc.TypeOID
		}
	}
	for _, c := range st.Replicated(m) {
		if dc, ok := dt.Column(c.Name); ok && dc.Type == c.Type && c.BinarySafe && dc.BinarySafe {
			cols[c.Name] = c.TypeOID
		}
	}
	return cols
}

// firstNormalOID is PostgreSQL's first OID of objects not built in: types
// below it have the same OID and binary form in every cluster.
const firstNormalOID = 16384
