package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/db/secretbox"
)

const mirrorName = "bench"

// service is the `pgmirror serve` process under test.
type service struct {
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	baseURL string
	token   string
	client  *http.Client
	done    chan struct{}
}

// buildPgmirror builds cmd/pgmirror of this module into dir.
func buildPgmirror(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("find the module root (go env GOMOD): %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("run pgmirror-bench inside the pgmirror module, or pass -pgmirror")
	}
	bin := filepath.Join(dir, "pgmirror")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pgmirror")
	build.Dir = filepath.Dir(gomod)
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/pgmirror: %w: %s", err, out)
	}
	return bin, nil
}

// startService starts `pgmirror serve` with its catalog in catalogURL,
// waits until /health answers and logs in as the admin.
func startService(ctx context.Context, bin, catalogURL, dir string) (*service, error) {
	key, password, err := serviceSecrets()
	if err != nil {
		return nil, err
	}
	return startServiceWith(ctx, bin, catalogURL, dir, key, password)
}

// serviceSecrets returns a new encryption key and admin password.
func serviceSecrets() (key []byte, password string, err error) {
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, "", fmt.Errorf("generate admin password: %w", err)
	}
	key, err = secretbox.GenerateKey()
	return key, hex.EncodeToString(secret), err
}

// startServiceWith is startService with the given encryption key and admin
// password: replicas of one catalog share both.
func startServiceWith(ctx context.Context, bin, catalogURL, dir string, key []byte, password string) (*service, error) {
	port, err := localpg.FreePort()
	if err != nil {
		return nil, err
	}
	s := &service{
		logPath: filepath.Join(dir, "pgmirror.log"),
		baseURL: "http://127.0.0.1:" + strconv.Itoa(port),
		client:  &http.Client{Timeout: 30 * time.Second},
		done:    make(chan struct{}),
	}
	if s.logFile, err = os.Create(s.logPath); err != nil {
		return nil, fmt.Errorf("create pgmirror log: %w", err)
	}
	s.cmd = exec.Command(bin, "serve")
	s.cmd.Env = append(os.Environ(),
		"SERVICE_DATABASE_URL="+catalogURL,
		"SERVICE_ENCRYPTION_KEY="+secretbox.EncodeKey(key),
		"SERVICE_PORT="+strconv.Itoa(port),
		"SERVICE_ADMIN_USER=admin",
		"SERVICE_ADMIN_PASSWORD="+password,
		"SERVICE_DATA_DIR="+filepath.Join(dir, "pgmirror-data"),
		// PGMIRROR_BENCH_LOG_LEVEL=debug shows each run's phases in the
		// kept logs (-keep).
		"SERVICE_LOG_LEVEL="+cmp.Or(os.Getenv("PGMIRROR_BENCH_LOG_LEVEL"), "info"),
	)
	s.cmd.Stdout, s.cmd.Stderr = s.logFile, s.logFile
	// Its own process group: a Ctrl-C reaches the bench, which stops the
	// service itself, in order.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.logFile.Close()
		return nil, fmt.Errorf("start pgmirror: %w", err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.baseURL+"/health", nil)
		if resp, err := s.client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-s.done:
			return s, fmt.Errorf("pgmirror exited during startup; log:\n%s", s.logTail(3000))
		default:
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("pgmirror not healthy after 90 s; log:\n%s", s.logTail(3000))
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return s, err
		}
	}
	var login struct {
		Token string `json:"token"`
	}
	if err := s.call(ctx, "POST", "/v1/auth/login", map[string]string{"username": "admin", "password": password}, &login); err != nil {
		return s, err
	}
	s.token = login.Token
	return s, nil
}

// stop sends SIGTERM and, after timeout, SIGKILL.
func (s *service) stop(timeout time.Duration) {
	defer s.logFile.Close()
	if s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(timeout):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *service) logTail(n int) string {
	raw, _ := os.ReadFile(s.logPath)
	if len(raw) > n {
		raw = raw[len(raw)-n:]
	}
	return string(raw)
}

// call sends a JSON request and decodes a 2xx answer into out.
func (s *service) call(ctx context.Context, method, path string, body, out any) error {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", method, path, err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.baseURL+path, r)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(raw))
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// peer registers database db of cluster c as a peer.
func (s *service) peer(ctx context.Context, name string, c *localpg.Cluster, db string) error {
	return s.call(ctx, "POST", "/v1/peers", map[string]any{
		"name": name, "host": "127.0.0.1", "port": c.Port(), "user": "postgres",
		"password": c.Password(), "database": db, "ssl_mode": "disable",
	}, nil)
}

type mirrorState struct {
	Status       string  `json:"status"`
	LastLSN      *string `json:"last_lsn"`
	ErrorMessage *string `json:"error_message"`
}

func (s *service) mirror(ctx context.Context) (mirrorState, error) {
	var m mirrorState
	err := s.call(ctx, "GET", "/v1/mirrors/"+mirrorName, nil, &m)
	return m, err
}

// waitStatus polls the mirror until it has the given status.
func (s *service) waitStatus(ctx context.Context, status string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		m, err := s.mirror(ctx)
		if err != nil {
			return err
		}
		if m.Status == status {
			return nil
		}
		if m.Status == "stopped" {
			return fmt.Errorf("mirror stopped: %s", deref(m.ErrorMessage))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mirror is %s (error %q), not %s, after %s", m.Status, deref(m.ErrorMessage), status, timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// measurePgmirror starts pgmirror, creates the peers and a mirror with
// default settings, and times its snapshot, its catch-up after each
// workload run while paused (sampling the process's RSS), and the lag
// under the paced load.
func (b *bench) measurePgmirror(ctx context.Context) error {
	srcURL, dstURL := b.url(b.src, srcPgmirror), b.url(b.dst, dstPgmirror)
	svc, err := b.startPgmirror(ctx)
	if err != nil {
		return err
	}
	dst, err := connect(ctx, dstURL)
	if err != nil {
		return err
	}
	defer closeConn(dst)
	if err := b.pgmirrorSnapshot(ctx, svc, dst); err != nil {
		return err
	}
	if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
		return err
	}
	if !b.opts.largeOnly {
		// The pipe's second run, in the state the snapshot met: from
		// pgmirror's source database, which no workload has changed yet.
		if err := b.measureCopyPipe(ctx, srcPgmirror); err != nil {
			return fmt.Errorf("COPY pipe, second run: %w", err)
		}
		if err := b.measureVerify(ctx, svc); err != nil {
			return err
		}
	}
	if err := b.pgmirrorCatchup(ctx, svc, dst); err != nil {
		return err
	}
	return b.pgmirrorLive(ctx, svc)
}

// startPgmirror starts the service on the destination's catalog database
// and creates its two peers.
func (b *bench) startPgmirror(ctx context.Context) (*service, error) {
	svc, err := startService(ctx, b.bin, b.dst.URL(catalogDB), b.dir)
	if svc != nil {
		b.svc = svc
	}
	if err != nil {
		return nil, err
	}
	b.logf("pgmirror: serving on %s, log in %s", svc.baseURL, svc.logPath)
	if b.jails.pgmirror != nil {
		if err := b.jails.pgmirror.add(svc.cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	if err := svc.peer(ctx, "source", b.src, srcPgmirror); err != nil {
		return nil, err
	}
	if err := svc.peer(ctx, "destination", b.dst, dstPgmirror); err != nil {
		return nil, err
	}
	return svc, b.checkpoint(ctx)
}

// pgmirrorSnapshot creates the mirror and times its snapshot: from the
// create until the mirror runs with every row on the destination (dst).
func (b *bench) pgmirrorSnapshot(ctx context.Context, svc *service, dst *pgx.Conn) error {
	create := map[string]any{
		"name": mirrorName, "source_peer": "source", "destination_peer": "destination",
		"table_mappings": []map[string]any{{"source_schema": "public", "source_table": "bench",
			"destination_schema": "public", "destination_table": "bench"}},
	}
	if b.opts.snapshotWorkers > 0 {
		create["snapshot_max_parallel_workers"] = b.opts.snapshotWorkers
		b.logf("pgmirror: creating mirror %s (default settings, snapshot_max_parallel_workers %d)", mirrorName, b.opts.snapshotWorkers)
	} else {
		b.logf("pgmirror: creating mirror %s (default settings)", mirrorName)
	}
	c0, t0 := b.cpuNow(), time.Now()
	profiled := b.profile(ctx, "snapshot")
	defer profiled()
	if err := svc.call(ctx, "POST", "/v1/mirrors", create, nil); err != nil {
		return err
	}
	deadline, warned := t0.Add(time.Hour), false
	for {
		m, err := svc.mirror(ctx)
		if err != nil {
			return err
		}
		if m.Status == "error" && !warned {
			b.logf("pgmirror: warning: mirror in error: %s", deref(m.ErrorMessage))
			warned = true
		}
		if m.Status == "stopped" {
			return fmt.Errorf("mirror stopped: %s", deref(m.ErrorMessage))
		}
		if m.Status == "running" {
			at := time.Now()
			var n int64
			if err := dst.QueryRow(ctx, `SELECT count(*) FROM public.bench`).Scan(&n); err != nil {
				return fmt.Errorf("count rows: %w", err)
			}
			if n == b.opts.rows {
				b.results.pgmirror.snapshot = measurement{dur: at.Sub(t0), units: n, cpu: b.cpuNow().sub(c0)}
				b.logf("pgmirror: snapshot in %s", b.results.pgmirror.snapshot.dur.Round(time.Millisecond))
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("snapshot not done after an hour: mirror is %s", m.Status)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// pgmirrorPositions reads the mirror's position as the API reports it and
// as applied on the destination (dst).
func pgmirrorPositions(svc *service, dst *pgx.Conn) func(ctx context.Context) (reported, applied lsn, err error) {
	return func(ctx context.Context) (reported, applied lsn, err error) {
		m, err := svc.mirror(ctx)
		if err != nil {
			return 0, 0, err
		}
		if m.Status != "running" {
			return 0, 0, fmt.Errorf("mirror is %s during catch-up: %s", m.Status, deref(m.ErrorMessage))
		}
		if m.LastLSN != nil && *m.LastLSN != "" {
			if reported, err = parseLSN(*m.LastLSN); err != nil {
				return 0, 0, err
			}
		}
		applied, err = queryLSN(ctx, dst, `SELECT max(lsn)::text FROM _pgmirror.applied`)
		return reported, applied, err
	}
}

// pgmirrorCatchup runs each catch-up workload while the mirror is paused
// and times the catch-up after the resume.
func (b *bench) pgmirrorCatchup(ctx context.Context, svc *service, dst *pgx.Conn) error {
	srcURL, dstURL := b.url(b.src, srcPgmirror), b.url(b.dst, dstPgmirror)
	pos := pgmirrorPositions(svc, dst)
	src, err := connect(ctx, srcURL)
	if err != nil {
		return err
	}
	defer closeConn(src)
	cur := newCursor(b.opts.rows)
	for _, w := range b.catchupWorkloads() {
		if err := svc.call(ctx, "POST", "/v1/mirrors/"+mirrorName+"/pause", nil, nil); err != nil {
			return err
		}
		if err := svc.waitStatus(ctx, "paused", time.Minute); err != nil {
			return err
		}
		if err := waitSlotsIdle(ctx, srcURL, srcPgmirror); err != nil {
			return err
		}
		end, err := runWorkload(ctx, srcURL, cur, w)
		if err != nil {
			return err
		}
		b.logf("pgmirror: workload %s ran in %s (WAL end %s)", w.name, end.elapsed.Round(time.Millisecond), end.target)
		if err := b.checkpoint(ctx); err != nil {
			return err
		}
		backlog, err := slotBacklog(ctx, src, srcPgmirror, end.target)
		if err != nil {
			return err
		}
		b.logf("pgmirror: %s", backlog)
		pname := fmt.Sprintf("catchup-%d", w.txSize)
		if w.oneInsert {
			pname = "catchup-large"
		}
		rss := sampleRSS(svc.cmd.Process.Pid)
		c0, t0 := b.cpuNow(), time.Now()
		profiled := b.profile(ctx, pname)
		if err := svc.call(ctx, "POST", "/v1/mirrors/"+mirrorName+"/resume", nil, nil); err != nil {
			rss.end()
			return err
		}
		m, err := waitCaughtUp(ctx, t0, end, pos, dst, src, srcPgmirror, 30*time.Minute)
		m.cpu, m.units, m.rss = b.cpuNow().sub(c0), w.changes, rss.end()
		profiled()
		if err != nil {
			return fmt.Errorf("catch-up after %s: %w", w.name, err)
		}
		b.logf("pgmirror: caught up with %s in %s (applied in %s, sent by its walsender in %s), peak RSS %s", w.name, m.dur.Round(time.Millisecond), m.applied.Round(time.Millisecond), m.sent.Round(time.Millisecond), mb(m.rss.peak))
		if err := waitEqual(ctx, srcURL, dstURL, 5*time.Minute); err != nil {
			return err
		}
		b.results.pgmirror.catchup = append(b.results.pgmirror.catchup, m)
	}
	return nil
}

// pgmirrorLive measures the lag under a paced load and the live large
// transactions, as the options ask.
func (b *bench) pgmirrorLive(ctx context.Context, svc *service) error {
	srcURL, dstURL := b.url(b.src, srcPgmirror), b.url(b.dst, dstPgmirror)
	var err error
	if !b.opts.largeOnly {
		if err := b.checkpoint(ctx); err != nil {
			return err
		}
		b.logf("pgmirror: lag under %d tx/s for %s", b.opts.lagRate, b.opts.lagDuration)
		profiled := b.profile(ctx, "lag")
		b.results.pgmirror.lag, err = b.measureLag(ctx, srcURL, dstURL)
		profiled()
		if err != nil {
			return err
		}
		l := b.results.pgmirror.lag
		b.logf("pgmirror: lag p50 %s p99 %s max %s at %.0f tx/s", ms(l.p50), ms(l.p99), ms(l.max), l.rate)
	}
	if b.opts.largeRows > 0 {
		b.logf("pgmirror: live large transactions")
		profiled := b.profile(ctx, "live-large")
		b.results.pgmirror.live, err = b.measureLiveTx(ctx, "pgmirror", srcURL, srcPgmirror, dstURL, svc.cmd.Process.Pid)
		profiled()
		if err != nil {
			return err
		}
	}
	return nil
}

// measureVerify times one verification of the mirror (both sides hashed by
// key ranges inside the databases), to compare with one COPY of the table.
func (b *bench) measureVerify(ctx context.Context, svc *service) error {
	var v struct {
		ID            int64   `json:"id"`
		State         string  `json:"state"`
		Error         *string `json:"error"`
		RowsDiffering *int64  `json:"rows_differing"`
	}
	c0, t0 := b.cpuNow(), time.Now()
	if err := svc.call(ctx, "POST", "/v1/mirrors/"+mirrorName+"/verify", nil, &v); err != nil {
		return fmt.Errorf("start a verification: %w", err)
	}
	for v.State == "running" {
		if time.Since(t0) > time.Hour {
			return errors.New("verification not done after an hour")
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if err := svc.call(ctx, "GET", fmt.Sprintf("/v1/mirrors/%s/verifications/%d", mirrorName, v.ID), nil, &v); err != nil {
			return err
		}
	}
	if v.State != "done" || v.RowsDiffering == nil || *v.RowsDiffering != 0 {
		return fmt.Errorf("verification ended %s (%s), rows differing %v", v.State, deref(v.Error), v.RowsDiffering)
	}
	b.results.pgmirror.verify = measurement{dur: time.Since(t0), units: b.opts.rows, cpu: b.cpuNow().sub(c0)}
	b.logf("pgmirror: verification in %s", b.results.pgmirror.verify.dur.Round(time.Millisecond))
	return nil
}
