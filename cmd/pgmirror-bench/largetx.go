package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// largeTxBase is below the first id of the live large transactions' rows,
// far from the workloads' and the lag load's.
const largeTxBase = int64(2_000_000_000_000)

// liveTx is one live large transaction: run on the source while the
// system replicates, timed from its COMMIT until the destination shows it.
type liveTx struct {
	name string
	rows int64
	// source is the time the statement and its COMMIT took on the source.
	source time.Duration
	// applied is the time from the COMMIT's return on the source until the
	// destination showed the transaction (polled every 10 ms).
	applied time.Duration
	// The slot's pg_stat_replication_slots counters during it (-1 where
	// the source has no such view).
	streamBytes, spillBytes int64
	// rss (pgmirror only) is the pgmirror process's RSS through it.
	rss rssUse
}

// liveTxStatements are the large transactions measured, in order: rows new
// rows inserted, then the same rows updated. check is a query that is true
// on the destination once it shows the transaction (each is one
// transaction, so one row of it shows all of it).
func liveTxStatements(rows int64) []struct{ name, sql, check string } {
	lo, hi := largeTxBase+1, largeTxBase+rows
	return []struct{ name, sql, check string }{
		{fmt.Sprintf("one %s-row INSERT", count(rows)), rowsSQL(lo, hi),
			fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM public.bench WHERE id = %d)", hi)},
		{fmt.Sprintf("one %s-row UPDATE", count(rows)), fmt.Sprintf("UPDATE public.bench SET a = a + 1, c = -1 WHERE id BETWEEN %d AND %d", lo, hi),
			fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM public.bench WHERE id = %d AND c = -1)", hi)},
	}
}

// slotCounters reads stream_bytes and spill_bytes of the logical slots of
// database db on the source (-1, -1 before PostgreSQL 14).
func slotCounters(ctx context.Context, srcURL, db string) (stream, spill int64, err error) {
	conn, err := connect(ctx, srcURL)
	if err != nil {
		return 0, 0, err
	}
	defer closeConn(conn)
	var num int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&num); err != nil {
		return 0, 0, err
	}
	if num < 140000 {
		return -1, -1, nil
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(sum(s.stream_bytes), 0)::bigint, coalesce(sum(s.spill_bytes), 0)::bigint
		FROM pg_stat_replication_slots s JOIN pg_replication_slots r USING (slot_name) WHERE r.database = $1`, db).Scan(&stream, &spill)
	return stream, spill, err
}

// measureLiveTx runs the large transactions on the source at srcURL (the
// database db) while the system replicates into dstURL, and times each from
// its commit until the destination shows it. pid, when not 0, is the
// pgmirror process, whose RSS is sampled.
func (b *bench) measureLiveTx(ctx context.Context, who, srcURL, db, dstURL string, pid int) ([]liveTx, error) {
	src, err := connect(ctx, srcURL+"&synchronous_commit=on")
	if err != nil {
		return nil, err
	}
	defer closeConn(src)
	dst, err := connect(ctx, dstURL)
	if err != nil {
		return nil, err
	}
	defer closeConn(dst)
	var out []liveTx
	for _, st := range liveTxStatements(b.opts.largeRows) {
		if err := b.checkpoint(ctx); err != nil {
			return nil, err
		}
		stream0, spill0, err := slotCounters(ctx, srcURL, db)
		if err != nil {
			return nil, err
		}
		var rss *rssSampler
		if pid != 0 {
			rss = sampleRSS(pid)
		}
		b.logf("%s: %s on the source", who, st.name)
		t0 := time.Now()
		results, err := src.PgConn().Exec(ctx, "BEGIN;\n"+st.sql+";\nCOMMIT").ReadAll()
		committed := time.Now()
		if err == nil && touched(results) != b.opts.largeRows {
			err = fmt.Errorf("touched %d rows, want %d", touched(results), b.opts.largeRows)
		}
		if err != nil {
			if rss != nil {
				rss.end()
			}
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		m := liveTx{name: st.name, rows: b.opts.largeRows, source: committed.Sub(t0)}
		deadline := committed.Add(30 * time.Minute)
		for {
			var shown bool
			if err := dst.QueryRow(ctx, st.check).Scan(&shown); err != nil {
				return nil, fmt.Errorf("%s: poll the destination: %w", st.name, err)
			}
			if shown {
				m.applied = time.Since(committed)
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("%s: not on the destination 30 minutes after its commit", st.name)
			}
			if err := sleep(ctx, 10*time.Millisecond); err != nil {
				return nil, err
			}
		}
		if rss != nil {
			m.rss = rss.end()
		}
		// The counters are updated as the walsender goes; read them after
		// the transaction is through.
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		stream1, spill1, err := slotCounters(ctx, srcURL, db)
		if err != nil {
			return nil, err
		}
		m.streamBytes, m.spillBytes = stream1-stream0, spill1-spill0
		if stream0 < 0 {
			m.streamBytes, m.spillBytes = -1, -1
		}
		b.logf("%s: %s took %s on the source, on the destination %s after its commit (streamed %s, spilled %s)",
			who, st.name, m.source.Round(time.Millisecond), m.applied.Round(time.Millisecond), bytesOrDash(m.streamBytes), bytesOrDash(m.spillBytes))
		out = append(out, m)
	}
	if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
		return nil, err
	}
	return out, nil
}

func bytesOrDash(n int64) string {
	if n < 0 {
		return "-"
	}
	return mib(n)
}

// nativeStreaming returns the subscription's streaming setting for the
// measurement of live large transactions: parallel where the destination
// has parallel apply (16+), on where the source streams (14+), else off.
func (b *bench) nativeStreaming() string {
	major := func(v string) int {
		n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		return n
	}
	switch {
	case major(b.srcVersion) < 14:
		return "off"
	case major(b.dstVersion) >= 16:
		return "parallel"
	default:
		return "on"
	}
}

// reportLiveTx prints the live large transactions of one mode.
func (b *bench) reportLiveTx(w io.Writer) {
	n, p := b.results.native.live, b.results.pgmirror.live
	if len(n) == 0 || len(p) == 0 {
		return
	}
	fmt.Fprintf(w, "Large transactions while replicating: each run on the source as one transaction while the system streams, timed from the source's COMMIT until the destination shows it (native with `streaming = %s`). Streamed and spilled: the slot's `pg_stat_replication_slots` counters during it.\n\n", b.nativeStreaming())
	fmt.Fprintln(w, "| Transaction | On the source | Native: commit to applied | pgmirror: commit to applied | pgmirror vs native | Native streamed / spilled | pgmirror streamed / spilled | pgmirror peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for i := range min(len(n), len(p)) {
		fmt.Fprintf(w, "| %s | %s / %s | %s | %s | %.2fx | %s / %s | %s / %s | %s%s |\n", p[i].name, secs(n[i].source), secs(p[i].source),
			secs(n[i].applied), secs(p[i].applied), ratio(n[i].applied, p[i].applied),
			bytesOrDash(n[i].streamBytes), bytesOrDash(n[i].spillBytes), bytesOrDash(p[i].streamBytes), bytesOrDash(p[i].spillBytes),
			mb(p[i].rss.peak), hwmNote(p[i].rss))
	}
	fmt.Fprintln(w)
}
