package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/change"
)

// Batches commit on the destination with synchronous_commit = off, as
// PostgreSQL's own apply worker does: the commit returns before its WAL is
// flushed, so the apply loop never waits for a disk flush. A commit that is
// not yet flushed can be lost in a destination crash, so its source position
// is confirmed to the source only once the destination's WAL is flushed past
// the commit (pg_current_wal_flush_lsn() >= the WAL insert position read
// right after the commit). A commit lost in a crash was never confirmed: the
// source sends it again, and the applied position on the destination (lost
// with it) does not skip it.
//
// The flush watcher runs in its own goroutine with its own destination
// connection, off the apply path. When a commit is not yet flushed it polls
// the flush position for a short while (the WAL writer flushes on its own
// every wal_writer_delay, or as WAL pages fill under load), then forces a
// flush with a tiny synchronous commit, which flushes all WAL before it
// (apply.FlushWAL).

const (
	// flushPoll is how often the watcher reads the flush position while it
	// waits for the WAL writer.
	flushPoll = 5 * time.Millisecond
	// flushPatience is how long the watcher waits for the WAL writer before
	// it forces a flush itself.
	flushPatience = 20 * time.Millisecond
)

// pendingConfirm is a source position that may be confirmed once the
// destination's WAL is flushed to dest.
type pendingConfirm struct {
	dest change.LSN // destination WAL position that must be flushed
	src  change.LSN // source end LSN to confirm then
}

// flushWatcher reports how far the destination's WAL is flushed, forcing a
// flush when the WAL writer is slow to do it.
type flushWatcher struct {
	conn    *pgx.Conn
	mirror  string          // the mirror's uid, for apply.FlushWAL
	targets chan change.LSN // latest destination position wanted flushed (capacity 1)
	flushed chan change.LSN // latest flushed position seen (capacity 1)
	errs    chan error      // the watcher's failure (capacity 1)
	cancel  context.CancelFunc
	done    chan struct{}
}

// startFlushWatcher starts a watcher on conn, which it owns until stop.
func startFlushWatcher(ctx context.Context, conn *pgx.Conn, mirrorUID string) *flushWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &flushWatcher{
		conn:    conn,
		mirror:  mirrorUID,
		targets: make(chan change.LSN, 1),
		flushed: make(chan change.LSN, 1),
		errs:    make(chan error, 1),
		cancel:  cancel,
		done:    make(chan struct{}),
	}
	go func() {
		defer close(w.done)
		if err := w.run(ctx); err != nil && ctx.Err() == nil {
			w.errs <- err
		}
	}()
	return w
}

// want asks the watcher to report once the destination WAL is flushed to
// at least lsn. It never blocks: a newer target replaces an older one.
func (w *flushWatcher) want(lsn change.LSN) {
	for {
		select {
		case w.targets <- lsn:
			return
		default:
		}
		select {
		case old := <-w.targets:
			lsn = max(lsn, old)
		default:
		}
	}
}

// stop ends the watcher's goroutine and waits for it; the connection stays
// open for the caller (see apply.FlushWAL).
func (w *flushWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *flushWatcher) run(ctx context.Context) error {
	for {
		var target change.LSN
		select {
		case <-ctx.Done():
			return nil
		case target = <-w.targets:
		}
		flushed, err := w.wait(ctx, target)
		if err != nil {
			return err
		}
		// Publish the latest position, replacing one not yet read.
		select {
		case <-w.flushed:
		default:
		}
		w.flushed <- flushed
	}
}

// wait returns once the destination WAL is flushed to target: it polls for
// flushPatience, then forces a flush.
func (w *flushWatcher) wait(ctx context.Context, target change.LSN) (change.LSN, error) {
	giveUp := time.Now().Add(flushPatience)
	for {
		flushed, err := flushPosition(ctx, w.conn)
		if err != nil || flushed >= target {
			return flushed, err
		}
		if time.Now().After(giveUp) {
			return apply.FlushWAL(ctx, w.conn, w.mirror)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(flushPoll):
		}
	}
}

// flushPosition reads the destination's WAL flush position.
func flushPosition(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var text string
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&text); err != nil {
		return 0, fmt.Errorf("read destination WAL flush position: %w", err)
	}
	return change.ParseLSN(text)
}
