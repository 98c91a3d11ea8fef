package schemasync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// Conn is what this package needs from a database handle. *pgx.Conn,
// *pgxpool.Pool and pgx.Tx all satisfy it.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrTableNotFound is returned (wrapped) by Describe when the table does not
// exist.
var ErrTableNotFound = errors.New("table not found")

// ReplicaIdentity is a table's REPLICA IDENTITY setting, as pg_class.relreplident
// stores it.
type ReplicaIdentity byte

// The replica identity settings.
const (
	ReplicaIdentityDefault ReplicaIdentity = 'd' // the primary key, if any
	ReplicaIdentityNothing ReplicaIdentity = 'n'
	ReplicaIdentityFull    ReplicaIdentity = 'f'
	ReplicaIdentityIndex   ReplicaIdentity = 'i' // a chosen unique index
)

// String returns the SQL keyword of the setting (DEFAULT, NOTHING, FULL, INDEX).
func (r ReplicaIdentity) String() string {
	switch r {
	case ReplicaIdentityDefault:
		return "DEFAULT"
	case ReplicaIdentityNothing:
		return "NOTHING"
	case ReplicaIdentityFull:
		return "FULL"
	case ReplicaIdentityIndex:
		return "INDEX"
	}
	return fmt.Sprintf("unknown(%q)", byte(r))
}

// Column describes one column of a table.
type Column struct {
	// Name is the column name, unquoted.
	Name string
	// Type is the column's SQL type as format_type prints it with only
	// pg_catalog on the search path: built-in types unqualified
	// ("numeric(12,3)", "integer[]"), every other type schema-qualified and
	// quoted where needed (`public.mood[]`, `"Mixed Schema".dom`). It is
	// usable as is in DDL on another database and comparable across
	// databases.
	Type string
	// TypeOID is the OID of the column's type in the described database.
	TypeOID uint32
	// TypeSchema and TypeName name the column's type (pg_type.typname, so
	// "_int4" for integer[]).
	TypeSchema, TypeName string
	// NotNull is attnotnull.
	NotNull bool
	// HasDefault reports a column default (or identity, or generation).
	HasDefault bool
	// Identity reports an identity column (GENERATED ... AS IDENTITY).
	Identity bool
	// Generated reports a stored generated column; GenerationExpr is its
	// expression (pg_get_expr, names qualified outside pg_catalog).
	Generated      bool
	GenerationExpr string
	// BinarySafe reports that the type's binary COPY form carries no
	// database-specific OIDs (arrays of user-defined types and composite
	// values do) and that the type has binary I/O functions.
	BinarySafe bool
}

// Table describes a table: its columns in attnum order, its keys and its
// replica identity.
type Table struct {
	Name change.TableName
	OID  uint32
	// Partitioned reports a partitioned table (relkind 'p'); its rows live in
	// its leaf partitions.
	Partitioned bool
	// Columns are the live columns in attnum order.
	Columns []Column
	// PrimaryKey holds the primary key's columns in key order (nil without one).
	PrimaryKey []string
	// ReplicaIdentity is the REPLICA IDENTITY setting.
	ReplicaIdentity ReplicaIdentity
	// IdentityColumns are the columns that identify a row in replicated
	// UPDATEs and DELETEs: the primary key for DEFAULT, the index columns for
	// INDEX, nil for FULL and NOTHING.
	IdentityColumns []string
}

// Column returns the column called name.
func (t Table) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Replicated returns the columns that m copies: every column that is not
// excluded and not generated (generated columns are computed again on the
// destination), in attnum order.
func (t Table) Replicated(m change.Mapping) []Column {
	var cols []Column
	for _, c := range t.Columns {
		if c.Generated || m.Excluded(c.Name) {
			continue
		}
		cols = append(cols, c)
	}
	return cols
}

// Describe reads the definition of table t through conn. It returns an error
// wrapping ErrTableNotFound when there is no such table (ordinary,
// partitioned or foreign). Describe runs in its own read-only transaction (a
// savepoint when conn is a pgx.Tx) that it rolls back.
func Describe(ctx context.Context, conn Conn, t change.TableName) (Table, error) {
	var table Table
	err := withCatalogPath(ctx, conn, func(tx pgx.Tx) error {
		var err error
		table, err = describe(ctx, tx, t)
		return err
	})
	if err != nil {
		return Table{}, err
	}
	return table, nil
}

// withCatalogPath runs fn in a transaction (or savepoint) whose search_path is
// pg_catalog only, so format_type and pg_get_expr qualify every name outside
// pg_catalog, and rolls it back afterwards.
func withCatalogPath(ctx context.Context, conn Conn, fn func(tx pgx.Tx) error) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin catalog read: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only work, rolled back on purpose
	if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
		return fmt.Errorf("set search_path for catalog read: %w", err)
	}
	return fn(tx)
}

const describeTableSQL = `
SELECT c.oid, c.relkind = 'p', c.relreplident
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'f')`

const describeColumnsSQL = `
SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.atttypid, tn.nspname, t.typname,
       a.attnotnull, a.atthasdef OR a.attidentity <> '', a.attidentity <> '', a.attgenerated = 's',
       COALESCE(CASE WHEN a.attgenerated = 's' THEN pg_catalog.pg_get_expr(d.adbin, d.adrelid) END, '')
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace
LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

// indexColumnsSQL lists the key columns of the primary key ($2 = true) or of
// the replica identity index ($2 = false) of table $1, in key order.
const indexColumnsSQL = `
SELECT a.attname
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1 AND (CASE WHEN $2 THEN i.indisprimary ELSE i.indisreplident END)
  AND k.ord <= i.indnkeyatts
ORDER BY k.ord`

func describe(ctx context.Context, tx pgx.Tx, t change.TableName) (Table, error) {
	table := Table{Name: t}
	var relreplident byte
	err := tx.QueryRow(ctx, describeTableSQL, t.Schema, t.Name).Scan(&table.OID, &table.Partitioned, &relreplident)
	if errors.Is(err, pgx.ErrNoRows) {
		return Table{}, fmt.Errorf("describe table %s: %w", t, ErrTableNotFound)
	}
	if err != nil {
		return Table{}, fmt.Errorf("describe table %s: %w", t, err)
	}
	table.ReplicaIdentity = ReplicaIdentity(relreplident)

	rows, err := tx.Query(ctx, describeColumnsSQL, table.OID)
	if err != nil {
		return Table{}, fmt.Errorf("read columns of %s: %w", t, err)
	}
	for rows.Next() {
		var c Column
		if err := rows.Scan(&c.Name, &c.Type, &c.TypeOID, &c.TypeSchema, &c.TypeName, &c.NotNull,
			&c.HasDefault, &c.Identity, &c.Generated, &c.GenerationExpr); err != nil {
			rows.Close()
			return Table{}, fmt.Errorf("read columns of %s: %w", t, err)
		}
		table.Columns = append(table.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return Table{}, fmt.Errorf("read columns of %s: %w", t, err)
	}

	graph := newTypeGraph()
	for _, c := range table.Columns {
		if err := graph.load(ctx, tx, c.TypeOID); err != nil {
			return Table{}, fmt.Errorf("read column types of %s: %w", t, err)
		}
	}
	for i := range table.Columns {
		table.Columns[i].BinarySafe = graph.binarySafe(table.Columns[i].TypeOID)
	}

	if table.PrimaryKey, err = indexColumns(ctx, tx, table.OID, true); err != nil {
		return Table{}, fmt.Errorf("read primary key of %s: %w", t, err)
	}
	switch table.ReplicaIdentity {
	case ReplicaIdentityDefault:
		table.IdentityColumns = table.PrimaryKey
	case ReplicaIdentityIndex:
		if table.IdentityColumns, err = indexColumns(ctx, tx, table.OID, false); err != nil {
			return Table{}, fmt.Errorf("read replica identity of %s: %w", t, err)
		}
	}
	return table, nil
}

func indexColumns(ctx context.Context, tx pgx.Tx, rel uint32, primary bool) ([]string, error) {
	rows, err := tx.Query(ctx, indexColumnsSQL, rel, primary)
	if err != nil {
		return nil, err
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(cols) == 0 {
		return nil, nil
	}
	return cols, nil
}
