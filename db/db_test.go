package db_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newStore returns a store on a fresh, migrated catalog database.
func newStore(t *testing.T) *db.Store {
	t.Helper()
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, pgtest.CatalogCluster(t)))
	require.NoError(t, db.Migrate(context.Background(), pool, discard()))
	return db.New(pool, pgtest.Keyring(t))
}

func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, pgtest.CatalogCluster(t))
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		pool := pgtest.Pool(t, url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Migrate(context.Background(), pool, discard())
		}()
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "process %d", i)
	}
	// Both schemas are there and a second run is a no-op.
	pool := pgtest.Pool(t, url)
	require.NoError(t, db.Migrate(context.Background(), pool, discard()))
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job`).Scan(&n))
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM mirrors`).Scan(&n))
}

func TestEnsureAdminNeverOverwrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	require.NoError(t, store.EnsureAdmin(ctx, "admin", "first-password"))
	require.NoError(t, store.EnsureAdmin(ctx, "admin", "second-password"))
	u, err := store.UserGetByUsername(ctx, "admin")
	require.NoError(t, err)
	require.Equal(t, db.RoleAdmin, u.Role)
	require.NoError(t, bcrypt.CompareHashAndPassword([]byte(u.PasswordHash), []byte("first-password")))
	users, err := store.UserList(ctx)
	require.NoError(t, err)
	require.Len(t, users, 1)
}

func TestJWTSecretIsSharedAndStable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	var wg sync.WaitGroup
	secrets := make([][]byte, 6)
	for i := range secrets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := store.JWTSecret(ctx)
			require.NoError(t, err)
			secrets[i] = s
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, len(secrets[0]), 32)
	for _, s := range secrets[1:] {
		require.Equal(t, secrets[0], s)
	}
}

func TestSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	_, err := store.PeerGetByName(ctx, "nope")
	require.ErrorIs(t, err, db.ErrNotFound)
	p := db.PeerCreateParams{Name: "p", Host: "h", Port: 5432, User: "u", Password: "pw", Database: "d", SSLMode: "disable"}
	_, err = store.PeerCreate(ctx, p)
	require.NoError(t, err)
	_, err = store.PeerCreate(ctx, p)
	require.ErrorIs(t, err, db.ErrConflict)
	_, err = store.UserCreate(ctx, "x", "h", "viewer")
	require.NoError(t, err)
	_, err = store.UserCreate(ctx, "x", "h", "viewer")
	require.ErrorIs(t, err, db.ErrConflict)
	require.ErrorIs(t, store.UserDelete(ctx, "nobody"), db.ErrNotFound)
}

func TestPeerConnConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	_, err := store.PeerCreate(ctx, db.PeerCreateParams{Name: "odd", Host: "db.example", Port: 6543, User: "us@r",
		Password: "p:w/d?#", Database: "my db", SSLMode: "require"})
	require.NoError(t, err)
	p, err := store.PeerGetByName(ctx, "odd")
	require.NoError(t, err)
	cfg, err := p.ConnConfig()
	require.NoError(t, err)
	require.Equal(t, "db.example", cfg.Host)
	require.Equal(t, uint16(6543), cfg.Port)
	require.Equal(t, "us@r", cfg.User)
	require.Equal(t, "p:w/d?#", cfg.Password)
	require.Equal(t, "my db", cfg.Database)
	require.Equal(t, 10*time.Second, cfg.ConnectTimeout)
	require.NotNil(t, cfg.TLSConfig, "require must use TLS")
	require.Empty(t, cfg.Fallbacks, "require must not fall back to plain text")

	_, err = db.Peer{Name: "hand-made"}.ConnConfig()
	require.ErrorContains(t, err, "not loaded from the catalog")
}

func createMirror(t *testing.T, store *db.Store, name string, tables ...change.Mapping) db.Mirror {
	t.Helper()
	ctx := context.Background()
	src, err := store.PeerGetByName(ctx, "src")
	if errors.Is(err, db.ErrNotFound) {
		src, err = store.PeerCreate(ctx, db.PeerCreateParams{Name: "src", Host: "h", Port: 1, User: "u", Password: "p", Database: "d", SSLMode: "disable"})
	}
	require.NoError(t, err)
	tx, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	m, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{
		Name: name, SourcePeerID: src.ID, DestinationPeerID: src.ID,
		SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1,
		CDCSyncIntervalSeconds: 1, CDCBatchSize: 1, PublicationName: "pub_" + name, ReplicationSlotName: "slot_" + name,
		Tables: tables,
	})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return m
}

func mapping(src, dst string, exclude ...string) change.Mapping {
	return change.Mapping{Source: change.TableName{Schema: "public", Name: src}, Destination: change.TableName{Schema: "public", Name: dst}, ExcludeColumns: exclude}
}

func TestMirrorLifecycleInCatalog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	m := createMirror(t, store, "m1", mapping("a", "a2"), mapping("b", "b2"))
	require.Equal(t, db.StatusInitializing, m.Status)
	require.Equal(t, "src", m.SourcePeer)
	tables, err := store.MirrorTables(ctx, m.ID)
	require.NoError(t, err)
	require.Len(t, tables, 2)
	require.Equal(t, "a", tables[0].SourceTable)
	require.Equal(t, db.TableStatusPending, tables[1].Status)

	// The peer is in use.
	err = store.PeerDelete(ctx, "src")
	var inUse *db.PeerInUseError
	require.ErrorAs(t, err, &inUse)
	require.ErrorIs(t, err, db.ErrConflict)
	require.Equal(t, "m1", inUse.Mirror)

	// Replace the table set: keep b (new destination), drop a, add c.
	tx, err := store.Pool().Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `UPDATE mirror_tables SET status = 'running' WHERE mirror_id = $1`, m.ID)
	require.NoError(t, err)
	got, err := store.With(tx).MirrorTablesReplace(ctx, m.ID, []change.Mapping{mapping("c", "c2", "secret"), mapping("b", "b3")})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Len(t, got, 2)
	require.Equal(t, "c", got[0].SourceTable)
	require.Equal(t, []string{"secret"}, got[0].ExcludeColumns)
	require.Equal(t, "b3", got[1].DestinationTable)
	require.Equal(t, tables[1].ID, got[1].ID, "a kept mapping keeps its row and counters")
	require.Equal(t, db.TableStatusPending, got[1].Status, "a new destination needs a new snapshot")

	// Soft delete: gone by name, still there by id, name reusable, peer still in use.
	tx, err = store.Pool().Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, store.With(tx).MirrorSoftDelete(ctx, m.ID))
	require.NoError(t, tx.Commit(ctx))
	_, err = store.MirrorGetByName(ctx, "m1")
	require.ErrorIs(t, err, db.ErrNotFound)
	byID, err := store.MirrorGetByID(ctx, m.ID)
	require.NoError(t, err)
	require.NotNil(t, byID.DeletedAt)
	err = store.PeerDelete(ctx, "src")
	require.ErrorAs(t, err, &inUse)
	require.True(t, inUse.Deleting)
	createMirror(t, store, "m1")
	list, err := store.MirrorList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 1)
}

func TestLogs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	m := createMirror(t, store, "logs")
	require.NoError(t, store.LogInsert(ctx, m.ID, db.LevelInfo, db.MsgSnapshotStarting, nil))
	require.NoError(t, store.LogInsert(ctx, m.ID, db.LevelInfo, db.MsgCDCBatchApplied, db.CDCBatchDetails{BatchID: 7, RowsProcessed: 3, TablesAffected: []string{"public.100%_done"}}))
	require.NoError(t, store.LogInsert(ctx, m.ID, db.LevelError, db.MsgCDCBatchFailed, db.ErrorDetails{Error: "boom", RetryCount: 1}))

	all, total, err := store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Limit: 50})
	require.NoError(t, err)
	require.EqualValues(t, 3, total)
	require.Equal(t, db.MsgCDCBatchFailed, all[0].Message, "newest first")
	require.JSONEq(t, `{}`, string(all[2].Details))

	got, total, err := store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Search: "100%_d", Limit: 50})
	require.NoError(t, err)
	require.EqualValues(t, 1, total)
	require.Equal(t, db.MsgCDCBatchApplied, got[0].Message)
	_, total, err = store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Search: "%", Limit: 50})
	require.NoError(t, err)
	require.EqualValues(t, 1, total, "%% matches literally")

	got, total, err = store.LogList(ctx, db.LogQuery{MirrorID: m.ID, Level: db.LevelInfo, Limit: 1, Offset: 1})
	require.NoError(t, err)
	require.EqualValues(t, 2, total)
	require.Len(t, got, 1)
	require.Equal(t, db.MsgSnapshotStarting, got[0].Message)

	n, err := store.LogPrune(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 3, n)
}

// migrationProvider is a goose provider of the catalog migrations on pool.
func migrationProvider(t *testing.T, pool *pgxpool.Pool) *goose.Provider {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { sqlDB.Close() })
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return provider
}
