package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// TestMirrorHistory: a replica writes history samples only for the mirrors
// whose lock it holds, with the mirror's row count and position from the
// catalog and the rates since the previous sample; a counter that goes
// back gives no rate; the history reads back oldest first, the newest
// samples when limited; pruning deletes old samples in bounded batches.
func TestMirrorHistory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	a := startHolder(t, store, "replica-a")
	b := startHolder(t, store, "replica-b")
	m1 := createMirror(t, store, "m1", mapping("a", "a2"), mapping("b", "b2"))
	m2 := createMirror(t, store, "m2", mapping("c", "c2"))
	m3 := createMirror(t, store, "m3", mapping("d", "d2"))
	l1 := tryLock(t, a, m1.ID)
	require.NotNil(t, l1)
	require.NotNil(t, tryLock(t, b, m2.ID))
	// The replicas' rows name their lock connections within a moment.
	require.Eventually(t, func() bool {
		w, err := store.MirrorWorkers(ctx)
		return err == nil && w[m1.ID].Name == "replica-a" && w[m2.ID].Name == "replica-b"
	}, 10*time.Second, 50*time.Millisecond)

	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := store.Pool().Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	setCounters := func(id int64, rowsEach int64, lsn string) {
		t.Helper()
		exec(`UPDATE mirror_tables SET rows_synced = $2 WHERE mirror_id = $1`, id, rowsEach)
		exec(`UPDATE mirrors SET last_lsn = $2::pg_lsn WHERE id = $1`, id, lsn)
	}
	all := []db.HistoryMeasure{{MirrorID: m1.ID, LagSeconds: 1.5}, {MirrorID: m2.ID, LagSeconds: 2}, {MirrorID: m3.ID, LagSeconds: 3}}
	history := func(id int64) []db.MetricsSample {
		t.Helper()
		got, err := store.MirrorHistory(ctx, id, time.Now().Add(-time.Hour), 100)
		require.NoError(t, err)
		return got
	}

	setCounters(m1.ID, 50, "0/1000") // two tables: 100 rows
	n, err := store.MirrorRecordHistory(ctx, "replica-a", all)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "replica-a holds m1 only")
	first := history(m1.ID)
	require.Len(t, first, 1)
	require.Equal(t, 1.5, *first[0].LagSeconds)
	require.EqualValues(t, 100, first[0].RowsSynced)
	require.Equal(t, "0/1000", *first[0].LSN)
	require.Nil(t, first[0].RowsPerSecond, "a first sample has no rate")
	require.Empty(t, history(m3.ID), "nobody holds m3")
	require.Empty(t, history(m2.ID), "replica-b holds m2")

	time.Sleep(1100 * time.Millisecond)
	setCounters(m1.ID, 200, "0/3000") // 400 rows: 300 more; 0x2000 bytes of WAL
	n, err = store.MirrorRecordHistory(ctx, "replica-a", all)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	second := history(m1.ID)
	require.Len(t, second, 2)
	secs := second[1].At.Sub(second[0].At).Seconds()
	require.Greater(t, secs, 1.0)
	require.InDelta(t, 300/secs, *second[1].RowsPerSecond, 0.01)
	require.InDelta(t, 0x2000/secs, *second[1].WALBytesPerSecond, 0.01)

	// A resync sets the counters back: no rate rather than a negative one.
	time.Sleep(10 * time.Millisecond)
	setCounters(m1.ID, 10, "0/3000")
	_, err = store.MirrorRecordHistory(ctx, "replica-a", all)
	require.NoError(t, err)
	third := history(m1.ID)
	require.Len(t, third, 3)
	require.Nil(t, third[2].RowsPerSecond)
	require.Equal(t, 0.0, *third[2].WALBytesPerSecond)

	// The mirror moves to replica-b: replica-a's samples stop, b's start.
	l1.Release()
	require.NotNil(t, tryLock(t, b, m1.ID))
	n, err = store.MirrorRecordHistory(ctx, "replica-a", all)
	require.NoError(t, err)
	require.Zero(t, n, "replica-a lost m1")
	require.Eventually(t, func() bool {
		n, err = store.MirrorRecordHistory(ctx, "replica-b", all)
		return err == nil && n == 2
	}, 10*time.Second, 50*time.Millisecond, "replica-b writes m1 and m2")

	// Limited reads return the newest samples, oldest first.
	newest, err := store.MirrorHistory(ctx, m1.ID, time.Now().Add(-time.Hour), 2)
	require.NoError(t, err)
	require.Len(t, newest, 2)
	require.Equal(t, third[2].At, newest[0].At)
	require.True(t, newest[1].At.After(newest[0].At))

	// Pruning: 25 samples two days old go in batches, the recent ones stay.
	exec(`INSERT INTO mirror_metrics_history (mirror_id, at, rows_synced)
		SELECT $1, now() - interval '2 days' - i * interval '1 minute', 0 FROM generate_series(1, 25) i`, m2.ID)
	deleted, err := store.MirrorHistoryPrune(ctx, time.Now().Add(-24*time.Hour), 10, 2)
	require.NoError(t, err)
	require.EqualValues(t, 20, deleted, "at most 2 batches of 10")
	deleted, err = store.MirrorHistoryPrune(ctx, time.Now().Add(-24*time.Hour), 10, 2)
	require.NoError(t, err)
	require.EqualValues(t, 5, deleted)
	require.Len(t, history(m1.ID), 4)
	require.Len(t, history(m2.ID), 1)

	// The samples go with their mirror.
	exec(`DELETE FROM mirrors WHERE id = $1`, m1.ID)
	var left int
	require.NoError(t, store.Pool().QueryRow(ctx, `SELECT count(*) FROM mirror_metrics_history`).Scan(&left))
	require.Equal(t, 1, left)
}

// TestLagsWrittenAt: writing lag measures marks the replica's
// lags_written_at in the same statement, with or without measures, and the
// mirror's worker carries it.
func TestLagsWrittenAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	a := startHolder(t, store, "replica-a")
	m1 := createMirror(t, store, "m1", mapping("a", "a2"))
	m2 := createMirror(t, store, "m2", mapping("b", "b2"))
	require.NotNil(t, tryLock(t, a, m1.ID))
	require.NotNil(t, tryLock(t, a, m2.ID))
	var w map[int64]db.MirrorWorker
	require.Eventually(t, func() bool {
		var err error
		w, err = store.MirrorWorkers(ctx)
		return err == nil && w[m1.ID].Name == "replica-a" && w[m2.ID].Name == "replica-a"
	}, 10*time.Second, 50*time.Millisecond)
	require.Nil(t, w[m1.ID].LagsWrittenAt, "nothing written yet")

	before := time.Now().Add(-time.Second)
	require.NoError(t, store.MirrorRecordLags(ctx, "replica-a", []db.LagMeasure{{MirrorID: m1.ID, LagSeconds: 0.25, MeasuredAt: time.Now()}}))
	w, err := store.MirrorWorkers(ctx)
	require.NoError(t, err)
	require.NotNil(t, w[m1.ID].LagsWrittenAt)
	require.True(t, w[m1.ID].LagsWrittenAt.After(before))
	require.Equal(t, *w[m1.ID].LagsWrittenAt, *w[m2.ID].LagsWrittenAt, "one replica, one time")
	first := *w[m1.ID].LagsWrittenAt

	time.Sleep(20 * time.Millisecond)
	require.NoError(t, store.MirrorRecordLags(ctx, "replica-a", nil))
	w, err = store.MirrorWorkers(ctx)
	require.NoError(t, err)
	require.True(t, w[m1.ID].LagsWrittenAt.After(first), "a write without measures marks it too")
	m, err := store.MirrorGetByID(ctx, m1.ID)
	require.NoError(t, err)
	require.InDelta(t, 0.25, *m.LagSeconds, 0.001)
}
