package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// exitDifferences is the exit code of mirrors verify and mirrors repair when
// the verification found differences (documented in docs/cli.md), so that a
// script can gate a cut-over on a clean verification.
const exitDifferences = 5

// mirrorsVerifyCommand is `pgmirror mirrors verify NAME [--table schema.table ...] [--no-wait]`.
func (c *cli) mirrorsVerifyCommand() *cobra.Command {
	var tables []string
	var noWait bool
	cmd := c.newCommand(spec{
		use: "verify NAME [--table schema.table ...] [--no-wait]", short: "Compare a mirror's destination with its source (exit 5 when rows differ)",
		long: `Compare the mirror's destination with its source at one source position, wait for the result
(polling every two seconds) and print it with one line per table and the example keys of the rows
that differ. The mirror must be running. Exit code 0 when nothing differs, 5 when rows differ,
1 when the verification failed or was cancelled, or the service refused it.

Arguments:
  NAME   the mirror's name`,
		example: `  pgmirror mirrors verify orders
  pgmirror mirrors verify orders --table public.orders --table public.items
  pgmirror mirrors verify orders && pgmirror mirrors cutover orders --lock-source`,
		minArgs: 1, maxArgs: 1, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error {
		api, err := c.api(ctx)
		if err != nil {
			return err
		}
		var list []string
		for _, t := range tables {
			if t = strings.TrimSpace(t); t != "" {
				list = append(list, t)
			}
		}
		var raw []byte
		v, err := api.VerifyMirror(client.CaptureBody(ctx, &raw), args[0], client.VerifyRequest{Tables: list})
		if err != nil {
			return apiErr(err)
		}
		return c.followVerification(ctx, api, args[0], v, raw, noWait)
	})
	cmd.Flags().StringSliceVar(&tables, "table", nil, "compare only this source table (schema.table); repeat it or separate with commas for several (default: all)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the verification started instead of waiting for its result")
	return cmd
}

// mirrorsRepairCommand is `pgmirror mirrors repair NAME ID [--no-wait]`.
func (c *cli) mirrorsRepairCommand() *cobra.Command {
	var noWait bool
	cmd := c.newCommand(spec{
		use: "repair NAME ID [--no-wait]", short: "Copy again what a verification found different, then compare again",
		long: `Copy the source rows of the key ranges where verification ID found differences over the
destination's, then compare those tables again; wait for that new verification (unless --no-wait)
and end with the exit codes of verify.

Arguments:
  NAME   the mirror's name
  ID     the verification's number (pgmirror mirrors verifications NAME lists them)`,
		example: "  pgmirror mirrors repair orders 7",
		minArgs: 2, maxArgs: 2, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error {
		id, err := parseVerificationID(args[1])
		if err != nil {
			return err
		}
		api, err := c.api(ctx)
		if err != nil {
			return err
		}
		var raw []byte
		v, err := api.RepairVerification(client.CaptureBody(ctx, &raw), args[0], id)
		if err != nil {
			return apiErr(err)
		}
		return c.followVerification(ctx, api, args[0], v, raw, noWait)
	})
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the repair started instead of waiting for its result")
	return cmd
}

// followVerification polls a verification until it ends (unless noWait),
// prints it and turns its outcome into the exit code: 0 when nothing
// differs, exitDifferences when something does, exitAPIError when it failed
// or was cancelled.
func (c *cli) followVerification(ctx context.Context, api *client.Client, name string, v *client.Verification, raw []byte, noWait bool) error {
	for !noWait && v.State == "running" {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.pollInterval):
		}
		next, err := api.GetVerification(client.CaptureBody(ctx, &raw), name, v.ID)
		if err != nil {
			return apiErr(err)
		}
		v = next
	}
	if c.json {
		if err := c.printJSON(raw); err != nil {
			return err
		}
	} else {
		c.printVerification(name, v)
	}
	return verificationOutcome(name, v)
}

func verificationOutcome(name string, v *client.Verification) error {
	switch v.State {
	case "failed":
		return &exitError{code: exitAPIError, err: fmt.Errorf("verification %d of %s failed: %s", v.ID, name, orDash(v.Error))}
	case "cancelled":
		return &exitError{code: exitAPIError, err: fmt.Errorf("verification %d of %s was cancelled", v.ID, name)}
	case "done":
		if v.RowsDiffering != nil && *v.RowsDiffering > 0 {
			return &exitError{code: exitDifferences, err: fmt.Errorf("verification %d of %s found %s; repair them with pgmirror mirrors repair %s %d",
				v.ID, name, rowsThatDiffer(*v.RowsDiffering), name, v.ID)}
		}
	}
	return nil
}

// mirrorsVerificationsCommand is `pgmirror mirrors verifications NAME [ID] [--limit N]`:
// the list, newest first, or one verification in full.
func (c *cli) mirrorsVerificationsCommand() *cobra.Command {
	var limit int
	cmd := c.newCommand(spec{
		use: "verifications NAME [ID] [--limit N]", short: "List a mirror's verifications, or show one",
		long: `List the mirror's latest verifications, newest first, or show verification ID as verify does.

Arguments:
  NAME   the mirror's name
  ID     a verification's number (default: list them)`,
		example: "  pgmirror mirrors verifications orders\n  pgmirror mirrors verifications orders 7",
		minArgs: 1, maxArgs: 2, complete: c.completeMirrors,
	}, func(ctx context.Context, args []string) error { return c.mirrorsVerifications(ctx, args, limit) })
	cmd.Flags().IntVar(&limit, "limit", 0, "how many of the newest to list (service default 20, at most 100)")
	return cmd
}

func (c *cli) mirrorsVerifications(ctx context.Context, args []string, limit int) error {
	if len(args) == 2 {
		id, err := parseVerificationID(args[1])
		if err != nil {
			return err
		}
		v, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Verification, error) {
			return api.GetVerification(ctx, args[0], id)
		})
		if printed || err != nil {
			return err
		}
		c.printVerification(args[0], v)
		return nil
	}
	list, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.Verification, error) {
		return api.ListVerifications(ctx, args[0], limit)
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	c.header(w, "ID", "STATE", "LSN", "ROWS DIFFERING", "TABLES", "REQUESTED BY", "STARTED", "FINISHED", "REPAIR OF")
	for _, v := range list {
		printf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.State, orDash(v.LSN), formatOptInt(v.RowsDiffering), len(v.Tables),
			orDash(&v.RequestedBy), formatTime(&v.StartedAt), formatTime(v.FinishedAt), formatOptInt(v.RepairOf))
	}
	return w.Flush()
}

// rowsDiffer is "1 row differs" or "N rows differ".
func rowsDiffer(n int64) string {
	if n == 1 {
		return "1 row differs"
	}
	return plural(n, "row", "rows") + " differ"
}

// rowsThatDiffer is "1 row that differs" or "N rows that differ".
func rowsThatDiffer(n int64) string {
	if n == 1 {
		return "1 row that differs"
	}
	return plural(n, "row", "rows") + " that differ"
}

func parseVerificationID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErrorf("%q is not a verification id: give the number from pgmirror mirrors verifications NAME", s)
	}
	return id, nil
}

func formatOptInt(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}

// printVerification prints a verification: a summary, one line per table,
// then the example keys of what differs.
func (c *cli) printVerification(name string, v *client.Verification) {
	summary := v.State
	switch {
	case v.State == "done" && v.RowsDiffering != nil && *v.RowsDiffering > 0:
		summary += ", " + rowsDiffer(*v.RowsDiffering)
	case v.State == "done":
		summary += ", no differences"
	case v.State == "failed":
		summary += ": " + orDash(v.Error)
	}
	printf(c.stdout, "Verification %d of %s: %s\n", v.ID, name, summary)
	if v.RepairOf != nil {
		printf(c.stdout, "Repair of: verification %d\n", *v.RepairOf)
	}
	printf(c.stdout, "LSN: %s\n", orDash(v.LSN))
	printf(c.stdout, "Requested by: %s, started %s, finished %s\n", orDash(&v.RequestedBy), formatTime(&v.StartedAt), formatTime(v.FinishedAt))
	if len(v.Tables) > 0 {
		w := c.table()
		c.header(w, "TABLE", "METHOD", "ROWS SOURCE", "ROWS DESTINATION", "CHUNKS DIFFERING", "ROWS DIFFERING", "DURATION", "SKIPPED")
		for _, t := range v.Tables {
			printf(w, "%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\n", t.Table, orDash(&t.Method), t.RowsSource, t.RowsDestination,
				t.ChunksDiffering, t.Chunks, t.RowsDiffering, formatMillis(t.DurationMS), orDash(&t.Skipped))
		}
		_ = w.Flush()
	}
	for _, t := range v.Tables {
		for _, ex := range []struct {
			kind string
			keys []string
		}{{"missing on the destination", t.Missing}, {"extra on the destination", t.Extra}, {"different", t.Different}} {
			for _, k := range ex.keys {
				printf(c.stdout, "%s %s: %s\n", t.Table, ex.kind, k)
			}
		}
	}
	if v.State == "running" {
		printf(c.stdout, "Still running: see the result with pgmirror mirrors verifications %s %d\n", name, v.ID)
	}
}
