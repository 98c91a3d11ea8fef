package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// destDB creates a fresh database on the shared destination cluster with
// sql run in it, and a peer for it; it returns the database URL.
func (b *bundle) destDB(peerName, sql string) string {
	b.t.Helper()
	c := pgtest.DestCluster(b.t)
	ensurePeerRole(b.t, c)
	url := pgtest.NewDatabase(b.t, c)
	if sql != "" {
		pgtest.Exec(b.t, url, sql)
	}
	b.createPeer(peerName, c.Port(), dbName(url))
	return url
}

// A mirror whose destination tables hold rows is refused with 409 naming
// them unless existing_destination_rows says what to do with the rows:
// truncate, or keep (refused for a table without a primary key); without
// an initial snapshot nothing is copied, so nothing is refused. The choice
// is stored and shown. PUT tables checks the tables it adds, and may
// change the choice.
func TestExistingDestinationRowsOnCreate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.sourceDB("src", sourceSchema)
	dstURL := b.destDB("dst", `
		CREATE TABLE orders (id int PRIMARY KEY, note text, secret text);
		INSERT INTO orders VALUES (1, 'live', NULL);
		CREATE TABLE items (id int PRIMARY KEY);
		CREATE TABLE nopk (x int);
		INSERT INTO nopk VALUES (1);
		CREATE SCHEMA "Sales";
		CREATE TABLE "Sales"."Order Items" (id int PRIMARY KEY);
		INSERT INTO "Sales"."Order Items" VALUES (1);`)
	salesItems := map[string]any{"source_schema": "Sales", "source_table": "Order Items", "destination_schema": "Sales", "destination_table": "Order Items"}
	create := func(name, mode string, snapshot *bool, mappings ...map[string]any) (int, []byte) {
		body := mirrorBody(name, mappings...)
		if mode != "" {
			body["existing_destination_rows"] = mode
		}
		if snapshot != nil {
			body["do_initial_snapshot"] = *snapshot
		}
		return b.do(http.MethodPost, "/v1/mirrors", b.adminToken, body)
	}

	// Refused by default: both tables with rows are named, the empty one
	// and the missing one are not.
	msg := b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken,
		mirrorBody("m", mapping("orders", "orders"), mapping("items", "items"), mapping("customers", "customers"), salesItems),
		http.StatusConflict, `tables public.orders, Sales.Order Items on peer "dst" already hold rows`,
		`existing_destination_rows to "truncate"`, `"keep"`, "empty them")
	require.NotContains(t, msg, "items,")
	require.NotContains(t, msg, "customers")
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{"name": "m", "source_peer": "src", "destination_peer": "dst",
		"table_mappings": []any{mapping("orders", "orders")}, "existing_destination_rows": "refuse"}, http.StatusConflict, "table public.orders")
	require.Zero(t, b.jobCount("mirror_run"), "a refused mirror was started")
	e := b.lastAudit("create-mirror")
	require.Equal(t, http.StatusConflict, e.Status)

	// keep: refused for a table with rows and no primary key.
	status, raw := create("m", "keep", nil, mapping("fullident", "nopk"))
	require.Equal(t, http.StatusConflict, status, "%s", raw)
	require.Contains(t, string(raw), `table public.nopk on peer \"dst\" holds rows but no primary key`)
	require.Contains(t, string(raw), "existing_destination_rows")

	// Accepted ways.
	no := false
	for _, tc := range []struct {
		name, mode string
		snapshot   *bool
		want       string
	}{
		{"m-truncate", "truncate", nil, "truncate"},
		{"m-keep", "keep", nil, "keep"},
		{"m-nosnap", "", &no, "refuse"},
	} {
		status, raw := create(tc.name, tc.mode, tc.snapshot, mapping("orders", "orders"))
		require.Equal(t, http.StatusCreated, status, "%s: %s", tc.name, raw)
		var got struct {
			ExistingDestinationRows string `json:"existing_destination_rows"`
		}
		b.mustDecode(http.MethodGet, "/v1/mirrors/"+tc.name, b.viewerToken, nil, http.StatusOK, &got)
		require.Equal(t, tc.want, got.ExistingDestinationRows, tc.name)
	}
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{"name": "m-bad", "source_peer": "src", "destination_peer": "dst",
		"table_mappings": []any{mapping("orders", "orders")}, "existing_destination_rows": "replace"}, http.StatusBadRequest, "existing_destination_rows")

	// PUT tables: an added table with rows is refused under refuse; the
	// tables that stay are not checked again once copied.
	status, raw = create("m-put", "", nil, mapping("items", "items"))
	require.Equal(t, http.StatusCreated, status, "%s", raw)
	b.exec(`UPDATE mirror_tables SET status = 'running', destination_taken_at = now() WHERE mirror_id = (SELECT id FROM mirrors WHERE name = 'm-put')`)
	pgtest.Exec(t, dstURL, `INSERT INTO items VALUES (1)`)
	b.setStatus("m-put", "paused")
	put := map[string]any{"table_mappings": []any{mapping("items", "items"), mapping("orders", "orders")}}
	b.requireError(http.MethodPut, "/v1/mirrors/m-put/tables", b.adminToken, put, http.StatusConflict, "table public.orders on peer", "already holds rows")
	put["existing_destination_rows"] = "keep"
	b.mustDo(http.MethodPut, "/v1/mirrors/m-put/tables", b.adminToken, put, http.StatusOK)
	var got struct {
		ExistingDestinationRows string `json:"existing_destination_rows"`
		TableMappings           []any  `json:"table_mappings"`
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors/m-put", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, "keep", got.ExistingDestinationRows)
	require.Len(t, got.TableMappings, 2)
	require.Equal(t, "keep", b.lastAudit("put-mirror-tables").Details["existing_destination_rows"])
}
