package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/httpapi/client"
)

// These tests drive what an operator does in the console besides mirrors:
// a password of their own, a peer's settings and its deletion, and read the
// units and times the console shows.

// TestConsoleOperatorTasks logs in as an admin whose password is still the
// default "admin": a banner says so on every page and links to the
// password form, which reports a wrong current password in words (without
// ending the session) and changes it, after which the banner is gone and
// the session goes on although the service revokes older tokens. Then
// a peer's password is rotated with the edit form (the field starts empty
// and the stored password is never shown), a peer a mirror uses cannot be
// deleted (the console says why, in words), an unused one is deleted after
// a confirmation that takes and gives back the focus, and the API's
// messages that name endpoints or field names reach the page in the
// console's words.
func TestConsoleOperatorTasks(t *testing.T) {
	t.Parallel()
	// The service revokes a user's older tokens when the password changes:
	// the console goes on with the token the change returns.
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, consoleSourceSQL+`;
		CREATE TABLE public.extra (id int PRIMARY KEY, v text); INSERT INTO public.extra VALUES (1, 'a')`)
	s := startService(t, catalog, "SERVICE_REVOKE_TOKENS_ON_PASSWORD_CHANGE=true")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	api := apiClient(t, s)
	_, err := api.CreateUser(callCtx(t), client.UserCreate{Username: "first", Password: "admin", Role: "admin"})
	must(t, err)
	_, err = api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "m1", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	// A peer whose role's password is rotated on the database.
	role := fmt.Sprintf("rotated_%d", time.Now().UnixNano()%1_000_000_000)
	u, err := url.Parse(dst)
	must(t, err)
	exec1(t, dst, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'old-peer-secret'; GRANT CONNECT ON DATABASE %q TO %s;
		CREATE TABLE public.extra (id int PRIMARY KEY, v text); INSERT INTO public.extra VALUES (7, 'already here')`,
		role, strings.TrimPrefix(u.Path, "/"), role))
	t.Cleanup(func() {
		pgtest.Exec(t, pgtest.DestCluster(t).URL("postgres"), fmt.Sprintf(`REVOKE CONNECT ON DATABASE %q FROM %s; DROP ROLE IF EXISTS %s`,
			strings.TrimPrefix(u.Path, "/"), role, role))
	})
	u.User = url.UserPassword(role, "old-peer-secret")
	s.createPeer("spare", u.String())
	s.waitStatus("m1", "running", 90*time.Second)

	b := newBrowser(t, 6*time.Minute)
	b.login(s.baseURL, "first", "admin")

	// The banner, on every page, links to the password form.
	const banner = `(() => { const b = document.getElementById('default-password');
		return !b.hidden && b.textContent.includes('still the default "admin"') && document.getElementById('default-password-link') !== null; })()`
	b.wait("the default-password banner on the mirrors page", banner)
	b.do("the peers page", chromedp.Navigate(s.baseURL+"/ui#/peers"))
	b.wait("the default-password banner on the peers page", `document.querySelector('#peers tr[data-peer="src"]') !== null && `+banner)
	b.screenshot("default-password")
	b.do("follow the banner's link", chromedp.Click(chromedp.CSS("#default-password-link"), chromedp.NodeVisible))
	b.wait("the password form", `location.hash === '#/account' && document.getElementById('password-form') !== null
		&& document.getElementById('default-password').hidden && document.getElementById('password-default-note') !== null`)

	// A wrong current password: the API's words, on the form; still logged in.
	b.do("a wrong current password", chromedp.SendKeys(chromedp.CSS("#f-current_password"), "not-it"),
		chromedp.SendKeys(chromedp.CSS("#f-new_password"), "first-new-password"),
		chromedp.SendKeys(chromedp.CSS("#f-repeat_password"), "first-new-password"),
		chromedp.Click(chromedp.CSS("#password-submit")))
	b.wait("the wrong password's error", `document.querySelector('#password-form .form-error').textContent === 'Current password is incorrect'`)
	if evalIn[string](b, `sessionStorage.getItem('pgmirror.token') || ''`) == "" || evalIn[bool](b, `document.getElementById('login-username') !== null`) {
		t.Fatal("a wrong current password ended the session")
	}
	// Two different new passwords are caught on the form, next to the field.
	evalIn[bool](b, `(() => { const f = document.getElementById('password-form');
		f.elements.current_password.value = 'admin'; f.elements.repeat_password.value = 'something-else'; return true; })()`)
	b.do("mismatched new passwords", chromedp.Click(chromedp.CSS("#password-submit")))
	b.wait("the mismatch next to the field", `document.querySelector('.field-error[data-for="repeat_password"]').textContent.includes('does not match')
		&& document.getElementById('f-repeat_password').classList.contains('invalid')
		&& document.querySelector('#password-form .form-error').textContent.startsWith('New password again: ')`)
	evalIn[bool](b, `(() => { const f = document.getElementById('password-form'); f.elements.repeat_password.value = 'first-new-password'; return true; })()`)
	b.do("change the password", chromedp.Click(chromedp.CSS("#password-submit")))
	b.wait("the change's answer", `document.getElementById('password-result').className === 'notice'
		&& document.getElementById('password-result').textContent.startsWith('Password changed')
		&& document.getElementById('password-default-note') === null`)
	b.screenshot("password")
	if _, err := client.New(s.baseURL, "").Login(callCtx(t), client.LoginRequest{Username: "first", Password: "first-new-password"}); err != nil {
		t.Fatalf("log in with the password set in the console: %v", err)
	}
	// The tokens from before the change are revoked; the page goes on with the new one.
	if msg := evalIn[string](b, `document.getElementById('password-result').textContent`); !strings.Contains(msg, "revoked") {
		t.Fatalf("the change's answer does not say that older tokens are revoked: %q", msg)
	}
	time.Sleep(4 * time.Second) // a heartbeat or two under the new token
	if evalIn[string](b, `sessionStorage.getItem('pgmirror.token') || ''`) == "" || evalIn[bool](b, `document.getElementById('login-username') !== null`) {
		t.Fatal("the password change ended the console's session")
	}
	b.do("the mirrors page", chromedp.Navigate(s.baseURL+"/ui#/mirrors"))
	b.wait("the mirrors page without the banner", `document.querySelector('#mirrors tr[data-mirror="m1"]') !== null && document.getElementById('default-password').hidden`)

	// Rotate the peer's password: the database's role gets a new one, the
	// connection test fails, the edit form sets it, and it works again.
	exec1(t, dst, fmt.Sprintf(`ALTER ROLE %s PASSWORD 'new-peer-secret'`, role))
	b.do("the peers page", chromedp.Navigate(s.baseURL+"/ui#/peers"))
	b.wait("the spare peer", `document.querySelector('#peers tr[data-peer="spare"] .edit-peer') !== null`)
	b.do("test spare", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="spare"] .test-peer`)))
	b.wait("the failed test", `document.querySelector('#peers tr[data-peer="spare"] .test-result').textContent.startsWith('Failed: ')`)
	b.do("edit spare", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="spare"] .edit-peer`)))
	b.wait("the edit form with the peer's settings", fmt.Sprintf(`location.hash === '#/peers/spare' && document.getElementById('f-host') !== null
		&& document.getElementById('f-host').value === %s && document.getElementById('f-user').value === %s
		&& document.getElementById('f-password').value === '' && document.getElementById('f-ssl_mode').value === 'disable'`,
		jsString(u.Hostname()), jsString(role)))
	if leaked := evalIn[bool](b, `document.documentElement.outerHTML.includes('old-peer-secret')`); leaked {
		t.Fatal("the edit form shows the stored password")
	}
	b.screenshot("peer-edit")
	b.do("set the new password", chromedp.SendKeys(chromedp.CSS("#f-password"), "new-peer-secret"),
		chromedp.Click(chromedp.CSS("#peer-save")))
	b.wait("back on the peers", `location.hash === '#/peers' && document.querySelector('#peers tr[data-peer="spare"] .test-peer') !== null`)
	b.do("test spare again", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="spare"] .test-peer`)))
	b.wait("the test passes with the rotated password", `document.querySelector('#peers tr[data-peer="spare"] .test-result').textContent.startsWith('OK: ')`)
	if p, err := api.GetPeer(callCtx(t), "spare"); err != nil || p.Host != u.Hostname() || p.User != role || p.SSLMode != "disable" {
		t.Fatalf("the peer after the edit: %+v, %v", p, err)
	}
	// An edit the API refuses shows its words next to the field.
	b.do("edit spare", chromedp.Navigate(s.baseURL+"/ui#/peers/spare"))
	b.wait("the edit form", `document.getElementById('f-host') !== null && document.getElementById('f-host').value !== ''`)
	evalIn[bool](b, `(document.getElementById('f-host').value = 'a, b', true)`)
	b.do("save a list of hosts", chromedp.Click(chromedp.CSS("#peer-save")))
	b.wait("the host's error", `document.querySelector('.field-error[data-for="host"]').textContent.includes('list of hosts')
		&& document.getElementById('f-host').classList.contains('invalid')`)

	// A peer a mirror uses: the console says why it stays, in words.
	b.do("the peers page", chromedp.Navigate(s.baseURL+"/ui#/peers"))
	b.wait("the src peer", `document.querySelector('#peers tr[data-peer="src"] .delete-peer') !== null`)
	b.do("delete src", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .delete-peer`)),
		chromedp.WaitVisible(chromedp.CSS(`#peers tr[data-peer="src"] .confirm-no`)))
	if cls := evalIn[string](b, `document.activeElement.className`); cls != "confirm-no" {
		t.Fatalf("the confirmation opened with the focus on %q, want its Cancel", cls)
	}
	b.do("cancel", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .confirm-no`)))
	if cls := evalIn[string](b, `document.activeElement.className`); !strings.Contains(cls, "delete-peer") {
		t.Fatalf("after Cancel the focus is on %q, want the Delete button", cls)
	}
	b.do("delete src, confirmed", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .delete-peer`)),
		chromedp.WaitVisible(chromedp.CSS(`#peers tr[data-peer="src"] .confirm-yes`)),
		chromedp.Click(chromedp.CSS(`#peers tr[data-peer="src"] .confirm-yes`)))
	b.wait("the refusal in words", `document.getElementById('peer-result').className === 'error'
		&& document.getElementById('peer-result').textContent === 'Peer src is not deleted: it is used by mirror "m1": delete that mirror first.'`)
	b.screenshot("peer-delete-refused")
	if _, err := api.GetPeer(callCtx(t), "src"); err != nil {
		t.Fatalf("src after the refused delete: %v", err)
	}
	b.do("delete spare, confirmed", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="spare"] .delete-peer`)),
		chromedp.WaitVisible(chromedp.CSS(`#peers tr[data-peer="spare"] .confirm-yes`)),
		chromedp.Click(chromedp.CSS(`#peers tr[data-peer="spare"] .confirm-yes`)))
	b.wait("spare gone", `document.querySelector('#peers tr[data-peer="spare"]') === null
		&& document.getElementById('peer-result').textContent === 'Peer spare deleted.'`)
	var apiErr *client.APIError
	if _, err := api.GetPeer(callCtx(t), "spare"); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("spare after the delete: %v, want 404", err)
	}

	// Words, not endpoints: the API says "update it with PUT /v1/peers/src".
	b.do("create a peer named src", chromedp.Click(chromedp.CSS("#new-peer")), chromedp.WaitVisible(chromedp.CSS("#peer-form")),
		chromedp.SendKeys(chromedp.CSS("#f-name"), "src"), chromedp.SendKeys(chromedp.CSS("#f-host"), "127.0.0.1"),
		chromedp.SendKeys(chromedp.CSS("#f-user"), "someone"), chromedp.SendKeys(chromedp.CSS("#f-database"), "somedb"),
		chromedp.Click(chromedp.CSS("#peer-submit")))
	b.wait("the conflict in words", `document.querySelector('#peer-form .form-error').textContent.includes('edit it on the Peers page')`)
	// And a 409 naming existing_destination_rows names the form's field.
	b.do("the mirror form", chromedp.Navigate(s.baseURL+"/ui#/new-mirror"), chromedp.WaitVisible(chromedp.CSS("#mirror-form")),
		chromedp.SendKeys(chromedp.CSS("#f-name"), "m2"))
	b.wait("the peers in the form", `document.querySelectorAll('#f-source_peer option').length === 3`)
	evalIn[bool](b, `(() => { for (const [n, v] of [['source_peer', 'src'], ['destination_peer', 'dst']]) {
		const e = document.querySelector('#mirror-form [name="' + n + '"]'); e.value = v; e.dispatchEvent(new Event('change')); } return true; })()`)
	b.wait("the source's tables", `document.querySelector('#source-tables input[value*="extra"]') !== null`)
	b.do("choose extra and submit", chromedp.Click(chromedp.CSS(`#source-tables input[value*="extra"]`)), chromedp.Click(chromedp.CSS("#mirror-submit")))
	b.wait("the rows conflict with the field's label", `(() => { const e = document.querySelector('#mirror-form .form-error').textContent;
		return e.includes('"Rows already in destination tables"') && document.getElementById('f-existing_destination_rows').classList.contains('invalid'); })()`)
	b.screenshot("words")
	shown := evalIn[string](b, `document.getElementById('view').innerText + document.getElementById('top').innerText`)
	for _, api := range []string{"existing_destination_rows", "/v1/", "POST ", "PUT "} {
		if strings.Contains(shown, api) {
			t.Errorf("the console shows %q to people:\n%s", api, shown)
		}
	}
	b.noPageErrors()
}

// TestConsoleUnits reads a lag, a size and a time on a mirror's page: each
// is what the CLI's formatting (cli_text.go) makes of the API's value, so
// that the console and the CLI read the same.
func TestConsoleUnits(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, consoleSourceSQL)
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=1s")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	api := apiClient(t, s)
	_, err := api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "units", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	s.waitStatus("units", "running", 90*time.Second)
	// Paused with source writes behind it, the mirror's lag is the time
	// since its last applied commit: made 3 h 2 min 10 s ago, it reads
	// "3 h 2 min" for the next 50 s.
	_, err = api.PauseMirror(callCtx(t), "units")
	must(t, err)
	s.waitStatus("units", "paused", 60*time.Second)
	exec1(t, src, `INSERT INTO items (label) SELECT 'after pause ' || g FROM generate_series(1, 2000) g`)
	exec1(t, catalog, `INSERT INTO mirror_lag (mirror_id, lag_seconds, measured_at, applied_commit_at)
		SELECT id, 0, now(), now() - interval '3 hours 2 minutes 10 seconds' FROM mirrors WHERE name = 'units'
		ON CONFLICT (mirror_id) DO UPDATE SET applied_commit_at = EXCLUDED.applied_commit_at`)
	m := waitUntil(t, 30*time.Second, func() (*client.MirrorStatus, bool) {
		m := getMirror(t, api, "units")
		return m, m.SlotLagBytes != nil && *m.SlotLagBytes > 1024 && m.LagSeconds != nil && *m.LagSeconds > 3*3600
	}, func(m *client.MirrorStatus) string { return fmt.Sprintf("no slot lag and lag read: %+v", m.SlotHealth) })
	t.Logf("lag %.1f s, slot lag %d bytes", *m.LagSeconds, *m.SlotLagBytes)

	b := newBrowser(t, 3*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	b.do("the mirror's page", chromedp.Navigate(s.baseURL+"/ui#/mirrors/units"))
	b.wait("the counters", `document.querySelector('h1[data-status="paused"]') !== null && document.querySelector('#counters dd') !== null`)
	counter := func(label string) string {
		return evalIn[string](b, `(() => { const dt = [...document.querySelectorAll('#counters dt')].find((d) => d.textContent === `+jsString(label)+`);
			return dt ? dt.nextElementSibling.textContent : ''; })()`)
	}
	// The page and the API are read one after the other: retried until
	// both come from the same readings.
	type pair struct{ shown, want string }
	for _, c := range []struct {
		label string
		want  func(*client.MirrorStatus) string
	}{
		{"Lag", func(m *client.MirrorStatus) string { return formatLag(m.LagSeconds) }},
		{"Slot WAL kept", func(m *client.MirrorStatus) string { return formatBytes(m.SlotLagBytes) }},
		{"Created", func(m *client.MirrorStatus) string { return formatTime(&m.CreatedAt) }},
	} {
		got := waitUntil(t, 30*time.Second, func() (pair, bool) {
			shown := counter(c.label)
			if c.label == "Created" {
				shown = evalIn[string](b, `(() => { const dt = [...document.querySelectorAll('#summary dt')].find((d) => d.textContent === 'Created');
					return dt ? dt.nextElementSibling.textContent : ''; })()`)
			}
			want := c.want(getMirror(t, api, "units"))
			return pair{shown, want}, shown == want
		}, func(p pair) string {
			return fmt.Sprintf("%s: the console shows %q, the CLI's format of the API's value is %q", c.label, p.shown, p.want)
		})
		t.Logf("%s: %s", c.label, got.shown)
	}
	if lag := counter("Lag"); lag != "3 h 2 min" {
		t.Errorf("the lag reads %q, want 3 h 2 min", lag)
	}
	if size := counter("Slot WAL kept"); !strings.HasSuffix(size, " KiB") && !strings.HasSuffix(size, " MiB") {
		t.Errorf("the slot's WAL reads %q, want KiB or MiB", size)
	}
	b.noPageErrors()
}

// TestConsoleFormatsMatchCLI runs the console's own formatting code (the
// units and times block of app.js, as served) in Chromium on the values of
// TestCLIUnits and on a few thousand more, in four time zones, and expects
// exactly what the CLI's formatSeconds, formatBytes and formatTime write.
func TestConsoleFormatsMatchCLI(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "httpapi", "ui", "static", "app.js"))
	must(t, err)
	js := string(raw)
	start, end := strings.Index(js, "  // Units and times: the same rules as the CLI"), strings.Index(js, "  // forPeople rewrites")
	if start < 0 || end < start {
		t.Fatal("app.js has no units and times block between its two comments")
	}
	block := js[start:end]

	rng := rand.New(rand.NewPCG(1, 2))
	secs := []float64{-1, 0, 0.2, 0.125, 9.994, 9.995, 9.996, 10, 45, 59.4, 59.5, 59.6, 60, 61, 192, 324.9, 3599, 3599.5, 3600, 3660,
		10920, 10949, 86399, 86399.5, 86400, 90061, 30 * 86400}
	for range 3000 {
		secs = append(secs, math.Pow(10, rng.Float64()*8-2))
	}
	sizes := []int64{0, 1, 1023, 1024, 1638, 1047552, 1048575, 1048576, 5 << 20, 3 << 30, 1536 << 30, 2048 << 40}
	for range 3000 {
		sizes = append(sizes, int64(math.Pow(2, rng.Float64()*52)))
	}
	var times []time.Time
	for _, s := range []string{"2026-01-15T12:00:00Z", "2026-07-15T12:00:00Z", "2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z", "2026-11-01T05:59:59Z"} {
		at, err := time.Parse(time.RFC3339, s)
		must(t, err)
		times = append(times, at)
	}
	for range 500 {
		times = append(times, time.Unix(1_500_000_000+rng.Int64N(600_000_000), 0).UTC())
	}
	isos := make([]string, len(times))
	for i, at := range times {
		isos[i] = at.Format(time.RFC3339)
	}

	b := newBrowser(t, 3*time.Minute)
	run := func(expr string) []string {
		t.Helper()
		return evalIn[[]string](b, `(() => { 'use strict';
`+block+`
return `+expr+`; })()`)
	}
	secsJSON, sizesJSON, isosJSON := mustJSON(secs), mustJSON(sizes), mustJSON(isos)
	gotSecs := run(`JSON.parse(` + jsString(string(secsJSON)) + `).map(fmtSeconds)`)
	gotSizes := run(`JSON.parse(` + jsString(string(sizesJSON)) + `).map(fmtBytes)`)
	bad := 0
	for i, s := range secs {
		if want := formatSeconds(s); gotSecs[i] != want && bad < 10 {
			bad++
			t.Errorf("%v s: console %q, CLI %q", s, gotSecs[i], want)
		}
	}
	for i, n := range sizes {
		if want := formatBytes(&n); gotSizes[i] != want && bad < 20 {
			bad++
			t.Errorf("%d bytes: console %q, CLI %q", n, gotSizes[i], want)
		}
	}
	for _, zone := range []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"} {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatalf("time zone %s: %v (install the tzdata package)", zone, err)
		}
		if _, err := chromedp.Call(b.ctx, emulation.SetTimezoneOverride, emulation.SetTimezoneOverrideParams{TimezoneID: zone}); err != nil {
			t.Fatalf("set the browser's time zone to %s: %v", zone, err)
		}
		got := run(`JSON.parse(` + jsString(string(isosJSON)) + `).map(fmtTime)`)
		for i, at := range times {
			if want := formatTimeIn(at, loc, "2006-01-02 15:04:05"); got[i] != want && bad < 30 {
				bad++
				t.Errorf("%s in %s: console %q, CLI %q", isos[i], zone, got[i], want)
			}
		}
	}
	b.noPageErrors()
}
