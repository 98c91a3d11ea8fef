package main

// The command-line client: pgmirror login, peers, mirrors and logs talk to
// a running service through its REST API (httpapi/client). See docs/cli.md.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// Exit codes of the client commands (documented in docs/cli.md).
const (
	exitAPIError    = 1 // the service answered with an error (4xx other than 401, or 5xx)
	exitUsage       = 2 // bad command line or input file
	exitNotLoggedIn = 3 // no saved token for the URL, or the service answered 401
	exitConnection  = 4 // the service could not be reached
)

// exitError is an error that ends the process with a given exit code.
// main prints its message (when there is one) and exits with code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCode returns the process exit code for an error returned by run.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// cliCommands are the client commands run dispatches to runCLI, with the
// commands of shell completion (the scripts call __complete).
var cliCommands = map[string]bool{
	"login": true, "logout": true, "peers": true, "mirrors": true, "logs": true,
	"completion": true, "__complete": true, "__completeNoDesc": true,
}

// cli holds what a client command needs from its surroundings.
type cli struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	// configDir is where the credentials file lives (os.UserConfigDir()/pgmirror).
	configDir func() (string, error)
	// isTerminal tells whether stdin is a terminal (password prompts, confirmations).
	isTerminal func() bool
	// readPassword reads a line from the terminal without echo.
	readPassword func() ([]byte, error)
	// pollInterval is how often logs --follow and cutover poll.
	pollInterval time.Duration
	// followRetry is how long logs --follow keeps polling a service that
	// does not answer (a restart) before it gives up; 0 means 60 s.
	followRetry time.Duration

	// set by the common flags
	url       string
	json      bool
	output    string
	noHeaders bool
}

// runCLI runs a client command: login, logout, peers, mirrors, logs or
// completion. What it prints for people, and its error message, are
// escaped (cli_text.go): nothing the service sends can drive the terminal.
func runCLI(ctx context.Context, command string, args []string, getenv func(string) string, stdout io.Writer) error {
	c := &cli{
		getenv: getenv, stdin: os.Stdin, stdout: terminalWriter{stdout}, stderr: terminalWriter{os.Stderr},
		configDir: func() (string, error) {
			dir, err := os.UserConfigDir()
			if err != nil {
				return "", err
			}
			return filepath.Join(dir, "pgmirror"), nil
		},
		isTerminal:   func() bool { return term.IsTerminal(int(os.Stdin.Fd())) },
		readPassword: func() ([]byte, error) { return term.ReadPassword(int(os.Stdin.Fd())) },
		pollInterval: 2 * time.Second,
	}
	return c.run(ctx, command, args)
}

// run parses the command line with the command tree of cli_root.go and
// runs the command. Every error comes back as an *exitError with its exit
// code (2 for the command line's own mistakes) and an escaped message.
func (c *cli) run(ctx context.Context, command string, args []string) error {
	root := c.rootCommand()
	root.SetArgs(append([]string{command}, args...))
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// cobra's own: an unknown command or flag, a flag's bad value.
		path := "pgmirror"
		if cmd != nil {
			path = cmd.CommandPath()
		}
		err = usageErrorf("%v; see %s --help", err, path)
	}
	return escapedError(err)
}

// escapedError is err with its message escaped for the terminal and its
// exit code kept.
func escapedError(err error) error {
	msg := err.Error()
	if safe := escapeControls(msg, false); safe != msg {
		return &exitError{code: exitCode(err), err: errors.New(safe)}
	}
	return err
}

// credentials is the file of saved logins, one per service URL.
type credentials struct {
	// Current is the URL of the last login, used when neither --url nor
	// SERVICE_URL is given.
	Current string                `json:"current"`
	Logins  map[string]savedLogin `json:"logins"`
}

type savedLogin struct {
	Username string `json:"username"`
	Token    string `json:"token"`
}

func (c *cli) credentialsPath() (string, error) {
	dir, err := c.configDir()
	if err != nil {
		return "", fmt.Errorf("find the configuration directory for the saved login: %w", err)
	}
	return filepath.Join(dir, "credentials.json"), nil
}

func (c *cli) loadCredentials() (*credentials, error) {
	creds := &credentials{Logins: map[string]savedLogin{}}
	path, err := c.credentialsPath()
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return creds, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the saved login: %w", err)
	}
	if err := json.Unmarshal(raw, creds); err != nil {
		return nil, fmt.Errorf("read the saved login %s: %w (delete the file and log in again)", path, err)
	}
	if creds.Logins == nil {
		creds.Logins = map[string]savedLogin{}
	}
	return creds, nil
}

// saveCredentials writes the file with mode 0600 in a 0700 directory,
// replacing it atomically.
func (c *cli) saveCredentials(creds *credentials) error {
	path, err := c.credentialsPath()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	raw, err := json.MarshalIndent(creds, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".credentials-*")
	if err != nil {
		return fmt.Errorf("save the login: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("save the login: %w", err)
	}
	if _, err := tmp.Write(append(raw, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("save the login: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("save the login: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("save the login: %w", err)
	}
	return nil
}

// baseURL is --url, else SERVICE_URL, else the URL of the last login.
func (c *cli) baseURL(creds *credentials) (string, error) {
	u := c.url
	if u == "" {
		u = c.getenv("SERVICE_URL")
	}
	if u == "" && creds != nil {
		u = creds.Current
	}
	if u == "" {
		return "", &exitError{code: exitNotLoggedIn, err: errors.New("no service URL: give --url, set SERVICE_URL, or log in with pgmirror login --url URL --user NAME")}
	}
	return normalizeURL(u), nil
}

func normalizeURL(u string) string {
	u = strings.TrimRight(strings.TrimSpace(u), "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// maxResponseEnv names the environment variable that raises (or lowers)
// the largest response the client reads, in MiB.
const maxResponseEnv = "PGMIRROR_MAX_RESPONSE_MIB"

// newClient returns an API client of u with the response size cap.
func (c *cli) newClient(u, token string, timeout time.Duration) (*client.Client, error) {
	limit := client.DefaultMaxResponseBytes
	if v := strings.TrimSpace(c.getenv(maxResponseEnv)); v != "" {
		mib, err := strconv.ParseInt(v, 10, 64)
		if err != nil || mib <= 0 || mib > 1<<20 {
			return nil, usageErrorf("%s=%q: give a number of MiB from 1 to 1048576", maxResponseEnv, v)
		}
		limit = mib << 20
	}
	return &client.Client{BaseURL: u, Token: token, HTTPClient: &http.Client{Timeout: timeout}, MaxResponseBytes: limit}, nil
}

// api returns a client for the service with the saved token for its URL.
func (c *cli) api(ctx context.Context) (*client.Client, error) {
	creds, err := c.loadCredentials()
	if err != nil {
		return nil, err
	}
	u, err := c.baseURL(creds)
	if err != nil {
		return nil, err
	}
	saved, ok := creds.Logins[u]
	if !ok || saved.Token == "" {
		return nil, c.notLoggedIn(ctx, u)
	}
	return c.newClient(u, saved.Token, 2*time.Minute)
}

// notLoggedIn is the error for a URL without a saved token. A mistyped
// --url is the usual cause, so the service is asked first (GET /health,
// which needs no token): an address where no pgmirror service answers is
// exit 4, not an invitation to log in there.
func (c *cli) notLoggedIn(ctx context.Context, u string) error {
	probe, err := c.newClient(u, "", 10*time.Second)
	if err != nil {
		return err
	}
	probe.MaxResponseBytes = 64 << 10
	health, err := probe.Health(ctx)
	switch {
	case err != nil && (client.IsConnectionError(err) || ctx.Err() == nil):
		return &exitError{code: exitConnection, err: fmt.Errorf("no pgmirror service answers at %s (%s); check --url or SERVICE_URL", u, describeProbeError(err))}
	case err != nil:
		return apiErr(err)
	case health.Status != "ok":
		return &exitError{code: exitConnection, err: fmt.Errorf("no pgmirror service answers at %s (GET /health did not say ok); check --url or SERVICE_URL", u)}
	}
	return &exitError{code: exitNotLoggedIn, err: fmt.Errorf("not logged in to %s: run pgmirror login --url %s --user NAME", u, u)}
}

// describeProbeError says in a few words why GET /health failed.
func describeProbeError(err error) string {
	var ae *client.APIError
	var tooLarge *client.ResponseTooLargeError
	switch {
	case errors.As(err, &ae):
		return fmt.Sprintf("GET /health answered HTTP %d", ae.Status)
	case errors.As(err, &tooLarge):
		return "GET /health answered with more than a health check"
	case client.IsConnectionError(err):
		return err.Error()
	}
	return "GET /health did not answer a health check: " + err.Error()
}

// request makes one call with the logged-in client. With --json it prints
// the response's JSON as the service sent it and reports printed, so the
// command has nothing more to print; otherwise the command prints res.
func request[T any](ctx context.Context, c *cli, call func(ctx context.Context, api *client.Client) (T, error)) (res T, printed bool, err error) {
	api, err := c.api(ctx)
	if err != nil {
		return res, false, err
	}
	var raw []byte
	if res, err = call(client.CaptureBody(ctx, &raw), api); err != nil {
		return res, false, apiErr(err)
	}
	if c.json {
		return res, true, c.printJSON(raw)
	}
	return res, false, nil
}

// say makes one call whose answer is a message and prints "name: message"
// (or, with --json, the response's JSON).
func (c *cli) say(ctx context.Context, name string, call func(ctx context.Context, api *client.Client) (string, error)) error {
	msg, printed, err := request(ctx, c, call)
	if printed || err != nil {
		return err
	}
	printf(c.stdout, "%s: %s\n", name, msg)
	return nil
}

// apiErr turns an error of a client call into the command's error with
// its exit code.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.APIError
	var tooLarge *client.ResponseTooLargeError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return &exitError{code: exitNotLoggedIn, err: fmt.Errorf("%s (log in again with pgmirror login)", shorten(ae.Message))}
	case errors.As(err, &ae):
		return &exitError{code: exitAPIError, err: fmt.Errorf("%s (HTTP %d)", shorten(ae.Message), ae.Status)}
	case errors.As(err, &tooLarge):
		return &exitError{code: exitAPIError, err: fmt.Errorf("the server's response is larger than %d MiB; nothing was read from it. "+
			"Check that --url (or SERVICE_URL) is the pgmirror service's address; to accept larger answers, set %s", tooLarge.Limit>>20, maxResponseEnv)}
	case errors.As(err, &syntaxErr) || errors.As(err, &typeErr):
		return &exitError{code: exitAPIError, err: fmt.Errorf("the service's answer is not the JSON pgmirror sends (%w); check that --url (or SERVICE_URL) is the pgmirror service's address", err)}
	case client.IsConnectionError(err):
		return &exitError{code: exitConnection, err: fmt.Errorf("cannot reach the service: %w", err)}
	}
	return &exitError{code: exitAPIError, err: err}
}

// shorten cuts an error message from the service to a readable length (an
// HTML page from a proxy, say).
func shorten(msg string) string {
	const max = 1000
	if len(msg) <= max {
		return msg
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes)", msg[:cut], len(msg)-cut)
}

// printJSON writes the API's JSON, indented. It is the same JSON value as
// the service sent, with the characters a terminal would act on written as
// \u escapes; an answer that is not JSON is an error, never printed raw.
func (c *cli) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return &exitError{code: exitAPIError, err: fmt.Errorf("the service's answer is not the JSON pgmirror sends (%v); check that --url (or SERVICE_URL) is the pgmirror service's address", err)}
	}
	buf.WriteByte('\n')
	_, err := c.stdout.Write(jsonTerminalSafe(buf.Bytes()))
	return err
}

// table returns a tabwriter on stdout; call Flush when done.
func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
}

// header writes a table's header row unless --no-headers.
func (c *cli) header(w io.Writer, columns ...string) {
	if !c.noHeaders {
		fmt.Fprintln(w, strings.Join(columns, "\t"))
	}
}

// readLine reads one line from stdin without its line ending.
func (c *cli) readLine() (string, error) {
	line, err := bufio.NewReader(c.stdin).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// readSecret prompts for a secret on the terminal without echo, or reads
// a line from stdin when it is not a terminal.
func (c *cli) readSecret(prompt string) (string, error) {
	if c.isTerminal() {
		printf(c.stderr, "%s", prompt)
		b, err := c.readPassword()
		fmt.Fprintln(c.stderr)
		if err != nil {
			return "", fmt.Errorf("read the password: %w", err)
		}
		return string(b), nil
	}
	s, err := c.readLine()
	if err != nil {
		return "", usageErrorf("read the password from stdin: %v (give --password, or pipe it in)", err)
	}
	return s, nil
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}
