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
	targetSnapshotVsCopy   = 1.0  // pgmirror snapshot at least as fast as the COPY pipe
	targetVerifyVsCopy     = 0.5  // a verification within twice the time of one COPY of the table
	targetSnapshotVsNative = 1.1  // ... and 1.1x native's initial sync
	targetCatchupSingle    = 2.0  // catch-up of single-row transactions vs native
	targetCatchupBatched   = 1.25 // catch-up of 100- and 10,000-row transactions vs native
	targetLagP99           = 50 * time.Millisecond
	targetLagP50VsNative   = 2.0       // pgmirror's lag p50 at most twice native's
	targetRSS              = 256 << 20 // pgmirror's peak RSS through the large transaction, below
)

// pipeRuns names the times of the COPY pipe's runs when there were several
// (its baseline is their mean).
func pipeRuns(runs []measurement) string {
	if len(runs) < 2 {
		return ""
	}
	times := make([]string, len(runs))
	for i, m := range runs {
		times[i] = fmt.Sprintf("%.2f", m.dur.Seconds())
	}
	return "; mean of " + strings.Join(times, " / ") + " s"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func rate(n int64, d time.Duration, unit string) string {
	if d <= 0 {
		return "-"
	}
	return count(int64(float64(n)/d.Seconds())) + " " + unit + "/s"
}

// ratio is how many times faster d is than base.
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

// check is one target and how a mode's run did against it.
type check struct {
	name, target, value string
	met                 bool
}

// checks are the run's results against every target, in a fixed order.
func (b *bench) checks() []check {
	r := b.results
	var out []check
	cp, ns, ps := r.copyPipe(), r.native.snapshot, r.pgmirror.snapshot
	vsCopy, vsNative := ratio(cp.dur, ps.dur), ratio(ns.dur, ps.dur)
	out = append(out,
		check{"Snapshot vs COPY pipe", fmt.Sprintf(">= %.2fx", targetSnapshotVsCopy), fmt.Sprintf("%.2fx", vsCopy), vsCopy >= targetSnapshotVsCopy},
		check{"Snapshot vs native initial sync", fmt.Sprintf(">= %.2fx", targetSnapshotVsNative), fmt.Sprintf("%.2fx", vsNative), vsNative >= targetSnapshotVsNative})
	if pv := r.pgmirror.verify; pv.dur > 0 {
		vs := ratio(cp.dur, pv.dur)
		out = append(out, check{"Verification vs COPY pipe", fmt.Sprintf(">= %.2fx", targetVerifyVsCopy), fmt.Sprintf("%.2fx", vs), vs >= targetVerifyVsCopy})
	}
	for i, wk := range workloads(b.opts) {
		if wk.target == 0 || i >= len(r.native.catchup) || i >= len(r.pgmirror.catchup) {
			continue
		}
		vs := ratio(r.native.catchup[i].dur, r.pgmirror.catchup[i].dur)
		out = append(out, check{"Catch-up vs native, " + wk.short, fmt.Sprintf(">= %.2fx", wk.target), fmt.Sprintf("%.2fx", vs), vs >= wk.target})
	}
	nl, pl := r.native.lag, r.pgmirror.lag
	p50 := "-"
	if nl.p50 > 0 {
		p50 = fmt.Sprintf("%.2fx", pl.p50.Seconds()/nl.p50.Seconds())
	}
	out = append(out,
		check{fmt.Sprintf("Lag p99 at %d tx/s", b.opts.lagRate), "<= " + ms(targetLagP99), ms(pl.p99), pl.p99 <= targetLagP99},
		check{fmt.Sprintf("Lag p50 vs native p50 at %d tx/s", b.opts.lagRate), fmt.Sprintf("<= %.2fx", targetLagP50VsNative), p50,
			pl.p50.Seconds() <= targetLagP50VsNative*nl.p50.Seconds()})
	if l, ok := b.largeTx(); ok {
		out = append(out, check{fmt.Sprintf("pgmirror peak RSS, one %s-row tx", count(largeTxRows(b.opts))), "< " + mb(targetRSS), mb(l.pgmirror.rss.peak), l.pgmirror.rss.peak < targetRSS})
	}
	return out
}

// largeResult is the large transaction's catch-up, native and pgmirror.
type largeResult struct {
	w                workload
	native, pgmirror measurement
}

// largeTx returns the large transaction's catch-up measurements, if both
// systems got that far.
func (b *bench) largeTx() (largeResult, bool) {
	for i, wk := range workloads(b.opts) {
		if wk.oneInsert && i < len(b.results.native.catchup) && i < len(b.results.pgmirror.catchup) {
			return largeResult{wk, b.results.native.catchup[i], b.results.pgmirror.catchup[i]}, true
		}
	}
	return largeResult{}, false
}

// report prints the results of every mode measured, as Markdown: a
// section per mode, then the summary of every target in every mode.
func report(w io.Writer, o options, runs []*bench) {
	fmt.Fprintf(w, "\n## pgmirror-bench results\n\n")
	fmt.Fprintf(w, "%s rows, %d CPUs, %s, %s. Modes, one after the other, each on its own pair of clusters: ",
		count(o.rows), runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	var names []string
	for _, b := range runs {
		names = append(names, fmt.Sprintf("%s (%s)", b.mode.name, b.mode.settingsText()))
	}
	fmt.Fprintf(w, "%s; both clusters with max_wal_size=16GB, checkpoint_timeout=1h in every mode.", strings.Join(names, ", "))
	if len(runs) > 0 {
		fmt.Fprintf(w, " Source PostgreSQL %s, destination PostgreSQL %s.", runs[0].srcVersion, runs[0].dstVersion)
	}
	fmt.Fprintln(w)
	if o.largeOnly {
		for _, b := range runs {
			fmt.Fprintf(w, "\n### %s mode: %s\n\n", strings.ToUpper(b.mode.name[:1])+b.mode.name[1:], b.mode.settingsText())
			b.reportLiveTx(w)
		}
		return
	}
	for _, b := range runs {
		b.reportMode(w)
	}
	reportSummary(w, runs)
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.TrimSpace(`Workloads: a transaction of n > 1 changes inserts 30% new rows, updates 50% (two int columns) and deletes 20%,
as three set-based statements; single-row transactions cycle through the same mix (5 updates, 3 inserts, 2 deletes in 10);
the large transaction is one INSERT ... SELECT of new rows.`))
}

// reportMode prints one mode's tables.
func (b *bench) reportMode(w io.Writer) {
	r := b.results
	wl := workloads(b.opts)
	fmt.Fprintf(w, "\n### %s mode: %s\n\n", strings.ToUpper(b.mode.name[:1])+b.mode.name[1:], b.mode.settingsText())
	fmt.Fprintf(w, "Source table %s after generation.\n\n", mib(b.tableBytes))

	fmt.Fprintln(w, "| Measurement | COPY pipe | Native | pgmirror | pgmirror vs COPY pipe | pgmirror vs native | Target | Met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	cp, ns, ps := r.copyPipe(), r.native.snapshot, r.pgmirror.snapshot
	vsCopy, vsNative := ratio(cp.dur, ps.dur), ratio(ns.dur, ps.dur)
	fmt.Fprintf(w, "| Snapshot, %s rows | %s (%s%s) | %s (%s) | %s (%s) | %.2fx | %.2fx | >= %.2fx COPY pipe, >= %.2fx native | %s / %s |\n",
		count(b.opts.rows), secs(cp.dur), rate(cp.units, cp.dur, "rows"), pipeRuns(r.copyPipes), secs(ns.dur), rate(ns.units, ns.dur, "rows"), secs(ps.dur), rate(ps.units, ps.dur, "rows"),
		vsCopy, vsNative, targetSnapshotVsCopy, targetSnapshotVsNative, yes(vsCopy >= targetSnapshotVsCopy), yes(vsNative >= targetSnapshotVsNative))
	if pv := r.pgmirror.verify; pv.dur > 0 {
		vs := ratio(cp.dur, pv.dur)
		fmt.Fprintf(w, "| Verification, %s rows | %s (%s) | | %s (%s) | %.2fx | | >= %.2fx COPY pipe | %s |\n",
			count(b.opts.rows), secs(cp.dur), rate(cp.units, cp.dur, "rows"), secs(pv.dur), rate(pv.units, pv.dur, "rows"), vs, targetVerifyVsCopy, yes(vs >= targetVerifyVsCopy))
	}
	for i, wk := range wl {
		if wk.target == 0 || i >= len(r.native.catchup) || i >= len(r.pgmirror.catchup) {
			continue
		}
		n, p := r.native.catchup[i], r.pgmirror.catchup[i]
		vs := ratio(n.dur, p.dur)
		fmt.Fprintf(w, "| Catch-up, %s | | %s%s (%s) | %s%s (%s) | | %.2fx | >= %.2fx native | %s |\n",
			wk.name, secs(n.dur), star(n.fallback), rate(n.units, n.dur, "changes"), secs(p.dur), star(p.fallback), rate(p.units, p.dur, "changes"), vs, wk.target, yes(vs >= wk.target))
	}
	nl, pl := r.native.lag, r.pgmirror.lag
	fmt.Fprintf(w, "| Lag p50 / p99 / max at %d tx/s, %s | | %s / %s / %s | %s / %s / %s | | | p99 <= %s, p50 <= %.2fx native | %s / %s |\n\n",
		b.opts.lagRate, b.opts.lagDuration, ms(nl.p50), ms(nl.p99), ms(nl.max), ms(pl.p50), ms(pl.p99), ms(pl.max), ms(targetLagP99), targetLagP50VsNative,
		yes(pl.p99 <= targetLagP99), yes(pl.p50.Seconds() <= targetLagP50VsNative*nl.p50.Seconds()))
	if anyFallback(r) {
		fmt.Fprintln(w, "\\* the reported position stopped at the workload's last commit, below the recorded WAL end (WAL without changes followed); the time it passed that commit counts.")
		fmt.Fprintln(w)
	}

	if l, ok := b.largeTx(); ok {
		fmt.Fprintln(w, "The large transaction: catch-up time and the pgmirror process's resident set size (VmRSS every 50 ms from the resume until caught up, and VmHWM, reset at the resume):")
		fmt.Fprintln(w)
		fmt.Fprintln(w, "| Measurement | Native | pgmirror | pgmirror vs native | pgmirror RSS at resume / peak | Target | Met |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
		n, p := l.native, l.pgmirror
		fmt.Fprintf(w, "| Catch-up, %s | %s%s (%s) | %s%s (%s) | %.2fx | %s / %s%s | peak RSS < %s | %s |\n\n",
			l.w.name, secs(n.dur), star(n.fallback), rate(n.units, n.dur, "rows"), secs(p.dur), star(p.fallback), rate(p.units, p.dur, "rows"),
			ratio(n.dur, p.dur), mb(p.rss.start), mb(p.rss.peak), hwmNote(p.rss), mb(targetRSS), yes(p.rss.peak < targetRSS))
	}

	b.reportLiveTx(w)

	fmt.Fprintln(w, "Catch-up until the destination itself committed the workload's last transaction (native: the subscription's replication origin; pgmirror: _pgmirror.applied), and until the source's walsender of each system's slot had sent the whole workload (its `sent_lsn` in `pg_stat_replication` at the workload's end; a consumer slower than its walsender holds it back):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Workload | Native applied | pgmirror applied | pgmirror vs native | Walsender sent it all (native / pgmirror) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for i, wk := range wl {
		if i >= len(r.native.catchup) || i >= len(r.pgmirror.catchup) {
			break
		}
		n, p := r.native.catchup[i], r.pgmirror.catchup[i]
		fmt.Fprintf(w, "| %s | %s | %s | %.2fx | %s / %s |\n", wk.name, secs(n.applied), secs(p.applied), ratio(n.applied, p.applied), sentOrDash(n.sent), sentOrDash(p.sent))
	}
	fmt.Fprintf(w, "\nLag loads sent %.0f tx/s (native) and %.0f tx/s (pgmirror) on average.\n\n", nl.rate, pl.rate)

	fmt.Fprintln(w, "CPU per change during each catch-up: CPU-seconds (user + system) per 100,000 changes of each party (the destination cluster includes pgmirror's catalog), and the pgmirror process's CPU time per change:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| Workload | System | Source cluster | Destination cluster | pgmirror process | Total | pgmirror process per change | pgmirror peak RSS |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	per100k := func(d time.Duration, units int64) string {
		if units <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f s", d.Seconds()*100_000/float64(units))
	}
	perChange := func(m measurement, pgmirror bool) (string, string) {
		if !pgmirror || m.units <= 0 {
			return "-", "-"
		}
		us := float64(m.cpu.pgmirror) / float64(time.Microsecond) / float64(m.units)
		return fmt.Sprintf("%.1f µs", us), mb(m.rss.peak) + hwmNote(m.rss)
	}
	for i, wk := range wl {
		for _, sys := range []struct {
			name     string
			ms       []measurement
			pgmirror bool
		}{{"native", r.native.catchup, false}, {"pgmirror", r.pgmirror.catchup, true}} {
			if i >= len(sys.ms) {
				continue
			}
			m := sys.ms[i]
			c := m.cpu
			us, rss := perChange(m, sys.pgmirror)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", wk.name, sys.name,
				per100k(c.source, m.units), per100k(c.destination, m.units), per100k(c.pgmirror, m.units),
				per100k(c.source+c.destination+c.pgmirror, m.units), us, rss)
		}
	}
	fmt.Fprintln(w)

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
}

// reportSummary prints every target with each mode's value.
func reportSummary(w io.Writer, runs []*bench) {
	fmt.Fprintf(w, "\n### Summary: pgmirror against the targets\n\n")
	head, rule := "| Ratio or value | Target |", "|---|---|"
	for _, b := range runs {
		head += fmt.Sprintf(" %s | Met |", b.mode.name)
		rule += "---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, rule)
	all := make([][]check, len(runs))
	for i, b := range runs {
		all[i] = b.checks()
	}
	for k, c := range all[0] {
		line := fmt.Sprintf("| %s | %s |", c.name, c.target)
		for i := range runs {
			if k < len(all[i]) {
				line += fmt.Sprintf(" %s | %s |", all[i][k].value, yes(all[i][k].met))
			} else {
				line += " - | - |"
			}
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Speed ratios are native's (or the COPY pipe's) time divided by pgmirror's: above 1 pgmirror is faster. The lag p50 ratio is pgmirror's p50 divided by native's: below 2 meets the target.")
}

// hwmNote marks an RSS peak taken from the samples only (the kernel's
// high-water mark could not be reset).
func hwmNote(r rssUse) string {
	if r.hwm {
		return ""
	}
	return " (sampled)"
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
