package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/defaults"
)

// lagWriteBatchEvery is how often a replica writes the lag measures of all
// the mirrors it streams, in one statement.
const lagWriteBatchEvery = 2 * time.Second

// lagWriter gathers the lag measures and sequence sync times of the runs of
// one replica and writes them together every lagWriteBatchEvery, so that an
// idle replica's catalog writes do not grow with its mirrors.
//
// Every historyEvery it also writes a history sample of each mirror it
// measured meanwhile (mirror_metrics_history), in one more statement: the
// samples cost no query per mirror, and only the replica that holds a
// mirror's lock writes its samples (db.Store.MirrorRecordHistory).
type lagWriter struct {
	store     *db.Store
	board     *db.LagBoard // the newest measures, for this replica's API (nil: none)
	logger    *slog.Logger
	replica   string // the replica's name, whose lock connection holds the mirrors' locks
	mu        sync.Mutex
	latest    map[int64]db.LagMeasure // the newest measure of each mirror not written yet
	seqSynced map[int64]time.Time     // sequence syncs not written yet

	historyEvery time.Duration           // 0: no history
	history      map[int64]db.LagMeasure // the newest measure of each mirror since the last sample (loop only)
	historyAt    time.Time               // when the last samples were written (loop only)
}

func newLagWriter(store *db.Store, board *db.LagBoard, logger *slog.Logger, replica string, historyEvery time.Duration) *lagWriter {
	return &lagWriter{store: store, board: board, logger: logger, replica: replica, latest: map[int64]db.LagMeasure{}, seqSynced: map[int64]time.Time{},
		historyEvery: historyEvery, history: map[int64]db.LagMeasure{}, historyAt: time.Now()}
}

// sequencesSynced keeps a mirror's sequence sync time for the next write.
func (w *lagWriter) sequencesSynced(mirrorID int64, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seqSynced[mirrorID] = at
}

// add keeps m for the next write, replacing an older measure of the mirror.
func (w *lagWriter) add(m db.LagMeasure) {
	w.board.Put(m)
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.latest[m.MirrorID]; ok && m.AppliedCommit.IsZero() {
		m.AppliedCommit = old.AppliedCommit
	}
	w.latest[m.MirrorID] = m
}

// lagRetryEvery is how often the lag writer tries again while the catalog
// does not take its writes (an outage): the measures are kept, the newest
// of each mirror, and written within this of the catalog's return, so
// that the lag read then is the streams' and not the age of the last
// measure written before the outage.
const lagRetryEvery = 500 * time.Millisecond

// lagIdleWriteEvery is how often a replica without measures to write still
// marks that it writes (replicas.lags_written_at): a mirror whose measure
// stops while its replica keeps marking is a stream that stopped measuring,
// not a replica cut off from the catalog (db.Mirror.LagRunBy).
const lagIdleWriteEvery = 5 * time.Second

// loop writes the measures every lagWriteBatchEvery until done closes. A
// failed write keeps the measures (newer ones replace them) and is tried
// again every lagRetryEvery.
func (w *lagWriter) loop(done <-chan struct{}) {
	failing := false
	var written time.Time
	for {
		wait := lagWriteBatchEvery
		if failing {
			wait = lagRetryEvery
		}
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		w.mu.Lock()
		measures := make([]db.LagMeasure, 0, len(w.latest))
		for _, m := range w.latest {
			measures = append(measures, m)
		}
		w.latest = map[int64]db.LagMeasure{}
		synced := w.seqSynced
		w.seqSynced = map[int64]time.Time{}
		w.mu.Unlock()
		if len(measures) == 0 && len(synced) == 0 && !failing && time.Since(written) < lagIdleWriteEvery {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := w.store.MirrorRecordLags(ctx, w.replica, measures)
		if err == nil {
			written = time.Now()
		}
		w.board.CatalogWrite(err == nil, time.Now())
		if err != nil {
			w.logger.Debug("record lag", "mirrors", len(measures), "error", err)
			w.keep(measures, nil)
		} else if err = w.store.MirrorsSequencesSynced(ctx, synced); err != nil {
			w.logger.Debug("record sequence syncs", "mirrors", len(synced), "error", err)
			w.keep(nil, synced)
		}
		if err == nil {
			w.sample(ctx, measures)
		}
		cancel()
		failing = err != nil
	}
}

// HistoryInterval is how often, by default, a streaming mirror gets a
// history sample (Config.HistoryInterval).
const HistoryInterval = defaults.MetricsHistoryInterval

// historyStale is how old the newest lag measure of a mirror may be to go
// into a history sample: an older one means the mirror stopped streaming
// here.
const historyStale = 15 * time.Second

// sample keeps the measures just written and, every historyEvery, writes a
// history sample of each mirror measured since the last one. A failed
// write is logged and not retried: the history has a gap there.
func (w *lagWriter) sample(ctx context.Context, measures []db.LagMeasure) {
	if w.historyEvery <= 0 {
		return
	}
	for _, m := range measures {
		w.history[m.MirrorID] = m
	}
	if time.Since(w.historyAt) < w.historyEvery {
		return
	}
	w.historyAt = time.Now()
	batch := make([]db.HistoryMeasure, 0, len(w.history))
	for id, m := range w.history {
		if time.Since(m.MeasuredAt) <= historyStale {
			batch = append(batch, db.HistoryMeasure{MirrorID: id, LagSeconds: m.LagSeconds})
		}
	}
	w.history = map[int64]db.LagMeasure{}
	if _, err := w.store.MirrorRecordHistory(ctx, w.replica, batch); err != nil {
		w.logger.Debug("record history samples", "mirrors", len(batch), "error", err)
	}
}

// keep puts back measures and sequence syncs that could not be written,
// unless newer ones came meanwhile.
func (w *lagWriter) keep(measures []db.LagMeasure, synced map[int64]time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range measures {
		if newer, ok := w.latest[m.MirrorID]; !ok {
			w.latest[m.MirrorID] = m
		} else if newer.AppliedCommit.IsZero() {
			newer.AppliedCommit = m.AppliedCommit
			w.latest[m.MirrorID] = newer
		}
	}
	for id, at := range synced {
		if _, ok := w.seqSynced[id]; !ok {
			w.seqSynced[id] = at
		}
	}
}

// recordSequencesSynced hands the time of a sequence sync to the replica's
// writer, or writes it at once when there is none.
func (r *mirrorRun) recordSequencesSynced(ctx context.Context, at time.Time) error {
	if r.cfg.lags != nil {
		r.cfg.lags.sequencesSynced(r.mirrorID, at)
		return nil
	}
	return r.store.MirrorSequencesSynced(ctx, r.mirrorID, at)
}

// recordLag hands a lag measure to the replica's lag writer, or writes it
// at once when there is none (tests that build a run by hand).
func (r *mirrorRun) recordLag(ctx context.Context, lagSeconds float64, at, applied time.Time) error {
	// A run's first measure is written at once: until then the catalog
	// holds the measure of the previous run (before a restart), which a
	// reader would take for stale.
	if r.cfg.lags != nil && r.lagWritten.Load() {
		r.cfg.lags.add(db.LagMeasure{MirrorID: r.mirrorID, LagSeconds: lagSeconds, MeasuredAt: at, AppliedCommit: applied})
		return nil
	}
	if r.cfg.lags != nil {
		r.cfg.lags.board.Put(db.LagMeasure{MirrorID: r.mirrorID, LagSeconds: lagSeconds, MeasuredAt: at, AppliedCommit: applied})
	}
	err := r.store.MirrorRecordLag(ctx, r.mirrorID, lagSeconds, at, applied)
	if err == nil {
		r.lagWritten.Store(true)
	}
	return err
}

// emptyProgressEvery is how often at most the position reached by batches
// without changes (the heartbeats of an idle source, every 10 s) is written
// to the catalog.
const emptyProgressEvery = time.Minute

// emptyBatch takes a batch without changes (a heartbeat, or transactions
// with nothing for the mirror): it moves the position, written with the next
// progress flush at most every emptyProgressEvery, and is neither logged nor
// counted as activity, so that an idle mirror costs the catalog next to
// nothing. It reports whether batch was such a batch.
func (b *batchReporter) emptyBatch(batch cdc.Batch) bool {
	if batch.Changes != 0 || len(batch.Tables) != 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lastLSN, b.lastBatch = batch.LSN, batch.ID
	if time.Since(b.emptyAt) >= emptyProgressEvery {
		b.dirty = true
		b.emptyAt = time.Now()
	}
	return true
}
