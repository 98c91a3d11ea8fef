package tablesync

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/defaults"
	"github.com/pgmirror/pgmirror/engine/exprcheck"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Defaults for the Config fields left zero: the mirror settings' defaults.
const (
	DefaultRowsPerPartition   = defaults.SnapshotRowsPerPartition
	DefaultMaxParallelWorkers = defaults.SnapshotMaxParallelWorkers
	DefaultTablesInParallel   = defaults.SnapshotTablesInParallel
)

// copyDataSize is the most COPY data pgconn's CopyFrom sends in one CopyData
// message: it reads into a 64 KiB buffer that starts with the 5-byte message
// header.
const copyDataSize = 64<<10 - 5

// pipeBufferSize is how many COPY bytes a stream's source side gathers
// before handing them to its destination side. pgconn's CopyTo writes one
// CopyData message, one row, per Write, and its CopyFrom sends one CopyData
// message per Read: without a buffer in between every row would become a
// message of its own (3x slower, measured with the bench's COPY pipe, which
// uses 64 KiB). A multiple of copyDataSize gives full messages only; four
// of them make the two goroutines trade places four times less often.
const pipeBufferSize = 4 * copyDataSize

// Config configures one snapshot run.
type Config struct {
	// Source and Dest are the connection configurations of the source and
	// destination databases. Run works on copies and never changes them.
	Source, Dest *pgx.ConnConfig
	// SnapshotName is the snapshot exported by CREATE_REPLICATION_SLOT ...
	// EXPORT_SNAPSHOT; every reading transaction imports it, so the copy
	// shows the source exactly as of the slot's consistent point. The
	// exporting replication connection must stay open (and idle) until Run
	// returns. "" reads the current state instead (tests, or a resync without
	// a new slot).
	SnapshotName string
	// Tables are the mappings to copy. Their destination tables must exist
	// (schemasync.EnsureTables); Run truncates them first unless Existing
	// says otherwise.
	Tables []change.Mapping
	// Existing says, by destination table, what Run does with the rows a
	// table holds before its copy; a table not in it is truncated
	// (TruncateRows). The checks and truncations of all tables happen in
	// one destination transaction before any row is copied, and a refused
	// table stops the run before anything is truncated.
	Existing map[change.TableName]ExistingRows
	// Taken, when set, is called once the destination tables have been
	// checked and emptied (that transaction committed), before the first
	// row is copied: from then on, the rows in them are the run's.
	Taken func(ctx context.Context) error
	// RowsPerPartition is the approximate number of rows per partition, the
	// rows committed on the destination at once (default
	// DefaultRowsPerPartition); a partition spans at least 2 MiB of pages.
	RowsPerPartition int
	// MaxParallelWorkers bounds the streams copied at once over all tables
	// (default DefaultMaxParallelWorkers). Each worker holds one source and
	// one destination connection. It is an upper bound: one table is
	// copied by one worker unless it is large (see the package
	// documentation).
	MaxParallelWorkers int
	// TablesInParallel bounds the tables being copied at once (default
	// DefaultTablesInParallel).
	TablesInParallel int
	// Logger receives progress at debug and info level (default: discard).
	Logger *slog.Logger
	// SourceConn and DestConn, when both set, are the caller's open
	// connections to the source and the destination (of the same users and
	// databases as Source and Dest), which Run uses as its first
	// worker: it plans, truncates and copies partitions over them without
	// opening connections of its own, which saves a connection setup on
	// each side (a fork and a SCRAM exchange) and catalog reads on fresh
	// backends before the first row moves. Their session settings stay as
	// they were: each transaction sets Run's with SET LOCAL. Nothing else
	// may use them until Run returns; Run leaves them open and idle, or
	// closed after an error that broke them. Unset, Run connects its first
	// worker itself.
	SourceConn, DestConn *pgx.Conn
	// OriginMirrorUID, when set, marks every transaction Run commits on the
	// destination (the truncate and every partition) with a copy origin of
	// that mirror (engine/origin.SetupCopy), one per destination connection,
	// dropped when the connection is done: a mirror reading from the
	// destination then leaves the copy out. The destination user must be
	// allowed to use replication origins (origin.Permitted).
	OriginMirrorUID string
	// SourceColumnsMirrorUID, when set, records each table's source
	// columns as of the snapshot (by attnum, with names and types) as that
	// mirror's known columns (positions.SetSourceColumns), in the
	// transaction that empties the destination tables: CDC compares the
	// table's first description in the stream with them, so that a column
	// renamed or dropped before any row of the table was streamed is
	// recognized as such.
	SourceColumnsMirrorUID string
	// Prepared, when set, are the shapes (ReadShapes) of source tables as
	// read before their destination tables were prepared for this copy.
	// A table whose shape in the snapshot differs fails the run with a
	// SourceChangedError before anything is truncated or copied.
	Prepared Shapes
}

// Reporter receives the snapshot's progress. Its methods are called from
// worker goroutines, so implementations must be safe for concurrent use. An
// error returned by a method fails the run.
type Reporter interface {
	// TableStarted is called before the first partition of t is copied.
	TableStarted(ctx context.Context, t change.Mapping, totalPartitions int) error
	// PartitionDone is called when partition (numbered from 1 to
	// totalPartitions) of t has been committed on the destination.
	PartitionDone(ctx context.Context, t change.Mapping, partition, totalPartitions int, rows int64, d time.Duration) error
	// TableDone is called when every partition of t has been committed.
	TableDone(ctx context.Context, t change.Mapping, rows int64, d time.Duration) error
}

// EstimateReporter is implemented by Reporters that want the source's
// estimate of a table's rows (pg_class.reltuples, or a sample when the
// table has no statistics). EstimateKnown is called just before
// TableStarted.
type EstimateReporter interface {
	EstimateKnown(ctx context.Context, t change.Mapping, rows int64) error
}

// ProgressReporter is implemented by Reporters that want to follow a
// table's copy within its partitions: RowsStreamed is called every
// progressEvery while the table is copied, with the rows sent to the
// destination so far (committed or in a partition's open COPY; a failed
// partition's rows are counted too, and the snapshot starts over then).
type ProgressReporter interface {
	RowsStreamed(ctx context.Context, t change.Mapping, rows int64)
}

// progressEvery is how often a ProgressReporter hears of a table's copy; a
// variable for tests.
var progressEvery = 2 * time.Second

// IndexReporter is implemented by Reporters that want to know what was
// created on a destination table after its copy (see
// schemasync.AddIndexesAndConstraints): Run calls TableIndexed between the
// table's last partition and TableDone when it created or skipped
// something.
type IndexReporter interface {
	TableIndexed(ctx context.Context, t change.Mapping, ddl, warnings []string, d time.Duration) error
}

var snapshotNameRE = regexp.MustCompile(`^[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+$`)

// errDestinationFailed closes the pipe of a stream whose destination side
// failed, so that the source side stops.
var errDestinationFailed = errors.New("destination COPY failed")

// Run copies every table of cfg from the source to the destination.
//
// It plans every table (reading the source in the snapshot), checks and
// truncates the destination tables of the run as cfg.Existing says (by
// default all: a restarted snapshot starts clean), and
// copies each table in partitions of about cfg.RowsPerPartition rows (per
// leaf partition of a partitioned table): at most cfg.MaxParallelWorkers
// streams at once, from at most cfg.TablesInParallel tables at once, and of
// one table only as many at once as its size warrants (one below 1 GiB; see
// the package documentation). Each stream pipes COPY TO STDOUT from the
// source straight into COPY FROM STDIN on the destination, in binary format
// when the column types are identical and portable
// (schemasync.BinaryCompatible), in text format otherwise. Each partition
// commits on the destination on its own with synchronous_commit off: the
// caller must record that the snapshot finished only after Run returns nil,
// and must treat an interrupted snapshot as not done (running it again
// truncates and starts over).
//
// The first failure cancels the other workers; the error names the table and
// partitions.
func Run(ctx context.Context, cfg Config, rep Reporter) error {
	cfg.RowsPerPartition = max(cmp.Or(cfg.RowsPerPartition, DefaultRowsPerPartition), 1)
	cfg.MaxParallelWorkers = max(cmp.Or(cfg.MaxParallelWorkers, DefaultMaxParallelWorkers), 1)
	cfg.TablesInParallel = max(cmp.Or(cfg.TablesInParallel, DefaultTablesInParallel), 1)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if rep == nil {
		rep = nopReporter{}
	}
	if cfg.SnapshotName != "" && !snapshotNameRE.MatchString(cfg.SnapshotName) {
		return fmt.Errorf("snapshot: invalid snapshot name %q", cfg.SnapshotName)
	}
	srcCfg, dstCfg := cfg.Source.Copy(), cfg.Dest.Copy()
	r := &run{cfg: cfg, rep: rep, log: cfg.Logger, srcCfg: srcCfg, dstCfg: dstCfg,
		srcSettings: sessionSettings(false), dstSettings: sessionSettings(true)}
	applySettings(srcCfg, r.srcSettings)
	applySettings(dstCfg, r.dstSettings)

	// The worker pool. The first worker is handed out first: it plans, and
	// copies the first stream without waiting for new connections.
	first := &worker{}
	if cfg.SourceConn != nil && cfg.DestConn != nil {
		first = &worker{src: cfg.SourceConn, dst: cfg.DestConn, borrowed: true}
		if err := r.markOrigin(ctx, first); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	workers := make(chan *worker, cfg.MaxParallelWorkers)
	workers <- first
	for range cfg.MaxParallelWorkers - 1 {
		workers <- &worker{}
	}
	defer func() {
		for range cfg.MaxParallelWorkers {
			(<-workers).close(context.WithoutCancel(ctx))
		}
	}()

	waves, err := r.prepare(ctx, first)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, jobs := range waves {
		if err := r.copyAll(ctx, jobs, workers); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// sessionSettings returns the session parameters that text COPY output and
// input depend on (engine/session's, the same as every pgmirror session's),
// and those that are safe to relax for a bulk load. Own connections start
// with them; on borrowed connections each transaction sets them with SET
// LOCAL.
func sessionSettings(dest bool) map[string]string {
	p := session.Settings()
	p["statement_timeout"] = "0"
	p["idle_in_transaction_session_timeout"] = "0"
	if dest {
		// Safe: the snapshot counts as done only once Run has returned, after
		// every partition's commit; a crash before that means starting over.
		p["synchronous_commit"] = "off"
	}
	return p
}

func applySettings(c *pgx.ConnConfig, settings map[string]string) {
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	maps.Copy(c.RuntimeParams, settings)
	if _, ok := c.RuntimeParams["application_name"]; !ok {
		c.RuntimeParams["application_name"] = "pgmirror snapshot"
	}
}

// setLocal returns SET LOCAL statements for settings, in a stable order,
// each after a semicolon: to be appended to a BEGIN.
func setLocal(settings map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(settings)) {
		b.WriteString("; " + session.SetLocal(k, settings[k]))
	}
	return b.String()
}

type run struct {
	cfg                      Config
	rep                      Reporter
	log                      *slog.Logger
	srcCfg, dstCfg           *pgx.ConnConfig
	srcSettings, dstSettings map[string]string
}

// prepare plans every table in the snapshot on first's connections
// (connecting them unless they are borrowed), checks and truncates the
// destination tables (prepareDestination) and returns the tables in waves to copy one after the other: one
// wave when the copy may run with session_replication_role = replica (the
// workers then set it), otherwise waves in the order of the destination's
// foreign keys.
//
// This is the time before the first row moves, so the source is planned
// (in the snapshot) while the destination is described, and own
// connections to both open at once.
func (r *run) prepare(ctx context.Context, first *worker) ([][]*tableJob, error) {
	start := time.Now()
	if err := r.connect(ctx, first); err != nil {
		return nil, err
	}
	connected := time.Since(start)

	var srcs []sourceTable
	var dsts []schemasync.Table
	var cpus int
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		tx, err := r.beginSource(gctx, first.src)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(gctx)) //nolint:errcheck // read-only
		if first.borrowed {
			if _, err := tx.Exec(gctx, strings.TrimPrefix(setLocal(r.srcSettings), "; ")); err != nil {
				return fmt.Errorf("set up planning transaction: %w", err)
			}
		}
		if srcs, err = planSource(gctx, tx, r.cfg.Tables); err != nil {
			return err
		}
		if err := tx.Rollback(gctx); err != nil {
			return fmt.Errorf("end planning transaction: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		if dsts, err = planDest(gctx, first.dst, r.cfg.Tables); err != nil {
			return err
		}
		cpus, err = destinationCPUs(gctx, first.dst)
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if changed := changedSources(r.cfg.Tables, srcs, r.cfg.Prepared); len(changed) > 0 {
		return nil, &SourceChangedError{Tables: changed}
	}
	jobs, err := makeJobs(r.cfg.Tables, srcs, dsts, limits{
		rowsPerPartition: r.cfg.RowsPerPartition, maxWorkers: r.cfg.MaxParallelWorkers, localCPUs: cpus})
	if err != nil {
		return nil, err
	}
	planned := time.Since(start)

	if len(jobs) > 0 {
		if err := r.prepareDestination(ctx, first, jobs); err != nil {
			return nil, err
		}
		if r.cfg.Taken != nil {
			if err := r.cfg.Taken(ctx); err != nil {
				return nil, err
			}
		}
	}
	for _, j := range jobs {
		r.log.InfoContext(ctx, "snapshot planned", "table", j.m.Source.String(), "destination", j.m.Destination.String(),
			"partitions", j.partitions, "streams", len(j.streams), "writers", j.writers, "bytes", j.bytes, "binary", j.binary)
	}
	// Own connections keep the role; borrowed ones set it per transaction.
	replica, err := replicaRoleAllowed(ctx, first.dst, !first.borrowed)
	if err != nil {
		return nil, err
	}
	r.log.DebugContext(ctx, "snapshot prepared", "tables", len(jobs), "borrowed_connections", first.borrowed,
		"destination_cpus", cpus, "connected", connected, "planned", planned, "duration", time.Since(start))
	if replica {
		r.dstSettings["session_replication_role"] = "replica"
		r.dstCfg.RuntimeParams["session_replication_role"] = "replica"
		return [][]*tableJob{jobs}, nil
	}
	r.log.WarnContext(ctx, "destination user may not set session_replication_role: copying tables in the order of the destination's foreign keys, with its triggers firing")
	return foreignKeyWaves(ctx, first.dst, jobs)
}

// beginSource starts a repeatable-read, read-only transaction on conn that
// sees the exported snapshot.
func (r *run) beginSource(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin source transaction: %w", err)
	}
	if r.cfg.SnapshotName != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+sqlquote.Literal(r.cfg.SnapshotName)); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("import snapshot %s: %w", r.cfg.SnapshotName, err)
		}
	}
	return tx, nil
}

// copyAll copies the streams of jobs with the configured parallelism,
// taking connections from workers.
func (r *run) copyAll(ctx context.Context, jobs []*tableJob, workers chan *worker) error {
	g, gctx := errgroup.WithContext(ctx)
	tables := make(chan struct{}, r.cfg.TablesInParallel)
	for _, job := range jobs {
		select {
		case tables <- struct{}{}:
		case <-gctx.Done():
		}
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			defer func() { <-tables }()
			return r.copyTable(gctx, job, workers)
		})
	}
	return g.Wait()
}

// copyTable copies the streams of job, at most job.writers at once.
func (r *run) copyTable(ctx context.Context, job *tableJob, workers chan *worker) error {
	start := time.Now()
	total := job.partitions
	if er, ok := r.rep.(EstimateReporter); ok {
		if err := er.EstimateKnown(ctx, job.m, job.estimate); err != nil {
			return fmt.Errorf("table %s: report estimate: %w", job.m.Source, err)
		}
	}
	if err := r.rep.TableStarted(ctx, job.m, total); err != nil {
		return fmt.Errorf("table %s: report start: %w", job.m.Source, err)
	}
	r.log.InfoContext(ctx, "snapshot of table started", "table", job.m.Source.String(), "partitions", total,
		"streams", len(job.streams), "writers", job.writers)
	var rows atomic.Int64
	endProgress := r.reportProgress(ctx, job)
	defer endProgress()
	g, gctx := errgroup.WithContext(ctx)
	writers := make(chan struct{}, max(job.writers, 1))
	next := 1 // the number of the next stream's first partition
	for _, st := range job.streams {
		// A writer slot of this table first, then a worker: a table at its
		// limit leaves the free workers to the other tables.
		select {
		case writers <- struct{}{}:
		case <-gctx.Done():
		}
		if gctx.Err() != nil {
			break
		}
		var w *worker
		select {
		case w = <-workers:
		case <-gctx.Done():
		}
		if w == nil {
			break
		}
		first := next
		next += st.parts
		g.Go(func() error {
			defer func() { workers <- w; <-writers }()
			done := func(n int, copied int64, d time.Duration) error {
				rows.Add(copied)
				r.log.DebugContext(gctx, "snapshot partition done", "table", job.m.Source.String(),
					"partition", n, "partitions", total, "rows", copied, "duration", d)
				if err := r.rep.PartitionDone(gctx, job.m, n, total, copied, d); err != nil {
					return fmt.Errorf("report: %w", err)
				}
				return nil
			}
			if err := r.copyStream(gctx, w, job, st, first, done); err != nil {
				w.close(context.WithoutCancel(gctx))
				return fmt.Errorf("table %s %s: %w", job.m.Source, partitionRange(first, st.parts, total), err)
			}
			return nil
		})
	}
	err := g.Wait()
	endProgress() // no progress report after the copy: TableDone has the exact count
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("table %s: %w", job.m.Source, err)
	}
	if err := r.addIndexes(ctx, job, workers); err != nil {
		return fmt.Errorf("table %s: %w", job.m.Source, err)
	}
	d := time.Since(start)
	r.log.InfoContext(ctx, "snapshot of table done", "table", job.m.Source.String(), "rows", rows.Load(), "duration", d)
	if err := r.rep.TableDone(ctx, job.m, rows.Load(), d); err != nil {
		return fmt.Errorf("table %s: report done: %w", job.m.Source, err)
	}
	return nil
}

// reportProgress reports the rows streamed of job every progressEvery,
// when the reporter takes progress, until the function it returns is
// called (any number of times) or ctx ends.
func (r *run) reportProgress(ctx context.Context, job *tableJob) (end func()) {
	pr, ok := r.rep.(ProgressReporter)
	if !ok {
		return func() {}
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				pr.RowsStreamed(ctx, job.m, job.streamed.Load())
			}
		}
	}()
	return func() { once.Do(func() { close(stop); <-done }) }
}

// addIndexes creates the source's check constraints and non-unique indexes
// on the destination table of job, when pgmirror created it, once its rows
// are in (schemasync.AddIndexesAndConstraints with AfterCopy), over a
// worker's connections.
func (r *run) addIndexes(ctx context.Context, job *tableJob, workers chan *worker) error {
	var w *worker
	select {
	case w = <-workers:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { workers <- w }()
	if err := r.connect(ctx, w); err != nil {
		return err
	}
	start := time.Now()
	ddl, warnings, err := schemasync.AddIndexesAndConstraints(ctx, w.src, w.dst, job.m, schemasync.AfterCopy)
	if err != nil {
		w.close(context.WithoutCancel(ctx))
		return fmt.Errorf("add constraints and indexes after the copy: %w", err)
	}
	if len(ddl) == 0 && len(warnings) == 0 {
		return nil
	}
	d := time.Since(start)
	r.log.InfoContext(ctx, "constraints and indexes created after the copy", "table", job.m.Destination.String(),
		"ddl", ddl, "warnings", warnings, "duration", d)
	if ir, ok := r.rep.(IndexReporter); ok {
		if err := ir.TableIndexed(ctx, job.m, ddl, warnings, d); err != nil {
			return fmt.Errorf("report constraints and indexes: %w", err)
		}
	}
	return nil
}

// partitionRange names the partitions of a stream in an error.
func partitionRange(first, parts, total int) string {
	if parts == 1 {
		return fmt.Sprintf("partition %d/%d", first, total)
	}
	return fmt.Sprintf("partitions %d-%d/%d", first, first+parts-1, total)
}

// worker is a pair of connections that copies one stream at a time. Its
// connections are opened on first use and reused for later streams.
type worker struct {
	src, dst *pgx.Conn
	// origin is the copy origin that marks dst's transactions ("" for none).
	origin string
	// borrowed: the caller's connections (Config.SourceConn and DestConn).
	// They keep their session settings (each transaction sets tablesync's
	// with SET LOCAL) and are never closed here unless broken.
	borrowed bool
}

// close closes w's connections, or ends the transactions left open on
// borrowed ones, and leaves w unconnected.
func (w *worker) close(ctx context.Context) {
	if w.origin != "" && w.dst != nil && !w.dst.IsClosed() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if w.dst.PgConn().TxStatus() != 'I' {
			_, _ = w.dst.Exec(rctx, "ROLLBACK")
		}
		// Left behind on failure: the mirror's deletion drops it, and the
		// next copy may use it again.
		_ = origin.Release(rctx, w.dst, w.origin)
		cancel()
	}
	for _, c := range []*pgx.Conn{w.src, w.dst} {
		switch {
		case c == nil || c.IsClosed():
		case w.borrowed:
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if c.PgConn().TxStatus() != 'I' {
				if _, err := c.Exec(rctx, "ROLLBACK"); err != nil {
					c.Close(rctx)
				}
			}
			cancel()
		default:
			c.Close(ctx)
		}
	}
	*w = worker{}
}

// connect opens w's missing connections, both at once.
func (r *run) connect(ctx context.Context, w *worker) error {
	var g errgroup.Group
	if w.src == nil {
		g.Go(func() error {
			conn, err := session.Connect(ctx, r.srcCfg)
			if err != nil {
				return fmt.Errorf("connect to source: %w", err)
			}
			w.src = conn
			return nil
		})
	}
	if w.dst == nil {
		g.Go(func() error {
			conn, err := session.Connect(ctx, r.dstCfg)
			if err != nil {
				return fmt.Errorf("connect to destination: %w", err)
			}
			w.dst = conn
			return r.markOrigin(ctx, w)
		})
	}
	return g.Wait()
}

// markOrigin marks the transactions of w's destination connection with a
// copy origin, when the run has one (Config.OriginMirrorUID).
func (r *run) markOrigin(ctx context.Context, w *worker) error {
	if r.cfg.OriginMirrorUID == "" {
		return nil
	}
	name, err := origin.SetupCopy(ctx, w.dst, r.cfg.OriginMirrorUID)
	if errors.Is(err, origin.ErrNoFreeState) {
		// Copying unmarked beats failing the copy: the loop check at create
		// time still refuses an opposite live mirror over the same tables.
		r.log.Warn("copying without marking the destination's writes: no free replication state for a copy origin; raise max_replication_slots on the destination",
			"error", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("mark the destination's writes: %w", err)
	}
	w.origin = name
	return nil
}

// copyStream copies st from the source to the destination: one COPY in one
// transaction on the source, and on the destination one COPY and
// transaction per partition of st (st.chunkRows rows each, the last one
// takes the rest). The partitions are numbered from first, and each is
// reported to done once committed; partitions the stream had no rows for
// are reported with 0 rows at its end.
func (r *run) copyStream(ctx context.Context, w *worker, job *tableJob, st stream, first int,
	done func(n int, rows int64, d time.Duration) error) error {
	if err := r.connect(ctx, w); err != nil {
		return err
	}
	// One round trip: the transaction, the snapshot, and on borrowed
	// connections the session settings.
	begin := "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
	if r.cfg.SnapshotName != "" {
		begin += "; SET TRANSACTION SNAPSHOT " + sqlquote.Literal(r.cfg.SnapshotName)
	}
	if w.borrowed {
		begin += setLocal(r.srcSettings)
	}
	if _, err := w.src.Exec(ctx, begin); err != nil {
		return fmt.Errorf("begin source transaction in snapshot %s: %w", r.cfg.SnapshotName, err)
	}
	beginDst := "BEGIN"
	if w.borrowed {
		beginDst += setLocal(r.dstSettings)
	}

	outSQL, inSQL := job.copyOutSQL(st), job.copyInSQL()
	var upsertSQL string
	if job.upsertKey != nil {
		// Kept rows: each partition goes through a staging table.
		var create string
		create, inSQL, upsertSQL = job.upsertSQL()
		beginDst += "; " + create
	}
	n := first
	outRows, inRows, outErr, inErr := pipeCopy(job.binary, st.chunkRows, st.parts, &job.streamed,
		func(out io.Writer) (int64, error) {
			tag, err := w.src.PgConn().CopyTo(ctx, out, outSQL)
			return tag.RowsAffected(), err
		},
		func(in io.Reader) (int64, error) {
			start := time.Now()
			rows, err := r.writePartition(ctx, w, job, in, beginDst, inSQL, upsertSQL)
			if err != nil {
				return 0, err
			}
			if err := done(n, rows, time.Since(start)); err != nil {
				return 0, err
			}
			n++
			return rows, nil
		})
	switch {
	case outErr != nil && !errors.Is(outErr, errDestinationFailed):
		return fmt.Errorf("copy from source (%s): %w", outSQL, outErr)
	case inErr != nil:
		return inErr
	case outRows != inRows:
		return fmt.Errorf("source sent %d rows but destination took %d", outRows, inRows)
	}
	if _, err := w.src.Exec(ctx, "ROLLBACK"); err != nil {
		return fmt.Errorf("end source transaction: %w", err)
	}
	for ; n < first+st.parts; n++ {
		if err := done(n, 0, 0); err != nil {
			return err
		}
	}
	return nil
}

// writePartition writes one partition's rows, read from in, into job's
// destination table in one transaction of w's destination connection:
// beginDst opens it (with a staging table for kept rows), inSQL is the
// COPY FROM, upsertSQL (when kept rows) moves the staged rows over. It
// returns the rows copied.
func (r *run) writePartition(ctx context.Context, w *worker, job *tableJob, in io.Reader, beginDst, inSQL, upsertSQL string) (int64, error) {
	if _, err := w.dst.Exec(ctx, beginDst); err != nil {
		return 0, fmt.Errorf("begin destination transaction: %w", err)
	}
	if job.foreignOwner != "" {
		replica := r.dstSettings["session_replication_role"] == "replica"
		if err := exprcheck.GuardWrites(ctx, w.dst, job.m.Destination.Quoted(), job.foreignOwner, replica); err != nil {
			return 0, err
		}
	}
	tag, err := w.dst.PgConn().CopyFrom(ctx, in, inSQL)
	if err != nil {
		return 0, fmt.Errorf("copy into destination (%s): %w", inSQL, err)
	}
	if upsertSQL != "" {
		if _, err := w.dst.Exec(ctx, upsertSQL); err != nil {
			return 0, fmt.Errorf("upsert into destination (%s): %w", upsertSQL, err)
		}
	}
	commit, err := w.dst.Exec(ctx, "COMMIT")
	if err == nil && commit.String() != "COMMIT" {
		err = errors.New(commit.String()) // a failed transaction "commits" as ROLLBACK
	}
	if err != nil {
		return 0, fmt.Errorf("commit on destination: %w", err)
	}
	return tag.RowsAffected(), nil
}

// pipeCopy runs copyTo (the source's COPY TO STDOUT, which writes one
// CopyData message, one row, per Write into the writer it is given) and
// copyFrom (a destination COPY FROM STDIN reading the reader it is given)
// joined by pipes, calling copyFrom once per chunk of chunkRows rows: at
// most chunks times, the last chunk taking the rest, and not at all without
// rows. Each chunk is a complete COPY input (in binary format, with its own
// header and trailer). It returns the rows and the errors of both sides;
// when copyFrom fails, copyTo's next write fails with errDestinationFailed,
// so the source side stops too.
func pipeCopy(binary bool, chunkRows int64, chunks int, streamed *atomic.Int64, copyTo func(io.Writer) (int64, error),
	copyFrom func(io.Reader) (int64, error)) (outRows, inRows int64, outErr, inErr error) {
	readers := make(chan *io.PipeReader, 1)
	stop := make(chan struct{})
	c := &chunker{binary: binary, chunkRows: max(chunkRows, 1), chunks: max(chunks, 1), readers: readers, stop: stop, streamed: streamed}
	type result struct {
		rows int64
		err  error
	}
	out := make(chan result, 1)
	go func() {
		rows, err := copyTo(c)
		err = c.finish(err)
		out <- result{rows, err}
	}()
	for pr := range readers {
		rows, err := copyFrom(pr)
		if err != nil {
			inErr = err
			close(stop)
			pr.CloseWithError(errDestinationFailed)
			for pr := range readers { // until the source side gives up
				pr.CloseWithError(errDestinationFailed)
			}
			break
		}
		pr.Close()
		inRows += rows
	}
	res := <-out
	return res.rows, inRows, res.err, inErr
}

// The header and trailer of a binary COPY stream: the signature, a 32-bit
// flags field and a 32-bit header extension length; a field count of -1.
var (
	binaryHeader  = []byte("PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00")
	binaryTrailer = []byte{0xff, 0xff}
)

// chunker is the writer that pgconn's CopyTo writes a source COPY stream
// into. It relies on what the protocol guarantees: every CopyData message
// from the server is one row (in binary format the first one also carries
// the header, and the trailer comes alone). It cuts the stream into chunks
// of chunkRows rows, the last of its chunks taking the rest, and hands each
// to the destination side as a pipe reader on readers, buffered
// (pipeBufferSize) so that the destination gets full CopyData messages.
type chunker struct {
	binary    bool
	chunkRows int64
	chunks    int
	readers   chan<- *io.PipeReader
	stop      <-chan struct{} // closed when the destination side takes no more chunks
	streamed  *atomic.Int64   // rows handed to the destination side so far (nil: not counted)

	header bool  // the source's binary header was seen
	opened int   // chunks opened
	rows   int64 // rows in the open chunk
	pw     *io.PipeWriter
	bw     *bufio.Writer
}

func (c *chunker) Write(p []byte) (int, error) {
	n := len(p)
	if c.binary {
		if !c.header {
			if len(p) < len(binaryHeader) || !bytes.Equal(p[:11], binaryHeader[:11]) {
				return 0, errors.New("binary COPY stream without its header")
			}
			ext := int(binary.BigEndian.Uint32(p[15:19]))
			if len(p) < len(binaryHeader)+ext {
				return 0, errors.New("binary COPY header cut short")
			}
			p = p[len(binaryHeader)+ext:]
			c.header = true
		}
		if len(p) == 0 || bytes.Equal(p, binaryTrailer) {
			return n, nil // each chunk gets its own trailer
		}
	}
	if c.pw == nil {
		if err := c.open(); err != nil {
			return 0, err
		}
	}
	if _, err := c.bw.Write(p); err != nil {
		return 0, err
	}
	c.rows++
	if c.streamed != nil {
		c.streamed.Add(1)
	}
	if c.rows >= c.chunkRows && c.opened < c.chunks {
		if err := c.closeChunk(nil); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// open starts a chunk and hands its reader to the destination side.
func (c *chunker) open() error {
	pr, pw := io.Pipe()
	select {
	case c.readers <- pr:
	case <-c.stop:
		return errDestinationFailed
	}
	c.pw, c.rows = pw, 0
	c.opened++
	if c.bw == nil {
		c.bw = bufio.NewWriterSize(pw, pipeBufferSize)
	} else {
		c.bw.Reset(pw)
	}
	if c.binary {
		_, err := c.bw.Write(binaryHeader)
		return err
	}
	return nil
}

// closeChunk ends the open chunk: complete when err is nil, else failed
// with err.
func (c *chunker) closeChunk(err error) error {
	if err == nil && c.binary {
		_, err = c.bw.Write(binaryTrailer)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.pw.CloseWithError(err) // nil: the reader sees EOF
	c.pw = nil
	return err
}

// finish ends the stream after CopyTo returned err, and returns the source
// side's error.
func (c *chunker) finish(err error) error {
	if c.pw != nil {
		if cerr := c.closeChunk(err); err == nil {
			err = cerr
		}
	}
	close(c.readers)
	return err
}

type nopReporter struct{}

func (nopReporter) TableStarted(context.Context, change.Mapping, int) error { return nil }
func (nopReporter) PartitionDone(context.Context, change.Mapping, int, int, int64, time.Duration) error {
	return nil
}
func (nopReporter) TableDone(context.Context, change.Mapping, int64, time.Duration) error { return nil }
