package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// sourceSchema is the source database of most mirror tests.
const sourceSchema = `
	CREATE TABLE orders (id int PRIMARY KEY, note text, secret text);
	CREATE TABLE items (id int PRIMARY KEY);
	CREATE TABLE customers (id int PRIMARY KEY);
	CREATE TABLE nopk (x int);
	CREATE TABLE fullident (x int);
	ALTER TABLE fullident REPLICA IDENTITY FULL;
	CREATE SCHEMA "Sales";
	CREATE TABLE "Sales"."Order Items" (id int PRIMARY KEY);
	CREATE VIEW orders_view AS SELECT * FROM orders;`

// mirrorPeers creates the source peer "src" (with sourceSchema) and the
// destination peer "dst"; it returns the source database URL.
func (b *bundle) mirrorPeers() string {
	b.t.Helper()
	url := b.sourceDB("src", sourceSchema)
	b.destPeer("dst")
	return url
}

func mirrorBody(name string, mappings ...map[string]any) map[string]any {
	if len(mappings) == 0 {
		mappings = []map[string]any{mapping("orders", "orders")}
	}
	return map[string]any{"name": name, "source_peer": "src", "destination_peer": "dst", "table_mappings": mappings}
}

// createMirror creates a mirror from src to dst (orders -> orders unless
// mappings are given) and returns the created configuration.
func (b *bundle) createMirror(name string, mappings ...map[string]any) mirrorConfig {
	b.t.Helper()
	var m mirrorConfig
	b.mustDecode(http.MethodPost, "/v1/mirrors", b.adminToken, mirrorBody(name, mappings...), http.StatusCreated, &m)
	return m
}

// setStatus moves a mirror to status through legal transitions, as a worker
// would.
func (b *bundle) setStatus(name, status string) {
	b.t.Helper()
	var current string
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT status FROM mirrors WHERE name = $1 AND deleted_at IS NULL`, name).Scan(&current))
	if current == status {
		return
	}
	switch status {
	case "running", "snapshotting":
		if current == "paused" && status == "running" {
			b.exec(`UPDATE mirrors SET status = 'running', desired_state = 'running' WHERE name = $1 AND deleted_at IS NULL`, name)
			return
		}
		b.exec(`UPDATE mirrors SET status = $2 WHERE name = $1 AND deleted_at IS NULL`, name, status)
	case "paused":
		b.setStatus(name, "running")
		b.exec(`UPDATE mirrors SET status = 'paused', desired_state = 'paused' WHERE name = $1 AND deleted_at IS NULL`, name)
	case "error":
		b.exec(`UPDATE mirrors SET status = 'error', error_message = 'connection refused', error_count = error_count + 1,
			next_retry_at = now() + interval '1 hour' WHERE name = $1 AND deleted_at IS NULL`, name)
	case "stopped":
		b.exec(`UPDATE mirrors SET status = 'stopped' WHERE name = $1 AND deleted_at IS NULL`, name)
	default:
		b.t.Fatalf("setStatus: cannot reach %s", status)
	}
}

type tableMappingRec struct {
	SourceSchema      string   `json:"source_schema"`
	SourceTable       string   `json:"source_table"`
	DestinationSchema string   `json:"destination_schema"`
	DestinationTable  string   `json:"destination_table"`
	ExcludeColumns    []string `json:"exclude_columns"`
}

type mirrorConfig struct {
	Name                        string
	SourcePeer                  string            `json:"source_peer"`
	DestinationPeer             string            `json:"destination_peer"`
	TableMappings               []tableMappingRec `json:"table_mappings"`
	SnapshotNumRowsPerPartition int               `json:"snapshot_num_rows_per_partition"`
	SnapshotMaxParallelWorkers  int               `json:"snapshot_max_parallel_workers"`
	SnapshotNumTablesInParallel int               `json:"snapshot_num_tables_in_parallel"`
	CDCSyncIntervalSeconds      int               `json:"cdc_sync_interval_seconds"`
	CDCBatchSize                int               `json:"cdc_batch_size"`
	DoInitialSnapshot           bool              `json:"do_initial_snapshot"`
	PublicationName             string            `json:"publication_name"`
	ReplicationSlotName         string            `json:"replication_slot_name"`
	Status                      string
}

type tableStatusRec struct {
	TableName    string     `json:"table_name"`
	Status       string     `json:"status"`
	RowsSynced   int64      `json:"rows_synced"`
	RowsInserted int64      `json:"rows_inserted"`
	RowsUpdated  int64      `json:"rows_updated"`
	RowsDeleted  int64      `json:"rows_deleted"`
	LastSyncedAt *time.Time `json:"last_synced_at"`
}

type mirrorStatusRec struct {
	Name            string
	SourcePeer      string  `json:"source_peer"`
	DestinationPeer string  `json:"destination_peer"`
	Status          string  `json:"status"`
	LastLSN         *string `json:"last_lsn"`
	LastSyncBatchID int64   `json:"last_sync_batch_id"`
	ErrorMessage    *string `json:"error_message"`
	ErrorCount      int     `json:"error_count"`
	Tables          []tableStatusRec
	CreatedAt       time.Time `json:"created_at"`
	UpdatedAt       time.Time `json:"updated_at"`
}

func (b *bundle) mirrorStatus(name string) mirrorStatusRec {
	b.t.Helper()
	var st mirrorStatusRec
	b.mustDecode(http.MethodGet, "/v1/mirrors/"+name, b.viewerToken, nil, http.StatusOK, &st)
	return st
}

// mirrorJobs counts River jobs of kind whose args name the mirror.
func (b *bundle) mirrorJobs(kind, mirror string) int {
	b.t.Helper()
	var n int
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job j JOIN mirrors m ON m.id = (j.args->>'mirror_id')::bigint
		WHERE j.kind = $1 AND m.name = $2`, kind, mirror).Scan(&n))
	return n
}

func TestMirrorCreateDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	require.Zero(t, b.jobCount("mirror_run"))

	raw := b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, mirrorBody("Orders-Mirror.1", mapping("orders", "orders_copy"), mapping("items", "items")), http.StatusCreated)
	var m mirrorConfig
	require.NoError(t, json.Unmarshal(raw, &m))
	require.Equal(t, mirrorConfig{
		Name: "Orders-Mirror.1", SourcePeer: "src", DestinationPeer: "dst",
		TableMappings: []tableMappingRec{
			{SourceSchema: "public", SourceTable: "orders", DestinationSchema: "public", DestinationTable: "orders_copy"},
			{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"},
		},
		SnapshotNumRowsPerPartition: 500000, SnapshotMaxParallelWorkers: 4, SnapshotNumTablesInParallel: 4,
		CDCSyncIntervalSeconds: 60, CDCBatchSize: 10000, DoInitialSnapshot: true,
		PublicationName: "pgmirror_pub_orders_mirror_1", ReplicationSlotName: "pgmirror_slot_orders_mirror_1",
		Status: "initializing",
	}, m)
	require.Equal(t, 1, b.jobCount("mirror_run"))
	require.Equal(t, 1, b.mirrorJobs("mirror_run", "Orders-Mirror.1"), "the run job names the new mirror")

	// The catalog holds what the API answered.
	var rows, parallel int
	var snapshot bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT snapshot_num_rows_per_partition, snapshot_max_parallel_workers, do_initial_snapshot
		FROM mirrors WHERE name = 'Orders-Mirror.1'`).Scan(&rows, &parallel, &snapshot))
	require.Equal(t, 500000, rows)
	require.Equal(t, 4, parallel)
	require.True(t, snapshot)

	st := b.mirrorStatus("Orders-Mirror.1")
	require.Equal(t, "initializing", st.Status)
	require.Len(t, st.Tables, 2)

	// Every field given explicitly is kept.
	var custom mirrorConfig
	body := mirrorBody("custom", map[string]any{"source_schema": "public", "source_table": "orders", "destination_schema": "archive",
		"destination_table": "orders", "exclude_columns": []string{"secret"}})
	for k, v := range map[string]any{
		"snapshot_num_rows_per_partition": 1000, "snapshot_max_parallel_workers": 2, "snapshot_num_tables_in_parallel": 3,
		"cdc_sync_interval_seconds": 5, "cdc_batch_size": 100, "do_initial_snapshot": false,
		"publication_name": "my_pub", "replication_slot_name": "my_slot",
	} {
		body[k] = v
	}
	b.mustDecode(http.MethodPost, "/v1/mirrors", b.adminToken, body, http.StatusCreated, &custom)
	require.Equal(t, mirrorConfig{
		Name: "custom", SourcePeer: "src", DestinationPeer: "dst",
		TableMappings: []tableMappingRec{{SourceSchema: "public", SourceTable: "orders", DestinationSchema: "archive",
			DestinationTable: "orders", ExcludeColumns: []string{"secret"}}},
		SnapshotNumRowsPerPartition: 1000, SnapshotMaxParallelWorkers: 2, SnapshotNumTablesInParallel: 3,
		CDCSyncIntervalSeconds: 5, CDCBatchSize: 100, DoInitialSnapshot: false,
		PublicationName: "my_pub", ReplicationSlotName: "my_slot", Status: "initializing",
	}, custom)
	require.Equal(t, 2, b.jobCount("mirror_run"))

	// The same peer as source and destination is fine when the tables differ.
	b.mustDo(http.MethodPost, "/v1/mirrors", b.adminToken, map[string]any{"name": "loop", "source_peer": "src", "destination_peer": "src",
		"table_mappings": []any{mapping("orders", "orders_copy")}}, http.StatusCreated)
	// REPLICA IDENTITY FULL stands in for a primary key; quoted names work.
	b.createMirror("full", mapping("fullident", "fullident"))
	b.createMirror("quoted", map[string]any{"source_schema": "Sales", "source_table": "Order Items", "destination_schema": "Sales", "destination_table": "Order Items"})

	// A name that maps to generated names already taken gets a suffix.
	clash := b.createMirror("orders_mirror_1")
	require.Regexp(t, `^pgmirror_pub_orders_mirror_1_[0-9a-f]{8}$`, clash.PublicationName)
	require.Regexp(t, `^pgmirror_slot_orders_mirror_1_[0-9a-f]{8}$`, clash.ReplicationSlotName)

	// Long names give distinct generated identifiers of at most 63 bytes.
	long1, long2 := strings.Repeat("a", 100)+"1", strings.Repeat("a", 100)+"2"
	m1, m2 := b.createMirror(long1), b.createMirror(long2)
	for _, n := range []string{m1.PublicationName, m1.ReplicationSlotName, m2.PublicationName, m2.ReplicationSlotName} {
		require.LessOrEqual(t, len(n), 63)
		require.Regexp(t, `^[a-z_][a-z0-9_]*$`, n)
	}
	require.NotEqual(t, m1.ReplicationSlotName, m2.ReplicationSlotName)
	require.NotEqual(t, m1.PublicationName, m2.PublicationName)
}

func TestMirrorCreateValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("existing")
	jobs := b.jobCount("mirror_run")

	bad := func(name string, body any, want int, fragments ...string) {
		t.Run(name, func(t *testing.T) {
			b.on(t).requireError(http.MethodPost, "/v1/mirrors", b.adminToken, body, want, fragments...)
		})
	}
	base := mirrorBody("m")
	for _, field := range []string{"name", "source_peer", "destination_peer", "table_mappings"} {
		bad("missing "+field, without(base, field), http.StatusBadRequest, field)
	}
	bad("empty name", with(base, "name", ""), http.StatusBadRequest, "name")
	bad("name with slash", with(base, "name", "a/b"), http.StatusBadRequest, "name")
	bad("unknown source peer", with(base, "source_peer", "nope"), http.StatusBadRequest, `"nope"`)
	bad("unknown destination peer", with(base, "destination_peer", "nada"), http.StatusBadRequest, `"nada"`)
	bad("same peer and table", with(base, "destination_peer", "src"), http.StatusBadRequest, "onto itself")
	// A second peer for the same database is the same database.
	var src peerRecord
	b.mustDecode(http.MethodGet, "/v1/peers/src", b.adminToken, nil, http.StatusOK, &src)
	b.createPeer("src-again", src.Port, src.Database)
	bad("same database and table", with(base, "destination_peer", "src-again"), http.StatusBadRequest, "onto itself")

	// Malformed table_mappings.
	bad("empty table_mappings", with(base, "table_mappings", []any{}), http.StatusBadRequest, "table_mappings")
	bad("table_mappings not an array", with(base, "table_mappings", "orders"), http.StatusBadRequest, "table_mappings")
	bad("mapping not an object", with(base, "table_mappings", []any{"public.orders"}), http.StatusBadRequest, "table_mappings")
	for _, field := range []string{"source_schema", "source_table", "destination_schema", "destination_table"} {
		bad("mapping without "+field, with(base, "table_mappings", []any{without(mapping("orders", "orders"), field)}), http.StatusBadRequest, field)
		bad("mapping with empty "+field, with(base, "table_mappings", []any{with(mapping("orders", "orders"), field, "")}), http.StatusBadRequest, field)
	}
	bad("exclude_columns not an array", with(base, "table_mappings", []any{with(mapping("orders", "orders"), "exclude_columns", "secret")}), http.StatusBadRequest, "exclude_columns")
	bad("exclude_columns empty name", with(base, "table_mappings", []any{with(mapping("orders", "orders"), "exclude_columns", []string{""})}), http.StatusBadRequest, "exclude_columns")
	bad("duplicate destination table", with(base, "table_mappings", []any{mapping("orders", "same"), mapping("items", "same")}), http.StatusBadRequest, "public.same")
	bad("duplicate source table", with(base, "table_mappings", []any{mapping("orders", "a"), mapping("orders", "b")}), http.StatusBadRequest, "public.orders")

	// Numeric fields out of range, and of the wrong type.
	for _, field := range []string{"snapshot_num_rows_per_partition", "snapshot_max_parallel_workers", "snapshot_num_tables_in_parallel",
		"cdc_sync_interval_seconds", "cdc_batch_size"} {
		bad(field+" zero", with(base, field, 0), http.StatusBadRequest, field)
		bad(field+" negative", with(base, field, -1), http.StatusBadRequest, field)
		bad(field+" huge", with(base, field, int64(1)<<40), http.StatusBadRequest, field)
		bad(field+" string", with(base, field, "10"), http.StatusBadRequest, field)
		bad(field+" fraction", with(base, field, 1.5), http.StatusBadRequest, field)
	}
	bad("do_initial_snapshot string", with(base, "do_initial_snapshot", "yes"), http.StatusBadRequest, "do_initial_snapshot")

	// Publication and slot names must be plain identifiers (they are not
	// quoted in replication commands).
	for _, field := range []string{"publication_name", "replication_slot_name"} {
		for _, name := range []string{"Upper", "with-dash", "1starts_with_digit", "has space", "x'; DROP TABLE y; --", strings.Repeat("a", 64)} {
			bad(field+" "+name, with(base, field, name), http.StatusBadRequest, field)
		}
	}
	bad("unknown field", with(base, "colour", "blue"), http.StatusBadRequest, "colour")

	// Checks on the source database.
	bad("missing table", with(base, "table_mappings", []any{mapping("orders", "orders"), mapping("ghost", "ghost")}), http.StatusBadRequest, "public.ghost", "does not exist")
	bad("wrong schema", with(base, "table_mappings", []any{map[string]any{"source_schema": "sales", "source_table": "Order Items",
		"destination_schema": "public", "destination_table": "x"}}), http.StatusBadRequest, "sales.Order Items")
	bad("no primary key", with(base, "table_mappings", []any{mapping("nopk", "nopk")}), http.StatusBadRequest, "public.nopk", "REPLICA IDENTITY FULL")
	bad("view", with(base, "table_mappings", []any{mapping("orders_view", "orders_view")}), http.StatusBadRequest, "public.orders_view")

	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, mirrorBody("existing", mapping("items", "items")), http.StatusConflict, `"existing"`)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, with(mirrorBody("other"), "replication_slot_name", "pgmirror_slot_existing"), http.StatusConflict, "pgmirror_slot_existing")
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, with(mirrorBody("other"), "publication_name", "pgmirror_pub_existing"), http.StatusConflict, "pgmirror_pub_existing")

	// Nothing was created or enqueued by a rejected request.
	var names []string
	for _, m := range b.mirrorList() {
		names = append(names, m.Name)
	}
	require.Equal(t, []string{"existing"}, names)
	require.Equal(t, jobs, b.jobCount("mirror_run"))
}

func TestMirrorCreateSourceNotReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.destPeer("dst")

	// A server without wal_level=logical.
	plain := pgtest.NewCluster(t, false)
	ensurePeerRole(t, plain)
	url := pgtest.NewDatabase(t, plain)
	pgtest.Exec(t, url, `CREATE TABLE orders (id int PRIMARY KEY)`)
	b.createPeer("src", plain.Port(), dbName(url))
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, mirrorBody("m"), http.StatusBadRequest, "wal_level")

	// An unreachable source.
	b.mustDo(http.MethodPost, "/v1/peers", b.adminToken, with(validPeer(t, "down"), "port", freePort(t)), http.StatusCreated)
	b.requireError(http.MethodPost, "/v1/mirrors", b.adminToken, with(mirrorBody("m"), "source_peer", "down"), http.StatusBadRequest, `"down"`)
	require.Zero(t, b.jobCount("mirror_run"))
	raw := b.mustDo(http.MethodGet, "/v1/mirrors", b.viewerToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw))
}

// TestMirrorCreateConcurrent creates the same mirror from many requests at
// once: exactly one wins, and only its job is enqueued (the job is inserted
// in the mirror's transaction).
func TestMirrorCreateConcurrent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			raw, err := json.Marshal(mirrorBody("race"))
			if err != nil {
				panic(err)
			}
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/mirrors", strings.NewReader(string(raw)))
			if err != nil {
				panic(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+b.adminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				panic(err)
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		})
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		if s == http.StatusCreated {
			created++
		} else {
			require.Equal(t, http.StatusConflict, s)
		}
	}
	require.Equal(t, 1, created, "%v", statuses)
	require.Equal(t, 1, b.jobCount("mirror_run"))
}

// TestMirrorCreateConcurrentNames creates mirrors whose names differ only in
// case, all at once: they all get the same generated slot and publication
// names, which must still end up distinct (two mirrors on one slot would
// steal each other's changes, and one's cleanup would drop the other's slot).
func TestMirrorCreateConcurrentNames(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	names := []string{"race", "Race", "rAce", "raCe", "racE", "RAce", "RACe", "RACE"}
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			raw, err := json.Marshal(mirrorBody(name))
			if err != nil {
				panic(err)
			}
			req, err := http.NewRequest(http.MethodPost, b.server.URL+"/v1/mirrors", strings.NewReader(string(raw)))
			if err != nil {
				panic(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+b.adminToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				panic(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				panic(fmt.Sprintf("create %s: status %d", name, resp.StatusCode))
			}
		})
	}
	wg.Wait()
	slots, pubs := map[string]bool{}, map[string]bool{}
	rows, err := b.pool.Query(t.Context(), `SELECT replication_slot_name, publication_name FROM mirrors`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var slot, pub string
		require.NoError(t, rows.Scan(&slot, &pub))
		require.False(t, slots[slot], "slot %s given twice", slot)
		require.False(t, pubs[pub], "publication %s given twice", pub)
		slots[slot], pubs[pub] = true, true
	}
	require.NoError(t, rows.Err())
	require.Len(t, slots, len(names))
}

type mirrorSummaryRec struct {
	Name            string
	SourcePeer      string `json:"source_peer"`
	DestinationPeer string `json:"destination_peer"`
	Status          string
}

func (b *bundle) mirrorList() []mirrorSummaryRec {
	b.t.Helper()
	var out []mirrorSummaryRec
	b.mustDecode(http.MethodGet, "/v1/mirrors", b.viewerToken, nil, http.StatusOK, &out)
	return out
}

func TestMirrorListGetDelete(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	raw := b.mustDo(http.MethodGet, "/v1/mirrors", b.viewerToken, nil, http.StatusOK)
	require.JSONEq(t, `[]`, string(raw))

	b.createMirror("zeta")
	b.createMirror("alpha", mapping("orders", "orders"), mapping("items", "items"))
	b.setStatus("zeta", "running")
	require.Equal(t, []mirrorSummaryRec{
		{Name: "alpha", SourcePeer: "src", DestinationPeer: "dst", Status: "initializing"},
		{Name: "zeta", SourcePeer: "src", DestinationPeer: "dst", Status: "running"},
	}, b.mirrorList())

	// The status record has every field of the spec, null where unknown.
	raw = b.mustDo(http.MethodGet, "/v1/mirrors/alpha", b.viewerToken, nil, http.StatusOK)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	for _, f := range []string{"name", "source_peer", "destination_peer", "status", "last_lsn", "last_sync_batch_id", "error_message",
		"error_count", "tables", "created_at", "updated_at"} {
		require.Contains(t, fields, f)
	}
	require.Nil(t, fields["last_lsn"])
	require.Nil(t, fields["error_message"])
	// No replica runs it here: no worker, shown as null.
	require.Contains(t, fields, "worker")
	require.Contains(t, fields, "worker_seen_at")
	require.Nil(t, fields["worker"])
	require.Nil(t, fields["worker_seen_at"])
	tables := fields["tables"].([]any)
	require.Len(t, tables, 2)
	for _, tb := range tables {
		for _, f := range []string{"table_name", "status", "rows_synced", "rows_inserted", "rows_updated", "rows_deleted", "last_synced_at"} {
			require.Contains(t, tb, f)
		}
	}
	st := b.mirrorStatus("alpha")
	require.Equal(t, "alpha", st.Name)
	require.Equal(t, "src", st.SourcePeer)
	require.Equal(t, "dst", st.DestinationPeer)
	require.Equal(t, "initializing", st.Status)
	require.Zero(t, st.ErrorCount)
	require.WithinDuration(t, time.Now(), st.CreatedAt, time.Minute)
	require.Equal(t, []tableStatusRec{{TableName: "public.orders", Status: "pending"}, {TableName: "public.items", Status: "pending"}}, st.Tables)

	// What a worker writes shows up.
	b.setStatus("alpha", "running")
	b.exec(`UPDATE mirrors SET last_lsn = '16/B374D848', last_sync_batch_id = 42 WHERE name = 'alpha'`)
	b.exec(`UPDATE mirror_tables SET status = 'running', rows_synced = 10, rows_inserted = 4, rows_updated = 3, rows_deleted = 2,
		last_synced_at = now() WHERE source_table = 'orders'`)
	b.setStatus("alpha", "error")
	st = b.mirrorStatus("alpha")
	require.Equal(t, "error", st.Status)
	require.NotNil(t, st.LastLSN)
	require.Equal(t, "16/B374D848", *st.LastLSN)
	require.Regexp(t, `^[0-9A-F]+/[0-9A-F]+$`, *st.LastLSN)
	require.EqualValues(t, 42, st.LastSyncBatchID)
	require.NotNil(t, st.ErrorMessage)
	require.Equal(t, "connection refused", *st.ErrorMessage)
	require.Equal(t, 1, st.ErrorCount)
	require.False(t, st.UpdatedAt.Before(st.CreatedAt))
	orders := st.Tables[0]
	require.Equal(t, "running", orders.Status)
	require.EqualValues(t, []int64{10, 4, 3, 2}, []int64{orders.RowsSynced, orders.RowsInserted, orders.RowsUpdated, orders.RowsDeleted})
	require.NotNil(t, orders.LastSyncedAt)

	b.requireError(http.MethodGet, "/v1/mirrors/ghost", b.viewerToken, nil, http.StatusNotFound, "ghost")

	// Delete: the mirror is gone at once, its cleanup job is enqueued.
	b.requireError(http.MethodDelete, "/v1/mirrors/ghost", b.adminToken, nil, http.StatusNotFound, "ghost")
	var del struct{ Deleted string }
	raw = b.mustDo(http.MethodDelete, "/v1/mirrors/alpha", b.adminToken, nil, http.StatusOK)
	require.JSONEq(t, `{"deleted": "alpha"}`, string(raw))
	require.NoError(t, json.Unmarshal(raw, &del))
	require.Equal(t, 1, b.mirrorJobs("mirror_cleanup", "alpha"))
	b.requireError(http.MethodGet, "/v1/mirrors/alpha", b.viewerToken, nil, http.StatusNotFound, "alpha")
	b.requireError(http.MethodDelete, "/v1/mirrors/alpha", b.adminToken, nil, http.StatusNotFound, "alpha")
	b.requireError(http.MethodGet, "/v1/mirrors/alpha/tables", b.viewerToken, nil, http.StatusNotFound, "alpha")
	b.requireError(http.MethodGet, "/v1/mirrors/alpha/logs", b.viewerToken, nil, http.StatusNotFound, "alpha")
	require.Len(t, b.mirrorList(), 1)

	// The name is free again, while the old mirror's slot and publication
	// are still being cleaned up: the new mirror gets other names.
	again := b.createMirror("alpha")
	require.NotEqual(t, "pgmirror_slot_alpha", again.ReplicationSlotName)
	require.NotEqual(t, "pgmirror_pub_alpha", again.PublicationName)
	require.True(t, strings.HasPrefix(again.ReplicationSlotName, "pgmirror_slot_alpha_"), again.ReplicationSlotName)
	require.Equal(t, "initializing", b.mirrorStatus("alpha").Status)
}

func TestMirrorPauseResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("m")

	b.requireError(http.MethodPost, "/v1/mirrors/ghost/pause", b.adminToken, nil, http.StatusNotFound, "ghost")
	b.requireError(http.MethodPost, "/v1/mirrors/ghost/resume", b.adminToken, nil, http.StatusNotFound, "ghost")
	// An operation in progress: setup, snapshot.
	b.requireError(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusConflict, "initializing")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusConflict, "not paused")
	b.setStatus("m", "snapshotting")
	b.requireError(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusConflict, "snapshot")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusConflict, "not paused")
	b.setStatus("m", "running")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusConflict, "not paused")
	require.Equal(t, "running", b.mirrorStatus("m").Status)

	var out struct{ Message, Status string }
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK, &out)
	require.Equal(t, "paused", out.Status)
	require.NotEmpty(t, out.Message)
	require.Equal(t, "paused", b.mirrorStatus("m").Status)
	b.requireError(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusConflict, "already paused")
	require.Equal(t, []string{"Mirror paused"}, b.logMessages("m"))

	runs := b.mirrorJobs("mirror_run", "m")
	out = struct{ Message, Status string }{}
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusOK, &out)
	require.Equal(t, "running", out.Status)
	require.NotEmpty(t, out.Message)
	require.Equal(t, "running", b.mirrorStatus("m").Status)
	require.Equal(t, runs+1, b.mirrorJobs("mirror_run", "m"), "resume enqueues a run job")
	require.Equal(t, []string{"Mirror resumed", "Mirror paused"}, b.logMessages("m"))
	b.requireError(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusConflict, "not paused")

	// A failed mirror can be paused (its retries stop); a stopped one cannot.
	b.setStatus("m", "error")
	b.mustDo(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK)
	require.Equal(t, "paused", b.mirrorStatus("m").Status)
	b.setStatus("m", "stopped")
	b.requireError(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusConflict, "stopped")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resume", b.adminToken, nil, http.StatusConflict, "not paused")

	// A pending resync is an operation in progress.
	b.createMirror("r")
	b.setStatus("r", "running")
	b.mustDo(http.MethodPost, "/v1/mirrors/r/resync", b.adminToken, nil, http.StatusOK)
	b.requireError(http.MethodPost, "/v1/mirrors/r/pause", b.adminToken, nil, http.StatusConflict, "resync")
	b.createMirror("rt")
	b.setStatus("rt", "running")
	b.mustDo(http.MethodPost, "/v1/mirrors/rt/resync/public.orders", b.adminToken, nil, http.StatusOK)
	b.requireError(http.MethodPost, "/v1/mirrors/rt/pause", b.adminToken, nil, http.StatusConflict, "public.orders")
}

// logMessages returns the messages of a mirror's log, newest first.
func (b *bundle) logMessages(mirror string) []string {
	b.t.Helper()
	var out struct {
		Logs []struct{ Message string }
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors/"+mirror+"/logs", b.viewerToken, nil, http.StatusOK, &out)
	msgs := []string{}
	for _, l := range out.Logs {
		msgs = append(msgs, l.Message)
	}
	return msgs
}

func TestMirrorResyncRetrySyncSchema(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("m", mapping("orders", "orders"), map[string]any{"source_schema": "Sales", "source_table": "Order Items",
		"destination_schema": "public", "destination_table": "order_items"})

	for _, op := range []string{"resync", "retry", "sync-schema", "resync/public.orders"} {
		b.requireError(http.MethodPost, "/v1/mirrors/ghost/"+op, b.adminToken, nil, http.StatusNotFound, "ghost")
		b.requireError(http.MethodPost, "/v1/mirrors/m/"+op, b.adminToken, nil, http.StatusConflict)
	}
	b.setStatus("m", "running")
	b.requireError(http.MethodPost, "/v1/mirrors/m/retry", b.adminToken, nil, http.StatusConflict, "not in error")

	// Table resync: {table} is the source schema.table, URL-escaped.
	b.requireError(http.MethodPost, "/v1/mirrors/m/resync/public.ghost", b.adminToken, nil, http.StatusNotFound, "public.ghost")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resync/public.order_items", b.adminToken, nil, http.StatusNotFound, "public.order_items")
	b.requireError(http.MethodPost, "/v1/mirrors/m/resync/orders", b.adminToken, nil, http.StatusBadRequest, "schema.table")
	runs := b.mirrorJobs("mirror_run", "m")
	var tr struct{ Message, Table string }
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/resync/"+url.PathEscape("Sales.Order Items"), b.adminToken, nil, http.StatusOK, &tr)
	require.Equal(t, "Sales.Order Items", tr.Table)
	require.NotEmpty(t, tr.Message)
	require.Equal(t, runs+1, b.mirrorJobs("mirror_run", "m"))
	var requested int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM mirror_tables WHERE resync_requested_at IS NOT NULL AND source_table = 'Order Items'`).Scan(&requested))
	require.Equal(t, 1, requested)
	require.Equal(t, "running", b.mirrorStatus("m").Status, "a table resync keeps the mirror running")
	require.Equal(t, []string{"Table resync started"}, b.logMessages("m"))
	// While it is pending, other operations wait.
	b.requireError(http.MethodPost, "/v1/mirrors/m/resync/public.orders", b.adminToken, nil, http.StatusConflict, "Sales.Order Items")
	b.exec(`UPDATE mirror_tables SET resync_requested_at = NULL`)

	// Schema sync.
	var msg struct{ Message string }
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/sync-schema", b.adminToken, nil, http.StatusOK, &msg)
	require.NotEmpty(t, msg.Message)
	require.Equal(t, runs+2, b.mirrorJobs("mirror_run", "m"))
	require.Equal(t, "Schema sync initiated", b.logMessages("m")[0])
	b.requireError(http.MethodPost, "/v1/mirrors/m/resync", b.adminToken, nil, http.StatusConflict, "schema sync")
	b.exec(`UPDATE mirrors SET pending_action = NULL`)

	// Full resync.
	msg.Message = ""
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/resync", b.adminToken, nil, http.StatusOK, &msg)
	require.NotEmpty(t, msg.Message)
	require.Equal(t, runs+3, b.mirrorJobs("mirror_run", "m"))
	var action string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT pending_action FROM mirrors WHERE name = 'm'`).Scan(&action))
	require.Equal(t, "resync", action)
	b.requireError(http.MethodPost, "/v1/mirrors/m/sync-schema", b.adminToken, nil, http.StatusConflict, "resync")
	b.exec(`UPDATE mirrors SET pending_action = NULL`)

	// A paused mirror resumes to carry out a resync; a table resync waits
	// for the mirror to be resumed.
	b.mustDo(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK)
	tr.Message = ""
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/resync/public.orders", b.adminToken, nil, http.StatusOK, &tr)
	require.Contains(t, tr.Message, "when it is resumed")
	var desired string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT desired_state FROM mirrors WHERE name = 'm'`).Scan(&desired))
	require.Equal(t, "paused", desired)
	b.exec(`UPDATE mirror_tables SET resync_requested_at = NULL`)
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/resync", b.adminToken, nil, http.StatusOK, &msg)
	require.Contains(t, msg.Message, "paused")
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT desired_state, status FROM mirrors WHERE name = 'm'`).Scan(&desired, &status))
	require.Equal(t, "running", desired)
	require.Equal(t, "running", status, "a paused mirror resumes to carry out a resync")
	require.Equal(t, "Mirror resumed", b.logMessages("m")[0])
	b.exec(`UPDATE mirrors SET pending_action = NULL`)

	// Retry: only for a mirror in error; it makes the retry due now.
	b.setStatus("m", "error")
	b.mustDecode(http.MethodPost, "/v1/mirrors/m/retry", b.adminToken, nil, http.StatusOK, &msg)
	require.NotEmpty(t, msg.Message)
	var due bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT next_retry_at <= now() FROM mirrors WHERE name = 'm'`).Scan(&due))
	require.True(t, due)
	require.Equal(t, "Retry signal received", b.logMessages("m")[0])

	b.setStatus("m", "stopped")
	for _, op := range []string{"resync", "retry", "sync-schema", "resync/public.orders"} {
		b.requireError(http.MethodPost, "/v1/mirrors/m/"+op, b.adminToken, nil, http.StatusConflict)
	}
}

func TestMirrorTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srcURL := b.mirrorPeers()
	b.createMirror("m", mapping("orders", "orders"), map[string]any{"source_schema": "public", "source_table": "items",
		"destination_schema": "archive", "destination_table": "items", "exclude_columns": []string{"id"}})

	var got []tableMappingRec
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/tables", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, []tableMappingRec{
		{SourceSchema: "public", SourceTable: "orders", DestinationSchema: "public", DestinationTable: "orders"},
		{SourceSchema: "public", SourceTable: "items", DestinationSchema: "archive", DestinationTable: "items", ExcludeColumns: []string{"id"}},
	}, got)
	b.requireError(http.MethodGet, "/v1/mirrors/ghost/tables", b.viewerToken, nil, http.StatusNotFound, "ghost")

	type ref struct {
		Schema    string
		TableName string `json:"table_name"`
	}
	var avail []ref
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/available-tables", b.viewerToken, nil, http.StatusOK, &avail)
	require.Equal(t, []ref{{"Sales", "Order Items"}, {"public", "customers"}, {"public", "fullident"}, {"public", "nopk"}}, avail)
	b.requireError(http.MethodGet, "/v1/mirrors/ghost/available-tables", b.viewerToken, nil, http.StatusNotFound, "ghost")

	desired := map[string]any{"table_mappings": []any{
		with(mapping("orders", "orders"), "exclude_columns", []string{"secret"}),
		mapping("customers", "customers"),
	}}
	b.requireError(http.MethodPut, "/v1/mirrors/ghost/tables", b.adminToken, desired, http.StatusNotFound, "ghost")
	b.requireError(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, desired, http.StatusConflict, "not paused")
	b.setStatus("m", "running")
	b.requireError(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, desired, http.StatusConflict, "not paused")
	// Basic validation comes before the state check.
	b.requireError(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, map[string]any{"table_mappings": []any{}}, http.StatusBadRequest, "table_mappings")
	b.mustDo(http.MethodPost, "/v1/mirrors/m/pause", b.adminToken, nil, http.StatusOK)

	for name, body := range map[string]any{
		"empty":                 map[string]any{"table_mappings": []any{}},
		"missing":               map[string]any{},
		"not an array":          map[string]any{"table_mappings": map[string]any{"source_table": "orders"}},
		"missing field":         map[string]any{"table_mappings": []any{without(mapping("orders", "orders"), "destination_table")}},
		"empty field":           map[string]any{"table_mappings": []any{with(mapping("orders", "orders"), "source_schema", "")}},
		"duplicate destination": map[string]any{"table_mappings": []any{mapping("orders", "x"), mapping("customers", "x")}},
		"unknown table":         map[string]any{"table_mappings": []any{mapping("ghost", "ghost")}},
		"no primary key":        map[string]any{"table_mappings": []any{mapping("nopk", "nopk")}},
		"malformed json":        `{"table_mappings": [`,
	} {
		t.Run(name, func(t *testing.T) {
			b.on(t).mustDo(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, body, http.StatusBadRequest)
		})
	}
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/tables", b.viewerToken, nil, http.StatusOK, &got)
	require.Len(t, got, 2, "a rejected PUT changes nothing")

	// Progress of a table that stays is kept; a new one starts pending.
	b.exec(`UPDATE mirror_tables SET status = 'running', rows_synced = 7 WHERE source_table = 'orders'`)
	got = nil
	b.mustDecode(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, desired, http.StatusOK, &got)
	want := []tableMappingRec{
		{SourceSchema: "public", SourceTable: "orders", DestinationSchema: "public", DestinationTable: "orders", ExcludeColumns: []string{"secret"}},
		{SourceSchema: "public", SourceTable: "customers", DestinationSchema: "public", DestinationTable: "customers"},
	}
	require.Equal(t, want, got)
	got = nil
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/tables", b.viewerToken, nil, http.StatusOK, &got)
	require.Equal(t, want, got)
	st := b.mirrorStatus("m")
	require.Equal(t, "paused", st.Status)
	require.Equal(t, []tableStatusRec{{TableName: "public.orders", Status: "running", RowsSynced: 7}, {TableName: "public.customers", Status: "pending"}}, st.Tables)
	avail = nil
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/available-tables", b.viewerToken, nil, http.StatusOK, &avail)
	require.Equal(t, []ref{{"Sales", "Order Items"}, {"public", "fullident"}, {"public", "items"}, {"public", "nopk"}}, avail)

	// A new destination for a kept table starts it over.
	b.mustDo(http.MethodPut, "/v1/mirrors/m/tables", b.adminToken, map[string]any{"table_mappings": []any{
		mapping("orders", "orders_v2"), mapping("customers", "customers")}}, http.StatusOK)
	st = b.mirrorStatus("m")
	require.Equal(t, "public.orders", st.Tables[0].TableName)
	require.Equal(t, "pending", st.Tables[0].Status)

	// A table created on the source later becomes available.
	pgtest.Exec(t, srcURL, `CREATE TABLE zebra (id int PRIMARY KEY)`)
	avail = nil
	b.mustDecode(http.MethodGet, "/v1/mirrors/m/available-tables", b.viewerToken, nil, http.StatusOK, &avail)
	require.Contains(t, avail, ref{"public", "zebra"})
}
