package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// rssUse is the resident set size of the pgmirror process during a
// measurement, in bytes.
type rssUse struct {
	start, peak int64
	// hwm: the kernel's high-water mark was reset at the start and read at
	// the end, so peak includes spikes between two samples.
	hwm     bool
	samples int
}

// rssInterval is how often the sampler reads /proc/PID/status.
const rssInterval = 50 * time.Millisecond

// rssSampler follows a process's VmRSS while a measurement runs.
type rssSampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	res  rssUse
}

// sampleRSS starts sampling the resident set size of process pid every
// 50 ms. It first resets the process's VmHWM to its current RSS (writing 5
// to /proc/PID/clear_refs, Linux 4.0 and later), so that VmHWM at the end
// is this measurement's peak; if that fails, the peak is the samples'.
// Linux only; elsewhere it reads zeros.
func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	s.res.hwm = resetHWM(pid) == nil
	s.res.start, _ = readStatusKB(pid, "VmRSS:")
	s.res.peak = s.res.start
	go func() {
		defer close(s.done)
		t := time.NewTicker(rssInterval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				if v, err := readStatusKB(pid, "VmRSS:"); err == nil {
					s.res.samples++
					s.res.peak = max(s.res.peak, v)
				}
			}
		}
	}()
	return s
}

// end stops the sampler and returns what it saw.
func (s *rssSampler) end() rssUse {
	close(s.stop)
	<-s.done
	if v, err := readStatusKB(s.pid, "VmRSS:"); err == nil {
		s.res.samples++
		s.res.peak = max(s.res.peak, v)
	}
	if s.res.hwm {
		if v, err := readStatusKB(s.pid, "VmHWM:"); err == nil {
			s.res.peak = max(s.res.peak, v)
		} else {
			s.res.hwm = false
		}
	}
	return s.res
}

func resetHWM(pid int) error {
	f, err := os.OpenFile(fmt.Sprintf("/proc/%d/clear_refs", pid), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte("5"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readStatusKB reads a "Name:  123 kB" line of /proc/PID/status, in bytes.
func readStatusKB(pid int, name string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte(name)) {
			continue
		}
		f := bytes.Fields(line[len(name):])
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("/proc/%d/status: unexpected %q", pid, line)
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		return n << 10, nil
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s line", pid, name)
}

// mb formats bytes in MB of 2^20 bytes (the unit of the RSS target).
func mb(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/(1<<20)) }
