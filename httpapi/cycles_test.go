package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestMirrorCreateRefusesCycle: a mirror in the opposite direction of a
// live mirror over the same table is refused with a 409 naming it, also
// when its peers spell the host of the same database differently; other
// tables, and a completed mirror (a cut-over's reverse mirror runs beside
// its completed original), are fine.
func TestMirrorCreateRefusesCycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const schema = `CREATE TABLE orders (id int PRIMARY KEY, total int);
		CREATE TABLE items (id int PRIMARY KEY)`
	b.sourceDB("a", schema)
	bURL := b.sourceDB("b", schema)
	// The same database as peer b, by another name of the host.
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, map[string]any{
		"name": "b_alias", "host": "localhost", "port": pgtest.SourceCluster(t).Port(), "user": "pgmirror_test_peer",
		"password": peerPassword, "database": dbName(bURL), "ssl_mode": "disable",
	}, http.StatusCreated)
	body := func(name, src, dst string, tables ...string) map[string]any {
		var ms []map[string]any
		for _, tb := range tables {
			ms = append(ms, mapping(tb, tb))
		}
		return map[string]any{"name": name, "source_peer": src, "destination_peer": dst, "table_mappings": ms}
	}
	b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, body("forward", "a", "b", "orders"), http.StatusCreated)
	b.setStatus("forward", "running")

	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body("back", "b", "a", "items", "orders"), http.StatusConflict,
		`Mirror "forward" already replicates`, "public.orders", "close a loop", `Delete mirror "forward" first`)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body("back", "b_alias", "a", "orders"), http.StatusConflict,
		`Mirror "forward"`, "close a loop")

	// Another table is no loop; adding the looping table to it is.
	b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, body("back_items", "b", "a", "items"), http.StatusCreated)
	b.setStatus("back_items", "paused")
	b.requireError(http.MethodPut, "/v1/mirrors/back_items/tables", b.adminToken,
		map[string]any{"table_mappings": []map[string]any{mapping("items", "items"), mapping("orders", "orders")}}, http.StatusConflict,
		`Mirror "forward" already replicates`, "public.orders")
	b.exec(`DELETE FROM mirrors WHERE name = 'back_items'`)
	b.exec(`UPDATE mirrors SET status = 'completed' WHERE name = 'forward'`)
	b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, body("back", "b", "a", "orders"), http.StatusCreated)
	// The loop check works both ways: forward again, from a to b, meets back.
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body("forward2", "a", "b", "orders"), http.StatusConflict,
		`Mirror "back" already replicates`)
}
