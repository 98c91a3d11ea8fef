package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
)

// The scale measurement: many small mirrors on two pgmirror replicas
// (real processes) that share one catalog, with the default settings. It
// measures the time until every mirror runs, the connections each database
// holds per mirror, the idle cost per mirror (the replicas' CPU time and the
// transactions of each database), the takeover after a kill -9 of one
// replica, and checks every table equal (count and md5) at the end. It runs
// on its own pair of clusters in the fast mode (fsync off): the catalog
// lives in the destination cluster, as in the other measurements.
const (
	scaleSrcDB     = "scale_src"
	scaleDstDB     = "scale_dst"
	scaleCatalogDB = "scale_catalog"
	// scaleRows is the rows of each table before its mirror is created.
	scaleRows = 100
	// scaleWriteRounds light write rounds, scaleWriteEvery apart, each a
	// transaction per table (one insert, one update).
	scaleWriteRounds = 10
	scaleWriteEvery  = 2 * time.Second
	// scaleSettle is the wait before the idle window (start-up work of the
	// runs that moved last); scaleIdle is the idle window.
	scaleSettle = 15 * time.Second
	scaleIdle   = 30 * time.Second
)

// scaleReplica is one pgmirror replica of the scale measurement.
type scaleReplica struct {
	name string // application_name of its catalog connections
	svc  *service
}

// pid is the replica's process id.
func (r *scaleReplica) pid() int { return r.svc.cmd.Process.Pid }

// scaleRun is the state of the scale measurement.
type scaleRun struct {
	key      []byte // the replicas' encryption key and admin password
	password string
	opts     options
	start    time.Time
	bin      string
	dir      string
	src, dst *localpg.Cluster
	replicas []*scaleReplica
	res      scaleResult
	restarts int // replicas started again so far (each logs in a directory of its own)
}

// scaleResult is what the scale measurement found.
type scaleResult struct {
	mirrors       int
	slowestCreate time.Duration            // the longest POST /v1/mirrors
	allRunning    time.Duration            // first create until every mirror runs with a worker
	spread        map[string]int           // running mirrors by replica once spread (or after a minute)
	spreadAfter   time.Duration            // first create until spread
	caughtUp      time.Duration            // last light write round until every table equal
	conns         map[string]int64         // connections held: source, destination, catalog (all replicas)
	catalogConns  map[string]int64         // catalog connections by replica
	idle          time.Duration            // idle window
	idleXacts     map[string]int64         // transactions in the idle window: source, destination, catalog
	idleCPU       map[string]time.Duration // CPU time in the idle window: each replica, source cluster, destination cluster
	killed        string                   // the replica killed with SIGKILL
	killedRan     int                      // mirrors it ran
	takeoverRun   time.Duration            // kill until the survivor runs every mirror
	takeoverRepl  time.Duration            // kill until every table has the rows written right after it
	rolling       []rollingStep            // the killed replica's restart, then a rolling restart
	outage        outageResult             // the catalog outage
	tablesEqual   int                      // tables equal (count and md5) at the end
}

// rollingStep is one replica's restart under light writes.
type rollingStep struct {
	what    string        // what was done
	down    time.Duration // SIGTERM until the other replica runs every mirror (0: no stop)
	spread  time.Duration // the replica ready until the mirrors are spread again
	most    int           // most running mirrors without a worker at once, stop to spread
	longest time.Duration // longest a mirror went without a worker
}

// runScale runs the scale measurement with o.scaleMirrors mirrors in a
// directory under root and returns its result; it stops everything it
// started before it returns.
func runScale(ctx context.Context, o options, start time.Time, bin, root string) (*scaleResult, error) {
	s := &scaleRun{opts: o, start: start, bin: bin, dir: filepath.Join(root, "scale")}
	s.res.mirrors = o.scaleMirrors
	defer s.cleanup()
	if err := s.run(ctx); err != nil {
		for _, r := range s.replicas {
			err = fmt.Errorf("%w\nlast lines of the log of replica %s:\n%s", err, r.name, r.svc.logTail(2000))
		}
		return nil, err
	}
	return &s.res, nil
}

func (s *scaleRun) logf(format string, args ...any) {
	logf(s.start, "scale", format, args...)
}

// cleanup stops the replicas and the clusters and removes the directory
// (unless -keep).
func (s *scaleRun) cleanup() {
	for _, r := range s.replicas {
		r.svc.stop(30 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range []*localpg.Cluster{s.src, s.dst} {
		if c == nil {
			continue
		}
		if err := c.Stop(ctx); err != nil {
			s.logf("warning: %v", err)
		}
	}
	if !s.opts.keep {
		if err := os.RemoveAll(s.dir); err != nil {
			s.logf("warning: remove %s: %v", s.dir, err)
		}
	}
}

// url is a connection URL for database db of cluster c.
func (s *scaleRun) url(c *localpg.Cluster, db string) string {
	return c.URL(db) + "&timezone=UTC&application_name=pgmirror-bench"
}

func tableName(i int) string { return fmt.Sprintf("t%03d", i) }

func (s *scaleRun) run(ctx context.Context) error {
	n := s.opts.scaleMirrors
	if err := os.Mkdir(s.dir, 0o755); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	// Room for a walsender and a slot per mirror on the source, and on
	// the destination for an apply connection and a replication origin's
	// state per mirror, plus each replica's catalog connections.
	srcSettings := map[string]string{
		"max_wal_senders":       strconv.Itoa(n + 16),
		"max_replication_slots": strconv.Itoa(n + 16),
		"max_connections":       strconv.Itoa(max(200, n+100)),
	}
	dstSettings := map[string]string{
		"max_replication_slots": strconv.Itoa(n + 32),
		"max_connections":       strconv.Itoa(max(200, n+200)),
	}
	for k, v := range sharedSettings {
		srcSettings[k], dstSettings[k] = v, v
	}
	var err error
	if s.src, err = localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(s.dir, "source"), Logical: true, Settings: srcSettings, BinDir: s.opts.srcBin}); err != nil {
		return fmt.Errorf("start source cluster: %w", err)
	}
	if s.dst, err = localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(s.dir, "destination"), Settings: dstSettings, BinDir: s.opts.dstBin}); err != nil {
		return fmt.Errorf("start destination cluster: %w", err)
	}
	s.logf("source cluster on port %d, destination (and catalog) on port %d; %d mirrors on two replicas", s.src.Port(), s.dst.Port(), n)
	if err := execSQL(ctx, s.url(s.src, "postgres"), "CREATE DATABASE "+scaleSrcDB); err != nil {
		return err
	}
	if err := execSQL(ctx, s.url(s.dst, "postgres"), "CREATE DATABASE "+scaleDstDB, "CREATE DATABASE "+scaleCatalogDB); err != nil {
		return err
	}
	var ddl strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&ddl, "CREATE TABLE public.%s (id bigserial PRIMARY KEY, v text, n int NOT NULL DEFAULT 0);\n", tableName(i))
		fmt.Fprintf(&ddl, "INSERT INTO public.%s (v) SELECT md5(g::text) FROM generate_series(1, %d) g;\n", tableName(i), scaleRows)
	}
	if err := execSQL(ctx, s.url(s.src, scaleSrcDB), ddl.String()); err != nil {
		return fmt.Errorf("create the source tables: %w", err)
	}

	if err := s.startReplicas(ctx); err != nil {
		return err
	}
	r1 := s.replicas[0].svc
	if err := r1.peer(ctx, "source", s.src, scaleSrcDB); err != nil {
		return err
	}
	if err := r1.peer(ctx, "destination", s.dst, scaleDstDB); err != nil {
		return err
	}
	if err := s.createMirrors(ctx); err != nil {
		return err
	}
	if err := s.lightWrites(ctx); err != nil {
		return err
	}
	s.countConnections(ctx)
	if err := s.measureIdle(ctx); err != nil {
		return err
	}
	if err := s.takeover(ctx); err != nil {
		return err
	}
	if err := s.rollingRestart(ctx); err != nil {
		return err
	}
	if err := s.catalogOutage(ctx); err != nil {
		return err
	}
	s.logf("checking every table (count and md5)")
	if err := s.waitTablesEqual(ctx, 5*time.Minute); err != nil {
		return err
	}
	s.res.tablesEqual = n
	return nil
}

// startReplicas starts two replicas on one catalog, one after the other
// (the first creates the catalog), with the same encryption key and admin.
func (s *scaleRun) startReplicas(ctx context.Context) error {
	key, password, err := serviceSecrets()
	if err != nil {
		return err
	}
	s.key, s.password = key, password
	for _, name := range []string{"pgmirror-r1", "pgmirror-r2"} {
		dir := filepath.Join(s.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
		catalogURL := s.dst.URL(scaleCatalogDB) + "&application_name=" + name
		svc, err := startServiceWith(ctx, s.bin, catalogURL, dir, key, password)
		if svc != nil {
			s.replicas = append(s.replicas, &scaleReplica{name: name, svc: svc})
		}
		if err != nil {
			return fmt.Errorf("start replica %s: %w", name, err)
		}
		s.logf("replica %s: pid %d, serving on %s, log in %s", name, svc.cmd.Process.Pid, svc.baseURL, svc.logPath)
	}
	return nil
}

// scaleMirror is a mirror as the list shows it.
type scaleMirror struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	Worker *string `json:"worker"`
}

// listRunning lists the mirrors through svc and counts the running ones by
// worker ("" for running mirrors without one).
func listRunning(ctx context.Context, svc *service) (byWorker map[string]int, n int, err error) {
	var list []scaleMirror
	if err := svc.call(ctx, "GET", "/v1/mirrors", nil, &list); err != nil {
		return nil, 0, err
	}
	byWorker = map[string]int{}
	for _, m := range list {
		if m.Status != "running" {
			continue
		}
		n++
		byWorker[deref(m.Worker)]++
	}
	return byWorker, n, nil
}

// replicaOf is the replica whose process runs as worker (host:pid).
func (s *scaleRun) replicaOf(worker string) *scaleReplica {
	for _, r := range s.replicas {
		if strings.HasSuffix(worker, ":"+strconv.Itoa(r.pid())) {
			return r
		}
	}
	return nil
}

// byReplica names the counts of byWorker by replica.
func (s *scaleRun) byReplica(byWorker map[string]int) map[string]int {
	out := map[string]int{}
	for w, c := range byWorker {
		name := "(no worker)"
		if r := s.replicaOf(w); r != nil {
			name = r.name
		} else if w != "" {
			name = w
		}
		out[name] += c
	}
	return out
}

// createMirrors creates the mirrors, alternately through each replica,
// with the default settings, and waits until every one runs with a worker
// and until they are spread over both replicas (a minute at most).
func (s *scaleRun) createMirrors(ctx context.Context) error {
	n := s.opts.scaleMirrors
	s.logf("creating %d mirrors", n)
	t0 := time.Now()
	for i := 1; i <= n; i++ {
		at := time.Now()
		t := tableName(i)
		if err := s.replicas[i%2].svc.call(ctx, "POST", "/v1/mirrors", map[string]any{
			"name": "m" + t[1:], "source_peer": "source", "destination_peer": "destination",
			"table_mappings": []map[string]any{{"source_schema": "public", "source_table": t, "destination_schema": "public", "destination_table": t}},
		}, nil); err != nil {
			return err
		}
		s.res.slowestCreate = max(s.res.slowestCreate, time.Since(at))
	}
	s.logf("created %d mirrors in %s (slowest create %s)", n, time.Since(t0).Round(time.Millisecond), s.res.slowestCreate.Round(time.Millisecond))
	for {
		byWorker, running, err := listRunning(ctx, s.replicas[0].svc)
		if err != nil {
			return err
		}
		if running == n && byWorker[""] == 0 {
			break
		}
		if time.Since(t0) > 15*time.Minute {
			return fmt.Errorf("%d of %d mirrors running (%d without a worker) after 15 minutes", running, n, byWorker[""])
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	s.res.allRunning = time.Since(t0)
	s.logf("every mirror running with a worker %s after the first create", s.res.allRunning.Round(time.Millisecond))
	spreadBy := time.Now().Add(time.Minute)
	for {
		byWorker, _, err := listRunning(ctx, s.replicas[0].svc)
		if err != nil {
			return err
		}
		s.res.spread = s.byReplica(byWorker)
		even := len(s.res.spread) == 2
		for _, c := range s.res.spread {
			even = even && c >= n/2-1
		}
		if even || time.Now().After(spreadBy) {
			s.res.spreadAfter = time.Since(t0)
			break
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
	s.logf("mirrors by replica: %v, %s after the first create", s.res.spread, s.res.spreadAfter.Round(time.Millisecond))
	return nil
}

// writeRound writes one transaction per table on the source: a new row
// and an update of an old one.
func (s *scaleRun) writeRound(ctx context.Context, src *pgx.Conn, round int) error {
	var b strings.Builder
	for i := 1; i <= s.opts.scaleMirrors; i++ {
		t := tableName(i)
		fmt.Fprintf(&b, "BEGIN; INSERT INTO public.%s (v) VALUES ('round %d'); UPDATE public.%s SET n = n + 1 WHERE id = %d; COMMIT;\n",
			t, round, t, 1+round%scaleRows)
	}
	if _, err := src.Exec(ctx, b.String()); err != nil {
		return fmt.Errorf("write round %d: %w", round, err)
	}
	return nil
}

// lightWrites writes scaleWriteRounds rounds and waits until every table
// is equal on both sides.
func (s *scaleRun) lightWrites(ctx context.Context) error {
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	s.logf("light writes: %d rounds, %s apart, a transaction per table each", scaleWriteRounds, scaleWriteEvery)
	for round := 1; round <= scaleWriteRounds; round++ {
		if err := s.writeRound(ctx, src, round); err != nil {
			return err
		}
		if round < scaleWriteRounds {
			if err := sleep(ctx, scaleWriteEvery); err != nil {
				return err
			}
		}
	}
	t0 := time.Now()
	if err := s.waitTablesEqual(ctx, 5*time.Minute); err != nil {
		return err
	}
	s.res.caughtUp = time.Since(t0)
	s.logf("every table equal %s after the last write round", s.res.caughtUp.Round(time.Millisecond))
	return nil
}

// digestsSQL reads count and md5 of every table, ordered by id.
func (s *scaleRun) digestsSQL() string {
	parts := make([]string, 0, s.opts.scaleMirrors)
	for i := 1; i <= s.opts.scaleMirrors; i++ {
		t := tableName(i)
		parts = append(parts, fmt.Sprintf("SELECT '%s'::text, count(*), coalesce(md5(string_agg(x::text, ',' ORDER BY x.id)), '') FROM public.%s x", t, t))
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// digests reads every table's count and md5 from db.
func digests(ctx context.Context, conn *pgx.Conn, sql string) (map[string]string, error) {
	rows, err := conn.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("read table checksums: %w", err)
	}
	out := map[string]string{}
	for rows.Next() {
		var name, sum string
		var n int64
		if err := rows.Scan(&name, &n, &sum); err != nil {
			return nil, fmt.Errorf("read table checksums: %w", err)
		}
		out[name] = fmt.Sprintf("%d rows, md5 %s", n, sum)
	}
	return out, rows.Err()
}

// waitTablesEqual waits until every table has the same count and md5 on
// both sides.
func (s *scaleRun) waitTablesEqual(ctx context.Context, timeout time.Duration) error {
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	dst, err := connect(ctx, s.url(s.dst, scaleDstDB))
	if err != nil {
		return err
	}
	defer closeConn(dst)
	sql := s.digestsSQL()
	want, err := digests(ctx, src, sql)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := digests(ctx, dst, sql)
		if err != nil {
			return err
		}
		var differ []string
		for t, w := range want {
			if got[t] != w {
				differ = append(differ, fmt.Sprintf("%s: source %s, destination %s", t, w, got[t]))
			}
		}
		if len(differ) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			slices.Sort(differ)
			return fmt.Errorf("%d tables differ after %s, first: %s", len(differ), timeout, differ[0])
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// countConnections counts the connections to each database: the source's
// (walsenders included), the destination's, and the catalog's by replica.
func (s *scaleRun) countConnections(ctx context.Context) {
	s.res.conns, s.res.catalogConns = map[string]int64{}, map[string]int64{}
	countConns := func(c *localpg.Cluster, sql string, args ...any) int64 {
		var n int64
		conn, err := connect(ctx, s.url(c, "postgres"))
		if err != nil {
			s.logf("warning: count connections: %v", err)
			return -1
		}
		defer closeConn(conn)
		if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			s.logf("warning: count connections: %v", err)
			return -1
		}
		return n
	}
	s.res.conns["source"] = countConns(s.src, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, scaleSrcDB)
	s.res.conns["destination"] = countConns(s.dst, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`, scaleDstDB)
	for _, r := range s.replicas {
		c := countConns(s.dst, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`, scaleCatalogDB, r.name)
		s.res.catalogConns[r.name] = c
		s.res.conns["catalog"] += c
	}
	s.logf("connections: source %d, destination %d, catalog %v", s.res.conns["source"], s.res.conns["destination"], s.res.catalogConns)
}

// xacts reads the committed and rolled back transactions of every
// database of c so far.
func (s *scaleRun) xacts(ctx context.Context, c *localpg.Cluster) (map[string]int64, error) {
	conn, err := connect(ctx, s.url(c, "postgres"))
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	// Statistics are cached per transaction: each read is its own.
	rows, err := conn.Query(ctx, `SELECT datname, xact_commit + xact_rollback FROM pg_stat_database WHERE datname IS NOT NULL`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_database: %w", err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, fmt.Errorf("read pg_stat_database: %w", err)
		}
		out[name] = n
	}
	return out, rows.Err()
}

// idleSample is the transactions and CPU times at one moment.
type idleSample struct {
	xacts map[string]int64
	cpu   map[string]time.Duration
}

func (s *scaleRun) sample(ctx context.Context) (idleSample, error) {
	out := idleSample{xacts: map[string]int64{}, cpu: map[string]time.Duration{}}
	src, err := s.xacts(ctx, s.src)
	if err != nil {
		return out, err
	}
	dst, err := s.xacts(ctx, s.dst)
	if err != nil {
		return out, err
	}
	out.xacts["source"], out.xacts["destination"], out.xacts["catalog"] = src[scaleSrcDB], dst[scaleDstDB], dst[scaleCatalogDB]
	stats := readProcStats()
	for _, r := range s.replicas {
		out.cpu[r.name] = stats[r.pid()].own
	}
	out.cpu["source cluster"] = clusterCPU(stats, s.src)
	out.cpu["destination cluster"] = clusterCPU(stats, s.dst)
	return out, nil
}

// measureIdle measures, after a settling wait, the transactions of each
// database and the CPU time of each replica and cluster while nothing is
// written.
func (s *scaleRun) measureIdle(ctx context.Context) error {
	s.logf("idle: settling %s, then measuring %s", scaleSettle, scaleIdle)
	if err := sleep(ctx, scaleSettle); err != nil {
		return err
	}
	before, err := s.sample(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := sleep(ctx, scaleIdle); err != nil {
		return err
	}
	after, err := s.sample(ctx)
	if err != nil {
		return err
	}
	s.res.idle = time.Since(t0)
	s.res.idleXacts, s.res.idleCPU = map[string]int64{}, map[string]time.Duration{}
	for k, v := range after.xacts {
		s.res.idleXacts[k] = v - before.xacts[k]
	}
	for k, v := range after.cpu {
		s.res.idleCPU[k] = v - before.cpu[k]
	}
	n, secs := float64(s.opts.scaleMirrors), s.res.idle.Seconds()
	s.logf("idle transactions per mirror and second: source %.3f, destination %.3f, catalog %.3f",
		float64(s.res.idleXacts["source"])/secs/n, float64(s.res.idleXacts["destination"])/secs/n, float64(s.res.idleXacts["catalog"])/secs/n)
	return nil
}

// takeover kills the replica that runs more mirrors with SIGKILL, writes a
// row to every table at once, and times until the survivor runs every
// mirror and until every table has the row on the destination.
func (s *scaleRun) takeover(ctx context.Context) error {
	n := s.opts.scaleMirrors
	byWorker, _, err := listRunning(ctx, s.replicas[0].svc)
	if err != nil {
		return err
	}
	byReplica := s.byReplica(byWorker)
	victim, survivor := s.replicas[0], s.replicas[1]
	if byReplica[survivor.name] > byReplica[victim.name] {
		victim, survivor = survivor, victim
	}
	s.res.killed, s.res.killedRan = victim.name, byReplica[victim.name]
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	s.logf("kill -9 of replica %s, which runs %d mirrors", victim.name, s.res.killedRan)
	killedAt := time.Now()
	if err := victim.svc.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill replica %s: %w", victim.name, err)
	}
	if err := s.writeRound(ctx, src, scaleWriteRounds+1); err != nil {
		return err
	}
	replicated := make(chan error, 1)
	go func() {
		err := s.waitTablesEqual(ctx, 5*time.Minute)
		s.res.takeoverRepl = time.Since(killedAt)
		replicated <- err
	}()
	survivorRuns := errors.New("the survivor does not run every mirror")
	for time.Since(killedAt) < 5*time.Minute {
		byWorker, running, err := listRunning(ctx, survivor.svc)
		if err != nil {
			return err
		}
		if byReplica := s.byReplica(byWorker); running == n && byReplica[survivor.name] == n {
			s.res.takeoverRun = time.Since(killedAt)
			survivorRuns = nil
			break
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := <-replicated; err != nil {
		return fmt.Errorf("after the kill: %w", err)
	}
	if survivorRuns != nil {
		return fmt.Errorf("after the kill: %w within 5 minutes", survivorRuns)
	}
	s.logf("takeover: the survivor runs every mirror %s after the kill; every table has the rows written after it %s after the kill",
		s.res.takeoverRun.Round(time.Millisecond), s.res.takeoverRepl.Round(time.Millisecond))
	return nil
}

// reportScale prints the scale measurement as Markdown.
func reportScale(w io.Writer, r *scaleResult) {
	n := float64(r.mirrors)
	fmt.Fprintf(w, "\n### Scale: %d mirrors on two replicas\n\n", r.mirrors)
	fmt.Fprintf(w, "%d CPUs, %s, %s. Two `pgmirror serve` processes on one catalog (in the destination cluster), default settings; "+
		"fast-mode clusters; each mirror replicates one table of %d rows; light writes: %d rounds, %s apart, of one transaction per table.\n\n",
		runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format("2006-01-02 15:04 UTC"), scaleRows, scaleWriteRounds, scaleWriteEvery)
	fmt.Fprintln(w, "| Measurement | Value |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| Slowest create (POST /v1/mirrors) | %s |\n", ms(r.slowestCreate))
	fmt.Fprintf(w, "| First create until every mirror runs with a worker | %s |\n", secs(r.allRunning))
	fmt.Fprintf(w, "| Mirrors by replica | %s, %s after the first create |\n", spreadText(r.spread), secs(r.spreadAfter))
	fmt.Fprintf(w, "| Last light write until every table equal | %s |\n", secs(r.caughtUp))
	for _, db := range []string{"source", "destination", "catalog"} {
		c := r.conns[db]
		extra := ""
		if db == "catalog" {
			extra = " (" + spreadText64(r.catalogConns) + ")"
		}
		fmt.Fprintf(w, "| Connections to the %s database | %d, %.2f per mirror%s |\n", db, c, float64(c)/n, extra)
	}
	secsIdle := r.idle.Seconds()
	for _, db := range []string{"source", "destination", "catalog"} {
		x := r.idleXacts[db]
		fmt.Fprintf(w, "| Idle transactions on the %s database | %.1f/s, %.3f per mirror a second |\n", db, float64(x)/secsIdle, float64(x)/secsIdle/n)
	}
	var names []string
	for k := range r.idleCPU {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		c := r.idleCPU[k]
		fmt.Fprintf(w, "| Idle CPU time, %s | %.1f%% of a core, %.2f ms per mirror a second |\n", k, 100*c.Seconds()/secsIdle, c.Seconds()*1000/secsIdle/n)
	}
	fmt.Fprintf(w, "| kill -9 of %s (ran %d mirrors) until the survivor runs every mirror | %s |\n", r.killed, r.killedRan, secs(r.takeoverRun))
	fmt.Fprintf(w, "| kill -9 until every table has the rows written right after it | %s |\n", secs(r.takeoverRepl))
	for _, st := range r.rolling {
		down := ""
		if st.down > 0 {
			down = fmt.Sprintf("the other runs every mirror %s after SIGTERM; ", secs(st.down))
		}
		fmt.Fprintf(w, "| %s | %sspread %s after it is ready; at most %d mirrors without a worker at once, longest gap %s |\n",
			st.what, down, secs(st.spread), st.most, ms(st.longest))
	}
	o := r.outage
	fmt.Fprintf(w, "| Catalog unreachable for %s (a round of writes a second): tables with every row written during it when it ended | %d of %d |\n",
		secs(scaleOutage), o.equalAtEnd, r.mirrors)
	fmt.Fprintf(w, "| Catalog back: the API answers / every mirror runs with a worker / every table equal | %s (highest lag %.2f s) / %s / %s |\n",
		secs(o.apiBack), o.highestLag, secs(o.allRunning), secs(o.equalAfter))
	fmt.Fprintf(w, "| Mirrors on another replica 15 s after the catalog came back | %d |\n", o.moved)
	fmt.Fprintf(w, "| Tables equal at the end (count and md5) | %d of %d |\n\n", r.tablesEqual, r.mirrors)
	fmt.Fprintf(w, "Idle figures are over %s without writes, starting %s after every table was equal; CPU time is user + system; transactions are pg_stat_database's xact_commit + xact_rollback of each database.\n", secs(r.idle), secs(scaleSettle))
}

func spreadText(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func spreadText64(m map[string]int64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// rollingRestart starts the replica killed by takeover again, then stops
// (SIGTERM) and starts each replica in turn, as a rolling deploy does,
// under a light write load (a round a second): for each step the time
// until the other replica runs every mirror, the time from the replica's
// start until the mirrors are spread again, and the most mirrors without a
// worker at once and the longest a mirror went without one, sampled every
// 100 ms from pg_locks.
func (s *scaleRun) rollingRestart(ctx context.Context) (err error) {
	src, err := connect(ctx, s.url(s.src, scaleSrcDB))
	if err != nil {
		return err
	}
	defer closeConn(src)
	stopLoad := s.writeEverySecond(ctx, src, scaleWriteRounds+2)
	defer func() {
		if lerr := stopLoad(); err == nil {
			err = lerr
		}
	}()
	gaps, err := watchGaps(ctx, s.url(s.dst, scaleCatalogDB))
	if err != nil {
		return err
	}
	defer gaps.close()

	killed := s.replicas[0]
	if s.replicas[1].name == s.res.killed {
		killed = s.replicas[1]
	}
	if err := s.restartStep(ctx, gaps, rollingStep{what: "Restart of " + killed.name + " after its kill -9"}, killed, false); err != nil {
		return err
	}
	for _, r := range s.replicas {
		if err := s.restartStep(ctx, gaps, rollingStep{what: "Rolling restart: SIGTERM and start of " + r.name}, r, true); err != nil {
			return err
		}
	}
	return nil
}

// writeEverySecond writes a round (from round on) every second until the
// returned function is called, which returns the first write error.
func (s *scaleRun) writeEverySecond(ctx context.Context, src *pgx.Conn, round int) (stop func() error) {
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan error, 1)
	go func() {
		for loadCtx.Err() == nil {
			if err := s.writeRound(loadCtx, src, round); err != nil && loadCtx.Err() == nil {
				loadDone <- err
				return
			}
			round++
			_ = sleep(loadCtx, time.Second)
		}
		loadDone <- nil
	}()
	return func() error {
		stopLoad()
		return <-loadDone
	}
}

// restartStep stops replica r (SIGTERM, when stop) until the other runs
// every mirror, starts it again and waits until the mirrors are spread
// over both, with the gaps of mirrors without a worker meanwhile.
func (s *scaleRun) restartStep(ctx context.Context, gaps *gapWatch, st rollingStep, r *scaleReplica, stop bool) error {
	gaps.reset()
	other := s.replicas[0]
	if other == r {
		other = s.replicas[1]
	}
	if stop {
		stoppedAt := time.Now()
		r.svc.stop(time.Minute)
		if err := s.waitRuns(ctx, "the other replica to run every mirror", other, func(by map[string]int) bool {
			return by[other.name] == s.opts.scaleMirrors
		}); err != nil {
			return err
		}
		st.down = time.Since(stoppedAt)
	}
	if err := s.startAgain(ctx, r); err != nil {
		return err
	}
	readyAt := time.Now()
	if err := s.waitRuns(ctx, "the mirrors spread again", other, s.spreadOut); err != nil {
		return err
	}
	st.spread = time.Since(readyAt)
	st.most, st.longest = gaps.result()
	s.logf("%s: %sspread %s after it is ready; at most %d mirrors without a worker at once, longest gap %s",
		st.what, map[bool]string{true: fmt.Sprintf("the other runs every mirror %s after SIGTERM; ", st.down.Round(time.Millisecond)), false: ""}[stop],
		st.spread.Round(time.Millisecond), st.most, st.longest.Round(time.Millisecond))
	s.res.rolling = append(s.res.rolling, st)
	return nil
}

// startAgain starts replica r again, with a log of its own.
func (s *scaleRun) startAgain(ctx context.Context, r *scaleReplica) error {
	s.restarts++
	dir := filepath.Join(s.dir, fmt.Sprintf("%s-restart-%d", r.name, s.restarts))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create directory: %w", err)
	}
	svc, err := startServiceWith(ctx, s.bin, s.dst.URL(scaleCatalogDB)+"&application_name="+r.name, dir, s.key, s.password)
	if svc != nil {
		r.svc = svc
	}
	if err != nil {
		return fmt.Errorf("start replica %s again: %w", r.name, err)
	}
	return nil
}

// waitRuns waits until every mirror runs and cond holds of the running
// mirrors by replica, as replica via lists them.
func (s *scaleRun) waitRuns(ctx context.Context, what string, via *scaleReplica, cond func(map[string]int) bool) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		byWorker, running, err := listRunning(ctx, via.svc)
		if err != nil {
			return err
		}
		if by := s.byReplica(byWorker); running == s.opts.scaleMirrors && by["(no worker)"] == 0 && cond(by) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within 3 minutes (%s)", what, spreadText(s.byReplica(byWorker)))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// spreadOut: every replica runs at least half the mirrors, less one.
func (s *scaleRun) spreadOut(by map[string]int) bool {
	for _, r := range s.replicas {
		if by[r.name] < s.opts.scaleMirrors/2-1 {
			return false
		}
	}
	return true
}

// gapWatch samples, every 100 ms, the running mirrors whose advisory lock
// nobody holds, and keeps the most at once and the longest one went so.
type gapWatch struct {
	mu      sync.Mutex
	since   map[int64]time.Time
	most    int
	longest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func watchGaps(ctx context.Context, catalogURL string) (*gapWatch, error) {
	conn, err := connect(ctx, catalogURL)
	if err != nil {
		return nil, err
	}
	w := &gapWatch{since: map[int64]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer closeConn(conn)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			rows, err := conn.Query(qctx, `SELECT m.id FROM mirrors m
				WHERE m.deleted_at IS NULL AND m.desired_state = 'running' AND m.status = 'running'
				  AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
				    AND l.classid = x'70676d'::int::oid AND l.objid = m.id::oid AND l.objsubid = 2)`)
			var ids []int64
			if err == nil {
				ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			}
			cancel()
			if err != nil {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			w.most = max(w.most, len(ids))
			next := make(map[int64]time.Time, len(ids))
			for _, id := range ids {
				since, ok := w.since[id]
				if !ok {
					since = now
				}
				next[id] = since
				w.longest = max(w.longest, now.Sub(since))
			}
			w.since = next
			w.mu.Unlock()
		}
	}()
	return w, nil
}

func (w *gapWatch) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.most, w.longest, w.since = 0, 0, map[int64]time.Time{}
}

func (w *gapWatch) result() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.longest
}

func (w *gapWatch) close() {
	close(w.stop)
	<-w.done
}
