package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// These tests drive the web console (/ui) in a real headless Chromium
// against a real service with peers on real clusters.

// browser is one headless Chromium with one tab, and the errors its pages
// reported (uncaught exceptions, console errors, Content-Security-Policy
// violations).
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

// chromiumPath finds the Chromium that scripts/install-deps.sh installs.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH: the console tests need it; run `make test-deps` (scripts/install-deps.sh --browser installs the Debian package chromium)")
	return ""
}

// newBrowser starts a headless Chromium with a fresh profile; the test's
// context bounds every step.
func newBrowser(t *testing.T, timeout time.Duration) *browser {
	t.Helper()
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancelTimeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Containers often have a small /dev/shm, which crashes Chromium.
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 800),
	)
	t.Cleanup(cancelAlloc)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	b := &browser{t: t, ctx: tabCtx}
	if err := chromedp.Listen(tabCtx, func(ev any) {
		var msg string
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				msg = "console.error"
			}
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError && !strings.Contains(e.Entry.Text, "status of 4") {
				// Failed API calls (4xx) are expected in some steps; any
				// other error, such as a CSP violation, is not.
				msg = "log: " + e.Entry.Text
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	if _, err := chromedp.Call(tabCtx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("enable the browser's log: %v", err)
	}
	b.do("set the viewport", chromedp.EmulateViewport(1200, 800))
	return b
}

// do runs browser steps and fails the test with what went wrong.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// press clicks the button selector names once it is there and enabled,
// in one step in the page. A mouse click at the button's place, as
// chromedp.Click gives, can miss it when a poll redraws the page above it or
// disables it for a moment between the check and the click; for buttons
// whose state follows the mirror's, that made a test lose a click.
func (b *browser) press(what, selector string) {
	b.t.Helper()
	q, err := json.Marshal(selector)
	if err != nil {
		b.t.Fatal(err)
	}
	b.wait(what, `(() => { const e = document.querySelector(`+string(q)+`);
		if (!e || e.disabled || e.offsetParent === null) return false; e.click(); return true; })()`)
}

// wait waits until the JavaScript expression is truthy.
func (b *browser) wait(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[any](expr, chromedp.WithPollingInterval(100*time.Millisecond),
		chromedp.WithPollingTimeout(90*time.Second))); err != nil {
		page, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('view').innerText`))
		b.t.Fatalf("browser: waiting for %s: %v\npage shows:\n%s", what, err, tail(page, 3000))
	}
}

// eval evaluates a JavaScript expression and decodes its value.
func evalIn[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// noPageErrors fails the test when a page reported an error.
func (b *browser) noPageErrors() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errors) > 0 {
		b.t.Fatalf("the console reported errors in the browser:\n%s", strings.Join(b.errors, "\n"))
	}
}

// screenshot saves the visible page as docs/img/console-NAME.png when
// PGMIRROR_SCREENSHOTS names a directory (relative to the repository root),
// so that the documentation's pictures are made from the real console.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("PGMIRROR_SCREENSHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir)
	}
	raw, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+name+".png"), out.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// login logs in through the console's form.
func (b *browser) login(baseURL, user, password string) {
	b.t.Helper()
	b.do("open the login page",
		chromedp.Navigate(baseURL+"/ui"),
		chromedp.WaitVisible(chromedp.CSS("#login-username")),
		chromedp.SendKeys(chromedp.CSS("#login-username"), user),
		chromedp.SendKeys(chromedp.CSS("#login-password"), password))
	b.do("log in", chromedp.Click(chromedp.CSS("#login-submit")))
	b.wait("the mirrors page after login", `document.querySelector('#mirrors') !== null && document.getElementById('who').textContent.includes(`+jsString(user)+`)`)
}

// apiClient is the typed API client (httpapi/client) logged in as the
// service's admin, for the steps the tests do or check outside the browser.
func apiClient(t *testing.T, s *service) *client.Client {
	t.Helper()
	return client.New(s.baseURL, s.token)
}

// callCtx is the context of one API call from a console test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func getMirror(t *testing.T, api *client.Client, name string) *client.MirrorStatus {
	t.Helper()
	m, err := api.GetMirror(callCtx(t), name)
	must(t, err)
	return m
}

// waitLogIn waits until the mirror has a log entry with the message.
func waitLogIn(t *testing.T, api *client.Client, name, message string) {
	t.Helper()
	waitUntil(t, 30*time.Second, func() (struct{}, bool) {
		page, err := api.MirrorLogs(callCtx(t), name, client.LogQuery{Search: message})
		must(t, err)
		return struct{}{}, slices.ContainsFunc(page.Logs, func(e client.LogEntry) bool { return e.Message == message })
	}, func(struct{}) string { return fmt.Sprintf("mirror %s: no log entry %q after 30s", name, message) })
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return fmt.Sprintf("%q", s)
}

const consoleSourceSQL = `CREATE TABLE items (id bigserial PRIMARY KEY, label text NOT NULL);
INSERT INTO items (label) SELECT 'item ' || g FROM generate_series(1, 20000) g;`

// TestConsoleAdmin logs in as admin, creates a mirror with the form (first
// with an error the API reports next to the form), sees it reach running
// with its snapshot at 100 %, pauses and resumes it with the buttons,
// searches and filters its logs, and tests a peer's connection.
func TestConsoleAdmin(t *testing.T) {
	t.Parallel()
	catalog, _, dst, s := newEnv(t, consoleSourceSQL)
	api := apiClient(t, s)
	_, err := api.CreateUser(callCtx(t), client.UserCreate{Username: "watcher", Password: "watcher-password-1", Role: "viewer"})
	must(t, err)
	b := newBrowser(t, 5*time.Minute)

	// A wrong password is refused with the API's message.
	b.do("open the login page", chromedp.Navigate(s.baseURL+"/ui"), chromedp.WaitVisible(chromedp.CSS("#login-username")),
		chromedp.SendKeys(chromedp.CSS("#login-username"), "admin"),
		chromedp.SendKeys(chromedp.CSS("#login-password"), "wrong"),
		chromedp.Click(chromedp.CSS("#login-submit")))
	b.wait("the login error", `document.getElementById('login-error').textContent.includes('Invalid credentials')`)
	b.screenshot("login")
	if tok := evalIn[string](b, `sessionStorage.getItem('pgmirror.token') || ''`); tok != "" {
		t.Fatalf("a failed login stored a token")
	}
	b.login(s.baseURL, "admin", testAdminPassword)
	if tok := evalIn[string](b, `sessionStorage.getItem('pgmirror.token') || ''`); tok == "" {
		t.Fatalf("the console keeps no token in sessionStorage after login")
	}
	if cookies := evalIn[string](b, `document.cookie`); cookies != "" {
		t.Fatalf("the console set cookies: %q", cookies)
	}

	// Create a mirror with the form; first without a table: the API's
	// error shows on the form and next to the tables.
	b.do("open the mirror form", chromedp.Click(chromedp.CSS("#new-mirror"), chromedp.NodeVisible),
		chromedp.WaitVisible(chromedp.CSS("#mirror-form")),
		chromedp.SendKeys(chromedp.CSS("#f-name"), "webmirror"))
	b.wait("the peers in the form", `document.querySelectorAll('#f-source_peer option').length === 3`)
	evalIn[bool](b, `(() => { for (const [n, v] of [['source_peer', 'src'], ['destination_peer', 'dst'], ['cdc_sync_interval_seconds', '1']]) {
		const e = document.querySelector('#mirror-form [name="' + n + '"]'); e.value = v; e.dispatchEvent(new Event('change')); } return true; })()`)
	b.wait("the source's tables", `document.querySelector('#source-tables input[name="table"]') !== null`)
	b.do("submit without tables", chromedp.Click(chromedp.CSS("#mirror-submit")))
	b.wait("the API's error on the form", `document.querySelector('#mirror-form .form-error').textContent.startsWith('Invalid request: Tables')`)
	if msg := evalIn[string](b, `document.querySelector('.field-error[data-for="table_mappings"]').textContent`); msg == "" {
		t.Fatalf("the table_mappings error is not shown next to the tables")
	}
	b.screenshot("create-mirror")
	b.do("choose the table and submit", chromedp.Click(chromedp.CSS(`#source-tables input[name="table"]`)),
		chromedp.Click(chromedp.CSS("#mirror-submit")))

	// The detail page: the mirror reaches running with its snapshot done.
	b.wait("the mirror page", `location.hash === '#/mirrors/webmirror' && document.querySelector('h1[data-status]') !== null`)
	b.wait("status running", `document.querySelector('h1').dataset.status === 'running'`)
	b.wait("the snapshot at 100%", `(() => { const r = document.querySelector('#tables tr[data-table="public.items"]');
		return r && r.querySelector('progress') && r.querySelector('progress').value === 1 && r.querySelector('.pct').textContent === '100%'
			&& r.querySelector('td:nth-child(4)').textContent.replace(/\D/g, '') === '20000'; })()`)
	if m := getMirror(t, api, "webmirror"); m.Status != "running" || len(m.Tables) != 1 || m.Tables[0].RowsSynced != 20000 {
		t.Fatalf("API after the console showed running: %+v", m)
	}
	b.wait("a lag sample in the chart", `Number(document.getElementById('lag-chart').dataset.samples) > 0`)
	b.screenshot("mirror")
	evalIn[bool](b, `(document.getElementById('lag-chart').parentNode.scrollIntoView(), true)`)
	b.screenshot("mirror-tables")
	evalIn[bool](b, `(window.scrollTo(0, 0), true)`)

	// Pause and resume with the buttons.
	b.press("pause", "#pause")
	b.wait("status paused", `document.querySelector('h1').dataset.status === 'paused' && document.getElementById('control-result').textContent !== 'Pause…'`)
	if m := getMirror(t, api, "webmirror"); m.Status != "paused" {
		t.Fatalf("after Pause the API says %q", m.Status)
	}
	if msg := evalIn[string](b, `document.getElementById('control-result').className`); msg != "notice" {
		t.Fatalf("pause result: %q: %s", msg, evalIn[string](b, `document.getElementById('control-result').textContent`))
	}
	b.press("resume", "#resume")
	b.wait("status running again", `document.querySelector('h1').dataset.status === 'running'`)
	if m := getMirror(t, api, "webmirror"); m.Status != "running" {
		t.Fatalf("after Resume the API says %q", m.Status)
	}

	// Verify with the button: the result appears with the per-table
	// counts; a row changed on the destination behind the mirror's back is
	// then found with its key, and Repair makes the destination equal again.
	b.press("verify", "#verify")
	b.wait("a clean verification", `(() => { const v = document.querySelector('#verification-list .verification');
		if (!v || v.dataset.state !== 'done') return false;
		const r = v.querySelector('tr[data-table="public.items"]');
		return r !== null && r.querySelector('.rows-source').textContent.replace(/\D/g, '') === '20000'
			&& r.querySelector('.rows-destination').textContent.replace(/\D/g, '') === '20000'
			&& v.querySelector('.outcome').textContent === 'no differences' && v.querySelector('.repair') === null; })()`)
	exec1(t, dst, `UPDATE public.items SET label = 'changed behind the mirror' WHERE id = 7`)
	b.wait("Verify enabled again", `!document.getElementById('verify').disabled`)
	b.press("verify again", "#verify")
	b.wait("the difference with its key", `(() => { const v = document.querySelector('#verification-list .verification');
		return v && v.dataset.state === 'done' && v.querySelector('.outcome').textContent === '1 row differs'
			&& [...v.querySelectorAll('.examples code')].some((c) => c.textContent === "(id)=('7')")
			&& v.querySelector('.chunks-differing').textContent.startsWith('1 of') && v.querySelector('.repair') !== null; })()`)
	evalIn[bool](b, `(document.getElementById('verifications').scrollIntoView(), true)`)
	b.screenshot("verification")
	evalIn[bool](b, `(window.scrollTo(0, 0), true)`)
	b.press("repair", "#verification-list .verification .repair")
	b.wait("the repair's clean result", `(() => { const vs = document.querySelectorAll('#verification-list .verification');
		return vs.length === 3 && vs[0].dataset.state === 'done' && vs[0].textContent.includes('Repair of')
			&& vs[0].querySelector('.outcome').textContent === 'no differences' && vs[1].querySelector('.repair') === null; })()`)
	vs, err := api.ListVerifications(callCtx(t), "webmirror", 0)
	must(t, err)
	if len(vs) != 3 || vs[0].RepairOf == nil || *vs[0].RepairOf != vs[1].ID || vs[0].RowsDiffering == nil || *vs[0].RowsDiffering != 0 {
		t.Fatalf("API after the console's verify and repair: %+v", vs)
	}

	// Delete asks first; Cancel brings the buttons back and deletes nothing.
	b.do("delete, then cancel", chromedp.Click(chromedp.CSS("#delete"), chromedp.NodeEnabled),
		chromedp.WaitVisible(chromedp.CSS("#confirm-no")), chromedp.Click(chromedp.CSS("#confirm-no")),
		chromedp.WaitVisible(chromedp.CSS("#pause")))
	if m := getMirror(t, api, "webmirror"); m.Status != "running" {
		t.Fatalf("after a cancelled delete the API says %q", m.Status)
	}
	// A table's Resync, confirmed: the API's answer shows and the table is
	// copied again.
	b.do("resync the table", chromedp.Click(chromedp.CSS(`#tables tr[data-table="public.items"] .resync-table`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm-yes")), chromedp.Click(chromedp.CSS("#confirm-yes")))
	b.wait("the table resync's answer", `document.getElementById('control-result').className === 'notice'
		&& document.getElementById('control-result').textContent.includes('public.items')`)
	waitLogIn(t, api, "webmirror", "Table resync started")
	b.wait("the table copied again", `(() => { const r = document.querySelector('#tables tr[data-table="public.items"]');
		return document.querySelector('h1').dataset.status === 'running' && r.querySelector('.status-running') !== null
			&& r.querySelector('.pct').textContent === '100%'; })()`)

	// Search the logs: only matching entries, as many as the API counts.
	paused, err := api.MirrorLogs(callCtx(t), "webmirror", client.LogQuery{Search: "paused"})
	must(t, err)
	if paused.Total == 0 {
		t.Fatal("the API has no log entry matching 'paused'")
	}
	b.do("search the logs", chromedp.SendKeys(chromedp.CSS("#log-search"), "paused"), chromedp.Click(chromedp.CSS("#log-apply")))
	// (Entries can only be added meanwhile: the page may count more.)
	b.wait("the search's entries", fmt.Sprintf(`(() => { const ms = [...document.querySelectorAll('#log-table tr.log')];
		const total = Number((/of (\d+)$/.exec(document.getElementById('log-info').textContent) || [])[1]);
		return total >= %d && ms.length === Math.min(total, 50) && ms.some((r) => r.querySelector('.message').textContent === 'Mirror paused')
			&& ms.every((r) => r.textContent.toLowerCase().includes('paused')); })()`, paused.Total))
	// Newest first: the first row is the newest entry.
	newest, err := api.MirrorLogs(callCtx(t), "webmirror", client.LogQuery{Search: "paused", Limit: 1})
	must(t, err)
	if got := evalIn[string](b, `document.querySelector('#log-table tr.log .message').textContent`); got != newest.Logs[0].Message {
		t.Fatalf("first log row %q, newest entry %q", got, newest.Logs[0].Message)
	}
	// The level filter: INFO only.
	evalIn[bool](b, `(() => { const l = document.getElementById('log-level'); l.value = 'INFO'; l.dispatchEvent(new Event('change')); return true; })()`)
	b.wait("INFO entries only", `(() => { const ls = [...document.querySelectorAll('#log-table tr.log td:nth-child(2)')];
		return ls.length > 0 && ls.every((c) => c.textContent === 'INFO'); })()`)

	// Paging and escaping: 120 more WARN entries, the newest one made of
	// markup, which must show as text and not run.
	const markup = `<b id="injected">bold</b><img src="x" onerror="window.injected = 1">`
	exec1(t, catalog, `INSERT INTO mirror_logs (mirror_id, level, message)
		SELECT id, 'WARN', 'paging probe ' || g FROM mirrors, generate_series(1, 120) g WHERE name = 'webmirror'`)
	exec1(t, catalog, `INSERT INTO mirror_logs (mirror_id, level, message) SELECT id, 'WARN', $1 FROM mirrors WHERE name = 'webmirror'`, markup)
	warn, err := api.MirrorLogs(callCtx(t), "webmirror", client.LogQuery{Level: "WARN"})
	must(t, err)
	evalIn[bool](b, `(() => { document.getElementById('log-search').value = '';
		const l = document.getElementById('log-level'); l.value = 'WARN'; l.dispatchEvent(new Event('change')); return true; })()`)
	b.wait("the first page of WARN entries", fmt.Sprintf(`Number((/^1–50 of (\d+)$/.exec(document.getElementById('log-info').textContent) || [])[1]) >= %d
		&& document.querySelector('#log-table tr.log .message').textContent === %s && document.getElementById('log-newer').disabled`, warn.Total, jsString(markup)))
	if injected := evalIn[bool](b, `document.getElementById('injected') !== null || window.injected === 1`); injected {
		t.Fatal("a log message was put into the page as markup")
	}
	b.do("older", chromedp.Click(chromedp.CSS("#log-older"), chromedp.NodeEnabled))
	b.wait("the second page", `document.getElementById('log-info').textContent.startsWith('51–100 of ')
		&& document.querySelectorAll('#log-table tr.log').length === 50 && !document.getElementById('log-newer').disabled`)
	b.do("newer", chromedp.Click(chromedp.CSS("#log-newer"), chromedp.NodeEnabled))
	b.wait("the first page again", `document.getElementById('log-info').textContent.startsWith('1–50 of ')`)

	// The mirrors list shows it with its status.
	b.do("mirrors list", chromedp.Navigate(s.baseURL+"/ui#/mirrors"))
	b.wait("the mirror in the list", `(() => { const r = document.querySelector('#mirrors tr[data-mirror="webmirror"]');
		return r && r.querySelector('.status-running') !== null; })()`)
	b.screenshot("mirrors")

	// Peers: test a connection.
	b.do("peers", chromedp.Navigate(s.baseURL+"/ui#/peers"))
	b.wait("the peers", `document.querySelector('#peers tr[data-peer="src"] .test-peer') !== null`)
	b.do("test src", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .test-peer`)))
	b.wait("the connection test's answer", `document.querySelector('#peers tr[data-peer="src"] .test-result').textContent.startsWith('OK: ')`)
	b.screenshot("peers")

	// Create a peer with the form: a name the API refuses shows its error
	// next to the name; then a good one lands in the list.
	b.do("open the peer form", chromedp.Click(chromedp.CSS("#new-peer")), chromedp.WaitVisible(chromedp.CSS("#peer-form")),
		chromedp.SendKeys(chromedp.CSS("#f-name"), "bad name"), chromedp.SendKeys(chromedp.CSS("#f-host"), "127.0.0.1"),
		chromedp.SendKeys(chromedp.CSS("#f-user"), "someone"), chromedp.SendKeys(chromedp.CSS("#f-password"), "peer-secret"),
		chromedp.SendKeys(chromedp.CSS("#f-database"), "somedb"), chromedp.Click(chromedp.CSS("#peer-submit")))
	b.wait("the name's error", `document.querySelector('.field-error[data-for="name"]').textContent !== ''
		&& document.getElementById('f-name').classList.contains('invalid')
		&& document.querySelector('#peer-form .form-error').textContent.startsWith('Invalid request')`)
	if leaked := evalIn[bool](b, `document.getElementById('view').innerText.includes('peer-secret')`); leaked {
		t.Fatal("the peer form's error shows the password")
	}
	evalIn[bool](b, `(document.getElementById('f-name').value = 'other', document.querySelector('[name="ssl_mode"]').value = 'disable', true)`)
	b.do("submit the peer", chromedp.Click(chromedp.CSS("#peer-submit")))
	b.wait("the new peer in the list", `location.hash === '#/peers' && document.querySelector('#peers tr[data-peer="other"]') !== null`)
	other, err := api.GetPeer(callCtx(t), "other")
	must(t, err)
	if other.Host != "127.0.0.1" || other.SSLMode != "disable" {
		t.Fatalf("peer from the form: %+v", other)
	}

	// Users: the viewer made above is listed.
	b.do("users", chromedp.Navigate(s.baseURL+"/ui#/users"))
	b.wait("the users", `document.querySelector('#users tr[data-user="watcher"]') !== null`)
	b.do("add a user", chromedp.SendKeys(chromedp.CSS("#f-username"), "operator"),
		chromedp.SendKeys(chromedp.CSS("#f-password"), "operator-password-1"), chromedp.Click(chromedp.CSS("#user-submit")))
	b.wait("the new user", `(() => { const r = document.querySelector('#users tr[data-user="operator"]'); return r && r.children[1].textContent === 'viewer'; })()`)
	b.screenshot("users")
	b.noPageErrors()
}

// TestConsoleViewer logs in as a viewer: the mirror, its tables and logs
// show, and no control button, form or user page does.
func TestConsoleViewer(t *testing.T) {
	t.Parallel()
	_, _, dst, s := newEnv(t, consoleSourceSQL)
	api := apiClient(t, s)
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "viewed", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	_, err = api.CreateUser(callCtx(t), client.UserCreate{Username: "watcher", Password: "watcher-password-1", Role: "viewer"})
	must(t, err)
	s.waitStatus("viewed", "running", 90*time.Second)

	// The console's files through the real server: their types, the
	// Content-Security-Policy and nosniff, no token needed.
	for path, ctype := range map[string]string{"/ui": "text/html; charset=utf-8", "/ui/app.js": "text/javascript; charset=utf-8", "/ui/app.css": "text/css; charset=utf-8"} {
		resp, err := http.Get(s.baseURL + path)
		must(t, err)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ctype || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, resp.Header)
		}
	}
	b := newBrowser(t, 3*time.Minute)
	b.login(s.baseURL, "watcher", "watcher-password-1")

	b.wait("the mirror in the list", `document.querySelector('#mirrors tr[data-mirror="viewed"] .status-running') !== null`)
	if n := evalIn[int](b, `document.querySelectorAll('#new-mirror, button.primary').length`); n != 0 {
		t.Fatalf("a viewer sees %d create buttons", n)
	}
	if hidden := evalIn[bool](b, `document.querySelector('[data-nav="users"]').hidden`); !hidden {
		t.Fatal("a viewer sees the Users link")
	}
	b.do("open the mirror", chromedp.Click(chromedp.CSS(`#mirrors tr[data-mirror="viewed"] a`)))
	b.wait("the mirror with its tables and logs", `document.querySelector('h1[data-status="running"]') !== null
		&& document.querySelector('#tables tr[data-table="public.items"] .pct') !== null
		&& document.querySelectorAll('#log-table tr.log').length > 0`)
	// A verification's result shows, without Verify or Repair buttons.
	exec1(t, dst, `UPDATE public.items SET label = '<b>changed</b>' WHERE id = 9`)
	_, err = api.VerifyMirror(callCtx(t), "viewed", client.VerifyRequest{})
	must(t, err)
	b.wait("the verification's result", `(() => { const v = document.querySelector('#verification-list .verification');
		return v && v.dataset.state === 'done' && v.querySelector('.outcome').textContent === '1 row differs'
			&& [...v.querySelectorAll('.examples li')].some((li) => li.textContent === "public.items different: (id)=('9')"); })()`)
	if n := evalIn[int](b, `document.querySelectorAll('#controls button, .resync-table, #pause, #resume, #delete, #verify, .repair').length`); n != 0 {
		t.Fatalf("a viewer sees %d control buttons", n)
	}
	axe := axeIfInstalled(t)
	if axe != "" {
		b.checkA11y(axe, "a mirror's page as a viewer")
	}
	exec1(t, dst, `UPDATE public.items SET label = 'item 9' WHERE id = 9`)
	b.do("peers", chromedp.Navigate(s.baseURL+"/ui#/peers"))
	b.wait("the peers", `document.querySelector('#peers tr[data-peer="src"]') !== null`)
	if n := evalIn[int](b, `document.querySelectorAll('.test-peer, #new-peer, .edit-peer, .delete-peer').length`); n != 0 {
		t.Fatalf("a viewer sees %d peer buttons", n)
	}
	// A viewer changes their own password too.
	if hidden := evalIn[bool](b, `document.getElementById('account').hidden`); hidden {
		t.Fatal("a viewer has no Change password link")
	}
	if axe != "" {
		b.checkA11y(axe, "the peers as a viewer")
	}
	// The API still refuses what the console does not offer.
	status, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`fetch('/v1/mirrors/viewed/pause', {method: 'POST',
		headers: {Authorization: 'Bearer ' + sessionStorage.getItem('pgmirror.token')}}).then((r) => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != 403 {
		t.Fatalf("a viewer's pause from the browser: status %d, %v; want 403", status, err)
	}

	// A cut-over's steps show on the mirror's page.
	quiet := 1
	cut, done, err := api.Cutover(callCtx(t), "viewed", client.CutoverRequest{QuietSeconds: &quiet})
	must(t, err)
	if !done || cut.Cutover == nil || len(cut.Cutover.Steps) == 0 {
		t.Fatalf("cut-over: done %v, %+v", done, cut)
	}
	b.do("the mirror after its cut-over", chromedp.Navigate(s.baseURL+"/ui#/mirrors/viewed"))
	b.wait("the cut-over's steps", fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll('#cutover-steps tbody tr')];
		return document.querySelector('h1[data-status="completed"]') !== null && rows.length === %d
			&& rows[0].querySelector('td').textContent === %s && rows.every((r) => r.querySelector('.status-done') !== null); })()`,
		len(cut.Cutover.Steps), jsString(cut.Cutover.Steps[0].Name)))
	b.noPageErrors()
}

// TestConsoleSnapshotScreenshot pictures a mirror's page while its snapshot
// runs (progress bars part way). It only makes the documentation's picture:
// it runs when PGMIRROR_SCREENSHOTS is set.
func TestConsoleSnapshotScreenshot(t *testing.T) {
	if os.Getenv("PGMIRROR_SCREENSHOTS") == "" {
		t.Skip("set PGMIRROR_SCREENSHOTS=docs/img to make the console's pictures")
	}
	_, _, _, s := newEnv(t, `CREATE TABLE orders (id bigint PRIMARY KEY, item text, qty int);
		CREATE TABLE customers (id bigint PRIMARY KEY, name text);
		CREATE TABLE events (id bigint PRIMARY KEY, payload text);
		INSERT INTO orders SELECT g, 'item ' || g, g % 7 FROM generate_series(1, 1500000) g;
		INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 300000) g;
		INSERT INTO events SELECT g, repeat('x', 40) FROM generate_series(1, 1500000) g;
		ANALYZE`)
	api := apiClient(t, s)
	b := newBrowser(t, 3*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	var maps []client.TableMapping
	for _, table := range []string{"customers", "orders", "events"} {
		maps = append(maps, client.TableMapping{SourceSchema: "public", SourceTable: table, DestinationSchema: "public", DestinationTable: table})
	}
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "shop", SourcePeer: "src", DestinationPeer: "dst",
		TableMappings: maps, SnapshotNumTablesInParallel: 1, SnapshotNumRowsPerPartition: 50000, SnapshotMaxParallelWorkers: 1})
	must(t, err)
	b.do("the mirror's page", chromedp.Navigate(s.baseURL+"/ui#/mirrors/shop"))
	b.wait("a snapshot part way", `[...document.querySelectorAll('#tables progress')].some((p) => p.value > 0.1 && p.value < 0.9)`)
	evalIn[bool](b, `(document.getElementById('tables').parentNode.scrollIntoView(), true)`)
	b.screenshot("snapshot")
	b.noPageErrors()
}
