package cutover

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/schemasync"
)

// NotCarried lists what the source has around the mirrored tables that
// pgmirror does not carry to the destination and the destination lacks,
// each kind in one sentence naming the objects: triggers on the mirrored
// tables, their grants, row-level security policies (and RLS itself),
// expressions left out because they would run code with the destination
// role's privileges (schemasync.ExpressionsNotCarried),
// publications that include them, the roles that own them or hold their
// grants, and the source's extensions. ownPublications are left out (the
// mirror's own). A cut-over reports them as warnings: the destination is to
// take the application's writes, and these are for the operator to create.
func NotCarried(ctx context.Context, src, dst *pgx.Conn, mappings []change.Mapping, ownPublications ...string) ([]string, error) {
	var out []string
	for _, kind := range []struct {
		what, advice string
		src, dst     func(context.Context, *pgx.Conn, []change.Mapping) ([]string, error)
	}{
		{"triggers", "create them on the destination (pg_dump --schema-only --section=post-data of the source has them)", sourceTriggers, destTriggers},
		{"row-level security policies", "create them on the destination (CREATE POLICY, ALTER TABLE ... ENABLE ROW LEVEL SECURITY)", sourcePolicies, destPolicies},
		{"grants", "grant them on the destination", sourceGrants, destGrants},
	} {
		have, err := kind.src(ctx, src, mappings)
		if err != nil {
			return nil, err
		}
		there, err := kind.dst(ctx, dst, mappings)
		if err != nil {
			return nil, err
		}
		if missing := minus(have, there); len(missing) > 0 {
			out = append(out, fmt.Sprintf("%s of the mirrored tables that the destination lacks: %s; %s", kind.what, strings.Join(missing, ", "), kind.advice))
		}
	}
	pubs, err := sourcePublications(ctx, src, mappings)
	if err != nil {
		return nil, err
	}
	pubs = slices.DeleteFunc(pubs, func(p string) bool {
		return slices.Contains(ownPublications, strings.SplitN(p, " ", 2)[0]) || strings.HasPrefix(p, "pgmirror_")
	})
	dstPubs, err := names(ctx, dst, `SELECT pubname FROM pg_catalog.pg_publication`)
	if err != nil {
		return nil, err
	}
	pubs = slices.DeleteFunc(pubs, func(p string) bool { return slices.Contains(dstPubs, strings.SplitN(p, " ", 2)[0]) })
	if len(pubs) > 0 {
		out = append(out, "publications on the source that include mirrored tables and do not exist on the destination: "+strings.Join(pubs, ", ")+
			"; create them on the destination if subscribers are to follow it")
	}
	roles, err := sourceRoles(ctx, src, mappings)
	if err != nil {
		return nil, err
	}
	dstRoles, err := names(ctx, dst, `SELECT rolname FROM pg_catalog.pg_roles`)
	if err != nil {
		return nil, err
	}
	if missing := minus(roles, dstRoles); len(missing) > 0 {
		out = append(out, "roles that own the mirrored tables or hold grants on them on the source and do not exist on the destination: "+strings.Join(missing, ", ")+
			"; create them there (pg_dumpall --roles-only)")
	}
	exprs, err := schemasync.ExpressionsNotCarried(ctx, src, dst, mappings)
	if err != nil {
		return nil, fmt.Errorf("list the expressions the mirror does not carry: %w", err)
	}
	if len(exprs) > 0 {
		out = append(out, "expressions of the mirrored tables that pgmirror does not carry, because they call code that would run with the destination role's privileges, and that the destination lacks: "+
			strings.Join(exprs, ", ")+"; review them and create those you trust on the destination as the tables' owner")
	}
	exts, err := names(ctx, src, `SELECT extname FROM pg_catalog.pg_extension WHERE extname <> 'plpgsql' ORDER BY 1`)
	if err != nil {
		return nil, err
	}
	dstExts, err := names(ctx, dst, `SELECT extname FROM pg_catalog.pg_extension`)
	if err != nil {
		return nil, err
	}
	if missing := minus(exts, dstExts); len(missing) > 0 {
		out = append(out, "extensions installed on the source and not on the destination: "+strings.Join(missing, ", ")+"; CREATE EXTENSION them there if the application uses them")
	}
	return out, nil
}

// minus returns the items of a that b lacks, in a's order.
func minus(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func names(ctx context.Context, conn *pgx.Conn, sql string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list what the mirror does not carry: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list what the mirror does not carry: %w", err)
	}
	return out, nil
}

// tableArgs returns the schemas and names of tables, for unnest.
func tableArgs(tables []change.TableName) ([]string, []string) {
	schemas, tnames := make([]string, len(tables)), make([]string, len(tables))
	for i, t := range tables {
		schemas[i], tnames[i] = t.Schema, t.Name
	}
	return schemas, tnames
}

func sources(mappings []change.Mapping) []change.TableName {
	out := make([]change.TableName, len(mappings))
	for i, m := range mappings {
		out[i] = m.Source
	}
	return out
}

// inTables restricts c (pg_class) in n (pg_namespace) to $1/$2.
const inTables = ` (n.nspname, c.relname) IN (SELECT * FROM unnest($1::text[], $2::text[])) `

// onSource runs sql (rows of schema, table, what, suffix, with the tables
// as $1 and $2) on the source and names each object "what on table
// suffix" with the destination table's name, so that both sides' lists
// compare.
func onSource(ctx context.Context, src *pgx.Conn, mappings []change.Mapping, sql string) ([]string, error) {
	schemas, tnames := tableArgs(sources(mappings))
	rows, err := src.Query(ctx, sql, schemas, tnames)
	if err != nil {
		return nil, fmt.Errorf("list what the mirror does not carry: %w", err)
	}
	defer rows.Close()
	dest := map[change.TableName]change.TableName{}
	for _, m := range mappings {
		dest[m.Source] = m.Destination
	}
	var out []string
	for rows.Next() {
		var t change.TableName
		var what, suffix string
		if err := rows.Scan(&t.Schema, &t.Name, &what, &suffix); err != nil {
			return nil, fmt.Errorf("list what the mirror does not carry: %w", err)
		}
		out = append(out, what+" on "+dest[t].String()+suffix)
	}
	return out, rows.Err()
}

// onDest is onSource on the destination, for the destination tables.
func onDest(ctx context.Context, dst *pgx.Conn, mappings []change.Mapping, sql string) ([]string, error) {
	tables := make([]change.TableName, len(mappings))
	for i, m := range mappings {
		tables[i] = m.Destination
	}
	schemas, tnames := tableArgs(tables)
	rows, err := dst.Query(ctx, sql, schemas, tnames)
	if err != nil {
		return nil, fmt.Errorf("list what the destination has: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t change.TableName
		var what, suffix string
		if err := rows.Scan(&t.Schema, &t.Name, &what, &suffix); err != nil {
			return nil, fmt.Errorf("list what the destination has: %w", err)
		}
		out = append(out, what+" on "+t.String()+suffix)
	}
	return out, rows.Err()
}

// triggersSQL lists user triggers (not pgmirror's read-only ones, nor the
// copies of a partitioned table's trigger on its partitions: tgparentid
// from PostgreSQL 13; 12 marks those copies internal).
const triggersSQL = `SELECT n.nspname, c.relname, t.tgname::text, ''
FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE NOT t.tgisinternal AND %s AND t.tgname NOT IN ('pgmirror_read_only', 'pgmirror_read_only_truncate') AND` + inTables + `
ORDER BY 1, 2, 3`

// triggersSQLFor returns triggersSQL for the server of c.
func triggersSQLFor(ctx context.Context, c *pgx.Conn) (string, error) {
	srv, err := pgversion.Read(ctx, c)
	if err != nil {
		return "", err
	}
	if srv.TriggerParent() {
		return fmt.Sprintf(triggersSQL, "t.tgparentid = 0"), nil
	}
	return fmt.Sprintf(triggersSQL, "true"), nil
}

func sourceTriggers(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	sql, err := triggersSQLFor(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list what the source has: %w", err)
	}
	return onSource(ctx, c, m, sql)
}

func destTriggers(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	sql, err := triggersSQLFor(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("list what the destination has: %w", err)
	}
	return onDest(ctx, c, m, sql)
}

// policiesSQL lists policies, and row level security switched on.
const policiesSQL = `SELECT n.nspname, c.relname, 'policy ' || p.polname, ''
FROM pg_catalog.pg_policy p JOIN pg_catalog.pg_class c ON c.oid = p.polrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE` + inTables + `
UNION ALL
SELECT n.nspname, c.relname, 'row level security', ''
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relrowsecurity AND` + inTables + `
ORDER BY 1, 2, 3`

func sourcePolicies(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	return onSource(ctx, c, m, policiesSQL)
}

func destPolicies(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	return onDest(ctx, c, m, policiesSQL)
}

// grantsSQL lists the privileges granted to others than the owner.
const grantsSQL = `SELECT n.nspname, c.relname, a.privilege_type,
       ' to ' || CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_catalog.pg_get_userbyid(a.grantee)::text END
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
     LATERAL aclexplode(c.relacl) a
WHERE a.grantee <> c.relowner AND` + inTables + `
ORDER BY 1, 2, 3`

func sourceGrants(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	return onSource(ctx, c, m, grantsSQL)
}

func destGrants(ctx context.Context, c *pgx.Conn, m []change.Mapping) ([]string, error) {
	return onDest(ctx, c, m, grantsSQL)
}

// sourcePublications lists the publications that include a mirrored table
// (by name, FOR ALL TABLES ones too) as "name (tables)".
func sourcePublications(ctx context.Context, src *pgx.Conn, mappings []change.Mapping) ([]string, error) {
	schemas, tnames := tableArgs(sources(mappings))
	return names(ctx, src, `SELECT p.pubname || ' (' || string_agg(quote_ident(t.schemaname) || '.' || quote_ident(t.tablename), ', ' ORDER BY t.schemaname, t.tablename) || ')'
		FROM pg_catalog.pg_publication p JOIN pg_catalog.pg_publication_tables t ON t.pubname = p.pubname
		WHERE (t.schemaname, t.tablename) IN (SELECT * FROM unnest($1::text[], $2::text[]))
		GROUP BY p.pubname ORDER BY p.pubname`, schemas, tnames)
}

// sourceRoles lists the roles that own a mirrored table or hold a grant on
// one.
func sourceRoles(ctx context.Context, src *pgx.Conn, mappings []change.Mapping) ([]string, error) {
	schemas, tnames := tableArgs(sources(mappings))
	return names(ctx, src, `SELECT DISTINCT pg_catalog.pg_get_userbyid(r) FROM (
		SELECT c.relowner AS r FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE`+inTables+`
		UNION SELECT a.grantee FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace,
			LATERAL aclexplode(c.relacl) a WHERE a.grantee <> 0 AND`+inTables+`) o ORDER BY 1`, schemas, tnames)
}
