package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	nativePub = "bench_pub"
	nativeSub = "bench_sub"
	// launcherThrottle is a little more than the default
	// wal_retrieve_retry_interval.
	launcherThrottle = 6 * time.Second
)

// measureNative times PostgreSQL's own logical replication: the initial
// sync of CREATE SUBSCRIPTION, the catch-up after each workload run while
// the subscription was disabled, and the lag under the paced load. It
// drops the subscription at the end.
func (b *bench) measureNative(ctx context.Context) error {
	srcURL, dstURL := b.url(b.src, srcNative), b.url(b.dst, dstNative)
	if err := execSQL(ctx, srcURL, "CREATE PUBLICATION "+nativePub+" FOR TABLE public.bench"); err != nil {
		return err
	}
	if err := b.checkpoint(ctx); err != nil {
		return err
	}
	dst, err := connect(ctx, dstURL)
	if err != nil {
		return err
	}
	defer closeConn(dst)
	src, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer closeConn(src)
	if err := b.nativeInitialSync(ctx, dst); err != nil {
		return err
	}
	if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
		return err
	}
	if err := b.nativeCatchup(ctx, src, dst); err != nil {
		return err
	}
	if err := b.nativeLive(ctx, dst); err != nil {
		return err
	}
	// Drop the subscription (and its slot) so that nothing of it runs
	// while pgmirror is measured.
	if _, err := dst.Exec(ctx, "DROP SUBSCRIPTION "+nativeSub); err != nil {
		return fmt.Errorf("drop subscription: %w", err)
	}
	return nil
}

// nativeInitialSync creates the subscription with copy_data and times it
// until every table is ready with every row on the destination (dst).
func (b *bench) nativeInitialSync(ctx context.Context, dst *pgx.Conn) error {
	b.logf("native: CREATE SUBSCRIPTION with copy_data")
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres password=%s dbname=%s", b.src.Port(), b.src.Password(), srcNative)
	c0, t0 := b.cpuNow(), time.Now()
	if _, err := dst.Exec(ctx, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION %s WITH (copy_data = true)", nativeSub, conninfo, nativePub)); err != nil {
		return fmt.Errorf("create subscription: %w", err)
	}
	deadline := t0.Add(time.Hour)
	for {
		var notReady, total int
		if err := dst.QueryRow(ctx, `SELECT count(*) FILTER (WHERE r.srsubstate <> 'r'), count(*)
			FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid WHERE s.subname = $1`, nativeSub).Scan(&notReady, &total); err != nil {
			return fmt.Errorf("read subscription state: %w", err)
		}
		if total > 0 && notReady == 0 {
			at := time.Now()
			var n int64
			if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.bench`).Scan(&n); err != nil {
				return fmt.Errorf("count rows: %w", err)
			}
			if n == b.opts.rows {
				b.results.native.snapshot = measurement{dur: at.Sub(t0), units: n, cpu: b.cpuNow().sub(c0)}
				b.logf("native: initial sync in %s", b.results.native.snapshot.dur.Round(time.Millisecond))
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("initial sync not done after an hour (%d of %d tables not ready)", notReady, total)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// nativeCatchup runs each catch-up workload while the subscription is
// disabled and times the catch-up after it is enabled again.
func (b *bench) nativeCatchup(ctx context.Context, src, dst *pgx.Conn) error {
	srcURL, dstURL := b.url(b.src, srcNative), b.url(b.dst, dstNative)
	pos := func(ctx context.Context) (reported, applied lsn, err error) {
		if reported, err = queryLSN(ctx, src, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '`+nativeSub+`'`); err != nil {
			return 0, 0, err
		}
		applied, err = queryLSN(ctx, dst, `SELECT remote_lsn::text FROM pg_replication_origin_status
			WHERE external_id = 'pg_' || (SELECT oid FROM pg_subscription WHERE subname = '`+nativeSub+`')`)
		return reported, applied, err
	}
	cur := newCursor(b.opts.rows)
	for _, w := range b.catchupWorkloads() {
		if _, err := dst.Exec(ctx, "ALTER SUBSCRIPTION "+nativeSub+" DISABLE"); err != nil {
			return fmt.Errorf("disable subscription: %w", err)
		}
		if err := waitSlotsIdle(ctx, srcURL, srcNative); err != nil {
			return err
		}
		idle := time.Now()
		end, err := runWorkload(ctx, srcURL, cur, w)
		if err != nil {
			return err
		}
		b.logf("native: workload %s ran in %s (WAL end %s)", w.name, end.elapsed.Round(time.Millisecond), end.target)
		if err := b.checkpoint(ctx); err != nil {
			return err
		}
		backlog, err := slotBacklog(ctx, src, srcNative, end.target)
		if err != nil {
			return err
		}
		b.logf("native: %s", backlog)
		// The launcher starts apply workers at most once per
		// wal_retrieve_retry_interval (5 s), counted from its last scan,
		// which the disabled worker's exit triggered: let that pass, so
		// that the timing is the apply's, not the throttle's.
		if err := sleep(ctx, time.Until(idle.Add(launcherThrottle))); err != nil {
			return err
		}
		c0, t0 := b.cpuNow(), time.Now()
		if _, err := dst.Exec(ctx, "ALTER SUBSCRIPTION "+nativeSub+" ENABLE"); err != nil {
			return fmt.Errorf("enable subscription: %w", err)
		}
		m, err := waitCaughtUp(ctx, t0, end, pos, dst, src, srcNative, 30*time.Minute)
		if err != nil {
			return fmt.Errorf("catch-up after %s: %w", w.name, err)
		}
		m.cpu, m.units = b.cpuNow().sub(c0), w.changes
		b.logf("native: caught up with %s in %s (applied in %s, sent by its walsender in %s)", w.name, m.dur.Round(time.Millisecond), m.applied.Round(time.Millisecond), m.sent.Round(time.Millisecond))
		if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
			return err
		}
		b.results.native.catchup = append(b.results.native.catchup, m)
	}
	return nil
}

// nativeLive measures the lag under a paced load and the live large
// transactions (with the subscription streaming as PostgreSQL offers it),
// as the options ask.
func (b *bench) nativeLive(ctx context.Context, dst *pgx.Conn) error {
	srcURL, dstURL := b.url(b.src, srcNative), b.url(b.dst, dstNative)
	var err error
	if !b.opts.largeOnly {
		if err := b.checkpoint(ctx); err != nil {
			return err
		}
		b.logf("native: lag under %d tx/s for %s", b.opts.lagRate, b.opts.lagDuration)
		if b.results.native.lag, err = b.measureLag(ctx, srcURL, dstURL); err != nil {
			return err
		}
		l := b.results.native.lag
		b.logf("native: lag p50 %s p99 %s max %s at %.0f tx/s", ms(l.p50), ms(l.p99), ms(l.max), l.rate)
	}
	if b.opts.largeRows > 0 {
		// Streaming as PostgreSQL offers it: parallel apply on 16+ (18's
		// default), on for a 14 or 15 destination.
		streaming := b.nativeStreaming()
		if _, err := dst.Exec(ctx, "ALTER SUBSCRIPTION "+nativeSub+" SET (streaming = "+streaming+")"); err != nil {
			return fmt.Errorf("set the subscription's streaming: %w", err)
		}
		// The apply worker restarts with the new setting (the launcher
		// starts it again within its throttle).
		if err := sleep(ctx, launcherThrottle); err != nil {
			return err
		}
		b.logf("native: live large transactions, streaming = %s", streaming)
		if b.results.native.live, err = b.measureLiveTx(ctx, "native", srcURL, srcNative, dstURL, 0); err != nil {
			return err
		}
	}
	return nil
}
