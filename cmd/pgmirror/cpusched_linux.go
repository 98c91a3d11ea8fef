package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Linux scheduling policies (sched(7)).
const (
	schedOther = 0
	schedBatch = 3
)

// scheduleBatch puts every thread of the process under SCHED_BATCH, unless
// the process was started under another policy than SCHED_OTHER (chrt),
// which it then keeps: it reports whether it changed anything. Threads the
// Go runtime starts later are clones of these and inherit the policy; a
// thread started while the threads are walked is found by the next walk.
// The nice value stays what it was (sched_setscheduler keeps it).
func scheduleBatch() (bool, error) {
	self := os.Getpid()
	policy, err := schedPolicy(self)
	if err != nil {
		return false, err
	}
	if policy != schedOther {
		return false, nil
	}
	set := map[int]bool{}
	for range 5 {
		tids, err := threadIDs()
		if err != nil {
			return false, err
		}
		changed := false
		for _, tid := range tids {
			if set[tid] {
				continue
			}
			if err := setSchedPolicy(tid, schedBatch); err != nil && !errors.Is(err, syscall.ESRCH) {
				return false, fmt.Errorf("set SCHED_BATCH on thread %d: %w", tid, err)
			}
			set[tid], changed = true, true
		}
		if !changed {
			break
		}
	}
	return true, nil
}

// threadIDs lists the process's threads.
func threadIDs() ([]int, error) {
	entries, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list the process's threads: %w", err)
	}
	tids := make([]int, 0, len(entries))
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

func schedPolicy(tid int) (int, error) {
	r, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_GETSCHEDULER, uintptr(tid), 0, 0)
	if errno != 0 {
		return 0, fmt.Errorf("read the scheduling policy of thread %d: %w", tid, errno)
	}
	return int(r), nil
}

func setSchedPolicy(tid, policy int) error {
	var param struct{ priority int32 } // struct sched_param: 0 for the normal policies
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(tid), uintptr(policy), uintptr(unsafe.Pointer(&param)))
	if errno != 0 {
		return errno
	}
	return nil
}
