package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/db/secretbox"
	"github.com/pgmirror/pgmirror/engine/change"
)

// The lifecycle tests run mirrors in-process: a migrated catalog, real
// source and destination databases (db/pgtest), and one or more replicas,
// each a real db.LockHolder and River client with every pgmirror worker
// (NewClient). A replica's runs see the catalog and the lock holder through
// faultStore and faultLocks (seams.go), which pass every call through to the
// real ones unless the test injects a failure.

// errInjected is the failure a test injects into a catalog call.
var errInjected = errors.New("injected failure: the catalog cannot be reached")

// errStepInjected is the failure a test injects into a step of a run.
var errStepInjected = errors.New("injected failure")

// faults are the failures injected into one replica's catalog calls.
type faults struct {
	mu       sync.Mutex
	failing  map[string]int // method name -> failures left (-1: until healed)
	calls    map[string]int // method name -> failures injected so far
	lockDown bool           // TryLock fails: the lock cannot be taken (back)
	steps    map[string]int // cut-over step -> failures left after the step did its work
	gates    map[string]*gate
}

// gate holds the calls of a method until it is opened.
type gate struct {
	reached     chan struct{} // closed by the first call held
	reachedOnce sync.Once
	open        chan struct{}
	openOnce    sync.Once
}

// hold makes the calls of method wait, until the returned open is called
// or their context ends (then they fail with its error); reached is
// closed when the first call waits. It slows a run down at a known point
// (a snapshot's progress write: the copy stands still mid-way).
func (f *faults) hold(method string) (reached <-chan struct{}, open func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := &gate{reached: make(chan struct{}), open: make(chan struct{})}
	f.gates[method] = g
	return g.reached, func() { g.openOnce.Do(func() { close(g.open) }) }
}

// wait holds a call of method while its gate is closed.
func (f *faults) wait(ctx context.Context, method string) error {
	f.mu.Lock()
	g := f.gates[method]
	f.mu.Unlock()
	if g == nil {
		return nil
	}
	select {
	case <-g.open:
		return nil
	default:
	}
	g.reachedOnce.Do(func() { close(g.reached) })
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// failStepOnce makes the next run of the cut-over step fail once it did
// its work (runHooks.afterCutoverStep).
func (f *faults) failStepOnce(step string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.steps[step]++
}

// stepHit is the replica's runHooks.afterCutoverStep: the injected
// failure of the step, if any.
func (f *faults) stepHit(step string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.steps[step] == 0 {
		return nil
	}
	f.steps[step]--
	f.calls["step "+step]++
	return fmt.Errorf("cut-over step %s: %w", step, errStepInjected)
}

// fail makes every call of the methods fail until heal.
func (f *faults) fail(methods ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range methods {
		f.failing[m] = -1
	}
}

// failOnce makes the next call of method fail.
func (f *faults) failOnce(method string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing[method] = 1
}

// heal ends every injected failure.
func (f *faults) heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failing = map[string]int{}
	f.lockDown = false
}

// setLockDown makes TryLock fail (down) or work again.
func (f *faults) setLockDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lockDown = down
}

// injected is how many failures of method were injected so far.
func (f *faults) injected(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[method]
}

// hit returns the injected failure of a call of method, if any.
func (f *faults) hit(method string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.failing[method]
	if !ok || n == 0 {
		return nil
	}
	if n > 0 {
		f.failing[method] = n - 1
	}
	f.calls[method]++
	return fmt.Errorf("%s: %w", method, errInjected)
}

// outageMethods are the catalog calls a run makes while it streams: a
// catalog outage fails them all.
var outageMethods = []string{"MirrorGetByID", "MirrorTables", "MirrorRecordProgress", "MirrorRecordLag", "LogInsert", "LogInsertAt",
	"VerificationHoldRequest", "MirrorRaiseConfirmCeiling", "MirrorEnds", "PeerList"}

// faultStore is a real catalog store whose calls fail as faults say.
type faultStore struct {
	*db.Store
	f *faults
}

func (s *faultStore) MirrorGetByID(ctx context.Context, id int64) (db.Mirror, error) {
	if err := s.f.hit("MirrorGetByID"); err != nil {
		return db.Mirror{}, err
	}
	return s.Store.MirrorGetByID(ctx, id)
}

func (s *faultStore) MirrorTables(ctx context.Context, mirrorID int64) ([]db.MirrorTable, error) {
	if err := s.f.hit("MirrorTables"); err != nil {
		return nil, err
	}
	return s.Store.MirrorTables(ctx, mirrorID)
}

func (s *faultStore) MirrorRecordProgress(ctx context.Context, mirrorID int64, lsn string, batchID int64, tables map[int64]change.Counts) error {
	if err := s.f.hit("MirrorRecordProgress"); err != nil {
		return err
	}
	return s.Store.MirrorRecordProgress(ctx, mirrorID, lsn, batchID, tables)
}

func (s *faultStore) MirrorRecordLag(ctx context.Context, mirrorID int64, lag float64, measuredAt, appliedCommit time.Time) error {
	if err := s.f.hit("MirrorRecordLag"); err != nil {
		return err
	}
	return s.Store.MirrorRecordLag(ctx, mirrorID, lag, measuredAt, appliedCommit)
}

func (s *faultStore) LogInsert(ctx context.Context, mirrorID int64, level db.LogLevel, message string, details any) error {
	if err := s.f.hit("LogInsert"); err != nil {
		return err
	}
	return s.Store.LogInsert(ctx, mirrorID, level, message, details)
}

func (s *faultStore) LogInsertAt(ctx context.Context, mirrorID int64, at time.Time, level db.LogLevel, message string, details any) error {
	if err := s.f.hit("LogInsertAt"); err != nil {
		return err
	}
	return s.Store.LogInsertAt(ctx, mirrorID, at, level, message, details)
}

func (s *faultStore) VerificationHoldRequest(ctx context.Context, mirrorID int64) (db.Verification, bool, error) {
	if err := s.f.hit("VerificationHoldRequest"); err != nil {
		return db.Verification{}, false, err
	}
	return s.Store.VerificationHoldRequest(ctx, mirrorID)
}

func (s *faultStore) MirrorRaiseConfirmCeiling(ctx context.Context, mirrorID int64, lsn string) (string, error) {
	if err := s.f.hit("MirrorRaiseConfirmCeiling"); err != nil {
		return "", err
	}
	return s.Store.MirrorRaiseConfirmCeiling(ctx, mirrorID, lsn)
}

func (s *faultStore) MirrorEnds(ctx context.Context) ([]db.MirrorEnd, error) {
	if err := s.f.hit("MirrorEnds"); err != nil {
		return nil, err
	}
	return s.Store.MirrorEnds(ctx)
}

func (s *faultStore) PeerList(ctx context.Context) ([]db.Peer, error) {
	if err := s.f.hit("PeerList"); err != nil {
		return nil, err
	}
	return s.Store.PeerList(ctx)
}

func (s *faultStore) MirrorTableSnapshotProgress(ctx context.Context, tableID int64, rows int64) error {
	if err := s.f.wait(ctx, "MirrorTableSnapshotProgress"); err != nil {
		return err
	}
	return s.Store.MirrorTableSnapshotProgress(ctx, tableID, rows)
}

func (s *faultStore) BeginTx(ctx context.Context) (pgx.Tx, error) {
	if err := s.f.hit("BeginTx"); err != nil {
		return nil, err
	}
	return s.Store.BeginTx(ctx)
}

// faultLocks is a real lock holder whose TryLock fails while faults say
// the lock is down.
type faultLocks struct {
	*db.LockHolder
	f *faults
}

func (l *faultLocks) TryLock(ctx context.Context, mirrorID int64) (*db.MirrorLock, error) {
	l.f.mu.Lock()
	down := l.f.lockDown
	l.f.mu.Unlock()
	if down {
		return nil, fmt.Errorf("try lock of mirror %d: %w", mirrorID, errInjected)
	}
	return l.LockHolder.TryLock(ctx, mirrorID)
}

// logRecorder keeps the messages of a replica's process log.
type logRecorder struct {
	mu    sync.Mutex
	msgs  []string
	lines []string // the messages with their time and attributes, for a failed test's output
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	line := r.Time.Format("15:04:05.000") + " " + r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	l.lines = append(l.lines, line)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

// count is how many process log lines of the replica are msg.
func (l *logRecorder) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if m == msg {
			n++
		}
	}
	return n
}

// lcEnv is one test's catalog, source and destination.
type lcEnv struct {
	t                *testing.T
	catalogURL       string
	pool             *pgxpool.Pool
	keys             *secretbox.Keyring
	store            *db.Store
	srcURL, dstURL   string
	srcPeer, dstPeer db.Peer
	uniq             string // unique among the tests: slot and publication names
	mu               sync.Mutex
	uids             []string              // the mirrors' uids: their replication origins are dropped at the end
	client           *river.Client[pgx.Tx] // the first replica's, to enqueue jobs as the API does
	discard          *slog.Logger
}

// newEnv migrates a fresh catalog, creates a source and a destination
// database and their peers.
func newEnv(t *testing.T) *lcEnv {
	t.Helper()
	ctx := context.Background()
	e := &lcEnv{t: t, discard: slog.New(slog.NewTextHandler(io.Discard, nil))}
	e.catalogURL = pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	e.srcURL = pgtest.NewDatabase(t, pgtest.SourceCluster(t))
	e.dstURL = pgtest.NewDatabase(t, pgtest.DestCluster(t))
	e.pool = pgtest.Pool(t, e.catalogURL)
	require.NoError(t, db.Migrate(ctx, e.pool, e.discard))
	e.keys = pgtest.Keyring(t)
	e.store = db.New(e.pool, e.keys)
	u, err := url.Parse(e.srcURL)
	require.NoError(t, err)
	e.uniq = strings.TrimPrefix(u.Path, "/")
	e.srcPeer = e.peer("source", e.srcURL)
	e.dstPeer = e.peer("destination", e.dstURL)
	// Replication origins belong to the cluster, not the database: drop
	// the mirrors' once every replica has stopped (cleanups run last
	// registered first).
	t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		prefixes := make([]string, len(e.uids))
		for i, uid := range e.uids {
			prefixes[i] = "pgmirror_" + uid
		}
		pgtest.DropReplicationOrigins(t, prefixes...)
	})
	return e
}

func (e *lcEnv) peer(name, dbURL string) db.Peer {
	e.t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(e.t, err)
	port, _ := strconv.Atoi(u.Port())
	pw, _ := u.User.Password()
	p, err := e.store.PeerCreate(context.Background(), db.PeerCreateParams{Name: name, Host: u.Hostname(), Port: port,
		User: u.User.Username(), Password: pw, Database: strings.TrimPrefix(u.Path, "/"), SSLMode: "disable"})
	require.NoError(e.t, err)
	return p
}

// replica is one in-process pgmirror replica: its lock holder and River
// client, with the failures injected into its runs' catalog calls.
type replica struct {
	name   string
	locks  *db.LockHolder
	client *river.Client[pgx.Tx]
	faults *faults
	log    *logRecorder
	stop   func()
	bal    *balancer // the client's balancer: which mirrors the replica runs
}

// lockApp is the application_name of a replica's lock connection.
func lockApp(name string) string { return "pgmirror-test-locks-" + name }

// startReplica starts a replica named name on the catalog; tweak, if set,
// changes its configuration first.
func (e *lcEnv) startReplica(name string, tweak func(*Config)) *replica {
	t := e.t
	t.Helper()
	rec := &logRecorder{}
	logger := slog.New(rec)
	lockCfg := pgtest.ConnConfig(t, e.catalogURL)
	lockCfg.RuntimeParams["application_name"] = lockApp(name)
	locks := db.NewLockHolder(name, 10, lockCfg, logger)
	clientID := ClientID(name, time.Now())
	locks.SetJobClientID(clientID)
	locksCtx, stopLocks := context.WithCancel(context.Background())
	go locks.Run(locksCtx)
	f := &faults{failing: map[string]int{}, calls: map[string]int{}, steps: map[string]int{}, gates: map[string]*gate{}}
	store := db.New(e.pool, e.keys)
	cfg := Config{ClientID: clientID, Store: store, Locks: locks, Logger: logger, MirrorWorkers: 10,
		HeartbeatTimeout: 30 * time.Second, SlotMonitorInterval: time.Hour, VerifyScheduleInterval: time.Hour,
		runStore: &faultStore{Store: store, f: f}, runLocks: &faultLocks{LockHolder: locks, f: f},
		hooks: runHooks{afterCutoverStep: f.stepHit}, Shutdown: &Shutdown{}}
	if tweak != nil {
		tweak(&cfg)
	}
	client, err := NewClient(pgtest.Pool(t, e.catalogURL), cfg)
	require.NoError(t, err)
	var bal *balancer
	if cfg.Shutdown != nil {
		bal = cfg.Shutdown.b
	}
	require.NoError(t, client.Start(context.Background()))
	var once sync.Once
	r := &replica{name: name, locks: locks, client: client, faults: f, log: rec, bal: bal}
	r.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			locks.Retire(ctx)
			_ = client.StopAndCancel(ctx)
			stopLocks()
			<-locks.Done()
		})
	}
	t.Cleanup(func() {
		r.stop()
		if t.Failed() {
			rec.mu.Lock()
			defer rec.mu.Unlock()
			t.Logf("replica %s log:\n%s", name, strings.Join(rec.lines, "\n"))
		}
	})
	e.mu.Lock()
	if e.client == nil {
		e.client = client
	}
	e.mu.Unlock()
	return r
}

// mirrorOpts change a mirror before it is created.
type mirrorOpts func(*db.MirrorCreateParams)

// createMirror creates a mirror of the given tables (public, same names on
// both sides) and enqueues its run, in one transaction as the API does.
func (e *lcEnv) createMirror(name string, tables []string, opts ...mirrorOpts) db.Mirror {
	t := e.t
	t.Helper()
	ctx := context.Background()
	mappings := make([]change.Mapping, len(tables))
	for i, tbl := range tables {
		n := change.TableName{Schema: "public", Name: tbl}
		mappings[i] = change.Mapping{Source: n, Destination: n}
	}
	p := db.MirrorCreateParams{Name: name, SourcePeerID: e.srcPeer.ID, DestinationPeerID: e.dstPeer.ID,
		SnapshotNumRowsPerPartition: 100000, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 1, CDCBatchSize: 100, DoInitialSnapshot: true,
		PublicationName: "pub_" + e.uniq + "_" + name, ReplicationSlotName: "slot_" + e.uniq + "_" + name, Tables: mappings}
	for _, o := range opts {
		o(&p)
	}
	var m db.Mirror
	e.inTx(func(tx pgx.Tx) error {
		var err error
		if m, err = e.store.With(tx).MirrorCreate(ctx, p); err != nil {
			return err
		}
		if e.client == nil {
			return nil // an orphan: no replica enqueued its run
		}
		_, err = e.client.InsertTx(ctx, tx, MirrorRunArgs{MirrorID: m.ID}, nil)
		return err
	})
	e.mu.Lock()
	e.uids = append(e.uids, m.UID)
	e.mu.Unlock()
	return m
}

// inTx runs fn in a catalog transaction and commits it.
func (e *lcEnv) inTx(fn func(tx pgx.Tx) error) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	require.NoError(e.t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.NoError(e.t, fn(tx))
	require.NoError(e.t, tx.Commit(ctx))
}

// pause pauses the mirror as POST /v1/mirrors/{name}/pause does.
func (e *lcEnv) pause(id int64) {
	e.t.Helper()
	e.inTx(func(tx pgx.Tx) error {
		if err := e.store.With(tx).MirrorPause(context.Background(), id); err != nil {
			return err
		}
		return e.store.With(tx).LogInsert(context.Background(), id, db.LevelInfo, db.MsgMirrorPaused, nil)
	})
}

// resume resumes the mirror as POST /v1/mirrors/{name}/resume does: once
// the paused run let go of the mirror's lock, desired state running and a
// run job, in one transaction.
func (e *lcEnv) resume(id int64) {
	e.t.Helper()
	ctx := context.Background()
	lock, err := e.store.MirrorLockWait(ctx, id, 20*time.Second)
	require.NoError(e.t, err, "the paused run still holds the mirror's lock")
	lock.Release()
	e.inTx(func(tx pgx.Tx) error {
		if err := e.store.With(tx).MirrorResume(ctx, id); err != nil {
			return err
		}
		if err := e.store.With(tx).LogInsert(ctx, id, db.LevelInfo, db.MsgMirrorResumed, nil); err != nil {
			return err
		}
		_, err := e.client.InsertTx(ctx, tx, MirrorRunArgs{MirrorID: id}, nil)
		return err
	})
}

// deleteMirror deletes the mirror as DELETE /v1/mirrors/{name} does.
func (e *lcEnv) deleteMirror(id int64) {
	e.t.Helper()
	e.inTx(func(tx pgx.Tx) error {
		if err := e.store.With(tx).MirrorSoftDelete(context.Background(), id); err != nil {
			return err
		}
		_, err := e.client.InsertTx(context.Background(), tx, MirrorCleanupArgs{MirrorID: id}, nil)
		return err
	})
}

// mirror reads the mirror from the catalog.
func (e *lcEnv) mirror(id int64) db.Mirror {
	e.t.Helper()
	m, err := e.store.MirrorGetByID(context.Background(), id)
	require.NoError(e.t, err)
	return m
}

// waitStatus waits until the mirror's status is want.
func (e *lcEnv) waitStatus(id int64, want db.MirrorStatus, timeout time.Duration) db.Mirror {
	e.t.Helper()
	var last db.Mirror
	waitFor(e.t, fmt.Sprintf("mirror status %s", want), timeout, func() bool {
		m, err := e.store.MirrorGetByID(context.Background(), id)
		if err != nil {
			return false
		}
		last = m
		return m.Status == want
	}, func() string { return fmt.Sprintf("status %s, error %v", last.Status, deref(last.ErrorMessage)) })
	return last
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// waitFor polls cond every 100 ms until it holds, and fails the test after
// timeout with what was seen last.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool, last ...func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			seen := ""
			for _, l := range last {
				seen += "; " + l()
			}
			t.Fatalf("waited %s for %s%s", timeout, what, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holds checks that cond stays true for d.
func holds(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !cond() {
			t.Fatalf("%s stopped holding", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs SQL on a database.
func exec(t *testing.T, dbURL, sql string, args ...any) {
	t.Helper()
	pgtest.Exec(t, dbURL, sql, args...)
}

// queryInt runs a query of one integer on a database.
func queryInt(t *testing.T, dbURL, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, sql, args...).Scan(&n))
	return n
}

// tryExec runs SQL on a database and returns its error.
func tryExec(dbURL, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// rows is the row count of a public table, -1 while it does not exist.
func rows(t *testing.T, dbURL, table string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int64
	err = conn.QueryRow(ctx, `SELECT count(*) FROM public.`+pgx.Identifier{table}.Sanitize()).Scan(&n)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return -1
	}
	require.NoError(t, err)
	return n
}

// waitRows waits until the table holds n rows.
func waitRows(t *testing.T, dbURL, table string, n int64, timeout time.Duration) {
	t.Helper()
	var got int64
	waitFor(t, fmt.Sprintf("%d rows in %s", n, table), timeout, func() bool {
		got = rows(t, dbURL, table)
		return got == n
	}, func() string { return fmt.Sprintf("%d rows", got) })
}

// slotExists reports whether the replication slot exists on the database's cluster.
func slotExists(t *testing.T, dbURL, slot string) bool {
	t.Helper()
	return queryInt(t, dbURL, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot) == 1
}

// publicationExists reports whether the database has the publication.
func publicationExists(t *testing.T, dbURL, pub string) bool {
	t.Helper()
	return queryInt(t, dbURL, `SELECT count(*) FROM pg_publication WHERE pubname = $1`, pub) == 1
}

// lockOwner is the application_name of the catalog session that holds the
// mirror's lock, "" when none does.
func (e *lcEnv) lockOwner(id int64) string {
	e.t.Helper()
	var app string
	err := e.pool.QueryRow(context.Background(), `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::oid AND l.objid = $2::oid AND l.objsubid = 2
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`, mirrorLockClassID, id).Scan(&app)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(e.t, err)
	return app
}

// mirrorLockClassID is db's mirrorLockClass ("pgm"), the first key of a
// mirror's advisory lock.
const mirrorLockClassID = 0x70676d

// killLockConnection ends the catalog session of the replica's lock
// holder, as a network cut or a catalog restart would: every mirror lock
// it held is gone at once.
func (e *lcEnv) killLockConnection(r *replica) {
	e.t.Helper()
	n := queryInt(e.t, e.catalogURL, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()) k`, lockApp(r.name))
	require.Equal(e.t, int64(1), n, "the replica's lock connection")
}

// runSnoozes is how often the mirror's run jobs were snoozed, in all.
func (e *lcEnv) runSnoozes(id int64) int64 {
	e.t.Helper()
	var n int64
	require.NoError(e.t, e.pool.QueryRow(context.Background(), `SELECT coalesce(sum((metadata->>'snoozes')::bigint), 0) FROM river_job
		WHERE kind = $1 AND (args->>'mirror_id')::bigint = $2`, MirrorRunArgs{}.Kind(), id).Scan(&n))
	return n
}

// logCount is how many entries of the mirror's log are message.
func (e *lcEnv) logCount(id int64, message string) int64 {
	e.t.Helper()
	return queryInt(e.t, e.catalogURL, `SELECT count(*) FROM mirror_logs WHERE mirror_id = $1 AND message = $2`, id, message)
}

// dumpJobs logs the catalog's River jobs.
func (e *lcEnv) dumpJobs() {
	rows, err := e.pool.Query(context.Background(), `SELECT id, kind, queue, state, scheduled_at, attempt, metadata::text, args::text FROM river_job ORDER BY id`)
	require.NoError(e.t, err)
	defer rows.Close()
	for rows.Next() {
		var id int64
		var kind, queue, state, meta, args string
		var at time.Time
		var attempt int
		require.NoError(e.t, rows.Scan(&id, &kind, &queue, &state, &at, &attempt, &meta, &args))
		e.t.Logf("job %d %s %s %s at %s attempt %d %s %s", id, kind, queue, state, at.Format(time.RFC3339Nano), attempt, meta, args)
	}
}
