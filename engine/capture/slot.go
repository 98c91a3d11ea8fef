package capture

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/session"
)

var (
	// ErrSlotExists is returned by CreateSlot when the slot already exists.
	ErrSlotExists = errors.New("replication slot already exists")
	// ErrSlotMissing is returned by StartStream when the slot does not exist.
	ErrSlotMissing = errors.New("replication slot does not exist")
	// ErrSlotInUse is returned by StartStream when another process already
	// consumes the slot (SQLSTATE 55006).
	ErrSlotInUse = errors.New("replication slot is in use by another consumer")
)

// SlotInfo is what CreateSlot returns: where the slot's stream starts and,
// when a snapshot was exported, its name (valid until the replication
// connection runs its next command).
type SlotInfo struct {
	ConsistentPoint change.LSN
	SnapshotName    string
}

// ConnectReplication opens a replication connection (replication=database)
// to the database that source configures (a copy; source is not changed),
// with pgmirror's session settings (engine/session), so that values in the
// stream have one unambiguous text form. The connection reads its socket
// through newStreamReader.
func ConnectReplication(ctx context.Context, source *pgconn.Config) (*pgconn.PgConn, error) {
	cfg := source.Copy()
	var reader *gatheringReader
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		var buffered io.Reader
		buffered, reader = newStreamReader(r, w)
		return pgproto3.NewFrontend(buffered, w)
	}
	conn, err := session.ConnectReplication(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open replication connection to %s:%d: %w", source.Host, source.Port, err)
	}
	conn.CustomData()[streamReaderKey] = reader // for StartStream
	return conn, nil
}

// CreateSlot creates a pgoutput logical replication slot on a replication
// connection. With exportSnapshot the slot exports a snapshot that sees the
// data exactly as of the slot's consistent point. An existing slot gives an
// error that matches ErrSlotExists.
func CreateSlot(ctx context.Context, repl *pgconn.PgConn, name string, exportSnapshot bool) (SlotInfo, error) {
	return createSlot(ctx, repl, name, exportSnapshot, false)
}

// CreateTemporarySlot creates a temporary pgoutput slot that exports a
// snapshot: the source drops it when repl closes. Its consistent point and
// snapshot let one table be copied as of a known position while the
// mirror's own slot keeps streaming.
func CreateTemporarySlot(ctx context.Context, repl *pgconn.PgConn, name string) (SlotInfo, error) {
	return createSlot(ctx, repl, name, true, true)
}

func createSlot(ctx context.Context, repl *pgconn.PgConn, name string, exportSnapshot, temporary bool) (SlotInfo, error) {
	if err := ValidateName(name); err != nil {
		return SlotInfo{}, fmt.Errorf("create slot: %w", err)
	}
	action := "NOEXPORT_SNAPSHOT"
	if exportSnapshot {
		action = "EXPORT_SNAPSHOT"
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, name, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: action, Mode: pglogrepl.LogicalReplication, Temporary: temporary})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" {
			return SlotInfo{}, fmt.Errorf("create slot %s: %w", name, ErrSlotExists)
		}
		return SlotInfo{}, fmt.Errorf("create slot %s: %w", name, err)
	}
	lsn, err := change.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return SlotInfo{}, fmt.Errorf("create slot %s: consistent point: %w", name, err)
	}
	return SlotInfo{ConsistentPoint: lsn, SnapshotName: res.SnapshotName}, nil
}

// SlotStatus is the state of a replication slot as pg_replication_slots
// shows it.
type SlotStatus struct {
	// Exists is false when there is no slot of that name (other fields zero).
	Exists bool
	// Active reports whether a consumer is attached.
	Active bool
	// WALStatus is reserved, extended, unreserved or lost ("lost" means the
	// slot is invalidated and unusable); "" on PostgreSQL 12, which has no
	// wal_status (and never invalidates a slot).
	WALStatus string
	// ConfirmedFlush is the position the consumer confirmed last.
	ConfirmedFlush change.LSN
	// InvalidationReason is pg_replication_slots.invalidation_reason
	// (PostgreSQL 17 and later; "" when valid or unknown), and Conflicting
	// its conflicting column (16 and later): an invalidated slot.
	InvalidationReason string
	Conflicting        bool
}

// Invalidated reports whether the slot can no longer be streamed from: the
// source removed WAL it needed (wal_status lost) or invalidated it for
// another reason (a recovery conflict, an idle timeout on newer servers).
func (st SlotStatus) Invalidated() bool {
	return st.Exists && (st.WALStatus == "lost" || st.InvalidationReason != "" || st.Conflicting)
}

// SlotState reports the state of slot name.
func SlotState(ctx context.Context, conn *pgx.Conn, name string) (SlotStatus, error) {
	var (
		st        SlotStatus
		confirmed string
	)
	// wal_status (13+), invalidation_reason and conflicting exist on newer servers only:
	// read through to_jsonb so that one query serves every version.
	err := conn.QueryRow(ctx, `SELECT s.active, coalesce(pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'wal_status', ''), coalesce(s.confirmed_flush_lsn::text, '0/0'),
			coalesce(pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'invalidation_reason', ''),
			coalesce((pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'conflicting')::boolean, false)
		FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1`, name).Scan(&st.Active, &st.WALStatus, &confirmed, &st.InvalidationReason, &st.Conflicting)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotStatus{}, nil
	}
	if err != nil {
		return SlotStatus{}, fmt.Errorf("read state of slot %s: %w", name, err)
	}
	st.Exists = true
	if st.ConfirmedFlush, err = change.ParseLSN(confirmed); err != nil {
		return SlotStatus{}, fmt.Errorf("read state of slot %s: %w", name, err)
	}
	return st, nil
}

// DropSlot drops slot name; it is not an error when it does not exist. A
// consumer still attached after a short wait is terminated first.
func DropSlot(ctx context.Context, conn *pgx.Conn, name string) error {
	deadline := time.Now().Add(3 * time.Second)
	terminated := false
	for {
		var pid *int32
		err := conn.QueryRow(ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&pid)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("drop slot %s: look up: %w", name, err)
		}
		if pid == nil {
			_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name)
			var pgErr *pgconn.PgError
			switch {
			case err == nil:
				return nil
			case errors.As(err, &pgErr) && pgErr.Code == "42704": // gone meanwhile
				return nil
			case errors.As(err, &pgErr) && pgErr.Code == "55006": // a consumer attached meanwhile
			default:
				return fmt.Errorf("drop slot %s: %w", name, err)
			}
		} else if !terminated && time.Now().After(deadline) {
			if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1)`, *pid); err != nil {
				return fmt.Errorf("drop slot %s: terminate consumer %d: %w", name, *pid, err)
			}
			terminated = true
			deadline = time.Now().Add(10 * time.Second)
		} else if terminated && time.Now().After(deadline) {
			return fmt.Errorf("drop slot %s: consumer %d still attached after termination", name, *pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop slot %s: %w", name, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
