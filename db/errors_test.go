package db_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/pgtest"
	"github.com/pgmirror/pgmirror/engine/change"
)

// TestConstraintErrors checks the translation of every kind of catalog
// constraint violation: unique and foreign key are ErrConflict, check and
// not-null are ErrInvalid, each a *ConstraintError naming the constraint and
// never holding the rejected values (a peer password among them).
func TestConstraintErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	p := db.PeerCreateParams{Name: "p", Host: "h", Port: 5432, User: "u", Password: "secret-pw", Database: "d", SSLMode: "disable"}
	_, err := store.PeerCreate(ctx, p)
	require.NoError(t, err)

	check := func(err error, kind error, constraint string) {
		t.Helper()
		require.ErrorIs(t, err, kind)
		var ce *db.ConstraintError
		require.True(t, errors.As(err, &ce), "%v", err)
		require.Equal(t, constraint, ce.Constraint)
		require.NotContains(t, err.Error(), "secret-pw")
		require.False(t, errors.Is(err, db.ErrUnavailable))
	}
	_, err = store.PeerCreate(ctx, p)
	check(err, db.ErrConflict, db.ConstraintPeerName)
	require.True(t, db.Violates(err, db.ConstraintPeerName))

	bad := p
	bad.Name, bad.Port = "q", 0
	_, err = store.PeerCreate(ctx, bad)
	check(err, db.ErrInvalid, "peers_port_check")
	require.False(t, errors.Is(err, db.ErrConflict))

	_, err = store.UserCreate(ctx, "x", "hash", "superadmin")
	check(err, db.ErrInvalid, "users_role_check")

	err = pgx.BeginFunc(ctx, store.Pool(), func(tx pgx.Tx) error {
		_, err := store.With(tx).MirrorCreate(ctx, db.MirrorCreateParams{Name: "m", SourcePeerID: 999, DestinationPeerID: 998,
			SnapshotNumRowsPerPartition: 1, SnapshotMaxParallelWorkers: 1, SnapshotNumTablesInParallel: 1, CDCSyncIntervalSeconds: 1,
			CDCBatchSize: 1, PublicationName: "pub", ReplicationSlotName: "slot",
			Tables: []change.Mapping{{Source: change.TableName{Schema: "s", Name: "t"}, Destination: change.TableName{Schema: "s", Name: "t"}}}})
		return err
	})
	check(db.Translate(err), db.ErrConflict, "mirrors_source_peer_id_fkey")
}

// TestUnavailable stops a catalog cluster: the store's errors then match
// ErrUnavailable (and nothing else), and stop matching once it is back.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtest.NewCluster(t, false)
	pool := pgtest.Pool(t, pgtest.NewDatabase(t, c))
	require.NoError(t, db.Migrate(ctx, pool, discard()))
	store := db.New(pool, pgtest.Keyring(t))
	require.NoError(t, store.Ping(ctx))

	require.NoError(t, c.Stop(ctx))
	err := store.Ping(ctx)
	require.ErrorIs(t, err, db.ErrUnavailable)
	_, err = store.UserGetByUsername(ctx, "admin")
	require.ErrorIs(t, err, db.ErrUnavailable)
	require.False(t, errors.Is(err, db.ErrNotFound))
	_, err = pool.Begin(ctx)
	require.ErrorIs(t, db.Translate(err), db.ErrUnavailable, "an untranslated driver error: %v", err)

	require.NoError(t, c.Restart(ctx))
	require.Eventually(t, func() bool { return store.Ping(ctx) == nil }, time.Minute, 100*time.Millisecond)
	_, err = store.UserGetByUsername(ctx, "nobody")
	require.ErrorIs(t, err, db.ErrNotFound)
}
