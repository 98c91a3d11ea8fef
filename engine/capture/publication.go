package capture

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// ErrInvalidName is returned for a slot or publication name that is not
// 1-63 characters of lower-case letters, digits and underscores. pglogrepl
// sends these names unescaped, so nothing else is accepted.
var ErrInvalidName = errors.New("invalid name: want 1-63 characters of a-z, 0-9 and _")

var nameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ValidateName checks a slot or publication name (see ErrInvalidName).
func ValidateName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%q: %w", name, ErrInvalidName)
	}
	return nil
}

// tableList renders tables as a quoted, comma-separated list.
func tableList(tables []change.TableName) string {
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = t.Quoted()
	}
	return strings.Join(parts, ", ")
}

// EnsurePublication creates the publication name for tables (publishing
// partitioned tables through their root, PostgreSQL 13 and later; 12
// cannot publish a partitioned table, see preflight) when it does not exist, and
// reports created=true. When it exists it must already publish every table
// in tables; otherwise the error names the missing ones.
func EnsurePublication(ctx context.Context, conn *pgx.Conn, name string, tables []change.TableName) (created bool, err error) {
	if err := ValidateName(name); err != nil {
		return false, fmt.Errorf("ensure publication: %w", err)
	}
	if len(tables) == 0 {
		return false, fmt.Errorf("ensure publication %s: no tables", name)
	}
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication %s: %w", name, err)
	}
	if !exists {
		srv, err := pgversion.Read(ctx, conn)
		if err != nil {
			return false, fmt.Errorf("create publication %s: %w", name, err)
		}
		sql := "CREATE PUBLICATION " + sqlquote.Ident(name) + " FOR TABLE " + tableList(tables)
		if srv.PartitionRoot() {
			sql += " WITH (publish_via_partition_root = true)"
		}
		if _, err := conn.Exec(ctx, sql); err != nil {
			return false, fmt.Errorf("create publication %s: %w", name, err)
		}
		return true, nil
	}
	if err := checkGeneratedColumns(ctx, conn, name); err != nil {
		return false, err
	}
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = $1`, name)
	if err != nil {
		return false, fmt.Errorf("list tables of publication %s: %w", name, err)
	}
	have := map[change.TableName]bool{}
	for rows.Next() {
		var t change.TableName
		if err := rows.Scan(&t.Schema, &t.Name); err != nil {
			rows.Close()
			return false, fmt.Errorf("list tables of publication %s: %w", name, err)
		}
		have[t] = true
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("list tables of publication %s: %w", name, err)
	}
	var missing []string
	for _, t := range tables {
		if !have[t] {
			missing = append(missing, t.String())
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return false, fmt.Errorf("publication %s exists but does not publish %s", name, strings.Join(missing, ", "))
	}
	return false, nil
}

// checkGeneratedColumns refuses an existing publication that publishes
// stored generated columns (publish_generated_columns = stored,
// PostgreSQL 18): pgmirror never writes generated columns, the
// destination computes them.
func checkGeneratedColumns(ctx context.Context, conn *pgx.Conn, name string) error {
	srv, err := pgversion.Read(ctx, conn)
	if err != nil {
		return fmt.Errorf("check publication %s: %w", name, err)
	}
	if !srv.PublishGeneratedColumns() {
		return nil
	}
	var gencols string
	if err := conn.QueryRow(ctx, `SELECT pubgencols::text FROM pg_catalog.pg_publication WHERE pubname = $1`, name).Scan(&gencols); err != nil {
		return fmt.Errorf("check publication %s: %w", name, err)
	}
	if gencols != "n" {
		return fmt.Errorf("publication %s publishes generated columns (publish_generated_columns = stored), which pgmirror does not write (the destination computes them): "+
			"run ALTER PUBLICATION %s SET (publish_generated_columns = none) on the source, or let pgmirror create its own publication", name, sqlquote.Ident(name))
	}
	return nil
}

// AlterPublicationTables makes the publication publish exactly tables.
func AlterPublicationTables(ctx context.Context, conn *pgx.Conn, name string, tables []change.TableName) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("alter publication: %w", err)
	}
	if len(tables) == 0 {
		return fmt.Errorf("alter publication %s: no tables", name)
	}
	if _, err := conn.Exec(ctx, "ALTER PUBLICATION "+sqlquote.Ident(name)+" SET TABLE "+tableList(tables)); err != nil {
		return fmt.Errorf("alter publication %s: %w", name, err)
	}
	return nil
}

// DropPublication drops the publication if it exists.
func DropPublication(ctx context.Context, conn *pgx.Conn, name string) error {
	if err := ValidateName(name); err != nil {
		return fmt.Errorf("drop publication: %w", err)
	}
	if _, err := conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+sqlquote.Ident(name)); err != nil {
		return fmt.Errorf("drop publication %s: %w", name, err)
	}
	return nil
}
