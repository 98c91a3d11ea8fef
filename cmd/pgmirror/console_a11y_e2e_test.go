package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// axeRequired reports whether a missing axe-core fails the accessibility
// test rather than skipping it: PGMIRROR_TEST_REQUIRE_AXE=1, or
// PGMIRROR_TEST_REQUIRE_MAJORS=1 (make test, which installs both with
// make test-deps), unless PGMIRROR_SKIP_AXE=1 skipped its installation.
func axeRequired() bool {
	return (os.Getenv("PGMIRROR_TEST_REQUIRE_AXE") == "1" || os.Getenv("PGMIRROR_TEST_REQUIRE_MAJORS") == "1") &&
		os.Getenv("PGMIRROR_SKIP_AXE") != "1"
}

// axeScript returns axe-core's axe.min.js as scripts/install-axe-core.sh
// installs it (findAxe). Without it the test skips, or fails under
// axeRequired.
func axeScript(t *testing.T) string {
	t.Helper()
	src, missing := findAxe(t)
	if missing != "" {
		if axeRequired() {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	return src
}

// axeIfInstalled is axeScript for tests that check more than accessibility:
// without axe-core they go on without its checks (saying so), unless it
// is required.
func axeIfInstalled(t *testing.T) string {
	t.Helper()
	src, missing := findAxe(t)
	if missing != "" {
		if axeRequired() {
			t.Fatal(missing)
		}
		t.Log(missing + "; the accessibility checks of this test are left out")
	}
	return src
}

// findAxe reads axe.min.js: the file PGMIRROR_AXE_JS names, else the
// newest version installed in the script's cache; or it says why it cannot.
func findAxe(t *testing.T) (src, missing string) {
	t.Helper()
	path := os.Getenv("PGMIRROR_AXE_JS")
	if path == "" {
		var caches []string
		if c := os.Getenv("PGMIRROR_AXE_CACHE"); c != "" {
			caches = append(caches, c)
		}
		if os.Getuid() == 0 {
			caches = append(caches, "/var/cache/pgmirror/axe-core")
		}
		if c, err := os.UserCacheDir(); err == nil {
			caches = append(caches, filepath.Join(c, "pgmirror", "axe-core"))
		}
		for _, cache := range caches {
			marks, _ := filepath.Glob(filepath.Join(cache, "*", ".installed"))
			sort.Strings(marks)
			if len(marks) > 0 {
				path = filepath.Join(filepath.Dir(marks[len(marks)-1]), "axe.min.js")
				break
			}
		}
		if path == "" {
			return "", "axe-core is not installed (looked in " + strings.Join(caches, ", ") + "): run `make test-deps` " +
				"(scripts/install-axe-core.sh) or set PGMIRROR_AXE_JS to an axe.min.js"
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read axe-core: %v", err)
	}
	return string(raw), ""
}

// axeViolation is one rule axe-core found broken, with the elements.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// checkA11y runs axe-core on the page as it is drawn now and fails the
// test on each serious or critical violation (minor and moderate ones are
// logged). The script is put into the page through the DevTools protocol,
// which the page's Content-Security-Policy does not restrict; the page's
// own scripts stay under it.
func (b *browser) checkA11y(axe, page string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`typeof window.axe === 'object' || (() => {`+axe+"\n;return true; })()")); err != nil {
		b.t.Fatalf("axe-core on %s: inject: %v", page, err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`axe.run(document, { resultTypes: ['violations'] }).then((r) => JSON.stringify(r.violations.map((v) => ({
		id: v.id, impact: v.impact, help: v.help,
		nodes: v.nodes.slice(0, 6).map((n) => n.target.join(' ') + ' — ' + (n.failureSummary || '').replace(/\s+/g, ' ')) }))))`,
		chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("axe-core on %s: %v", page, err)
	}
	var found []axeViolation
	if err := json.Unmarshal([]byte(raw), &found); err != nil {
		b.t.Fatalf("axe-core on %s: %v: %s", page, err, raw)
	}
	for _, v := range found {
		line := v.Impact + " " + v.ID + ": " + v.Help + "\n\t\t" + strings.Join(v.Nodes, "\n\t\t")
		if v.Impact == "serious" || v.Impact == "critical" {
			b.t.Errorf("axe-core on %s: %s", page, line)
		} else {
			b.t.Logf("axe-core on %s (not failing): %s", page, line)
		}
	}
}

// TestConsoleAccessibility runs axe-core on every page of the console, as
// an admin whose password is still the default (so the banner shows):
// login, the mirror list, a mirror's page (with its logs, a verification
// and a confirmation open), the peers with a delete confirmation, a peer's
// edit form, both create forms, the users, the password form, and the
// cut-over view of a completed mirror. Serious and critical violations
// fail it.
func TestConsoleAccessibility(t *testing.T) {
	t.Parallel()
	axe := axeScript(t)
	_, _, _, s := newEnv(t, consoleSourceSQL)
	api := apiClient(t, s)
	_, err := api.CreateUser(callCtx(t), client.UserCreate{Username: "first", Password: "admin", Role: "admin"})
	must(t, err)
	_, err = api.CreateMirror(callCtx(t), client.MirrorCreate{Name: "shop", SourcePeer: "src", DestinationPeer: "dst", CDCSyncIntervalSeconds: 1,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: "items", DestinationSchema: "public", DestinationTable: "items"}}})
	must(t, err)
	s.waitStatus("shop", "running", 90*time.Second)
	_, err = api.VerifyMirror(callCtx(t), "shop", client.VerifyRequest{})
	must(t, err)

	b := newBrowser(t, 6*time.Minute)
	b.do("the login page", chromedp.Navigate(s.baseURL+"/ui"), chromedp.WaitVisible(chromedp.CSS("#login-username")))
	b.checkA11y(axe, "the login page")
	// A failed login's message.
	b.do("a wrong password", chromedp.SendKeys(chromedp.CSS("#login-username"), "first"),
		chromedp.SendKeys(chromedp.CSS("#login-password"), "wrong"), chromedp.Click(chromedp.CSS("#login-submit")))
	b.wait("the login error", `document.getElementById('login-error').textContent !== ''`)
	b.checkA11y(axe, "the login page with its error")
	b.login(s.baseURL, "first", "admin")

	visit := func(page, hash, ready string) {
		t.Helper()
		evalIn[bool](b, `(location.hash = `+jsString(hash)+`, true)`)
		b.wait(page, ready)
		b.checkA11y(axe, page)
	}
	visit("the mirror list with the default-password banner", "#/mirrors", `document.querySelector('#mirrors tr[data-mirror="shop"] .status-running') !== null
		&& !document.getElementById('default-password').hidden`)
	visit("a mirror's page", "#/mirrors/shop", `document.querySelector('h1[data-status="running"]') !== null
		&& document.querySelectorAll('#log-table tr.log').length > 0 && document.querySelector('#verification-list .verification[data-state="done"]') !== null
		&& document.querySelector('#tables tr[data-table="public.items"]') !== null`)
	b.do("open the delete confirmation", chromedp.Click(chromedp.CSS("#delete"), chromedp.NodeEnabled), chromedp.WaitVisible(chromedp.CSS("#confirm-no")))
	b.checkA11y(axe, "a mirror's page with a confirmation open")
	b.do("cancel", chromedp.Click(chromedp.CSS("#confirm-no")), chromedp.WaitVisible(chromedp.CSS("#delete")))
	visit("the peers", "#/peers", `document.querySelector('#peers tr[data-peer="src"] .delete-peer') !== null`)
	b.do("open a peer's delete confirmation", chromedp.Click(chromedp.CSS(`#peers tr[data-peer="dst"] .delete-peer`)),
		chromedp.WaitVisible(chromedp.CSS(`#peers tr[data-peer="dst"] .confirm-no`)))
	b.checkA11y(axe, "the peers with a confirmation open")
	visit("a peer's edit form", "#/peers/src", `document.getElementById('peer-edit-form') !== null`)
	visit("the create-peer form", "#/new-peer", `document.getElementById('peer-form') !== null`)
	visit("the create-mirror form", "#/new-mirror", `document.querySelectorAll('#f-source_peer option').length === 3`)
	b.do("name the mirror", chromedp.SendKeys(chromedp.CSS("#f-name"), "other"))
	evalIn[bool](b, `(() => { const e = document.querySelector('#mirror-form [name="source_peer"]'); e.value = 'src'; e.dispatchEvent(new Event('change')); return true; })()`)
	b.wait("the source's tables", `document.querySelector('#source-tables input[name="table"]') !== null`)
	b.do("submit without tables", chromedp.Click(chromedp.CSS("#mirror-submit")))
	b.wait("the form's errors", `document.querySelector('#mirror-form .form-error').textContent !== ''`)
	b.checkA11y(axe, "the create-mirror form with its tables and errors")
	visit("the users", "#/users", `document.querySelector('#users tr[data-user="first"]') !== null`)
	visit("the password form", "#/account", `document.getElementById('password-form') !== null`)

	// The cut-over view of a completed mirror.
	quiet, wait := 1, 90
	cutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, done, err := api.Cutover(cutCtx, "shop", client.CutoverRequest{QuietSeconds: &quiet, WaitSeconds: &wait}); err != nil || !done {
		t.Fatalf("cut-over: done %v, %v", done, err)
	}
	visit("the cut-over view", "#/mirrors/shop", `document.querySelector('h1[data-status="completed"]') !== null
		&& document.querySelectorAll('#cutover-steps tbody tr').length > 0`)
	b.noPageErrors()
}
