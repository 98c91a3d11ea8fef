package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/httpapi/client"
)

// exitDifferences is the exit code of mirrors verify and mirrors repair when
// the verification found differences (documented in docs/cli.md), so that a
// script can gate a cut-over on a clean verification.
const exitDifferences = 5

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}

// mirrorsVerify is `pgmirror mirrors verify NAME [--table schema.table ...] [--no-wait]`.
func (c *cli) mirrorsVerify(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors verify")
	var tables stringList
	fs.Var(&tables, "table", "compare only this source table (schema.table); repeat for several (default: all)")
	noWait := fs.Bool("no-wait", false, "return once the verification started instead of waiting for its result")
	pos, err := parse(fs, args, 1, 1, "NAME [--table schema.table ...] [--no-wait]")
	if err != nil {
		return err
	}
	api, err := c.api()
	if err != nil {
		return err
	}
	var raw []byte
	v, err := api.VerifyMirror(client.CaptureBody(ctx, &raw), pos[0], client.VerifyRequest{Tables: tables})
	if err != nil {
		return apiErr(err)
	}
	return c.followVerification(ctx, api, pos[0], v, raw, *noWait)
}

// mirrorsRepair is `pgmirror mirrors repair NAME ID [--no-wait]`.
func (c *cli) mirrorsRepair(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors repair")
	noWait := fs.Bool("no-wait", false, "return once the repair started instead of waiting for its result")
	pos, err := parse(fs, args, 2, 2, "NAME ID [--no-wait]")
	if err != nil {
		return err
	}
	id, err := parseVerificationID(pos[1])
	if err != nil {
		return err
	}
	api, err := c.api()
	if err != nil {
		return err
	}
	var raw []byte
	v, err := api.RepairVerification(client.CaptureBody(ctx, &raw), pos[0], id)
	if err != nil {
		return apiErr(err)
	}
	return c.followVerification(ctx, api, pos[0], v, raw, *noWait)
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

// mirrorsVerifications is `pgmirror mirrors verifications NAME [ID] [--limit N]`:
// the list, newest first, or one verification in full.
func (c *cli) mirrorsVerifications(ctx context.Context, args []string) error {
	fs := c.newFlags("mirrors verifications")
	limit := fs.Int("limit", 0, "how many of the newest to list (service default 20, at most 100)")
	pos, err := parse(fs, args, 1, 2, "NAME [ID] [--limit N]")
	if err != nil {
		return err
	}
	var id int64
	if len(pos) == 2 {
		if id, err = parseVerificationID(pos[1]); err != nil {
			return err
		}
	}
	if len(pos) == 2 {
		v, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) (*client.Verification, error) {
			return api.GetVerification(ctx, pos[0], id)
		})
		if printed || err != nil {
			return err
		}
		c.printVerification(pos[0], v)
		return nil
	}
	list, printed, err := request(ctx, c, func(ctx context.Context, api *client.Client) ([]client.Verification, error) {
		return api.ListVerifications(ctx, pos[0], *limit)
	})
	if printed || err != nil {
		return err
	}
	w := c.table()
	fmt.Fprintln(w, "ID\tSTATE\tLSN\tROWS DIFFERING\tTABLES\tREQUESTED BY\tSTARTED\tFINISHED\tREPAIR OF")
	for _, v := range list {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", v.ID, v.State, orDash(v.LSN), formatOptInt(v.RowsDiffering), len(v.Tables),
			orDash(&v.RequestedBy), formatTime(&v.StartedAt), formatTime(v.FinishedAt), formatOptInt(v.RepairOf))
	}
	return w.Flush()
}

// rowsDiffer is "1 row differs" or "N rows differ".
func rowsDiffer(n int64) string {
	if n == 1 {
		return "1 row differs"
	}
	return fmt.Sprintf("%d rows differ", n)
}

// rowsThatDiffer is "1 row that differs" or "N rows that differ".
func rowsThatDiffer(n int64) string {
	if n == 1 {
		return "1 row that differs"
	}
	return fmt.Sprintf("%d rows that differ", n)
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
	fmt.Fprintf(c.stdout, "Verification %d of %s: %s\n", v.ID, name, summary)
	if v.RepairOf != nil {
		fmt.Fprintf(c.stdout, "Repair of: verification %d\n", *v.RepairOf)
	}
	fmt.Fprintf(c.stdout, "LSN: %s\n", orDash(v.LSN))
	fmt.Fprintf(c.stdout, "Requested by: %s, started %s, finished %s\n", orDash(&v.RequestedBy), formatTime(&v.StartedAt), formatTime(v.FinishedAt))
	if len(v.Tables) > 0 {
		w := c.table()
		fmt.Fprintln(w, "TABLE\tMETHOD\tROWS SOURCE\tROWS DESTINATION\tCHUNKS DIFFERING\tROWS DIFFERING\tDURATION\tSKIPPED")
		for _, t := range v.Tables {
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\n", t.Table, orDash(&t.Method), t.RowsSource, t.RowsDestination,
				t.ChunksDiffering, t.Chunks, t.RowsDiffering, (time.Duration(t.DurationMS) * time.Millisecond).String(), orDash(&t.Skipped))
		}
		_ = w.Flush()
	}
	for _, t := range v.Tables {
		for _, ex := range []struct {
			kind string
			keys []string
		}{{"missing on the destination", t.Missing}, {"extra on the destination", t.Extra}, {"different", t.Different}} {
			for _, k := range ex.keys {
				fmt.Fprintf(c.stdout, "%s %s: %s\n", t.Table, ex.kind, k)
			}
		}
	}
	if v.State == "running" {
		fmt.Fprintf(c.stdout, "Still running: see the result with pgmirror mirrors verifications %s %d\n", name, v.ID)
	}
}
