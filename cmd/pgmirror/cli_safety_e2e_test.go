package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// evil holds what a hostile name, message or key could carry: a CSI that
// clears the screen, BEL, a carriage return, a newline and a tab (which
// would fake a table row or shift a column), DEL, the C1 CSI as a character
// and as a lone byte, and bidirectional overrides and isolates.
const evil = "E\x1b[2J\x07\r\n\tX\x7f\u009b31m\x9b\u202eR\u2066I\u2069"

// rawControls lists the characters of out that a terminal would act on.
func rawControls(out string) []string {
	var found []string
	for i := 0; i < len(out); {
		r, n := utf8.DecodeRuneInString(out[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			found = append(found, fmt.Sprintf("byte %#x at %d", out[i], i))
		case r == '\n' || r == '\t':
		case isUnsafeRune(r):
			found = append(found, fmt.Sprintf("%U at %d", r, i))
		}
		i += n
	}
	return found
}

func requireNoControls(t *testing.T, what, out string) {
	t.Helper()
	if found := rawControls(out); len(found) > 0 {
		t.Fatalf("%s printed raw control characters %v:\n%q", what, found, out)
	}
}

// TestCLIEscapeControls checks the one function every human-readable print
// goes through.
func TestCLIEscapeControls(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in          string
		keepLayout  bool
		want        string
		description string
	}{
		{"orders", false, "orders", "plain text stays"},
		{"naïve 表", false, "naïve 表", "letters of any script stay"},
		{"a\x1b[2Jb", false, `a\x1b[2Jb`, "ESC"},
		{"a\x07b\x7fc", false, `a\x07b\x7fc`, "BEL and DEL"},
		{"a\rb\nc\td", false, `a\rb\nc\td`, "CR, LF and TAB in a cell"},
		{"a\rb\nc\td", true, "a\\rb\nc\td", "a whole line keeps LF and TAB"},
		{"a\u009b31mb", false, `a\u009b31mb`, "C1 CSI"},
		{"a\x9bb", false, `a\x9bb`, "a byte that is not UTF-8"},
		{"a\u202eb\u2066c\u2069\u200f", false, `a\u202eb\u2066c\u2069\u200f`, "bidi overrides, isolates, marks"},
		{"a\u2028b", false, `a\u2028b`, "line separator"},
	} {
		if got := escapeControls(c.in, c.keepLayout); got != c.want {
			t.Errorf("%s: escapeControls(%q, %t) = %q, want %q", c.description, c.in, c.keepLayout, got, c.want)
		}
		requireNoControls(t, c.description, strings.ReplaceAll(escapeControls(c.in, false), "\n", ""))
	}
	// JSON keeps its value: the C1 and bidi characters become \u escapes.
	raw := mustJSON(map[string]string{"name": evil})
	safe := jsonTerminalSafe(raw)
	requireNoControls(t, "jsonTerminalSafe", string(safe))
	var a, b map[string]string
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(safe, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("jsonTerminalSafe changed the value: %q -> %q", a, b)
	}
}

// TestCLIFormats checks the units people read: lag, bytes, plurals.
func TestCLIFormats(t *testing.T) {
	t.Parallel()
	for sec, want := range map[float64]string{0.2: "0.20 s", 9.994: "9.99 s", 45: "45 s", 59.6: "1 min", 192: "3 min 12 s",
		3600: "1 h", 10920: "3 h 2 min", 90061: "1 d 1 h", 324.9: "5 min 25 s"} {
		if got := formatSeconds(sec); got != want {
			t.Errorf("formatSeconds(%v) = %q, want %q", sec, got, want)
		}
	}
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1638: "1.6 KiB", 5 << 20: "5.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := formatBytes(&n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if plural(1, "table", "tables") != "1 table" || plural(2, "table", "tables") != "2 tables" || plural(0, "entry", "entries") != "0 entries" {
		t.Error("plural")
	}
	if got := formatMillis(310); got != "310 ms" {
		t.Errorf("formatMillis(310) = %q", got)
	}
}

// hostileServer answers the API's calls with names, messages, keys and log
// entries full of terminal control sequences, as a hostile service, or a
// service relaying what a hostile database user named, could.
func hostileServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var authorized atomic.Int64
	now := time.Now()
	evilPtr := func() *string { s := evil; return &s }
	lag, slotLag, progress, differing := 192.0, int64(1638), 0.5, int64(3)
	peer := client.Peer{Name: evil, Host: evil, Port: 5432, Database: evil, User: evil, SSLMode: evil, CreatedAt: now, UpdatedAt: now}
	config := client.MirrorConfig{Name: evil, SourcePeer: evil, DestinationPeer: evil, Status: evil, ReplicationSlotName: evil, CreatedAt: now,
		TableMappings: []client.TableMapping{{SourceSchema: "public", SourceTable: evil}}}
	cutover := &client.CutoverRecord{State: "completed", RequestedAt: now, TargetLSN: evil, ReverseMirror: evil, Error: evil,
		Steps: []client.CutoverStep{{Name: evil, State: evil, DurationMS: 2201, Error: evil}}, Warnings: []string{evil}}
	status := client.MirrorStatus{MirrorConfig: config, DesiredState: evil, LastLSN: evilPtr(), ErrorMessage: evilPtr(), ErrorCount: 2,
		SlotHealth:   client.SlotHealth{LagSeconds: &lag, SlotLagBytes: &slotLag, SlotWALStatus: evilPtr(), SlotCheckedAt: &now},
		Verification: client.MirrorVerification{Last: &client.VerificationLatest{ID: 1, LSN: evil, FinishedAt: &now, RowsDiffering: 3}},
		Cutover:      cutover, UpdatedAt: now,
		Tables: []client.TableStatus{{TableName: evil, Status: evil, RowsSynced: 1, Progress: &progress, LastSyncedAt: &now}}}
	verification := client.Verification{ID: 1, Mirror: evil, State: "done", LSN: evilPtr(), RequestedBy: evil, StartedAt: now, FinishedAt: &now,
		Error: evilPtr(), RowsDiffering: &differing, Tables: []client.VerificationTable{{Table: evil, Method: evil, Skipped: evil, RowsDiffering: 3,
			Missing: []string{evil}, Extra: []string{evil}, Different: []string{evil}}}}
	var logID atomic.Int64
	mux := http.NewServeMux()
	reply := func(v any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		}
	}
	mux.HandleFunc("GET /health", reply(map[string]string{"status": "ok"}))
	mux.HandleFunc("POST /v1/auth/login", reply(client.LoginResponse{Token: "tok", Username: evil, Role: evil, ExpiresAt: &now}))
	mux.HandleFunc("GET /v1/peers", reply([]client.Peer{peer}))
	mux.HandleFunc("POST /v1/peers", reply(peer))
	mux.HandleFunc("GET /v1/peers/{name}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("name") == "raw" {
			// Not JSON: a raw ESC inside a string.
			_, _ = w.Write([]byte("{\"name\": \"a\x1b[2Jb\x07\"}"))
			return
		}
		reply(peer)(w, r)
	})
	mux.HandleFunc("POST /v1/peers/{name}/test", reply(client.PeerTest{Success: false, Error: evil}))
	mux.HandleFunc("DELETE /v1/peers/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": evil})
	})
	mux.HandleFunc("GET /v1/mirrors", reply([]client.MirrorSummary{{Name: evil, Status: evil, SourcePeer: evil, DestinationPeer: evil,
		LastLSN: evilPtr(), SlotHealth: client.SlotHealth{LagSeconds: &lag, SlotLagBytes: &slotLag}, UpdatedAt: now}}))
	mux.HandleFunc("POST /v1/mirrors", reply(config))
	mux.HandleFunc("GET /v1/mirrors/{name}", reply(status))
	mux.HandleFunc("DELETE /v1/mirrors/{name}", reply(client.Deleted{Deleted: evil}))
	for _, action := range []string{"pause", "resume"} {
		mux.HandleFunc("POST /v1/mirrors/{name}/"+action, reply(client.StatusMessage{Message: evil, Status: evil}))
	}
	for _, action := range []string{"retry", "sync-schema", "resync"} {
		mux.HandleFunc("POST /v1/mirrors/{name}/"+action, reply(client.Message{Message: evil}))
	}
	mux.HandleFunc("POST /v1/mirrors/{name}/resync/{table}", reply(client.TableMessage{Message: evil, Table: evil}))
	mux.HandleFunc("POST /v1/mirrors/{name}/cutover", reply(client.CutoverResponse{Message: evil, Status: evil, Cutover: cutover}))
	mux.HandleFunc("POST /v1/mirrors/{name}/verify", reply(verification))
	mux.HandleFunc("GET /v1/mirrors/{name}/verifications", reply([]client.Verification{verification}))
	mux.HandleFunc("GET /v1/mirrors/{name}/verifications/{id}", reply(verification))
	mux.HandleFunc("POST /v1/mirrors/{name}/verifications/{id}/repair", reply(verification))
	mux.HandleFunc("GET /v1/mirrors/{name}/logs", func(w http.ResponseWriter, r *http.Request) {
		id := logID.Add(1)
		details := json.RawMessage(`{"table": "` + "\u009b\u202e" + `", "esc": "\u001b[2J"}`)
		reply(client.LogPage{Total: 99, Limit: 50, Logs: []client.LogEntry{{ID: id, Level: evil, Message: evil, Details: details, CreatedAt: now}}})(w, r)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			authorized.Add(1)
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &authorized
}

// TestCLIHostileServer runs every human-readable command of the real binary
// against a service whose names, messages, keys and log entries hold
// terminal control sequences: nothing reaches stdout or stderr raw, the
// escapes show what was there, and --json prints exactly the service's
// values.
func TestCLIHostileServer(t *testing.T) {
	t.Parallel()
	srv, _ := hostileServer(t)
	u := newCLIUser(t, "TZ=UTC")
	dir := t.TempDir()
	peerFile := filepath.Join(dir, "peer.json")
	writeJSON(t, peerFile, client.PeerCreate{Name: "p", Host: "h", Port: 5432, User: "u", Password: "pw", Database: "d"})
	mirrorFile := filepath.Join(dir, "mirror.json")
	writeJSON(t, mirrorFile, map[string]any{"name": "m", "source_peer": "a", "destination_peer": "b", "table_mappings": []any{}})

	check := func(code int, args ...string) cliResult {
		t.Helper()
		r := u.run("", args...)
		if r.code != code {
			t.Fatalf("pgmirror %s: exit %d, want %d\nstdout: %q\nstderr: %q", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
		}
		requireNoControls(t, "stdout of pgmirror "+strings.Join(args, " "), r.stdout)
		requireNoControls(t, "stderr of pgmirror "+strings.Join(args, " "), r.stderr)
		return r
	}
	r := check(0, "login", "--url", srv.URL, "--user", "admin", "--password", "pw")
	if !strings.Contains(r.stdout, `E\x1b[2J\x07\r\n\tX\x7f\u009b31m`) || !strings.Contains(r.stdout, `\u202eR\u2066I\u2069`) {
		t.Fatalf("login does not show the escaped user name:\n%s", r.stdout)
	}
	for _, c := range []struct {
		code int
		args []string
	}{
		{0, []string{"peers", "list"}},
		{0, []string{"peers", "get", "p"}},
		{exitAPIError, []string{"peers", "test", "p"}},
		{0, []string{"peers", "create", "-f", peerFile}},
		{exitAPIError, []string{"peers", "delete", "p"}},
		{exitAPIError, []string{"peers", "get", "raw"}},
		{exitAPIError, []string{"peers", "get", "raw", "--json"}},
		{0, []string{"mirrors", "list"}},
		{0, []string{"mirrors", "get", "m"}},
		{0, []string{"mirrors", "create", "-f", mirrorFile}},
		{0, []string{"mirrors", "pause", "m"}},
		{0, []string{"mirrors", "resume", "m"}},
		{0, []string{"mirrors", "retry", "m"}},
		{0, []string{"mirrors", "sync-schema", "m"}},
		{0, []string{"mirrors", "resync", "m"}},
		{0, []string{"mirrors", "resync", "m", "public.t"}},
		{0, []string{"mirrors", "delete", "m", "--yes"}},
		{0, []string{"mirrors", "cutover", "m"}},
		{exitDifferences, []string{"mirrors", "verify", "m"}},
		{0, []string{"mirrors", "verifications", "m"}},
		{exitDifferences, []string{"mirrors", "repair", "m", "1"}},
		{0, []string{"mirrors", "verifications", "m", "1"}},
		{0, []string{"logs", "m"}},
		{0, []string{"logs", "m", "--no-headers"}},
	} {
		r := check(c.code, c.args...)
		shown := "E\\x1b[2J"
		if c.args[len(c.args)-1] == "raw" || c.args[len(c.args)-1] == "--json" {
			shown = "not the JSON"
		}
		if c.args[1] == "delete" && c.code == 0 {
			shown = "Deleted mirror m" // the name given, not the service's
		}
		if !strings.Contains(r.stdout+r.stderr, shown) {
			t.Fatalf("pgmirror %s shows no escaped name or message:\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), r.stdout, r.stderr)
		}
	}
	// A table's cell stays on its row: the escaped newline and tab do not
	// make a new row.
	r = check(0, "mirrors", "list")
	if lines := strings.Split(strings.TrimSpace(r.stdout), "\n"); len(lines) != 2 {
		t.Fatalf("mirrors list: a name with a newline made %d lines:\n%s", len(lines), r.stdout)
	}
	if !strings.Contains(r.stdout, "3 min 12 s") || !strings.Contains(r.stdout, "1.6 KiB") || !strings.Contains(r.stdout, " UTC") {
		t.Fatalf("mirrors list: lag, slot lag or time not in people's units:\n%s", r.stdout)
	}
	if r := check(0, "mirrors", "list", "--no-headers"); strings.Contains(r.stdout, "NAME") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("mirrors list --no-headers:\n%s", r.stdout)
	}
	if r := check(0, "logs", "m"); !strings.Contains(r.stderr, "(1 of 99 entries;") || !strings.Contains(r.stdout, `\u009b\u202e`) {
		t.Fatalf("logs:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}

	// --json and -o json: the service's values exactly, as JSON.
	for _, args := range [][]string{{"peers", "list", "--json"}, {"mirrors", "get", "m", "-o", "json"}, {"logs", "m", "--json"},
		{"mirrors", "verifications", "m", "--json"}} {
		r := check(0, args...)
		path := map[string]string{"peers": "/v1/peers", "mirrors": "/v1/mirrors/m", "logs": "/v1/mirrors/m/logs"}[args[0]]
		if args[1] == "verifications" {
			path = "/v1/mirrors/m/verifications"
		}
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var want, got any
		err = json.NewDecoder(resp.Body).Decode(&want)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("pgmirror %s: not JSON: %v\n%s", strings.Join(args, " "), err, r.stdout)
		}
		if args[0] == "logs" {
			// Each call numbers its entry anew.
			got.(map[string]any)["logs"].([]any)[0].(map[string]any)["id"] = nil
			want.(map[string]any)["logs"].([]any)[0].(map[string]any)["id"] = nil
		}
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("pgmirror %s: the JSON differs from the service's:\n%s", strings.Join(args, " "), r.stdout)
		}
	}

	// logs --follow: each new entry escaped as it arrives.
	follow := exec.Command(binary, "logs", "m", "--follow")
	follow.Env = append(os.Environ(), "XDG_CONFIG_HOME="+u.configDir, "HOME="+u.configDir, "SERVICE_URL=")
	var stdout, stderr syncBuffer
	follow.Stdout, follow.Stderr = &stdout, &stderr
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(stdout.String(), "\n") < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	_ = follow.Process.Signal(os.Interrupt)
	_ = follow.Wait()
	if strings.Count(stdout.String(), "\n") < 2 {
		t.Fatalf("logs --follow printed no new entry:\n%s", stdout.String())
	}
	requireNoControls(t, "logs --follow", stdout.String()+stderr.String())
}

// TestCLIResponseCap points the real binary at a server that answers with
// an endless body: the command stops at 16 MiB with a clear error and exit
// 1, promptly, having let the server write little more than that.
func TestCLIResponseCap(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	var writing sync.WaitGroup
	endless := func(status int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			writing.Add(1)
			defer writing.Done()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			chunk := bytes.Repeat([]byte(`{"name": "x"},`), 4096)
			_, _ = w.Write([]byte("["))
			for r.Context().Err() == nil {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"status":"ok"}`)) })
	mux.HandleFunc("POST /v1/auth/login", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"token":"tok","username":"admin","role":"admin"}`))
	})
	mux.HandleFunc("GET /v1/mirrors", endless(http.StatusOK))
	mux.HandleFunc("GET /v1/peers", endless(http.StatusInternalServerError))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	u := newCLIUser(t)
	u.ok("login", "--url", srv.URL, "--user", "admin", "--password", "pw")
	for _, args := range [][]string{{"mirrors", "list"}, {"peers", "list"}, {"mirrors", "list", "--json"}} {
		sent.Store(0)
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+u.configDir, "HOME="+u.configDir, "SERVICE_URL=")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		code := cmd.ProcessState.ExitCode()
		if err == nil || code != exitAPIError {
			t.Fatalf("pgmirror %s against an endless body: exit %d, want 1\nstderr: %s", strings.Join(args, " "), code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "the server's response is larger than 16 MiB") || !strings.Contains(stderr.String(), "PGMIRROR_MAX_RESPONSE_MIB") {
			t.Fatalf("pgmirror %s: stderr %q", strings.Join(args, " "), stderr.String())
		}
		if stdout.Len() != 0 {
			t.Fatalf("pgmirror %s printed %d bytes of the endless answer", strings.Join(args, " "), stdout.Len())
		}
		if elapsed > 30*time.Second {
			t.Fatalf("pgmirror %s took %s against an endless body", strings.Join(args, " "), elapsed)
		}
		// What the server got to write before the CLI hung up: the 16 MiB
		// read and what the sockets buffer. (The CLI's peak RSS is no
		// measure here: Linux keeps, across exec, the high-water mark of
		// the memory a child shared with this test process until its exec,
		// so it reported the test process's own size, 163 MiB once in CI.)
		if sent.Load() > 64<<20 {
			t.Fatalf("pgmirror %s let the server write %d MiB of an endless body", strings.Join(args, " "), sent.Load()>>20)
		}
		t.Logf("pgmirror %s: exit %d after %s, server wrote %d MiB", strings.Join(args, " "), code, elapsed.Round(time.Millisecond), sent.Load()>>20)
	}
	// The server's handlers stop writing once the client is gone.
	done := make(chan struct{})
	go func() { writing.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the endless answers were still being written 10 s after the client ended")
	}
	// A lower cap from the environment.
	low := newCLIUser(t, "PGMIRROR_MAX_RESPONSE_MIB=1")
	low.configDir = u.configDir
	low.fails(exitAPIError, []string{"larger than 1 MiB"}, "mirrors", "list")
	low = newCLIUser(t, "PGMIRROR_MAX_RESPONSE_MIB=lots")
	low.configDir = u.configDir
	low.fails(exitUsage, []string{"PGMIRROR_MAX_RESPONSE_MIB"}, "mirrors", "list")
}

// TestCLIHelpAndCompletion checks per-command help (on stdout, exit 0, with
// usage, arguments, description and examples), shell completion scripts
// that a shell loads and that complete commands, and the exit codes of the
// command line's own mistakes.
func TestCLIHelpAndCompletion(t *testing.T) {
	t.Parallel()
	u := newCLIUser(t)
	for _, c := range []struct {
		path      string
		arguments bool
	}{
		{"login", false}, {"logout", false}, {"logs", true}, {"peers", false},
		{"peers list", false}, {"peers get", true}, {"peers create", false}, {"peers test", true}, {"peers delete", true},
		{"mirrors", false}, {"mirrors list", false}, {"mirrors get", true}, {"mirrors create", false}, {"mirrors pause", true},
		{"mirrors resume", true}, {"mirrors retry", true}, {"mirrors sync-schema", true}, {"mirrors resync", true},
		{"mirrors delete", true}, {"mirrors cutover", true}, {"mirrors verify", true}, {"mirrors verifications", true},
		{"mirrors repair", true}, {"completion", false},
	} {
		args := append(strings.Fields(c.path), "--help")
		r := u.run("", args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("pgmirror %s --help: exit %d, stderr %q", c.path, r.code, r.stderr)
		}
		for _, want := range []string{"Usage:\n  pgmirror " + c.path, "Flags:"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("pgmirror %s --help lacks %q:\n%s", c.path, want, r.stdout)
			}
		}
		if !strings.Contains(r.stdout, "Examples:\n  ") {
			t.Fatalf("pgmirror %s --help has no examples:\n%s", c.path, r.stdout)
		}
		if c.arguments && !strings.Contains(r.stdout, "Arguments:\n  NAME") {
			t.Fatalf("pgmirror %s --help does not describe its arguments:\n%s", c.path, r.stdout)
		}
	}
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}} {
		r := u.run("", args...)
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("pgmirror %s: exit %d, stderr %q", args[0], r.code, r.stderr)
		}
		for _, command := range []string{"serve", "migrate", "login", "peers", "mirrors", "logs", "completion"} {
			if !regexp.MustCompile(`(?m)^  ` + command + ` +\S`).MatchString(r.stdout) {
				t.Fatalf("pgmirror %s does not list %s with what it does:\n%s", args[0], command, r.stdout)
			}
		}
	}
	if r := u.run("", "help", "mirrors", "get"); r.code != 0 || !strings.Contains(r.stdout, "Usage:\n  pgmirror mirrors get NAME") {
		t.Fatalf("pgmirror help mirrors get: exit %d\n%s", r.code, r.stdout)
	}
	if r := u.run("", "mirrors", "get", "-h"); r.code != 0 || !strings.Contains(r.stdout, "Usage:\n  pgmirror mirrors get NAME") {
		t.Fatalf("pgmirror mirrors get -h: exit %d\n%s", r.code, r.stdout)
	}

	// The command line's own mistakes: exit 2 with what to do.
	u.fails(exitUsage, []string{"unknown flag: --bogus", "pgmirror mirrors list --help"}, "mirrors", "list", "--bogus")
	u.fails(exitUsage, []string{`unknown subcommand "lst"`, "did you mean list"}, "mirrors", "lst")
	u.fails(exitUsage, []string{"a subcommand is required"}, "peers")
	u.fails(exitUsage, []string{"usage: pgmirror peers get NAME"}, "peers", "get", "a", "b")
	u.fails(exitUsage, []string{`--level "BOGUS" is not a level`, "DEBUG, INFO, WARN, ERROR"}, "logs", "m", "--level", "bogus")
	u.fails(exitUsage, []string{"--output", "table or json"}, "mirrors", "list", "-o", "yaml")
	u.fails(exitUsage, []string{"invalid argument"}, "logs", "m", "--limit", "many")

	// Completion scripts for bash, zsh and fish.
	bash := u.ok("completion", "bash")
	if !strings.Contains(bash, "__start_pgmirror") {
		t.Fatalf("completion bash:\n%s", tail(bash, 500))
	}
	if !strings.Contains(u.ok("completion", "zsh"), "#compdef pgmirror") {
		t.Fatal("completion zsh is not a zsh completion script")
	}
	if !strings.Contains(u.ok("completion", "fish"), "complete -c pgmirror") {
		t.Fatal("completion fish is not a fish completion script")
	}
	u.fails(exitUsage, nil, "completion", "tcsh")
	// bash loads the script and completes a subcommand with the binary.
	script := filepath.Join(t.TempDir(), "pgmirror.bash")
	if err := os.WriteFile(script, []byte(bash), 0o600); err != nil {
		t.Fatal(err)
	}
	// The script needs the bash-completion package's _get_comp_words_by_ref;
	// a minimal one stands in where the package is not installed.
	sh := exec.Command("bash", "-c", `if [ -f /usr/share/bash-completion/bash_completion ]; then source /usr/share/bash-completion/bash_completion; `+
		`else _get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }; fi; `+
		`source "$1" && COMP_WORDS=(pgmirror mirrors ver) && COMP_CWORD=2 && COMP_LINE="pgmirror mirrors ver" && `+
		`COMP_POINT=${#COMP_LINE} && __start_pgmirror pgmirror ver mirrors && echo "${COMPREPLY[*]}"`, "bash", script)
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"), "XDG_CONFIG_HOME="+u.configDir, "HOME="+u.configDir)
	out, err := sh.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verify") || !strings.Contains(string(out), "verifications") {
		t.Fatalf("bash completion of 'pgmirror mirrors ver': %v\n%s", err, out)
	}
	for _, shell := range []string{"zsh", "fish"} {
		if _, err := exec.LookPath(shell); err != nil {
			continue
		}
		script := u.ok("completion", shell)
		check := exec.Command(shell, "-n")
		check.Stdin = strings.NewReader(script)
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("%s -n of the completion script: %v\n%s", shell, err, out)
		}
	}
	// Flag values complete too.
	if out := u.ok("__complete", "logs", "m", "--level", ""); !strings.Contains(out, "ERROR") || !strings.Contains(out, "WARN") {
		t.Fatalf("__complete logs --level:\n%s", out)
	}
}

// TestCLIExitCodesAddress checks that an address where no pgmirror service
// answers is exit 4 (unreachable) whether or not a login was saved for it,
// that a reachable service without a saved login is exit 3, and that no
// token is sent to a URL it was not issued by.
func TestCLIExitCodesAddress(t *testing.T) {
	t.Parallel()
	srv, authorized := hostileServer(t)
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	u := newCLIUser(t)
	u.ok("login", "--url", srv.URL, "--user", "admin", "--password", "pw")
	before := authorized.Load()

	u.fails(exitConnection, []string{"no pgmirror service answers at " + deadURL, "check --url"}, "mirrors", "list", "--url", deadURL)
	u.fails(exitConnection, []string{"no pgmirror service answers at http://127.0.0.1:1"}, "peers", "list", "--url", "127.0.0.1:1")
	u.fails(exitConnection, []string{"cannot reach the service"}, "login", "--url", deadURL, "--user", "admin", "--password", "x")
	// Something answers, but not a pgmirror service.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<html>not here</html>"))
	}))
	t.Cleanup(other.Close)
	u.fails(exitConnection, []string{"GET /health answered HTTP 404"}, "mirrors", "list", "--url", other.URL)
	// A pgmirror service this user has not logged in to: exit 3, no token sent.
	second, _ := hostileServer(t)
	u.fails(exitNotLoggedIn, []string{"not logged in to " + second.URL, "pgmirror login"}, "mirrors", "list", "--url", second.URL)
	if authorized.Load() != before {
		t.Fatal("a token was sent")
	}
	// The saved URL still works.
	u.ok("mirrors", "list")
	// The saved service going away is exit 4 as well.
	srv.Close()
	u.fails(exitConnection, []string{"cannot reach the service"}, "mirrors", "list")
}

// TestCLIFollowGivesUp follows a service that goes away for good: one
// notice on stderr, then after the retry time exit 4.
func TestCLIFollowGivesUp(t *testing.T) {
	t.Parallel()
	srv, _ := hostileServer(t)
	configDir := t.TempDir()
	var stdout, stderr bytes.Buffer
	c := &cli{
		getenv: func(string) string { return "" }, stdin: strings.NewReader(""), stdout: terminalWriter{&stdout}, stderr: terminalWriter{&stderr},
		configDir:    func() (string, error) { return configDir, nil },
		isTerminal:   func() bool { return false },
		readPassword: func() ([]byte, error) { return nil, nil },
		pollInterval: 100 * time.Millisecond, followRetry: 2 * time.Second,
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.run(ctx, "login", []string{"--url", srv.URL, "--user", "admin", "--password", "pw"}); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		srv.CloseClientConnections()
		srv.Close()
	}()
	start := time.Now()
	err := c.run(ctx, "logs", []string{"m", "--follow"})
	if exitCode(err) != exitConnection || !strings.Contains(err.Error(), "stopped following the logs") {
		t.Fatalf("logs --follow against a service that went away: %v (exit %d)", err, exitCode(err))
	}
	if elapsed := time.Since(start); elapsed < 2*time.Second || elapsed > 20*time.Second {
		t.Fatalf("logs --follow gave up after %s, want about 2 s of retries", elapsed)
	}
	if n := strings.Count(stderr.String(), "the service does not answer"); n != 1 {
		t.Fatalf("logs --follow printed %d notices:\n%s", n, stderr.String())
	}
	requireNoControls(t, "logs --follow", stdout.String()+stderr.String()+err.Error())
	if !regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+ `).MatchString(stdout.String()) {
		t.Fatalf("log lines without a time zone:\n%s", stdout.String())
	}
}

// TestCLIHostileTableName runs the client against the real service with a
// source table whose name a database user chose to hold an escape sequence,
// BEL, a carriage return and a bidi override, mirrored through a
// whole-schema mapping (the API refuses such names when they are typed, but
// a schema's tables come from the database): mirrors get and logs show the
// name escaped and leave no raw control character on the terminal.
func TestCLIHostileTableName(t *testing.T) {
	t.Parallel()
	const name = "t\x1b[2J\x07\r\u202eX"
	_, _, dst, s := newEnv(t, `CREATE SCHEMA app;
		CREATE TABLE app."`+name+`" (id int PRIMARY KEY, v text);
		INSERT INTO app."`+name+`" SELECT g, 'v' || g FROM generate_series(1, 50) g`)
	exec1(t, dst, `CREATE SCHEMA app`)
	s.mustDo("POST", "/v1/mirrors", map[string]any{"name": "clihostile", "source_peer": "src", "destination_peer": "dst",
		"cdc_sync_interval_seconds": 1, "table_mappings": []any{mapping("app", "*", "app", "*")}}, 201, nil)
	s.dumpOnFailure("clihostile")
	s.waitStatus("clihostile", "running", 90*time.Second)

	u := newCLIUser(t)
	u.ok("login", "--url", s.baseURL, "--user", "admin", "--password", testAdminPassword)
	const shown = `t\x1b[2J\x07\r\u202eX`
	for _, c := range []struct {
		code int
		args []string
	}{
		{0, []string{"mirrors", "get", "clihostile"}},
		{0, []string{"mirrors", "list"}},
		{0, []string{"logs", "clihostile", "--limit", "500"}},
	} {
		r := u.run("", c.args...)
		if r.code != c.code {
			t.Fatalf("pgmirror %s: exit %d, want %d\nstdout: %q\nstderr: %q", strings.Join(c.args, " "), r.code, c.code, r.stdout, r.stderr)
		}
		requireNoControls(t, "stdout of pgmirror "+strings.Join(c.args, " "), r.stdout)
		requireNoControls(t, "stderr of pgmirror "+strings.Join(c.args, " "), r.stderr)
		want := shown
		if c.args[0] == "logs" {
			want = `t\u001b[2J\u0007\r\u202eX` // in the entries' details, which are JSON
		}
		if c.args[1] != "list" && !strings.Contains(r.stdout, want) {
			t.Fatalf("pgmirror %s does not show the table's name escaped:\n%s", strings.Join(c.args, " "), r.stdout)
		}
	}
	// --json keeps the exact name.
	var status client.MirrorStatus
	u.jsonOut(&status, "mirrors", "get", "clihostile")
	if len(status.Tables) != 1 || !strings.HasSuffix(status.Tables[0].TableName, name) {
		t.Fatalf("mirrors get --json: tables %+v", status.Tables)
	}
}
