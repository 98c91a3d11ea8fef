package jobs

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
)

// cutoverFailSteps are the cut-over steps a failure is injected into, in
// their order: every step but drop_slot (after complete: its failure is
// only logged). complete fails as its catalog transaction cannot begin;
// the others once they did their work.
var cutoverFailSteps = []string{stepCheck, stepReadOnly, stepApply, stepQuiet, stepSequences, stepConstraints,
	stepForeignKeys, stepVerify, stepChecksums, stepPrepareReverse, stepWritable, stepComplete}

// A cut-over that fails at any of its steps, after the step did its work,
// is undone and leaves the mirror as it was: the cut-over record says
// failed, names the step and its error, and lists no step after it; the
// source tables take writes again; the foreign keys the cut-over created
// on the destination, the reverse mirror's slot and publication there are
// dropped, and no reverse mirror exists; destination tables that were
// read-only before are read-only again; the mirror goes on replicating,
// and a row written after the undo arrives. One mirror goes through a
// failed cut-over per step; requested once more, the cut-over completes:
// the source is read-only, the reverse mirror exists with its slot.
func TestCutoverStepFailuresUndone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	itemsTable(t, e.srcURL, 10)
	// A foreign key between two mirrored tables: the cut-over creates it
	// on the destination (create_foreign_keys).
	exec(t, e.srcURL, `CREATE TABLE public.notes (id bigint PRIMARY KEY, item_id bigint NOT NULL REFERENCES public.items (id))`)
	exec(t, e.srcURL, `INSERT INTO public.notes SELECT g, g FROM generate_series(1, 5) g`)
	r := e.startReplica("a", nil)
	m := e.createMirror("m", []string{"items", "notes"})
	waitRows(t, e.dstURL, "items", 10, 60*time.Second)
	waitRows(t, e.dstURL, "notes", 5, 30*time.Second)
	e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)

	checksums, noChecksums := true, false
	opts := db.CutoverOptions{LockSource: true, TimeoutSeconds: 60, Verify: &noChecksums,
		ReverseMirrorName: "m_back", ReversePublicationName: "pub_" + e.uniq + "_back", ReverseReplicationSlotName: "slot_" + e.uniq + "_back"}
	dstTables := []change.TableName{{Schema: "public", Name: "items"}, {Schema: "public", Name: "notes"}}
	next := 11
	for i, step := range cutoverFailSteps {
		if step == stepWritable {
			// The destination tables refuse writes, as after an earlier
			// cut-over the other way: this cut-over makes them writable
			// (make_destination_writable), and its undo read-only again.
			withConn(t, e.dstURL, func(conn *pgx.Conn) {
				require.NoError(t, cutover.MakeReadOnly(context.Background(), conn, dstTables, "an earlier cut-over", 10*time.Second))
			})
		}
		// Checksums (a step of its own) only where that step fails: the
		// comparison reads every row.
		opts.Verify = &noChecksums
		if step == stepChecksums {
			opts.Verify = &checksums
		}
		started := time.Now()
		injected, wantErr := "step "+step, errStepInjected.Error()
		if step == stepComplete {
			injected, wantErr = "BeginTx", errInjected.Error()
			r.faults.failOnce("BeginTx")
		} else {
			r.faults.failStepOnce(step)
		}
		e.requestCutover(m.ID, opts)
		c := e.waitCutover(m.ID, 60*time.Second)
		failed := time.Since(started)
		require.Equal(t, 1, r.faults.injected(injected), "the failure injected at step %s", step)
		require.Equal(t, db.CutoverFailed, c.State, "state of the cut-over failed at step %s", step)
		require.Contains(t, c.Error, "Cut-over failed at step "+step+": ", "error of the cut-over failed at step %s", step)
		require.Contains(t, c.Error, wantErr, "error of the cut-over failed at step %s", step)
		require.NotNil(t, c.FinishedAt, "finished_at of the cut-over failed at step %s", step)
		require.NotEmpty(t, c.Steps)
		last := c.Steps[len(c.Steps)-1]
		require.Equal(t, step, last.Name, "the last step recorded of the cut-over failed at step %s: %v", step, c.Steps)
		require.Equal(t, db.StepFailed, last.State, "step %s", step)
		for _, s := range c.Steps[:len(c.Steps)-1] {
			require.Equal(t, db.StepDone, s.State, "step %s before the failed step %s", s.Name, step)
		}
		require.Equal(t, int64(i+1), e.logCount(m.ID, "Cut-over failed"), "log entries after the failure at step %s", step)

		// Undone on the peers.
		require.NoError(t, tryExec(e.srcURL, `INSERT INTO public.items VALUES ($1::bigint, 'after the failed cut-over')`, next),
			"the source table takes writes after the failure at step %s", step)
		require.NoError(t, tryExec(e.srcURL, `INSERT INTO public.notes VALUES ($1::bigint, $1::bigint)`, next),
			"the source table takes writes after the failure at step %s", step)
		require.Zero(t, queryInt(t, e.dstURL, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid = 'public.notes'::regclass`),
			"foreign keys on the destination after the failure at step %s", step)
		require.False(t, slotExists(t, e.dstURL, opts.ReverseReplicationSlotName), "the reverse slot after the failure at step %s", step)
		require.False(t, publicationExists(t, e.dstURL, opts.ReversePublicationName), "the reverse publication after the failure at step %s", step)
		_, err := e.store.MirrorGetByName(context.Background(), opts.ReverseMirrorName)
		require.ErrorIs(t, err, db.ErrNotFound, "the reverse mirror after the failure at step %s", step)
		if step == stepWritable || step == stepComplete {
			for _, tbl := range dstTables {
				withConn(t, e.dstURL, func(conn *pgx.Conn) {
					ro, err := cutover.IsReadOnly(context.Background(), conn, tbl)
					require.NoError(t, err)
					require.True(t, ro, "destination table %s is read-only again after the failure at step %s", tbl, step)
				})
			}
		}

		// The mirror replicates as before: the rows written after the
		// undo arrive, once.
		waitRows(t, e.dstURL, "items", int64(next), 30*time.Second)
		waitRows(t, e.dstURL, "notes", int64(next-5), 30*time.Second)
		got := e.waitStatus(m.ID, db.StatusRunning, 30*time.Second)
		require.Nil(t, got.PendingAction, "pending action after the failure at step %s", step)
		require.Equal(t, int64(next), queryInt(t, e.dstURL, `SELECT count(DISTINCT id) FROM public.items`))
		t.Logf("step %s: failed after %s, streaming again after %s", step, failed.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
		next++
	}
	require.True(t, slotExists(t, e.srcURL, m.ReplicationSlotName), "the mirror's slot")

	// Requested again, it completes: the source is read-only, the reverse
	// mirror exists with its slot, and the destination takes writes.
	e.requestCutover(m.ID, opts)
	c := e.waitCutover(m.ID, 60*time.Second)
	require.Equal(t, db.CutoverCompleted, c.State, "cut-over state, error %q", c.Error)
	back, err := e.store.MirrorGetByName(context.Background(), opts.ReverseMirrorName)
	require.NoError(t, err)
	e.mu.Lock()
	e.uids = append(e.uids, back.UID)
	e.mu.Unlock()
	require.Equal(t, db.StatusCompleted, e.mirror(m.ID).Status)
	require.True(t, slotExists(t, e.dstURL, opts.ReverseReplicationSlotName), "the reverse slot on the destination")
	require.Error(t, tryExec(e.srcURL, `INSERT INTO public.items VALUES (100000, 'after the cut-over')`), "the source table is read-only")
	require.NoError(t, tryExec(e.dstURL, `INSERT INTO public.items VALUES (100000, 'after the cut-over')`), "the destination table takes writes")
}

// withConn runs fn on a connection to the database.
func withConn(t *testing.T, dbURL string, fn func(conn *pgx.Conn)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err, fmt.Sprintf("connect to %s", dbURL))
	defer conn.Close(ctx)
	fn(conn)
}
