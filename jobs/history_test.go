package jobs

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// TestLagWriterHistory: the replica's lag writer, fed the measures of the
// mirrors it streams, writes a history sample of each mirror whose lock
// the replica holds at the history cadence, from its own flushes, and none
// of a mirror it measures without holding its lock; the hourly prune job
// deletes samples past the retention.
func TestLagWriterHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	run, m := catalogRun(t)
	store := run.cfg.Store
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	peer, err := store.PeerGetByName(ctx, "p")
	require.NoError(t, err)
	tx, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	other, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{Name: "other", SourcePeerID: peer.ID, DestinationPeerID: peer.ID,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 60, CDCBatchSize: 100, PublicationName: "pub2", ReplicationSlotName: "slot2"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	holder := db.NewLockHolder("replica-h", 10, store.Pool().Config().ConnConfig, logger)
	hctx, cancel := context.WithCancel(ctx)
	go holder.Run(hctx)
	t.Cleanup(func() {
		cancel()
		<-holder.Done()
	})
	require.Eventually(t, func() bool {
		lock, err := holder.TryLock(ctx, m.ID)
		return err == nil && lock != nil
	}, 10*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		w, err := store.MirrorWorkers(ctx)
		return err == nil && w[m.ID].Name == "replica-h"
	}, 10*time.Second, 50*time.Millisecond)
	_, err = store.Pool().Exec(ctx, `UPDATE mirror_tables SET rows_synced = 500 WHERE mirror_id = $1`, m.ID)
	require.NoError(t, err)

	w := newLagWriter(store, nil, logger, "replica-h", time.Second)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() { w.loop(done); close(stopped) }()
	// The engine measures about every second; the writer flushes every 2 s.
	deadline := time.Now().Add(9 * time.Second)
	for time.Now().Before(deadline) {
		now := time.Now()
		w.add(db.LagMeasure{MirrorID: m.ID, LagSeconds: 0.75, MeasuredAt: now})
		w.add(db.LagMeasure{MirrorID: other.ID, LagSeconds: 9, MeasuredAt: now})
		time.Sleep(250 * time.Millisecond)
	}
	close(done)
	<-stopped

	samples, err := store.MirrorHistory(ctx, m.ID, time.Now().Add(-time.Hour), 100)
	require.NoError(t, err)
	// 9 s of flushes every 2 s, a sample at most every second: 3 or 4.
	require.GreaterOrEqual(t, len(samples), 3, "samples: %+v", samples)
	require.LessOrEqual(t, len(samples), 5)
	for _, s := range samples {
		require.Equal(t, 0.75, *s.LagSeconds)
		require.EqualValues(t, 1000, s.RowsSynced, "two tables of 500")
	}
	require.NotNil(t, samples[len(samples)-1].RowsPerSecond)
	require.Equal(t, 0.0, *samples[len(samples)-1].RowsPerSecond)
	none, err := store.MirrorHistory(ctx, other.ID, time.Now().Add(-time.Hour), 100)
	require.NoError(t, err)
	require.Empty(t, none, "the replica does not hold other's lock")

	// The prune job deletes what is past the retention.
	_, err = store.Pool().Exec(ctx, `INSERT INTO mirror_metrics_history (mirror_id, at, rows_synced)
		SELECT $1, now() - interval '3 hours' - i * interval '1 second', 0 FROM generate_series(1, 50) i`, m.ID)
	require.NoError(t, err)
	prune := &LogPruneWorker{cfg: Config{Store: store, Logger: logger, LogRetention: time.Hour, HistoryRetention: 2 * time.Hour}}
	require.NoError(t, prune.Work(ctx, &river.Job[LogPruneArgs]{}))
	left, err := store.MirrorHistory(ctx, m.ID, time.Now().Add(-24*time.Hour), 1000)
	require.NoError(t, err)
	require.Len(t, left, len(samples))
}
