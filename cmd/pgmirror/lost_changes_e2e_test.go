package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// lostView is what these tests read of a mirror's lost_changes.
type lostView struct {
	SinceLSN   *string   `json:"since_lsn"`
	UntilLSN   *string   `json:"until_lsn"`
	DetectedAt time.Time `json:"detected_at"`
	Reason     string    `json:"reason"`
	Tables     []string  `json:"tables"`
	Action     string    `json:"action"`
}

type lostStatus struct {
	Status      string    `json:"status"`
	LostChanges *lostView `json:"lost_changes"`
	Tables      []struct {
		TableName   string    `json:"table_name"`
		Status      string    `json:"status"`
		LostChanges *lostView `json:"lost_changes"`
	} `json:"tables"`
}

func (s *service) lost(name string) lostStatus {
	s.t.Helper()
	var st lostStatus
	s.mustDo("GET", "/v1/mirrors/"+name, nil, 200, &st)
	return st
}

// waitLost waits until the mirror's lost_changes lists exactly tables
// (none: null) with, when set, one of reasons and a known until_lsn.
func (s *service) waitLost(name string, tables []string, timeout time.Duration, reasons ...string) lostStatus {
	s.t.Helper()
	return waitUntil(s.t, timeout, func() (lostStatus, bool) {
		st := s.lost(name)
		l := st.LostChanges
		if len(tables) == 0 {
			return st, l == nil
		}
		return st, l != nil && slices.Equal(l.Tables, tables) && (len(reasons) == 0 || slices.Contains(reasons, l.Reason))
	}, func(st lostStatus) string {
		return fmt.Sprintf("mirror %s: lost_changes %+v (status %s), want tables %v reasons %v after %s", name, st.LostChanges, st.Status, tables, reasons, timeout)
	})
}

// checkLost asserts everything a user sees of lost changes of tables: the
// field in GET and in the list, each table's flag, the metric, an ERROR
// log entry naming the tables and what to do, and a cut-over refused with
// 409 naming them (also with verify false).
func checkLost(t *testing.T, s *service, name string, tables []string, message string) {
	t.Helper()
	st := s.lost(name)
	l := st.LostChanges
	if l == nil {
		t.Fatalf("lost_changes is null")
	}
	if l.SinceLSN == nil || l.UntilLSN == nil {
		t.Errorf("lost_changes %+v: since_lsn and until_lsn should both be known once the slot is back", l)
	}
	if l.DetectedAt.IsZero() || time.Since(l.DetectedAt) > 5*time.Minute {
		t.Errorf("detected_at %v", l.DetectedAt)
	}
	if !strings.Contains(l.Action, "/resync") || !strings.Contains(l.Action, "/verify") {
		t.Errorf("action %q does not name resync and verification", l.Action)
	}
	for _, tb := range st.Tables {
		if marked := tb.LostChanges != nil; marked != slices.Contains(tables, tb.TableName) {
			t.Errorf("table %s: lost_changes %+v, want marked %v", tb.TableName, tb.LostChanges, !marked)
		}
	}
	var list []struct {
		Name        string    `json:"name"`
		LostChanges *lostView `json:"lost_changes"`
	}
	s.mustDo("GET", "/v1/mirrors", nil, 200, &list)
	for _, m := range list {
		if m.Name == name && (m.LostChanges == nil || !slices.Equal(m.LostChanges.Tables, tables)) {
			t.Errorf("GET /v1/mirrors: lost_changes %+v, want tables %v", m.LostChanges, tables)
		}
	}
	waitMetric(t, s, name, float64(len(tables)))

	e := s.waitLog(name, message, 10*time.Second, nil)
	if e.Level != "ERROR" {
		t.Errorf("%q has level %s, want ERROR", message, e.Level)
	}
	logged, _ := e.Details["tables"].([]any)
	for _, tb := range tables {
		if !slices.Contains(logged, any(tb)) {
			t.Errorf("log entry %q names tables %v, not %s", message, logged, tb)
		}
	}
	if action, _ := e.Details["action"].(string); !strings.Contains(action, "resync") || !strings.Contains(action, "verif") {
		t.Errorf("log entry %q: action %q", message, action)
	}

	for _, body := range []map[string]any{{"quiet_seconds": 0}, {"quiet_seconds": 0, "verify": false}} {
		var refused struct {
			Error string `json:"error"`
		}
		if code := s.do("POST", "/v1/mirrors/"+name+"/cutover", body, &refused); code != 409 {
			t.Fatalf("cut-over %v of a mirror that lost changes: %d %s, want 409", body, code, refused.Error)
		}
		for _, tb := range tables {
			if !strings.Contains(refused.Error, tb) {
				t.Errorf("cut-over refusal %q does not name %s", refused.Error, tb)
			}
		}
		if !strings.Contains(refused.Error, "resync") || !strings.Contains(refused.Error, "verif") {
			t.Errorf("cut-over refusal %q does not say the way out", refused.Error)
		}
	}
	if got := s.lost(name).Status; got != "running" {
		t.Errorf("status after the refused cut-overs %q, want running", got)
	}
}

// waitMetric waits until pgmirror_mirror_tables_lost_changes of the mirror is want.
func waitMetric(t *testing.T, s *service, name string, want float64) {
	t.Helper()
	type reading struct {
		value    float64
		reported bool
	}
	waitUntil(t, 30*time.Second, func() (reading, bool) {
		got, ok := metricValue(s.scrape(""), "pgmirror_mirror_tables_lost_changes", map[string]string{"mirror": name})
		return reading{got, ok}, ok && got == want
	}, func(r reading) string {
		return fmt.Sprintf("pgmirror_mirror_tables_lost_changes{mirror=%q} = %v (reported %v), want %v", name, r.value, r.reported, want)
	})
}

// rowWriter inserts into public.a every few milliseconds until stopped (at
// most two minutes), counting the inserts.
type rowWriter struct {
	stop chan struct{}
	done sync.WaitGroup
	n    atomic.Int64
}

func startRowWriter(t *testing.T, dbURL string) *rowWriter {
	t.Helper()
	w := &rowWriter{stop: make(chan struct{})}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		defer conn.Close(context.Background())
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			select {
			case <-w.stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			if _, err := conn.Exec(context.Background(), `INSERT INTO public.a (v) VALUES ('w')`); err == nil {
				w.n.Add(1)
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *rowWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.done.Wait()
}

const lostSchema = `
	CREATE TABLE public.a (id bigserial PRIMARY KEY, v text);
	CREATE TABLE public.b (id bigint PRIMARY KEY, v text);
	INSERT INTO public.a (v) SELECT 'a' || g FROM generate_series(1, 2000) g;
	INSERT INTO public.b SELECT g, 'b' || g FROM generate_series(1, 500) g;`

// startLostMirror creates mirror name of public.a and public.b and waits
// until it runs with both tables equal.
func startLostMirror(t *testing.T, s *service, name, src, dst string) {
	t.Helper()
	s.mustDo("POST", "/v1/mirrors", map[string]any{
		"name": name, "source_peer": "src", "destination_peer": "dst", "cdc_sync_interval_seconds": 1,
		"table_mappings": []any{mapping("public", "a", "public", "a"), mapping("public", "b", "public", "b")},
	}, 201, nil)
	s.waitStatus(name, "running", 90*time.Second)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	waitEqual(t, src, dst, "public.b", "public.b", "id, v", 60*time.Second)
}

// terminateAndDrop does what a DBA cleaning up does: ends the slot's
// walsender and drops the slot at once.
func terminateAndDrop(t *testing.T, dbURL, slot string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for deadline := time.Now().Add(20 * time.Second); ; {
		_, _ = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		_, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
		var pgErr *pgconn.PgError
		if err == nil {
			return
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			t.Fatalf("drop slot %s: %v", slot, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLostChangesSlowReconnect: the slot of a paused mirror is dropped
// while the source writes; the slot monitor finds it missing, and resume
// recreates it. The mirror says which tables lost changes from which
// position (API, list, metric, ERROR entry), refuses a cut-over, and keeps
// the state until a verification finds a table equal (public.b, which took
// no writes) or a table resync copies it (public.a).
func TestLostChangesSlowReconnect(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, lostSchema)
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=1s")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	startLostMirror(t, s, "slow", src, dst)
	waitMetric(t, s, "slow", 0)

	w := startRowWriter(t, src)
	time.Sleep(500 * time.Millisecond)
	s.mustDo("POST", "/v1/mirrors/slow/pause", nil, 200, nil)
	s.waitStatus("slow", "paused", 30*time.Second)
	dropSlot(t, src, "pgmirror_slot_slow")
	before := w.n.Load()
	waitFor(t, "writes while the slot is gone", 30*time.Second, func() bool { return w.n.Load() > before+200 })

	st := s.waitLost("slow", []string{"public.a", "public.b"}, 30*time.Second, "slot_missing")
	if st.LostChanges.SinceLSN == nil || st.LostChanges.UntilLSN != nil {
		t.Errorf("a missing slot: lost_changes %+v, want since_lsn set and until_lsn null", st.LostChanges)
	}
	if e := s.waitLog("slow", "Replication slot missing: changes were lost", 10*time.Second, nil); e.Level != "ERROR" {
		t.Errorf("missing slot entry has level %s", e.Level)
	}

	s.mustDo("POST", "/v1/mirrors/slow/resume", nil, 200, nil)
	s.waitStatus("slow", "running", 30*time.Second)
	st = s.waitLost("slow", []string{"public.a", "public.b"}, 30*time.Second, "slot_recreated")
	w.halt()
	checkLost(t, s, "slow", []string{"public.a", "public.b"}, "Replication slot recreated: changes were lost")
	if n := queryInt64(t, src, `SELECT count(*) FROM public.a`) - queryInt64(t, dst, `SELECT count(*) FROM public.a`); n <= 0 {
		t.Fatalf("the destination lacks no rows of public.a (%d): the test lost nothing", n)
	}

	// A verification: public.b (no writes in the gap) is equal and cleared,
	// public.a differs and stays marked.
	v := s.runVerify(t, "slow", nil)
	if v.State != "done" {
		t.Fatalf("verification %+v", v)
	}
	s.waitLost("slow", []string{"public.a"}, 10*time.Second)
	s.waitLog("slow", "Lost changes cleared", 10*time.Second, func(e logEntry) bool { return e.Details["by"] == "verification" })
	checkLost(t, s, "slow", []string{"public.a"}, "Replication slot recreated: changes were lost")

	// A table resync copies public.a again: cleared, and equal.
	s.mustDo("POST", "/v1/mirrors/slow/resync/public.a", nil, 200, nil)
	s.waitLost("slow", nil, 90*time.Second)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	waitMetric(t, s, "slow", 0)
	s.waitLog("slow", "Lost changes cleared", 10*time.Second, func(e logEntry) bool { return e.Details["by"] == "copy" })
}

// TestLostChangesFastReconnect: a DBA ends the walsender of a running
// mirror under writes and drops its slot at once; the mirror's next run
// creates the slot again before the slot monitor looks. The run records
// the loss itself (never a silent new slot), a cut-over is refused, and a
// verification with repair clears it: then the cut-over completes and
// says the destination holds every change (every table checksummed).
func TestLostChangesFastReconnect(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, lostSchema)
	// The slot monitor looks only every minute: the run finds it alone.
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=1m")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	startLostMirror(t, s, "fast", src, dst)

	w := startRowWriter(t, src)
	time.Sleep(time.Second)
	terminateAndDrop(t, src, "pgmirror_slot_fast")
	before := w.n.Load()
	waitFor(t, "writes while the slot is gone", 30*time.Second, func() bool { return w.n.Load() > before+100 })
	waitFor(t, "the slot to be created again", 60*time.Second, func() bool { return slotExists(t, src, "pgmirror_slot_fast") })
	st := s.waitLost("fast", []string{"public.a", "public.b"}, 30*time.Second, "slot_recreated")
	s.waitStatus("fast", "running", 30*time.Second)
	w.halt()
	if st.LostChanges.SinceLSN == nil || st.LostChanges.UntilLSN == nil {
		t.Fatalf("lost_changes %+v: want the range", st.LostChanges)
	}
	checkLost(t, s, "fast", []string{"public.a", "public.b"}, "Replication slot recreated: changes were lost")
	if s.countLogs("fast", "Replication slot missing: changes were lost") != 0 {
		t.Logf("the slot monitor saw the slot missing too")
	}

	// New changes still replicate.
	exec1(t, src, `INSERT INTO public.b VALUES (100001, 'after')`)
	waitFor(t, "a change made after the slot came back", 30*time.Second, func() bool {
		return queryInt64(t, dst, `SELECT count(*) FROM public.b WHERE id = 100001`) == 1
	})

	// A verification finds the rows public.a lacks; its repair copies them
	// and compares again: equal, so the mark goes. public.b took writes
	// only after the slot came back: the first verification clears it.
	v := s.runVerify(t, "fast", nil)
	if v.State != "done" || v.RowsDiffering == nil || *v.RowsDiffering == 0 {
		t.Fatalf("verification after the loss: %+v", v)
	}
	s.waitLost("fast", []string{"public.a"}, 10*time.Second)
	var repair verifyResult
	s.mustDo("POST", fmt.Sprintf("/v1/mirrors/fast/verifications/%d/repair", v.ID), nil, 202, &repair)
	if repaired := s.waitVerify(t, "fast", repair.ID); repaired.State != "done" || repaired.RowsDiffering == nil || *repaired.RowsDiffering != 0 {
		t.Fatalf("repair: %+v %v", repaired, derefS(repaired.Error))
	}
	s.waitLost("fast", nil, 10*time.Second)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	waitMetric(t, s, "fast", 0)
	var ok struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	s.mustDo("POST", "/v1/mirrors/fast/cutover", map[string]any{"quiet_seconds": 1}, 200, &ok)
	if ok.Status != "completed" || !strings.Contains(ok.Message, "holds every change") {
		t.Errorf("cut-over once the loss is repaired: %+v", ok)
	}
}

// TestLostChangesSlotInvalidated: a source with a small
// max_slot_wal_keep_size removes the WAL a paused mirror's slot still
// needs (wal_status lost). The slot monitor records the loss; resume
// recreates the slot and completes the range; a cut-over is refused; a
// table resync and a verification clear it.
func TestLostChangesSlotInvalidated(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	cluster := pgtest.NewClusterWith(t, true, map[string]string{"max_slot_wal_keep_size": "1MB", "max_wal_size": "64MB", "min_wal_size": "32MB"})
	src := pgtest.NewDatabase(t, cluster)
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, lostSchema+`CREATE TABLE public.filler (id bigint, v text);`)
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=1s")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	startLostMirror(t, s, "inval", src, dst)

	s.mustDo("POST", "/v1/mirrors/inval/pause", nil, 200, nil)
	s.waitStatus("inval", "paused", 30*time.Second)
	exec1(t, src, `INSERT INTO public.a (v) SELECT 'gap' || g FROM generate_series(1, 500) g`)
	// More WAL than the slot may keep, then checkpoints until the source
	// removes it.
	deadline := time.Now().Add(90 * time.Second)
	for {
		var status *string
		queryOne(t, src, &status, `SELECT (SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'pgmirror_slot_inval')`)
		if status != nil && *status == "lost" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("wal_status %v after writing WAL and checkpoints", derefS(status))
		}
		exec1(t, src, `INSERT INTO public.filler SELECT g, repeat('x', 500) FROM generate_series(1, 20000) g; SELECT pg_switch_wal(); CHECKPOINT`)
	}
	st := s.waitLost("inval", []string{"public.a", "public.b"}, 30*time.Second, "slot_invalidated")
	if st.LostChanges.UntilLSN != nil {
		t.Errorf("an invalidated slot: until_lsn %v, want null until it is created again", *st.LostChanges.UntilLSN)
	}
	if e := s.waitLog("inval", "Replication slot invalidated: changes were lost", 10*time.Second, nil); e.Level != "ERROR" {
		t.Errorf("invalidated slot entry has level %s", e.Level)
	}

	s.mustDo("POST", "/v1/mirrors/inval/resume", nil, 200, nil)
	s.waitStatus("inval", "running", 60*time.Second)
	waitFor(t, "the slot to be usable again", 60*time.Second, func() bool {
		var status *string
		queryOne(t, src, &status, `SELECT (SELECT wal_status FROM pg_replication_slots WHERE slot_name = 'pgmirror_slot_inval')`)
		return status != nil && *status != "lost"
	})
	s.waitMirror("inval", "until_lsn of the recreated slot", 30*time.Second, func(fullStatus) bool {
		l := s.lost("inval").LostChanges
		return l != nil && l.UntilLSN != nil && l.Reason == "slot_invalidated"
	})
	checkLost(t, s, "inval", []string{"public.a", "public.b"}, "Replication slot invalidated: changes were lost")

	s.mustDo("POST", "/v1/mirrors/inval/resync/public.a", nil, 200, nil)
	s.waitLost("inval", []string{"public.b"}, 90*time.Second)
	waitEqual(t, src, dst, "public.a", "public.a", "id, v", 60*time.Second)
	if v := s.runVerify(t, "inval", map[string]any{"tables": []string{"public.b"}}); v.State != "done" {
		t.Fatalf("verification %+v", v)
	}
	s.waitLost("inval", nil, 10*time.Second)
	waitMetric(t, s, "inval", 0)
}

// TestLostChangesSlotBehind: someone drops the slot of a paused mirror and
// creates one of the same name: it exists, but starts past what the
// mirror applied. The resumed run finds that and records the loss.
func TestLostChangesSlotBehind(t *testing.T) {
	t.Parallel()
	catalog := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	src := pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	dst := pgtest.NewDatabase(t, pgtest.DestCluster(t))
	exec1(t, src, lostSchema)
	s := startService(t, catalog, "SERVICE_SLOT_MONITOR_INTERVAL=1h")
	s.createPeer("src", src)
	s.createPeer("dst", dst)
	startLostMirror(t, s, "behind", src, dst)
	// An idle while: the run confirms the source's WAL end past its
	// applied position (heartbeats), which must not count as a loss.
	time.Sleep(12 * time.Second)
	s.mustDo("POST", "/v1/mirrors/behind/pause", nil, 200, nil)
	s.waitStatus("behind", "paused", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/behind/resume", nil, 200, nil)
	s.waitStatus("behind", "running", 30*time.Second)
	exec1(t, src, `INSERT INTO public.b VALUES (9001, 'x')`)
	waitEqual(t, src, dst, "public.b", "public.b", "id, v", 30*time.Second)
	if l := s.lost("behind").LostChanges; l != nil {
		t.Fatalf("a healthy mirror reports lost changes: %+v", l)
	}

	s.mustDo("POST", "/v1/mirrors/behind/pause", nil, 200, nil)
	s.waitStatus("behind", "paused", 30*time.Second)
	dropSlot(t, src, "pgmirror_slot_behind")
	exec1(t, src, `INSERT INTO public.b VALUES (9002, 'lost')`)
	exec1(t, src, `SELECT pg_create_logical_replication_slot('pgmirror_slot_behind', 'pgoutput')`)
	s.mustDo("POST", "/v1/mirrors/behind/resume", nil, 200, nil)
	st := s.waitLost("behind", []string{"public.a", "public.b"}, 30*time.Second, "slot_behind")
	if st.LostChanges.SinceLSN == nil || st.LostChanges.UntilLSN == nil {
		t.Fatalf("lost_changes %+v: want the range", st.LostChanges)
	}
	s.waitStatus("behind", "running", 30*time.Second)
	checkLost(t, s, "behind", []string{"public.a", "public.b"}, "Replication slot moved past the mirror's position: changes were lost")
	// The CLI shows it too.
	u := newCLIUser(t)
	if r := u.run(testAdminPassword+"\n", "login", "--url", s.baseURL, "--user", "admin"); r.code != 0 {
		t.Fatalf("login: exit %d %s", r.code, r.stderr)
	}
	if out := u.ok("mirrors", "get", "behind"); !strings.Contains(out, "Lost changes:") || !strings.Contains(out, "public.a, public.b") || !strings.Contains(out, "slot_behind") {
		t.Errorf("mirrors get does not show the lost changes:\n%s", out)
	}
	if out := u.ok("mirrors", "list"); !strings.Contains(out, "changes lost: 2 tables") {
		t.Errorf("mirrors list does not show the lost changes:\n%s", out)
	}
	// And the console: a badge in the list, a banner on the mirror's page.
	b := newBrowser(t, 3*time.Minute)
	b.login(s.baseURL, "admin", testAdminPassword)
	b.wait("the lost-changes badge in the list", `(() => { const r = document.querySelector('#mirrors tr[data-mirror="behind"] .lost-badge');
		return r !== null && r.textContent.includes('2 tables'); })()`)
	b.do("open the mirror", chromedp.Click(chromedp.CSS(`#mirrors tr[data-mirror="behind"] a`)))
	b.wait("the lost-changes banner", `(() => { const x = document.querySelector('#lost-changes .lost-banner');
		return x !== null && x.textContent.includes('public.a, public.b') && x.textContent.includes('Resync'); })()`)
	b.noPageErrors()
	if n := queryInt64(t, dst, `SELECT count(*) FROM public.b WHERE id = 9002`); n != 0 {
		t.Errorf("the row written while there was no slot reached the destination (%d): the test lost nothing", n)
	}
	// The loss is recorded once: a restart of the run does not find it again.
	s.mustDo("POST", "/v1/mirrors/behind/pause", nil, 200, nil)
	s.waitStatus("behind", "paused", 30*time.Second)
	s.mustDo("POST", "/v1/mirrors/behind/resume", nil, 200, nil)
	s.waitStatus("behind", "running", 30*time.Second)
	time.Sleep(2 * time.Second)
	if n := s.countLogs("behind", "Replication slot moved past the mirror's position: changes were lost"); n != 1 {
		t.Errorf("%d entries for one loss, want 1", n)
	}
}

// cutoverAnswer is the body of a cut-over that completed.
type cutoverAnswer struct {
	Message  string   `json:"message"`
	Status   string   `json:"status"`
	Warnings []string `json:"warnings"`
	Cutover  struct {
		RowCountsOnly []string          `json:"row_counts_only"`
		Steps         []cutoverStepView `json:"steps"`
	} `json:"cutover"`
}

// TestCutoverHonest: a cut-over never claims more than it checked. A
// table over the checksum size limit, and every table with verify false,
// gets row counts only: a row changed on the destination goes unnoticed,
// and the answer names the table in warnings and row_counts_only and says
// "row counts only", never that the destination holds every change. A row
// count mismatch is refused with advice that repairs every table.
func TestCutoverHonest(t *testing.T) {
	t.Parallel()
	// A checksum limit of 200 kB: public.small is under it, public.big over.
	s := startService(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)), "SERVICE_CUTOVER_CHECKSUM_MAX_BYTES=200000")
	type pair struct{ src, dst string }
	envs := map[string]pair{}
	for _, name := range []string{"bysize", "noverify", "counts"} {
		p := pair{pgtest.NewDatabase(t, pgtest.SourceCluster(t)), pgtest.NewDatabase(t, pgtest.DestCluster(t))}
		envs[name] = p
		exec1(t, p.src, `
			CREATE TABLE public.small (id int PRIMARY KEY, v text);
			CREATE TABLE public.big (id int PRIMARY KEY, v text);
			INSERT INTO public.small SELECT g, 's' || g FROM generate_series(1, 10) g;
			INSERT INTO public.big SELECT g, repeat('b', 200) FROM generate_series(1, 5000) g;`)
		s.createPeer("src_"+name, p.src)
		s.createPeer("dst_"+name, p.dst)
		s.mustDo("POST", "/v1/mirrors", map[string]any{
			"name": name, "source_peer": "src_" + name, "destination_peer": "dst_" + name, "cdc_sync_interval_seconds": 1,
			"table_mappings": []any{mapping("public", "small", "public", "small"), mapping("public", "big", "public", "big")},
		}, 201, nil)
	}
	for name, p := range envs {
		s.waitStatus(name, "running", 90*time.Second)
		waitEqual(t, p.src, p.dst, "public.big", "public.big", "id, v", 60*time.Second)
		waitEqual(t, p.src, p.dst, "public.small", "public.small", "id, v", 60*time.Second)
	}
	var size int64
	queryOne(t, envs["bysize"].src, &size, `SELECT pg_table_size('public.big')`)
	if size <= 200000 {
		t.Fatalf("public.big is only %d bytes", size)
	}

	// Over the size limit: counts only, and the answer says so.
	exec1(t, envs["bysize"].dst, `UPDATE public.big SET v = 'changed' WHERE id = 7`)
	var a cutoverAnswer
	s.mustDo("POST", "/v1/mirrors/bysize/cutover", map[string]any{"quiet_seconds": 1}, 200, &a)
	checkCountsOnly(t, "size limit", a, []string{"public.big"}, "SERVICE_CUTOVER_CHECKSUM_MAX_BYTES")
	compared := false
	for _, st := range a.Cutover.Steps {
		if st.Name == "verify_checksums" {
			compared = true
			if _, ok := st.Detail["tables"].(map[string]any)["public.small"]; !ok {
				t.Errorf("verify_checksums did not compare public.small: %v", st.Detail)
			}
		}
	}
	if !compared {
		t.Errorf("no verify_checksums step: public.small is under the limit")
	}

	// verify false: every table counts only.
	exec1(t, envs["noverify"].dst, `UPDATE public.small SET v = 'changed' WHERE id = 3`)
	a = cutoverAnswer{}
	s.mustDo("POST", "/v1/mirrors/noverify/cutover", map[string]any{"quiet_seconds": 1, "verify": false}, 200, &a)
	checkCountsOnly(t, "verify false", a, []string{"public.small", "public.big"}, `"verify": false`)

	// A count mismatch in one table: the advice covers every table.
	exec1(t, envs["counts"].dst, `DELETE FROM public.small WHERE id = 5; UPDATE public.big SET v = 'changed' WHERE id = 9`)
	var refused struct {
		Error string `json:"error"`
	}
	if code := s.do("POST", "/v1/mirrors/counts/cutover", map[string]any{"quiet_seconds": 1, "verify": false}, &refused); code != 409 {
		t.Fatalf("cut-over with a count mismatch: %d %s", code, refused.Error)
	}
	for _, want := range []string{"verify_row_counts", "public.small has 10 rows on the source and 9", "verification with repair",
		"/v1/mirrors/counts/verify", "resync every table (POST /v1/mirrors/counts/resync)"} {
		if !strings.Contains(refused.Error, want) {
			t.Errorf("count mismatch refusal %q lacks %q", refused.Error, want)
		}
	}
	if strings.Contains(refused.Error, "resync those tables") {
		t.Errorf("count mismatch refusal advises resyncing only the counted tables: %q", refused.Error)
	}
	if got := s.mirror("counts").Status; got != "running" {
		t.Errorf("status after the refused cut-over %q", got)
	}
}

// checkCountsOnly asserts that a completed cut-over names tables as
// checked by row counts only, with reason, and claims nothing more.
func checkCountsOnly(t *testing.T, what string, a cutoverAnswer, tables []string, reason string) {
	t.Helper()
	if a.Status != "completed" {
		t.Fatalf("%s: status %q", what, a.Status)
	}
	if strings.Contains(a.Message, "holds every change") {
		t.Errorf("%s: the message claims more than was checked: %q", what, a.Message)
	}
	if !strings.Contains(a.Message, "row counts only") {
		t.Errorf("%s: the message does not say row counts only: %q", what, a.Message)
	}
	if !slices.Equal(a.Cutover.RowCountsOnly, tables) {
		t.Errorf("%s: row_counts_only %v, want %v", what, a.Cutover.RowCountsOnly, tables)
	}
	for _, tb := range tables {
		if !strings.Contains(a.Message, tb) {
			t.Errorf("%s: the message does not name %s: %q", what, tb, a.Message)
		}
		found := false
		for _, w := range a.Warnings {
			if strings.HasPrefix(w, tb+": row counts only") && strings.Contains(w, reason) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no warning names %s with the reason %q: %v", what, tb, reason, a.Warnings)
		}
	}
}
