package main

import "log/slog"

// CPU scheduling of the service's threads (SERVICE_CPU_SCHEDULING).
//
// pgmirror moves data in the background, and it often shares its host with
// a database: the embedded catalog, a source or destination, or the source's
// walsender that feeds it. Its Go runtime's threads sleep and wake
// thousands of times a second while goroutines hand work to each other, and
// under Linux's default policy a waking thread preempts whatever runs on its
// core. Under SCHED_BATCH a waking thread does not preempt: it runs when
// the running process blocks or its time slice ends, so pgmirror takes its
// CPU share without cutting into a PostgreSQL process's work, and its own
// threads stop preempting each other. Measured on two shared cores with a
// PostgreSQL 18 source and destination (docs/performance.md): the source's
// walsender was preempted 3-5 times less often during catch-ups, the
// process used 10-25 % less CPU through a 2,000 tx/s load, and that load's
// p99 lag fell from 4-86 ms to 3-4 ms.
const (
	cpuSchedulingBatch  = "batch"
	cpuSchedulingNormal = "normal"
)

// applyCPUScheduling puts the process's threads under SCHED_BATCH when
// setting is cpuSchedulingBatch. A failure (a container whose seccomp
// profile refuses the call) only costs the gain: it is logged and the
// service goes on.
func applyCPUScheduling(setting string, logger *slog.Logger) {
	if setting != cpuSchedulingBatch {
		return
	}
	changed, err := scheduleBatch()
	switch {
	case err != nil:
		logger.Warn("threads left under their scheduling policy: setting SCHED_BATCH failed (set SERVICE_CPU_SCHEDULING=normal to not try)", "error", err)
	case changed:
		logger.Info("threads scheduled as SCHED_BATCH: a waking pgmirror thread does not preempt other processes", "setting", "SERVICE_CPU_SCHEDULING")
	default:
		logger.Debug("threads keep the scheduling policy the process was started with")
	}
}
