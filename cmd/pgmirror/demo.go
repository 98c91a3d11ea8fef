package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// The demo's names: two databases in the embedded cluster, their peers and
// the mirror between them.
const (
	demoSourceDB      = "pgmirror_demo_source"
	demoDestinationDB = "pgmirror_demo_destination"
	demoMirror        = "demo"
	demoRows          = 10000
)

// demoOptions are the flags of `pgmirror demo`.
type demoOptions struct {
	duration time.Duration // how long the write load runs
	rate     int           // source transactions per second
	linger   bool          // after the load, keep running until Ctrl-C
}

func parseDemoFlags(args []string, out io.Writer) (demoOptions, error) {
	o := demoOptions{}
	fs := flag.NewFlagSet("pgmirror demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long the write load runs (1s to 1h)")
	fs.IntVar(&o.rate, "rate", 20, "source transactions per second during the load (1 to 1000)")
	fs.BoolVar(&o.linger, "linger", true, "after the load, keep the service and the mirror running until Ctrl-C")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.duration < time.Second || o.duration > time.Hour:
		return o, errors.New("-duration: use 1s to 1h")
	case o.rate < 1 || o.rate > 1000:
		return o, errors.New("-rate: use 1 to 1000")
	}
	return o, nil
}

// runDemo is `pgmirror demo`: it starts the service on the embedded default
// in this process, creates a source and a destination database in the
// embedded cluster, a table with rows, both peers and a mirror through the
// REST API, runs a bounded write load while printing the mirror's status,
// lag and counters, and tells how to look further. On Ctrl-C (or at the end
// with -linger=false) it deletes the mirror, the peers and both databases
// and stops the service (and the embedded cluster, if it started it).
func runDemo(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	opts, err := parseDemoFlags(args, stdout)
	if err != nil {
		return err
	}
	if getenv("SERVICE_DATABASE_URL") != "" {
		return errors.New("the demo runs on the embedded default: unset SERVICE_DATABASE_URL")
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	if err := localpg.MkdirAll(cfg.DataDir); err != nil { // readable by the postgres user the cluster runs as
		return fmt.Errorf("create SERVICE_DATA_DIR %s: %w", cfg.DataDir, err)
	}
	logPath := filepath.Join(cfg.DataDir, "demo-service.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("create the service log %s: %w", logPath, err)
	}
	defer logFile.Close()

	// The service runs until the demo has cleaned up, not until Ctrl-C.
	svcCtx, stopService := context.WithCancel(context.WithoutCancel(ctx))
	served := make(chan error, 1)
	go func() { served <- run(svcCtx, []string{"serve"}, getenv, logFile) }()
	defer func() {
		stopService()
		if err := <-served; err != nil {
			fmt.Fprintf(stdout, "the service ended with: %v\n", err)
		}
		fmt.Fprintf(stdout, "service stopped (its log: %s)\n", logPath)
	}()

	say := func(format string, a ...any) { fmt.Fprintf(stdout, format+"\n", a...) }
	base := fmt.Sprintf("http://127.0.0.1:%d", cfg.Port)
	say("starting pgmirror on %s with the embedded PostgreSQL cluster in %s (service log: %s)", base, cfg.DataDir, logPath)
	api := &demoAPI{base: base}
	if err := api.waitHealthy(ctx, served); err != nil {
		return err
	}
	if err := api.login(ctx, cfg.AdminUser, cfg.AdminPassword); err != nil {
		return fmt.Errorf("log in as %s: %w (set SERVICE_ADMIN_PASSWORD to the admin's password)", cfg.AdminUser, err)
	}
	password, err := os.ReadFile(filepath.Join(cfg.DataDir, embeddedPasswordFile))
	if err != nil {
		return fmt.Errorf("read the embedded cluster's password: %w", err)
	}
	pg := demoCluster{port: cfg.EmbeddedPort, password: strings.TrimSpace(string(password))}

	cleanup := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		say("cleaning up: mirror, peers and the two demo databases")
		if err := demoCleanup(cctx, api, pg); err != nil {
			say("cleanup: %v", err)
		}
	}
	defer cleanup()
	if err := demoCleanup(ctx, api, pg); err != nil { // leftovers of an interrupted demo
		return err
	}
	if err := demoSetup(ctx, api, pg); err != nil {
		return err
	}
	say("mirror %q created: %s.public.orders (%d rows) -> %s.public.orders", demoMirror, demoSourceDB, demoRows, demoDestinationDB)
	if err := demoLoad(ctx, api, pg, opts, say); err != nil {
		if ctx.Err() != nil {
			return nil // Ctrl-C: clean up and stop
		}
		return err
	}
	demoHints(say, cfg, api.token, base)
	if opts.linger {
		say("the mirror keeps running; press Ctrl-C to clean up and stop")
		<-ctx.Done()
	}
	return nil
}

// demoHints tells where to look while the demo mirror runs.
func demoHints(say func(string, ...any), cfg config, token, base string) {
	say(`
Have a look (the admin token below %s):
  TOKEN=%s
  curl -s -H "Authorization: Bearer $TOKEN" %s/v1/mirrors/%s
  curl -s -H "Authorization: Bearer $TOKEN" '%s/v1/mirrors/%s/logs?limit=5'
  %s/docs           (the API in the browser)
  %s/metrics        (Prometheus metrics)
  PGPASSWORD=$(cat %s) psql -h 127.0.0.1 -p %d -U postgres %s -c 'SELECT count(*) FROM orders'
`, tokenValidity(cfg.TokenTTL), token, base, demoMirror, base, demoMirror, base, base,
		filepath.Join(cfg.DataDir, embeddedPasswordFile), cfg.EmbeddedPort, demoDestinationDB)
}

// demoCluster reaches the embedded cluster as its superuser over loopback.
type demoCluster struct {
	port     int
	password string
}

func (c demoCluster) url(database string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", c.password),
		Host: "127.0.0.1:" + strconv.Itoa(c.port), Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

func (c demoCluster) exec(ctx context.Context, database, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, c.url(database))
	if err != nil {
		return fmt.Errorf("connect to %s: %w", database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", database, err)
	}
	return nil
}

// demoSetup creates the databases, the source table with its rows, the
// peers and the mirror.
func demoSetup(ctx context.Context, api *demoAPI, pg demoCluster) error {
	for _, name := range []string{demoSourceDB, demoDestinationDB} {
		if err := pg.exec(ctx, "postgres", "CREATE DATABASE "+sqlquote.Ident(name)); err != nil {
			return fmt.Errorf("create database: %w", err)
		}
	}
	err := pg.exec(ctx, demoSourceDB, fmt.Sprintf(`CREATE TABLE public.orders (
		id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
		item text NOT NULL, qty int NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO public.orders (item, qty) SELECT 'item ' || g, g %% 10 + 1 FROM generate_series(1, %d) g`, demoRows))
	if err != nil {
		return fmt.Errorf("create the source table: %w", err)
	}
	for _, p := range []struct{ name, db string }{{"demo_source", demoSourceDB}, {"demo_destination", demoDestinationDB}} {
		body := map[string]any{"name": p.name, "host": "127.0.0.1", "port": pg.port, "user": "postgres",
			"password": pg.password, "database": p.db, "ssl_mode": "disable"}
		if err := api.do(ctx, "POST", "/v1/peers", body, nil, http.StatusCreated); err != nil {
			return fmt.Errorf("create peer %s: %w", p.name, err)
		}
	}
	return api.do(ctx, "POST", "/v1/mirrors", map[string]any{
		"name": demoMirror, "source_peer": "demo_source", "destination_peer": "demo_destination",
		"cdc_sync_interval_seconds": 1,
		"table_mappings": []map[string]any{{"source_schema": "public", "source_table": "orders",
			"destination_schema": "public", "destination_table": "orders"}},
	}, nil, http.StatusCreated)
}

// demoStatus is what the demo prints of the mirror's status record.
type demoStatus struct {
	Status       string   `json:"status"`
	LagSeconds   *float64 `json:"lag_seconds"`
	ErrorMessage *string  `json:"error_message"`
	Tables       []struct {
		RowsSynced   int64 `json:"rows_synced"`
		RowsInserted int64 `json:"rows_inserted"`
		RowsUpdated  int64 `json:"rows_updated"`
		RowsDeleted  int64 `json:"rows_deleted"`
	} `json:"tables"`
}

// demoLoad writes opts.rate transactions a second on the source for
// opts.duration (inserts, updates, deletes) and prints the mirror's state
// every two seconds, then waits until the destination has every row.
func demoLoad(ctx context.Context, api *demoAPI, pg demoCluster, opts demoOptions, say func(string, ...any)) error {
	src, err := pgx.Connect(ctx, pg.url(demoSourceDB))
	if err != nil {
		return fmt.Errorf("connect to the source: %w", err)
	}
	defer src.Close(context.WithoutCancel(ctx))
	dst, err := pgx.Connect(ctx, pg.url(demoDestinationDB))
	if err != nil {
		return fmt.Errorf("connect to the destination: %w", err)
	}
	defer dst.Close(context.WithoutCancel(ctx))
	r := &demoReporter{api: api, src: src, dst: dst, say: say, started: time.Now()}

	say("writing %d transactions a second on the source for %s", opts.rate, opts.duration)
	tick := time.NewTicker(time.Second / time.Duration(opts.rate))
	defer tick.Stop()
	show := time.NewTicker(2 * time.Second)
	defer show.Stop()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	end := time.After(opts.duration)
	for load := true; load; {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-end:
			load = false
		case <-show.C:
			if _, _, _, err := r.report(ctx); err != nil {
				return err
			}
		case <-tick.C:
			if _, err := src.Exec(ctx, demoWrite(rng)); err != nil {
				return fmt.Errorf("write on the source: %w", err)
			}
		}
	}
	say("load done; waiting for the destination to catch up")
	deadline := time.Now().Add(time.Minute)
	for {
		srcRows, dstRows, st, err := r.report(ctx)
		if err != nil {
			return err
		}
		if st.Status == "running" && srcRows == dstRows && st.LagSeconds != nil && *st.LagSeconds < 1 {
			say("caught up: %d rows on both sides", dstRows)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the destination did not catch up within a minute (mirror %s)", st.Status)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// demoWrite is one transaction of the demo's load: six in ten insert an
// order, three update one, one deletes one.
func demoWrite(rng *rand.Rand) string {
	switch n := rng.IntN(10); {
	case n < 6:
		return `INSERT INTO public.orders (item, qty) VALUES ('demo item', 1)`
	case n < 9:
		return `UPDATE public.orders SET qty = qty + 1 WHERE id = (SELECT floor(random() * max(id))::bigint + 1 FROM public.orders)`
	default:
		return `DELETE FROM public.orders WHERE id = (SELECT floor(random() * max(id))::bigint + 1 FROM public.orders)`
	}
}

// demoReporter prints the demo mirror's status and both sides' row counts.
type demoReporter struct {
	api      *demoAPI
	src, dst *pgx.Conn
	say      func(string, ...any)
	started  time.Time
}

// report prints one status line and returns what it shows.
func (r *demoReporter) report(ctx context.Context) (srcRows, dstRows int64, st demoStatus, err error) {
	if err = r.api.do(ctx, "GET", "/v1/mirrors/"+demoMirror, nil, &st, http.StatusOK); err != nil {
		return
	}
	_ = r.src.QueryRow(ctx, `SELECT count(*) FROM public.orders`).Scan(&srcRows)
	_ = r.dst.QueryRow(ctx, `SELECT count(*) FROM public.orders`).Scan(&dstRows) // absent before the snapshot
	lag := "unknown"
	if st.LagSeconds != nil {
		lag = fmt.Sprintf("%.3f s", *st.LagSeconds)
	}
	var synced, ins, upd, del int64
	for _, t := range st.Tables {
		synced, ins, upd, del = synced+t.RowsSynced, ins+t.RowsInserted, upd+t.RowsUpdated, del+t.RowsDeleted
	}
	line := fmt.Sprintf("[%4ds] mirror %s: %s | lag %s | source %d rows, destination %d rows | rows_synced %d (CDC: %d inserts, %d updates, %d deletes)",
		int(time.Since(r.started).Seconds()), demoMirror, st.Status, lag, srcRows, dstRows, synced, ins, upd, del)
	if st.ErrorMessage != nil {
		line += " | error: " + *st.ErrorMessage
	}
	r.say("%s", line)
	return
}

// demoCleanup deletes the demo mirror and peers (what exists of them) and,
// once the mirror's slot is gone from the source, drops both databases.
func demoCleanup(ctx context.Context, api *demoAPI, pg demoCluster) error {
	if err := api.do(ctx, "DELETE", "/v1/mirrors/"+demoMirror, nil, nil, http.StatusOK, http.StatusNotFound); err != nil {
		return fmt.Errorf("delete mirror: %w", err)
	}
	// The mirror's row goes once its slot is dropped (in the background).
	deadline := time.Now().Add(time.Minute)
	for {
		var list []struct {
			Name string `json:"name"`
		}
		if err := api.do(ctx, "GET", "/v1/mirrors", nil, &list, http.StatusOK); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, pg.url("postgres"))
		if err != nil {
			return err
		}
		var slots int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, demoSourceDB).Scan(&slots)
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return err
		}
		if slots == 0 {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the demo mirror's replication slot was not dropped within a minute")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	for _, p := range []string{"demo_source", "demo_destination"} {
		if err := api.do(ctx, "DELETE", "/v1/peers/"+p, nil, nil, http.StatusOK, http.StatusNoContent, http.StatusNotFound, http.StatusConflict); err != nil {
			return fmt.Errorf("delete peer %s: %w", p, err)
		}
	}
	for _, name := range []string{demoSourceDB, demoDestinationDB} {
		if err := pg.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+sqlquote.Ident(name)+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database: %w", err)
		}
	}
	return nil
}

// demoAPI is a small client of the service's REST API.
type demoAPI struct {
	base, token string
}

// waitHealthy waits until /health answers, or the service ended.
func (a *demoAPI) waitHealthy(ctx context.Context, served <-chan error) error {
	deadline := time.Now().Add(3 * time.Minute) // a first start runs initdb
	for {
		resp, err := http.Get(a.base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-served:
			return fmt.Errorf("the service did not start: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the service did not answer /health within 3 minutes")
		}
	}
}

func (a *demoAPI) login(ctx context.Context, user, password string) error {
	var out struct {
		Token string `json:"token"`
	}
	if err := a.do(ctx, "POST", "/v1/auth/login", map[string]string{"username": user, "password": password}, &out, http.StatusOK); err != nil {
		return err
	}
	a.token = out.Token
	return nil
}

// do sends a request and decodes the answer into out, failing with the
// API's error message unless the status is one of want.
func (a *demoAPI) do(ctx context.Context, method, path string, body, out any, want ...int) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	for _, w := range want {
		if resp.StatusCode == w {
			if out != nil && resp.StatusCode < 300 {
				return json.Unmarshal(raw, out)
			}
			return nil
		}
	}
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(raw, &e)
	return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, cmp.Or(e.Error, string(raw)))
}

// tokenValidity says how long a token issued with the lifetime ttl is valid.
func tokenValidity(ttl time.Duration) string {
	if ttl == 0 {
		return "does not expire"
	}
	return "is valid for " + formatDuration(ttl)
}
