package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// measurement is one timed step.
type measurement struct {
	// dur is the measured time: for a catch-up, until the position the
	// system reports (native: the slot's confirmed_flush_lsn; pgmirror: the
	// API's last_lsn) reached the source's WAL position after the workload.
	dur time.Duration
	// applied (catch-up only) is the time until the destination itself had
	// committed the workload's last transaction (native: the subscription's
	// replication origin; pgmirror: _pgmirror.applied).
	applied time.Duration
	// sent (catch-up only) is the time until the source's walsender of the
	// system's slot had decoded the WAL up to the workload's end (sent it
	// all), 0 if not seen: the source's part of the catch-up, which no
	// consumer can beat (a consumer that reads slower holds it back).
	sent time.Duration
	// fallback: the reported position stopped at the last transaction's end
	// below the recorded WAL position (other WAL followed it); dur is when
	// it passed that transaction.
	fallback bool
	units    int64 // rows or changes
	cpu      cpuUse
	// rss (pgmirror catch-up only) is the pgmirror process's resident set
	// size from the resume until caught up.
	rss rssUse
}

// lagResult is the outcome of a paced lag load.
type lagResult struct {
	p50, p99, max time.Duration
	rows          int64
	rate          float64 // transactions per second actually sent
	cpu           cpuUse
	wall          time.Duration
}

// systemResults are one replication system's measurements.
type systemResults struct {
	snapshot measurement
	// verify (pgmirror only) is one verification of the snapshotted table
	// (POST /v1/mirrors/{name}/verify until done).
	verify  measurement
	catchup []measurement
	lag     lagResult
	// live are the live large transactions (largetx.go).
	live []liveTx
}

// results are everything one run measured.
type results struct {
	// copyPipes are the COPY pipe's runs: one before native's initial sync
	// and one right after pgmirror's snapshot, in the state the destination
	// cluster is in by then (see copyPipe).
	copyPipes        []measurement
	native, pgmirror systemResults
}

// copyPipe is the COPY pipe's baseline: the mean of its runs. The same
// COPY of the same table has taken 6.1 to 10.2 s on the 2-core machine in
// one hour, CPU-bound in the destination backend either way, so one run
// at the start of a mode, minutes before pgmirror's snapshot, says little
// about the pipe at the time of the snapshot.
func (r results) copyPipe() measurement {
	var m measurement
	n := time.Duration(len(r.copyPipes))
	if n == 0 {
		return m
	}
	for _, p := range r.copyPipes {
		m.dur += p.dur
		m.units = p.units
		m.cpu = m.cpu.add(p.cpu)
	}
	m.dur /= n
	m.cpu = m.cpu.div(n)
	return m
}

// measureCopyPipe times one binary COPY TO STDOUT on the source piped into
// COPY FROM STDIN on the destination, through an io.Pipe, from the source
// database srcDB, which must hold the generated rows as generated. A run
// after the first empties the destination table first (before the
// checkpoint).
func (b *bench) measureCopyPipe(ctx context.Context, srcDB string) error {
	dstURL := b.url(b.dst, dstCopy, "synchronous_commit=off")
	if len(b.results.copyPipes) > 0 {
		if err := execSQL(ctx, dstURL, "TRUNCATE public.bench"); err != nil {
			return fmt.Errorf("empty the COPY pipe's destination table: %w", err)
		}
	}
	if err := b.checkpoint(ctx); err != nil {
		return err
	}
	src, err := connect(ctx, b.url(b.src, srcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	dst, err := connect(ctx, dstURL)
	if err != nil {
		return err
	}
	defer closeConn(dst)

	b.logf("COPY pipe: %s.bench -> %s.bench", srcDB, dstCopy)
	c0, t0 := b.cpuNow(), time.Now()
	pr, pw := io.Pipe()
	srcErr := make(chan error, 1)
	go func() {
		// CopyTo writes one row per Write and CopyFrom sends one message per
		// Read: gather 64 KiB, or every row would be a message of its own.
		bw := bufio.NewWriterSize(pw, 64<<10)
		_, err := src.PgConn().CopyTo(ctx, bw, "COPY (SELECT "+benchColumns+" FROM public.bench) TO STDOUT (FORMAT binary)")
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
		srcErr <- err
	}()
	tag, err := dst.PgConn().CopyFrom(ctx, pr, "COPY public.bench ("+benchColumns+") FROM STDIN (FORMAT binary)")
	pr.CloseWithError(errors.New("destination COPY ended"))
	if serr := <-srcErr; serr != nil {
		return fmt.Errorf("COPY TO on the source: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("COPY FROM on the destination: %w", err)
	}
	m := measurement{dur: time.Since(t0), units: tag.RowsAffected(), cpu: b.cpuNow().sub(c0)}
	if m.units != b.opts.rows {
		return fmt.Errorf("copied %d rows, want %d", m.units, b.opts.rows)
	}
	b.logf("COPY pipe: %d rows in %s", m.units, m.dur.Round(time.Millisecond))
	if err := waitEqual(ctx, b.url(b.src, srcDB), dstURL, time.Minute); err != nil {
		return err
	}
	b.results.copyPipes = append(b.results.copyPipes, m)
	return nil
}

// positions reads, during a catch-up, the position the system reports and
// the position its destination has applied.
type positions func(ctx context.Context) (reported, applied lsn, err error)

// walsenderSentSQL reads the lowest sent_lsn of the logical walsenders of
// database $1 on the source (NULL when none runs): the end of the last WAL
// record each has decoded, whose changes it has sent before it moves on.
const walsenderSentSQL = `SELECT min(r.sent_lsn)::text FROM pg_catalog.pg_stat_replication r
	JOIN pg_catalog.pg_replication_slots s ON s.active_pid = r.pid
	WHERE s.database = $1 AND s.slot_type = 'logical'`

// walsenderSent reads walsenderSentSQL for database db through src, a
// connection to the source cluster (0 when no walsender runs).
func walsenderSent(ctx context.Context, src *pgx.Conn, db string) (lsn, error) {
	return queryLSN(ctx, src, walsenderSentSQL, db)
}

// slotBacklog describes, for the log, how much WAL the walsender of
// database db's slot will read up to target when it starts: from the slot's
// restart_lsn (where decoding starts again) and from its
// confirmed_flush_lsn (where what it sends starts).
func slotBacklog(ctx context.Context, src *pgx.Conn, db string, target lsn) (string, error) {
	var restart, confirmed *string
	if err := src.QueryRow(ctx, `SELECT min(restart_lsn)::text, min(confirmed_flush_lsn)::text
		FROM pg_catalog.pg_replication_slots WHERE database = $1 AND slot_type = 'logical'`, db).Scan(&restart, &confirmed); err != nil {
		return "", fmt.Errorf("read the slot's positions: %w", err)
	}
	if restart == nil || confirmed == nil {
		return "no slot", nil
	}
	r, err := parseLSN(*restart)
	if err != nil {
		return "", err
	}
	c, err := parseLSN(*confirmed)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("the walsender reads %s of WAL from the slot's restart_lsn %s, %s from its confirmed_flush_lsn %s",
		mib(int64(target-r)), *restart, mib(int64(target-c)), *confirmed), nil
}

// waitCaughtUp polls pos every 50 ms from t0 until the reported position
// reaches end.target. When it passed the workload's last transaction but
// stays below end.target for 3 s (WAL written after the last commit that
// carries no change for the system), the time it passed that transaction
// counts. The workload counts as applied once the applied position passed
// its last transaction and the destination (dst) shows the last row it
// inserted: a subscriber with parallel apply confirms a streamed
// transaction as soon as its leader has handed the commit over, before the
// transaction shows. It also polls the walsender of database db on the
// source (src) for the time it has sent the whole workload.
func waitCaughtUp(ctx context.Context, t0 time.Time, end workloadEnd, pos positions, dst, src *pgx.Conn, db string, timeout time.Duration) (measurement, error) {
	var m measurement
	var lastSeen time.Time
	var r, a lsn
	var err error
	shown := end.lastID == 0
	deadline := t0.Add(timeout)
	for {
		if r, a, err = pos(ctx); err != nil {
			return m, err
		}
		if m.sent == 0 {
			sent, err := walsenderSent(ctx, src, db)
			if err != nil {
				return m, err
			}
			if sent >= end.target {
				m.sent = time.Since(t0)
			}
		}
		if !shown {
			if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT FROM public.bench WHERE id = $1)`, end.lastID).Scan(&shown); err != nil {
				return m, fmt.Errorf("look for row %d on the destination: %w", end.lastID, err)
			}
		}
		now := time.Now()
		if m.applied == 0 && a > end.beforeLast && shown {
			m.applied = now.Sub(t0)
		}
		if r >= end.target && shown {
			m.dur = now.Sub(t0)
			break
		}
		if r > end.beforeLast && shown {
			if lastSeen.IsZero() {
				lastSeen = now
			} else if now.Sub(lastSeen) > 3*time.Second {
				m.dur, m.fallback = lastSeen.Sub(t0), true
				break
			}
		}
		if now.After(deadline) {
			return m, fmt.Errorf("not caught up after %s: reported position %s, applied %s, target %s, row %d shown: %t", timeout, r, a, end.target, end.lastID, shown)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return m, err
		}
	}
	if m.applied == 0 || m.applied > m.dur {
		m.applied = m.dur
	}
	return m, nil
}

// waitSlotsIdle waits until no replication slot of database db on the
// source is in use (the consumer has really stopped).
func waitSlotsIdle(ctx context.Context, url, db string) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	deadline := time.Now().Add(time.Minute)
	for {
		var active int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active`, db).Scan(&active); err != nil {
			return fmt.Errorf("read replication slots: %w", err)
		}
		if active == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a replication slot of %s is still active a minute after the consumer was stopped", db)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// lagBase is the first id of the lag load's rows, far above the workloads'.
const lagBase = int64(1_000_000_000_000)

// measureLag runs the paced load of single-row inserts on the source (one
// transaction each, synchronous_commit on, 8 connections), waits until the
// destination has every row and reads the percentiles of applied_at - ts.
func (b *bench) measureLag(ctx context.Context, srcURL, dstURL string) (lagResult, error) {
	var res lagResult
	c0, start := b.cpuNow(), time.Now()
	sent, err := b.paceInserts(ctx, srcURL, start)
	if err != nil {
		return res, err
	}
	res.wall = time.Since(start)
	res.rate = float64(sent) / res.wall.Seconds()

	dst, err := connect(ctx, dstURL)
	if err != nil {
		return res, err
	}
	defer closeConn(dst)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.bench WHERE id >= $1`, lagBase).Scan(&res.rows); err != nil {
			return res, fmt.Errorf("count lag rows: %w", err)
		}
		if res.rows == sent {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("destination has %d of the %d lag rows after 2 minutes", res.rows, sent)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.cpu = b.cpuNow().sub(c0)
	var p50, p99, mx float64
	if err := dst.QueryRow(ctx, `SELECT
		percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM applied_at - ts)),
		max(extract(epoch FROM applied_at - ts))::float8
		FROM public.bench WHERE id >= $1`, lagBase).Scan(&p50, &p99, &mx); err != nil {
		return res, fmt.Errorf("lag percentiles: %w", err)
	}
	secs := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	res.p50, res.p99, res.max = secs(p50), secs(p99), secs(mx)
	b.logSlowRows(ctx, dst, p99)
	return res, nil
}

// paceInserts inserts single-row transactions on the source at
// -lag-rate for -lag-duration from start, over 8 connections with
// synchronous_commit on, and returns how many it sent.
func (b *bench) paceInserts(ctx context.Context, srcURL string, start time.Time) (int64, error) {
	const workers = 8
	n := int64(b.opts.lagRate) * int64(b.opts.lagDuration/time.Millisecond) / 1000
	conns := make([]*pgx.Conn, 0, workers)
	defer func() {
		for _, c := range conns {
			closeConn(c)
		}
	}()
	for range workers {
		c, err := connect(ctx, srcURL+"&synchronous_commit=on")
		if err != nil {
			return 0, err
		}
		conns = append(conns, c)
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int64, n)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range jobs {
				if _, err := c.Exec(lctx, `INSERT INTO public.bench (id, a, b, c, note) VALUES ($1, 1, 2, 3, 'lag')`, id); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("lag load insert: %w", err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	interval := time.Second / time.Duration(b.opts.lagRate)
	sent := int64(0)
schedule:
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		select {
		case jobs <- lagBase + i:
			sent++
		case <-lctx.Done():
			break schedule
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return sent, firstErr
	}
	return sent, ctx.Err()
}

// logSlowRows logs when, during the lag load, the rows slower than the
// 99th percentile were written (100 ms bins): periodic stalls show as
// regularly spaced bins.
func (b *bench) logSlowRows(ctx context.Context, dst *pgx.Conn, p99 float64) {
	rows, err := dst.Query(ctx, `WITH l AS (
		SELECT ts, extract(epoch FROM applied_at - ts) AS lag, min(ts) OVER () AS t0 FROM public.bench WHERE id >= $1)
		SELECT floor(extract(epoch FROM ts - t0) * 10) / 10, count(*), max(lag)
		FROM l WHERE lag > $2 GROUP BY 1 ORDER BY 1`, lagBase, p99)
	if err != nil {
		b.logf("slow rows: %v", err)
		return
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var at, lag float64
		var n int64
		if err := rows.Scan(&at, &n, &lag); err != nil {
			b.logf("slow rows: %v", err)
			return
		}
		parts = append(parts, fmt.Sprintf("%.1fs:%d(max %.0fms)", at, n, lag*1000))
	}
	b.logf("rows above p99 by time into the load: %s", strings.Join(parts, " "))
}
