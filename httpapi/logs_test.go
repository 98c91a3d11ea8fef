package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

type logPage struct {
	Logs []struct {
		ID        int64
		Level     string
		Message   string
		Details   map[string]any
		CreatedAt time.Time `json:"created_at"`
	}
	Total  int64
	Offset int
	Limit  int
}

func (b *bundle) logs(mirror string, query url.Values) logPage {
	b.t.Helper()
	var page logPage
	path := "/v1/mirrors/" + mirror + "/logs"
	if len(query) > 0 {
		path += "?" + query.Encode()
	}
	raw := b.mustDo(http.MethodGet, path, b.viewerToken, nil, http.StatusOK)
	require.NoError(b.t, json.Unmarshal(raw, &page), "%s", raw)
	var keys map[string]json.RawMessage
	require.NoError(b.t, json.Unmarshal(raw, &keys))
	for _, k := range []string{"logs", "total", "offset", "limit"} {
		require.Contains(b.t, keys, k)
	}
	require.NotEqual(b.t, "null", string(keys["logs"]), "logs is an array even when empty")
	return page
}

func (b *bundle) mirrorID(name string) int64 {
	b.t.Helper()
	var id int64
	require.NoError(b.t, b.pool.QueryRow(context.Background(), `SELECT id FROM mirrors WHERE name = $1 AND deleted_at IS NULL`, name).Scan(&id))
	return id
}

func q(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v
}

func TestLogs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.mirrorPeers()
	b.createMirror("m")
	b.createMirror("other")
	ctx := context.Background()
	id := b.mirrorID("m")

	page := b.logs("m", nil)
	require.Empty(t, page.Logs)
	require.Zero(t, page.Total)
	require.Equal(t, 50, page.Limit)
	require.Zero(t, page.Offset)

	// 600 entries: every 10th an ERROR, every 10th (shifted) a WARN, some
	// DEBUG, the rest INFO, with the spec's details shapes.
	const n = 600
	var ids []int64
	for i := range n {
		level, msg := db.LevelInfo, db.MsgCDCBatchApplied
		var details any = db.CDCBatchDetails{BatchID: int64(i), RowsProcessed: 3, LSN: fmt.Sprintf("0/%X", 1000+i), TablesAffected: []string{"public.orders"}}
		switch {
		case i%10 == 0:
			level, msg = db.LevelError, db.MsgCDCBatchFailed
			details = db.ErrorDetails{Error: fmt.Sprintf(`relation "public.t%d" does not exist`, i), RetryCount: 1, Operation: "apply"}
		case i%10 == 5:
			level, msg = db.LevelWarn, db.MsgForeignKeyViolation
			details = map[string]any{"table": "public.items", "constraint": "items_order_fk"}
		case i%7 == 0:
			level, msg, details = db.LevelDebug, "Keepalive sent", nil
		}
		require.NoError(t, b.store.LogInsert(ctx, id, level, msg, details))
	}
	// ids[i] is the id of the i-th entry written.
	rows, err := b.pool.Query(ctx, `SELECT id FROM mirror_logs WHERE mirror_id = $1 ORDER BY id`, id)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		ids = append(ids, v)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)
	require.NoError(t, b.store.LogInsert(ctx, b.mirrorID("other"), db.LevelError, "Snapshot failed", db.ErrorDetails{Error: "public.orders"}))

	// Defaults: 50 newest first, total counts everything.
	page = b.logs("m", nil)
	require.Len(t, page.Logs, 50)
	require.EqualValues(t, n, page.Total)
	require.Equal(t, 50, page.Limit)
	require.Zero(t, page.Offset)
	for i, l := range page.Logs {
		require.Equal(t, ids[n-1-i], l.ID, "newest first")
		require.NotEmpty(t, l.Level)
		require.NotEmpty(t, l.Message)
		require.NotNil(t, l.Details, "details is an object, {} when empty")
		require.WithinDuration(t, time.Now(), l.CreatedAt, time.Minute)
	}
	newest := page.Logs[0]
	require.Equal(t, "INFO", newest.Level)
	require.Equal(t, "CDC batch applied successfully", newest.Message)
	require.Equal(t, map[string]any{"batch_id": float64(599), "rows_processed": float64(3), "rows_inserted": float64(0), "rows_updated": float64(0),
		"rows_deleted": float64(0), "duration_ms": float64(0), "lsn": "0/63F", "tables_affected": []any{"public.orders"}}, newest.Details)

	// Limit: up to 500; more is refused rather than silently cut.
	page = b.logs("m", q("limit", "500"))
	require.Len(t, page.Logs, 500)
	require.Equal(t, 500, page.Limit)
	page = b.logs("m", q("limit", "1"))
	require.Len(t, page.Logs, 1)
	require.Equal(t, ids[n-1], page.Logs[0].ID)
	for _, bad := range []url.Values{q("limit", "501"), q("limit", "0"), q("limit", "-1"), q("limit", "ten"), q("offset", "-1"), q("offset", "x"),
		q("level", "FATAL"), q("level", "info")} {
		b.requireError(http.MethodGet, "/v1/mirrors/m/logs?"+bad.Encode(), b.viewerToken, nil, http.StatusBadRequest)
	}
	b.requireError(http.MethodGet, "/v1/mirrors/m/logs?limit=501", b.viewerToken, nil, http.StatusBadRequest, "limit", "500")

	// Offset: paging by offset until total visits every entry once, newest first.
	var seen []int64
	for off := 0; ; off += 130 {
		page = b.logs("m", q("limit", "130", "offset", fmt.Sprint(off)))
		require.Equal(t, off, page.Offset)
		require.EqualValues(t, n, page.Total)
		for _, l := range page.Logs {
			seen = append(seen, l.ID)
		}
		if int64(off+130) >= page.Total {
			break
		}
	}
	require.Len(t, seen, n)
	for i, got := range seen {
		require.Equal(t, ids[n-1-i], got)
	}
	page = b.logs("m", q("offset", "600"))
	require.Empty(t, page.Logs)
	require.EqualValues(t, n, page.Total)
	page = b.logs("m", q("offset", "590"))
	require.Len(t, page.Logs, 10)
	require.Equal(t, ids[9], page.Logs[0].ID)

	// Level filter.
	page = b.logs("m", q("level", "ERROR", "limit", "500"))
	require.EqualValues(t, 60, page.Total)
	require.Len(t, page.Logs, 60)
	for _, l := range page.Logs {
		require.Equal(t, "ERROR", l.Level)
	}
	require.EqualValues(t, 60, b.logs("m", q("level", "WARN")).Total)
	debug := 0
	for i := range n {
		if i%10 != 0 && i%10 != 5 && i%7 == 0 {
			debug++
		}
	}
	require.EqualValues(t, debug, b.logs("m", q("level", "DEBUG")).Total)
	require.EqualValues(t, n-120-debug, b.logs("m", q("level", "INFO")).Total)

	// Search: message text, case-insensitive.
	page = b.logs("m", q("search", "foreign KEY"))
	require.EqualValues(t, 60, page.Total)
	// Search: values in details, also text with quotes as a PostgreSQL error has it.
	page = b.logs("m", q("search", `relation "public.t590"`))
	require.EqualValues(t, 1, page.Total)
	require.Equal(t, ids[590], page.Logs[0].ID)
	require.Equal(t, `relation "public.t590" does not exist`, page.Logs[0].Details["error"])
	require.EqualValues(t, 60, b.logs("m", q("search", "items_order_fk")).Total)
	require.EqualValues(t, 1, b.logs("m", q("search", "0/63F")).Total, "lsn")
	require.EqualValues(t, n-120-debug, b.logs("m", q("search", "public.orders")).Total, "array elements in details")
	// Key names of details are not searched, only values.
	require.Zero(t, b.logs("m", q("search", "tables_affected")).Total)
	// LIKE wildcards are literal.
	require.Zero(t, b.logs("m", q("search", "%")).Total)
	require.Zero(t, b.logs("m", q("search", "public_orders")).Total)
	require.Zero(t, b.logs("m", q("search", "no such text")).Total)
	// An empty search is no filter.
	require.EqualValues(t, n, b.logs("m", q("search", "")).Total)

	// Combined filters, with paging.
	page = b.logs("m", q("level", "ERROR", "search", "public.t5", "limit", "5", "offset", "1"))
	// Errors whose table is public.t5xx or public.t50: 50, 500, 510, ..., 590.
	require.EqualValues(t, 11, page.Total)
	require.Len(t, page.Logs, 5)
	require.Equal(t, ids[580], page.Logs[0].ID)
	require.EqualValues(t, 0, b.logs("m", q("level", "WARN", "search", "does not exist")).Total)
	require.EqualValues(t, 1, b.logs("other", q("level", "ERROR", "search", "orders")).Total, "another mirror's log is separate")

	b.requireError(http.MethodGet, "/v1/mirrors/ghost/logs", b.viewerToken, nil, http.StatusNotFound, "ghost")
}
