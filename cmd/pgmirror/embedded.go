package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db/localpg"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// embeddedPasswordFile is the file in SERVICE_DATA_DIR that keeps the
// password of the embedded cluster's superuser "postgres" (mode 0600).
const embeddedPasswordFile = "embedded-pg-password"

// startEmbedded starts the local PostgreSQL cluster under cfg.DataDir that
// serves as catalog when SERVICE_DATABASE_URL is unset, and returns it with
// the URL of its database pgmirror. It runs with wal_level=logical so it can
// also be a demo mirror source. When the cluster was already running (a
// previous process left it), it is used as it is and the returned cluster
// is nil: it is left running at exit. pgmirror connects through the Unix
// socket inside the cluster's data directory, so the password never goes to
// another server listening on the port.
func startEmbedded(ctx context.Context, cfg config, logger *slog.Logger) (*localpg.Cluster, string, error) {
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, "", fmt.Errorf("SERVICE_DATA_DIR=%q: %w", cfg.DataDir, err)
	}
	dataDir := filepath.Join(dir, "data")
	logger.Info("SERVICE_DATABASE_URL is unset: starting the embedded PostgreSQL cluster", "data_dir", dataDir, "port", cfg.EmbeddedPort)
	binDir, err := localpg.FindBinDir(cfg.PGBin)
	if err != nil {
		return nil, "", err
	}
	cluster, err := localpg.Start(ctx, localpg.Config{
		DataDir: dataDir, Port: cfg.EmbeddedPort, Logical: true, Durable: true, BinDir: binDir,
		PasswordFile: filepath.Join(dir, embeddedPasswordFile),
	})
	var taken *localpg.PortTakenError
	if errors.As(err, &taken) {
		return nil, "", fmt.Errorf("start embedded PostgreSQL: port %d on 127.0.0.1 is taken by another program, not by the embedded cluster in %s: stop that program, or set SERVICE_EMBEDDED_PG_PORT to a free port (or SERVICE_DATABASE_URL to use another catalog)", taken.Port, dataDir)
	}
	if err != nil {
		return nil, "", fmt.Errorf("start embedded PostgreSQL: %w", err)
	}
	if err := ensureDatabase(ctx, cluster.SocketURL("postgres"), "pgmirror"); err != nil {
		if !cluster.Reused() {
			_ = cluster.Stop(context.WithoutCancel(ctx))
		}
		return nil, "", err
	}
	url := cluster.SocketURL("pgmirror")
	if cluster.Reused() {
		logger.Info("using the embedded PostgreSQL cluster that was already running; it is left running at exit", "data_dir", dataDir, "port", cfg.EmbeddedPort)
		return nil, url, nil
	}
	return cluster, url, nil
}

// ensureDatabase creates database name unless it exists.
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
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+sqlquote.Ident(name)); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
