package main

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"time"
)

// Targets.
const (
	targetSnapshotVsCopy  = 1.0  // pgmirror snapshot at least as fast as the COPY pipe
	targetCatchupSingle   = 2.0  // catch-up of single-row transactions vs native
	targetCatchupBatched  = 1.25 // catch-up of larger transactions vs native
	targetLagP99          = 50 * time.Millisecond
	catchupSingleWorkload = 1 // index of the single-row workload in workloads()
)

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func rate(n int64, d time.Duration, unit string) string {
	if d <= 0 {
		return "-"
	}
	return count(int64(float64(n)/d.Seconds())) + " " + unit + "/s"
}

func ratio(base, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return base.Seconds() / d.Seconds()
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// report prints the results as Markdown tables.
func (b *bench) report(w io.Writer) {
	r := b.results
	wl := workloads(b.opts)
	fmt.Fprintf(w, "\n## pgmirror-bench results\n\n")
	fmt.Fprintf(w, "%s rows (table %s), %d CPUs, %s, clusters with fsync %s; %s\n\n",
		count(b.opts.rows), mib(b.tableBytes), runtime.NumCPU(), runtime.Version(), map[bool]string{true: "on", false: "off"}[b.opts.durable],
		time.Now().UTC().Format("2006-01-02 15:04 UTC"))

	fmt.Fprintln(w, "| Measurement | COPY pipe | Native | pgmirror | pgmirror vs COPY pipe | pgmirror vs native | Target | Met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	cp, ns, ps := r.copyPipe, r.native.snapshot, r.pgmirror.snapshot
	vsCopy := ratio(cp.dur, ps.dur)
	fmt.Fprintf(w, "| Snapshot, %s rows | %s (%s) | %s (%s) | %s (%s) | %.2fx | %.2fx | >= %.2fx COPY pipe | %s |\n",
		count(b.opts.rows), secs(cp.dur), rate(cp.units, cp.dur, "rows"), secs(ns.dur), rate(ns.units, ns.dur, "rows"), secs(ps.dur), rate(ps.units, ps.dur, "rows"),
		vsCopy, ratio(ns.dur, ps.dur), targetSnapshotVsCopy, yes(vsCopy >= targetSnapshotVsCopy))
	for i, wk := range wl {
		if i >= len(r.native.catchup) || i >= len(r.pgmirror.catchup) {
			break
		}
		n, p := r.native.catchup[i], r.pgmirror.catchup[i]
		target := targetCatchupBatched
		if i == catchupSingleWorkload {
			target = targetCatchupSingle
		}
		vs := ratio(n.dur, p.dur)
		fmt.Fprintf(w, "| Catch-up, %s | | %s%s (%s) | %s%s (%s) | | %.2fx | >= %.2fx native | %s |\n",
			wk.name, secs(n.dur), star(n.fallback), rate(n.units, n.dur, "changes"), secs(p.dur), star(p.fallback), rate(p.units, p.dur, "changes"), vs, target, yes(vs >= target))
	}
	nl, pl := r.native.lag, r.pgmirror.lag
	fmt.Fprintf(w, "| Lag p50 / p99 / max at %d tx/s, %s | | %s / %s / %s | %s / %s / %s | | | p99 <= %s | %s |\n\n",
		b.opts.lagRate, b.opts.lagDuration, ms(nl.p50), ms(nl.p99), ms(nl.max), ms(pl.p50), ms(pl.p99), ms(pl.max), ms(targetLagP99), yes(pl.p99 <= targetLagP99))
	if anyFallback(r) {
		fmt.Fprintln(w, "\\* the reported position stopped at the workload's last commit, below the recorded WAL end (WAL without changes followed); the time it passed that commit counts.")
		fmt.Fprintln(w)
	}

	fmt.Fprintln(w, "Catch-up until the destination itself committed the workload's last transaction (native: the subscription's replication origin; pgmirror: _pgmirror.applied):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Workload | Native applied | pgmirror applied | pgmirror vs native |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for i, wk := range wl {
		if i >= len(r.native.catchup) || i >= len(r.pgmirror.catchup) {
			break
		}
		n, p := r.native.catchup[i], r.pgmirror.catchup[i]
		fmt.Fprintf(w, "| %s | %s | %s | %.2fx |\n", wk.name, secs(n.applied), secs(p.applied), ratio(n.applied, p.applied))
	}
	fmt.Fprintf(w, "\nLag loads sent %.0f tx/s (native) and %.0f tx/s (pgmirror) on average.\n\n", nl.rate, pl.rate)

	fmt.Fprintln(w, "CPU time used during each measurement (user + system, all processes of each party):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Measurement | System | Wall | Source cluster | Destination cluster | pgmirror process | bench | other processes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	cpuRow := func(name, system string, wall time.Duration, c cpuUse) {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", name, system, secs(wall), secs(c.source), secs(c.destination), secs(c.pgmirror), secs(c.bench), secs(c.other()))
	}
	cpuRow("Snapshot", "COPY pipe", cp.dur, cp.cpu)
	cpuRow("Snapshot", "native", ns.dur, ns.cpu)
	cpuRow("Snapshot", "pgmirror", ps.dur, ps.cpu)
	for i, wk := range wl {
		if i < len(r.native.catchup) {
			cpuRow("Catch-up, "+wk.name, "native", r.native.catchup[i].dur, r.native.catchup[i].cpu)
		}
		if i < len(r.pgmirror.catchup) {
			cpuRow("Catch-up, "+wk.name, "pgmirror", r.pgmirror.catchup[i].dur, r.pgmirror.catchup[i].cpu)
		}
	}
	cpuRow("Lag load", "native", nl.wall, nl.cpu)
	cpuRow("Lag load", "pgmirror", pl.wall, pl.cpu)
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimSpace(`Workloads: a transaction of n > 1 changes inserts 30% new rows, updates 50% (two int columns) and deletes 20%,
as three set-based statements; single-row transactions cycle through the same mix (5 updates, 3 inserts, 2 deletes in 10).`))
}

func star(b bool) string {
	if b {
		return "\\*"
	}
	return ""
}

func anyFallback(r results) bool {
	for _, m := range append(append([]measurement{}, r.native.catchup...), r.pgmirror.catchup...) {
		if m.fallback {
			return true
		}
	}
	return false
}
