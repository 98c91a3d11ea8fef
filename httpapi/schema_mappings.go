package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/preflight"
	"github.com/pgmirror/pgmirror/engine/session"
)

// wildcardTable as source_table maps every table of source_schema, also
// tables created there later (with destination_table "*" too: each lands
// in destination_schema under its own name).
const wildcardTable = "*"

// isSchemaMapping reports whether t maps a whole schema.
func isSchemaMapping(t tableMapping) bool { return t.SourceTable == wildcardTable }

// validateSchemaMappings returns the mappings of whole schemas among in,
// rejecting the forms that cannot work: destination_table other than "*",
// excluded columns (the tables are not known in advance), a schema mapped
// twice, two schemas mapped into one destination schema (their tables'
// names could collide), a schema mapped onto itself on the same peer, and
// "*" as destination_table of a single table.
func validateSchemaMappings(in []tableMapping, samePeer bool) ([]db.SchemaMapping, error) {
	var out []db.SchemaMapping
	sources := map[string]int{}
	dests := map[string]int{}
	for i, t := range in {
		if !isSchemaMapping(t) {
			if t.DestinationTable == wildcardTable {
				return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] has destination_table \"*\" but source_table %q: \"*\" maps a whole schema and must be given as both source_table and destination_table", i, t.SourceTable)
			}
			continue
		}
		if t.DestinationTable != wildcardTable {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] maps the whole schema %s (source_table \"*\"): its tables keep their names, so set destination_table to \"*\" as well", i, t.SourceSchema)
		}
		if len(t.ExcludeColumns) > 0 {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] maps the whole schema %s (source_table \"*\"), which cannot exclude columns: map the tables whose columns you want to leave out by name (an explicit mapping of a table wins over its schema's)", i, t.SourceSchema)
		}
		if t.SourceSchema == wildcardTable || t.DestinationSchema == wildcardTable {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d]: source_schema and destination_schema must name one schema each, not \"*\"", i)
		}
		if err := checkIdentifiers(i, t); err != nil {
			return nil, err
		}
		if j, dup := sources[t.SourceSchema]; dup {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] and table_mappings[%d] both map the whole schema %s: map each schema once", j, i, t.SourceSchema)
		}
		if j, dup := dests[t.DestinationSchema]; dup {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] and table_mappings[%d] both map a whole schema into destination schema %s, where tables of the same name would collide: give each its own destination schema", j, i, t.DestinationSchema)
		}
		if samePeer && t.SourceSchema == t.DestinationSchema {
			return nil, errorf(http.StatusBadRequest, "Invalid request: table_mappings[%d] would replicate schema %s onto itself (source and destination are the same peer): choose another destination schema", i, t.SourceSchema)
		}
		sources[t.SourceSchema], dests[t.DestinationSchema] = i, i
		out = append(out, db.SchemaMapping{SourceSchema: t.SourceSchema, DestinationSchema: t.DestinationSchema})
	}
	return out, nil
}

// expandSchemas adds to explicit the tables the schema mappings cover now:
// every table of each schema that explicit does not map by name (an
// explicit mapping wins), under its own name in the destination schema. It
// returns all mappings and the source tables that come from a schema
// mapping. A schema that does not exist, a table whose destination an
// explicit mapping already writes to, and a mirror left without any table
// are 400s.
func (h *handlers) expandSchemas(ctx context.Context, source db.Peer, explicit []change.Mapping, schemas []db.SchemaMapping) ([]change.Mapping, map[change.TableName]bool, error) {
	if len(schemas) == 0 {
		return explicit, nil, nil
	}
	conn, err := h.connectPeer(ctx, source)
	if isRefusal(err) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, errorf(http.StatusBadRequest, "Could not reach the source peer %q: %s. Check that it is running and that its settings are right (POST /v1/peers/%s/test)", source.Name, err, source.Name)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	mapped := map[change.TableName]bool{}
	destOf := map[change.TableName]change.TableName{}
	for _, m := range explicit {
		mapped[m.Source] = true
		destOf[m.Destination] = m.Source
	}
	all := append([]change.Mapping(nil), explicit...)
	from := map[change.TableName]bool{}
	for _, sm := range schemas {
		tables, exists, err := preflight.SchemaTables(qctx, conn, sm.SourceSchema)
		if err != nil {
			return nil, nil, errorf(http.StatusBadRequest, "Could not list the tables of schema %s on the source peer %q: %s", sm.SourceSchema, source.Name, session.Scrub(err.Error(), conn.Config().Password))
		}
		if !exists {
			return nil, nil, errorf(http.StatusBadRequest, "Invalid request: schema %s does not exist on the source peer %q: check its name (it is case-sensitive) or create it first", sm.SourceSchema, source.Name)
		}
		for _, t := range tables {
			if mapped[t] {
				continue
			}
			dest := sm.Destination(t)
			if other, taken := destOf[dest]; taken {
				return nil, nil, errorf(http.StatusBadRequest, "Invalid request: table %s of the mapped schema %s would be written to %s, which the mapping of %s writes to already: map %s by name to another destination table, or give the other mapping another destination", t, sm.SourceSchema, dest, other, t)
			}
			destOf[dest] = t
			from[t] = true
			all = append(all, change.Mapping{Source: t, Destination: dest})
		}
	}
	if len(all) == 0 {
		return nil, nil, errorf(http.StatusBadRequest, "Invalid request: the mapped schemas have no tables on the source peer %q yet, so the mirror would have none: create a table first or map one by name", source.Name)
	}
	return all, from, nil
}

// givenMappings is a mirror's table mappings as the user gave them: the
// tables mapped by name, then each schema mapped as a whole (source_table
// and destination_table "*").
func givenMappings(tables []db.MirrorTable, schemas []db.SchemaMapping) []tableMapping {
	out := make([]tableMapping, 0, len(tables)+len(schemas))
	for _, t := range tables {
		if !t.FromSchemaMapping {
			out = append(out, mappingResponse(t))
		}
	}
	for _, sm := range schemas {
		out = append(out, tableMapping{SourceSchema: sm.SourceSchema, SourceTable: wildcardTable,
			DestinationSchema: sm.DestinationSchema, DestinationTable: wildcardTable})
	}
	return out
}

// expandedMappings are the tables a mirror replicates because their schema
// is mapped as a whole.
func expandedMappings(tables []db.MirrorTable) []tableMapping {
	out := []tableMapping{}
	for _, t := range tables {
		if t.FromSchemaMapping {
			out = append(out, mappingResponse(t))
		}
	}
	return out
}
