package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// login is `pgmirror login --url URL --user NAME [--password PW]`.
func (c *cli) login(ctx context.Context, args []string) error {
	fs := c.newFlags("login")
	user := fs.String("user", "", "username (required)")
	password := fs.String("password", "", "password (default: prompt without echo, or one line from stdin when it is not a terminal)")
	if _, err := parse(fs, args, 0, 0, ""); err != nil {
		return err
	}
	if *user == "" {
		return usageErrorf("login: --user is required: pgmirror login --url URL --user NAME")
	}
	creds, err := c.loadCredentials()
	if err != nil {
		return err
	}
	u, err := c.baseURL(creds)
	if err != nil {
		return usageErrorf("login: give --url URL (or set SERVICE_URL)")
	}
	pw := *password
	if pw == "" {
		if pw, err = c.readSecret(fmt.Sprintf("Password for %s at %s: ", *user, u)); err != nil {
			return err
		}
	}
	api := &client.Client{BaseURL: u, HTTPClient: &http.Client{Timeout: time.Minute}}
	var raw []byte
	resp, err := api.Login(client.CaptureBody(ctx, &raw), client.LoginRequest{Username: *user, Password: pw})
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return &exitError{code: exitNotLoggedIn, err: fmt.Errorf("login failed: %s", ae.Message)}
		}
		return apiErr(err)
	}
	creds.Current = u
	creds.Logins[u] = savedLogin{Username: resp.Username, Token: resp.Token}
	if err := c.saveCredentials(creds); err != nil {
		return err
	}
	if c.json {
		// The token is saved; it is not printed.
		return c.printJSON(mustJSON(map[string]any{"url": u, "username": resp.Username, "role": resp.Role, "expires_at": resp.ExpiresAt}))
	}
	expiry := ""
	if resp.ExpiresAt != nil {
		expiry = ", token valid until " + formatTime(resp.ExpiresAt)
	}
	fmt.Fprintf(c.stdout, "Logged in to %s as %s (%s)%s\n", u, resp.Username, resp.Role, expiry)
	return nil
}

// logout is `pgmirror logout [--url URL]`: it forgets the saved token.
func (c *cli) logout(args []string) error {
	fs := c.newFlags("logout")
	if _, err := parse(fs, args, 0, 0, ""); err != nil {
		return err
	}
	creds, err := c.loadCredentials()
	if err != nil {
		return err
	}
	u, err := c.baseURL(creds)
	if err != nil {
		return err
	}
	delete(creds.Logins, u)
	if creds.Current == u {
		creds.Current = ""
	}
	if err := c.saveCredentials(creds); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Logged out of %s\n", u)
	return nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// peersList is `pgmirror peers list`.
func (c *cli) peersList(ctx context.Context, args []string) error {
	if _, err := parse(c.newFlags("peers list"), args, 0, 0, ""); err != nil {
		return err
	}
	peers, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.Peer, error) {
		return api.ListPeers(ctx)
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	fmt.Fprintln(w, "NAME\tHOST\tPORT\tDATABASE\tUSER\tSSL MODE")
	for _, p := range peers {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.Host, p.Port, p.Database, p.User, p.SSLMode)
	}
	return w.Flush()
}

// peersGet is `pgmirror peers get NAME`.
func (c *cli) peersGet(ctx context.Context, args []string) error {
	pos, err := parse(c.newFlags("peers get"), args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	p, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Peer, error) {
		return api.GetPeer(ctx, pos[0])
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	fmt.Fprintf(w, "Name:\t%s\nHost:\t%s\nPort:\t%d\nDatabase:\t%s\nUser:\t%s\nSSL mode:\t%s\nCA certificate:\t%t\nCreated:\t%s\nUpdated:\t%s\n",
		p.Name, p.Host, p.Port, p.Database, p.User, p.SSLMode, p.HasSSLRootCert, formatTime(&p.CreatedAt), formatTime(&p.UpdatedAt))
	return w.Flush()
}

// peersCreate is `pgmirror peers create` from flags or -f peer.json.
func (c *cli) peersCreate(ctx context.Context, args []string) error {
	fs := c.newFlags("peers create")
	file := fs.String("f", "", "JSON file with the peer (the body of POST /v1/peers); - reads stdin")
	var req client.PeerCreate
	fs.StringVar(&req.Name, "name", "", "peer name")
	fs.StringVar(&req.Host, "host", "", "host name or IP address")
	fs.IntVar(&req.Port, "port", 5432, "PostgreSQL port")
	fs.StringVar(&req.User, "user", "", "database user")
	fs.StringVar(&req.Password, "password", "", "password (default: prompt without echo, or one line from stdin)")
	fs.StringVar(&req.Database, "database", "", "database name")
	fs.StringVar(&req.SSLMode, "ssl-mode", "", "disable, prefer (the service's default), require, verify-ca or verify-full")
	rootCert := fs.String("ssl-root-cert", "", "file with the PEM CA certificate(s) for verify-ca and verify-full")
	if _, err := parse(fs, args, 0, 0, ""); err != nil {
		return err
	}
	var body any = &req
	if *file != "" {
		raw, err := readJSONFile(*file, c, &req)
		if err != nil {
			return err
		}
		body = raw
	} else {
		var missing []string
		for name, v := range map[string]string{"--name": req.Name, "--host": req.Host, "--user": req.User, "--database": req.Database} {
			if v == "" {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return usageErrorf("peers create: %s required (or give -f peer.json)", strings.Join(missing, ", "))
		}
		if *rootCert != "" {
			pem, err := os.ReadFile(*rootCert)
			if err != nil {
				return usageErrorf("peers create: read --ssl-root-cert: %v", err)
			}
			req.SSLRootCert = string(pem)
		}
		if req.Password == "" {
			pw, err := c.readSecret(fmt.Sprintf("Password of %s on %s: ", req.User, req.Host))
			if err != nil {
				return err
			}
			req.Password = pw
		}
	}
	p, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (p client.Peer, err error) {
		_, err = api.Do(ctx, client.OpCreatePeer, nil, nil, body, &p)
		return p, err
	})
	if printed || err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Created peer %s (%s:%d/%s)\n", p.Name, p.Host, p.Port, p.Database)
	return nil
}

// peersTest is `pgmirror peers test NAME`; it exits 1 when the connection
// fails.
func (c *cli) peersTest(ctx context.Context, args []string) error {
	pos, err := parse(c.newFlags("peers test"), args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	res, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.PeerTest, error) {
		return api.TestPeer(ctx, pos[0])
	})
	if err != nil {
		return err
	}
	if !printed && res.Success {
		fmt.Fprintf(c.stdout, "Connection to peer %s succeeded: %s\n", pos[0], res.Version)
	}
	if !res.Success {
		return &exitError{code: exitAPIError, err: fmt.Errorf("connection to peer %s failed: %s", pos[0], res.Error)}
	}
	return nil
}

// peersDelete is `pgmirror peers delete NAME`.
func (c *cli) peersDelete(ctx context.Context, args []string) error {
	pos, err := parse(c.newFlags("peers delete"), args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	return c.deleted(ctx, "peer", pos[0], (*client.Client).DeletePeer)
}

// readJSONFile reads a request body from a JSON file (- for stdin) and
// checks that it decodes into v, refusing unknown fields so that a misspelt
// option is not silently ignored. It returns the file's JSON, which is sent
// as it is: a field given explicitly (even as 0 or "") reaches the service's
// validation instead of being dropped.
func readJSONFile(path string, c *cli, v any) (json.RawMessage, error) {
	var raw []byte
	var err error
	if path == "-" {
		var buf bytes.Buffer
		_, err = buf.ReadFrom(c.stdin)
		raw = buf.Bytes()
	} else {
		raw, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, usageErrorf("read %s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, usageErrorf("%s is not a valid request: %v", path, err)
	}
	if dec.More() {
		return nil, usageErrorf("%s is not a valid request: it holds more than one JSON value", path)
	}
	return bytes.TrimSpace(raw), nil
}

// mirrorsList is `pgmirror mirrors list`.
func (c *cli) mirrorsList(ctx context.Context, args []string) error {
	if _, err := parse(c.newFlags("mirrors list"), args, 0, 0, ""); err != nil {
		return err
	}
	mirrors, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.MirrorSummary, error) {
		return api.ListMirrors(ctx)
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	fmt.Fprintln(w, "NAME\tSTATUS\tSOURCE\tDESTINATION\tLAG\tSLOT LAG\tLAST LSN\tERRORS\tUPDATED")
	for _, m := range mirrors {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, m.Status+lostNote(m.LostChanges), m.SourcePeer, m.DestinationPeer,
			formatLag(m.LagSeconds), formatBytes(m.SlotLagBytes), orDash(m.LastLSN), m.ErrorCount, formatTime(&m.UpdatedAt))
	}
	return w.Flush()
}

// mirrorsGet is `pgmirror mirrors get NAME`.
func (c *cli) mirrorsGet(ctx context.Context, args []string) error {
	pos, err := parse(c.newFlags("mirrors get"), args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	m, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.MirrorStatus, error) {
		return api.GetMirror(ctx, pos[0])
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	fmt.Fprintf(w, "Name:\t%s\n", m.Name)
	fmt.Fprintf(w, "Status:\t%s (requested: %s)\n", m.Status, m.DesiredState)
	fmt.Fprintf(w, "Peers:\t%s -> %s\n", m.SourcePeer, m.DestinationPeer)
	fmt.Fprintf(w, "Last LSN:\t%s (batch %d)\n", orDash(m.LastLSN), m.LastSyncBatchID)
	fmt.Fprintf(w, "Lag:\t%s\n", formatLag(m.LagSeconds))
	if m.SlotCheckedAt == nil {
		fmt.Fprintf(w, "Slot:\t%s (not read yet)\n", m.ReplicationSlotName)
	} else {
		fmt.Fprintf(w, "Slot:\t%s, %s retained, wal_status %s (read %s)\n", m.ReplicationSlotName, formatBytes(m.SlotLagBytes),
			orDash(m.SlotWALStatus), formatTime(m.SlotCheckedAt))
	}
	if m.ErrorCount > 0 || m.ErrorMessage != nil {
		fmt.Fprintf(w, "Errors:\t%d: %s (next retry %s)\n", m.ErrorCount, orDash(m.ErrorMessage), formatTime(m.NextRetryAt))
	}
	if l := m.LostChanges; l != nil {
		fmt.Fprintf(w, "Lost changes:\t%s (slot %s, since %s, found %s): %s\n", strings.Join(l.Tables, ", "), l.Reason, orDash(l.SinceLSN), formatTime(&l.DetectedAt), l.Action)
	}
	if m.Cutover != nil {
		fmt.Fprintf(w, "Cut-over:\t%s (requested %s)\n", m.Cutover.State, formatTime(&m.Cutover.RequestedAt))
	}
	if last := m.Verification.Last; last != nil {
		fmt.Fprintf(w, "Verified:\t%d rows differ at LSN %s (verification %d, %s)\n", last.RowsDiffering, last.LSN, last.ID, formatTime(last.FinishedAt))
	}
	fmt.Fprintf(w, "Created:\t%s\n", formatTime(&m.CreatedAt))
	fmt.Fprintf(w, "Updated:\t%s\n", formatTime(&m.UpdatedAt))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	w = c.table()
	fmt.Fprintln(w, "TABLE\tSTATUS\tPROGRESS\tROWS SYNCED\tINSERTED\tUPDATED\tDELETED\tLAST SYNCED")
	for _, t := range m.Tables {
		progress := "-"
		if t.Progress != nil {
			progress = fmt.Sprintf("%.0f%%", *t.Progress*100)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t.TableName, t.Status, progress, t.RowsSynced, t.RowsInserted,
			t.RowsUpdated, t.RowsDeleted, formatTime(t.LastSyncedAt))
	}
	return w.Flush()
}

// mirrorsCreate is `pgmirror mirrors create -f mirror.json`.
func (c *cli) mirrorsCreate(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors create")
	file := fs.String("f", "", "JSON file with the mirror (the body of POST /v1/mirrors); - reads stdin")
	if _, err := parse(fs, args, 0, 0, ""); err != nil {
		return err
	}
	if *file == "" {
		return usageErrorf("mirrors create: -f mirror.json is required (see docs/cli.md for an example)")
	}
	body, err := readJSONFile(*file, c, &client.MirrorCreate{})
	if err != nil {
		return err
	}
	m, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (m client.MirrorConfig, err error) {
		_, err = api.Do(ctx, client.OpCreateMirror, nil, nil, body, &m)
		return m, err
	})
	if printed || err != nil {
		return err
	}
	tables := len(m.ExpandedTableMappings)
	for _, t := range m.TableMappings {
		if t.SourceTable != "*" {
			tables++ // a mapping of a whole schema counts by the tables it expanded to
		}
	}
	fmt.Fprintf(c.stdout, "Created mirror %s (%s -> %s, %d tables): %s\n", m.Name, m.SourcePeer, m.DestinationPeer, tables, m.Status)
	return nil
}

// mirrorsControl is `pgmirror mirrors pause|resume|retry|sync-schema NAME`.
func (c *cli) mirrorsControl(ctx context.Context, action string, args []string) error {
	pos, err := parse(c.newFlags("mirrors "+action), args, 1, 1, "NAME")
	if err != nil {
		return err
	}
	return c.say(ctx, pos[0], func(ctx context.Context, api *client.Client) (string, error) {
		switch action {
		case "pause", "resume":
			call := api.PauseMirror
			if action == "resume" {
				call = api.ResumeMirror
			}
			res, err := call(ctx, pos[0])
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s (status %s)", res.Message, res.Status), nil
		default:
			call := api.RetryMirror
			if action == "sync-schema" {
				call = api.SyncSchema
			}
			res, err := call(ctx, pos[0])
			if err != nil {
				return "", err
			}
			return res.Message, nil
		}
	})
}

// mirrorsResync is `pgmirror mirrors resync NAME [schema.table]`.
func (c *cli) mirrorsResync(ctx context.Context, args []string) error {
	pos, err := parse(c.newFlags("mirrors resync"), args, 1, 2, "NAME [schema.table]")
	if err != nil {
		return err
	}
	return c.say(ctx, pos[0], func(ctx context.Context, api *client.Client) (string, error) {
		if len(pos) == 2 {
			res, err := api.ResyncTable(ctx, pos[0], pos[1])
			if err != nil {
				return "", err
			}
			return res.Message, nil
		}
		res, err := api.ResyncMirror(ctx, pos[0])
		if err != nil {
			return "", err
		}
		return res.Message, nil
	})
}

// mirrorsDelete is `pgmirror mirrors delete NAME [--yes]`.
func (c *cli) mirrorsDelete(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors delete")
	yes := fs.Bool("yes", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	pos, err := parse(fs, args, 1, 1, "NAME [--yes]")
	if err != nil {
		return err
	}
	if !*yes {
		if !c.isTerminal() {
			return usageErrorf("mirrors delete: deleting a mirror drops its replication slot and cannot be undone; add --yes to confirm")
		}
		fmt.Fprintf(c.stderr, "Delete mirror %s? Its replication slot and publication are dropped; the destination's data stays. [y/N] ", pos[0])
		answer, _ := c.readLine()
		if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
			return usageErrorf("mirrors delete: not confirmed; nothing was deleted")
		}
	}
	return c.deleted(ctx, "mirror", pos[0], (*client.Client).DeleteMirror)
}

// deleted deletes a peer or mirror with del and says so.
func (c *cli) deleted(ctx context.Context, kind, name string, del func(*client.Client, context.Context, string) (*client.Deleted, error)) error {
	_, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Deleted, error) {
		return del(api, ctx, name)
	})
	if printed || err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "Deleted %s %s\n", kind, name)
	return nil
}

// mirrorsCutover is `pgmirror mirrors cutover NAME [flags]`: it requests
// the cut-over and, unless --no-wait, follows it until it ends.
func (c *cli) mirrorsCutover(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors cutover")
	lockSource := fs.Bool("lock-source", false, "make the source tables read-only first (default: you have stopped the writes)")
	dropSlot := fs.Bool("drop-slot", true, "drop the replication slot and publication once the cut-over completed")
	timeout := fs.Int("timeout", 0, "seconds that applying the remaining changes may take (service default 300)")
	quiet := fs.Int("quiet", 0, "without --lock-source: seconds the source must show no change first (service default 5)")
	reverse := fs.String("reverse", "", "create a reverse mirror of this name (destination back to source) for a rollback")
	noWait := fs.Bool("no-wait", false, "return once the cut-over started instead of following it to the end")
	pos, err := parse(fs, args, 1, 1, "NAME [flags]")
	if err != nil {
		return err
	}
	req := client.CutoverRequest{ReverseMirrorName: *reverse}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "lock-source":
			req.LockSource = lockSource
		case "drop-slot":
			req.DropSlot = dropSlot
		case "timeout":
			req.TimeoutSeconds = timeout
		case "quiet":
			req.QuietSeconds = quiet
		}
	})
	if *noWait {
		zero := 0
		req.WaitSeconds = &zero
	}
	api, err := c.api()
	if err != nil {
		return err
	}
	var raw []byte
	res, done, err := api.Cutover(client.CaptureBody(ctx, &raw), pos[0], req)
	if err != nil {
		return apiErr(err)
	}
	record := res.Cutover
	for !done && !*noWait && record != nil && (record.State == "requested" || record.State == "running") {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.pollInterval):
		}
		m, err := api.GetMirror(client.CaptureBody(ctx, &raw), pos[0])
		if err != nil {
			return apiErr(err)
		}
		record = m.Cutover
		if c.json && record != nil {
			raw = mustJSON(map[string]any{"message": "cut-over " + record.State, "status": m.Status, "cutover": record})
		}
	}
	if c.json {
		if err := c.printJSON(raw); err != nil {
			return err
		}
	} else {
		c.printCutover(pos[0], res.Message, record)
	}
	if record != nil && record.State == "failed" {
		return &exitError{code: exitAPIError, err: fmt.Errorf("cut-over of %s failed: %s", pos[0], record.Error)}
	}
	return nil
}

func (c *cli) printCutover(name, message string, r *client.CutoverRecord) {
	if r == nil {
		fmt.Fprintf(c.stdout, "%s: %s\n", name, message)
		return
	}
	fmt.Fprintf(c.stdout, "Cut-over of %s: %s\n", name, r.State)
	if r.TargetLSN != "" {
		fmt.Fprintf(c.stdout, "Target LSN: %s\n", r.TargetLSN)
	}
	if r.ReverseMirror != "" {
		fmt.Fprintf(c.stdout, "Reverse mirror: %s\n", r.ReverseMirror)
	}
	w := c.table()
	fmt.Fprintln(w, "STEP\tSTATE\tDURATION\tERROR")
	for _, s := range r.Steps {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", s.Name, s.State, (time.Duration(s.DurationMS) * time.Millisecond).String(), s.Error)
	}
	_ = w.Flush()
	for _, warning := range r.Warnings {
		fmt.Fprintf(c.stdout, "Warning: %s\n", warning)
	}
	if r.State == "requested" || r.State == "running" {
		fmt.Fprintf(c.stdout, "Still running: follow it with pgmirror mirrors get %s\n", name)
	}
}

// logs is `pgmirror logs NAME [--level L] [--search S] [--limit N] [--follow]`.
func (c *cli) logs(ctx context.Context, args []string) error {
	fs := c.newFlags("logs")
	var q client.LogQuery
	fs.StringVar(&q.Level, "level", "", "only entries of this level: INFO, WARN, ERROR or DEBUG")
	fs.StringVar(&q.Search, "search", "", "only entries whose message or details contain this text")
	fs.IntVar(&q.Limit, "limit", 50, "how many of the newest entries to show (at most 500)")
	fs.IntVar(&q.Offset, "offset", 0, "skip this many of the newest entries first")
	follow := fs.Bool("follow", false, "keep printing new entries as they arrive, until interrupted")
	fs.BoolVar(follow, "f", false, "short for --follow")
	pos, err := parse(fs, args, 1, 1, "NAME [--level L] [--search S] [--limit N] [--follow]")
	if err != nil {
		return err
	}
	q.Level = strings.ToUpper(q.Level)
	api, err := c.api()
	if err != nil {
		return err
	}
	var raw []byte
	page, err := api.MirrorLogs(client.CaptureBody(ctx, &raw), pos[0], q)
	if err != nil {
		return apiErr(err)
	}
	if c.json && !*follow {
		return c.printJSON(raw)
	}
	var lastID int64
	show := func(entries []client.LogEntry) {
		// The API sends newest first; print oldest first, like a log file.
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			if e.ID <= lastID {
				continue
			}
			lastID = e.ID
			if c.json {
				fmt.Fprintln(c.stdout, string(mustJSON(e)))
				continue
			}
			details := ""
			if d := bytes.TrimSpace(e.Details); len(d) > 0 && string(d) != "null" && string(d) != "{}" {
				details = " " + string(d)
			}
			fmt.Fprintf(c.stdout, "%s %-5s %s%s\n", e.CreatedAt.Local().Format("2006-01-02 15:04:05.000"), e.Level, e.Message, details)
		}
	}
	show(page.Logs)
	if !*follow {
		if !c.json && page.Total > len(page.Logs)+page.Offset {
			fmt.Fprintf(c.stderr, "(%d of %d entries; --limit and --offset page further)\n", len(page.Logs), page.Total)
		}
		return nil
	}
	q.Offset, q.Limit = 0, 500
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(c.pollInterval):
		}
		page, err := api.MirrorLogs(ctx, pos[0], q)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return apiErr(err)
		}
		show(page.Logs)
	}
}

// lostNote marks a listed mirror whose tables may miss changes.
func lostNote(l *client.LostChanges) string {
	if l == nil {
		return ""
	}
	return fmt.Sprintf(" (changes lost: %d tables)", len(l.Tables))
}
