package jobs

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/defaults"
	"github.com/pgmirror/pgmirror/metrics"
)

// Config configures the River client and the workers of one pgmirror process.
type Config struct {
	// Metrics receives the data-plane metrics (batches, failures, retries,
	// snapshot progress); nil records nothing.
	Metrics *metrics.Registry
	// Store is the catalog.
	Store *db.Store
	// Locks holds the locks of the mirrors this process runs, on one
	// catalog connection, and hands them their control requests. Its Run
	// must be going while the client works.
	Locks *db.LockHolder
	// Logger receives the process log (mirror logs go to the catalog).
	Logger *slog.Logger
	// MirrorWorkers is how many mirrors this process runs at once. Default 200.
	MirrorWorkers int
	// LogRetention is how long mirror log entries are kept. Default 7 days.
	LogRetention time.Duration
	// HistoryRetention is how long the lag and throughput samples of
	// mirrors (mirror_metrics_history) are kept. Default 24 hours.
	HistoryRetention time.Duration
	// HistoryInterval is how often each mirror this process streams gets a
	// history sample. Default 30 s.
	HistoryInterval time.Duration
	// SupervisorInterval is how often the leader looks for mirrors that
	// nobody runs and deleted mirrors without a cleanup job. Default 30 s:
	// every replica also looks for mirrors without a worker every 2 s
	// (balance.go).
	SupervisorInterval time.Duration
	// HeartbeatTimeout is how long a replication stream may stay silent
	// before the mirror fails with "Heartbeat timeout". Default 2 minutes.
	HeartbeatTimeout time.Duration
	// RunBudget bounds one run job's CDC phase; the job then hands the
	// mirror back to the queue (usually to itself). Default 10 minutes.
	RunBudget time.Duration
	// MaxFailures is the number of consecutive failures after which a
	// mirror is stopped. Default 2016 (a week of retries at the 5 min cap).
	MaxFailures int
	// SlotMonitorInterval is how often the leader has every mirror's
	// replication slot read on its source (slot_lag_bytes, slot_wal_status).
	// Default 15 s.
	SlotMonitorInterval time.Duration
	// SequenceSyncInterval is how often a running mirror's destination
	// sequences are set in step with the source's. Default 30 s.
	SequenceSyncInterval time.Duration
	// VerifyScheduleInterval is how often the leader starts the due
	// verifications of mirrors with a verification interval. Default 30 s.
	VerifyScheduleInterval time.Duration
	// CutoverChecksumMax is the largest source table in bytes (pg_table_size)
	// whose checksums a cut-over compares when the request does not say
	// (verify unset); larger ones get row counts only, named in the
	// cut-over's warnings. Default defaults.CutoverChecksumMaxBytes (1 GiB); 0 also
	// means the default.
	CutoverChecksumMax int64
	// SchemaCheckInterval is how often a running mirror that maps whole
	// schemas looks for tables created or dropped in them on the source.
	// Default 5 s.
	SchemaCheckInterval time.Duration
	// ClientID is the River client id (ClientID makes one from the
	// replica's name); Locks records it in the replica's row so that the
	// jobs the process leaves running when it dies are rescued at once
	// (fleet.go). Empty: River's own.
	ClientID string

	// Shutdown, when set, is bound to the client's balancer: the caller
	// hands the replica's mirrors over with it as the process stops
	// (handover.go).
	Shutdown *Shutdown

	// LagBoard, when set, receives every lag measure of this replica's
	// streams as they are taken, for its API (db.LagBoard.Newest).
	LagBoard *db.LagBoard

	// runStore and runLocks are Store and Locks as mirror runs see them
	// (seams.go); nil: Store and Locks themselves. Tests set them to wrap
	// the real ones and inject failures.
	runStore runStore
	runLocks runLocks
	// hooks are the points where a test fails a run's step on purpose
	// (seams.go); production leaves them unset.
	hooks runHooks

	lags    *lagWriter       // set by NewClient
	balance *balancer        // set by NewClient
	sources *cdc.SourceWatch // set by NewClient: the source polls shared by the runs of this process
	dests   *cdc.DestWatch   // set by NewClient: the destination flush polls shared by the runs of this process
}

func (c Config) withDefaults() Config {
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.runStore == nil && c.Store != nil {
		c.runStore = c.Store
	}
	if c.runLocks == nil && c.Locks != nil {
		c.runLocks = c.Locks
	}
	c.MirrorWorkers = cmp.Or(c.MirrorWorkers, defaults.MirrorWorkers)
	c.LogRetention = cmp.Or(c.LogRetention, defaults.LogRetention)
	c.HistoryRetention = cmp.Or(c.HistoryRetention, defaults.MetricsHistoryRetention)
	c.HistoryInterval = cmp.Or(c.HistoryInterval, defaults.MetricsHistoryInterval)
	c.SupervisorInterval = cmp.Or(c.SupervisorInterval, defaults.SupervisorInterval)
	c.HeartbeatTimeout = cmp.Or(c.HeartbeatTimeout, defaults.HeartbeatTimeout)
	c.RunBudget = cmp.Or(c.RunBudget, defaults.RunBudget)
	c.MaxFailures = cmp.Or(c.MaxFailures, defaults.MaxFailures)
	c.SlotMonitorInterval = cmp.Or(c.SlotMonitorInterval, defaults.SlotMonitorInterval)
	c.CutoverChecksumMax = cmp.Or(c.CutoverChecksumMax, defaults.CutoverChecksumMaxBytes)
	c.SequenceSyncInterval = cmp.Or(c.SequenceSyncInterval, defaults.SequenceSyncInterval)
	c.SchemaCheckInterval = cmp.Or(c.SchemaCheckInterval, defaults.SchemaCheckInterval)
	return c
}

// NewClient returns a River client with every pgmirror worker registered and
// the periodic supervisor, slot monitor and log pruning jobs scheduled. Every replica
// registers every kind (River's rescuer discards jobs of unknown kinds).
func NewClient(pool *pgxpool.Pool, cfg Config) (*river.Client[pgx.Tx], error) {
	if cfg.Store == nil || cfg.Locks == nil {
		return nil, fmt.Errorf("jobs: Config.Store and Config.Locks are required")
	}
	cfg = cfg.withDefaults()
	cfg.lags = newLagWriter(cfg.Store, cfg.LagBoard, cfg.Logger, cfg.Locks.Name(), cfg.HistoryInterval)
	go cfg.lags.loop(cfg.Locks.Done())
	cfg.sources = cdc.NewSourceWatch()
	cfg.dests = cdc.NewDestWatch()
	cfg.balance = newBalancer(cfg)
	if cfg.Shutdown != nil {
		cfg.Shutdown.b = cfg.balance
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &MirrorRunWorker{cfg: cfg})
	river.AddWorker(workers, &MirrorCleanupWorker{cfg: cfg})
	river.AddWorker(workers, &SupervisorWorker{cfg: cfg})
	river.AddWorker(workers, &LogPruneWorker{cfg: cfg})
	river.AddWorker(workers, &SlotMonitorWorker{cfg: cfg})
	river.AddWorker(workers, &VerifyWorker{cfg: cfg})
	river.AddWorker(workers, &VerifyScheduleWorker{cfg: cfg})

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:      cfg.ClientID,
		Logger:  riverLogger(cfg.Logger),
		Workers: workers,
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: 10},
			QueueMirrors:       {MaxWorkers: cfg.MirrorWorkers},
			// Its jobs come from this process and the replicas handing it
			// mirrors, announced by notification; but River announces
			// one insert per queue and FetchCooldown only (notifylimiter):
			// the second of two mirrors handed to it within 50 ms waits for
			// the poll, which must come before the sender counts the
			// hand-off as over (handoffFresh) and adopts the mirror back.
			cfg.balance.queue: {MaxWorkers: cfg.MirrorWorkers, FetchPollInterval: adoptQueuePoll},
		},
		FetchCooldown: 50 * time.Millisecond,
		// New jobs arrive by notification at once; the poll only backs
		// that up, and costs the catalog a query per queue each time.
		FetchPollInterval: 2 * time.Second,
		// The mirror run job bounds itself (RunBudget); the jobs of a
		// process that died are rescued by the replicas within seconds of
		// its lock connection's end (fleet.go), long before this.
		RescueStuckJobsAfter: cfg.RunBudget + 30*time.Minute,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.SupervisorInterval),
				func() (river.JobArgs, *river.InsertOpts) {
					return SupervisorArgs{}, periodicInsertOpts(cfg.SupervisorInterval)
				},
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.SlotMonitorInterval),
				func() (river.JobArgs, *river.InsertOpts) {
					return SlotMonitorArgs{}, periodicInsertOpts(cfg.SlotMonitorInterval)
				},
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.verifySchedulePeriod()),
				func() (river.JobArgs, *river.InsertOpts) {
					return VerifyScheduleArgs{}, periodicInsertOpts(cfg.verifySchedulePeriod())
				},
				&river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
				func() (river.JobArgs, *river.InsertOpts) { return LogPruneArgs{}, nil },
				&river.PeriodicJobOpts{RunOnStart: true}),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create River client: %w", err)
	}
	cfg.balance.client.Store(client)
	go cfg.balance.loop(cfg.Locks.Done())
	go cfg.balance.watchDepartures(cfg.Locks.Done())
	return client, nil
}

// adoptQueuePoll is how often a replica polls its adoption queue: well
// within handoffFresh.
const adoptQueuePoll = time.Second

type pgxTx = pgx.Tx

// ClientID is the River client id of a replica named replica started at
// started: the name with characters other than letters, digits, '-' and
// '_' replaced by '_', and the start time, as River's own ids are made
// (unique among the processes that share the catalog, also when a
// restarted container has the same host name and pid).
func ClientID(replica string, started time.Time) string {
	b := []byte(replica)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > 60 {
		b = b[:60]
	}
	return string(b) + "_" + strings.NewReplacer(".", "_", ":", "_").Replace(started.UTC().Format("2006_01_02T15:04:05.000000"))
}
