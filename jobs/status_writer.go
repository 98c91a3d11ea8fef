package jobs

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/pgmirror/pgmirror/db"
)

// lagWriteBatchEvery is how often a replica writes the lag measures of all
// the mirrors it streams, in one statement.
const lagWriteBatchEvery = 2 * time.Second

// lagWriter gathers the lag measures of the runs of one replica and writes
// them together every lagWriteBatchEvery, so that an idle replica's catalog
// writes do not grow with its mirrors.
type lagWriter struct {
	store  *db.Store
	logger *slog.Logger
	mu     sync.Mutex
	latest map[int64]db.LagMeasure // the newest measure of each mirror not written yet
}

func newLagWriter(store *db.Store, logger *slog.Logger) *lagWriter {
	return &lagWriter{store: store, logger: logger, latest: map[int64]db.LagMeasure{}}
}

// add keeps m for the next write, replacing an older measure of the mirror.
func (w *lagWriter) add(m db.LagMeasure) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.latest[m.MirrorID]; ok && m.AppliedCommit.IsZero() {
		m.AppliedCommit = old.AppliedCommit
	}
	w.latest[m.MirrorID] = m
}

// loop writes the measures every lagWriteBatchEvery until done closes. A
// failed write is dropped: newer measures come within seconds.
func (w *lagWriter) loop(done <-chan struct{}) {
	tick := time.NewTicker(lagWriteBatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		w.mu.Lock()
		measures := make([]db.LagMeasure, 0, len(w.latest))
		for _, m := range w.latest {
			measures = append(measures, m)
		}
		w.latest = map[int64]db.LagMeasure{}
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := w.store.MirrorRecordLags(ctx, measures); err != nil {
			w.logger.Debug("record lag", "mirrors", len(measures), "error", err)
		}
		cancel()
	}
}

// recordLag hands a lag measure to the replica's lag writer, or writes it
// at once when there is none (tests that build a run by hand).
func (r *mirrorRun) recordLag(ctx context.Context, lagSeconds float64, at, applied time.Time) error {
	if r.cfg.lags != nil {
		r.cfg.lags.add(db.LagMeasure{MirrorID: r.mirrorID, LagSeconds: lagSeconds, MeasuredAt: at, AppliedCommit: applied})
		return nil
	}
	return r.store.MirrorRecordLag(ctx, r.mirrorID, lagSeconds, at, applied)
}
