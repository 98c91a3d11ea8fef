package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/ddl"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// MirrorCleanupWorker finishes a deletion. The API has already hidden the
// mirror; this job waits for the mirror's worker to let go of it, drops the
// replication slot and publication that the mirror created (never ones that
// existed before it) and its replication origins on the destination, then
// deletes the catalog row. When the source cannot
// be reached, the job fails and River retries it with backoff until the drop
// succeeds, so no orphan slot keeps WAL on the source.
type MirrorCleanupWorker struct {
	river.WorkerDefaults[MirrorCleanupArgs]
	cfg Config
}

// Timeout bounds one cleanup attempt.
func (w *MirrorCleanupWorker) Timeout(*river.Job[MirrorCleanupArgs]) time.Duration {
	return 2 * time.Minute
}

// NextRetry retries every 5 s at first, then at most every 5 minutes.
func (w *MirrorCleanupWorker) NextRetry(job *river.Job[MirrorCleanupArgs]) time.Time {
	return time.Now().Add(Backoff(job.Attempt))
}

// originAttempts is how many cleanup attempts try to reach the destination
// to drop the mirror's replication origins before the deletion goes on
// without (an origin left behind only takes one of the destination's
// replication state entries; the log names it).
const originAttempts = 5

// dropOrigins drops the replication origins that marked the mirror's writes
// on its destination (engine/origin). A destination that cannot be reached
// fails the attempt, up to originAttempts; a user that may not use origins
// never had any.
func (w *MirrorCleanupWorker) dropOrigins(ctx context.Context, m db.Mirror, attempt int, logger *slog.Logger) error {
	dst, err := w.cfg.Store.PeerGetByID(ctx, m.DestinationPeerID)
	if err != nil {
		return fmt.Errorf("load destination peer of deleted mirror %s: %w", m.Name, err)
	}
	conn, err := connectPeer(ctx, "destination", dst)
	if err == nil {
		defer closeConn(conn)
		err = origin.DropMirror(ctx, conn, m.UID)
		if errors.Is(err, origin.ErrNotPermitted) {
			return nil
		}
	}
	if err == nil {
		logger.Info("dropped the mirror's replication origins on the destination", "origin", origin.Name(m.UID))
		return nil
	}
	if attempt < originAttempts {
		logger.Warn("cannot drop the mirror's replication origins on the destination; will retry", "error", err, "attempt", attempt)
		return err
	}
	logger.Warn("giving up dropping the mirror's replication origins on the destination; drop them there with SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname LIKE '"+origin.Name(m.UID)+"%'",
		"error", err, "attempt", attempt)
	return nil
}

// Work drops the mirror's slot and publication and deletes its row.
func (w *MirrorCleanupWorker) Work(ctx context.Context, job *river.Job[MirrorCleanupArgs]) error {
	store := w.cfg.Store
	m, err := store.MirrorGetByID(ctx, job.Args.MirrorID)
	if errors.Is(err, db.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if m.DeletedAt == nil {
		return nil
	}
	logger := w.cfg.Logger.With("mirror", m.Name, "mirror_id", m.ID)
	// The run job sees the deletion through NOTIFY and stops; wait for it.
	lock, err := store.MirrorLockWait(ctx, m.ID, time.Minute)
	if err != nil {
		return fmt.Errorf("wait for the worker of mirror %s to stop: %w", m.Name, err)
	}
	defer lock.Release()

	if m.CreatedSlot || m.CreatedPublication {
		src, err := store.PeerGetByID(ctx, m.SourcePeerID)
		if err != nil {
			return fmt.Errorf("load source peer of deleted mirror %s: %w", m.Name, err)
		}
		conn, err := connectPeer(ctx, "source", src)
		if err != nil {
			logger.Warn("cannot reach the source to drop the replication slot; will retry", "error", err, "attempt", job.Attempt)
			return err
		}
		defer closeConn(conn)
		if m.CreatedSlot {
			if err := capture.DropSlot(ctx, conn, m.ReplicationSlotName); err != nil {
				return fmt.Errorf("drop replication slot %s: %w", m.ReplicationSlotName, err)
			}
			logger.Info("dropped replication slot", "slot", m.ReplicationSlotName)
		}
		if m.CreatedPublication {
			if err := capture.DropPublication(ctx, conn, m.PublicationName); err != nil {
				return fmt.Errorf("drop publication %s: %w", m.PublicationName, err)
			}
			logger.Info("dropped publication", "publication", m.PublicationName)
		}
	}
	if m.CaptureDDL {
		if err := w.removeDDLTrigger(ctx, m, logger); err != nil {
			return err
		}
	}
	if err := w.dropOrigins(ctx, m, job.Attempt, logger); err != nil {
		return err
	}
	if err := store.MirrorPurge(ctx, m.ID); err != nil {
		return err
	}
	logger.Info("mirror deleted")
	return nil
}

// removeDDLTrigger drops the event trigger that captures DDL on the
// mirror's source database (engine/ddl) when no other live mirror of that
// database captures DDL: one of the same peer or host, port and database, or
// one whose replication slot is in that database (a peer naming the database
// differently). A source that cannot be reached fails the attempt.
func (w *MirrorCleanupWorker) removeDDLTrigger(ctx context.Context, m db.Mirror, logger *slog.Logger) error {
	others, err := w.cfg.Store.MirrorOthersCaptureDDL(ctx, m.ID)
	if err != nil {
		return err
	}
	if others {
		logger.Info("the DDL capture trigger on the source stays: other mirrors of the source database use it")
		return nil
	}
	src, err := w.cfg.Store.PeerGetByID(ctx, m.SourcePeerID)
	if err != nil {
		return fmt.Errorf("load source peer of deleted mirror %s: %w", m.Name, err)
	}
	conn, err := connectPeer(ctx, "source", src)
	if err != nil {
		logger.Warn("cannot reach the source to remove the DDL capture trigger; will retry", "error", err)
		return err
	}
	defer closeConn(conn)
	slots, err := w.cfg.Store.MirrorOthersCaptureDDLSlots(ctx, m.ID)
	if err != nil {
		return err
	}
	shared, err := ddl.SlotsInDatabase(ctx, conn, slots)
	if err != nil {
		return fmt.Errorf("remove the DDL capture trigger from the source of mirror %s: %w", m.Name, err)
	}
	if len(shared) > 0 {
		logger.Info("the DDL capture trigger on the source stays: other mirrors read the source database through other peers", "slots", shared)
		return nil
	}
	if err := ddl.Remove(ctx, conn); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			logger.Warn("the source peer user may not remove the DDL capture trigger; a superuser can remove it with DROP EVENT TRIGGER "+
				ddl.CommandEndTrigger+"; DROP EVENT TRIGGER "+ddl.SQLDropTrigger, "error", err)
			return nil
		}
		return fmt.Errorf("remove the DDL capture trigger from the source of mirror %s: %w", m.Name, err)
	}
	logger.Info("removed the DDL capture trigger from the source", "event_triggers", []string{ddl.CommandEndTrigger, ddl.SQLDropTrigger})
	return nil
}
