package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// These tests drive the console where an operator needs it to be true: the
// service stopped under an open page, a completed cut-over, a phone.

// restartOnSamePort starts the service again on the catalog and port of a
// stopped one, so that a page the browser has open reaches it again.
func restartOnSamePort(t *testing.T, catalog string, old *service) *service {
	t.Helper()
	s := launchService(t, catalog, "SERVICE_PORT="+strings.TrimPrefix(old.baseURL, "http://127.0.0.1:"))
	s.baseURL = old.baseURL
	s.waitReady()
	return s
}

// forgetErrors drops the browser's reported errors that contain text (the
// failed loads of a test that stops the service on purpose).
func (b *browser) forgetErrors(text string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.errors[:0]
	for _, e := range b.errors {
		if !strings.Contains(e, text) {
			kept = append(kept, e)
		}
	}
	b.errors = kept
}

// forgetOutageErrors forgets the errors the browser logs while the
// service is down on purpose: refused connections, connections cut while
// they were set up, responses cut off when the process was killed in the
// middle of one, and 5xx answers.
func (b *browser) forgetOutageErrors() {
	for _, text := range []string{"net::ERR_CONNECTION_REFUSED", "net::ERR_INCOMPLETE_CHUNKED_ENCODING",
		"net::ERR_EMPTY_RESPONSE", "net::ERR_CONNECTION_RESET", "net::ERR_SOCKET_NOT_CONNECTED", "status of 5"} {
		b.forgetErrors(text)
	}
}

// enabledControls lists the page's enabled buttons, inputs and selects.
const enabledControls = `[...document.querySelectorAll('#view button, #view input, #view select, #view textarea')]
	.filter((c) => !c.disabled && !c.hidden).map((c) => c.id || c.className || c.tagName)`

// TestConsoleStale stops the service under an open mirror page: within a
// few seconds the page says its data is stale (a banner with the time of
// the last good read, badges and numbers greyed, every control disabled),
// and once the service is started again on the same catalog the page
// recovers by itself, without a reload. The peers page does the same.
func TestConsoleStale(t *testing.T) {
	t.Parallel()
	catalog, _, _, s := newEnv(t, consoleSourceSQL)
	api := apiClient(t, s)
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "watched", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	s.waitStatus("watched", "running", 90*time.Second)

	b := newBrowser(t, 5*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	b.do("the mirror's page", chromedp.Navigate(s.baseURL+"/ui#/mirrors/watched"))
	b.wait("the running mirror with its controls and logs", `document.querySelector('h1[data-status="running"]') !== null
		&& !document.getElementById('pause').disabled && document.querySelectorAll('#log-table tr.log').length > 0
		&& document.querySelector('#counters dd') !== null`)
	if stale := evalIn[bool](b, `document.body.classList.contains('stale') || !document.getElementById('stale').hidden`); stale {
		t.Fatal("the page says stale while the service answers")
	}
	green := evalIn[string](b, `getComputedStyle(document.querySelector('h1 .status')).backgroundColor`)
	evalIn[bool](b, `(window.samePage = true, true)`)

	// The service stops.
	s.kill()
	stopped := time.Now()
	b.wait("the stale banner", `document.body.classList.contains('stale') && !document.getElementById('stale').hidden
		&& document.getElementById('stale').textContent.includes('does not answer')`)
	if d := time.Since(stopped); d > 10*time.Second {
		t.Fatalf("the page showed stale data as live for %s after the service stopped", d)
	} else {
		t.Logf("the page said stale %s after the service stopped", d.Round(100*time.Millisecond))
	}
	banner := evalIn[string](b, `document.getElementById('stale').textContent`)
	lastGood := evalIn[string](b, `document.getElementById('stale').dataset.lastGood`)
	if !strings.Contains(banner, "was read at") || lastGood == "" {
		t.Fatalf("the banner does not give the time of the last good read: %q (%q)", banner, lastGood)
	}
	if at, err := time.Parse(time.RFC3339, lastGood); err != nil || at.After(stopped) || stopped.Sub(at) > 15*time.Second {
		t.Fatalf("last good read %q (%v), service stopped at %s", lastGood, err, stopped.UTC().Format(time.RFC3339))
	}
	if on := evalIn[[]string](b, enabledControls); len(on) != 0 {
		t.Fatalf("controls still enabled while the service does not answer: %v", on)
	}
	grey := "rgb(102, 112, 133)" // --idle / --muted
	if bg := evalIn[string](b, `getComputedStyle(document.querySelector('h1 .status')).backgroundColor`); bg != grey {
		t.Fatalf("the status badge is %s while stale (live: %s), want grey %s", bg, green, grey)
	}
	if fg := evalIn[string](b, `getComputedStyle(document.querySelector('#counters dd')).color`); fg != grey {
		t.Fatalf("the counters are %s while stale, want grey %s", fg, grey)
	}
	// Greyed is still readable: axe-core finds no serious violation.
	if axe := axeIfInstalled(t); axe != "" {
		b.checkA11y(axe, "a mirror's page while the service does not answer")
	}
	// It stays stale while the service is down (a failed poll never
	// looks like an answer), and keeps polling without a script error.
	time.Sleep(4 * time.Second)
	if !evalIn[bool](b, `document.body.classList.contains('stale')`) {
		t.Fatal("the stale state went away while the service is still down")
	}
	if on := evalIn[[]string](b, enabledControls); len(on) != 0 {
		t.Fatalf("controls enabled again while the service is down: %v", on)
	}

	// The service comes back on the same catalog: the page recovers by itself.
	s = restartOnSamePort(t, catalog, s)
	b.wait("the page live again", `!document.body.classList.contains('stale') && document.getElementById('stale').hidden
		&& document.querySelector('h1[data-status="running"]') !== null
		&& !document.getElementById('pause').disabled && !document.getElementById('delete').disabled
		&& !document.getElementById('log-search').disabled`)
	if !evalIn[bool](b, `window.samePage === true`) {
		t.Fatal("the page was reloaded")
	}
	if bg := evalIn[string](b, `getComputedStyle(document.querySelector('h1 .status')).backgroundColor`); bg != green {
		t.Fatalf("the status badge is %s after the recovery, want %s", bg, green)
	}
	// The controls work again: pause with the button.
	b.press("pause", "#pause")
	b.wait("status paused", `document.querySelector('h1').dataset.status === 'paused' && document.getElementById('control-result').className === 'notice'`)
	if m := getMirror(t, api, "watched"); m.Status != "paused" {
		t.Fatalf("after Pause the API says %q", m.Status)
	}

	// The peers page refreshes too: down, then back.
	evalIn[bool](b, `(location.hash = '#/peers', true)`)
	b.wait("the peers with their test buttons", `document.querySelector('#peers tr[data-peer="src"] .test-peer') !== null
		&& !document.querySelector('#peers tr[data-peer="src"] .test-peer').disabled`)
	s.kill()
	b.wait("the peers page stale", `document.body.classList.contains('stale') && document.querySelector('#peers tr[data-peer="src"] .test-peer').disabled
		&& document.querySelector('#peers tr[data-peer="src"]') !== null`)
	restartOnSamePort(t, catalog, s)
	b.wait("the peers page live again", `!document.body.classList.contains('stale') && !document.querySelector('#peers tr[data-peer="src"] .test-peer').disabled`)
	b.do("test src", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .test-peer`)))
	b.wait("the connection test's answer", `document.querySelector('#peers tr[data-peer="src"] .test-result').textContent.startsWith('OK: ')`)
	if !evalIn[bool](b, `window.samePage === true`) {
		t.Fatal("the page was reloaded")
	}
	// Refused connections, and 5xx answers while the service starts, are
	// the outage itself; any other error is not.
	b.forgetOutageErrors()
	b.noPageErrors()
}

// longMirrorName is a mirror name of 63 characters without a space.
const longMirrorName = "orders-eu-west-production-primary-to-new-cluster-replica-000001"

// TestConsoleCutoverAndNarrow opens the page of a mirror that completed its
// cut-over: its warnings (a trigger the destination lacks), its tables'
// final state and a link to the reverse mirror show, and neither Pause,
// Resume nor any Resync is offered (the API refuses them). Then, at a
// 390 px wide viewport, no page is wider than the screen, with that
// 63-character mirror name, and axe-core finds no serious or critical
// violation on any.
func TestConsoleCutoverAndNarrow(t *testing.T) {
	t.Parallel()
	if len(longMirrorName) != 63 {
		t.Fatalf("longMirrorName has %d characters", len(longMirrorName))
	}
	_, _, _, s := newEnv(t, consoleSourceSQL+`;
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER items_touch BEFORE UPDATE ON public.items FOR EACH ROW EXECUTE FUNCTION touch()`)
	api := apiClient(t, s)
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: longMirrorName, SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	s.waitStatus(longMirrorName, "running", 90*time.Second)
	quiet, wait := 1, 90
	cutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut, done, err := api.Cutover(cutCtx, longMirrorName, client.CutoverRequest{QuietSeconds: &quiet, ReverseMirrorName: "back", WaitSeconds: &wait})
	must(t, err)
	if !done || cut.Cutover == nil || cut.Cutover.ReverseMirror != "back" || len(cut.Cutover.Warnings) == 0 {
		t.Fatalf("cut-over: done %v, %+v", done, cut)
	}
	var trigger string
	for _, w := range cut.Cutover.Warnings {
		if strings.Contains(w, "items_touch") {
			trigger = w
		}
	}
	if trigger == "" {
		t.Fatalf("the cut-over's warnings do not name the trigger: %q", cut.Cutover.Warnings)
	}
	// The API refuses what the page must not offer.
	var apiErr *client.APIError
	if _, err := api.PauseMirror(callCtx(t), longMirrorName); !errors.As(err, &apiErr) || apiErr.Status != 409 {
		t.Fatalf("pause after the cut-over: %v, want 409", err)
	}
	if _, err := api.ResyncTable(callCtx(t), longMirrorName, "public.items"); !errors.As(err, &apiErr) || apiErr.Status != 409 {
		t.Fatalf("table resync after the cut-over: %v, want 409", err)
	}

	b := newBrowser(t, 5*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	page := "#/mirrors/" + longMirrorName
	b.do("the mirror after its cut-over", chromedp.Navigate(s.baseURL+"/ui"+page))
	b.wait("the cut-over's warnings, tables and reverse mirror", fmt.Sprintf(`(() => {
		const ws = [...document.querySelectorAll('#cutover-warnings li')].map((li) => li.textContent);
		const link = document.getElementById('reverse-mirror-link');
		const cut = document.querySelector('#cutover-tables tr[data-table="public.items"]');
		const table = document.querySelector('#tables tr[data-table="public.items"]');
		return document.querySelector('h1[data-status="completed"]') !== null && ws.length === %d && ws.includes(%s)
			&& link !== null && link.getAttribute('href') === '#/mirrors/back' && link.textContent === 'back'
			&& cut !== null && cut.dataset.status === 'completed' && cut.querySelector('.status-completed') !== null
			&& table !== null && table.dataset.status === 'completed'
			&& document.querySelectorAll('#cutover-steps tbody tr').length === %d; })()`,
		len(cut.Cutover.Warnings), jsString(trigger), len(cut.Cutover.Steps)))
	// Nothing the API would refuse is offered: only Delete is left.
	offered := evalIn[[]string](b, `[...document.querySelectorAll('#controls button, .resync-table')]
		.filter((x) => !x.hidden && !x.disabled).map((x) => x.id || x.className)`)
	if len(offered) != 1 || offered[0] != "delete" {
		t.Fatalf("after a completed cut-over the page offers %v, want only delete", offered)
	}
	if why := evalIn[string](b, `document.getElementById('control-blocked').textContent`); !strings.Contains(why, "cut over") {
		t.Fatalf("the page does not say why the controls are gone: %q", why)
	}
	// Delete asks first, with the focus on Cancel, and gives the focus back.
	b.do("delete, then cancel", chromedp.Click(chromedp.CSS("#delete"), chromedp.NodeEnabled), chromedp.WaitVisible(chromedp.CSS("#confirm-no")))
	if id := evalIn[string](b, `document.activeElement.id`); id != "confirm-no" {
		t.Fatalf("the confirmation opened with the focus on %q, want its Cancel", id)
	}
	b.do("cancel", chromedp.Click(chromedp.CSS("#confirm-no")), chromedp.WaitVisible(chromedp.CSS("#delete")))
	if id := evalIn[string](b, `document.activeElement.id`); id != "delete" {
		t.Fatalf("after Cancel the focus is on %q, want the Delete button", id)
	}
	evalIn[bool](b, `(document.getElementById('cutover').scrollIntoView(), true)`)
	b.screenshot("cutover")
	evalIn[bool](b, `(window.scrollTo(0, 0), true)`)

	// The link opens the reverse mirror's page.
	b.do("follow the reverse mirror link", chromedp.Click(chromedp.CSS("#reverse-mirror-link"), chromedp.NodeVisible))
	b.wait("the reverse mirror's page", `location.hash === '#/mirrors/back' && document.querySelector('h1 .name') !== null
		&& document.querySelector('h1 .name').textContent === 'back' && document.querySelector('h1[data-status]') !== null`)

	// A phone: 390 px wide. Each page, once drawn, is no wider than that,
	// and passes axe-core's checks at that width.
	axe := axeIfInstalled(t)
	b.do("a phone's viewport", chromedp.EmulateViewport(390, 844))
	fits := func(what, hash, ready string, picture string) {
		t.Helper()
		evalIn[bool](b, `(location.hash = `+jsString(hash)+`, true)`)
		b.wait(what, ready)
		time.Sleep(300 * time.Millisecond) // a refresh may redraw once more
		if w := evalIn[int](b, `document.documentElement.scrollWidth`); w > 390 {
			wide := evalIn[[]string](b, `[...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > 391)
				.slice(0, 8).map((e) => e.tagName + (e.id ? '#' + e.id : '') + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right))`)
			t.Errorf("%s: the page is %d px wide at a 390 px viewport; too wide: %v", what, w, wide)
		}
		if picture != "" {
			b.screenshot(picture)
		}
		if axe != "" {
			b.checkA11y(axe, what+" at 390 px")
		}
	}
	fits("the mirror list", "#/mirrors", `document.querySelector('#mirrors tr[data-mirror="`+longMirrorName+`"]') !== null
		&& document.querySelector('#mirrors tr[data-mirror="back"]') !== null`, "phone-mirrors")
	fits("the mirror page with its cut-over and logs", page, `document.querySelector('h1[data-status="completed"]') !== null
		&& document.querySelectorAll('#cutover-warnings li').length > 0 && document.querySelectorAll('#log-table tr.log').length > 0`, "phone-mirror")
	fits("the reverse mirror's page", "#/mirrors/back", `document.querySelector('h1[data-status]') !== null
		&& document.querySelectorAll('#log-table tr.log').length > 0`, "")
	fits("the peers", "#/peers", `document.querySelector('#peers tr[data-peer="src"] .test-peer') !== null`, "")
	fits("the create-mirror form", "#/new-mirror", `document.querySelectorAll('#f-source_peer option').length === 3`, "")
	evalIn[bool](b, `(() => { const e = document.querySelector('#mirror-form [name="source_peer"]'); e.value = 'src'; e.dispatchEvent(new Event('change')); return true; })()`)
	fits("the create-mirror form with the source's tables", "#/new-mirror", `document.querySelector('#source-tables input[name="table"]') !== null`, "")
	fits("the create-peer form", "#/new-peer", `document.getElementById('peer-form') !== null`, "")
	fits("the users", "#/users", `document.querySelector('#users tr[data-user="admin"]') !== null`, "")
	b.do("log out", chromedp.Click(chromedp.CSS("#logout"), chromedp.NodeVisible))
	fits("the login page", "#/mirrors", `document.getElementById('login-username') !== null`, "")
	b.noPageErrors()
}
