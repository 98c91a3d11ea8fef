package main

import (
	"strings"
	"testing"
	"time"
)

// TestCutoverSafeguards: a cut-over of tables with foreign keys leaves
// them enforced on the destination (refused, named and undone first while
// a destination row breaks one), lists what it does not carry in
// warnings; afterwards a second mirror from the old source into the new
// database over a table the roll-back mirror carries back is refused with
// a 409 naming it, and the roll-back mirror carries only the application's
// writes (none of pgmirror's own).
func TestCutoverSafeguards(t *testing.T) {
	t.Parallel()
	catalog, src, dst, s := newEnv(t, `
		CREATE TABLE customers (id int PRIMARY KEY, name text);
		CREATE TABLE orders (id int PRIMARY KEY, customer int NOT NULL
			CONSTRAINT orders_customer_fk REFERENCES customers ON DELETE CASCADE, total int);
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER orders_touch BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION touch();
		INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 50) g;
		INSERT INTO orders SELECT g, 1 + g % 50, g FROM generate_series(1, 500) g;`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "guard", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "customers", "public", "customers"), mapping("public", "orders", "public", "orders")},
	}, 201, nil)
	s.waitStatus("guard", "running", 90*time.Second)
	exec1(t, src, `INSERT INTO orders VALUES (501, 7, 1); UPDATE orders SET total = 0 WHERE id <= 10; DELETE FROM customers WHERE id = 50`)
	waitEqual(t, src, dst, "public.orders", "public.orders", "id, customer, total", 30*time.Second)

	// A destination row whose customer does not exist: the foreign key
	// cannot be validated, the cut-over fails by its name and is undone.
	exec1(t, dst, `INSERT INTO orders VALUES (9999, 4242, 0)`)
	var refused struct {
		Error string `json:"error"`
	}
	if got := s.do("POST", "/v1/mirrors/guard/cutover", map[string]any{"quiet_seconds": 1}, &refused); got != 409 ||
		!strings.Contains(refused.Error, "step create_foreign_keys") || !strings.Contains(refused.Error, "orders_customer_fk on public.orders (references public.customers)") ||
		!strings.Contains(refused.Error, "(customer)=(4242)") {
		t.Fatalf("cut-over with an orphan destination row: %d %q, want 409 naming the foreign key and the row", got, refused.Error)
	}
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_constraint WHERE contype = 'f'`); n != 0 {
		t.Errorf("%d foreign keys left on the destination after the failed cut-over, want 0", n)
	}
	s.waitStatus("guard", "running", 30*time.Second)
	exec1(t, dst, `DELETE FROM orders WHERE id = 9999`)

	var done struct {
		Status   string      `json:"status"`
		Warnings []string    `json:"warnings"`
		Cutover  cutoverView `json:"cutover"`
	}
	s.mustDo("POST", "/v1/mirrors/guard/cutover", map[string]any{"quiet_seconds": 1, "reverse_mirror_name": "guard-back"}, 200, &done)
	var names []string
	for _, step := range done.Cutover.Steps {
		names = append(names, step.Name)
	}
	if done.Status != "completed" || !strings.Contains(strings.Join(names, " "), "create_constraints create_foreign_keys verify_row_counts") {
		t.Fatalf("cut-over: status %s, steps %v", done.Status, names)
	}
	if len(done.Warnings) != 1 || !strings.Contains(done.Warnings[0], "triggers of the mirrored tables that the destination lacks: orders_touch on public.orders") {
		t.Errorf("warnings %q, want the trigger orders_touch named", done.Warnings)
	}
	// Enforced on the destination: validated, refusing an orphan, cascading.
	if n := queryInt64(t, dst, `SELECT count(*) FROM pg_constraint WHERE conname = 'orders_customer_fk' AND convalidated`); n != 1 {
		t.Fatal("orders_customer_fk is not a validated constraint on the destination")
	}
	if err := execErr(dst, `INSERT INTO orders VALUES (10000, 4242, 0)`); err == nil || !strings.Contains(err.Error(), "23503") {
		t.Errorf("an order of a missing customer on the destination: %v, want a foreign key violation", err)
	}
	before := queryInt64(t, dst, `SELECT count(*) FROM orders WHERE customer = 3`)
	exec1(t, dst, `DELETE FROM customers WHERE id = 3; INSERT INTO customers VALUES (100, 'new'); INSERT INTO orders VALUES (600, 100, 1)`)
	if n := queryInt64(t, dst, `SELECT count(*) FROM orders WHERE customer = 3`); before == 0 || n != 0 {
		t.Errorf("deleting customer 3 left %d of its %d orders: ON DELETE CASCADE missing", n, before)
	}

	// The mistake: a second mirror from the old source into the new
	// database over orders, which the roll-back mirror carries back.
	s.waitStatus("guard-back", "running", 60*time.Second)
	var loop struct {
		Error string `json:"error"`
	}
	if got := s.do("POST", "/v1/mirrors", map[string]any{
		"name": "again", "source_peer": "src", "destination_peer": "dst",
		"table_mappings": []any{mapping("public", "orders", "public", "orders")},
	}, &loop); got != 409 || !strings.Contains(loop.Error, `Mirror "guard-back"`) || !strings.Contains(loop.Error, "public.orders") {
		t.Fatalf("mirror that closes a loop: %d %q, want 409 naming move-back and the table", got, loop.Error)
	}

	// The roll-back mirror carried the application's writes (the delete
	// with its cascade, the two inserts) and nothing of pgmirror's.
	waitEqual(t, dst, src, "public.orders", "public.orders", "id, customer, total", 60*time.Second)
	waitEqual(t, dst, src, "public.customers", "public.customers", "id, name", 60*time.Second)
	time.Sleep(2 * time.Second)
	back := s.mirror("guard-back")
	var inserted, deleted, updated int64
	for _, tb := range back.Tables {
		inserted += tb.RowsInserted
		deleted += tb.RowsDeleted
		updated += tb.RowsUpdated
	}
	if inserted != 2 || deleted != before+1 || updated != 0 {
		t.Errorf("the roll-back mirror applied %d inserts, %d updates, %d deletes; want the application's 2, 0, %d", inserted, updated, deleted, before+1)
	}

	// The mirror's replication origin on the destination goes with it.
	var uid string
	queryOne(t, catalog, &uid, `SELECT uid::text FROM mirrors WHERE name = 'guard'`)
	origins := func() int64 {
		return queryInt64(t, dst, `SELECT count(*) FROM pg_replication_origin WHERE roname = $1 OR roname LIKE $2`, "pgmirror_"+uid, "pgmirror_"+uid+`\_c%`)
	}
	if n := origins(); n != 1 {
		t.Fatalf("%d replication origins of mirror guard on the destination before its deletion, want 1", n)
	}
	s.mustDo("DELETE", "/v1/mirrors/guard", nil, 200, nil)
	waitFor(t, "the deleted mirror's origin to be dropped", 30*time.Second, func() bool { return origins() == 0 })
}
