package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// defaultFollowRetry is how long logs --follow keeps polling a service that
// does not answer (a restart, a deployment) before it gives up.
const defaultFollowRetry = 60 * time.Second

// followPollTimeout bounds one poll of logs --follow, so that a service
// that hangs counts as not answering instead of stopping the follow.
const followPollTimeout = 30 * time.Second

// logsCommand is `pgmirror logs NAME [--level L] [--search S] [--limit N] [--offset N] [--follow]`.
func (c *cli) logsCommand() *cobra.Command {
	var q client.LogQuery
	var follow bool
	cmd := c.newCommand(spec{
		use: "logs NAME [--level L] [--search S] [--limit N] [--offset N] [--follow]", short: "Show a mirror's log entries, or follow them",
		long: `Show a mirror's newest log entries, oldest first. --follow (-f) then polls every two seconds
with the same filters and prints new entries as they arrive, until interrupted; when the service
does not answer (a restart) it says so once on stderr and keeps trying for up to 60 seconds.
With --json, logs prints the API's page (logs, total, offset, limit); logs --follow --json prints
one entry per line (JSON Lines).

Arguments:
  NAME   the mirror's name`,
		example: `  pgmirror logs orders
  pgmirror logs orders --level error --limit 200
  pgmirror logs orders --search "public.orders"
  pgmirror logs orders --follow`,
		minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error { return c.logs(ctx, args[0], q, follow) })
	f := cmd.Flags()
	f.StringVar(&q.Level, "level", "", "only entries of this level: "+strings.Join(logLevels, ", ")+" (any case)")
	f.StringVar(&q.Search, "search", "", "only entries whose message or details contain this text")
	f.IntVar(&q.Limit, "limit", 50, "how many of the newest entries to show (at most 500)")
	f.IntVar(&q.Offset, "offset", 0, "skip this many of the newest entries first")
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new entries as they arrive, until interrupted")
	_ = cmd.RegisterFlagCompletionFunc("level", fixedCompletions(logLevels...))
	return cmd
}

func (c *cli) logs(ctx context.Context, name string, q client.LogQuery, follow bool) error {
	q.Level = strings.ToUpper(strings.TrimSpace(q.Level))
	if q.Level != "" && !slices.Contains(logLevels, q.Level) {
		return usageErrorf("logs: --level %q is not a level; give one of %s", q.Level, strings.Join(logLevels, ", "))
	}
	if q.Limit < 1 || q.Limit > 500 {
		return usageErrorf("logs: --limit %d: give a number from 1 to 500", q.Limit)
	}
	if q.Offset < 0 {
		return usageErrorf("logs: --offset %d: give 0 or more", q.Offset)
	}
	api, err := c.api(ctx)
	if err != nil {
		return err
	}
	var raw []byte
	page, err := api.MirrorLogs(client.CaptureBody(ctx, &raw), name, q)
	if err != nil {
		return apiErr(err)
	}
	if c.json && !follow {
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
				_, _ = c.stdout.Write(append(jsonTerminalSafe(mustJSON(e)), '\n'))
				continue
			}
			details := ""
			if d := bytes.TrimSpace(e.Details); len(d) > 0 && string(d) != "null" && string(d) != "{}" {
				details = " " + string(d)
			}
			printf(c.stdout, "%s %-5s %s%s\n", formatTimeLayout(e.CreatedAt, "2006-01-02 15:04:05.000"), e.Level, e.Message, details)
		}
	}
	show(page.Logs)
	if !follow {
		if !c.json && page.Total > len(page.Logs)+page.Offset {
			printf(c.stderr, "(%d of %s; --limit and --offset page further)\n", len(page.Logs), plural(int64(page.Total), "entry", "entries"))
		}
		return nil
	}
	return c.followLogs(ctx, api, name, q, show)
}

// followLogs polls for new entries until ctx ends. A poll that fails
// because the service does not answer (or answers 502, 503 or 504, as a
// proxy in front of a restarting service does) is retried with a growing
// pause for up to followRetry, with one notice on stderr when the service
// stops answering and one when it answers again; any other error ends the
// command.
func (c *cli) followLogs(ctx context.Context, api *client.Client, name string, q client.LogQuery, show func([]client.LogEntry)) error {
	retryFor := c.followRetry
	if retryFor <= 0 {
		retryFor = defaultFollowRetry
	}
	q.Offset, q.Limit = 0, 500
	var failingSince time.Time
	pause := c.pollInterval
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
		pollCtx, cancel := context.WithTimeout(ctx, followPollTimeout)
		page, err := api.MirrorLogs(pollCtx, name, q)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !serviceDown(err) {
				return apiErr(err)
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
				printf(c.stderr, "pgmirror: the service does not answer (%s); retrying for up to %s\n", shorten(err.Error()), formatSeconds(retryFor.Seconds()))
			} else if time.Since(failingSince) >= retryFor {
				e := apiErr(err)
				return &exitError{code: exitCode(e), err: fmt.Errorf("stopped following the logs of %s: the service has not answered for %s: %w",
					name, formatSeconds(time.Since(failingSince).Seconds()), errors.Unwrap(e))}
			}
			pause = min(2*pause, 10*time.Second)
			if remaining := retryFor - time.Since(failingSince); remaining > 0 && pause > remaining {
				pause = remaining
			}
			continue
		}
		if !failingSince.IsZero() {
			printf(c.stderr, "pgmirror: the service answers again after %s; following\n", formatSeconds(time.Since(failingSince).Seconds()))
			failingSince = time.Time{}
		}
		pause = c.pollInterval
		show(page.Logs)
	}
}

// serviceDown tells whether err means the service is not answering for
// now: no connection, a timeout, or a gateway's 502, 503 or 504.
func serviceDown(err error) bool {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status == http.StatusBadGateway || ae.Status == http.StatusServiceUnavailable || ae.Status == http.StatusGatewayTimeout
	}
	return client.IsConnectionError(err) || errors.Is(err, context.DeadlineExceeded)
}
