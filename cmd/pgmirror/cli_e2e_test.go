package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/httpapi/client"
)

// cliUser runs the client commands of the real binary as one user, with its
// own config directory (XDG_CONFIG_HOME) and environment.
type cliUser struct {
	t         *testing.T
	configDir string
	env       []string
}

func newCLIUser(t *testing.T, env ...string) *cliUser {
	t.Helper()
	return &cliUser{t: t, configDir: t.TempDir(), env: env}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// run runs pgmirror with args and stdin; it returns the output and exit code.
func (u *cliUser) run(stdin string, args ...string) cliResult {
	u.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+u.configDir, "HOME="+u.configDir, "SERVICE_URL=")
	cmd.Env = append(cmd.Env, u.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		u.t.Fatalf("pgmirror %s: %v", strings.Join(args, " "), err)
	}
	return cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// ok runs pgmirror and requires exit code 0.
func (u *cliUser) ok(args ...string) string {
	u.t.Helper()
	r := u.run("", args...)
	if r.code != 0 {
		u.t.Fatalf("pgmirror %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// fails runs pgmirror and requires the exit code and a message on stderr
// containing each fragment.
func (u *cliUser) fails(code int, fragments []string, args ...string) cliResult {
	u.t.Helper()
	r := u.run("", args...)
	if r.code != code {
		u.t.Fatalf("pgmirror %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stderr, f) {
			u.t.Fatalf("pgmirror %s: stderr lacks %q:\n%s", strings.Join(args, " "), f, r.stderr)
		}
	}
	return r
}

// jsonOut runs pgmirror with --json and decodes its output into out.
func (u *cliUser) jsonOut(out any, args ...string) {
	u.t.Helper()
	stdout := u.ok(append(args, "--json")...)
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		u.t.Fatalf("pgmirror %s --json: output is not the expected JSON: %v\n%s", strings.Join(args, " "), err, stdout)
	}
}

func peerFlags(t *testing.T, name, dbURL string) []string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"peers", "create", "--name", name, "--host", u.Hostname(), "--port", u.Port(), "--user", u.User.Username(),
		"--database", strings.TrimPrefix(u.Path, "/"), "--ssl-mode", "disable"}
}

// TestCLI runs the client commands against a real service: login (the
// password read from stdin, the token saved 0600), peers create, list and
// test, a mirror created from a file that reaches running, get, pause and
// resume, logs with a search, --json output that parses, and the exit codes
// of a 404, a 409, a 401, a refused connection and a bad flag.
func TestCLI(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `CREATE TABLE public.items (id int PRIMARY KEY, v text);
		INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 500) g;
		CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		CREATE TRIGGER items_touch BEFORE UPDATE ON public.items FOR EACH ROW EXECUTE FUNCTION touch()`)
	s := startService(t, catalog)
	u := newCLIUser(t, "TZ=UTC")

	// Not logged in yet: exit 3.
	u.fails(exitNotLoggedIn, []string{"pgmirror login"}, "mirrors", "list")
	// A wrong password: exit 3, nothing saved.
	r := u.run("wrong-password\n", "login", "--url", s.baseURL, "--user", "admin")
	if r.code != exitNotLoggedIn || !strings.Contains(r.stderr, "Invalid credentials") {
		t.Fatalf("login with a wrong password: exit %d, stderr %q", r.code, r.stderr)
	}
	// The password from stdin (not a terminal).
	r = u.run(testAdminPassword+"\n", "login", "--url", s.baseURL, "--user", "admin")
	if r.code != 0 || !strings.Contains(r.stdout, "Logged in to "+s.baseURL+" as admin (admin)") {
		t.Fatalf("login: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, testAdminPassword) {
		t.Fatal("login printed the password")
	}
	credPath := filepath.Join(u.configDir, "pgmirror", "credentials.json")
	fi, err := os.Stat(credPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file mode %v, want 0600", fi.Mode().Perm())
	}

	// Peers: one from flags with the password on stdin, one from a file.
	srcURL, _ := url.Parse(src)
	srcPW, _ := srcURL.User.Password()
	r = u.run(srcPW+"\n", peerFlags(t, "src", src)...)
	if r.code != 0 || !strings.Contains(r.stdout, "Created peer src") {
		t.Fatalf("peers create: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	dstURL, _ := url.Parse(dst)
	dstPW, _ := dstURL.User.Password()
	dstPort, _ := strconv.Atoi(dstURL.Port())
	peerFile := filepath.Join(t.TempDir(), "dst.json")
	writeJSON(t, peerFile, client.PeerCreate{Name: "dst", Host: dstURL.Hostname(), Port: dstPort, User: dstURL.User.Username(),
		Password: dstPW, Database: strings.TrimPrefix(dstURL.Path, "/"), SSLMode: "disable"})
	u.ok("peers", "create", "-f", peerFile)
	// The same name again: the API's 409, exit 1 with its message.
	u.fails(exitAPIError, []string{"HTTP 409"}, "peers", "create", "-f", peerFile)

	out := u.ok("peers", "list")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "src") || !strings.Contains(out, "dst") {
		t.Fatalf("peers list:\n%s", out)
	}
	var peers []client.Peer
	u.jsonOut(&peers, "peers", "list")
	if len(peers) != 2 {
		t.Fatalf("peers list --json: %+v", peers)
	}
	if out := u.ok("peers", "test", "src"); !strings.Contains(out, "Connection to peer src succeeded: 1") {
		t.Fatalf("peers test:\n%s", out)
	}
	var test client.PeerTest
	u.jsonOut(&test, "peers", "test", "dst")
	if !test.Success || test.Version == "" {
		t.Fatalf("peers test --json: %+v", test)
	}

	// A peer the service cannot connect to: peers test exits 1 with the reason.
	r = u.run("pw\n", "peers", "create", "--name", "down", "--host", "127.0.0.1", "--port", "1", "--user", "u", "--database", "d", "--ssl-mode", "disable")
	if r.code != 0 {
		t.Fatalf("peers create down: exit %d: %s", r.code, r.stderr)
	}
	u.fails(exitAPIError, []string{"connection to peer down failed"}, "peers", "test", "down")
	u.ok("peers", "delete", "down")

	// A viewer reads but may not change anything: the API's 403 is exit 1.
	s.mustDo("POST", "/v1/users", map[string]any{"username": "viewer", "password": "viewer-password", "role": "viewer"}, 201, nil)
	viewer := newCLIUser(t)
	viewer.ok("login", "--url", s.baseURL, "--user", "viewer", "--password", "viewer-password")
	viewer.ok("peers", "list")
	viewer.fails(exitAPIError, []string{"HTTP 403"}, "peers", "test", "src")

	// A mirror from a file.
	mirrorFile := filepath.Join(t.TempDir(), "mirror.json")
	writeJSON(t, mirrorFile, map[string]any{"name": "m1", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "items", "public", "items")}})
	if out := u.ok("mirrors", "create", "-f", mirrorFile); !strings.Contains(out, "Created mirror m1 (src -> dst, 1 table)") {
		t.Fatalf("mirrors create:\n%s", out)
	}
	s.dumpOnFailure("m1")
	// An unknown field in the file is a usage error, before any request.
	badFile := filepath.Join(t.TempDir(), "bad.json")
	writeJSON(t, badFile, map[string]any{"name": "m2", "source_peer": "src", "destination_peer": "dst", "table_mapings": []any{}})
	u.fails(exitUsage, []string{"table_mapings"}, "mirrors", "create", "-f", badFile)
	// The file is sent as it is: an explicit 0 meets the service's validation
	// (400, exit 1) instead of being dropped for the default.
	zeroFile := filepath.Join(t.TempDir(), "zero.json")
	writeJSON(t, zeroFile, map[string]any{"name": "m3", "source_peer": "src", "destination_peer": "dst", "cdc_batch_size": 0,
		"table_mappings": []any{mapping("public", "items", "public", "items")}})
	u.fails(exitAPIError, []string{"cdc_batch_size", "HTTP 400"}, "mirrors", "create", "-f", zeroFile)

	s.waitStatus("m1", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.items", "public.items", "id, v", 30*time.Second)
	out = u.ok("mirrors", "list")
	if !strings.Contains(out, "m1") || !strings.Contains(out, "running") {
		t.Fatalf("mirrors list:\n%s", out)
	}
	// The service filters, sorts and pages; a bad status is the service's 400.
	if out := u.ok("mirrors", "list", "--status", "running", "-q", "M1", "--sort", "-lag", "--limit", "5"); !strings.Contains(out, "m1") {
		t.Fatalf("mirrors list --status running -q M1:\n%s", out)
	}
	if out := u.ok("mirrors", "list", "--status", "paused,error", "--no-headers"); strings.TrimSpace(out) != "" {
		t.Fatalf("mirrors list --status paused,error lists a running mirror:\n%s", out)
	}
	u.fails(exitAPIError, []string{"HTTP 400", "status"}, "mirrors", "list", "--status", "bogus")
	out = u.ok("mirrors", "get", "m1")
	if !strings.Contains(out, "Status:") || !strings.Contains(out, "public.items") || !strings.Contains(out, "500") {
		t.Fatalf("mirrors get:\n%s", out)
	}
	// Times with their zone, lag and sizes in people's units.
	if !regexp.MustCompile(`Created: +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\n`).MatchString(out) ||
		!regexp.MustCompile(`Lag: +(-|\d+\.\d\d s|\d+ s|\d+ min( \d+ s)?)\n`).MatchString(out) ||
		!regexp.MustCompile(`Slot: .*(not read yet|\d+ B|\d+\.\d (KiB|MiB|GiB))`).MatchString(out) {
		t.Fatalf("mirrors get: times, lag or sizes not for people:\n%s", out)
	}
	// Shell completion offers the service's mirrors.
	if out := u.ok("__complete", "mirrors", "get", ""); !strings.Contains(out, "m1\trunning") {
		t.Fatalf("__complete mirrors get:\n%s", out)
	}
	var status client.MirrorStatus
	u.jsonOut(&status, "mirrors", "get", "m1")
	if status.Name != "m1" || status.Status != "running" || len(status.Tables) != 1 || status.Tables[0].RowsSynced != 500 {
		t.Fatalf("mirrors get --json: %+v", status)
	}

	// Verify: no differences (exit 0), then a row changed on the
	// destination behind the mirror's back is found (exit 5 with the key),
	// listed, shown, and repaired (exit 0).
	out = u.ok("mirrors", "verify", "m1", "--table", "public.items")
	if !strings.Contains(out, "Verification ") || !strings.Contains(out, "done, no differences") || !strings.Contains(out, "public.items") ||
		!strings.Contains(out, "500") {
		t.Fatalf("mirrors verify:\n%s", out)
	}
	exec1(t, dst, `UPDATE public.items SET v = 'changed' WHERE id = 7`)
	r = u.fails(exitDifferences, []string{"found 1 row that differs", "pgmirror mirrors repair m1"}, "mirrors", "verify", "m1")
	if !strings.Contains(r.stdout, "done, 1 row differs") || !strings.Contains(r.stdout, "public.items different: (id)=('7')") {
		t.Fatalf("mirrors verify with a difference:\n%s", r.stdout)
	}
	var list []client.Verification
	u.jsonOut(&list, "mirrors", "verifications", "m1")
	if len(list) != 2 || list[0].State != "done" || list[0].RowsDiffering == nil || *list[0].RowsDiffering != 1 {
		t.Fatalf("mirrors verifications --json: %+v", list)
	}
	differing := strconv.FormatInt(list[0].ID, 10)
	if out := u.ok("mirrors", "verifications", "m1"); !strings.Contains(out, "ROWS DIFFERING") || !strings.Contains(out, differing+"  ") {
		t.Fatalf("mirrors verifications:\n%s", out)
	}
	if out := u.ok("mirrors", "verifications", "m1", differing); !strings.Contains(out, "(id)=('7')") {
		t.Fatalf("mirrors verifications m1 %s:\n%s", differing, out)
	}
	viewer.ok("mirrors", "verifications", "m1", differing)
	viewer.fails(exitAPIError, []string{"HTTP 403"}, "mirrors", "verify", "m1")
	out = u.ok("mirrors", "repair", "m1", differing)
	if !strings.Contains(out, "Repair of: verification "+differing) || !strings.Contains(out, "done, no differences") {
		t.Fatalf("mirrors repair:\n%s", out)
	}
	waitEqual(t, src, dst, "public.items", "public.items", "id, v", 10*time.Second)
	if out := u.ok("mirrors", "get", "m1"); !strings.Contains(out, "Verified:") {
		t.Fatalf("mirrors get after verify:\n%s", out)
	}
	// --no-wait returns the running verification; it is then followed by id.
	var started client.Verification
	u.jsonOut(&started, "mirrors", "verify", "m1", "--no-wait")
	if started.State != "running" || started.ID == 0 {
		t.Fatalf("mirrors verify --no-wait --json: %+v", started)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		var v client.Verification
		u.jsonOut(&v, "mirrors", "verifications", "m1", strconv.FormatInt(started.ID, 10))
		if v.State == "done" && v.RowsDiffering != nil && *v.RowsDiffering == 0 {
			break
		}
		if v.State != "running" || time.Now().After(deadline) {
			t.Fatalf("verification %d after --no-wait: %+v", started.ID, v)
		}
	}
	u.fails(exitUsage, []string{"not a verification id"}, "mirrors", "repair", "m1", "x")
	u.fails(exitAPIError, []string{"HTTP 404"}, "mirrors", "verifications", "m1", "999999")

	// Pause, pause again (409: exit 1), resume.
	if out := u.ok("mirrors", "pause", "m1"); !strings.Contains(out, "paused") {
		t.Fatalf("mirrors pause:\n%s", out)
	}
	u.fails(exitAPIError, []string{"HTTP 409"}, "mirrors", "pause", "m1")
	var resumed client.StatusMessage
	u.jsonOut(&resumed, "mirrors", "resume", "m1")
	if resumed.Status != "running" {
		t.Fatalf("mirrors resume --json: %+v", resumed)
	}
	s.waitStatus("m1", "running", 30*time.Second)

	// Logs: the table, a search, and the JSON page.
	out = u.ok("logs", "m1", "--limit", "500")
	if !strings.Contains(out, "Mirror paused") || !strings.Contains(out, "Mirror resumed") {
		t.Fatalf("logs:\n%s", out)
	}
	out = u.ok("logs", "m1", "--search", "paused", "--limit", "500")
	if !strings.Contains(out, "Mirror paused") || strings.Contains(out, "Mirror resumed") {
		t.Fatalf("logs --search paused:\n%s", out)
	}
	var page client.LogPage
	u.jsonOut(&page, "logs", "m1", "--level", "info")
	if page.Total == 0 || len(page.Logs) == 0 || page.Logs[0].Level != "INFO" {
		t.Fatalf("logs --json: %+v", page)
	}

	// logs --follow prints entries as they arrive (a resync of one table),
	// and rides through a restart of the service: one notice on stderr
	// while it does not answer, then the entries of the restarted service.
	follow := exec.Command(binary, "logs", "m1", "--follow", "--search", "Table resync started")
	follow.Env = append(os.Environ(), "XDG_CONFIG_HOME="+u.configDir, "HOME="+u.configDir, "SERVICE_URL=")
	followOut, followErr := &syncBuffer{}, &syncBuffer{}
	follow.Stdout, follow.Stderr = followOut, followErr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	followDone := make(chan error, 1)
	go func() { followDone <- follow.Wait() }()
	t.Cleanup(func() { _ = follow.Process.Kill(); <-followDone })
	time.Sleep(500 * time.Millisecond)
	resynced := func(n int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			// The previous resync may still run (409): wait for its end.
			r := u.run("", "mirrors", "resync", "m1", "public.items")
			if r.code == 0 && strings.Contains(r.stdout, "m1:") {
				break
			}
			if r.code != exitAPIError || !strings.Contains(r.stderr, "being resynced") || time.Now().After(deadline) {
				t.Fatalf("mirrors resync m1 public.items: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
			}
			time.Sleep(500 * time.Millisecond)
		}
		for strings.Count(followOut.String(), "Table resync started") < n {
			select {
			case err := <-followDone:
				t.Fatalf("logs --follow ended (%v):\nstdout: %s\nstderr: %s", err, followOut.String(), followErr.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("logs --follow did not print the new entry:\nstdout: %s\nstderr: %s", followOut.String(), followErr.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	resynced(1)
	s.waitStatus("m1", "running", 60*time.Second)
	s.kill()
	time.Sleep(3 * time.Second) // at least one poll meets the stopped service
	restarted := launchService(t, catalog, "SERVICE_PORT="+strings.TrimPrefix(s.baseURL, "http://127.0.0.1:"))
	restarted.baseURL = s.baseURL
	restarted.waitReady()
	s = restarted
	s.waitStatus("m1", "running", 60*time.Second)
	resynced(2)
	// The command wrote the notice before the entry, but its stderr and
	// stdout reach the test through pipes of their own: wait for it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(followErr.String(), "the service answers again") && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if stderr := followErr.String(); strings.Count(stderr, "the service does not answer") != 1 || !strings.Contains(stderr, "retrying for up to 1 min") ||
		!strings.Contains(stderr, "the service answers again") {
		t.Fatalf("logs --follow through a restart: stderr:\n%s", stderr)
	}
	_ = follow.Process.Kill()
	s.waitStatus("m1", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.items", "public.items", "id, v", 30*time.Second)

	// Cut-over with the source idle, followed to its end (once the last
	// resync has finished).
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		r := u.run("", "mirrors", "cutover", "m1", "--quiet", "1")
		if r.code == 0 {
			out = r.stdout
			break
		}
		if !strings.Contains(r.stderr, "being resynced") || time.Now().After(deadline) {
			t.Fatalf("mirrors cutover m1 --quiet 1: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
	}
	if !strings.Contains(out, "Cut-over of m1: completed") || !strings.Contains(out, "apply_changes") ||
		!strings.Contains(out, "Warning: triggers of the mirrored tables that the destination lacks: items_touch on public.items") {
		t.Fatalf("mirrors cutover:\n%s", out)
	}
	u.fails(exitAPIError, []string{"HTTP 409"}, "mirrors", "cutover", "m1")

	// Exit codes: 404 and a bad flag.
	u.fails(exitAPIError, []string{"HTTP 404"}, "mirrors", "get", "nope")
	u.fails(exitUsage, []string{"unknown flag: --bogus"}, "mirrors", "list", "--bogus")
	u.fails(exitUsage, []string{`--level "BOGUS" is not a level`}, "logs", "m1", "--level", "bogus")
	u.fails(exitUsage, []string{"usage: pgmirror mirrors get NAME"}, "mirrors", "get")
	u.fails(exitUsage, nil, "mirrors", "frobnicate")
	// delete needs --yes when stdin is not a terminal.
	u.fails(exitUsage, []string{"--yes"}, "mirrors", "delete", "m1")

	// --url and SERVICE_URL take precedence over the saved URL; a URL
	// without a saved token is not sent the other service's token. A
	// mistyped address where nothing answers is exit 4, not "log in".
	other := newCLIUser(t, "SERVICE_URL=http://127.0.0.1:1")
	other.configDir = u.configDir
	other.fails(exitConnection, []string{"no pgmirror service answers at http://127.0.0.1:1", "check --url"}, "mirrors", "list")
	other.fails(exitConnection, []string{"cannot reach the service"}, "login", "--user", "admin", "--password", "x")
	// The same service under another name: reachable, not logged in there.
	otherName := strings.Replace(s.baseURL, "127.0.0.1", "localhost", 1)
	u.fails(exitNotLoggedIn, []string{"not logged in to " + otherName}, "mirrors", "list", "--url", otherName)

	// A token the service refuses: exit 3.
	var creds credentials
	raw, err := os.ReadFile(credPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &creds); err != nil {
		t.Fatal(err)
	}
	saved := creds.Logins[s.baseURL]
	saved.Token += "x"
	creds.Logins[s.baseURL] = saved
	writeJSON(t, credPath, creds)
	u.fails(exitNotLoggedIn, []string{"pgmirror login"}, "mirrors", "list")

	// Log in again with --password, then delete.
	u.ok("login", "--url", s.baseURL, "--user", "admin", "--password", testAdminPassword)
	var deleted client.Deleted
	u.jsonOut(&deleted, "mirrors", "delete", "m1", "--yes")
	if deleted.Deleted != "m1" {
		t.Fatalf("mirrors delete --json: %+v", deleted)
	}
	u.ok("logout")
	u.fails(exitNotLoggedIn, nil, "peers", "list", "--url", s.baseURL)
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCLITerminal runs the client commands in-process as on a terminal:
// login prompts for the password (read without echo) and mirrors delete
// asks for confirmation, deleting nothing unless the answer is yes.
func TestCLITerminal(t *testing.T) {
	t.Parallel()
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	configDir := t.TempDir()
	newCLI := func(stdin string) (*cli, *bytes.Buffer, *bytes.Buffer) {
		var stdout, stderr bytes.Buffer
		return &cli{
			getenv: func(string) string { return "" }, stdin: strings.NewReader(stdin), stdout: &stdout, stderr: &stderr,
			configDir:    func() (string, error) { return configDir, nil },
			isTerminal:   func() bool { return true },
			readPassword: func() ([]byte, error) { return []byte(testAdminPassword), nil },
			pollInterval: 100 * time.Millisecond,
		}, &stdout, &stderr
	}
	ctx := t.Context()

	c, stdout, stderr := newCLI("")
	if err := c.run(ctx, "login", []string{"--url", s.baseURL, "--user", "admin"}); err != nil {
		t.Fatalf("login: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr.String(), "Password for admin at "+s.baseURL) || strings.Contains(stderr.String()+stdout.String(), testAdminPassword) {
		t.Fatalf("login prompt: stderr %q, stdout %q", stderr, stdout)
	}

	// The saved URL is used without --url.
	c, stdout, _ = newCLI("")
	if err := c.run(ctx, "peers", []string{"list"}); err != nil || !strings.Contains(stdout.String(), "NAME") {
		t.Fatalf("peers list: %v\n%s", err, stdout)
	}

	// Deleting asks first; "n" deletes nothing (exit 2), "y" deletes.
	c, _, stderr = newCLI("n\n")
	err := c.run(ctx, "mirrors", []string{"delete", "nope"})
	if exitCode(err) != exitUsage || !strings.Contains(stderr.String(), "Delete mirror nope?") {
		t.Fatalf("mirrors delete answered n: %v (exit %d), stderr %q", err, exitCode(err), stderr)
	}
	c, _, _ = newCLI("y\n")
	err = c.run(ctx, "mirrors", []string{"delete", "nope"})
	if exitCode(err) != exitAPIError || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("mirrors delete answered y: %v (exit %d), want the API's 404", err, exitCode(err))
	}
}
