package cutover_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
)

// TestForeignKeys reads the source's foreign keys between mirrored tables
// with destination names (composite, with actions, deferrable, to a
// renamed table), warns of those it cannot carry, and creates them on the
// destination NOT VALID then validated: they are enforced; a destination
// row without its referenced row fails with the foreign key's name, and
// leaves no constraint behind.
func TestForeignKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	pgtest.Exec(t, srcURL, `CREATE TABLE customers (id int PRIMARY KEY, region int, UNIQUE (id, region));
		CREATE TABLE orders (id int PRIMARY KEY, customer int, region int, note text,
			CONSTRAINT orders_customer_fk FOREIGN KEY (customer) REFERENCES customers ON DELETE CASCADE,
			CONSTRAINT "Orders region" FOREIGN KEY (customer, region) REFERENCES customers (id, region) MATCH FULL DEFERRABLE INITIALLY DEFERRED);
		CREATE TABLE outside (id int PRIMARY KEY);
		CREATE TABLE notes (id int PRIMARY KEY, order_id int REFERENCES orders, outside_id int REFERENCES outside, secret int REFERENCES customers)`)
	pgtest.Exec(t, dstURL, `CREATE SCHEMA app;
		CREATE TABLE app.clients (id int PRIMARY KEY, region int, UNIQUE (id, region));
		CREATE TABLE app.orders (id int PRIMARY KEY, customer int, region int, note text);
		CREATE TABLE app.notes (id int PRIMARY KEY, order_id int, outside_id int);
		INSERT INTO app.clients VALUES (1, 10), (2, 20);
		INSERT INTO app.orders VALUES (1, 1, 10, 'a'), (2, 2, 20, 'b')`)
	tn := func(s, n string) change.TableName { return change.TableName{Schema: s, Name: n} }
	mappings := []change.Mapping{
		{Source: tn("public", "customers"), Destination: tn("app", "clients")},
		{Source: tn("public", "orders"), Destination: tn("app", "orders")},
		{Source: tn("public", "notes"), Destination: tn("app", "notes"), ExcludeColumns: []string{"secret"}},
	}
	src, dst := connect(t, srcURL), connect(t, dstURL)
	fks, warnings, err := cutover.SourceForeignKeys(ctx, src, mappings)
	require.NoError(t, err)
	require.Len(t, warnings, 2)
	require.Contains(t, warnings[0], "notes_outside_id_fkey of public.notes references public.outside, which the mirror does not carry")
	require.Contains(t, warnings[1], "notes_secret_fkey of public.notes uses column secret, which the mirror excludes")
	var clauses []string
	for _, fk := range fks {
		clauses = append(clauses, fk.Table.String()+" "+fk.Name+": "+fk.Clause)
	}
	require.Equal(t, []string{
		`app.notes notes_order_id_fkey: FOREIGN KEY ("order_id") REFERENCES "app"."orders" ("id") ON UPDATE NO ACTION ON DELETE NO ACTION`,
		`app.orders Orders region: FOREIGN KEY ("customer", "region") REFERENCES "app"."clients" ("id", "region") MATCH FULL ON UPDATE NO ACTION ON DELETE NO ACTION DEFERRABLE INITIALLY DEFERRED`,
		`app.orders orders_customer_fk: FOREIGN KEY ("customer") REFERENCES "app"."clients" ("id") ON UPDATE NO ACTION ON DELETE CASCADE`,
	}, clauses)

	for _, fk := range fks {
		created, err := cutover.CreateForeignKey(ctx, dst, fk)
		require.NoError(t, err)
		require.True(t, created, fk.Name)
	}
	// Again: they exist, nothing is created.
	created, err := cutover.CreateForeignKey(ctx, dst, fks[0])
	require.NoError(t, err)
	require.False(t, created)
	var valid int
	require.NoError(t, dst.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND convalidated`).Scan(&valid))
	require.Equal(t, 3, valid)
	// Enforced: an order of a missing client is refused, a client's delete cascades.
	_, err = dst.Exec(ctx, `INSERT INTO app.orders VALUES (3, 99, 10, 'x')`)
	require.Equal(t, "23503", sqlState(err))
	_, err = dst.Exec(ctx, `DELETE FROM app.clients WHERE id = 2`)
	require.NoError(t, err)
	var n int
	require.NoError(t, dst.QueryRow(ctx, `SELECT count(*) FROM app.orders`).Scan(&n))
	require.Equal(t, 1, n)

	// A row the foreign key does not hold for: the error names it, and the
	// constraint is gone again.
	for _, fk := range fks {
		require.NoError(t, cutover.DropForeignKey(ctx, dst, fk))
	}
	pgtest.Exec(t, dstURL, `INSERT INTO app.notes VALUES (1, 42, NULL)`)
	_, err = cutover.CreateForeignKey(ctx, dst, fks[0])
	require.ErrorIs(t, err, cutover.ErrForeignKey)
	require.Contains(t, err.Error(), "notes_order_id_fkey on app.notes (references app.orders)")
	require.Contains(t, err.Error(), "(order_id)=(42)")
	require.NoError(t, dst.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f'`).Scan(&n))
	require.Zero(t, n)
}

// TestNotCarried lists the source's triggers, policies, grants,
// publications, roles and extensions around the mirrored tables that the
// destination lacks, by name, and nothing the destination has.
func TestNotCarried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srcURL := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dstURL := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	role := "pgmirror_nc_" + dbSuffix(srcURL)
	pgtest.Exec(t, srcURL, `CREATE ROLE `+role+`; CREATE EXTENSION IF NOT EXISTS pgcrypto;
		CREATE TABLE orders (id int PRIMARY KEY, owner text);
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER orders_touch BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION touch();
		CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION touch();
		ALTER TABLE orders ENABLE ROW LEVEL SECURITY;
		CREATE POLICY own_rows ON orders USING (owner = current_user);
		GRANT SELECT, INSERT ON orders TO `+role+`;
		CREATE PUBLICATION reporting FOR TABLE orders;
		CREATE PUBLICATION pgmirror_pub_mine FOR TABLE orders`)
	t.Cleanup(func() {
		pgtest.Exec(t, srcURL, `DROP OWNED BY `+role)
		pgtest.Exec(t, pgtest.SourceCluster(t).URL("postgres"), `DROP ROLE `+role)
	})
	pgtest.Exec(t, dstURL, `CREATE TABLE orders (id int PRIMARY KEY, owner text);
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER orders_audit AFTER INSERT ON orders FOR EACH ROW EXECUTE FUNCTION touch()`)
	m := []change.Mapping{{Source: change.TableName{Schema: "public", Name: "orders"}, Destination: change.TableName{Schema: "public", Name: "orders"}}}
	got, err := cutover.NotCarried(ctx, connect(t, srcURL), connect(t, dstURL), m, "pgmirror_pub_mine")
	require.NoError(t, err)
	require.Len(t, got, 6, "%q", got)
	require.Contains(t, got[0], "triggers of the mirrored tables that the destination lacks: orders_touch on public.orders;")
	require.Contains(t, got[1], "row-level security policies of the mirrored tables that the destination lacks: policy own_rows on public.orders, row level security on public.orders;")
	require.Contains(t, got[2], "grants of the mirrored tables that the destination lacks: INSERT on public.orders to "+role+", SELECT on public.orders to "+role+";")
	require.Contains(t, got[3], "publications on the source that include mirrored tables and do not exist on the destination: reporting (public.orders);")
	require.Contains(t, got[4], "roles that own the mirrored tables or hold grants on them on the source and do not exist on the destination: "+role+";")
	require.Contains(t, got[5], "extensions installed on the source and not on the destination: pgcrypto;")
}

func dbSuffix(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	return cfg.Database
}
