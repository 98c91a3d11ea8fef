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
