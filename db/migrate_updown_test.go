package db_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// schemaQueries describe pgmirror's objects in the catalog's public schema
// (goose's own table left out), one text line per object, without OIDs.
var schemaQueries = map[string]string{
	"columns": `SELECT format('%s.%s #%s %s %s null=%s default=%s', table_name, column_name, ordinal_position,
		data_type, udt_name, is_nullable, coalesce(column_default, '-'))
		FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name <> 'goose_db_version'`,
	"constraints": `SELECT format('%s %s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
		WHERE n.nspname = 'public' AND c.conrelid <> 'goose_db_version'::regclass`,
	"indexes": `SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`,
	"functions": `SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'public' AND p.prokind IN ('f', 'p')`,
	"triggers": `SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT t.tgisinternal`,
	"relations": `SELECT format('%s %s', c.relname, c.relkind) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relname NOT IN ('goose_db_version', 'goose_db_version_id_seq', 'goose_db_version_pkey')`,
	"views": `SELECT format('%s: %s', viewname, definition) FROM pg_views WHERE schemaname = 'public'`,
	"types": `SELECT format('%s %s %s', t.typname, t.typtype, coalesce((SELECT string_agg(enumlabel, ',' ORDER BY enumsortorder)
		FROM pg_enum WHERE enumtypid = t.oid), ''))
		FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
		WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0`,
	"comments": `SELECT format('%s #%s %s', d.objoid::regclass, d.objsubid, d.description) FROM pg_description d
		JOIN pg_class c ON c.oid = d.objoid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'`,
}

// catalogSchema returns, per kind of object, the sorted description lines
// of the catalog's schema.
func catalogSchema(t *testing.T, pool *pgxpool.Pool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for kind, q := range schemaQueries {
		rows, err := pool.Query(context.Background(), q+` ORDER BY 1`)
		require.NoError(t, err, kind)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line), kind)
			out[kind] = append(out[kind], line)
		}
		require.NoError(t, rows.Err(), kind)
	}
	return out
}

// TestMigrationsUpDownUp migrates a fresh catalog all the way up, runs
// every Down migration to version 0, and migrates up again: every Down
// must run, leave nothing of pgmirror's behind, and the second Up must
// build exactly the schema of the first (columns, constraints, indexes,
// functions, triggers, relations, views, types).
func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	provider := migrationProvider(t, pool)

	_, err := provider.Up(ctx)
	require.NoError(t, err)
	first := catalogSchema(t, pool)
	require.NotEmpty(t, first["columns"])
	require.NotEmpty(t, first["triggers"])
	for kind, lines := range first {
		t.Logf("%s: %d", kind, len(lines))
	}

	_, err = provider.DownTo(ctx, 0)
	require.NoError(t, err)
	version, err := provider.GetDBVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, version)
	var left []string
	for kind, lines := range catalogSchema(t, pool) {
		for _, l := range lines {
			left = append(left, kind+": "+l)
		}
	}
	require.Empty(t, left, "the Down migrations left these behind")

	_, err = provider.Up(ctx)
	require.NoError(t, err)
	second := catalogSchema(t, pool)
	for kind := range schemaQueries {
		if diff := lineDiff(first[kind], second[kind]); diff != "" {
			t.Errorf("%s differ after up, down to 0, up:\n%s", kind, diff)
		}
	}
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b []string) string {
	count := map[string]int{}
	for _, l := range a {
		count[l]++
	}
	for _, l := range b {
		count[l]--
	}
	var out strings.Builder
	for _, l := range a {
		if count[l] > 0 {
			fmt.Fprintf(&out, "- %s\n", l)
			count[l]--
		}
	}
	for _, l := range b {
		if count[l] < 0 {
			fmt.Fprintf(&out, "+ %s\n", l)
			count[l]++
		}
	}
	return out.String()
}
