package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/httpapi"
	"github.com/pgmirror/pgmirror/jobs"
	"github.com/pgmirror/pgmirror/metrics"
)

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	command := "serve"
	if len(args) > 0 {
		command = args[0]
	}
	if handled, err := runOtherCommand(ctx, command, args, getenv, stdout); handled {
		return err
	}

	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stdout)
	keys, err := loadKeyring(cfg, logger)
	if err != nil {
		return err
	}

	databaseURL := cfg.DatabaseURL
	if databaseURL == "" {
		cluster, url, err := startEmbedded(ctx, cfg, logger)
		if err != nil {
			return err
		}
		if cluster != nil {
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := cluster.Stop(stopCtx); err != nil {
					logger.Error("stop embedded PostgreSQL", "error", err)
				}
			}()
		}
		databaseURL = url
	}
	if command == "serve" {
		// After the embedded cluster started: its processes, forked from
		// this one, keep PostgreSQL's default policy.
		applyCPUScheduling(cfg.CPUScheduling, logger)
	}

	replica := replicaName()
	appName := catalogAppName(command, "")
	if command == "serve" {
		appName = catalogAppName(command, replica)
	}
	pool, err := openPool(ctx, databaseURL, cfg.MirrorWorkers, appName)
	if err != nil {
		return err
	}
	defer pool.Close()

	if err := db.Migrate(ctx, pool, logger); err != nil {
		return fmt.Errorf("migrate catalog: %w", err)
	}
	store := db.New(pool, keys)
	res, err := prepareSecrets(ctx, store, keys, command == "rotate-key", logger)
	if err != nil {
		return fmt.Errorf("encrypt catalog secrets: %w", err)
	}
	switch command {
	case "migrate":
		logger.Info("catalog migrations applied")
		return nil
	case "rotate-key":
		logger.Info("catalog secrets re-encrypted with the current key", "key_id", keys.CurrentID(),
			"reencrypted", res.Reencrypted, "encrypted", res.Encrypted)
		return nil
	}
	return serve(ctx, cfg, store, logger, replica)
}

// runOtherCommand runs the commands that need no catalog of their own
// (version, gen-key, demo, healthcheck, help and the client commands) and
// refuses unknown ones. handled is false for serve, migrate and
// rotate-key, which run goes on with.
func runOtherCommand(ctx context.Context, command string, args []string, getenv func(string) string, stdout io.Writer) (handled bool, err error) {
	switch command {
	case "serve", "migrate", "rotate-key":
		return false, nil
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "pgmirror", version)
		return true, nil
	case "gen-key":
		return true, genKey(stdout)
	case "demo":
		return true, runDemo(ctx, args[1:], getenv, stdout)
	case "healthcheck":
		return true, healthcheck(ctx, getenv, stdout)
	case "help", "--help", "-h":
		// The command tree's help: every command with what it does, or
		// one command's (pgmirror help mirrors get).
		return true, runCLI(ctx, "help", args[1:], getenv, stdout)
	}
	if cliCommands[command] {
		return true, runCLI(ctx, command, args[1:], getenv, stdout)
	}
	return true, &exitError{code: exitUsage, err: fmt.Errorf("unknown command %q: use serve, migrate, rotate-key, gen-key, demo, healthcheck, version, "+
		"or the client commands login, logout, peers, mirrors and logs", command)}
}

// replicaName names this process among the replicas: the host name and the
// process id, shown as the worker of the mirrors it runs.
func replicaName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "pgmirror"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// catalogAppName is the application_name of the catalog connections of a
// pgmirror process (pg_stat_activity shows it): "pgmirror <role>", and the
// replica's name for those of pgmirror serve ("pgmirror serve host:pid" for
// the shared pool, "pgmirror river host:pid" for River's pool, "pgmirror
// locks host:pid" for the lock connection). PostgreSQL keeps its first 63
// bytes. An application_name in SERVICE_DATABASE_URL (or PGAPPNAME) wins.
func catalogAppName(role, replica string) string {
	name := "pgmirror " + role
	if replica != "" {
		name += " " + replica
	}
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

func newLogger(cfg config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// catalogConnectTimeout bounds each new connection to the catalog unless
// SERVICE_DATABASE_URL sets connect_timeout.
const catalogConnectTimeout = 5 * time.Second

// openPool connects to the catalog, waiting up to a minute for it to accept
// connections (a catalog that starts together with the service). The pool's
// size comes from the URL's pool_max_conns or from workers (sizing.go).
// Its connections carry application_name appName unless the URL names one.
func openPool(ctx context.Context, url string, workers int, appName string) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse SERVICE_DATABASE_URL: %w", redact(err))
	}
	if poolCfg.ConnConfig.RuntimeParams["application_name"] == "" {
		poolCfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	if poolCfg.MaxConns, err = catalogPoolSize(url, poolCfg.MaxConns, workers); err != nil {
		return nil, err
	}
	if poolCfg.ConnConfig.ConnectTimeout == 0 {
		// Without a bound, a catalog host that drops packets would hold
		// every API request until the operating system gives up on the
		// connection (minutes, past the HTTP write timeout); with it they
		// answer 503 (catalog unavailable).
		poolCfg.ConnConfig.ConnectTimeout = catalogConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("open catalog pool: %w", redact(err))
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := pool.Ping(ctx)
		if err == nil {
			return pool, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			pool.Close()
			return nil, fmt.Errorf("connect to catalog %s: %w", poolCfg.ConnConfig.Host, redact(err))
		}
		time.Sleep(time.Second)
	}
}

// redact keeps a connection error but drops anything that could carry a
// password (pgx errors name host, user and database, never the password, but
// a malformed URL is echoed by the parser).
func redact(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return errors.New("the URL is malformed; use postgres://user:password@host:port/database")
	}
	return err
}

// checkAdminPassword warns at every start while the default admin still has
// the default password, replaces that default by SERVICE_ADMIN_PASSWORD when
// one is set, and warns when SERVICE_ADMIN_PASSWORD differs from a stored
// password that is not the default (the stored one is kept).
func checkAdminPassword(ctx context.Context, store *db.Store, cfg config, logger *slog.Logger) error {
	configured := ""
	if cfg.adminPasswordSet {
		configured = cfg.AdminPassword
	}
	state, err := store.ReconcileAdminPassword(ctx, cfg.AdminUser, configured)
	if errors.Is(err, db.ErrNotFound) {
		// Deleted between EnsureAdmin and now: nothing to check.
		return nil
	}
	if err != nil {
		return fmt.Errorf("check the default admin password: %w", err)
	}
	switch state {
	case db.AdminPasswordDefault:
		logger.Warn("SECURITY: the admin account still has the default password \"admin\", which anyone can guess: "+
			"change it now with POST /v1/auth/change-password (or set SERVICE_ADMIN_PASSWORD and restart)", "user", cfg.AdminUser)
	case db.AdminPasswordReplaced:
		logger.Warn("the admin account's default password \"admin\" was replaced by SERVICE_ADMIN_PASSWORD; tokens issued under the default are revoked",
			"user", cfg.AdminUser)
	case db.AdminPasswordKept:
		logger.Warn("SERVICE_ADMIN_PASSWORD differs from the admin account's stored password: the stored password was kept "+
			"(the variable only sets the password of a new account, or replaces the default \"admin\"); "+
			"change it with POST /v1/auth/change-password, or unset SERVICE_ADMIN_PASSWORD", "user", cfg.AdminUser)
	}
	return nil
}

func serve(ctx context.Context, cfg config, store *db.Store, logger *slog.Logger, replica string) error {
	if err := store.EnsureAdmin(ctx, cfg.AdminUser, cfg.AdminPassword); err != nil {
		return fmt.Errorf("create default admin: %w", err)
	}
	if err := checkAdminPassword(ctx, store, cfg, logger); err != nil {
		return err
	}
	secret := []byte(cfg.JWTSecret)
	if len(secret) == 0 {
		var err error
		if secret, err = store.JWTSecret(ctx); err != nil {
			return fmt.Errorf("load JWT secret: %w", err)
		}
	}
	w, err := startWorkers(ctx, cfg, store, logger, replica)
	if err != nil {
		return err
	}
	defer w.close()

	handler, err := httpapi.New(httpapi.Config{
		Metrics: w.registry.Handler(cfg.MetricsToken), ReadTimeout: cfg.HTTP.ReadTimeout,
		AllowSocketPeers: cfg.AllowSocketPeers,
		Store:            store, LagBoard: w.lagBoard, River: w.river, JWTSecret: secret, Logger: logger, Version: version,
		TokenTTL: cfg.TokenTTL, RevokeTokensOnPasswordChange: cfg.RevokeTokensOnPasswordChange,
		Login: httpapi.LoginLimits{UserFailures: cfg.LoginUserFailures, AddressFailures: cfg.LoginAddressFailures,
			Window: cfg.LoginFailureWindow, TrustedProxies: cfg.TrustedProxies},
	})
	if err != nil {
		return fmt.Errorf("create HTTP API: %w", err)
	}
	server := newHTTPServer(cfg.HTTP, cfg.Port, handler)
	listener, err := net.Listen("tcp", server.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s (SERVICE_HOST, SERVICE_PORT): %w", server.Addr, err)
	}

	// The job workers outlive the signal: as the process stops, its mirrors
	// are handed over a few at a time (jobs.Shutdown) before River cancels
	// what is left.
	if err := w.river.Start(context.WithoutCancel(ctx)); err != nil {
		listener.Close()
		return fmt.Errorf("start job workers: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- serveHTTP(server, listener) }()
	logger.Info("pgmirror serving", "replica", w.locks.Name(), "addr", listener.Addr().String(), "tls", server.TLSConfig != nil, "version", version)

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			logger.Error("HTTP server failed", "error", err)
		}
	}

	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := server.Shutdown(shutdownCtx); err != nil {
		logger.Error("HTTP server shutdown", "error", err)
	}
	w.stop(shutdownCtx, cfg.ShutdownTimeout)
	logger.Info("stopped")
	return nil
}

// workers are the job side of pgmirror serve: River's own catalog pool and
// client, the lock holder and the metrics registry that watches them.
type workers struct {
	riverPool *pgxpool.Pool
	river     *river.Client[pgx.Tx]
	locks     *db.LockHolder
	stopLocks context.CancelFunc
	shutdown  *jobs.Shutdown
	registry  *metrics.Registry
	// lagBoard carries the newest lag measures of this replica's streams
	// to its API.
	lagBoard *db.LagBoard
	logger   *slog.Logger
}

// startWorkers opens River's catalog pool, starts the lock holder and
// creates the job client (not started yet).
func startWorkers(ctx context.Context, cfg config, store *db.Store, logger *slog.Logger, replica string) (*workers, error) {
	pool := store.Pool()
	w := &workers{shutdown: &jobs.Shutdown{}, registry: metrics.New(), lagBoard: db.NewLagBoard(), logger: logger}
	// River gets a pool of its own: fetching jobs and electing a leader
	// never wait behind API requests or mirror runs.
	riverCfg := pool.Config()
	riverCfg.MaxConns, riverCfg.MinConns = riverPoolConns, 0
	// Each catalog connection says what it is, unless the URL named them.
	named := pool.Config().ConnConfig.RuntimeParams["application_name"] != catalogAppName("serve", replica)
	if !named {
		riverCfg.ConnConfig.RuntimeParams["application_name"] = catalogAppName("river", replica)
	}
	var err error
	if w.riverPool, err = pgxpool.NewWithConfig(ctx, riverCfg); err != nil {
		return nil, fmt.Errorf("open River's catalog pool: %w", redact(err))
	}

	// One connection holds the locks of every mirror this replica runs. It
	// outlives the job client, whose runs release their locks as they stop.
	lockCfg := pool.Config().ConnConfig
	if !named {
		lockCfg.RuntimeParams["application_name"] = catalogAppName("locks", replica)
	}
	w.locks = db.NewLockHolder(replica, cfg.MirrorWorkers, lockCfg, logger)
	// River's client id goes into the replica's row: the jobs this process
	// leaves running if it dies are rescued at once (jobs/fleet.go).
	clientID := jobs.ClientID(replica, time.Now())
	w.locks.SetJobClientID(clientID)
	locksCtx, stopLocks := context.WithCancel(context.Background())
	w.stopLocks = stopLocks
	go w.locks.Run(locksCtx)

	w.river, err = jobs.NewClient(w.riverPool, jobs.Config{
		Shutdown:               w.shutdown,
		LagBoard:               w.lagBoard,
		ClientID:               clientID,
		Locks:                  w.locks,
		Metrics:                w.registry,
		SlotMonitorInterval:    cfg.SlotMonitorInterval,
		SequenceSyncInterval:   cfg.SequenceSyncInterval,
		VerifyScheduleInterval: cfg.VerifyScheduleInterval,
		CutoverChecksumMax:     int64(cfg.CutoverChecksumMaxBytes),
		Store:                  store,
		Logger:                 logger,
		MirrorWorkers:          cfg.MirrorWorkers,
		LogRetention:           cfg.LogRetention,
		HistoryRetention:       cfg.HistoryRetention,
	})
	if err != nil {
		w.close()
		return nil, fmt.Errorf("create job client: %w", err)
	}
	w.registry.SetCatalog(store, w.river.ID(), logger)
	w.registry.WatchRiver(w.river)
	return w, nil
}

// stop leaves the replicas table, so the others stop counting this
// replica, then hands the mirrors to them a few at a time
// (jobs.Shutdown), for two thirds of the shutdown timeout at most. The runs
// left then (copying tables, or no replica has room) are cancelled: each
// stops at a batch boundary and hands its mirror to a live replica or back
// to the queue.
func (w *workers) stop(ctx context.Context, timeout time.Duration) {
	w.locks.Retire(ctx)
	handCtx, cancelHand := context.WithTimeout(ctx, timeout*2/3)
	w.shutdown.HandOver(handCtx)
	cancelHand()
	if err := w.river.StopAndCancel(ctx); err != nil {
		w.logger.Error("job workers shutdown", "error", err)
	}
}

// close stops the lock holder, once the runs released their locks, and
// closes River's pool.
func (w *workers) close() {
	w.stopLocks()
	<-w.locks.Done()
	w.riverPool.Close()
}
