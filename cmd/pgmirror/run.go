package main

import (
	"context"

	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"

	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/httpapi"
	"github.com/pgmirror/pgmirror/jobs"
)

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	command := "serve"
	if len(args) > 0 {
		command = args[0]
	}
	switch command {
	case "version", "--version", "-v":
		fmt.Fprintln(stdout, "pgmirror", version)
		return nil
	case "serve", "migrate":
	case "help", "--help", "-h":
		fmt.Fprintln(stdout, "usage: pgmirror [serve|migrate|version]\nConfiguration comes from SERVICE_* environment variables; see docs/configuration.md.")
		return nil
	default:
		return fmt.Errorf("unknown command %q: use serve, migrate or version", command)
	}

	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	logger := newLogger(cfg, stdout)

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

	pool, err := openPool(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	if err := db.Migrate(ctx, pool, logger); err != nil {
		return fmt.Errorf("migrate catalog: %w", err)
	}
	if command == "migrate" {
		logger.Info("catalog migrations applied")
		return nil
	}
	return serve(ctx, cfg, pool, logger)
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
// connections (a catalog that starts together with the service).
func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	poolCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse SERVICE_DATABASE_URL: %w", redact(err))
	}
	if poolCfg.MaxConns < 20 {
		poolCfg.MaxConns = 20
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

// startEmbedded starts (or reuses) the local PostgreSQL cluster under
// cfg.DataDir that serves as catalog when SERVICE_DATABASE_URL is unset. It
// runs with wal_level=logical so it can also be a demo mirror source.
func startEmbedded(ctx context.Context, cfg config, logger *slog.Logger) (*localpg.Cluster, string, error) {
	dataDir, err := filepath.Abs(filepath.Join(cfg.DataDir, "data"))
	if err != nil {
		return nil, "", fmt.Errorf("embedded PostgreSQL data directory: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.EmbeddedPort))
	var cluster *localpg.Cluster
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		logger.Info("using the PostgreSQL server already listening on the embedded port", "addr", addr)
	} else {
		logger.Info("SERVICE_DATABASE_URL is unset: starting the embedded PostgreSQL cluster", "data_dir", dataDir, "port", cfg.EmbeddedPort)
		cluster, err = localpg.Start(ctx, localpg.Config{DataDir: dataDir, Port: cfg.EmbeddedPort, Logical: true, Durable: true})
		if err != nil {
			return nil, "", fmt.Errorf("start embedded PostgreSQL: %w", err)
		}
	}
	url := fmt.Sprintf("postgres://postgres:%s@%s/pgmirror?sslmode=disable", localpg.Password, addr)
	if err := ensureDatabase(ctx, fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable", localpg.Password, addr), "pgmirror"); err != nil {
		if cluster != nil {
			_ = cluster.Stop(context.Background())
		}
		return nil, "", err
	}
	return cluster, url, nil
}

func ensureDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to embedded PostgreSQL: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

func serve(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger) error {
	store := db.New(pool)
	if err := store.EnsureAdmin(ctx, cfg.AdminUser, cfg.AdminPassword); err != nil {
		return fmt.Errorf("create default admin: %w", err)
	}
	if !cfg.adminPasswordSet {
		logger.Warn("SERVICE_ADMIN_PASSWORD is unset: the default admin account uses the default password; change it with POST /v1/auth/change-password", "user", cfg.AdminUser)
	}
	secret := []byte(cfg.JWTSecret)
	if len(secret) == 0 {
		var err error
		if secret, err = store.JWTSecret(ctx); err != nil {
			return fmt.Errorf("load JWT secret: %w", err)
		}
	}

	riverClient, err := jobs.NewClient(pool, jobs.Config{
		Store:         store,
		Logger:        logger,
		MirrorWorkers: cfg.MirrorWorkers,
		LogRetention:  cfg.LogRetention,
	})
	if err != nil {
		return fmt.Errorf("create job client: %w", err)
	}

	handler, err := httpapi.New(httpapi.Config{Store: store, River: riverClient, JWTSecret: secret, Logger: logger, Version: version})
	if err != nil {
		return fmt.Errorf("create HTTP API: %w", err)
	}
	server := newHTTPServer(cfg.HTTP, cfg.Port, handler)
	listener, err := net.Listen("tcp", server.Addr)
	if err != nil {
		return fmt.Errorf("listen on port %d: %w", cfg.Port, err)
	}

	if err := riverClient.Start(ctx); err != nil {
		listener.Close()
		return fmt.Errorf("start job workers: %w", err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- serveHTTP(server, listener) }()
	logger.Info("pgmirror serving", "addr", listener.Addr().String(), "tls", server.TLSConfig != nil, "version", version)

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
	// Cancel running mirror jobs: each stops at a batch boundary and hands
	// its mirror back to the queue so another replica takes it over at once.
	if err := riverClient.StopAndCancel(shutdownCtx); err != nil {
		logger.Error("job workers shutdown", "error", err)
	}
	logger.Info("stopped")
	return nil
}
