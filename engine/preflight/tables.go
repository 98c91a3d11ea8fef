package preflight

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
)

// UserTables lists the tables a database offers for mirroring: ordinary
// tables and partitioned roots (not their partitions), outside the system
// schemas and pgmirror's own _pgmirror schema, ordered by schema and name.
func UserTables(ctx context.Context, conn Queryer) ([]change.TableName, error) {
	rows, err := conn.Query(ctx, `
		SELECT n.nspname, c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast', '_pgmirror')
		  AND n.nspname NOT LIKE 'pg\_temp\_%' AND n.nspname NOT LIKE 'pg\_toast\_temp\_%'
		ORDER BY n.nspname, c.relname`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	defer rows.Close()
	out := []change.TableName{}
	for rows.Next() {
		var t change.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, fmt.Errorf("list tables: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	return out, nil
}

// SchemaTables lists the tables of one schema that can be mirrored:
// ordinary tables and partitioned roots (not their partitions), permanent
// ones only (unlogged and temporary tables cannot be published), ordered by
// name. exists is false when the schema does not exist.
func SchemaTables(ctx context.Context, conn Queryer, schema string) (tables []change.TableName, exists bool, err error) {
	if err := queryRow(ctx, conn, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, []any{schema}, &exists); err != nil {
		return nil, false, fmt.Errorf("look up schema %s: %w", schema, err)
	}
	rows, err := conn.Query(ctx, `
		SELECT c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence = 'p'
		ORDER BY c.relname`, schema)
	if err != nil {
		return nil, false, fmt.Errorf("list tables of schema %s: %w", schema, err)
	}
	defer rows.Close()
	tables = []change.TableName{}
	for rows.Next() {
		t := change.TableName{Schema: schema}
		if err := rows.Scan(&t.Name); err != nil {
			return nil, false, fmt.Errorf("list tables of schema %s: %w", schema, err)
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("list tables of schema %s: %w", schema, err)
	}
	return tables, exists, nil
}

// MissingTables returns those of tables that do not exist in the database
// as a table or partitioned table (dropped, or renamed away), in the order
// given.
func MissingTables(ctx context.Context, conn Queryer, tables []change.TableName) ([]change.TableName, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	info, err := describe(ctx, conn, tables)
	if err != nil {
		return nil, err
	}
	var out []change.TableName
	for _, t := range tables {
		if ti, ok := info[t]; !ok || (ti.relkind != "r" && ti.relkind != "p") {
			out = append(out, t)
		}
	}
	return out, nil
}

// PartitionRoots returns, for those of tables that are partitions now (a
// table attached with ATTACH PARTITION, or created as one), the root of
// their partition tree.
func PartitionRoots(ctx context.Context, conn Queryer, tables []change.TableName) (map[change.TableName]change.TableName, error) {
	out := map[change.TableName]change.TableName{}
	if len(tables) == 0 {
		return out, nil
	}
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, `
		SELECT t.schema, t.name, rn.nspname, r.relname
		FROM unnest($1::text[], $2::text[]) AS t(schema, name)
		JOIN pg_namespace n ON n.nspname = t.schema
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.name
		JOIN pg_class r ON r.oid = pg_partition_root(c.oid)
		JOIN pg_namespace rn ON rn.oid = r.relnamespace
		WHERE c.relispartition`, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("look up partitions among the mirror's tables: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t, root change.TableName
		if err := rows.Scan(&t.Schema, &t.Name, &root.Schema, &root.Name); err != nil {
			return nil, fmt.Errorf("look up partitions among the mirror's tables: %w", err)
		}
		out[t] = root
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up partitions among the mirror's tables: %w", err)
	}
	return out, nil
}

// Unpublished returns those of tables that exist as ordinary or partitioned
// tables (not partitions) but are not members of publication, which exists:
// a table dropped and created again under the same name leaves the
// publication with the drop. None when the publication does not exist.
func Unpublished(ctx context.Context, conn Queryer, publication string, tables []change.TableName) ([]change.TableName, error) {
	if len(tables) == 0 {
		return nil, nil
	}
	schemas, names := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, `
		SELECT t.schema, t.name
		FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(schema, name, n)
		JOIN pg_namespace n ON n.nspname = t.schema
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.name
		JOIN pg_publication p ON p.pubname = $3
		WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
		  AND NOT EXISTS (SELECT 1 FROM pg_publication_rel pr WHERE pr.prpubid = p.oid AND pr.prrelid = c.oid)
		ORDER BY t.n`, schemas, names, publication)
	if err != nil {
		return nil, fmt.Errorf("check the tables of publication %s: %w", publication, err)
	}
	defer rows.Close()
	var out []change.TableName
	for rows.Next() {
		var t change.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			return nil, fmt.Errorf("check the tables of publication %s: %w", publication, err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check the tables of publication %s: %w", publication, err)
	}
	return out, nil
}
