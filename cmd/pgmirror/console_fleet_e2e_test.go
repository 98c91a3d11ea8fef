package main

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/httpapi/client"
)

// addCatalogFleet writes n mirrors straight into the catalog, none of
// which any replica runs: fleet-000 to fleet-<n-1>, every tenth in error
// (retried in a day), every tenth plus one stopped, the others paused.
func addCatalogFleet(t *testing.T, catalog string, n int) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t, catalog)
	store := db.New(pool, pgtest.Keyring(t))
	src, err := store.PeerGetByName(ctx, "src")
	must(t, err)
	dst, err := store.PeerGetByName(ctx, "dst")
	must(t, err)
	tx, err := pool.Begin(ctx)
	must(t, err)
	defer tx.Rollback(ctx)
	table := change.TableName{Schema: "public", Name: "items"}
	for i := range n {
		name := fmt.Sprintf("fleet-%03d", i)
		m, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{Name: name, SourcePeerID: src.ID, DestinationPeerID: dst.ID,
			SnapshotNumRowsPerPartition: 1000, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1, CDCSyncIntervalSeconds: 60,
			CDCBatchSize: 100, PublicationName: fmt.Sprintf("pub_fleet_%03d", i), ReplicationSlotName: fmt.Sprintf("slot_fleet_%03d", i),
			Tables: []change.Mapping{{Source: table, Destination: table}}})
		must(t, err)
		var sql string
		switch i % 10 {
		case 0:
			sql = `UPDATE mirrors SET status = 'error', error_message = 'could not connect to the source', error_count = 3,
				next_retry_at = now() + interval '1 day' WHERE id = $1`
		case 1:
			sql = `UPDATE mirrors SET status = 'stopped' WHERE id = $1`
		default:
			sql = `UPDATE mirrors SET status = 'running' WHERE id = $1;`
			_, err = tx.Exec(ctx, sql, m.ID)
			must(t, err)
			sql = `UPDATE mirrors SET status = 'paused', desired_state = 'paused' WHERE id = $1`
		}
		_, err = tx.Exec(ctx, sql, m.ID)
		must(t, err)
		_, err = tx.Exec(ctx, `UPDATE mirror_tables SET rows_synced = $2 WHERE mirror_id = $1`, m.ID, 1000+i)
		must(t, err)
	}
	must(t, tx.Commit(ctx))
}

// TestConsoleFleet drives the mirror list with 121 mirrors: the fleet's
// totals by status, one request per refresh whatever the fleet's size, a
// click on a total filters by that status, the text filter, sorting by a
// column header and paging, the stale state while the service is down.
// Then a mirror's page opens with its lag and throughput charts already
// drawn from the history, and the service writes the mirror's samples.
func TestConsoleFleet(t *testing.T) {
	t.Parallel()
	catalog, _, _, s := newEnv(t, consoleSourceSQL)
	api := apiClient(t, s)
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "live", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	s.waitStatus("live", "running", 90*time.Second)
	addCatalogFleet(t, catalog, 120)

	b := newBrowser(t, 5*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	b.wait("the first page of 121 mirrors with the fleet's totals", `document.querySelectorAll('#mirrors tr[data-mirror]').length === 50
		&& document.getElementById('mirror-page-info').textContent === '1–50 of 121'
		&& document.querySelector('#mirror-totals [data-status=""] .total-count') !== null
		&& document.querySelector('#mirror-totals [data-status=""] .total-count').textContent === '121'`)
	totals := evalIn[map[string]string](b, `Object.fromEntries([...document.querySelectorAll('#mirror-totals button:not([hidden])')].map((e) =>
		[e.dataset.status || 'all', e.querySelector('.total-count').textContent]))`)
	want := map[string]string{"all": "121", "running": "1", "paused": "96", "error": "12", "stopped": "12"}
	if fmt.Sprint(totals) != fmt.Sprint(want) {
		t.Fatalf("totals by status: %v, want %v", totals, want)
	}
	// The row carries what the list needs without another request: the
	// error text is on the page, not in a tooltip, and the rows.
	if txt := evalIn[string](b, `document.querySelector('#mirrors tr[data-mirror="fleet-000"] .row-error').textContent`); txt != "could not connect to the source" {
		t.Fatalf("the error text of fleet-000 in the list: %q", txt)
	}
	if rows := evalIn[string](b, `document.querySelector('#mirrors tr[data-mirror="fleet-002"] td[data-label="Rows"]').textContent.replace(/\D/g, '')`); rows != "1002" {
		t.Fatalf("the rows of fleet-002 in the list: %q", rows)
	}

	// Requests over four refreshes: the list's, one each, whatever the
	// number of mirrors.
	evalIn[bool](b, `(performance.setResourceTimingBufferSize(10000), performance.clearResourceTimings(), true)`)
	time.Sleep(4*3*time.Second + 500*time.Millisecond)
	calls := evalIn[[]string](b, `performance.getEntriesByType('resource').map((e) => new URL(e.name).pathname + new URL(e.name).search)
		.filter((p) => p.startsWith('/v1/'))`)
	t.Logf("API requests of the list page in 12.5 s with 121 mirrors: %d %v", len(calls), calls)
	if len(calls) < 3 || len(calls) > 5 {
		t.Fatalf("%d API requests in 12.5 s (4 refreshes), want one per refresh: %v", len(calls), calls)
	}
	for _, c := range calls {
		if len(c) < len("/v1/mirrors?") || c[:len("/v1/mirrors?")] != "/v1/mirrors?" {
			t.Fatalf("the list page called %s besides the list", c)
		}
	}

	// A click on a total filters by its status; a second click clears it.
	b.do("filter by error", chromedp.Click(chromedp.CSS(`#mirror-totals button[data-status="error"]`), chromedp.NodeEnabled))
	b.wait("the 12 mirrors in error", `document.querySelectorAll('#mirrors tr[data-mirror]').length === 12
		&& [...document.querySelectorAll('#mirrors tr[data-mirror] .status')].every((e) => e.textContent === 'error')
		&& document.getElementById('mirror-page-info').textContent === '1–12 of 12'
		&& document.getElementById('mirror-status-filter').value === 'error'
		&& document.querySelector('#mirror-totals button[data-status="error"]').getAttribute('aria-pressed') === 'true'
		&& document.querySelector('#mirror-totals [data-status=""] .total-count').textContent === '121'`)
	// The totals keep the keyboard's focus across refreshes.
	evalIn[bool](b, `(document.querySelector('#mirror-totals button[data-status="error"]').focus(), true)`)
	time.Sleep(3500 * time.Millisecond)
	if !evalIn[bool](b, `document.activeElement === document.querySelector('#mirror-totals button[data-status="error"]')`) {
		t.Fatal("a refresh took the focus away from the error total")
	}
	b.do("all statuses again", chromedp.Click(chromedp.CSS(`#mirror-totals button[data-status="error"]`), chromedp.NodeEnabled))
	b.wait("the whole list", `document.getElementById('mirror-page-info').textContent === '1–50 of 121'`)

	// The status select and the text filter combine.
	evalIn[bool](b, `(() => { const s = document.getElementById('mirror-status-filter'); s.value = 'paused'; s.dispatchEvent(new Event('change'));
		const q = document.getElementById('mirror-search'); q.value = 'FLEET-11'; q.dispatchEvent(new Event('input')); return true; })()`)
	b.wait("the paused mirrors matching fleet-11", `document.getElementById('mirror-page-info').textContent === '1–8 of 8'
		&& [...document.querySelectorAll('#mirrors tr[data-mirror]')].every((r) => r.dataset.mirror.startsWith('fleet-11'))`)
	evalIn[bool](b, `(() => { const s = document.getElementById('mirror-status-filter'); s.value = ''; s.dispatchEvent(new Event('change'));
		const q = document.getElementById('mirror-search'); q.value = ''; q.dispatchEvent(new Event('input')); return true; })()`)
	b.wait("the whole list again", `document.getElementById('mirror-page-info').textContent === '1–50 of 121'`)

	// Sorting: a click on Name reverses the order; on Lag, the running
	// mirror (the only one measured) comes first.
	b.do("sort by name, descending", chromedp.Click(chromedp.CSS(`#sort-name`), chromedp.NodeEnabled))
	b.wait("live, then fleet-119", `(() => { const r = [...document.querySelectorAll('#mirrors tr[data-mirror]')].map((e) => e.dataset.mirror);
		return r[0] === 'live' && r[1] === 'fleet-119' && document.querySelector('th[data-sort="name"]').getAttribute('aria-sort') === 'descending'; })()`)
	b.do("sort by status", chromedp.Click(chromedp.CSS(`#sort-status`), chromedp.NodeEnabled))
	b.wait("the running mirror first", `document.querySelector('#mirrors tr[data-mirror]').dataset.mirror === 'live'
		&& document.querySelector('th[data-sort="status"]').getAttribute('aria-sort') === 'ascending'`)
	evalIn[bool](b, `(() => { const s = document.getElementById('mirror-sort'); s.value = '-lag'; s.dispatchEvent(new Event('change')); return true; })()`)
	b.wait("the measured mirror first by lag", `document.querySelector('#mirrors tr[data-mirror]').dataset.mirror === 'live'
		&& document.querySelector('th[data-sort="lag"]').getAttribute('aria-sort') === 'descending'`)
	b.do("sort by name", chromedp.Click(chromedp.CSS(`#sort-name`), chromedp.NodeEnabled))

	// Paging.
	b.wait("page 1 by name", `document.querySelector('#mirrors tr[data-mirror]').dataset.mirror === 'fleet-000'
		&& document.getElementById('mirror-prev').disabled`)
	b.do("next page", chromedp.Click(chromedp.CSS(`#mirror-next`), chromedp.NodeEnabled))
	b.wait("page 2", `document.getElementById('mirror-page-info').textContent === '51–100 of 121'
		&& document.querySelector('#mirrors tr[data-mirror]').dataset.mirror === 'fleet-050'`)
	b.do("last page", chromedp.Click(chromedp.CSS(`#mirror-next`), chromedp.NodeEnabled))
	b.wait("page 3, the last", `document.getElementById('mirror-page-info').textContent === '101–121 of 121'
		&& document.querySelectorAll('#mirrors tr[data-mirror]').length === 21 && document.getElementById('mirror-next').disabled
		&& document.querySelector('#mirrors tr[data-mirror="live"]') !== null`)
	evalIn[bool](b, `(window.scrollTo(0, 0), true)`)
	b.screenshot("fleet-list")

	// The service stops under the list: the page says its data is stale,
	// keeps the rows it read, disables the totals, filters and pager; it
	// comes back by itself on the same page.
	s.kill()
	b.wait("the list marked stale", `document.body.classList.contains('stale') && !document.getElementById('stale').hidden
		&& document.querySelectorAll('#mirrors tr[data-mirror]').length === 21`)
	if on := evalIn[[]string](b, enabledControls); len(on) != 0 {
		t.Fatalf("controls of the list enabled while the service does not answer: %v", on)
	}
	s = restartOnSamePort(t, catalog, s)
	b.wait("the list live again on the same page", `!document.body.classList.contains('stale')
		&& document.getElementById('mirror-page-info').textContent === '101–121 of 121'
		&& !document.getElementById('mirror-prev').disabled && !document.getElementById('mirror-search').disabled
		&& !document.querySelector('#mirror-totals button[data-status="error"]').disabled`)
	b.forgetOutageErrors()

	// At 390 px the list, its totals and filters fit the screen.
	b.do("a phone's viewport", chromedp.EmulateViewport(390, 844))
	time.Sleep(300 * time.Millisecond)
	evalIn[bool](b, `(window.scrollTo(0, 0), true)`)
	if w := evalIn[int](b, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("the fleet list is %d px wide at a 390 px viewport", w)
	}
	b.screenshot("fleet-list-phone")
	b.do("a desktop viewport", chromedp.EmulateViewport(1200, 800))

	// History: two hours of samples of the live mirror, a minute apart,
	// taken before this page was opened (the service writes one every
	// 30 s while the mirror streams; these are older).
	exec1(t, catalog, `INSERT INTO mirror_metrics_history (mirror_id, at, lag_seconds, rows_synced, rows_per_second)
		SELECT (SELECT id FROM mirrors WHERE name = 'live' AND deleted_at IS NULL), now() - i * interval '1 minute', 1.5 + (i % 7), 20000, 40 + i
		FROM generate_series(5, 120) i ON CONFLICT DO NOTHING`)
	b.do("the live mirror's page", chromedp.Navigate(s.baseURL+"/ui#/mirrors/live"))
	b.wait("the charts drawn with the history on open", `(() => {
		const lag = document.getElementById('lag-chart'), rate = document.getElementById('rate-chart');
		return lag && rate && Number(lag.dataset.samples) >= 116 && Number(rate.dataset.samples) >= 116
			&& Date.now() - Number(lag.dataset.first) > 115 * 60 * 1000; })()`)
	first := evalIn[string](b, `document.getElementById('lag-chart').dataset.first`)
	ms, err := strconv.ParseInt(first, 10, 64)
	must(t, err)
	t.Logf("the lag chart opens with %d samples from %s", evalIn[int](b, `Number(document.getElementById('lag-chart').dataset.samples)`),
		time.UnixMilli(ms).UTC().Format(time.RFC3339))
	// Live samples are appended to the history.
	n := evalIn[int](b, `Number(document.getElementById('lag-chart').dataset.samples)`)
	b.wait("a live sample after the history", `Number(document.getElementById('lag-chart').dataset.samples) > `+strconv.Itoa(n))
	evalIn[bool](b, `(document.getElementById('lag-chart').parentNode.scrollIntoView(), true)`)
	b.screenshot("mirror-history")

	// The service writes the live mirror's samples itself, every 30 s
	// while it streams: newer than the ones inserted above.
	waitFor(t, "a history sample written by the service", 90*time.Second, func() bool {
		h, err := api.MirrorHistory(callCtx(t), "live", "4m")
		if err != nil || len(h.Samples) == 0 {
			return false
		}
		last := h.Samples[len(h.Samples)-1]
		if last.LagSeconds == nil || last.LSN == nil {
			return false
		}
		t.Logf("the service's newest sample of live: %s, lag %.3f s, rows %d, at %s", last.At.Format(time.RFC3339), *last.LagSeconds, last.RowsSynced, *last.LSN)
		return last.RowsSynced == 20000
	})
	b.noPageErrors()
}
