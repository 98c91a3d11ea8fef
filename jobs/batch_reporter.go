package jobs

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
)

// Flush cadence of CDC progress. Under load the engine may apply hundreds
// of small batches a second; writing each to the catalog would make the
// catalog the bottleneck and flood the log. So progress (last_lsn, batch id,
// table counters) is written by a background loop every progressEvery, and
// the CDC log entries at most every logEvery, each summing the batches since
// the last entry. A slow batch (longer than logEvery) still gets entries of
// its own.
const (
	progressEvery = 200 * time.Millisecond
	logEvery      = 5 * time.Second
)

// batchReporter turns applied CDC batches into catalog progress and log
// entries. It also writes the "No changes in CDC batch" entry when the
// mirror goes idle: once when a sync interval passes without changes after
// activity, then at most once an hour while it stays idle.
type batchReporter struct {
	run      *mirrorRun
	mirror   db.Mirror
	tableIDs map[change.TableName]int64 // source table -> mirror table id

	mu        sync.Mutex
	pending   map[int64]change.Counts
	lastLSN   change.LSN
	lastBatch int64
	dirty     bool

	logSum      db.CDCBatchDetails
	logTables   map[change.TableName]bool
	logBatches  int
	lastLogAt   time.Time
	lastBatchAt time.Time
	lastIdleLog time.Time
	slowBatch   bool      // a batch took longer than logEvery: log it at once
	emptyAt     time.Time // when the position of a batch without changes was last marked for writing

	progressFailing bool // the last progress write failed (only loop and close touch it)

	// The engine's last lag measure (cdc.LagReporter), written to the
	// catalog by loop at most every lagWriteEvery.
	lag           time.Duration
	lagAt         time.Time
	appliedCommit time.Time
	lagDirty      bool
	lagWritten    time.Time

	done chan struct{}
	wg   sync.WaitGroup
}

func newBatchReporter(r *mirrorRun, m db.Mirror, mappings []change.Mapping) *batchReporter {
	tables, _ := r.store.MirrorTables(context.Background(), m.ID)
	b := &batchReporter{run: r, mirror: m, tableIDs: map[change.TableName]int64{}, pending: map[int64]change.Counts{},
		logTables: map[change.TableName]bool{}, done: make(chan struct{}), lastBatchAt: time.Now(), lastIdleLog: time.Now()}
	for _, t := range tables {
		b.tableIDs[t.Source()] = t.ID
	}
	interval := time.Duration(max(m.CDCSyncIntervalSeconds, 1)) * time.Second
	b.wg.Add(1)
	go b.loop(interval)
	return b
}

// BatchApplied records a batch that the destination committed.
func (b *batchReporter) BatchApplied(ctx context.Context, batch cdc.Batch) error {
	if b.emptyBatch(batch) {
		return nil
	}
	b.mu.Lock()
	for table, c := range batch.Tables {
		id, ok := b.tableIDs[table]
		if !ok {
			continue
		}
		p := b.pending[id]
		p.Add(c)
		b.pending[id] = p
		b.logSum.RowsInserted += c.Inserted
		b.logSum.RowsUpdated += c.Updated
		b.logSum.RowsDeleted += c.Deleted
		b.logTables[table] = true
	}
	b.lastLSN = batch.LSN
	b.lastBatch = batch.ID
	b.dirty = true
	b.logSum.BatchID = batch.ID
	b.logSum.RowsProcessed += batch.Changes
	b.logSum.DurationMS += batch.Duration.Milliseconds()
	b.logSum.LSN = batch.LSN.String()
	if batch.Streamed {
		b.logSum.StreamedTransactions++
	}
	b.logBatches++
	b.lastBatchAt = time.Now()
	if batch.Duration >= logEvery {
		b.slowBatch = true
	}
	b.mu.Unlock()
	if m := b.run.cfg.Metrics; m != nil {
		m.BatchApplied(b.mirror.Name, batch.Duration, batch.Changes, batch.Tables)
	}
	// The catalog writes happen in loop, off the apply path: a catalog
	// round trip here would add to every batch's latency.
	return nil
}

// lagWriteEvery is how often at most the lag measure is written to the
// catalog (the engine measures it every second).
const lagWriteEvery = time.Second

// Lag keeps the engine's lag measure for loop to write (cdc.LagReporter).
func (b *batchReporter) Lag(lag time.Duration, appliedCommit time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lag, b.lagAt, b.appliedCommit, b.lagDirty = lag, time.Now(), appliedCommit, true
}

// flushLag writes the last lag measure, if there is a new one and the
// last write is lagWriteEvery old. A failed write is not retried: the next
// measure comes within a second.
func (b *batchReporter) flushLag(ctx context.Context) {
	b.mu.Lock()
	if !b.lagDirty || time.Since(b.lagWritten) < lagWriteEvery {
		b.mu.Unlock()
		return
	}
	lag, at, applied := b.lag, b.lagAt, b.appliedCommit
	b.lagDirty, b.lagWritten = false, time.Now()
	b.mu.Unlock()
	if err := b.run.recordLag(ctx, lag.Seconds(), at, applied); err != nil {
		b.run.logger.Debug("record lag", "error", err)
	}
}

func (b *batchReporter) loop(interval time.Duration) {
	defer b.wg.Done()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case <-b.done:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if !b.run.catalogLost() {
			// While the catalog is being reconnected (catalog_outage.go)
			// the counts wait in memory, as log entries do (mirrorRun.log):
			// this run's writes do not add to the connection attempts of
			// every run of the replica, which slow the catalog's return.
			// The lag goes to the replica's lag writer, which tries on its
			// own.
			b.flushProgress(ctx)
		}
		b.flushLag(ctx)
		b.mu.Lock()
		logDue := b.logBatches > 0 && (time.Since(b.lastLogAt) >= logEvery || b.slowBatch)
		b.slowBatch = false
		idle := b.logBatches == 0 && time.Since(b.lastBatchAt) >= interval &&
			(b.lastIdleLog.Before(b.lastBatchAt) || time.Since(b.lastIdleLog) >= time.Hour)
		if idle {
			b.lastIdleLog = time.Now()
		}
		b.mu.Unlock()
		if logDue {
			b.flushLog(ctx)
		}
		if idle {
			b.run.log(ctx, db.LevelInfo, db.MsgCDCNoChanges, db.CDCBatchDetails{BatchID: b.currentBatch(), TablesAffected: []string{}})
		}
		cancel()
	}
}

func (b *batchReporter) currentBatch() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastBatch
}

func (b *batchReporter) flushProgress(ctx context.Context) {
	b.mu.Lock()
	if !b.dirty {
		b.mu.Unlock()
		return
	}
	pending := b.pending
	b.pending = map[int64]change.Counts{}
	lsn, batch := b.lastLSN, b.lastBatch
	b.dirty = false
	b.mu.Unlock()
	err := b.run.store.MirrorRecordProgress(ctx, b.mirror.ID, lsn.String(), batch, pending)
	if err == nil && b.progressFailing {
		b.progressFailing = false
		b.run.logger.Info("CDC progress written to the catalog again")
		b.run.writePendingLogs(ctx)
	}
	if err != nil {
		if !b.progressFailing {
			// Once per outage: the flush is retried every progressEvery.
			b.progressFailing = true
			b.run.logger.Warn("record CDC progress; keeping it until the catalog answers", "error", err)
		}
		// Keep the counts for the next flush.
		b.mu.Lock()
		for id, c := range pending {
			p := b.pending[id]
			p.Add(c)
			b.pending[id] = p
		}
		b.dirty = true
		b.mu.Unlock()
	}
}

func (b *batchReporter) flushLog(ctx context.Context) {
	b.mu.Lock()
	if b.logBatches == 0 {
		b.mu.Unlock()
		return
	}
	sum := b.logSum
	tables := make([]string, 0, len(b.logTables))
	for t := range b.logTables {
		tables = append(tables, t.String())
	}
	sort.Strings(tables)
	sum.TablesAffected = tables
	b.logSum = db.CDCBatchDetails{}
	b.logTables = map[change.TableName]bool{}
	b.logBatches = 0
	b.lastLogAt = time.Now()
	b.mu.Unlock()
	fetched := sum
	fetched.DurationMS = 0
	b.run.log(ctx, db.LevelInfo, db.MsgCDCBatchFetched, fetched)
	b.run.log(ctx, db.LevelInfo, db.MsgCDCBatchApplied, sum)
}

// close stops the background flusher and writes what is left.
func (b *batchReporter) close(ctx context.Context) {
	close(b.done)
	b.wg.Wait()
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	b.flushProgress(flushCtx)
	b.mu.Lock()
	b.lagWritten = time.Time{} // the last measure, whatever its age
	b.mu.Unlock()
	b.flushLag(flushCtx)
	b.flushLog(flushCtx)
}

// ColumnsDropped logs a WARN entry when the source stopped sending columns
// of a table: the destination keeps them and the rest keeps replicating.
func (b *batchReporter) ColumnsDropped(ctx context.Context, table change.TableName, columns []string) {
	b.run.log(ctx, db.LevelWarn, "Source columns dropped or renamed", map[string]any{
		"table": table.String(), "columns": columns,
		"policy": "the destination keeps these columns and new rows leave them NULL (or their default); the remaining columns keep replicating; a renamed column arrives as a new column, added automatically"})
}

// SchemaChangeRejected logs a WARN entry for a captured schema change that
// was left out on the destination.
func (b *batchReporter) SchemaChangeRejected(ctx context.Context, table change.TableName, warning string) {
	b.run.log(ctx, db.LevelWarn, db.MsgSchemaChangeNotApplied, map[string]any{"table": table.String(), "warning": warning})
}

// SchemaChangeApplied logs a statement applied to the destination for a
// source column change and counts it in /metrics.
func (b *batchReporter) SchemaChangeApplied(ctx context.Context, table change.TableName, statement string) {
	b.run.log(ctx, db.LevelInfo, db.MsgSchemaChangeApplied, map[string]any{"table": table.String(), "statement": statement})
	b.run.cfg.Metrics.SchemaChangeApplied(b.mirror.Name)
}

// SchemaChangeWarned logs a source column change left alone under
// schema_changes warn.
func (b *batchReporter) SchemaChangeWarned(ctx context.Context, table change.TableName, what string) {
	b.run.log(ctx, db.LevelWarn, db.MsgSchemaChangeNotApplied, map[string]any{"table": table.String(), "change": what,
		"policy": "schema_changes is warn: the destination's schema is left as it is (dropped and renamed columns are kept and made nullable, new ones are added); set it to apply with PATCH /v1/mirrors/{name} while paused to have such changes applied"})
}

// ResyncTable asks for a copy of a table beside running CDC after a source
// column change whose values the stream does not carry.
func (b *batchReporter) ResyncTable(ctx context.Context, table change.TableName, reason string) error {
	if err := b.run.store.MirrorTableRequestResync(ctx, b.mirror.ID, table); err != nil {
		return err
	}
	b.run.log(ctx, db.LevelInfo, db.MsgTableResyncStarted, map[string]any{"table": table.String(), "reason": reason})
	return nil
}
