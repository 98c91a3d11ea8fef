package main

// The command-line client: pgmirror login, peers, mirrors and logs talk to
// a running service through its REST API (httpapi/client). See docs/cli.md.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

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

// cliCommands are the client commands run dispatches to runCLI.
var cliCommands = map[string]bool{"login": true, "logout": true, "peers": true, "mirrors": true, "logs": true}

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

	// set by the common flags
	url  string
	json bool
}

// runCLI runs a client command: login, logout, peers, mirrors or logs.
func runCLI(ctx context.Context, command string, args []string, getenv func(string) string, stdout io.Writer) error {
	c := &cli{
		getenv: getenv, stdin: os.Stdin, stdout: stdout, stderr: os.Stderr,
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

func (c *cli) run(ctx context.Context, command string, args []string) error {
	switch command {
	case "login":
		return c.login(ctx, args)
	case "logout":
		return c.logout(args)
	case "logs":
		return c.logs(ctx, args)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) == 0 {
			fmt.Fprint(c.stderr, cliUsage[command])
			return usageErrorf("%s: a subcommand is required", command)
		}
		fmt.Fprint(c.stdout, cliUsage[command])
		return nil
	}
	sub, rest := args[0], args[1:]
	if run := c.subcommands(command)[sub]; run != nil {
		return run(ctx, rest)
	}
	return usageErrorf("%s: unknown subcommand %q; see pgmirror %s --help", command, sub, command)
}

// subcommands returns the subcommands of command by name.
func (c *cli) subcommands(command string) map[string]func(context.Context, []string) error {
	control := func(action string) func(context.Context, []string) error {
		return func(ctx context.Context, args []string) error { return c.mirrorsControl(ctx, action, args) }
	}
	switch command {
	case "peers":
		return map[string]func(context.Context, []string) error{
			"list": c.peersList, "get": c.peersGet, "create": c.peersCreate, "test": c.peersTest, "delete": c.peersDelete,
		}
	case "mirrors":
		return map[string]func(context.Context, []string) error{
			"list": c.mirrorsList, "get": c.mirrorsGet, "create": c.mirrorsCreate,
			"pause": control("pause"), "resume": control("resume"), "retry": control("retry"), "sync-schema": control("sync-schema"),
			"resync": c.mirrorsResync, "delete": c.mirrorsDelete, "cutover": c.mirrorsCutover,
			"verify": c.mirrorsVerify, "verifications": c.mirrorsVerifications, "repair": c.mirrorsRepair,
		}
	}
	return nil
}

var cliUsage = map[string]string{
	"peers": `usage: pgmirror peers <subcommand> [flags]
  list                       list the peers
  get NAME                   show a peer
  create --name N --host H --port P --user U --database D [--password PW] [--ssl-mode M] [--ssl-root-cert FILE]
  create -f peer.json        create a peer from a JSON file (the API's request body)
  test NAME                  test the connection to a peer (exit 1 when it fails)
  delete NAME                delete a peer no mirror uses
Common flags: --url URL, --json. See docs/cli.md.
`,
	"mirrors": `usage: pgmirror mirrors <subcommand> [flags]
  list                       list the mirrors with status and lag
  get NAME                   show a mirror's status and its tables
  create -f mirror.json      create and start a mirror (the API's request body)
  pause|resume|retry|sync-schema NAME
  resync NAME [schema.table] re-snapshot every table, or one
  delete NAME [--yes]        delete a mirror (asks first on a terminal)
  cutover NAME [--lock-source] [--drop-slot=false] [--timeout S] [--quiet S] [--reverse NAME] [--no-wait]
  verify NAME [--table schema.table ...] [--no-wait]
                             compare the destination with the source (exit 5 when rows differ)
  verifications NAME [ID]    list the verifications, or show one
  repair NAME ID [--no-wait] copy again what verification ID found different, then compare again
Common flags: --url URL, --json. See docs/cli.md.
`,
}

// newFlags returns a flag set with the common flags --url and --json.
func (c *cli) newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("pgmirror "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.StringVar(&c.url, "url", "", "service URL (default: $SERVICE_URL, else the URL of the last login)")
	fs.BoolVar(&c.json, "json", false, "print the API's JSON instead of a table")
	return fs
}

// parse parses flags and positional arguments in any order and checks the
// number of positional arguments (min to max).
func parse(fs *flag.FlagSet, args []string, min, max int, names string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &exitError{code: 0}
			}
			return nil, &exitError{code: exitUsage}
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
	if len(positional) < min || len(positional) > max {
		if names == "" {
			return nil, usageErrorf("%s takes no arguments", fs.Name())
		}
		return nil, usageErrorf("usage: %s %s", fs.Name(), names)
	}
	return positional, nil
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

// api returns a client for the service with the saved token for its URL.
func (c *cli) api() (*client.Client, error) {
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
		return nil, &exitError{code: exitNotLoggedIn, err: fmt.Errorf("not logged in to %s: run pgmirror login --url %s --user NAME", u, u)}
	}
	return &client.Client{BaseURL: u, Token: saved.Token, HTTPClient: &http.Client{Timeout: 2 * time.Minute}}, nil
}

// request makes one call with the logged-in client. With --json it prints
// the response's JSON as the service sent it and reports printed, so the
// command has nothing more to print; otherwise the command prints res.
func request[T any](ctx context.Context, c *cli, call func(ctx context.Context, api *client.Client) (T, error)) (res T, printed bool, err error) {
	api, err := c.api()
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
	fmt.Fprintf(c.stdout, "%s: %s\n", name, msg)
	return nil
}

// apiErr turns an error of a client call into the command's error with
// its exit code.
func apiErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return &exitError{code: exitNotLoggedIn, err: fmt.Errorf("%s (log in again with pgmirror login)", ae.Message)}
	case errors.As(err, &ae):
		return &exitError{code: exitAPIError, err: fmt.Errorf("%s (HTTP %d)", ae.Message, ae.Status)}
	case client.IsConnectionError(err):
		return &exitError{code: exitConnection, err: fmt.Errorf("cannot reach the service: %w", err)}
	}
	return &exitError{code: exitAPIError, err: err}
}

// printJSON writes the API's raw JSON, indented.
func (c *cli) printJSON(raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		buf.Reset()
		buf.Write(raw)
	}
	buf.WriteByte('\n')
	_, err := c.stdout.Write(buf.Bytes())
	return err
}

// table returns a tabwriter on stdout; call Flush when done.
func (c *cli) table() *tabwriter.Writer {
	return tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
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
		fmt.Fprint(c.stderr, prompt)
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

func formatTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func formatLag(s *float64) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.1fs", *s)
}

func formatBytes(n *int64) string {
	if n == nil {
		return "-"
	}
	v := float64(*n)
	for _, unit := range []string{"B", "kB", "MB", "GB", "TB"} {
		if v < 1024 || unit == "TB" {
			if unit == "B" {
				return fmt.Sprintf("%d B", *n)
			}
			return fmt.Sprintf("%.1f %s", v, unit)
		}
		v /= 1024
	}
	return "-"
}
