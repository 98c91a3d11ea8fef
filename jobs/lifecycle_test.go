package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
)

// itemsTable creates public.items with n rows on the database.
func itemsTable(t *testing.T, dbURL string, n int) {
	t.Helper()
	exec(t, dbURL, `CREATE TABLE public.items (id bigint PRIMARY KEY, v text NOT NULL)`)
	exec(t, dbURL, `INSERT INTO public.items SELECT g, 'row ' || g FROM generate_series(1, $1::int) g`, n)
}

// insertItem inserts row id into public.items on the database.
func insertItem(t *testing.T, dbURL string, id int) {
	t.Helper()
	exec(t, dbURL, `INSERT INTO public.items VALUES ($1::bigint, 'row ' || $1::bigint)`, id)
}

// streaming starts a replica with a mirror of public.items (10 rows) and
// waits until the mirror copied them and streams.
func streaming(t *testing.T, e *lcEnv, name string, tweak func(*Config)) (*replica, db.Mirror) {
	t.Helper()
	itemsTable(t, e.srcURL, 10)
	r := e.startReplica(name, tweak)
	m := e.createMirror("m", []string{"items"})
	waitRows(t, e.dstURL, "items", 10, 60*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	insertItem(t, e.srcURL, 11)
	waitRows(t, e.dstURL, "items", 11, 30*time.Second)
	return r, m
}

// Pause stops the run at a batch boundary (nothing more reaches the
// destination, the slot stays), resume starts a new run that carries on
// from where the paused one stopped, and delete stops the run and drops
// the slot and publication the mirror created, then the mirror itself.
func TestRunPauseResumeDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, m := streaming(t, e, "a", nil)

	e.pause(m.ID)
	waitFor(t, "the paused run to let go of the mirror", 30*time.Second, func() bool { return e.lockOwner(m.ID) == "" })
	require.Equal(t, db.StatusPaused, e.mirror(m.ID).Status)
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the pause")
	insertItem(t, e.srcURL, 12)
	holds(t, "a paused mirror applies nothing", 2*time.Second, func() bool { return rows(t, e.dstURL, "items") == 11 })
	require.True(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "a paused mirror keeps its slot")

	e.resume(m.ID)
	waitRows(t, e.dstURL, "items", 12, 30*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
	require.Equal(t, lockApp("a"), e.lockOwner(m.ID), "the resumed mirror's run")
	insertItem(t, e.srcURL, 13)
	waitRows(t, e.dstURL, "items", 13, 30*time.Second)

	e.deleteMirror(m.ID)
	waitFor(t, "the deleted mirror to be gone from the catalog", 60*time.Second, func() bool {
		_, err := e.store.MirrorGetByID(context.Background(), m.ID)
		return errors.Is(err, db.ErrNotFound)
	})
	require.False(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "the deleted mirror's slot")
	require.False(t, publicationExists(t, e.srcURL, m.PublicationName), "the deleted mirror's publication")
	require.Equal(t, 0, r.locks.Running(), "runs of the replica after the delete")
	insertItem(t, e.srcURL, 14)
	holds(t, "a deleted mirror applies nothing", time.Second, func() bool { return rows(t, e.dstURL, "items") == 13 })
}
