package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// startHolder runs a lock holder named name on the store's catalog until
// the test ends.
func startHolder(t *testing.T, store *db.Store, name string) *db.LockHolder {
	t.Helper()
	h := db.NewLockHolder(name, 10, store.Pool().Config().ConnConfig, discard())
	ctx, cancel := context.WithCancel(context.Background())
	go h.Run(ctx)
	t.Cleanup(func() {
		cancel()
		<-h.Done()
	})
	return h
}

// tryLock takes a mirror's lock, waiting for the holder's connection.
func tryLock(t *testing.T, h *db.LockHolder, id int64) *db.MirrorLock {
	t.Helper()
	var lock *db.MirrorLock
	require.Eventually(t, func() bool {
		var err error
		lock, err = h.TryLock(context.Background(), id)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	return lock
}

// TestLockHolder: one connection holds the locks of many mirrors; a mirror
// is held by one holder at a time (and once per holder); the holder shows
// as the mirrors' worker and as a live replica; control notifications reach
// the subscribed mirror; when the connection dies every lock is lost at
// once and the holder connects again.
func TestLockHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := newStore(t)
	a := startHolder(t, store, "replica-a")
	b := startHolder(t, store, "replica-b")
	m1 := createMirror(t, store, "m1", mapping("a", "a2"))
	m2 := createMirror(t, store, "m2", mapping("b", "b2"))

	l1 := tryLock(t, a, m1.ID)
	require.NotNil(t, l1)
	l2 := tryLock(t, a, m2.ID)
	require.NotNil(t, l2)
	require.Nil(t, tryLock(t, a, m1.ID), "a second run on the same replica does not get the lock")
	require.Nil(t, tryLock(t, b, m1.ID), "another replica does not get a held lock")
	require.Equal(t, 2, a.Running())
	pooled, err := store.MirrorTryLock(ctx, m1.ID)
	require.NoError(t, err)
	require.Nil(t, pooled, "nor does a pool connection")

	workers, err := store.MirrorWorkers(ctx)
	require.NoError(t, err)
	require.Equal(t, "replica-a", workers[m1.ID].Name)
	require.Equal(t, "replica-a", workers[m2.ID].Name)
	replicas, err := store.LiveReplicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 2)

	// A control request reaches the subscribed run.
	events, unsubscribe := a.Subscribe(m1.ID)
	defer unsubscribe()
	_, err = store.Pool().Exec(ctx, `UPDATE mirrors SET desired_state = 'paused' WHERE id = $1`, m1.ID)
	require.NoError(t, err)
	select {
	case <-events:
	case <-time.After(5 * time.Second):
		t.Fatal("no control notification for the paused mirror")
	}

	// Released, the lock goes to the other replica.
	l2.Release()
	l2b := tryLock(t, b, m2.ID)
	require.NotNil(t, l2b)
	workers, err = store.MirrorWorkers(ctx)
	require.NoError(t, err)
	require.Equal(t, "replica-b", workers[m2.ID].Name)

	// The holder's connection dies: its locks are lost together.
	_, err = store.Pool().Exec(ctx, `SELECT pg_terminate_backend(lock_pid) FROM replicas WHERE name = 'replica-a'`)
	require.NoError(t, err)
	select {
	case <-l1.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not reported lost with its connection")
	}
	require.Equal(t, 0, a.Running())
	l1.Release() // a lost lock's release does nothing
	// Another replica can take it now, and a holder connects again. (The
	// terminated backend sends its error before it ends and releases its
	// locks: the lock may be held a moment longer.)
	var l1b *db.MirrorLock
	require.Eventually(t, func() bool { l1b = tryLock(t, b, m1.ID); return l1b != nil }, 10*time.Second, 50*time.Millisecond)
	require.Nil(t, tryLock(t, a, m1.ID), "the reconnected holder sees the lock held")
	l1b.Release()
	require.NotNil(t, tryLock(t, a, m1.ID), "and takes it once released")

	// A replica that shuts down is no longer counted at once.
	b.Retire(ctx)
	replicas, err = store.LiveReplicas(ctx)
	require.NoError(t, err)
	require.Len(t, replicas, 1)
	require.Equal(t, "replica-a", replicas[0].Name)
	require.Equal(t, 1, replicas[0].Running)
}
