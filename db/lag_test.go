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
