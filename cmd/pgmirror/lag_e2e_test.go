package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// lagSeconds reads the mirror's lag_seconds (-1 for null).
func (s *service) lagSeconds(name string) float64 {
	s.t.Helper()
	var m struct {
		LagSeconds *float64 `json:"lag_seconds"`
	}
	s.mustDo("GET", "/v1/mirrors/"+name, nil, 200, &m)
	if m.LagSeconds == nil {
		return -1
	}
	return *m.LagSeconds
}

// TestLagIdleAndPaused: an idle mirror shows lag_seconds 0 right after its
// copy and as soon as it streams again after a restart of the service (its
// first heartbeat, written while nothing is pending, does not count while
// it is on its way), a
// paused mirror under writes shows its lag growing, and once resumed it is
// back to 0. The source is a cluster of its own, idle but for the test.
func TestLagIdleAndPaused(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.NewCluster(t, true))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, `CREATE TABLE public.l (id int PRIMARY KEY, v text);
		INSERT INTO public.l SELECT g, 'v' FROM generate_series(1, 20000) g`)
	// The slot monitor reads every second: the lag of a mirror whose worker
	// does not measure follows the source within a second.
	env := "SERVICE_SLOT_MONITOR_INTERVAL=1s"
	s := startService(t, catalog, env)
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	s.mustDo("POST", "/v1/mirrors", mirrorRequest("lag", "", "l"), 201, nil)
	s.dumpOnFailure("lag")
	s.waitStatus("lag", "running", 60*time.Second)
	waitEqual(t, src, dst, "public.l", "public.l", "id, v", 30*time.Second)

	// idle watches lag_seconds for d: never more than a second.
	idle := func(what string, d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if lag := s.lagSeconds("lag"); lag > 1 {
				for _, line := range strings.Split(s.output.String(), "\n") {
					if !strings.Contains(line, "http request") && !strings.Contains(line, "component=river") {
						t.Log(line)
					}
				}
				t.Fatalf("%s: lag_seconds %.3f on an idle mirror", what, lag)
			}
		}
	}
	idle("after the copy", 12*time.Second)
	for i := range 2 {
		s.kill()
		time.Sleep(time.Duration(i) * 20 * time.Second)
		s = startService(t, catalog, env)
		// Until a worker streams the mirror again (River hands a killed
		// process's job over after a while), lag_seconds is the slot's
		// upper bound: watch from when the stream is back.
		deadline := time.Now().Add(90 * time.Second)
		for !strings.Contains(s.output.String(), `msg="CDC started"`) {
			if time.Now().After(deadline) {
				t.Fatal("the mirror did not stream again after the restart")
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(2 * time.Second) // its first measure: after a second
		idle("after a restart", 15*time.Second)
	}

	// Paused under writes: the lag grows; resumed, it comes back to 0.
	s.mustDo("POST", "/v1/mirrors/lag/pause", nil, 200, nil)
	s.waitStatus("lag", "paused", 30*time.Second)
	exec1(t, src, `UPDATE public.l SET v = 'paused' WHERE id <= 10`)
	var first float64
	deadline := time.Now().Add(40 * time.Second)
	for first = s.lagSeconds("lag"); first <= 0; first = s.lagSeconds("lag") {
		if time.Now().After(deadline) {
			t.Fatalf("lag_seconds %.3f while paused with a change waiting, want above 0", first)
		}
		time.Sleep(250 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if later := s.lagSeconds("lag"); later < first+1.5 {
		t.Errorf("lag_seconds %.3f 2 s after %.3f while paused, want it growing", later, first)
	}
	s.mustDo("POST", "/v1/mirrors/lag/resume", nil, 200, nil)
	waitEqual(t, src, dst, "public.l", "public.l", "id, v", 30*time.Second)
	backToZero := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for lag := s.lagSeconds("lag"); lag != 0; lag = s.lagSeconds("lag") {
			if time.Now().After(deadline) {
				t.Fatalf("lag_seconds %.3f %s, want 0", lag, what)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	backToZero("after resuming and catching up")

	// A real backlog shows its age: the destination table is locked, so
	// the batch with a new change waits; once the lock goes, 0 again.
	lock, err := pgx.Connect(t.Context(), dst)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close(t.Context())
	if _, err := lock.Exec(t.Context(), `BEGIN; LOCK TABLE public.l IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	exec1(t, src, `UPDATE public.l SET v = 'blocked' WHERE id = 1`)
	// The worker stops measuring while its batch waits: its last 0 is
	// dropped after 5 s and the slot's reading (every second) takes over.
	deadline = time.Now().Add(10 * time.Second)
	for {
		lag := s.lagSeconds("lag")
		if lag >= 3 && lag >= time.Since(written).Seconds()-2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag_seconds %.3f %s after a change that waits for a lock, want its age", lag, time.Since(written))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, err := lock.Exec(t.Context(), `COMMIT`); err != nil {
		t.Fatal(err)
	}
	waitEqual(t, src, dst, "public.l", "public.l", "id, v", 60*time.Second)
	backToZero("after the lock was released")
}
