package cdc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/cdc"
)

// A run with StopAt applies exactly the transactions committed before the
// marker, ends by itself with the slot confirmed there, and the next run
// goes on with the rest: nothing lost, nothing twice.
func TestStopAtMarker(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY, v int)`
	stopAtMarker(t, setup(t, ddl, ddl, same("public", "t")), true)
}

// TestStopAtMarkerVersions is TestStopAtMarker on sources of other
// majors: PostgreSQL 12 and 13, whose pgoutput has no messages option and
// passes the marker on as the empty transaction that carries it, and 18,
// which sends it as a message. Nothing is written after the marker: the
// run must stop on the marker itself.
func TestStopAtMarkerVersions(t *testing.T) {
	t.Parallel()
	ddl := `CREATE TABLE public.t (id int PRIMARY KEY, v int)`
	for _, major := range []int{12, 13, 18} {
		t.Run(fmt.Sprintf("pg%d", major), func(t *testing.T) {
			t.Parallel()
			stopAtMarker(t, setupOn(t, pgtest.MajorCluster(t, major), pgtest.DestCluster(t), ddl, ddl, same("public", "t")), false)
		})
	}
}

// stopAtMarker runs the test on b; with writesAfter, transactions are
// written after the marker too.
func stopAtMarker(t *testing.T, b *testBundle, writesAfter bool) {
	ctx := context.Background()
	for i := range 20 {
		pgtest.Exec(t, b.src, fmt.Sprintf(`INSERT INTO t SELECT g, 0 FROM generate_series(%d, %d) g`, i*10+1, i*10+10))
	}
	pgtest.Exec(t, b.src, `UPDATE t SET v = 1 WHERE id <= 50`)
	src, err := pgx.Connect(ctx, b.src)
	require.NoError(t, err)
	defer src.Close(ctx)
	marker, err := cdc.EmitMarker(ctx, src, "test")
	require.NoError(t, err)
	if writesAfter {
		// Written after the marker: not part of the stopped run.
		pgtest.Exec(t, b.src, `INSERT INTO t SELECT g, 2 FROM generate_series(1001, 1050) g; DELETE FROM t WHERE id = 1`)
	}

	cfg := b.cfg
	cfg.StopAt = marker
	done := make(chan error, 1)
	go func() { done <- cdc.Run(ctx, cfg, b.rep, make(chan struct{})) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("Run with StopAt did not end by itself")
	}
	dst, err := pgx.Connect(ctx, b.dst)
	require.NoError(t, err)
	defer dst.Close(ctx)
	var n, updated, after int64
	require.NoError(t, dst.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE v = 1), count(*) FILTER (WHERE id > 1000) FROM t`).Scan(&n, &updated, &after))
	require.Equal(t, []int64{200, 50, 0}, []int64{n, updated, after}, "exactly the transactions before the marker are applied")
	// The run confirmed what it applied before it ended: its last status
	// update goes out as the stream closes, and the source's walsender
	// takes it in a moment later.
	require.NotEmpty(t, b.rep.batches)
	last := b.rep.batches[len(b.rep.batches)-1].LSN
	var confirmed bool
	var at string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		require.NoError(t, src.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $2::pg_lsn AND confirmed_flush_lsn < $3::pg_lsn, confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			cfg.SlotName, last.String(), marker.String()).Scan(&confirmed, &at))
		if confirmed || time.Now().After(deadline) {
			break
		}
	}
	require.True(t, confirmed, "the slot is confirmed at the last applied transaction (%s), before the marker (%s): it is at %s", last, marker, at)

	if !writesAfter {
		return
	}
	// The next run carries on after the stop.
	r := b.start(t)
	b.waitEqual(t, r, `SELECT * FROM t`, `SELECT * FROM t`)
	require.NoError(t, r.halt(t))
}
