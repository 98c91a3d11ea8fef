package db

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/pgmirror/pgmirror/migrations"
)

// migrateLockKey is the session advisory lock that serialises catalog
// migrations across replicas ("pgmirror" in ASCII).
const migrateLockKey int64 = 0x7067_6d69_7272_6f72

// Migrate brings the catalog up to date: pgmirror's goose migrations, then
// River's. Both run while this process holds one session advisory lock on a
// dedicated connection, because rivermigrate takes no lock of its own; any
// number of processes may call Migrate at the same moment.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate catalog: acquire lock connection: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrateLockKey); err != nil {
		conn.Release()
		return fmt.Errorf("migrate catalog: take advisory lock: %w", err)
	}
	defer func() {
		// Unlock on a fresh context: the caller's may be cancelled. If the
		// unlock fails, close the connection so the session (and its lock) ends.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, migrateLockKey); uerr != nil {
			_ = conn.Hijack().Close(uctx)
			return
		}
		conn.Release()
	}()

	sqlDB := stdlib.OpenDBFromPool(pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate catalog: open goose provider: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate catalog: apply pgmirror migrations: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "applied catalog migration", slog.String("migration", r.Source.Path), slog.Duration("duration", r.Duration))
	}

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate catalog: open river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate catalog: apply river migrations: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", slog.Int("version", v.Version), slog.Duration("duration", v.Duration))
	}
	return nil
}
