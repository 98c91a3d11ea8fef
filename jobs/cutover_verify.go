package jobs

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/verify"
)

// stepChecksums compares checksums of the tables at the cut-over position.
const stepChecksums = "verify_checksums"

// checksumTables returns the tables whose checksums the cut-over compares:
// all with verify true, none with verify false, and otherwise those of at
// most Config.CutoverChecksumMax on the source. The others get row
// counts only: c.countsOnly names them and the record's warnings say why.
func (c *cutoverRun) checksumTables(ctx context.Context) ([]change.Mapping, error) {
	want := c.record.Options.Verify
	limit := c.run.cfg.CutoverChecksumMax
	var out []change.Mapping
	c.countsOnly, c.countsOnlyWarnings = nil, nil
	for _, m := range c.mappings {
		if want != nil && !*want {
			c.rowCountsOnly(m, `the request set "verify": false`)
			continue
		}
		if want == nil {
			var size int64
			if err := c.src.QueryRow(ctx, `SELECT pg_catalog.pg_table_size($1::regclass)`, m.Source.Quoted()).Scan(&size); err != nil {
				return nil, fmt.Errorf("read the size of %s: %w", m.Source, err)
			}
			if size > limit {
				c.rowCountsOnly(m, fmt.Sprintf(`the table's %d bytes on the source exceed the checksum limit of %d bytes (SERVICE_CUTOVER_CHECKSUM_MAX_BYTES); request the cut-over with "verify": true to compare it`, size, limit))
				continue
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// rowCountsOnly notes that table m gets row counts only, and why.
func (c *cutoverRun) rowCountsOnly(m change.Mapping, why string) {
	c.countsOnly = append(c.countsOnly, m.Source.String())
	c.countsOnlyWarnings = append(c.countsOnlyWarnings, fmt.Sprintf(
		"%s: row counts only, checksums not compared (%s): rows that differ with equal counts would not have been found; a verification (POST /v1/mirrors/%s/verify) compares them",
		m.Source, why, c.m.Name))
}

// verifyChecksums compares the tables' rows by checksums (engine/verify).
// Neither side moves here: CDC has stopped at the final position and the
// source was checked quiet (or is read-only), so plain exported snapshots
// of both stand at the same position; a write that slipped in on the
// source shows as a difference and stops the cut-over, as it should.
func (c *cutoverRun) verifyChecksums(ctx context.Context, tables []change.Mapping) (map[string]any, error) {
	srcCfg, dstCfg, err := peerConfigs(c.srcPeer, c.dstPeer)
	if err != nil {
		return nil, err
	}
	export := func(role string, peerConn func(context.Context) (*pgx.Conn, error)) (*pgx.Conn, pgx.Tx, string, error) {
		conn, err := peerConn(ctx)
		if err != nil {
			return nil, nil, "", err
		}
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			closeConn(conn)
			return nil, nil, "", fmt.Errorf("%s: %w", role, err)
		}
		var name string
		if err := tx.QueryRow(ctx, `SELECT pg_export_snapshot()`).Scan(&name); err != nil {
			closeConn(conn)
			return nil, nil, "", fmt.Errorf("%s: export a snapshot: %w", role, err)
		}
		return conn, tx, name, nil
	}
	srcConn, _, srcSnap, err := export("source", func(ctx context.Context) (*pgx.Conn, error) { return connectPeer(ctx, "source", c.srcPeer) })
	if err != nil {
		return nil, err
	}
	defer closeConn(srcConn)
	dstConn, _, dstSnap, err := export("destination", func(ctx context.Context) (*pgx.Conn, error) { return connectPeer(ctx, "destination", c.dstPeer) })
	if err != nil {
		return nil, err
	}
	defer closeConn(dstConn)
	res, err := verify.Compare(ctx, verify.Config{Source: srcCfg, Dest: dstCfg, SourceSnapshot: srcSnap, DestSnapshot: dstSnap,
		Tables: tables, Workers: max(1, min(c.m.SnapshotMaxParallelWorkers, 4)), Logger: c.run.logger}, nil)
	if err != nil {
		return nil, err
	}
	summary := map[string]any{}
	var differ []string
	for _, r := range res {
		summary[r.Table] = map[string]any{"method": r.Method, "rows": r.RowsSource, "chunks": r.Chunks,
			"rows_differing": r.RowsDiffering, "skipped": r.Skipped}
		if r.Skipped != "" {
			differ = append(differ, fmt.Sprintf("%s could not be compared (%s)", r.Table, r.Skipped))
			continue
		}
		if !r.Equal() {
			examples := append(append(append([]string{}, r.Missing...), r.Extra...), r.Different...)
			differ = append(differ, fmt.Sprintf("%s has %d rows that differ (for example %s)", r.Table, r.RowsDiffering, strings.Join(examples[:min(3, len(examples))], ", ")))
		}
	}
	detail := map[string]any{"tables": summary}
	if len(differ) > 0 {
		others := ""
		if len(c.countsOnly) > 0 {
			others = fmt.Sprintf(" (the tables whose checksums were not compared, %s, may differ too: a verification covers every table)", strings.Join(c.countsOnly, ", "))
		}
		return detail, fmt.Errorf("checksums differ after every change was applied: %s; the mirror keeps replicating: run a verification with repair (POST /v1/mirrors/%s/verify, then POST /v1/mirrors/%s/verifications/{id}/repair), which finds and fixes every differing row%s, or resync those tables, and try again",
			strings.Join(differ, "; "), c.m.Name, c.m.Name, others)
	}
	return detail, nil
}
