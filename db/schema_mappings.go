package db

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
)

// SchemaMapping maps a whole source schema into a destination schema
// (source_table "*" in the API): every table of the schema, also one
// created later, is replicated to the table of the same name in the
// destination schema. The tables it covers are MirrorTable rows with
// FromSchemaMapping set; an explicit mapping of a table of the schema wins
// over it.
type SchemaMapping struct {
	SourceSchema      string `json:"source_schema"`
	DestinationSchema string `json:"destination_schema"`
}

// Destination is where the schema mapping puts source table t.
func (s SchemaMapping) Destination(t change.TableName) change.TableName {
	return change.TableName{Schema: s.DestinationSchema, Name: t.Name}
}

// MirrorSchemaMappings returns the schemas a mirror maps as a whole, in the
// order they were given.
func (s *Store) MirrorSchemaMappings(ctx context.Context, mirrorID int64) ([]SchemaMapping, error) {
	return mirrorSchemaMappings(ctx, s.q, mirrorID)
}

func mirrorSchemaMappings(ctx context.Context, q Executor, mirrorID int64) ([]SchemaMapping, error) {
	rows, err := q.Query(ctx, `SELECT source_schema, destination_schema FROM mirror_schema_mappings
		WHERE mirror_id = $1 ORDER BY position, id`, mirrorID)
	if err != nil {
		return nil, fmt.Errorf("list schema mappings of mirror %d: %w", mirrorID, err)
	}
	defer rows.Close()
	out := []SchemaMapping{}
	for rows.Next() {
		var sm SchemaMapping
		if err := rows.Scan(&sm.SourceSchema, &sm.DestinationSchema); err != nil {
			return nil, fmt.Errorf("list schema mappings of mirror %d: %w", mirrorID, err)
		}
		out = append(out, sm)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list schema mappings of mirror %d: %w", mirrorID, err)
	}
	return out, nil
}

// replaceSchemaMappings makes schemas the mirror's complete set of schema
// mappings.
func replaceSchemaMappings(ctx context.Context, q Executor, mirrorID int64, schemas []SchemaMapping) error {
	if _, err := q.Exec(ctx, `DELETE FROM mirror_schema_mappings WHERE mirror_id = $1`, mirrorID); err != nil {
		return fmt.Errorf("replace schema mappings of mirror %d: %w", mirrorID, translate(err))
	}
	for i, sm := range schemas {
		if _, err := q.Exec(ctx, `INSERT INTO mirror_schema_mappings (mirror_id, position, source_schema, destination_schema)
			VALUES ($1, $2, $3, $4)`, mirrorID, i, sm.SourceSchema, sm.DestinationSchema); err != nil {
			return fmt.Errorf("add schema mapping %s to mirror %d: %w", sm.SourceSchema, mirrorID, translate(err))
		}
	}
	return nil
}

// MirrorTableAddFromSchema adds source table m, found in a schema the
// mirror maps as a whole, to the mirror's tables as pending with a copy
// requested (resync_requested_at: it is copied beside CDC also when the
// mirror skips initial snapshots), after the mirror's other tables. A
// table of that name that the mirror marked dropped (the source dropped and
// created it again) becomes pending again. It reports whether a table was
// added or brought back; a table the mirror has in another status is left
// alone.
func (s *Store) MirrorTableAddFromSchema(ctx context.Context, mirrorID int64, m change.Mapping) (bool, error) {
	tag, err := s.q.Exec(ctx, `INSERT INTO mirror_tables (mirror_id, position, source_schema, source_table,
			destination_schema, destination_table, from_schema_mapping, resync_requested_at)
		SELECT $1, coalesce(max(position), -1) + 1, $2, $3, $4, $5, true, now() FROM mirror_tables WHERE mirror_id = $1
		ON CONFLICT (mirror_id, source_schema, source_table) DO UPDATE SET status = 'pending', resync_requested_at = now()
			WHERE mirror_tables.status = 'dropped'`,
		mirrorID, m.Source.Schema, m.Source.Name, m.Destination.Schema, m.Destination.Name)
	if err != nil {
		return false, fmt.Errorf("add table %s to mirror %d: %w", m.Source, mirrorID, translate(err))
	}
	return tag.RowsAffected() > 0, nil
}

// MirrorTableSetDropped records that the source table of a mirror table no
// longer exists: status dropped. It reports false when the table was
// dropped already (or is not the mirror's).
func (s *Store) MirrorTableSetDropped(ctx context.Context, tableID int64) (bool, error) {
	tag, err := s.q.Exec(ctx, `UPDATE mirror_tables SET status = 'dropped', resync_requested_at = NULL
		WHERE id = $1 AND status <> 'dropped'`, tableID)
	if err != nil {
		return false, fmt.Errorf("mark table %d dropped: %w", tableID, translate(err))
	}
	return tag.RowsAffected() > 0, nil
}
