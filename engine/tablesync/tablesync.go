package tablesync

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/pgmirror/pgmirror/engine/change"
)

// Defaults for the Config fields left zero; they match the API's defaults.
const (
	DefaultRowsPerPartition   = 500000
	DefaultMaxParallelWorkers = 4
	DefaultTablesInParallel   = 4
)

// pipeBufferSize is how many COPY bytes a worker gathers before handing them
// to the destination side: one network write per chunk rather than per row.
const pipeBufferSize = 256 << 10

// Config configures one snapshot run.
type Config struct {
	// SourceConnString and DestConnString are libpq-style connection strings
	// (URLs or key=value) of the source and destination databases.
	SourceConnString, DestConnString string
	// SnapshotName is the snapshot exported by CREATE_REPLICATION_SLOT ...
	// EXPORT_SNAPSHOT; every reading transaction imports it, so the copy
	// shows the source exactly as of the slot's consistent point. The
	// exporting replication connection must stay open (and idle) until Run
	// returns. "" reads the current state instead (tests, or a resync without
	// a new slot).
	SnapshotName string
	// Tables are the mappings to copy. Their destination tables must exist
	// (schemasync.EnsureTables); Run truncates them first.
	Tables []change.Mapping
	// RowsPerPartition is the approximate number of rows per partition
	// (default DefaultRowsPerPartition).
	RowsPerPartition int
	// MaxParallelWorkers bounds the partitions copied at once over all
	// tables (default DefaultMaxParallelWorkers). Each worker holds one
	// source and one destination connection.
	MaxParallelWorkers int
	// TablesInParallel bounds the tables being copied at once (default
	// DefaultTablesInParallel).
	TablesInParallel int
	// Logger receives progress at debug and info level (default: discard).
	Logger *slog.Logger
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

var snapshotNameRE = regexp.MustCompile(`^[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+$`)

// errDestinationFailed closes the pipe of a partition whose destination side
// failed, so that the source side stops.
var errDestinationFailed = errors.New("destination COPY failed")

// Run copies every table of cfg from the source to the destination.
//
// It truncates all destination tables of the run (a restarted snapshot
// starts clean), splits each table into partitions of about
// cfg.RowsPerPartition rows by ctid block range (per leaf partition for a
// partitioned table), and copies the partitions in parallel: at most
// cfg.MaxParallelWorkers at once, from at most cfg.TablesInParallel tables at
// once. Each partition streams COPY TO STDOUT from the source straight into
// COPY FROM STDIN on the destination, in binary format when the column types
// are identical and portable (schemasync.BinaryCompatible), in text format
// otherwise, and commits on the destination on its own with
// synchronous_commit off: the caller must record that the snapshot finished
// only after Run returns nil, and must treat an interrupted snapshot as not
// done (running it again truncates and starts over).
//
// The first failure cancels the other workers; the error names the table and
// partition.
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
	srcCfg, err := pgx.ParseConfig(cfg.SourceConnString)
	if err != nil {
		return fmt.Errorf("snapshot: parse source connection string: %w", err)
	}
	dstCfg, err := pgx.ParseConfig(cfg.DestConnString)
	if err != nil {
		return fmt.Errorf("snapshot: parse destination connection string: %w", err)
	}
	sessionSettings(srcCfg, false)
	sessionSettings(dstCfg, true)
	r := &run{cfg: cfg, rep: rep, log: cfg.Logger, srcCfg: srcCfg, dstCfg: dstCfg}

	waves, err := r.prepare(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	for _, jobs := range waves {
		if err := r.copyAll(ctx, jobs); err != nil {
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// sessionSettings fixes the session parameters that text COPY output and
// input depend on, and relaxes what is safe to relax for a bulk load.
func sessionSettings(c *pgx.ConnConfig, dest bool) {
	if c.RuntimeParams == nil {
		c.RuntimeParams = map[string]string{}
	}
	c.RuntimeParams["DateStyle"] = "ISO, MDY"
	c.RuntimeParams["IntervalStyle"] = "postgres"
	c.RuntimeParams["extra_float_digits"] = "3"
	c.RuntimeParams["bytea_output"] = "hex"
	c.RuntimeParams["statement_timeout"] = "0"
	c.RuntimeParams["idle_in_transaction_session_timeout"] = "0"
	if _, ok := c.RuntimeParams["application_name"]; !ok {
		c.RuntimeParams["application_name"] = "pgmirror snapshot"
	}
	if dest {
		// Safe: the snapshot counts as done only once Run has returned, after
		// every partition's commit; a crash before that means starting over.
		c.RuntimeParams["synchronous_commit"] = "off"
	}
}

type run struct {
	cfg            Config
	rep            Reporter
	log            *slog.Logger
	srcCfg, dstCfg *pgx.ConnConfig
}

// prepare plans every table in the snapshot, truncates the destination
// tables and returns the tables in waves to copy one after the other: one
// wave when the copy may run with session_replication_role = replica (the
// workers then set it), otherwise waves in the order of the destination's
// foreign keys.
func (r *run) prepare(ctx context.Context) ([][]*tableJob, error) {
	src, err := pgx.ConnectConfig(ctx, r.srcCfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect to source: %w", err)
	}
	defer src.Close(context.WithoutCancel(ctx))
	dst, err := pgx.ConnectConfig(ctx, r.dstCfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect to destination: %w", err)
	}
	defer dst.Close(context.WithoutCancel(ctx))

	tx, err := r.beginSource(ctx, src)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	jobs, err := plan(ctx, tx, dst, r.cfg.Tables, r.cfg.RowsPerPartition)
	if err != nil {
		return nil, err
	}
	if err := tx.Rollback(ctx); err != nil {
		return nil, fmt.Errorf("end planning transaction: %w", err)
	}

	if len(jobs) > 0 {
		names := make([]string, len(jobs))
		for i, j := range jobs {
			names[i] = j.m.Destination.Quoted()
		}
		if _, err := dst.Exec(ctx, "TRUNCATE TABLE "+strings.Join(names, ", ")); err != nil {
			return nil, fmt.Errorf("truncate destination tables: %w", err)
		}
	}
	for _, j := range jobs {
		r.log.InfoContext(ctx, "snapshot planned", "table", j.m.Source.String(), "destination", j.m.Destination.String(),
			"partitions", len(j.parts), "binary", j.binary)
	}
	replica, err := replicaRoleAllowed(ctx, dst)
	if err != nil {
		return nil, err
	}
	if replica {
		r.dstCfg.RuntimeParams["session_replication_role"] = "replica"
		return [][]*tableJob{jobs}, nil
	}
	r.log.WarnContext(ctx, "destination user may not set session_replication_role: copying tables in the order of the destination's foreign keys, with its triggers firing")
	return foreignKeyWaves(ctx, dst, jobs)
}

// beginSource starts a repeatable-read, read-only transaction on conn that
// sees the exported snapshot.
func (r *run) beginSource(ctx context.Context, conn *pgx.Conn) (pgx.Tx, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin source transaction: %w", err)
	}
	if r.cfg.SnapshotName != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+r.cfg.SnapshotName+"'"); err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("import snapshot %s: %w", r.cfg.SnapshotName, err)
		}
	}
	return tx, nil
}

// copyAll copies the partitions of jobs with the configured parallelism.
func (r *run) copyAll(ctx context.Context, jobs []*tableJob) error {
	workers := make(chan *worker, r.cfg.MaxParallelWorkers)
	for range r.cfg.MaxParallelWorkers {
		workers <- &worker{}
	}
	defer func() {
		for range r.cfg.MaxParallelWorkers {
			(<-workers).close(context.WithoutCancel(ctx))
		}
	}()

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

func (r *run) copyTable(ctx context.Context, job *tableJob, workers chan *worker) error {
	start := time.Now()
	total := len(job.parts)
	if err := r.rep.TableStarted(ctx, job.m, total); err != nil {
		return fmt.Errorf("table %s: report start: %w", job.m.Source, err)
	}
	r.log.InfoContext(ctx, "snapshot of table started", "table", job.m.Source.String(), "partitions", total)
	var rows atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for i, part := range job.parts {
		var w *worker
		select {
		case w = <-workers:
		case <-gctx.Done():
		}
		if w == nil {
			break
		}
		g.Go(func() error {
			defer func() { workers <- w }()
			n := i + 1
			pstart := time.Now()
			copied, err := r.copyPartition(gctx, w, job, part)
			if err != nil {
				w.close(context.WithoutCancel(gctx))
				return fmt.Errorf("table %s partition %d/%d: %w", job.m.Source, n, total, err)
			}
			rows.Add(copied)
			d := time.Since(pstart)
			r.log.DebugContext(gctx, "snapshot partition done", "table", job.m.Source.String(),
				"partition", n, "partitions", total, "rows", copied, "duration", d)
			if err := r.rep.PartitionDone(gctx, job.m, n, total, copied, d); err != nil {
				return fmt.Errorf("table %s partition %d/%d: report: %w", job.m.Source, n, total, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("table %s: %w", job.m.Source, err)
	}
	d := time.Since(start)
	r.log.InfoContext(ctx, "snapshot of table done", "table", job.m.Source.String(), "rows", rows.Load(), "duration", d)
	if err := r.rep.TableDone(ctx, job.m, rows.Load(), d); err != nil {
		return fmt.Errorf("table %s: report done: %w", job.m.Source, err)
	}
	return nil
}

// worker is a pair of connections that copies one partition at a time. Its
// connections are opened on first use and reused for later partitions.
type worker struct {
	src, dst *pgx.Conn
}

func (w *worker) close(ctx context.Context) {
	if w.src != nil {
		w.src.Close(ctx)
		w.src = nil
	}
	if w.dst != nil {
		w.dst.Close(ctx)
		w.dst = nil
	}
}

func (r *run) connect(ctx context.Context, w *worker) error {
	var err error
	if w.src == nil {
		if w.src, err = pgx.ConnectConfig(ctx, r.srcCfg.Copy()); err != nil {
			return fmt.Errorf("connect to source: %w", err)
		}
	}
	if w.dst == nil {
		if w.dst, err = pgx.ConnectConfig(ctx, r.dstCfg.Copy()); err != nil {
			return fmt.Errorf("connect to destination: %w", err)
		}
	}
	return nil
}

// copyPartition streams one partition from source to destination and commits
// it on the destination. It returns the number of rows copied.
func (r *run) copyPartition(ctx context.Context, w *worker, job *tableJob, p partition) (int64, error) {
	if err := r.connect(ctx, w); err != nil {
		return 0, err
	}
	srcTx, err := r.beginSource(ctx, w.src)
	if err != nil {
		return 0, err
	}
	dstTx, err := w.dst.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin destination transaction: %w", err)
	}

	outSQL, inSQL := job.copyOutSQL(p), job.copyInSQL()
	pr, pw := io.Pipe()
	type result struct {
		rows int64
		err  error
	}
	out := make(chan result, 1)
	go func() {
		bw := bufio.NewWriterSize(pw, pipeBufferSize)
		tag, err := w.src.PgConn().CopyTo(ctx, bw, outSQL)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err) // nil: the reader sees EOF
		out <- result{tag.RowsAffected(), err}
	}()
	inTag, inErr := w.dst.PgConn().CopyFrom(ctx, pr, inSQL)
	if inErr != nil {
		pr.CloseWithError(errDestinationFailed)
	} else {
		pr.Close()
	}
	res := <-out

	switch {
	case res.err != nil && !errors.Is(res.err, errDestinationFailed):
		return 0, fmt.Errorf("copy from source (%s): %w", outSQL, res.err)
	case inErr != nil:
		return 0, fmt.Errorf("copy into destination (%s): %w", inSQL, inErr)
	case res.rows != inTag.RowsAffected():
		return 0, fmt.Errorf("source sent %d rows but destination took %d", res.rows, inTag.RowsAffected())
	}
	if err := dstTx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit on destination: %w", err)
	}
	if err := srcTx.Rollback(ctx); err != nil {
		return 0, fmt.Errorf("end source transaction: %w", err)
	}
	return inTag.RowsAffected(), nil
}

type nopReporter struct{}

func (nopReporter) TableStarted(context.Context, change.Mapping, int) error { return nil }
func (nopReporter) PartitionDone(context.Context, change.Mapping, int, int, int64, time.Duration) error {
	return nil
}
func (nopReporter) TableDone(context.Context, change.Mapping, int64, time.Duration) error { return nil }
