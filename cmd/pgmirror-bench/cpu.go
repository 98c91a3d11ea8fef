package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// clockTick is the unit of the CPU times in /proc/PID/stat (USER_HZ, 100
// on Linux).
const clockTick = 10 * time.Millisecond

// cpuUse is the CPU time (user + system) spent by each party during a
// measurement: the source cluster, the destination cluster (with
// pgmirror's catalog), the pgmirror process and this program; and the
// machine's busy time (all CPUs), whose rest is other processes' (noise).
type cpuUse struct {
	source, destination, pgmirror, bench, machine time.Duration
}

func (c cpuUse) sub(o cpuUse) cpuUse {
	return cpuUse{c.source - o.source, c.destination - o.destination, c.pgmirror - o.pgmirror, c.bench - o.bench, c.machine - o.machine}
}

func (c cpuUse) add(o cpuUse) cpuUse {
	return cpuUse{c.source + o.source, c.destination + o.destination, c.pgmirror + o.pgmirror, c.bench + o.bench, c.machine + o.machine}
}

func (c cpuUse) div(n time.Duration) cpuUse {
	return cpuUse{c.source / n, c.destination / n, c.pgmirror / n, c.bench / n, c.machine / n}
}

// other is the CPU time of processes outside the measurement.
func (c cpuUse) other() time.Duration {
	return max(0, c.machine-c.source-c.destination-c.pgmirror-c.bench)
}

// cpuNow reads the CPU time spent so far. A cluster's time is its
// postmaster's, its live children's, and its reaped children's. Linux
// only; elsewhere it reads zeros.
func (b *bench) cpuNow() cpuUse {
	stats := readProcStats()
	var u cpuUse
	u.source = clusterCPU(stats, b.src)
	u.destination = clusterCPU(stats, b.dst)
	if b.svc != nil && b.svc.cmd.Process != nil {
		if s, ok := stats[b.svc.cmd.Process.Pid]; ok {
			u.pgmirror = s.own
		}
	}
	if s, ok := stats[os.Getpid()]; ok {
		u.bench = s.own
	}
	u.machine = machineBusy()
	return u
}

// machineBusy is the busy time of all CPUs from /proc/stat: user, nice,
// system, irq, softirq and steal.
func machineBusy() time.Duration {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var busy time.Duration
	for _, k := range []int{1, 2, 3, 6, 7, 8} {
		n, _ := strconv.ParseInt(f[k], 10, 64)
		busy += time.Duration(n) * clockTick
	}
	return busy
}

type procStat struct {
	ppid     int
	own      time.Duration // utime + stime
	children time.Duration // cutime + cstime
}

func readProcStats() map[int]procStat {
	out := map[int]procStat{}
	paths, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15) cutime(16) cstime(17)
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 15 {
			continue
		}
		num := func(k int) time.Duration {
			n, _ := strconv.ParseInt(f[k], 10, 64)
			return time.Duration(n) * clockTick
		}
		ppid, _ := strconv.Atoi(f[1])
		// f[0] is field 3 (state), so field k is f[k-3].
		out[pid] = procStat{ppid: ppid, own: num(11) + num(12), children: num(13) + num(14)}
	}
	return out
}

func clusterCPU(stats map[int]procStat, c *localpg.Cluster) time.Duration {
	if c == nil {
		return 0
	}
	pm, err := postmasterPID(c)
	if err != nil {
		return 0
	}
	s, ok := stats[pm]
	if !ok {
		return 0
	}
	total := s.own + s.children
	for _, cs := range stats {
		if cs.ppid == pm {
			total += cs.own
		}
	}
	return total
}
