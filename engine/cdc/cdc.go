package cdc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/apply"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/defaults"
	"github.com/pgmirror/pgmirror/engine/origin"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/session"
)

// gatherWindow is how long a complete batch may wait for more transactions
// when the stream is momentarily empty but the source had more WAL: long
// enough to gather a catch-up's small transactions into one destination
// commit, short enough not to matter for lag.
const gatherWindow = 2 * time.Millisecond

// During a catch-up (the source's WAL ends at least catchUpBehind bytes
// past the commit just read) a batch gathers for up to catchUpWindow
// instead: the stream runs dry there because the source's walsender decodes
// more slowly than pgmirror applies, and each destination commit, flush
// check and status update then costs CPU that the walsender needs. Lag is
// not at stake: the mirror is that far behind anyway.
const (
	catchUpBehind = 1 << 20
	catchUpWindow = 20 * time.Millisecond
)

// Re-exported sentinels, so callers can classify Run's errors with
// errors.Is without importing the engine's inner packages.
var (
	// ErrHeartbeatTimeout: the source sent nothing for HeartbeatTimeout.
	ErrHeartbeatTimeout = capture.ErrHeartbeatTimeout
	// ErrForeignKeyViolation: the destination rejected a batch (SQLSTATE 23503).
	ErrForeignKeyViolation = apply.ErrForeignKeyViolation
	// ErrSlotMissing: the replication slot does not exist.
	ErrSlotMissing = capture.ErrSlotMissing
	// ErrSlotInUse: another consumer holds the replication slot.
	ErrSlotInUse = capture.ErrSlotInUse
	// ErrMissingColumn: a destination table lacks a replicated source column
	// (sync the schema, then run again).
	ErrMissingColumn = apply.ErrMissingColumn
	// ErrConnect matches failures to connect to the source or destination
	// (refused, timed out, authentication).
	ErrConnect = errors.New("cannot connect")
	// ErrConnectionTimeout matches connection attempts and operations that
	// timed out at the network level; such errors also match ErrConnect when
	// they happened while connecting.
	ErrConnectionTimeout = errors.New("connection timeout")
)

// Config configures one CDC run of a mirror.
type Config struct {
	// MirrorUID identifies the mirror's applied position on the destination.
	MirrorUID string
	// Source and Dest are the connection configurations of the source and
	// destination databases (Run adds replication=database to the source's
	// replication connection itself). Run works on copies.
	Source, Dest *pgx.ConnConfig
	// SlotName and PublicationName name the source slot and publication.
	SlotName, PublicationName string
	// Tables are the replicated tables.
	Tables []change.Mapping
	// SkipTables are source tables (among Tables) being copied on their own
	// while this run replicates the others: their changes are dropped and
	// their positions left alone, and the run confirms nothing to the source,
	// so that the next run can start again before the copy's snapshot and
	// apply the copied tables' later changes.
	SkipTables []change.TableName
	// BatchSize closes a batch, at the next transaction boundary, once it
	// holds this many changes. Default 10000.
	BatchSize int
	// SyncInterval closes a batch, at the next transaction boundary, once
	// this long has passed since its first change. Default 60 s. A batch is
	// also closed as soon as the stream has nothing more buffered.
	SyncInterval time.Duration
	// HeartbeatTimeout ends the run with ErrHeartbeatTimeout when the source
	// sends nothing for this long. Default 120 s.
	HeartbeatTimeout time.Duration
	// StatusInterval is the longest time between standby status updates.
	// Default 3 s.
	StatusInterval time.Duration
	// ChunkSize is how many changes are buffered in memory before they are
	// written into the batch's destination transaction. Default 5000.
	ChunkSize int
	// MaxBufferedBytes bounds the decoded changes waiting between the stream
	// and the applier, and (separately) those buffered in a chunk. Default
	// 64 MiB each.
	MaxBufferedBytes int
	// HeartbeatInterval is how often the run writes a logical decoding
	// message (pg_logical_emit_message) on the source, which comes back
	// through the slot as an empty transaction: it tells a healthy idle
	// mirror from one whose stream is stuck (see LagReporter). Default 10 s;
	// negative turns it off. From PostgreSQL 14 the stream asks pgoutput for
	// messages; 12 and 13 send the heartbeat's transaction without them.
	HeartbeatInterval time.Duration
	// StopAt, when set, ends the run (Run returns nil) once every source
	// transaction that committed before this position is applied, flushed
	// on the destination and confirmed to the source: at the first
	// transaction that commits at or after it, which is not applied. A
	// cut-over writes a logical decoding message on the source
	// (EmitMarker) and passes its position, so that such a transaction
	// always comes (on PostgreSQL 12 and 13 as an empty transaction).
	StopAt change.LSN
	// Sessions, when set, are open source and destination sessions the
	// first run uses instead of connecting (see Sessions).
	Sessions *Sessions
	// SourceWatch, when set, follows the source's WAL end and writes the
	// heartbeats for this run together with the other runs of the same
	// source database (one connection and one poll for all of them);
	// without it the run does so on a source connection of its own.
	SourceWatch *SourceWatch
	// DestWatch, when set, follows the destination's WAL flush for this
	// run together with the other runs of the same destination database
	// (one connection and one poll for all of them), so that the run holds
	// one destination connection, the one it applies on; without it the
	// run follows the flush on a destination connection of its own.
	DestWatch *DestWatch
	// Origin, when set, is the replication origin (engine/origin.Name of
	// the mirror) that marks every transaction the run commits on the
	// destination, so that a mirror reading from the destination leaves
	// them out. "" marks nothing (the destination user may not use
	// origins). A destination that refuses it (privileges) logs a warning
	// and the run goes on unmarked.
	Origin string
	// Origins says which of pgmirror's replication origins on the source
	// the run leaves out: those of the mirrors that close a loop with this
	// one (engine/origin.Filter). Nil leaves out every pgmirror origin.
	Origins *origin.Filter
	// CaptureDDL applies the schema changes that pgmirror's event trigger
	// on the source writes into the WAL (engine/ddl): indexes, check,
	// unique and exclusion constraints, column defaults and NOT NULL, each
	// at its place among the changes. Needs PostgreSQL 14 or later on the
	// source (the statements travel in logical decoding messages; the
	// stream does not ask for them on older sources).
	CaptureDDL bool
	// SchemaChanges is what the run does when a mapped source table's
	// columns change: "apply", "warn" or "stop" (see apply.SchemaMode and
	// SchemaChangeReporter); "" keeps no record of the source's columns
	// (a dropped column is kept on the destination, a new one is
	// ErrMissingColumn).
	SchemaChanges string
	// Holder, when set, lets a verification hold the run for an instant at
	// a source position (see Holder).
	Holder Holder
	// OnUnmappedTable, when set, is called (on the run's goroutine; it must
	// not block) the first time the run meets a change of a table that is
	// neither in Tables nor in SkipTables: a publication that publishes
	// whole schemas sends the tables created in them at once. The change
	// itself is not applied.
	OnUnmappedTable func(change.TableName)
	// ConfirmCeiling, when set, bounds what the run confirms to the slot
	// beyond the changes it applied (see ConfirmCeiling).
	ConfirmCeiling *ConfirmCeiling
	// StageMemory bounds the memory that staged streamed transactions hold
	// (capture.StreamConfig.StageMemory; default 16 MiB). A source of
	// PostgreSQL 14 or later streams a transaction that outgrows its
	// logical_decoding_work_mem while it runs; the run applies it while it
	// streams, on a second destination session, and commits it at the
	// source's commit (early.go). It is staged as well while it fits in
	// StageMemory, and applied from there at its commit when it cannot be
	// applied early; a larger one is then read again from the source.
	StageMemory int
	// SpillDir is where staged streamed transactions beyond StageMemory
	// go, in temporary files (default $TMPDIR).
	SpillDir string
	// Logger receives the run's log. Default: discard.
	Logger *slog.Logger

	// noEarly turns early apply off (set by Run after errEarlyLocked).
	noEarly bool
	// notEarly lists the streamed transactions read again after a
	// capture.RereadError: they are applied at their commit.
	notEarly map[uint32]bool
}

// notEarlyMax bounds Config.notEarly: a transaction read again ends before
// many more are.
const notEarlyMax = 64

// ErrStopAtUnsupported: Config.StopAt was set but the source's pgoutput
// passes no marker to the stream (pgversion.Server.Markers; never on a
// supported source).
var ErrStopAtUnsupported = errors.New("stopping at a source position needs a source whose pgoutput passes logical decoding messages on (PostgreSQL 12 or later)")

// errStopReached ends the loop at Config.StopAt.
var errStopReached = errors.New("reached the stop position")

// Batch describes one batch committed on the destination.
type Batch struct {
	// ID is the batch number (the previous batch's plus one).
	ID int64
	// LSN is the end LSN of the batch's last source transaction.
	LSN change.LSN
	// Changes counts the row changes (and truncates) in the batch.
	Changes int64
	// Tables has the per-table counts, by source table.
	Tables map[change.TableName]change.Counts
	// Duration is the time from the batch's first change to its commit.
	Duration time.Duration
	// FetchedAt is when the batch's first change was received.
	FetchedAt time.Time
	// Streamed says that the batch is one large source transaction that
	// was applied while the source streamed it: Duration then runs from its
	// first change, received while the source still ran it.
	Streamed bool
}

// Reporter receives the outcome of each batch.
type Reporter interface {
	// BatchApplied is called after the batch committed on the destination
	// (its LSN is confirmed to the source once that commit is flushed on the
	// destination, see the package documentation). An error ends Run
	// (the batch itself stays applied).
	BatchApplied(ctx context.Context, b Batch) error
}

// LagReporter may also be implemented by a Reporter to be told, about every
// second, how far the mirror is behind: lag is the time since the source
// commit of the oldest transaction not yet applied (a transaction of the
// open batch, or a heartbeat written on the source, while it had WAL the
// run had not received, and not yet received), 0 when nothing is pending;
// appliedCommit is the
// source commit time of the last transaction applied (or empty, or skipped),
// zero before the first.
type LagReporter interface {
	Lag(lag time.Duration, appliedCommit time.Time)
}

// SchemaReporter may also be implemented by a Reporter to hear of source
// DDL that the run handles on its own.
type SchemaReporter interface {
	// ColumnsDropped is called when the source stopped sending columns of a
	// table (dropped or renamed there). The destination keeps the columns
	// and the run goes on with the others.
	ColumnsDropped(ctx context.Context, table change.TableName, columns []string)
}

// Run streams changes from the mirror's slot to the destination until stop
// is closed (returns nil), ctx is done (returns ctx.Err()) or something
// fails (returns a wrapped error; see the Err variables). See the package
// documentation for the pipeline and its guarantees.
func Run(ctx context.Context, cfg Config, rep Reporter, stop <-chan struct{}) error {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, defaults.CDCBatchSize)
	cfg.SyncInterval = cmp.Or(cfg.SyncInterval, defaults.CDCSyncInterval)
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, 120*time.Second)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = logger.With("mirror_uid", cfg.MirrorUID, "slot", cfg.SlotName)
	// A source column whose type was not checked for binary transfer ends a
	// run with apply.ErrBinaryMismatch (DDL on the source); nothing of the
	// open batch was kept or confirmed, so the next run decides the format
	// again and starts at the applied position.
	//
	// A violation met while a chunk was applied folded by key that the
	// source's order may not meet (apply.OrderConflictError: rows trading a
	// unique value within the chunk, a self-referencing foreign key): the
	// batch was rolled back, and the stream starts again at the applied
	// position with that table applied in the source's order for the rest
	// of the run. A violation in order is real and ends the run.
	//
	// A source column change met under SchemaChanges "stop" (a
	// SchemaStopError): the batch was rolled back, and the stream starts
	// again with StopAt at the commit of the transaction that carries the
	// change, so that everything before it is applied and confirmed; then
	// Run returns the SchemaStopError. A run resumed later starts right at
	// that transaction.
	inOrder := map[change.TableName]bool{}
	binaryRestarts := 0
	var schemaStopped *SchemaStopError
	for {
		err := runOnce(ctx, cfg, rep, stop, binaryRestarts >= 3, inOrder)
		if err == nil && schemaStopped != nil {
			return schemaStopped
		}
		var conflict *apply.OrderConflictError
		var schemaStop *SchemaStopError
		var reread *capture.RereadError
		switch {
		case errors.As(err, &schemaStop) && schemaStop.At != 0 && (cfg.StopAt == 0 || schemaStop.At < cfg.StopAt):
			schemaStopped = schemaStop
			cfg.StopAt = schemaStop.At
			cfg.Logger.Info("a source column change needs the mirror to stop (schema_changes is stop); applying what comes before it first",
				"table", schemaStop.Table.String(), "stop_at", schemaStop.At.String())
		case errors.Is(err, ErrStopAtUnsupported) && schemaStopped != nil:
			return schemaStopped
		case errors.As(err, &conflict) && !inOrder[conflict.Table]:
			inOrder[conflict.Table] = true
			cfg.Logger.Info("rows of a destination table met a constraint in the order folding by key gives them (a unique value traded within a batch, a self-referencing foreign key); restarting the stream with the table applied in the source's order",
				"table", conflict.Table.String(), "error", conflict.Err.Error())
		case errors.Is(err, errEarlyLocked) && !cfg.noEarly:
			cfg.noEarly = true
			cfg.Logger.Info("a batch waited for a lock held by a large transaction applied while it streamed; restarting the stream with large transactions applied at their commit",
				"error", err.Error())
		case errors.As(err, &reread) && !cfg.notEarly[reread.Xid]:
			if len(cfg.notEarly) >= notEarlyMax {
				cfg.notEarly = nil
			}
			if cfg.notEarly == nil {
				cfg.notEarly = map[uint32]bool{}
			}
			cfg.notEarly[reread.Xid] = true
			cfg.Logger.Info("a large transaction applied while it streamed cannot be finished that way and was not kept; reading it again from the source, to be applied at its commit",
				"xid", reread.Xid, "reason", reread.Reason)
		case errors.Is(err, apply.ErrBinaryMismatch):
			binaryRestarts++
			cfg.Logger.Info("a source column type changed; restarting the stream with its format decided again", "error", err.Error())
		default:
			return err
		}
	}
}

// runOnce is one CDC run: connections, positions, stream and loop. With
// textOnly it does not ask the source for binary values; the changes of
// the tables in inOrder are applied in the source's order.
func runOnce(ctx context.Context, cfg Config, rep Reporter, stop <-chan struct{}, textOnly bool, inOrder map[change.TableName]bool) error {
	logger := cfg.Logger
	conns, err := openRunConns(ctx, cfg)
	if err != nil {
		return err
	}
	defer conns.close()
	src, dest := conns.src, conns.dest

	srv, err := pgversion.Read(ctx, src)
	if err != nil {
		return netError(fmt.Errorf("source: %w", err))
	}
	if cfg.StopAt != 0 && !srv.Markers() {
		return ErrStopAtUnsupported
	}
	applier, srcCatalog, binary, err := newRunApplier(ctx, cfg, rep, srv, src, dest, textOnly, inOrder)
	if err != nil {
		return err
	}
	defer srcCatalog.close()
	marked := false
	if cfg.Origin != "" {
		if marked, err = setupOrigin(ctx, dest, cfg.Origin, logger); err != nil {
			return netError(err)
		}
		if marked {
			defer resetOrigin(dest)
		}
	}
	start, err := readStart(ctx, cfg, src, dest)
	if err != nil {
		return err
	}
	repl, err := capture.ConnectReplication(ctx, &cfg.Source.Config)
	if err != nil {
		return connectError("source", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = repl.Close(cctx)
	}()
	heartbeatEvery := heartbeatInterval(srv, cfg.HeartbeatInterval)
	source := followSource(ctx, cfg, src, heartbeatEvery)
	defer source.stop()
	r := newRunner(cfg, rep, applier, start, source, srcCatalog)
	r.dest = dest
	earlyCfg := applier.Config()
	earlyCfg.Early = true
	r.early = &earlyApply{cfg: earlyCfg, marked: marked}
	r.noteDeclining()
	defer r.earlyClose()
	var confirmLimit func(change.LSN) change.LSN
	if cfg.ConfirmCeiling != nil {
		confirmLimit = r.confirmLimit
	}
	stream, err := capture.StartStream(ctx, repl, capture.StreamConfig{
		Slot: cfg.SlotName, Publication: cfg.PublicationName, StartLSN: r.floor, HoldConfirmed: len(cfg.SkipTables) > 0,
		HeartbeatTimeout: cfg.HeartbeatTimeout, StatusInterval: cfg.StatusInterval, MaxBufferedBytes: cfg.MaxBufferedBytes, Logger: logger,
		Binary: binary, Messages: heartbeatEvery > 0 && srv.Messages(), SchemaMessages: cfg.CaptureDDL && srv.SchemaMessages(), Origins: cfg.Origins,
		ConfirmLimit: confirmLimit, Streaming: srv.Streaming(), StageMemory: cfg.StageMemory, SpillDir: cfg.SpillDir,
		EarlyChanges: srv.Streaming() && !cfg.noEarly && cfg.StopAt == 0, NotEarly: cfg.notEarly, EarlyDeclined: r.declining.Load,
		EarlyGivenUp: r.early.givenUp,
	})
	if err != nil {
		return netError(err)
	}
	defer stream.Close()
	r.stream = stream
	// Nothing is pending before the stream's start, nor before the slot's
	// confirmed position (the source never sends what precedes it). The
	// heartbeats start now that the stream is open.
	source.begin(max(r.floor, start.confirmed))
	if cfg.DestWatch != nil {
		r.flush = cfg.DestWatch.join(cfg.Dest, dest, cfg.MirrorUID, logger)
	} else {
		r.flush = startFlushWatcher(ctx, conns.flush, cfg.MirrorUID)
	}
	defer r.flush.stop()
	logger.Info("CDC started", "lsn", start.applied.String(), "start_lsn", r.floor.String(), "batch_id", start.batchID,
		"table_positions", len(start.positions), "skipped_tables", len(cfg.SkipTables), "binary", binary,
		"streaming", srv.Streaming())
	return r.loop(ctx, stop)
}

// followSource follows the source's WAL end and writes the heartbeats: on
// the shared poll of cfg.SourceWatch (this run's plain source session is
// closed then, it is not needed any more), or on src.
func followSource(ctx context.Context, cfg Config, src *pgx.Conn, heartbeatEvery time.Duration) *sourcePosition {
	if cfg.SourceWatch != nil {
		closeQuietly(src)
		return cfg.SourceWatch.join(cfg.Source, heartbeatEvery, cfg.Logger)
	}
	return watchSourcePosition(ctx, src, heartbeatEvery, cfg.Logger)
}

// runConns are the plain sessions of one CDC run: src on the source (handed
// to the source watcher or closed once the stream starts), dest to apply
// on, and flush for the flush watcher when there is no DestWatch.
type runConns struct {
	src, dest, flush *pgx.Conn
}

// openRunConns takes the sessions cfg.Sessions hands over and opens the
// others.
func openRunConns(ctx context.Context, cfg Config) (*runConns, error) {
	c := &runConns{}
	c.src, c.dest = cfg.Sessions.take()
	var err error
	if c.dest == nil {
		if c.dest, err = session.Connect(ctx, cfg.Dest); err != nil {
			c.close()
			return nil, connectError("destination", err)
		}
	}
	if cfg.DestWatch == nil {
		if c.flush, err = session.Connect(ctx, cfg.Dest); err != nil {
			c.close()
			return nil, connectError("destination", err)
		}
	}
	if c.src == nil {
		if c.src, err = session.Connect(ctx, cfg.Source); err != nil {
			c.close()
			return nil, connectError("source", err)
		}
	}
	return c, nil
}

// close closes the sessions still open.
func (c *runConns) close() {
	for _, conn := range []*pgx.Conn{c.src, c.dest, c.flush} {
		if conn != nil {
			closeQuietly(conn)
		}
	}
}

// newRunApplier prepares the applier on dest: binary values for the tables
// whose types allow it (unless textOnly), the source catalog that schema
// changes are read from, and the tables applied in the source's order.
func newRunApplier(ctx context.Context, cfg Config, rep Reporter, srv pgversion.Server, src, dest *pgx.Conn,
	textOnly bool, inOrder map[change.TableName]bool) (*apply.Applier, *sourceCatalog, bool, error) {
	var types map[change.TableName]map[string]uint32
	if !textOnly {
		var err error
		if types, err = binaryTypes(ctx, srv, src, dest, cfg.Tables, cfg.SchemaChanges != ""); err != nil {
			return nil, nil, false, netError(err)
		}
	}
	applyCfg := apply.Config{
		MirrorUID: cfg.MirrorUID, Mappings: cfg.Tables, ChunkSize: cfg.ChunkSize, ChunkBytes: cfg.MaxBufferedBytes, Logger: cfg.Logger,
		Binary: types != nil, BinaryTypes: types, InOrder: inOrder,
	}
	if sr, ok := rep.(SchemaReporter); ok {
		applyCfg.OnColumnsDropped = sr.ColumnsDropped
	}
	srcCatalog := schemaConfig(cfg, rep, &applyCfg)
	applier, err := apply.New(ctx, dest, applyCfg)
	if err != nil {
		srcCatalog.close()
		return nil, nil, false, netError(err)
	}
	return applier, srcCatalog, types != nil, nil
}

// runStart is where a run starts: the applied position and batch id on the
// destination, the per-table positions, the slot's confirmed position and
// the source's DDL capture key.
type runStart struct {
	applied, confirmed change.LSN
	batchID            int64
	positions          map[change.TableName]change.LSN
	ddlKey             string
}

// readStart reads where the run starts, once the slot's previous consumer
// has let go.
func readStart(ctx context.Context, cfg Config, src, dest *pgx.Conn) (runStart, error) {
	var s runStart
	applied, batchID, found, err := positions.Applied(ctx, dest, cfg.MirrorUID)
	if err != nil {
		return s, netError(err)
	}
	s.applied, s.batchID = applied, batchID
	if s.positions, err = tablePositions(ctx, dest, cfg); err != nil {
		return s, netError(err)
	}
	if !found {
		// No position recorded yet: the slot's confirmed position is the
		// start (the slot never sends anything before it anyway).
		if s.applied, err = slotConfirmed(ctx, src, cfg.SlotName); err != nil {
			return s, err
		}
		cfg.Logger.Info("no applied position on the destination; starting at the slot's confirmed position", "lsn", s.applied.String())
	}
	if err := waitSlotIdle(ctx, src, cfg.SlotName); err != nil {
		return s, netError(err)
	}
	if s.confirmed, err = slotConfirmed(ctx, src, cfg.SlotName); err != nil {
		return s, err
	}
	if cfg.CaptureDDL {
		if s.ddlKey, err = readDDLKey(ctx, src, cfg.Logger); err != nil {
			return s, err
		}
	}
	return s, nil
}

// newRunner is the run's loop state from where it starts.
func newRunner(cfg Config, rep Reporter, applier *apply.Applier, start runStart, source *sourcePosition, srcCatalog *sourceCatalog) *runner {
	r := &runner{cfg: cfg, log: cfg.Logger, rep: rep, applier: applier, applied: start.applied, batchID: start.batchID,
		positions: start.positions, skip: map[change.TableName]bool{}, source: source, ddlKey: start.ddlKey, srcCatalog: srcCatalog}
	for _, t := range cfg.SkipTables {
		r.skip[t] = true
	}
	if cfg.OnUnmappedTable != nil {
		r.unmapped, r.mapped = map[change.TableName]bool{}, map[change.TableName]bool{}
		for _, m := range cfg.Tables {
			r.mapped[m.Source] = true
		}
	}
	for _, m := range cfg.Tables {
		if !r.skip[m.Source] {
			r.prefetch = append(r.prefetch, m.Source)
		}
	}
	r.floor = r.lowest()
	r.appliedPos.Store(uint64(r.applied))
	return r
}

// originBusyWait is how long a run waits for its origin to be let go by
// the session that used it before (a previous run's connection whose
// backend has not exited yet).
const originBusyWait = 10 * time.Second

// setupOrigin marks the transactions of the apply connection with the
// origin name. A destination user without the privileges gives a warning
// and false: the run goes on unmarked.
func setupOrigin(ctx context.Context, dest *pgx.Conn, name string, logger *slog.Logger) (bool, error) {
	deadline := time.Now().Add(originBusyWait)
	for {
		err := origin.Setup(ctx, dest, name)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, origin.ErrNotPermitted):
			logger.Warn("the destination user may not use replication origins: pgmirror's writes are not marked, and a mirror reading from the destination would carry them back; "+origin.GrantHint,
				"origin", name, "error", err.Error())
			return false, nil
		case errors.Is(err, origin.ErrNoFreeState):
			logger.Warn("the destination has no free replication state for the mirror's origin: this run's writes are not marked, and a mirror reading from the destination would carry them back; raise max_replication_slots on the destination",
				"origin", name, "error", err.Error())
			return false, nil
		case errors.Is(err, origin.ErrInUse) && time.Now().Before(deadline):
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		default:
			return false, err
		}
	}
}

// resetOrigin ends the apply connection's use of its origin before the
// connection closes, so that the next run may take it at once.
func resetOrigin(conn *pgx.Conn) {
	if conn.IsClosed() || conn.PgConn().TxStatus() != 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, `SELECT pg_catalog.pg_replication_origin_session_reset()`)
}

// tablePositions reads the per-table positions of the mapped tables that
// are not skipped, and forgets those of tables no longer mapped.
func tablePositions(ctx context.Context, dest *pgx.Conn, cfg Config) (map[change.TableName]change.LSN, error) {
	known := make([]change.TableName, 0, len(cfg.Tables)+len(cfg.SkipTables))
	for _, m := range cfg.Tables {
		known = append(known, m.Source)
	}
	known = append(known, cfg.SkipTables...)
	all, gone, err := positions.Tables(ctx, dest, cfg.MirrorUID, known)
	if err != nil {
		return nil, err
	}
	for _, t := range cfg.SkipTables {
		delete(all, t) // being copied: their positions stay for the next run
	}
	if err := positions.Forget(ctx, dest, cfg.MirrorUID, gone); err != nil {
		return nil, err
	}
	return all, nil
}

type runner struct {
	cfg     Config
	log     *slog.Logger
	rep     Reporter
	applier *apply.Applier
	// dest is the applier's session; early applies streamed transactions
	// while they stream, on a session of its own (early.go).
	dest  *pgx.Conn
	early *earlyApply
	// handedOver: the event just handled went to the early worker, which
	// releases it.
	handedOver bool
	// srcCatalog reads the source catalog when a table changes shape (nil
	// when the run does not follow source column changes).
	srcCatalog *sourceCatalog
	stream     *capture.Stream
	flush      *flushWatcher
	source     *sourcePosition

	// unflushed are committed batches (and transactions after them with
	// nothing of ours) not yet confirmed: their destination commit is not
	// known to be flushed yet. In commit order.
	unflushed []pendingConfirm
	dry       bool // nothing was waiting in the stream after the last event
	// gather fires when a complete batch that waits for more transactions
	// (see gatherWindow) must be committed; gathering says it is armed.
	gather    *time.Timer
	gathering bool
	undecided bool // see decideBatch

	applied change.LSN // end LSN of the last transaction on the destination
	batchID int64
	// appliedPos is applied, for the stream's goroutine (confirmLimit).
	appliedPos atomic.Uint64
	// declining says, for the stream's goroutine, that the run declines
	// early apply for now (earlyDeclined; kept by noteDeclining).
	declining atomic.Bool

	// positions are the tables whose data stands at another position than
	// applied (key: source schema.table); skip are the tables being copied.
	positions map[change.TableName]change.LSN
	skip      map[change.TableName]bool
	// prefetch are the tables whose destination description the applier
	// has yet to read ahead while the stream is idle (prefetchNext); tables
	// being copied (skip) are left to the run in which they join.
	prefetch []change.TableName
	// unmapped are the tables met that the run does not replicate (nil
	// without OnUnmappedTable), mapped those it does.
	unmapped, mapped map[change.TableName]bool
	floor            change.LSN // lowest of applied and positions: where the stream starts

	inTx     bool       // a source transaction is open in the stream
	txLSN    change.LSN // commit LSN of the open transaction
	skipping bool       // every change of the open transaction is already on the destination
	batchEnd change.LSN // end LSN of the batch's last complete transaction
	changes  int64
	started  time.Time // first change of the open batch
	// streamedBatch: the batch being committed is one source transaction
	// applied while the source streamed it (early.go).
	streamedBatch bool

	// Source commit times, for the lag (see LagReporter): of the open
	// transaction, of the open batch's first and last transactions, and of
	// the last transaction applied (or empty, or skipped).
	txCommit, batchCommit, batchEndCommit, appliedCommit time.Time

	// DDL capture (Config.CaptureDDL): the open transaction's id, the key
	// that signs the trigger's messages, and when it was last read again
	// (rereadDDLKey).
	txXid      uint32
	ddlKey     string
	ddlKeyRead time.Time
	// ddlReports report what captured schema changes did in the open
	// batch, once it commits (a batch that fails is applied again by the
	// next run, which reports it then).
	ddlReports []func()
}

// lagEvery is how often a LagReporter hears the lag.
const lagEvery = time.Second

// heartbeatInterval returns how often the run writes heartbeats on the
// source: every (default 10 s; negative: never). Every supported source
// passes them to the stream (pgversion.Server.Markers): as messages from
// PostgreSQL 14, as the empty transactions that carry them before.
func heartbeatInterval(srv pgversion.Server, every time.Duration) time.Duration {
	if every < 0 || !srv.Markers() {
		return 0
	}
	return cmp.Or(every, 10*time.Second)
}

// lag is how far the run is behind at now: since the source commit of the
// open batch's first transaction or of the oldest heartbeat not yet
// received, whichever is older; 0 when there is neither.
func (r *runner) lag(now time.Time) time.Duration {
	oldest := r.source.oldestHeartbeat()
	if r.applier.InBatch() && !r.batchCommit.IsZero() && (oldest.IsZero() || r.batchCommit.Before(oldest)) {
		oldest = r.batchCommit
	}
	if oldest.IsZero() {
		return 0
	}
	return max(0, now.Sub(oldest))
}

func (r *runner) loop(ctx context.Context, stop <-chan struct{}) error {
	events := r.stream.Events()
	r.gather = time.NewTimer(time.Hour)
	r.gather.Stop()
	defer r.gather.Stop()
	lagReporter, _ := r.rep.(LagReporter)
	lagTick := time.NewTicker(lagEvery)
	defer lagTick.Stop()
	idle := make(chan struct{})
	close(idle)
	for {
		// While nothing waits in the stream and no batch is open, the
		// applier reads ahead what each table's first change would wait
		// for, one table per round, so that the first changes after the
		// run starts are applied without those round trips.
		var prefetch <-chan struct{}
		if len(r.prefetch) > 0 && len(events) == 0 && !r.inTx && !r.applier.InBatch() {
			prefetch = idle
		}
		select {
		case <-prefetch:
			if err := r.prefetchNext(ctx); err != nil {
				return r.loopFailed(ctx, err)
			}
		case now := <-lagTick.C:
			r.srcCatalog.closeIdle(now)
			if lagReporter != nil {
				lagReporter.Lag(r.lag(now), r.appliedCommit)
			}
		case <-r.gather.C:
			r.gathering = false
			if r.applier.InBatch() && !r.inTx && !r.skipping {
				if err := r.commit(ctx); err != nil {
					return r.loopFailed(ctx, err)
				}
			}
		case <-stop:
			return r.finish(ctx)
		case <-ctx.Done():
			r.abandon()
			return ctx.Err()
		case flushed := <-r.flush.flushed:
			r.confirmFlushed(flushed)
		case err := <-r.flush.errs:
			r.abandon()
			return netError(err)
		case evs, ok := <-events:
			if !ok {
				r.abandon()
				err := r.stream.Err()
				if err == nil {
					err = errors.New("replication stream ended")
				}
				return netError(fmt.Errorf("replication stream: %w", err))
			}
			for i, ev := range evs {
				r.dry = i == len(evs)-1 && len(events) == 0
				err := r.handle(ctx, ev, r.dry)
				// The applier bounds what it buffers itself (ChunkBytes).
				if !r.handedOver {
					r.stream.Release(ev)
				}
				r.handedOver = false
				if errors.Is(err, errStopReached) {
					r.log.Info("reached the stop position", "stop_at", r.cfg.StopAt.String(), "applied", r.applied.String())
					return r.finish(ctx)
				}
				if err != nil {
					return r.loopFailed(ctx, err)
				}
			}
			if r.undecided && len(events) == 0 {
				r.undecided = false
				if r.applier.InBatch() && !r.inTx && !r.gathering {
					if err := r.decideBatch(ctx, true); err != nil {
						return r.loopFailed(ctx, err)
					}
				}
			}
		}
	}
}

// prefetchNext has the applier read ahead the next table's description.
func (r *runner) prefetchNext(ctx context.Context) error {
	t := r.prefetch[0]
	r.prefetch = r.prefetch[1:]
	return r.applier.Prefetch(ctx, t)
}

// loopFailed ends the loop on err: the open batch is rolled back.
func (r *runner) loopFailed(ctx context.Context, err error) error {
	err = r.earlyLocked(err)
	r.abandon()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return netError(err)
}

func (r *runner) handle(ctx context.Context, ev capture.Event, dry bool) error {
	switch ev.Kind {
	case capture.EventBegin:
		if r.cfg.StopAt != 0 && ev.LSN >= r.cfg.StopAt {
			return errStopReached
		}
		if ev.Streamed && r.applier.InBatch() {
			// A streamed transaction is large: the transactions gathered
			// before it are committed now, so that they do not wait for
			// its apply.
			if err := r.commit(ctx); err != nil {
				return err
			}
		}
		if err := r.maybeHold(ctx, ev.LSN); err != nil {
			return err
		}
		r.inTx = true
		r.txLSN = ev.LSN
		r.txXid = ev.Xid
		r.txCommit = ev.CommitTime
		// The commit LSN of a transaction not yet applied is at or after the
		// end of the last applied one; anything before it was applied.
		r.skipping = ev.LSN < r.floor
		if r.skipping {
			r.log.Debug("skipping transaction already applied", "lsn", ev.LSN.String())
		}
	case capture.EventChange:
		// Truncates name several tables and captured DDL (OpSchema) carries
		// its table in its payload: neither has a Relation.
		if r.unmapped != nil && ev.Change.Relation != nil {
			r.noticeUnmapped(ev.Change.Relation.Table)
		}
		if r.skipping {
			return nil
		}
		if ev.Change.Op == change.OpSchema {
			return r.schemaChange(ctx, ev.Change.Schema)
		}
		c := r.filter(ev.Change)
		if c == nil {
			return nil
		}
		if err := r.openBatch(ctx); err != nil {
			return err
		}
		r.changes++
		if err := r.applier.Apply(ctx, c); err != nil {
			var schemaStop *SchemaStopError
			if errors.As(err, &schemaStop) {
				schemaStop.At = r.txLSN
			}
			return err
		}
	case capture.EventStreamChange:
		return r.earlyChange(ctx, ev)
	case capture.EventStreamUnfit:
		if r.early.xid == ev.Xid && !r.early.failed {
			r.earlyGiveUp(ctx, ev.Note.Reason)
		}
	case capture.EventStreamAbort:
		return r.earlyAbort(ctx, ev)
	case capture.EventStreamCommit:
		return r.earlyCommit(ctx, ev)
	case capture.EventCommit:
		r.inTx = false
		r.source.received(ev.LSN)
		if r.skipping {
			r.skipping = false
			r.appliedCommit = ev.CommitTime
			return nil
		}
		if !r.applier.InBatch() {
			r.appliedCommit = ev.CommitTime
			// Nothing of ours in this transaction and nothing pending: the
			// source may forget it once the batches before it are durable.
			r.confirmAfterUnflushed(ev.LSN)
			return nil
		}
		r.batchEnd = ev.LSN
		r.batchEndCommit = ev.CommitTime
		return r.decideBatch(ctx, dry)
	}
	return nil
}

// decideBatch decides, after the commit of a source transaction in the
// open batch (r.batchEnd), whether the batch commits now or gathers more
// transactions (closeBatch). When it waits for the next transaction because
// more events are already here (not dry), r.undecided is set: should those
// events hold no transaction commit (changes of a streamed transaction, its
// end), the loop decides again once it has nothing more to handle, so the
// batch never waits for a later source commit.
func (r *runner) decideBatch(ctx context.Context, dry bool) error {
	behind := r.source.behind(r.batchEnd)
	r.stream.SetCatchingUp(behind >= catchUpBehind)
	now, wait := r.cfg.closeBatch(r.changes, time.Since(r.started), dry, behind)
	r.undecided = !now && wait == 0
	if now {
		return r.commit(ctx)
	}
	if wait > 0 {
		r.gather.Reset(wait)
		r.gathering = true
	}
	return nil
}

// openBatch opens a batch unless one is open.
func (r *runner) openBatch(ctx context.Context) error {
	if r.applier.InBatch() {
		return nil
	}
	if err := r.applier.Begin(ctx); err != nil {
		return err
	}
	r.started = time.Now()
	r.changes = 0
	r.batchCommit = r.txCommit
	return nil
}

// closeBatch decides, at the commit of a source transaction, whether the
// open batch (changes in it, open for age) is committed now. dry says that
// nothing more waits in the stream, behind how many bytes of WAL the source
// had past this commit when it sent it. Otherwise wait > 0 says how long the
// batch may wait for more transactions before it is committed anyway: a
// batch per transaction costs the destination a commit each and, during a
// catch-up, competes with the source for the CPU, so while the source has
// more WAL the batch gathers for up to gatherWindow, or catchUpWindow when
// the mirror is catchUpBehind or more behind.
func (cfg Config) closeBatch(changes int64, age time.Duration, dry bool, behind uint64) (now bool, wait time.Duration) {
	window := gatherWindow
	if behind >= catchUpBehind {
		window = catchUpWindow
	}
	switch {
	case changes >= int64(cfg.BatchSize) || age >= cfg.SyncInterval:
		return true, 0
	case !dry:
		return false, 0 // the next transaction is already here
	case behind == 0 || age >= window:
		return true, 0 // caught up with the source, or gathered long enough
	}
	return false, window - age
}

// noticeUnmapped calls OnUnmappedTable the first time the run meets a
// change of t when t is not replicated by this run.
func (r *runner) noticeUnmapped(t change.TableName) {
	if r.mapped[t] || r.skip[t] || r.unmapped[t] {
		return
	}
	r.unmapped[t] = true
	r.cfg.OnUnmappedTable(t)
}

// filter returns c without the tables whose changes in the open
// transaction are skipped (being copied, or already in the destination
// table's copy), or nil when nothing of it is left.
func (r *runner) filter(c *change.Change) *change.Change {
	if len(r.skip) == 0 && len(r.positions) == 0 {
		return c
	}
	if c.Op != change.OpTruncate {
		if r.skipped(c.Relation.Table) {
			return nil
		}
		return c
	}
	kept := make([]*change.Relation, 0, len(c.Truncated))
	for _, rel := range c.Truncated {
		if !r.skipped(rel.Table) {
			kept = append(kept, rel)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	out := *c
	out.Truncated = kept
	return &out
}

// skipped reports whether the open transaction's changes of table t must be
// left out: t is being copied, or its destination data already holds them.
func (r *runner) skipped(t change.TableName) bool {
	if r.skip[t] {
		return true
	}
	if pos, ok := r.positions[t]; ok {
		return r.txLSN < pos
	}
	return r.txLSN < r.applied
}

// lowest returns the lowest position of any replicated table.
func (r *runner) lowest() change.LSN {
	low := r.applied
	for _, pos := range r.positions {
		low = min(low, pos)
	}
	return low
}

// commit commits the open batch, confirms its LSN and reports it.
func (r *runner) commit(ctx context.Context) error {
	return r.commitOn(ctx, r.applier)
}

// commitOn commits the batch open on a (the run's applier, or the early
// one with a streamed transaction), as the mirror's next batch up to
// r.batchEnd: confirms its LSN and reports it.
func (r *runner) commitOn(ctx context.Context, a *apply.Applier) error {
	if r.gathering {
		r.gather.Stop()
		r.gathering = false
	}
	id := r.batchID + 1
	end := r.batchEnd
	// Tables with their own position: the batch covered every transaction
	// up to end for them too. Once end reaches the mirror's position, they
	// stand where every other table stands and need no entry of their own.
	set, forget := map[change.TableName]change.LSN{}, []change.TableName(nil)
	for table, pos := range r.positions {
		switch {
		case pos > end:
		case end >= r.applied:
			forget = append(forget, table)
		default:
			set[table] = end
		}
	}
	if len(set) > 0 || len(forget) > 0 {
		if err := a.SetTablePositions(ctx, set, forget); err != nil {
			return fmt.Errorf("apply batch %d: %w", id, err)
		}
	}
	applied := max(r.applied, end)
	counts, err := a.Commit(ctx, applied, id)
	if err != nil {
		return fmt.Errorf("apply batch %d: %w", id, err)
	}
	for _, report := range r.ddlReports {
		report()
	}
	r.ddlReports = nil
	for table, pos := range set {
		r.positions[table] = pos
	}
	for _, table := range forget {
		delete(r.positions, table)
	}
	r.noteDeclining()
	r.batchID = id
	r.applied = applied
	r.appliedPos.Store(uint64(applied))
	r.appliedCommit = r.batchEndCommit
	r.floor = r.lowest()
	commitWAL, flushedWAL := a.LastCommitWAL()
	r.unflushed = append(r.unflushed, pendingConfirm{dest: commitWAL, src: end})
	r.confirmFlushed(flushedWAL)
	if len(r.unflushed) > 0 {
		r.flush.want(commitWAL, r.dry)
	}
	b := Batch{
		ID: id, LSN: applied, Changes: r.changes, Tables: counts,
		Duration: time.Since(r.started), FetchedAt: r.started, Streamed: r.streamedBatch,
	}
	r.changes, r.streamedBatch = 0, false
	if r.rep != nil {
		if err := r.rep.BatchApplied(ctx, b); err != nil {
			return fmt.Errorf("report batch %d: %w", id, err)
		}
		if lr, ok := r.rep.(LagReporter); ok {
			lr.Lag(r.lag(time.Now()), r.appliedCommit)
		}
	}
	return nil
}

// confirmFlushed confirms the source position of every committed batch
// whose destination commit lies at or before flushed; when the stream is
// dry, the stream tells the source at once, else with its next regular
// status update (a status message per batch would cost the source more than
// it tells it while changes keep coming).
func (r *runner) confirmFlushed(flushed change.LSN) {
	n := 0
	for n < len(r.unflushed) && r.unflushed[n].dest <= flushed {
		n++
	}
	if n == 0 {
		return
	}
	src := r.unflushed[n-1].src
	r.unflushed = slices.Delete(r.unflushed, 0, n)
	if r.dry {
		r.stream.ConfirmNow(src)
	} else {
		r.stream.Confirm(src)
	}
}

// confirmLimit is the stream's ConfirmLimit with a ConfirmCeiling: a
// confirmed position up to the applied one passes (the stream confirms only
// what is flushed on the destination), one past it only up to the ceiling.
func (r *runner) confirmLimit(confirmed change.LSN) change.LSN {
	c := r.cfg.ConfirmCeiling
	c.want(confirmed)
	return min(confirmed, max(c.Limit(), change.LSN(r.appliedPos.Load())))
}

// confirmAfterUnflushed confirms src, the end of a transaction with nothing
// to apply, at once when every batch before it is durable, else together
// with the last of them.
func (r *runner) confirmAfterUnflushed(src change.LSN) {
	if n := len(r.unflushed); n > 0 {
		r.unflushed[n-1].src = src
		return
	}
	r.stream.Confirm(src)
}

// finish ends the run on stop: a batch that ends on a transaction boundary
// is committed, one in the middle of a transaction is abandoned. Committed
// batches are then flushed on the destination and confirmed, so the source
// learns the final position before the stream closes.
func (r *runner) finish(ctx context.Context) error {
	if r.applier.InBatch() {
		if r.inTx && !r.skipping {
			r.abandon()
		} else if cerr := r.commit(ctx); cerr != nil {
			r.abandon()
			return netError(cerr)
		}
	}
	if len(r.unflushed) > 0 {
		r.flush.stop()
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		flushed, err := positions.FlushWAL(fctx, r.flush.conn, r.cfg.MirrorUID)
		if err != nil {
			// Not confirmed: the next run starts at the applied position on
			// the destination and skips what this one applied.
			r.log.Warn("could not flush the destination's WAL at stop; the last batches stay unconfirmed until the next run", "error", err.Error())
			return nil
		}
		r.confirmFlushed(flushed)
	}
	r.settleCeiling(ctx)
	return nil
}

// settleTimeout bounds the recording of the confirm ceiling at a run's stop.
const settleTimeout = 2 * time.Second

// settleCeiling records, as the run stops, the confirm ceiling for what
// its stream confirmed past the applied position (WAL with nothing to
// replicate after its last transaction, such as a checkpoint's), so that
// the stream's last status update confirms it. Otherwise the slot kept its
// restart point before that WAL and the next run decoded it all again: a
// resume right after a catch-up read the caught-up WAL a second time.
// Failing to record it only leaves that WAL to be read again.
func (r *runner) settleCeiling(ctx context.Context) {
	c := r.cfg.ConfirmCeiling
	if c == nil || r.stream == nil {
		return
	}
	c.want(r.stream.Confirmed())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := c.Settle(sctx); err != nil {
		r.log.Debug("could not record the confirm ceiling at stop; the next run reads the WAL after the last transaction again", "error", err.Error())
	}
}

// abandon rolls back the open batch; its transactions are re-sent on the
// next run because their LSNs were never confirmed.
func (r *runner) abandon() {
	if !r.applier.InBatch() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.applier.Rollback(ctx); err != nil {
		r.log.Warn("rolling back the open batch failed", "error", err.Error())
	}
}

// slotConfirmed reads the slot's confirmed position on the source.
func slotConfirmed(ctx context.Context, conn *pgx.Conn, slot string) (change.LSN, error) {
	st, err := capture.SlotState(ctx, conn, slot)
	if err != nil {
		return 0, netError(err)
	}
	if !st.Exists {
		return 0, fmt.Errorf("slot %s: %w", slot, ErrSlotMissing)
	}
	return st.ConfirmedFlush, nil
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// connectError wraps a failure to connect to side with ErrConnect (and
// ErrConnectionTimeout when it timed out). The error text comes from pgconn,
// which never includes the password.
func connectError(side string, err error) error {
	var connErr *pgconn.ConnectError
	if isTimeout(err) || (errors.As(err, &connErr) && errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("connect to %s: %w: %w: %w", side, ErrConnect, ErrConnectionTimeout, err)
	}
	return fmt.Errorf("connect to %s: %w: %w", side, ErrConnect, err)
}

// netError marks network timeouts with ErrConnectionTimeout.
func netError(err error) error {
	if err != nil && isTimeout(err) && !errors.Is(err, ErrConnectionTimeout) {
		return fmt.Errorf("%w: %w", ErrConnectionTimeout, err)
	}
	return err
}

func isTimeout(err error) bool {
	if errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
