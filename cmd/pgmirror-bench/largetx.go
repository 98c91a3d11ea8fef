package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	// sent is the time from the COMMIT's return until the source's
	// walsender of the system's slot had decoded the WAL past it, and so
	// sent the commit (polled with applied; 0 if not seen before applied).
	// No consumer can apply the transaction sooner: sent is the source's
	// part of applied, and applied - sent the consumer's.
	sent time.Duration
	// The slot's pg_stat_replication_slots counters during it (-1 where
	// the source has no such view).
	streamBytes, spillBytes int64
	// rss (pgmirror only) is the pgmirror process's RSS through it.
	rss rssUse
	// before and after are the lags of the small transactions written
	// beside it that committed before and after its COMMIT (besideLoad).
	before, after besideLag
}

// besideRate is the rate of the small transactions written beside a live
// large one, on a connection of their own.
const besideRate = 50

// besideBase is below the first id of the small transactions written beside
// the i-th live large transaction (besideBase + i*1e9 on).
const besideBase = largeTxBase + 100_000_000_000

// besideLag is the lag (the destination's applied_at minus the row's ts)
// of small transactions.
type besideLag struct {
	n             int64
	p50, p99, max time.Duration
}

// besideLoad inserts single-row transactions (synchronous_commit on) into
// the source from id first on, besideRate a second, until stop is called;
// stop returns how many committed.
func besideLoad(ctx context.Context, srcURL string, first int64) (stop func() (int64, error), err error) {
	conn, err := connect(ctx, srcURL+"&synchronous_commit=on")
	if err != nil {
		return nil, err
	}
	quit := make(chan struct{})
	done := make(chan error, 1)
	var sent int64
	go func() {
		defer closeConn(conn)
		tick := time.NewTicker(time.Second / besideRate)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				done <- nil
				return
			case <-ctx.Done():
				done <- ctx.Err()
				return
			case <-tick.C:
			}
			if _, err := conn.Exec(ctx, `INSERT INTO public.bench (id, a, b, c, note) VALUES ($1, 1, 2, 3, 'beside')`, first+sent); err != nil {
				done <- fmt.Errorf("small transaction beside the large one: %w", err)
				return
			}
			sent++
		}
	}()
	return func() (int64, error) {
		close(quit)
		err := <-done
		return sent, err
	}, nil
}

// besideLags waits until the destination has the n small transactions
// from id first on and reads their lags, split at the large transaction's
// commit time.
func besideLags(ctx context.Context, dst *pgx.Conn, first, n int64, committed time.Time) (before, after besideLag, err error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var got int64
		if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.bench WHERE id >= $1 AND id < $2`, first, first+n).Scan(&got); err != nil {
			return before, after, fmt.Errorf("count the small transactions: %w", err)
		}
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			return before, after, fmt.Errorf("the destination has %d of the %d small transactions after 5 minutes", got, n)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return before, after, err
		}
	}
	rows, err := dst.Query(ctx, `SELECT ts < $3, count(*),
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		max(extract(epoch FROM applied_at - ts))::float8
		FROM public.bench WHERE id >= $1 AND id < $2 GROUP BY 1`, first, first+n, committed)
	if err != nil {
		return before, after, fmt.Errorf("lags of the small transactions: %w", err)
	}
	defer rows.Close()
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	for rows.Next() {
		var earlier bool
		var l besideLag
		var p50, p99, mx float64
		if err := rows.Scan(&earlier, &l.n, &p50, &p99, &mx); err != nil {
			return before, after, err
		}
		l.p50, l.p99, l.max = secs(p50), secs(p99), secs(mx)
		if earlier {
			before = l
		} else {
			after = l
		}
	}
	return before, after, rows.Err()
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
	walsenders, err := connect(ctx, srcURL)
	if err != nil {
		return nil, err
	}
	defer closeConn(walsenders)
	var out []liveTx
	for i, st := range liveTxStatements(b.opts.largeRows) {
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
		first := besideBase + int64(i)*1_000_000_000
		stopBeside, err := besideLoad(ctx, srcURL, first)
		if err != nil {
			return nil, err
		}
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
			_, _ = stopBeside()
			return nil, fmt.Errorf("%s: %w", st.name, err)
		}
		m := liveTx{name: st.name, rows: b.opts.largeRows, source: committed.Sub(t0)}
		commitEnd, err := queryLSN(ctx, walsenders, `SELECT pg_current_wal_lsn()::text`)
		if err != nil {
			return nil, fmt.Errorf("%s: the source's WAL position after the commit: %w", st.name, err)
		}
		deadline := committed.Add(30 * time.Minute)
		for {
			if m.sent == 0 {
				sent, err := walsenderSent(ctx, walsenders, db)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", st.name, err)
				}
				if sent >= commitEnd {
					m.sent = time.Since(committed)
				}
			}
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
		// The small transactions go on for a second after the large one
		// showed: those right after its commit waited for its apply.
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		n, err := stopBeside()
		if err != nil {
			return nil, err
		}
		if m.before, m.after, err = besideLags(ctx, dst, first, n, committed); err != nil {
			return nil, fmt.Errorf("%s: %w", st.name, err)
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
		b.logf("%s: %s took %s on the source, sent by its walsender %s and on the destination %s after its commit (streamed %s, spilled %s)",
			who, st.name, m.source.Round(time.Millisecond), sentOrDash(m.sent), m.applied.Round(time.Millisecond), bytesOrDash(m.streamBytes), bytesOrDash(m.spillBytes))
		b.logf("%s: small transactions beside it: %d committed before its commit, lag p50 %s p99 %s max %s; %d after, lag p50 %s p99 %s max %s",
			who, m.before.n, m.before.p50.Round(time.Millisecond), m.before.p99.Round(time.Millisecond), m.before.max.Round(time.Millisecond),
			m.after.n, m.after.p50.Round(time.Millisecond), m.after.p99.Round(time.Millisecond), m.after.max.Round(time.Millisecond))
		out = append(out, m)
	}
	if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
		return nil, err
	}
	return out, nil
}

// sentOrDash prints a walsender's time, - when it was not seen (0).
func sentOrDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return secs(d)
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
	fmt.Fprintf(w, "Large transactions while replicating: each run on the source as one transaction while the system streams, timed from the source's COMMIT until the destination shows it (native with `streaming = %s`). Walsender sent the commit: the time from the COMMIT until the source's walsender of the system's slot had decoded the WAL past it (its `sent_lsn` in `pg_stat_replication`, polled with the destination), which no consumer can beat; the rest of commit to applied is the consumer's. Streamed and spilled: the slot's `pg_stat_replication_slots` counters during it.\n\n", b.nativeStreaming())
	fmt.Fprintln(w, "| Transaction | On the source | Native: commit to applied | pgmirror: commit to applied | pgmirror vs native | Walsender sent the commit (native / pgmirror) | Native streamed / spilled | pgmirror streamed / spilled | pgmirror peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for i := range min(len(n), len(p)) {
		fmt.Fprintf(w, "| %s | %s / %s | %s | %s | %.2fx | %s / %s | %s / %s | %s / %s | %s%s |\n", p[i].name, secs(n[i].source), secs(p[i].source),
			secs(n[i].applied), secs(p[i].applied), ratio(n[i].applied, p[i].applied), sentOrDash(n[i].sent), sentOrDash(p[i].sent),
			bytesOrDash(n[i].streamBytes), bytesOrDash(n[i].spillBytes), bytesOrDash(p[i].streamBytes), bytesOrDash(p[i].spillBytes),
			mb(p[i].rss.peak), hwmNote(p[i].rss))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Small transactions beside them: single-row INSERTs (synchronous_commit on) at %d a second on a connection of their own, from the large transaction's start until a second after the destination showed it; lag is the destination's `applied_at` minus the row's `ts`, p50 / p99 / max, split by whether they committed before or after the large transaction's COMMIT (those after wait for its apply in both systems: the destination shows transactions in the source's commit order).\n\n", besideRate)
	fmt.Fprintln(w, "| Transaction | Native: before its commit | pgmirror: before its commit | Native: after it | pgmirror: after it |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	lag := func(l besideLag) string {
		if l.n == 0 {
			return "-"
		}
		short := func(d time.Duration) string {
			if d < time.Second {
				return ms(d)
			}
			return secs(d)
		}
		return fmt.Sprintf("%d: %s / %s / %s", l.n, short(l.p50), short(l.p99), short(l.max))
	}
	for i := range min(len(n), len(p)) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", p[i].name, lag(n[i].before), lag(p[i].before), lag(n[i].after), lag(p[i].after))
	}
	fmt.Fprintln(w)
}
