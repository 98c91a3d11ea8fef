package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
)

// fleetItem is a list item as the fleet tests read it.
type fleetItem struct {
	Name            string   `json:"name"`
	SourcePeer      string   `json:"source_peer"`
	DestinationPeer string   `json:"destination_peer"`
	Status          string   `json:"status"`
	ErrorMessage    *string  `json:"error_message"`
	LagSeconds      *float64 `json:"lag_seconds"`
	RowsSynced      int64    `json:"rows_synced"`
}

// catalogMirror creates a mirror straight in the catalog (no peer is
// reached), from source to destination, with one table.
func (b *bundle) catalogMirror(name, source, destination string) int64 {
	b.t.Helper()
	ctx := context.Background()
	peer := func(name string) int64 {
		p, err := b.store.PeerGetByName(ctx, name)
		if err != nil {
			p, err = b.store.PeerCreate(ctx, db.PeerCreateParams{Name: name, Host: "127.0.0.1", Port: 1, User: "u", Password: peerPassword,
				Database: "d", SSLMode: "disable"})
		}
		require.NoError(b.t, err)
		return p.ID
	}
	src, dst := peer(source), peer(destination)
	tx, err := b.pool.Begin(ctx)
	require.NoError(b.t, err)
	defer tx.Rollback(ctx)
	table := change.TableName{Schema: "public", Name: "t"}
	m, err := b.store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{Name: name, SourcePeerID: src, DestinationPeerID: dst,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1, CDCSyncIntervalSeconds: 60,
		CDCBatchSize: 100, PublicationName: "pub_" + strings.ReplaceAll(name, "-", "_"), ReplicationSlotName: "slot_" + strings.ReplaceAll(name, "-", "_"),
		Tables: []change.Mapping{{Source: table, Destination: table}}})
	require.NoError(b.t, err)
	require.NoError(b.t, tx.Commit(ctx))
	return m.ID
}

// list reads GET /v1/mirrors with query, and its two total headers.
func (b *bundle) list(query string) (items []fleetItem, total int, totals string) {
	b.t.Helper()
	status, h, raw := b.doHeaders(http.MethodGet, "/v1/mirrors"+query, b.viewerToken, nil)
	require.Equal(b.t, http.StatusOK, status, "GET /v1/mirrors%s: %s", query, raw)
	require.NoError(b.t, json.Unmarshal(raw, &items))
	total, err := strconv.Atoi(h.Get("X-Total-Count"))
	require.NoError(b.t, err, "X-Total-Count of %s", query)
	return items, total, h.Get("X-Status-Totals")
}

func names(items []fleetItem) []string {
	out := make([]string, len(items))
	for i, m := range items {
		out[i] = m.Name
	}
	return out
}

// TestMirrorListFleet: the list filters by status (repeatable) and text
// (name or peers, any case), sorts by name, status, lag and creation time
// both ways, pages, and always reports the matching count and the fleet's
// totals by status; without parameters it is the whole list by name; bad
// parameters are 400s that name the allowed values.
func TestMirrorListFleet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// 12 mirrors created in the order 11, 10, ..., 0 (so that creation and
	// name orders differ): 0-5 running with lag 0.5 * i (5 without a
	// measure), 6-8 paused, 9-10 in error, 11 initializing; 0-3 read from
	// peer Orders-Primary, the others from peer billing.
	ids := map[string]int64{}
	for i := 11; i >= 0; i-- {
		name := fmt.Sprintf("fleet-%02d", i)
		src := "billing"
		if i < 4 {
			src = "Orders-Primary"
		}
		ids[name] = b.catalogMirror(name, src, "warehouse")
		switch {
		case i <= 5:
			b.setStatus(name, "running")
			if i < 5 {
				require.NoError(t, b.store.MirrorRecordLag(ctx, ids[name], float64(i)*0.5+0.25, time.Now(), time.Now()))
			}
		case i <= 8:
			b.setStatus(name, "paused")
		case i <= 10:
			b.setStatus(name, "error")
		}
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	b.exec(`UPDATE mirror_tables SET rows_synced = 1234 WHERE mirror_id = $1`, ids["fleet-03"])
	const fleetTotals = "initializing=1, snapshotting=0, running=6, paused=3, error=2, stopped=0, completed=0"

	// Without parameters: every mirror by name, as before.
	items, total, totals := b.list("")
	require.Len(t, items, 12)
	require.Equal(t, "fleet-00", items[0].Name)
	require.Equal(t, "fleet-11", items[11].Name)
	require.Equal(t, 12, total)
	require.Equal(t, fleetTotals, totals)
	require.EqualValues(t, 1234, items[3].RowsSynced, "the rows of the list row")
	require.NotNil(t, items[9].ErrorMessage, "the error text of the list row")
	require.NotNil(t, items[0].LagSeconds, "the lag of the list row")

	// Status filter, repeated; the totals stay the fleet's.
	items, total, totals = b.list("?status=error&status=paused")
	require.Equal(t, []string{"fleet-06", "fleet-07", "fleet-08", "fleet-09", "fleet-10"}, names(items))
	require.Equal(t, 5, total)
	require.Equal(t, fleetTotals, totals)
	// The same as a comma list, and both forms together.
	items, total, _ = b.list("?status=" + url.QueryEscape("error,paused"))
	require.Equal(t, []string{"fleet-06", "fleet-07", "fleet-08", "fleet-09", "fleet-10"}, names(items))
	require.Equal(t, 5, total)
	items, _, _ = b.list("?status=error,paused&status=initializing")
	require.Len(t, items, 6)

	// Text: in the name or a peer's name, any case.
	items, total, _ = b.list("?q=" + url.QueryEscape("ORDERS-prim"))
	require.Equal(t, []string{"fleet-00", "fleet-01", "fleet-02", "fleet-03"}, names(items))
	require.Equal(t, 4, total)
	items, _, _ = b.list("?q=ET-1")
	require.Equal(t, []string{"fleet-10", "fleet-11"}, names(items))
	items, _, _ = b.list("?q=warehouse&status=running&q=x") // the first q counts
	require.Len(t, items, 6)
	items, total, _ = b.list("?q=nothing-like-it")
	require.Empty(t, items)
	require.Zero(t, total)

	// Sorts, ties by name; mirrors without a lag last both ways.
	items, _, _ = b.list("?status=running&sort=-lag")
	require.Equal(t, []string{"fleet-04", "fleet-03", "fleet-02", "fleet-01", "fleet-00", "fleet-05"}, names(items))
	items, _, _ = b.list("?status=running&sort=lag")
	require.Equal(t, []string{"fleet-00", "fleet-01", "fleet-02", "fleet-03", "fleet-04", "fleet-05"}, names(items))
	items, _, _ = b.list("?sort=-name&limit=3")
	require.Equal(t, []string{"fleet-11", "fleet-10", "fleet-09"}, names(items))
	items, _, _ = b.list("?sort=created&limit=3")
	require.Equal(t, []string{"fleet-11", "fleet-10", "fleet-09"}, names(items))
	items, _, _ = b.list("?sort=-created&limit=3")
	require.Equal(t, []string{"fleet-00", "fleet-01", "fleet-02"}, names(items))
	items, _, _ = b.list("?sort=status")
	require.Equal(t, "fleet-11", items[0].Name, "initializing first")
	require.Equal(t, []string{"initializing", "running", "running", "running", "running", "running", "running", "paused", "paused", "paused", "error", "error"},
		func() []string {
			out := []string{}
			for _, m := range items {
				out = append(out, m.Status)
			}
			return out
		}())
	items, _, _ = b.list("?sort=-status&limit=2")
	require.Equal(t, []string{"fleet-09", "fleet-10"}, names(items))

	// Pages.
	items, total, _ = b.list("?limit=5&offset=5")
	require.Equal(t, []string{"fleet-05", "fleet-06", "fleet-07", "fleet-08", "fleet-09"}, names(items))
	require.Equal(t, 12, total)
	items, total, _ = b.list("?limit=5&offset=10")
	require.Equal(t, []string{"fleet-10", "fleet-11"}, names(items))
	require.Equal(t, 12, total)
	items, total, _ = b.list("?offset=40")
	require.Empty(t, items)
	require.Equal(t, 12, total)

	// Bad parameters.
	b.requireError(http.MethodGet, "/v1/mirrors?status=bogus", b.viewerToken, nil, http.StatusBadRequest,
		"status", "initializing, snapshotting, running, paused, error, stopped, completed")
	b.requireError(http.MethodGet, "/v1/mirrors?status=running,bogus", b.viewerToken, nil, http.StatusBadRequest, "running, paused, error")
	b.requireError(http.MethodGet, "/v1/mirrors?sort=size", b.viewerToken, nil, http.StatusBadRequest, "sort", "name", "-lag", "created")
	b.requireError(http.MethodGet, "/v1/mirrors?limit=0", b.viewerToken, nil, http.StatusBadRequest, "limit", "1")
	b.requireError(http.MethodGet, "/v1/mirrors?limit=1001", b.viewerToken, nil, http.StatusBadRequest, "limit", "1000")
	b.requireError(http.MethodGet, "/v1/mirrors?limit=ten", b.viewerToken, nil, http.StatusBadRequest, "limit")
	b.requireError(http.MethodGet, "/v1/mirrors?offset=-1", b.viewerToken, nil, http.StatusBadRequest, "offset")
	b.mustDo(http.MethodGet, "/v1/mirrors?limit=5", "", nil, http.StatusUnauthorized)
}

type historyPage struct {
	Mirror          string    `json:"mirror"`
	Since           time.Time `json:"since"`
	IntervalSeconds int       `json:"interval_seconds"`
	Samples         []struct {
		At            time.Time `json:"at"`
		LagSeconds    *float64  `json:"lag_seconds"`
		RowsPerSecond *float64  `json:"rows_per_second"`
	} `json:"samples"`
}

// TestMirrorHistoryAPI: the history of a mirror, for viewers, over the
// last 3 hours by default or since a time or a duration back, oldest
// first; bad since and unknown mirrors are refused.
func TestMirrorHistoryAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := b.catalogMirror("hist", "src", "dst")
	b.catalogMirror("other", "src", "dst")
	// A sample every 10 minutes for 5 hours back, lag = minutes ago.
	b.exec(`INSERT INTO mirror_metrics_history (mirror_id, at, lag_seconds, rows_synced, rows_per_second)
		SELECT $1, now() - i * interval '10 minutes', i * 10, 1000 - i, i FROM generate_series(0, 30) i`, id)
	read := func(query string) historyPage {
		t.Helper()
		var p historyPage
		b.mustDecode(http.MethodGet, "/v1/mirrors/hist/history"+query, b.viewerToken, nil, http.StatusOK, &p)
		return p
	}
	p := read("")
	require.Equal(t, "hist", p.Mirror)
	require.Equal(t, 30, p.IntervalSeconds)
	require.Len(t, p.Samples, 18, "3 hours: the samples 0 to 170 minutes ago")
	require.Equal(t, 170.0, *p.Samples[0].LagSeconds, "oldest first")
	require.Equal(t, 0.0, *p.Samples[17].LagSeconds)
	require.WithinDuration(t, time.Now().Add(-3*time.Hour), p.Since, time.Minute)

	require.Len(t, read("?since=1h").Samples, 6)
	require.Len(t, read("?since=1d").Samples, 31)
	require.Len(t, read("?since="+url.QueryEscape(time.Now().Add(-25*time.Minute).UTC().Format(time.RFC3339))).Samples, 3)
	require.Empty(t, read("?since=0s").Samples)

	var other historyPage
	b.mustDecode(http.MethodGet, "/v1/mirrors/other/history", b.viewerToken, nil, http.StatusOK, &other)
	require.NotNil(t, other.Samples)
	require.Empty(t, other.Samples)

	b.requireError(http.MethodGet, "/v1/mirrors/hist/history?since=yesterday", b.viewerToken, nil, http.StatusBadRequest, "RFC 3339", "6h")
	b.requireError(http.MethodGet, "/v1/mirrors/hist/history?since=-1h", b.viewerToken, nil, http.StatusBadRequest, "since")
	b.requireError(http.MethodGet, "/v1/mirrors/ghost/history", b.viewerToken, nil, http.StatusNotFound, "ghost")
	b.mustDo(http.MethodGet, "/v1/mirrors/hist/history", "", nil, http.StatusUnauthorized)
}

// TestMirrorListScale: with 1,000 mirrors a page of the list, its totals
// and its count come in one request of bounded time (the handler reads
// the catalog with the same few queries whatever the page).
func TestMirrorListScale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 1000
	b.catalogMirror("scale-0000", "src", "dst")
	// The other mirrors as copies of the first, in one statement.
	b.exec(`INSERT INTO mirrors (name, source_peer_id, destination_peer_id, snapshot_num_rows_per_partition, snapshot_max_parallel_workers,
			snapshot_num_tables_in_parallel, cdc_sync_interval_seconds, cdc_batch_size, publication_name, replication_slot_name)
		SELECT format('scale-%s', lpad(i::text, 4, '0')), m.source_peer_id, m.destination_peer_id, 1, 1, 1, 60, 100,
			format('pub_scale_%s', i), format('slot_scale_%s', i)
		FROM mirrors m, generate_series(1, $1 - 1) i WHERE m.name = 'scale-0000'`, n)
	b.exec(`INSERT INTO mirror_tables (mirror_id, position, source_schema, source_table, destination_schema, destination_table, rows_synced)
		SELECT id, 0, 'public', 't', 'public', 't', id FROM mirrors WHERE name <> 'scale-0000'`)
	b.exec(`UPDATE mirrors SET status = 'error', error_message = 'x', next_retry_at = now() + interval '1 day' WHERE name LIKE 'scale-__0_'`)
	var best time.Duration
	for range 5 {
		start := time.Now()
		items, total, totals := b.list("?status=error&sort=-lag&limit=50&offset=50")
		d := time.Since(start)
		if best == 0 || d < best {
			best = d
		}
		require.Len(t, items, 50)
		require.Equal(t, 100, total)
		require.Equal(t, "initializing=900, snapshotting=0, running=0, paused=0, error=100, stopped=0, completed=0", totals)
	}
	start := time.Now()
	all, total, _ := b.list("")
	t.Logf("GET /v1/mirrors with %d mirrors: a filtered page of 50 in %s (best of 5), the whole list in %s", n, best, time.Since(start))
	require.Len(t, all, n)
	require.Equal(t, n, total)
	require.Less(t, best, 2*time.Second, "a page of the list of %d mirrors", n)
}
