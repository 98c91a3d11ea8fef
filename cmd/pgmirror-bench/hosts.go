package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// The separate-hosts modes confine the source cluster, the destination
// cluster (with pgmirror's catalog) and the pgmirror process each to an
// equal CPU share with a cgroup CPU quota, as three hosts of one size
// would be, instead of letting them share every core of the machine. This
// program itself (the loads and the polls) is not confined.

// cpuJail is a cgroup with a CPU quota.
type cpuJail struct {
	dir string
	// procsFile is where a process is moved in: cgroup.procs (v1 and v2).
	procsFile string
}

// cgroupCPURoot finds a writable cgroup hierarchy with the cpu controller
// and says whether it is cgroup v2.
func cgroupCPURoot() (string, bool, error) {
	if _, err := os.Stat("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"); err == nil {
		return "/sys/fs/cgroup/cpu", false, nil
	}
	raw, err := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
	if err == nil && strings.Contains(" "+strings.TrimSpace(string(raw))+" ", " cpu ") {
		// Children get the cpu controller only when the root hands it down.
		if err := os.WriteFile("/sys/fs/cgroup/cgroup.subtree_control", []byte("+cpu"), 0o644); err != nil {
			return "", false, fmt.Errorf("enable the cpu controller for child cgroups: %w", err)
		}
		return "/sys/fs/cgroup", true, nil
	}
	return "", false, errors.New("no cgroup hierarchy with the cpu controller under /sys/fs/cgroup")
}

// newCPUJail creates a cgroup named name that may use cpus CPUs' worth of
// time (a quota per 100 ms period).
func newCPUJail(name string, cpus float64) (*cpuJail, error) {
	root, v2, err := cgroupCPURoot()
	if err != nil {
		return nil, fmt.Errorf("separate-hosts modes confine each party with a cgroup CPU quota (root on Linux): %w", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("pgmirror-bench-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s (separate-hosts modes need root on Linux): %w", dir, err)
	}
	const period = 100000 // µs
	quota := int(cpus * period)
	if v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, period), 0o644)
	} else {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), []byte(strconv.Itoa(period)), 0o644)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), []byte(strconv.Itoa(quota)), 0o644)
		}
	}
	j := &cpuJail{dir: dir, procsFile: filepath.Join(dir, "cgroup.procs")}
	if err != nil {
		j.remove()
		return nil, fmt.Errorf("set the CPU quota of cgroup %s: %w", dir, err)
	}
	return j, nil
}

// add moves the process pid into the jail; processes it starts later are
// in it too.
func (j *cpuJail) add(pid int) error {
	if err := os.WriteFile(j.procsFile, []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return fmt.Errorf("move process %d into cgroup %s: %w", pid, j.dir, err)
	}
	return nil
}

// addCluster moves a cluster's postmaster and its running children into
// the jail; the backends it forks later start there.
func (j *cpuJail) addCluster(c *localpg.Cluster) error {
	pm, err := postmasterPID(c)
	if err != nil {
		return err
	}
	if err := j.add(pm); err != nil {
		return err
	}
	for pid, s := range readProcStats() {
		if s.ppid == pm {
			if err := j.add(pid); err != nil && !errors.Is(err, os.ErrNotExist) {
				// A backend that ended in the meantime cannot be moved.
				if _, serr := os.Stat(fmt.Sprintf("/proc/%d", pid)); serr == nil {
					return err
				}
			}
		}
	}
	return nil
}

// remove moves what is left in the jail back to the root and deletes it.
func (j *cpuJail) remove() {
	if j == nil {
		return
	}
	raw, _ := os.ReadFile(j.procsFile)
	parent := filepath.Join(filepath.Dir(j.dir), "cgroup.procs")
	for _, pid := range strings.Fields(string(raw)) {
		_ = os.WriteFile(parent, []byte(pid), 0o644)
	}
	_ = os.Remove(j.dir)
}

// postmasterPID reads the postmaster's process id from postmaster.pid.
func postmasterPID(c *localpg.Cluster) (int, error) {
	raw, err := os.ReadFile(filepath.Join(c.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read the postmaster's pid: %w", err)
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("read the postmaster's pid from %s: %w", c.DataDir(), err)
	}
	return pm, nil
}

// cpuJailsWork reports whether this process can create CPU jails: a
// cgroup with a quota is created and removed.
func cpuJailsWork() error {
	j, err := newCPUJail("probe", hostCPUs)
	if err != nil {
		return err
	}
	j.remove()
	return nil
}

// hostJails are the separate-hosts mode's jails, one per party.
type hostJails struct {
	source, destination, pgmirror *cpuJail
}

// confineClusters puts each cluster into a jail of its own with cpus CPUs.
func (b *bench) confineClusters(cpus float64) error {
	var err error
	if b.jails.source, err = newCPUJail("source", cpus); err != nil {
		return err
	}
	if b.jails.destination, err = newCPUJail("destination", cpus); err != nil {
		return err
	}
	if b.jails.pgmirror, err = newCPUJail("pgmirror", cpus); err != nil {
		return err
	}
	if err := b.jails.source.addCluster(b.src); err != nil {
		return err
	}
	return b.jails.destination.addCluster(b.dst)
}

// removeJails deletes the jails once everything in them stopped.
func (b *bench) removeJails() {
	b.jails.source.remove()
	b.jails.destination.remove()
	b.jails.pgmirror.remove()
}
