package verify

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/session"
)

// HoldControl is the verification's side of holding a mirror's CDC run at a
// source position (the run's side is a cdc.Holder). The two may be on
// different processes: pgmirror implements it through the catalog; Local
// implements both sides in memory.
type HoldControl interface {
	// Arm asks the run to wait, at any transaction committing at or after
	// floor, until the exact position is known, and returns once the run
	// has taken the request in.
	Arm(ctx context.Context, floor change.LSN) error
	// HoldAt tells the run the exact position.
	HoldAt(ctx context.Context, at change.LSN) error
	// WaitHeld returns once the run is held there, with its applied
	// position.
	WaitHeld(ctx context.Context) (applied change.LSN, err error)
	// Release lets the run go on (also when the verification gave up).
	Release(ctx context.Context) error
}

// ErrHoldUnsupported: holding at a source position needs a source whose
// stream passes the marker on (pgversion.Server.Markers), or a supported
// source at all.
var ErrHoldUnsupported = errors.New("verification needs PostgreSQL 12 or later on the source")

// Snapshots are a source and a destination snapshot at one source position.
// They stay importable until Close.
type Snapshots struct {
	// LSN is the source position: the snapshots hold exactly the source
	// transactions whose commit record lies before it.
	LSN change.LSN
	// Source and Dest name the exported snapshots.
	Source, Dest string
	// Applied is the mirror's applied position inside the destination
	// snapshot (the end LSN of the last transaction applied).
	Applied change.LSN
	// TablePositions are the tables that stand at their own position inside
	// the destination snapshot (see engine/positions).
	TablePositions map[change.TableName]change.LSN

	repl *pgconn.PgConn
	dst  *pgx.Conn
	tx   pgx.Tx
	once sync.Once
}

// Close ends both snapshots (the temporary slot goes with its connection).
func (s *Snapshots) Close() {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s.tx != nil {
			_ = s.tx.Rollback(ctx)
		}
		if s.dst != nil {
			_ = s.dst.Close(ctx)
		}
		if s.repl != nil {
			_ = s.repl.Close(ctx)
		}
	})
}

// SnapshotConfig configures OpenSnapshots.
type SnapshotConfig struct {
	// Source and Dest configure the connections.
	Source, Dest *pgx.ConnConfig
	// MirrorUID identifies the mirror's positions on the destination.
	MirrorUID string
	// SlotName names the temporary slot (letters, digits, underscores).
	SlotName string
	// Note is written into the marker message on the source.
	Note string
	// Tables are the mirror's source tables (for their own positions).
	Tables []change.TableName
	// WhileHeld, when set, runs while the mirror is held at the position,
	// with the snapshots open (Repair).
	WhileHeld func(ctx context.Context, s *Snapshots) error
	// Waiting, when set, is called once when transactions open on the
	// source make OpenSnapshots wait before it holds the mirror (see
	// waitOpenTransactions), with the oldest one's id.
	Waiting func(ctx context.Context, oldestXid int64)
}

// OpenSnapshots obtains a source and a destination snapshot at one source
// position while the mirror's CDC run goes on (docs/consistency.md):
//
//  0. wait until every transaction open on the source cluster has ended
//     (waitOpenTransactions): the temporary slot of step 2 cannot be
//     created before, and the mirror is not held meanwhile;
//  1. arm the run's hold at the source's current WAL position W: from now
//     on it applies no transaction committing at or after W before it knows
//     the exact position;
//  2. create a temporary logical slot with an exported snapshot: its
//     consistent point X is at or after W, and every transaction the run
//     applied so far committed before X;
//  3. write a marker message on the source (a transaction at or after X
//     always comes through the mirror's slot) and tell the run X;
//  4. the run applies every transaction committing before X, commits, and
//     holds at the first one at or after X;
//  5. open a REPEATABLE READ transaction on the destination, export its
//     snapshot, and release the run.
func OpenSnapshots(ctx context.Context, cfg SnapshotConfig, hc HoldControl) (_ *Snapshots, err error) {
	s := &Snapshots{}
	released := false
	defer func() {
		if !released {
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = hc.Release(rctx)
			cancel()
		}
		if err != nil {
			s.Close()
		}
	}()
	src, err := session.Connect(ctx, cfg.Source)
	if err != nil {
		return nil, fmt.Errorf("connect to the source: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = src.Close(cctx)
		cancel()
	}()
	if _, err := holdFloor(ctx, src); err != nil {
		return nil, err
	}
	if err := waitOpenTransactions(ctx, src, cfg.Waiting); err != nil {
		return nil, err
	}
	floor, err := holdFloor(ctx, src)
	if err != nil {
		return nil, err
	}
	// Connect before arming: the run waits as little as possible.
	if s.dst, err = session.Connect(ctx, cfg.Dest); err != nil {
		return nil, fmt.Errorf("connect to the destination: %w", err)
	}
	if s.repl, err = capture.ConnectReplication(ctx, &cfg.Source.Config); err != nil {
		return nil, fmt.Errorf("%w (a verification needs a free replication connection: max_wal_senders)", err)
	}
	if err := hc.Arm(ctx, floor); err != nil {
		return nil, fmt.Errorf("arm the mirror's hold: %w", err)
	}
	info, err := capture.CreateTemporarySlot(ctx, s.repl, cfg.SlotName)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "53400" {
			return nil, fmt.Errorf("%w (a verification needs a free replication slot for a moment: raise max_replication_slots on the source or drop an unused slot)", err)
		}
		return nil, fmt.Errorf("create the verification's temporary slot: %w", err)
	}
	s.LSN, s.Source = info.ConsistentPoint, info.SnapshotName
	if _, err := cdc.EmitMarker(ctx, src, cfg.Note); err != nil {
		return nil, err
	}
	if err := hc.HoldAt(ctx, s.LSN); err != nil {
		return nil, fmt.Errorf("tell the mirror the position: %w", err)
	}
	held, err := hc.WaitHeld(ctx)
	if err != nil {
		return nil, fmt.Errorf("wait for the mirror to hold at %s: %w", s.LSN, err)
	}
	if err := s.exportDest(ctx, cfg.MirrorUID, held); err != nil {
		return nil, err
	}
	if cfg.WhileHeld != nil {
		if err := cfg.WhileHeld(ctx, s); err != nil {
			return nil, err
		}
	}
	released = true
	if err := hc.Release(ctx); err != nil {
		return nil, fmt.Errorf("release the mirror: %w", err)
	}
	if s.TablePositions, _, err = positions.Tables(ctx, s.tx, cfg.MirrorUID, cfg.Tables); err != nil {
		return nil, fmt.Errorf("read table positions in the destination snapshot: %w", err)
	}
	return s, nil
}

// holdFloor checks that the source can take a hold (a supported version
// that writes logical messages) and returns its current WAL insert
// position: every change the hold waits for lies after it.
func holdFloor(ctx context.Context, src *pgx.Conn) (change.LSN, error) {
	var version int
	var floorText string
	if err := src.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num'::pg_catalog.text)::pg_catalog.int4, pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text`).Scan(&version, &floorText); err != nil {
		return 0, fmt.Errorf("read the source's WAL position: %w", err)
	}
	if srv := pgversion.Of(version); !srv.Supported() || !srv.Markers() {
		return 0, ErrHoldUnsupported
	}
	return change.ParseLSN(floorText)
}

// exportDest opens the destination's read-only snapshot while the mirror
// holds and checks that it stands exactly at the position held: the
// applied position it shows must be held.
func (s *Snapshots) exportDest(ctx context.Context, mirrorUID string, held change.LSN) error {
	var err error
	s.tx, err = s.dst.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin the destination snapshot: %w", err)
	}
	if err := s.tx.QueryRow(ctx, `SELECT pg_catalog.pg_export_snapshot()`).Scan(&s.Dest); err != nil {
		return fmt.Errorf("export the destination snapshot: %w", err)
	}
	applied, _, found, err := positions.Applied(ctx, s.tx, mirrorUID)
	if err != nil {
		return fmt.Errorf("read the applied position in the destination snapshot: %w", err)
	}
	if !found || applied != held {
		return fmt.Errorf("the destination snapshot stands at %s, not at the position the mirror held at (%s; the hold ended too early): %w", applied, held, ErrHoldTimeout)
	}
	s.Applied = applied
	return nil
}

// Comparable splits tables into those that stand at the snapshots' position
// and those that do not, with the reason. A table copied on its own at a
// position p holds every transaction committed before p; from p on, the run
// applied its changes like any other table's, up to the hold. So at or
// before the verification position it stands exactly there too; after it,
// it holds later transactions than the source snapshot and is skipped.
func (s *Snapshots) Comparable(tables []change.Mapping) (compare []change.Mapping, skipped map[change.TableName]string) {
	skipped = map[change.TableName]string{}
	for _, m := range tables {
		if pos, ok := s.TablePositions[m.Source]; ok && pos > s.LSN {
			skipped[m.Source] = fmt.Sprintf("the table was copied on its own at %s, after the verification position %s; verify again once its copy has caught up", pos, s.LSN)
			continue
		}
		compare = append(compare, m)
	}
	return compare, skipped
}

// openTransactionsPoll is how often at most waitOpenTransactions looks
// whether the transactions it waits for have ended: first after 5 ms (most
// are short), then twice as long each time up to this.
const openTransactionsPoll = 250 * time.Millisecond

// waitOpenTransactions waits until every transaction that holds a
// transaction id on the source cluster now (in any database) has ended.
// PostgreSQL creates a logical slot only once the transactions running when
// it began have ended; a verification that armed the mirror's hold first
// would hold the mirror for as long as a large transaction stays open (a
// backfill streamed to the mirror while it runs). Waiting here first, with
// the mirror streaming, leaves the slot only the transactions begun since to
// wait for. waiting is called once when there is something to wait for.
func waitOpenTransactions(ctx context.Context, src *pgx.Conn, waiting func(ctx context.Context, oldestXid int64)) error {
	var until, oldest int64
	if err := src.QueryRow(ctx, `SELECT pg_catalog.txid_snapshot_xmax(s), pg_catalog.txid_snapshot_xmin(s)
		FROM pg_catalog.txid_current_snapshot() s`).Scan(&until, &oldest); err != nil {
		return fmt.Errorf("read the transactions open on the source: %w", err)
	}
	told := false
	poll := 5 * time.Millisecond
	for oldest < until {
		if !told && waiting != nil && poll >= openTransactionsPoll {
			// Not a moment's wait for short transactions: say so.
			waiting(ctx, oldest)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		poll = min(2*poll, openTransactionsPoll)
		if err := src.QueryRow(ctx, `SELECT pg_catalog.txid_snapshot_xmin(pg_catalog.txid_current_snapshot())`).Scan(&oldest); err != nil {
			return fmt.Errorf("read the transactions open on the source: %w", err)
		}
	}
	return nil
}
