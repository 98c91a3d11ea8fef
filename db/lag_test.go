package db_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// TestLag: the worker's fresh measure is taken (a positive one grows with
// its age); a 0 that stopped coming (a batch being applied, a lock) is not
// trusted; without a fresh measure the slot decides: 0 when it holds no
// unconfirmed WAL, else the time since the last applied commit (so a paused
// mirror's lag grows); nil for a completed mirror.
func TestLag(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		m    db.Mirror
		want *float64
	}{
		{"fresh 0", db.Mirror{Status: db.StatusRunning, LagSeconds: f(0), LagMeasuredAt: ago(time.Second), SlotLagBytes: i(500), AppliedCommitAt: ago(30 * time.Second)}, f(0)},
		{"fresh backlog grows with the measure's age", db.Mirror{Status: db.StatusRunning, LagSeconds: f(3), LagMeasuredAt: ago(2 * time.Second)}, f(5)},
		{"a 0 that stopped coming", db.Mirror{Status: db.StatusRunning, LagSeconds: f(0), LagMeasuredAt: ago(8 * time.Second), SlotLagBytes: i(500), AppliedCommitAt: ago(30 * time.Second)}, f(30)},
		{"a stale 0 with nothing unconfirmed", db.Mirror{Status: db.StatusRunning, LagSeconds: f(0), LagMeasuredAt: ago(8 * time.Second), SlotLagBytes: i(0)}, f(0)},
		{"paused with WAL waiting", db.Mirror{Status: db.StatusPaused, LagSeconds: f(0), LagMeasuredAt: ago(time.Second), SlotLagBytes: i(500), AppliedCommitAt: ago(12 * time.Second)}, f(12)},
		{"paused idle", db.Mirror{Status: db.StatusPaused, SlotLagBytes: i(0), AppliedCommitAt: ago(12 * time.Second)}, f(0)},
		{"unknown", db.Mirror{Status: db.StatusRunning}, nil},
		{"completed", db.Mirror{Status: db.StatusCompleted, SlotLagBytes: i(0)}, nil},
	} {
		got := tc.m.Lag(now)
		if tc.want == nil {
			require.Nil(t, got, tc.name)
			continue
		}
		require.NotNil(t, got, tc.name)
		require.InDelta(t, *tc.want, *got, 0.01, tc.name)
	}
}

// TestLagRunBy: a running mirror whose measure is stale while its replica
// has not written lag measures lately (cut off from the catalog) has an
// unknown lag, not the age of its last measure; while the replica keeps
// writing, the stale measure means a stream that stopped measuring and the
// slot's upper bound holds; a fresh measure is taken as it is.
func TestLagRunBy(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	stale := db.Mirror{Status: db.StatusRunning, LagSeconds: f(0.01), LagMeasuredAt: ago(40 * time.Second), SlotLagBytes: i(500), AppliedCommitAt: ago(40 * time.Second)}
	fresh := db.Mirror{Status: db.StatusRunning, LagSeconds: f(0.5), LagMeasuredAt: ago(time.Second), SlotLagBytes: i(500), AppliedCommitAt: ago(40 * time.Second)}
	paused := db.Mirror{Status: db.StatusPaused, SlotLagBytes: i(500), AppliedCommitAt: ago(40 * time.Second)}
	for _, tc := range []struct {
		name string
		m    db.Mirror
		w    db.MirrorWorker
		want *float64
	}{
		{"replica cut off: unknown", stale, db.MirrorWorker{LagsWrittenAt: ago(35 * time.Second)}, nil},
		{"replica never wrote: unknown", stale, db.MirrorWorker{}, nil},
		{"replica writes, this stream stopped measuring: the slot's bound", stale, db.MirrorWorker{LagsWrittenAt: ago(time.Second)}, f(40)},
		{"fresh measure", fresh, db.MirrorWorker{LagsWrittenAt: ago(35 * time.Second)}, f(1.5)},
		{"not streaming: the slot's view", paused, db.MirrorWorker{}, f(40)},
	} {
		got := tc.m.LagRunBy(tc.w, now)
		if tc.want == nil {
			require.Nil(t, got, tc.name)
			continue
		}
		require.NotNil(t, got, tc.name)
		require.InDelta(t, *tc.want, *got, 0.01, tc.name)
	}
}

// TestLagBoard: the board answers with this process's measure where it is
// newer than the catalog's, never goes back to an older one, keeps the
// applied commit time of a measure that has none, and leaves other mirrors
// and a nil board alone.
func TestLagBoard(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	f := func(v float64) *float64 { return &v }
	catalog := db.Mirror{ID: 7, Status: db.StatusRunning, LagSeconds: f(0), LagMeasuredAt: ago(40 * time.Second), AppliedCommitAt: ago(41 * time.Second)}

	var none *db.LagBoard
	none.Put(db.LagMeasure{MirrorID: 7, MeasuredAt: now})
	require.Equal(t, catalog, none.Newest(catalog))

	b := db.NewLagBoard()
	require.Equal(t, catalog, b.Newest(catalog), "nothing measured here")
	b.Put(db.LagMeasure{MirrorID: 7, LagSeconds: 0.2, MeasuredAt: *ago(time.Second), AppliedCommit: *ago(2 * time.Second)})
	b.Put(db.LagMeasure{MirrorID: 7, LagSeconds: 0.1, MeasuredAt: *ago(500 * time.Millisecond)})
	b.Put(db.LagMeasure{MirrorID: 7, LagSeconds: 9, MeasuredAt: *ago(3 * time.Second)}) // older: ignored
	got := b.Newest(catalog)
	require.Equal(t, 0.1, *got.LagSeconds)
	require.WithinDuration(t, *ago(500 * time.Millisecond), *got.LagMeasuredAt, time.Millisecond)
	require.WithinDuration(t, *ago(2 * time.Second), *got.AppliedCommitAt, time.Millisecond, "kept from the measure before")
	require.InDelta(t, 0.6, *got.Lag(now), 0.01)

	newer := catalog
	newer.LagMeasuredAt = ago(100 * time.Millisecond)
	require.Equal(t, newer, b.Newest(newer), "the catalog's measure is newer")
	other := catalog
	other.ID = 8
	require.Equal(t, other, b.Newest(other))
}

// TestLagShown: without a worker a running mirror's lag grows with its last
// measure's age, except while the replica asking is unsure of the catalog
// (it just came back): then a mirror without a fresh measure has an unknown
// lag, and one this replica streams (a fresh measure) shows it; with a
// worker, LagRunBy.
func TestLagShown(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago := func(d time.Duration) *time.Time { at := now.Add(-d); return &at }
	f := func(v float64) *float64 { return &v }
	i := func(v int64) *int64 { return &v }
	stale := db.Mirror{Status: db.StatusRunning, DesiredState: db.DesiredRunning, LagSeconds: f(0.01), LagMeasuredAt: ago(35 * time.Second),
		SlotLagBytes: i(500), AppliedCommitAt: ago(35 * time.Second)}
	fresh := stale
	fresh.LagSeconds, fresh.LagMeasuredAt = f(0.5), ago(time.Second)
	paused := db.Mirror{Status: db.StatusPaused, DesiredState: db.DesiredPaused, SlotLagBytes: i(500), AppliedCommitAt: ago(40 * time.Second)}
	writing := &db.MirrorWorker{LagsWrittenAt: ago(time.Second)}
	for _, tc := range []struct {
		name   string
		m      db.Mirror
		w      *db.MirrorWorker
		unsure bool
		want   *float64
	}{
		{"no worker: the measure's age", stale, nil, false, f(35.01)},
		{"no worker, catalog just back: unknown", stale, nil, true, nil},
		{"no worker, catalog just back, streamed here: the stream's", fresh, nil, true, f(1.5)},
		{"paused, catalog just back: the slot's view", paused, nil, true, f(40)},
		{"worker writing: LagRunBy", stale, writing, true, f(35)},
	} {
		got := tc.m.LagShown(tc.w, tc.unsure, now)
		if tc.want == nil {
			require.Nil(t, got, tc.name)
			continue
		}
		require.NotNil(t, got, tc.name)
		require.InDelta(t, *tc.want, *got, 0.01, tc.name)
	}
}

// TestLagBoardUnsure: a replica is unsure of the catalog from a failed lag
// write until some time after its writes reach the catalog again; a nil
// board is never unsure.
func TestLagBoardUnsure(t *testing.T) {
	t.Parallel()
	now := time.Now()
	b := db.NewLagBoard()
	require.False(t, b.Unsure(now))
	b.CatalogWrite(true, now)
	require.False(t, b.Unsure(now), "writes that always reached the catalog")
	b.CatalogWrite(false, now)
	require.True(t, b.Unsure(now.Add(time.Minute)), "while writes fail")
	b.CatalogWrite(true, now)
	require.True(t, b.Unsure(now.Add(5*time.Second)), "just after the catalog came back")
	require.False(t, b.Unsure(now.Add(11*time.Second)), "once the locks are back")
	var none *db.LagBoard
	none.CatalogWrite(false, now)
	require.False(t, none.Unsure(now))
}
