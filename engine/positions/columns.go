package positions

import (
	"context"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
)

// SourceColumn is a column of a mapped source table as a mirror last knew
// it: its attnum, which a rename keeps, with its name and type. A mirror
// keeps them per table in _pgmirror.source_columns, so that a later
// description of the table (a Relation message, a captured schema change)
// tells a renamed column from a dropped one and a new one.
type SourceColumn struct {
	Attnum  int
	Name    string
	TypeOID uint32
	TypeMod int32
}

// SourceColumns reads the known source columns of table in the mirror, in
// attnum order; nil when none are recorded.
func SourceColumns(ctx context.Context, conn DB, mirrorUID string, table change.TableName) ([]SourceColumn, error) {
	rows, err := conn.Query(ctx, `SELECT attnum, name, type_oid, typmod FROM _pgmirror.source_columns
		WHERE mirror_uid = $1 AND source_schema = $2 AND source_table = $3 ORDER BY attnum`, mirrorUID, table.Schema, table.Name)
	if err != nil {
		return nil, fmt.Errorf("read known source columns of %s: %w", table, err)
	}
	defer rows.Close()
	var out []SourceColumn
	for rows.Next() {
		var c SourceColumn
		if err := rows.Scan(&c.Attnum, &c.Name, &c.TypeOID, &c.TypeMod); err != nil {
			return nil, fmt.Errorf("read known source columns of %s: %w", table, err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read known source columns of %s: %w", table, err)
	}
	return out, nil
}

// SetSourceColumns records cols as the known source columns of table in
// the mirror, replacing what was known. Callers run it in the transaction
// that brings the destination table to that shape (a CDC batch, or the one
// that empties it for a copy).
func SetSourceColumns(ctx context.Context, conn DB, mirrorUID string, table change.TableName, cols []SourceColumn) error {
	attnums, names, oids, mods := make([]int32, len(cols)), make([]string, len(cols)), make([]uint32, len(cols)), make([]int32, len(cols))
	for i, c := range cols {
		attnums[i], names[i], oids[i], mods[i] = int32(c.Attnum), c.Name, c.TypeOID, c.TypeMod
	}
	if _, err := conn.Exec(ctx, `DELETE FROM _pgmirror.source_columns WHERE mirror_uid = $1 AND source_schema = $2 AND source_table = $3`,
		mirrorUID, table.Schema, table.Name); err != nil {
		return fmt.Errorf("record known source columns of %s: %w", table, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO _pgmirror.source_columns (mirror_uid, source_schema, source_table, attnum, name, type_oid, typmod)
		SELECT $1, $2, $3, u.attnum, u.name, u.oid, u.typmod FROM unnest($4::int[], $5::text[], $6::oid[], $7::int[]) AS u(attnum, name, oid, typmod)`,
		mirrorUID, table.Schema, table.Name, attnums, names, oids, mods); err != nil {
		return fmt.Errorf("record known source columns of %s: %w", table, err)
	}
	return nil
}
