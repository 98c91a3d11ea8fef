package preflight

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
)

// Queryer runs queries on the source database; *pgx.Conn, *pgxpool.Pool and
// pgx.Tx all satisfy it.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Failure is a failed check. Its message is meant for the user.
type Failure struct {
	// Check is the name of the check that failed.
	Check string
	// Message says what is wrong and what to do about it.
	Message string
}

func (f *Failure) Error() string { return f.Message }

// NamedCheck is one named preflight check. Run checks the database of
// conn, whose role in the mirror ("source", or "destination" for the
// reverse mirror of a cut-over) its messages name, so that the advice says
// where the fix belongs.
type NamedCheck struct {
	Name string
	Run  func(ctx context.Context, conn Queryer, tables []change.TableName, role string) error
}

// All are the checks Check performs, in order.
var All = []NamedCheck{
	{Name: "server_version", Run: ServerVersion},
	{Name: "wal_level", Run: WalLevel},
	{Name: "tables_exist", Run: TablesExist},
	{Name: "replica_identity", Run: ReplicaIdentity},
}

// Check runs every check in All against the source connection conn for
// the given source tables and returns the first failure.
func Check(ctx context.Context, conn Queryer, tables []change.TableName) error {
	return CheckAs(ctx, conn, tables, "source")
}

// CheckAs runs every check in All against conn, a connection to a database
// that is to feed a mirror in the role role ("source", or "destination"
// for a cut-over's reverse mirror, which reads the destination), and
// returns the first failure; its message names that database.
func CheckAs(ctx context.Context, conn Queryer, tables []change.TableName, role string) error {
	for _, c := range All {
		if err := c.Run(ctx, conn, tables, role); err != nil {
			return err
		}
	}
	return nil
}

// ServerVersion checks that the database (of the given role) runs a
// PostgreSQL version pgmirror supports (pgversion.MinSupported or later).
func ServerVersion(ctx context.Context, conn Queryer, _ []change.TableName, role string) error {
	var num int
	if err := queryRow(ctx, conn, `SELECT pg_catalog.current_setting('server_version_num')::int`, nil, &num); err != nil {
		return fmt.Errorf("read the server version: %w", err)
	}
	if err := pgversion.Of(num).Check(role + " database"); err != nil {
		return &Failure{Check: "server_version", Message: strings.TrimPrefix(err.Error(), pgversion.ErrUnsupported.Error()+": ")}
	}
	return nil
}

// WalLevel checks that the database (of the given role) runs with
// wal_level=logical.
func WalLevel(ctx context.Context, conn Queryer, _ []change.TableName, role string) error {
	var level string
	if err := queryRow(ctx, conn, `SELECT current_setting('wal_level')`, nil, &level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return &Failure{Check: "wal_level", Message: fmt.Sprintf(
			"the %s database runs with wal_level=%s, but mirrors need wal_level=logical: run ALTER SYSTEM SET wal_level = logical on the %s and restart its server", role, level, role)}
	}
	return nil
}

func queryRow(ctx context.Context, conn Queryer, sql string, args []any, dest ...any) error {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// tableInfo is what the checks learn about one source table.
type tableInfo struct {
	name        change.TableName
	relkind     string
	replident   string
	hasPK       bool
	hasIdentIdx bool
	// badLeaves are leaf partitions (of a partitioned table) that cannot
	// identify their rows.
	badLeaves []string
}

// identifiable reports whether a plain table can identify its rows.
func identifiable(replident string, hasPK, hasIdentIdx bool) bool {
	switch replident {
	case "f":
		return true
	case "i":
		return hasIdentIdx
	case "d":
		return hasPK
	}
	return false
}

func describe(ctx context.Context, conn Queryer, tables []change.TableName) (map[change.TableName]tableInfo, error) {
	schemas := make([]string, len(tables))
	names := make([]string, len(tables))
	for i, t := range tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	rows, err := conn.Query(ctx, `
		SELECT n.nspname, c.relname, c.relkind::text, c.relreplident::text,
		       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
		       EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisreplident),
		       COALESCE((
		           SELECT array_agg(format('%s.%s', ln.nspname, lc.relname) ORDER BY ln.nspname, lc.relname)
		           FROM pg_partition_tree(c.oid) pt
		           JOIN pg_class lc ON lc.oid = pt.relid
		           JOIN pg_namespace ln ON ln.oid = lc.relnamespace
		           WHERE c.relkind = 'p' AND pt.isleaf AND NOT (
		               lc.relreplident = 'f'
		               OR (lc.relreplident = 'i' AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = lc.oid AND i.indisreplident))
		               OR (lc.relreplident = 'd' AND EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = lc.oid AND i.indisprimary)))
		       ), '{}')
		FROM unnest($1::text[], $2::text[]) AS want(schema_name, table_name)
		JOIN pg_namespace n ON n.nspname = want.schema_name
		JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = want.table_name`, schemas, names)
	if err != nil {
		return nil, fmt.Errorf("describe source tables: %w", err)
	}
	defer rows.Close()
	out := map[change.TableName]tableInfo{}
	for rows.Next() {
		var ti tableInfo
		if err := rows.Scan(&ti.name.Schema, &ti.name.Name, &ti.relkind, &ti.replident, &ti.hasPK, &ti.hasIdentIdx, &ti.badLeaves); err != nil {
			return nil, fmt.Errorf("describe source tables: %w", err)
		}
		out[ti.name] = ti
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("describe source tables: %w", err)
	}
	return out, nil
}

// TablesExist checks that every table exists in the database (of the given
// role) as a table or partitioned table (not a view or other relation).
func TablesExist(ctx context.Context, conn Queryer, tables []change.TableName, role string) error {
	info, err := describe(ctx, conn, tables)
	if err != nil {
		return err
	}
	var missing, notTables []string
	for _, t := range tables {
		ti, ok := info[t]
		switch {
		case !ok:
			missing = append(missing, t.String())
		case ti.relkind != "r" && ti.relkind != "p":
			notTables = append(notTables, t.String())
		}
	}
	if len(missing) > 0 {
		return &Failure{Check: "tables_exist", Message: fmt.Sprintf(
			"table %s does not exist in the %s database: check the schema and table names (they are case-sensitive) or create the table first",
			strings.Join(missing, ", "), role)}
	}
	if len(notTables) > 0 {
		return &Failure{Check: "tables_exist", Message: fmt.Sprintf(
			"%s in the %s database is not a table (views and other relations cannot be replicated): map a table instead",
			strings.Join(notTables, ", "), role)}
	}
	return partitionedPublishable(ctx, conn, tables, info, role)
}

// partitionedPublishable refuses a partitioned table on a server whose
// publications cannot publish one (PostgreSQL 12).
func partitionedPublishable(ctx context.Context, conn Queryer, tables []change.TableName, info map[change.TableName]tableInfo, role string) error {
	var partitioned []string
	for _, t := range tables {
		if info[t].relkind == "p" {
			partitioned = append(partitioned, t.String())
		}
	}
	if len(partitioned) == 0 {
		return nil
	}
	var num int
	if err := queryRow(ctx, conn, `SELECT pg_catalog.current_setting('server_version_num')::int`, nil, &num); err != nil {
		return fmt.Errorf("read the server version: %w", err)
	}
	if srv := pgversion.Of(num); !srv.PartitionRoot() {
		return &Failure{Check: "tables_exist", Message: fmt.Sprintf(
			"%s in the %s database is a partitioned table, and %s cannot publish a partitioned table (PostgreSQL 13 and later can): map its partitions one by one instead",
			strings.Join(partitioned, ", "), role, srv)}
	}
	return nil
}

// ReplicaIdentity checks that every table can identify its rows in logical
// replication: a primary key, a replica identity index or REPLICA IDENTITY
// FULL. A partitioned table passes with a primary key on the root;
// otherwise each leaf partition must pass on its own. Missing tables are
// left to TablesExist.
func ReplicaIdentity(ctx context.Context, conn Queryer, tables []change.TableName, role string) error {
	info, err := describe(ctx, conn, tables)
	if err != nil {
		return err
	}
	for _, t := range tables {
		ti, ok := info[t]
		if !ok {
			continue
		}
		switch ti.relkind {
		case "r":
			if !identifiable(ti.replident, ti.hasPK, ti.hasIdentIdx) {
				return noIdentity(t.String(), t.Quoted(), role)
			}
		case "p":
			if ti.hasPK {
				continue
			}
			if len(ti.badLeaves) > 0 {
				return &Failure{Check: "replica_identity", Message: fmt.Sprintf(
					"partitioned table %s has no primary key and its partition %s has neither a primary key nor REPLICA IDENTITY FULL: add a primary key to %s, or run ALTER TABLE ... REPLICA IDENTITY FULL on each partition, on the %s",
					t, ti.badLeaves[0], t, role)}
			}
		}
	}
	return nil
}

func noIdentity(name, quoted, role string) error {
	return &Failure{Check: "replica_identity", Message: fmt.Sprintf(
		"table %s has neither a primary key nor REPLICA IDENTITY FULL, so updates and deletes cannot be replicated: add a primary key, or run ALTER TABLE %s REPLICA IDENTITY FULL on the %s",
		name, quoted, role)}
}
