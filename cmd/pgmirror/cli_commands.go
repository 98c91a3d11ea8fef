package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// loginCommand is `pgmirror login --url URL --user NAME [--password PW]`.
func (c *cli) loginCommand() *cobra.Command {
	var user, password string
	cmd := c.newCommand(spec{
		use:   "login --url URL --user NAME",
		short: "Log in to a service and save the token for its URL",
		long: `Log in to the pgmirror service at --url (or $SERVICE_URL) and save the token in
pgmirror/credentials.json under the user's configuration directory (mode 0600), one token per
service URL. The password is asked for without echo on a terminal, read as one line from stdin
otherwise, or given with --password (which leaves it in the shell history). The token is never
printed; --json prints the URL, user name, role and token expiry.`,
		example: `  pgmirror login --url http://localhost:8112 --user admin
  echo "$PASSWORD" | pgmirror login --url https://pgmirror.internal:8112 --user alice`,
	}, func(ctx context.Context, _ []string) error { return c.login(ctx, user, password) })
	cmd.Flags().StringVar(&user, "user", "", "username (required)")
	cmd.Flags().StringVar(&password, "password", "", "password (default: prompt without echo, or one line from stdin when it is not a terminal)")
	return cmd
}

func (c *cli) login(ctx context.Context, user, password string) error {
	if user == "" {
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
	pw := password
	if pw == "" {
		if pw, err = c.readSecret(fmt.Sprintf("Password for %s at %s: ", user, u)); err != nil {
			return err
		}
	}
	api, err := c.newClient(u, "", time.Minute)
	if err != nil {
		return err
	}
	var raw []byte
	resp, err := api.Login(client.CaptureBody(ctx, &raw), client.LoginRequest{Username: user, Password: pw})
	if err != nil {
		var ae *client.APIError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			return &exitError{code: exitNotLoggedIn, err: fmt.Errorf("login failed: %s", shorten(ae.Message))}
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
	printf(c.stdout, "Logged in to %s as %s (%s)%s\n", u, resp.Username, resp.Role, expiry)
	warnDefaultPassword(c.stderr, pw)
	return nil
}

// logoutCommand is `pgmirror logout [--url URL]`: it forgets the saved token.
func (c *cli) logoutCommand() *cobra.Command {
	return c.newCommand(spec{
		use:   "logout",
		short: "Forget the saved token of a service",
		long: `Forget the token saved for the service at --url (or $SERVICE_URL, or the URL of the last
login). The token itself stays valid until it expires or an administrator revokes it.`,
		example: `  pgmirror logout
  pgmirror logout --url https://pgmirror.internal:8112`,
	}, func(context.Context, []string) error {
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
		printf(c.stdout, "Logged out of %s\n", u)
		return nil
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// peersCommand is `pgmirror peers ...`.
func (c *cli) peersCommand() *cobra.Command {
	return c.groupCommand("peers", "List, show, create, test and delete peers (the databases mirrors connect to)",
		`A peer is a PostgreSQL database that mirrors read from or write to: its address, database,
user and password (which the service stores encrypted and never shows).`,
		`  pgmirror peers list
  pgmirror peers get shop
  pgmirror peers test shop`,
		c.peersListCommand(), c.peersGetCommand(), c.peersCreateCommand(), c.peersTestCommand(), c.peersDeleteCommand())
}

func (c *cli) peersListCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "list", short: "List the peers",
		long:    "List the peers with their address, database, user and SSL mode.",
		example: "  pgmirror peers list\n  pgmirror peers list --json | jq -r '.[].name'",
	}, func(ctx context.Context, _ []string) error {
		peers, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.Peer, error) {
			return api.ListPeers(ctx)
		})
		if printed || err != nil {
			return err
		}
		w := c.table()
		c.header(w, "NAME", "HOST", "PORT", "DATABASE", "USER", "SSL MODE")
		for _, p := range peers {
			printf(w, "%s\t%s\t%d\t%s\t%s\t%s\n", p.Name, p.Host, p.Port, p.Database, p.User, p.SSLMode)
		}
		return w.Flush()
	})
}

func (c *cli) peersGetCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "get NAME", short: "Show a peer",
		long: `Show one peer: address, database, user, SSL mode, whether a CA certificate is set, and
when it was created and last changed. The password is never shown.

Arguments:
  NAME   the peer's name`,
		example: "  pgmirror peers get shop\n  pgmirror peers get shop --json",
		minArgs: 1, maxArgs: 1, complete: c.completePeers,
	}, func(ctx context.Context, args []string) error {
		p, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Peer, error) {
			return api.GetPeer(ctx, args[0])
		})
		if printed || err != nil {
			return err
		}
		w := c.table()
		printf(w, "Name:\t%s\nHost:\t%s\nPort:\t%d\nDatabase:\t%s\nUser:\t%s\nSSL mode:\t%s\nCA certificate:\t%t\nCreated:\t%s\nUpdated:\t%s\n",
			p.Name, p.Host, p.Port, p.Database, p.User, p.SSLMode, p.HasSSLRootCert, formatTime(&p.CreatedAt), formatTime(&p.UpdatedAt))
		return w.Flush()
	})
}

func (c *cli) peersCreateCommand() *cobra.Command {
	var file, rootCert string
	var req client.PeerCreate
	cmd := c.newCommand(spec{
		use: "create (--name N --host H --user U --database D | -f peer.json)", short: "Create a peer",
		long: `Create a peer from flags, or from a JSON file with the body of POST /v1/peers (-f - reads
stdin). Without --password the password is asked for without echo on a terminal, or read as one
line from stdin. A field the API does not know in the file is refused before anything is sent.`,
		example: `  pgmirror peers create --name shop --host db1.internal --port 5432 --user replicator \
    --database shop --ssl-mode verify-full --ssl-root-cert ca.pem
  pgmirror peers create -f peer.json`,
	}, func(ctx context.Context, _ []string) error { return c.peersCreate(ctx, file, rootCert, req) })
	f := cmd.Flags()
	f.StringVarP(&file, "file", "f", "", "JSON file with the peer (the body of POST /v1/peers); - reads stdin")
	f.StringVar(&req.Name, "name", "", "peer name")
	f.StringVar(&req.Host, "host", "", "host name or IP address")
	f.IntVar(&req.Port, "port", 5432, "PostgreSQL port")
	f.StringVar(&req.User, "user", "", "database user")
	f.StringVar(&req.Password, "password", "", "password (default: prompt without echo, or one line from stdin)")
	f.StringVar(&req.Database, "database", "", "database name")
	f.StringVar(&req.SSLMode, "ssl-mode", "", "disable, prefer (the service's default), require, verify-ca or verify-full")
	f.StringVar(&rootCert, "ssl-root-cert", "", "file with the PEM CA certificate(s) for verify-ca and verify-full")
	_ = cmd.RegisterFlagCompletionFunc("ssl-mode", fixedCompletions("disable", "prefer", "require", "verify-ca", "verify-full"))
	_ = cmd.MarkFlagFilename("file", "json")
	_ = cmd.MarkFlagFilename("ssl-root-cert")
	return cmd
}

func (c *cli) peersCreate(ctx context.Context, file, rootCert string, req client.PeerCreate) error {
	var body any = &req
	if file != "" {
		raw, err := readJSONFile(file, c, &req)
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
		if rootCert != "" {
			pem, err := os.ReadFile(rootCert)
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
	printf(c.stdout, "Created peer %s (%s:%d/%s)\n", p.Name, p.Host, p.Port, p.Database)
	return nil
}

// peersTestCommand is `pgmirror peers test NAME`; it exits 1 when the
// connection fails.
func (c *cli) peersTestCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "test NAME", short: "Test the service's connection to a peer (exit 1 when it fails)",
		long: `Ask the service to connect to the peer and print the server's version. When the connection
fails the command exits with code 1 and prints the reason.

Arguments:
  NAME   the peer's name`,
		example: "  pgmirror peers test shop",
		minArgs: 1, maxArgs: 1, complete: c.completePeers,
	}, func(ctx context.Context, args []string) error {
		res, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.PeerTest, error) {
			return api.TestPeer(ctx, args[0])
		})
		if err != nil {
			return err
		}
		if !printed && res.Success {
			printf(c.stdout, "Connection to peer %s succeeded: %s\n", args[0], res.Version)
		}
		if !res.Success {
			return &exitError{code: exitAPIError, err: fmt.Errorf("connection to peer %s failed: %s", args[0], res.Error)}
		}
		return nil
	})
}

func (c *cli) peersDeleteCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "delete NAME", short: "Delete a peer that no mirror uses",
		long: `Delete a peer. The service refuses (exit 1) while a mirror uses it.

Arguments:
  NAME   the peer's name`,
		example: "  pgmirror peers delete shop",
		minArgs: 1, maxArgs: 1, complete: c.completePeers,
	}, func(ctx context.Context, args []string) error {
		return c.deleted(ctx, "peer", args[0], (*client.Client).DeletePeer)
	})
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

// mirrorsCommand is `pgmirror mirrors ...`.
func (c *cli) mirrorsCommand() *cobra.Command {
	control := func(action, short, long string) *cobra.Command {
		return c.newCommand(spec{
			use: action + " NAME", short: short, long: long + "\n\nArguments:\n  NAME   the mirror's name",
			example: "  pgmirror mirrors " + action + " orders",
			minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
		}, func(ctx context.Context, args []string) error { return c.mirrorsControl(ctx, action, args[0]) })
	}
	return c.groupCommand("mirrors", "List, create, control, verify and cut over mirrors",
		`A mirror copies tables from a source peer to a destination peer: a snapshot, then every
change through logical replication, until you cut over to the destination.`,
		`  pgmirror mirrors list
  pgmirror mirrors get orders
  pgmirror mirrors create -f mirror.json
  pgmirror mirrors verify orders && pgmirror mirrors cutover orders --lock-source`,
		c.mirrorsListCommand(), c.mirrorsGetCommand(), c.mirrorsCreateCommand(),
		control("pause", "Pause a mirror", "Pause a mirror: it stops reading changes at its next batch; the replication slot keeps them."),
		control("resume", "Resume a paused mirror", "Resume a paused mirror from where it stopped."),
		control("retry", "Retry a mirror in error now", "Retry a mirror in error now instead of at its next scheduled retry."),
		control("sync-schema", "Apply the source's schema changes to the destination",
			"Apply the source's pending schema changes (added columns and the like) to the destination."),
		c.mirrorsResyncCommand(), c.mirrorsDeleteCommand(), c.mirrorsCutoverCommand(),
		c.mirrorsVerifyCommand(), c.mirrorsVerificationsCommand(), c.mirrorsRepairCommand())
}

func (c *cli) mirrorsListCommand() *cobra.Command {
	var q client.MirrorQuery
	cmd := c.newCommand(spec{
		use: "list", short: "List the mirrors with status and lag",
		long: "List the mirrors with their status, peers, lag, the WAL their slot retains, last LSN, errors and last update;\n" +
			"filtered by status or text, sorted and paged by the service.",
		example: "  pgmirror mirrors list\n  pgmirror mirrors list --status error,paused --sort -lag --limit 20\n" +
			"  pgmirror mirrors list --json | jq -r '.[] | select(.status == \"error\") | .name'",
	}, func(ctx context.Context, _ []string) error {
		mirrors, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.MirrorSummary, error) {
			return api.FindMirrors(ctx, q)
		})
		if printed || err != nil {
			return err
		}
		w := c.table()
		c.header(w, "NAME", "STATUS", "SOURCE", "DESTINATION", "LAG", "SLOT LAG", "LAST LSN", "ERRORS", "UPDATED")
		for _, m := range mirrors {
			printf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.Name, m.Status+lostNote(m.LostChanges), m.SourcePeer, m.DestinationPeer,
				formatLag(m.LagSeconds), formatBytes(m.SlotLagBytes), orDash(m.LastLSN), m.ErrorCount, formatTime(&m.UpdatedAt))
		}
		return w.Flush()
	})
	cmd.Flags().StringSliceVar(&q.Status, "status", nil, "only mirrors in these statuses (comma-separated or repeated)")
	cmd.Flags().StringVarP(&q.Search, "search", "q", "", "only mirrors whose name or peer contains this text (any case)")
	cmd.Flags().StringVar(&q.Sort, "sort", "", "sort by name, status, lag or created; a leading - sorts descending (default name)")
	cmd.Flags().IntVar(&q.Limit, "limit", 0, "at most this many mirrors (default all)")
	cmd.Flags().IntVar(&q.Offset, "offset", 0, "skip this many mirrors first")
	return cmd
}

func (c *cli) mirrorsGetCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "get NAME", short: "Show a mirror's status and its tables",
		long: `Show a mirror: status, peers, last LSN, lag, replication slot, errors, cut-over, latest
verification, and one line per table with its progress and counts.

Arguments:
  NAME   the mirror's name`,
		example: "  pgmirror mirrors get orders\n  pgmirror mirrors get orders --json | jq -r .status",
		minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error { return c.mirrorsGet(ctx, args[0]) })
}

func (c *cli) mirrorsGet(ctx context.Context, name string) error {
	m, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.MirrorStatus, error) {
		return api.GetMirror(ctx, name)
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	printf(w, "Name:\t%s\n", m.Name)
	printf(w, "Status:\t%s (requested: %s)\n", m.Status, m.DesiredState)
	printf(w, "Peers:\t%s -> %s\n", m.SourcePeer, m.DestinationPeer)
	printf(w, "Last LSN:\t%s (batch %d)\n", orDash(m.LastLSN), m.LastSyncBatchID)
	printf(w, "Lag:\t%s\n", formatLag(m.LagSeconds))
	if m.SlotCheckedAt == nil {
		printf(w, "Slot:\t%s (not read yet)\n", m.ReplicationSlotName)
	} else {
		printf(w, "Slot:\t%s, %s retained, wal_status %s (read %s)\n", m.ReplicationSlotName, formatBytes(m.SlotLagBytes),
			orDash(m.SlotWALStatus), formatTime(m.SlotCheckedAt))
	}
	if m.ErrorCount > 0 || m.ErrorMessage != nil {
		printf(w, "Errors:\t%d: %s (next retry %s)\n", m.ErrorCount, orDash(m.ErrorMessage), formatTime(m.NextRetryAt))
	}
	if l := m.LostChanges; l != nil {
		fmt.Fprintf(w, "Lost changes:\t%s (slot %s, since %s, found %s): %s\n", strings.Join(l.Tables, ", "), l.Reason, orDash(l.SinceLSN), formatTime(&l.DetectedAt), l.Action)
	}
	if m.Cutover != nil {
		printf(w, "Cut-over:\t%s (requested %s)\n", m.Cutover.State, formatTime(&m.Cutover.RequestedAt))
	}
	if last := m.Verification.Last; last != nil {
		printf(w, "Verified:\t%s at LSN %s (verification %d, %s)\n", rowsDiffer(last.RowsDiffering), last.LSN, last.ID, formatTime(last.FinishedAt))
	}
	printf(w, "Created:\t%s\n", formatTime(&m.CreatedAt))
	printf(w, "Updated:\t%s\n", formatTime(&m.UpdatedAt))
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout)
	w = c.table()
	c.header(w, "TABLE", "STATUS", "PROGRESS", "ROWS SYNCED", "INSERTED", "UPDATED", "DELETED", "LAST SYNCED")
	for _, t := range m.Tables {
		progress := "-"
		if t.Progress != nil {
			progress = fmt.Sprintf("%.0f%%", *t.Progress*100)
		}
		printf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t.TableName, t.Status, progress, t.RowsSynced, t.RowsInserted,
			t.RowsUpdated, t.RowsDeleted, formatTime(t.LastSyncedAt))
	}
	return w.Flush()
}

func (c *cli) mirrorsCreateCommand() *cobra.Command {
	var file string
	cmd := c.newCommand(spec{
		use: "create -f mirror.json", short: "Create and start a mirror from a JSON file",
		long: `Create a mirror from a JSON file with the body of POST /v1/mirrors (-f - reads stdin) and
start it. A field the API does not know (a misspelt option) is refused before anything is sent;
the file is sent as it is, so an explicit value meets the service's validation.`,
		example: "  pgmirror mirrors create -f mirror.json\n  cat mirror.json | pgmirror mirrors create -f -",
	}, func(ctx context.Context, _ []string) error { return c.mirrorsCreate(ctx, file) })
	cmd.Flags().StringVarP(&file, "file", "f", "", "JSON file with the mirror (the body of POST /v1/mirrors); - reads stdin")
	_ = cmd.MarkFlagFilename("file", "json")
	return cmd
}

func (c *cli) mirrorsCreate(ctx context.Context, file string) error {
	if file == "" {
		return usageErrorf("mirrors create: -f mirror.json is required (see pgmirror mirrors create --help)")
	}
	body, err := readJSONFile(file, c, &client.MirrorCreate{})
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
	tables := int64(len(m.ExpandedTableMappings))
	for _, t := range m.TableMappings {
		if t.SourceTable != "*" {
			tables++ // a mapping of a whole schema counts by the tables it expanded to
		}
	}
	printf(c.stdout, "Created mirror %s (%s -> %s, %s): %s\n", m.Name, m.SourcePeer, m.DestinationPeer, plural(tables, "table", "tables"), m.Status)
	return nil
}

// mirrorsControl is `pgmirror mirrors pause|resume|retry|sync-schema NAME`.
func (c *cli) mirrorsControl(ctx context.Context, action, name string) error {
	return c.say(ctx, name, func(ctx context.Context, api *client.Client) (string, error) {
		switch action {
		case "pause", "resume":
			call := api.PauseMirror
			if action == "resume" {
				call = api.ResumeMirror
			}
			res, err := call(ctx, name)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s (status %s)", res.Message, res.Status), nil
		default:
			call := api.RetryMirror
			if action == "sync-schema" {
				call = api.SyncSchema
			}
			res, err := call(ctx, name)
			if err != nil {
				return "", err
			}
			return res.Message, nil
		}
	})
}

// mirrorsResyncCommand is `pgmirror mirrors resync NAME [schema.table]`.
func (c *cli) mirrorsResyncCommand() *cobra.Command {
	return c.newCommand(spec{
		use: "resync NAME [schema.table]", short: "Copy every table of a mirror again, or one",
		long: `Take a new snapshot of every table of the mirror, or of one source table, then go on with
the changes.

Arguments:
  NAME           the mirror's name
  schema.table   one source table of the mirror (default: every table)`,
		example: "  pgmirror mirrors resync orders\n  pgmirror mirrors resync orders public.orders",
		minArgs: 1, maxArgs: 2, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error {
		return c.say(ctx, args[0], func(ctx context.Context, api *client.Client) (string, error) {
			if len(args) == 2 {
				res, err := api.ResyncTable(ctx, args[0], args[1])
				if err != nil {
					return "", err
				}
				return res.Message, nil
			}
			res, err := api.ResyncMirror(ctx, args[0])
			if err != nil {
				return "", err
			}
			return res.Message, nil
		})
	})
}

// mirrorsDeleteCommand is `pgmirror mirrors delete NAME [--yes]`.
func (c *cli) mirrorsDeleteCommand() *cobra.Command {
	var yes bool
	cmd := c.newCommand(spec{
		use: "delete NAME [--yes]", short: "Delete a mirror, its replication slot and publication",
		long: `Delete a mirror. Its replication slot and publication are dropped and this cannot be undone;
the destination's data stays. On a terminal the command asks first; otherwise it needs --yes.

Arguments:
  NAME   the mirror's name`,
		example: "  pgmirror mirrors delete orders\n  pgmirror mirrors delete orders --yes",
		minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error {
		if !yes {
			if !c.isTerminal() {
				return usageErrorf("mirrors delete: deleting a mirror drops its replication slot and cannot be undone; add --yes to confirm")
			}
			printf(c.stderr, "Delete mirror %s? Its replication slot and publication are dropped; the destination's data stays. [y/N] ", args[0])
			answer, _ := c.readLine()
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				return usageErrorf("mirrors delete: not confirmed; nothing was deleted")
			}
		}
		return c.deleted(ctx, "mirror", args[0], (*client.Client).DeleteMirror)
	})
	cmd.Flags().BoolVar(&yes, "yes", false, "do not ask for confirmation (needed when stdin is not a terminal)")
	return cmd
}

// deleted deletes a peer or mirror with del and says so.
func (c *cli) deleted(ctx context.Context, kind, name string, del func(*client.Client, context.Context, string) (*client.Deleted, error)) error {
	_, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Deleted, error) {
		return del(api, ctx, name)
	})
	if printed || err != nil {
		return err
	}
	printf(c.stdout, "Deleted %s %s\n", kind, name)
	return nil
}

// mirrorsCutoverCommand is `pgmirror mirrors cutover NAME [flags]`: it
// requests the cut-over and, unless --no-wait, follows it until it ends.
func (c *cli) mirrorsCutoverCommand() *cobra.Command {
	var lockSource, dropSlot, noWait bool
	var timeout, quiet int
	var reverse string
	var cmd *cobra.Command
	cmd = c.newCommand(spec{
		use: "cutover NAME [flags]", short: "Switch a mirror over to its destination",
		long: `Request the switch to the destination and follow it until it completes or fails, then print
its steps and what the cut-over did not carry (one Warning: line per kind). A failed cut-over
exits with code 1 with the failed step's error. Flags left out take the service's defaults.

Arguments:
  NAME   the mirror's name`,
		example: "  pgmirror mirrors cutover orders --quiet 2\n  pgmirror mirrors cutover orders --lock-source --reverse orders_back",
		minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error {
		req := client.CutoverRequest{ReverseMirrorName: reverse}
		f := cmd.Flags()
		if f.Changed("lock-source") {
			req.LockSource = &lockSource
		}
		if f.Changed("drop-slot") {
			req.DropSlot = &dropSlot
		}
		if f.Changed("timeout") {
			req.TimeoutSeconds = &timeout
		}
		if f.Changed("quiet") {
			req.QuietSeconds = &quiet
		}
		return c.mirrorsCutover(ctx, args[0], req, noWait)
	})
	f := cmd.Flags()
	f.BoolVar(&lockSource, "lock-source", false, "make the source tables read-only first (default: you have stopped the writes)")
	f.BoolVar(&dropSlot, "drop-slot", true, "drop the replication slot and publication once the cut-over completed")
	f.IntVar(&timeout, "timeout", 0, "seconds that applying the remaining changes may take (service default 300)")
	f.IntVar(&quiet, "quiet", 0, "without --lock-source: seconds the source must show no change first (service default 5)")
	f.StringVar(&reverse, "reverse", "", "create a reverse mirror of this name (destination back to source) for a rollback")
	f.BoolVar(&noWait, "no-wait", false, "return once the cut-over started instead of following it to the end")
	return cmd
}

func (c *cli) mirrorsCutover(ctx context.Context, name string, req client.CutoverRequest, noWait bool) error {
	if noWait {
		zero := 0
		req.WaitSeconds = &zero
	}
	api, err := c.api(ctx)
	if err != nil {
		return err
	}
	var raw []byte
	res, done, err := api.Cutover(client.CaptureBody(ctx, &raw), name, req)
	if err != nil {
		return apiErr(err)
	}
	record := res.Cutover
	for !done && !noWait && record != nil && (record.State == "requested" || record.State == "running") {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.pollInterval):
		}
		m, err := api.GetMirror(client.CaptureBody(ctx, &raw), name)
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
		c.printCutover(name, res.Message, record)
	}
	if record != nil && record.State == "failed" {
		return &exitError{code: exitAPIError, err: fmt.Errorf("cut-over of %s failed: %s", name, record.Error)}
	}
	return nil
}

func (c *cli) printCutover(name, message string, r *client.CutoverRecord) {
	if r == nil {
		printf(c.stdout, "%s: %s\n", name, message)
		return
	}
	printf(c.stdout, "Cut-over of %s: %s\n", name, r.State)
	if r.TargetLSN != "" {
		printf(c.stdout, "Target LSN: %s\n", r.TargetLSN)
	}
	if r.ReverseMirror != "" {
		printf(c.stdout, "Reverse mirror: %s\n", r.ReverseMirror)
	}
	w := c.table()
	c.header(w, "STEP", "STATE", "DURATION", "ERROR")
	for _, s := range r.Steps {
		printf(w, "%s\t%s\t%s\t%s\n", s.Name, s.State, formatMillis(s.DurationMS), s.Error)
	}
	_ = w.Flush()
	for _, warning := range r.Warnings {
		printf(c.stdout, "Warning: %s\n", warning)
	}
	if r.State == "requested" || r.State == "running" {
		printf(c.stdout, "Still running: follow it with pgmirror mirrors get %s\n", name)
	}
}

// lostNote marks a listed mirror whose tables may miss changes.
func lostNote(l *client.LostChanges) string {
	if l == nil {
		return ""
	}
	return " (changes lost: " + plural(int64(len(l.Tables)), "table", "tables") + ")"
}
