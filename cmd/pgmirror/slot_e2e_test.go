package main

import (
	"testing"
	"time"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestSlotHealth checks slot_lag_bytes and slot_wal_status in the status
// record: a paused mirror's lag grows with the writes on the source while
// the slot stays reserved, and falls back once the mirror is resumed. A
// second mirror whose source stops answering does not keep the first one's
// slot from being read.
func TestSlotHealth(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	// A private source: the lag measured is this test's writes only.
	src := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	other := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	exec1(t, src, `CREATE TABLE public.t (id bigint PRIMARY KEY, v text);
		INSERT INTO public.t SELECT g, 'v' || g FROM generate_series(1, 1000) g`)
	exec1(t, other, `CREATE TABLE public.o (id bigint PRIMARY KEY)`)

	s := startService(t, catalog)
	// The unreachable source gets the lower peer id, so it is read first.
	s.createPeer("gone", other)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "gone", "source_peer": "gone", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "o", "gone", "o")},
	}, 201, nil)
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": "lag", "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "t", "public", "t")},
	}, 201, nil)
	s.waitStatus("gone", "running", 60*time.Second)
	s.waitStatus("lag", "running", 60*time.Second)

	// The slot monitor runs every 15 s (and at start).
	m := s.waitMirror("lag", "a first slot reading", 45*time.Second, func(m fullStatus) bool {
		return m.SlotWALStatus != nil && m.SlotLagBytes != nil && m.SlotCheckedAt != nil
	})
	if *m.SlotWALStatus != "reserved" {
		t.Errorf("slot_wal_status of a running mirror = %q, want reserved", *m.SlotWALStatus)
	}
	g := s.waitMirror("gone", "a first slot reading", 45*time.Second, func(m fullStatus) bool { return m.SlotCheckedAt != nil })

	// The second mirror's source stops answering: a blackhole address.
	s.mustDo("PUT", "/v1/peers/gone", map[string]any{"host": "192.0.2.1"}, 200, nil)
	goneAt := time.Now()

	s.mustDo("POST", "/v1/mirrors/lag/pause", nil, 200, nil)
	pausedAt := time.Now()
	// The status says paused at once; the run stops at its next batch
	// boundary: wait until its slot is released too, or it may still
	// stream (and confirm) part of the WAL below.
	s.waitStatus("lag", "paused", 30*time.Second)
	waitFor(t, "the paused mirror's slot to be released", 30*time.Second, func() bool {
		return queryInt64(t, src, `SELECT count(*) FROM pg_replication_slots WHERE database = current_database() AND active`) == 0
	})
	// About 6 MB of WAL that the paused mirror's slot must keep.
	exec1(t, src, `INSERT INTO public.t SELECT g, repeat('x', 200) FROM generate_series(1001, 25000) g`)
	var written int64
	pgxConnQuery(t, src, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint FROM pg_replication_slots`, &written)
	if written < 4<<20 {
		t.Fatalf("the source holds only %d bytes for the slot", written)
	}
	m = s.waitMirror("lag", "the lag of the paused mirror to grow", 45*time.Second, func(m fullStatus) bool {
		return m.SlotCheckedAt != nil && m.SlotCheckedAt.After(pausedAt) && m.SlotLagBytes != nil && *m.SlotLagBytes >= written
	})
	pausedLag := *m.SlotLagBytes
	if m.Status != "paused" {
		t.Errorf("status %q, want paused", m.Status)
	}
	if m.SlotWALStatus == nil || *m.SlotWALStatus != "reserved" {
		t.Errorf("slot_wal_status of the paused mirror = %v, want reserved", derefS(m.SlotWALStatus))
	}
	// The list of mirrors shows the same.
	var list []map[string]any
	s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
	for _, e := range list {
		if e["name"] == "lag" {
			if lag, ok := e["slot_lag_bytes"].(float64); !ok || int64(lag) < written {
				t.Errorf("GET /v1/mirrors: slot_lag_bytes = %v, want >= %d", e["slot_lag_bytes"], written)
			}
		}
	}

	s.mustDo("POST", "/v1/mirrors/lag/resume", nil, 200, nil)
	waitEqual(t, src, dst, "public.t", "public.t", "id, v", 60*time.Second)
	resumedAt := time.Now()
	m = s.waitMirror("lag", "the lag to fall back after resume", 45*time.Second, func(m fullStatus) bool {
		return m.SlotCheckedAt != nil && m.SlotCheckedAt.After(resumedAt) && m.SlotLagBytes != nil && *m.SlotLagBytes < pausedLag/10
	})
	if *m.SlotWALStatus != "reserved" {
		t.Errorf("slot_wal_status after resume = %q, want reserved", *m.SlotWALStatus)
	}

	// Meanwhile the unreachable source's mirror kept its last reading.
	// (A reading under way during the PUT may still land just after it.)
	if g2 := s.full("gone"); g2.SlotCheckedAt == nil || g2.SlotCheckedAt.After(goneAt.Add(time.Second)) {
		t.Errorf("the unreachable source's slot_checked_at moved from %v to %v (source gone at %v)", g.SlotCheckedAt, g2.SlotCheckedAt, goneAt)
	}
}
