package capture

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// ErrHeartbeatTimeout is returned (wrapped) when the source sent nothing,
// not even a keepalive, for longer than StreamConfig.HeartbeatTimeout.
var ErrHeartbeatTimeout = errors.New("heartbeat timeout: the source sent nothing")

// EventKind says what an Event carries.
type EventKind uint8

const (
	// EventBegin starts a source transaction. LSN is its commit LSN.
	EventBegin EventKind = iota + 1
	// EventChange is one change of the open transaction.
	EventChange
	// EventCommit ends the open transaction. LSN is its end LSN (the
	// position to confirm once the transaction is on the destination).
	EventCommit
	// EventStreamChange is a change of streamed transaction Xid while it
	// is still open on the source (StreamConfig.EarlyChanges), made by its
	// subtransaction Sub (Xid itself for the top level). It arrives between
	// whole transactions, never inside one.
	EventStreamChange
	// EventStreamUnfit says that streamed transaction Xid holds something
	// that is not a row change (a truncate, a schema change message, an
	// origin; Note.Reason says which): no more EventStreamChange come for
	// it, and its changes come again, whole, at its commit.
	EventStreamUnfit
	// EventStreamAbort: streamed transaction Xid (Sub == Xid) or its
	// subtransaction Sub rolled back on the source. The changes of Sub
	// (and of the subtransactions that began within it, whose own aborts
	// come first) are void; after a subtransaction's rollback more
	// EventStreamChange may come for Xid. The source sends no abort for a
	// subtransaction none of whose changes it sent.
	EventStreamAbort
	// EventStreamCommit: streamed transaction Xid committed at LSN (its
	// commit LSN; Note.End is its end LSN). The consumer must call
	// Note.Answer: true when it applied the transaction from its
	// EventStreamChange events, false to have it handed over whole, as
	// EventBegin (Streamed), its changes and EventCommit, right after.
	// The stream waits for the answer.
	EventStreamCommit
)

// StreamNote carries what a stream event of a streamed transaction says
// beyond the Event's own fields.
type StreamNote struct {
	// End is the transaction's end LSN (EventStreamCommit).
	End change.LSN
	// Reason says why the transaction is unfit (EventStreamUnfit).
	Reason string
	answer chan bool
}

// Answer tells the stream whether the consumer applied the committed
// transaction already (EventStreamCommit). Call it once.
func (n *StreamNote) Answer(applied bool) {
	n.answer <- applied
}

// Event is one item of the decoded stream.
type Event struct {
	Kind EventKind
	// LSN is the commit LSN for EventBegin and the transaction end LSN for
	// EventCommit.
	LSN change.LSN
	// Xid is the source transaction id (EventBegin).
	Xid uint32
	// CommitTime is the source commit time (EventBegin, EventCommit).
	CommitTime time.Time
	// Streamed (EventBegin) says that the source streamed the transaction
	// while it ran: it outgrew logical_decoding_work_mem, so it is large.
	Streamed bool
	// Sub is the subtransaction of EventStreamChange and EventStreamAbort.
	Sub uint32
	// Note is set for EventStreamUnfit and EventStreamCommit.
	Note *StreamNote
	// Change is set for EventChange.
	Change *change.Change
	// Size is the memory the event holds; pass the event to Stream.Release
	// once it is no longer needed.
	Size int
}

// StreamConfig configures StartStream.
type StreamConfig struct {
	// Slot and Publication name the slot to consume and the publication(s)
	// to decode; both must pass ValidateName.
	Slot, Publication string
	// StartLSN is where to start: the end LSN of the last transaction on the
	// destination. It is also the initially confirmed position.
	StartLSN change.LSN
	// HeartbeatTimeout ends the stream with ErrHeartbeatTimeout when nothing
	// arrives for this long. Default 120 s.
	HeartbeatTimeout time.Duration
	// StatusInterval is the longest time between two standby status updates.
	// Default 3 s.
	StatusInterval time.Duration
	// Buffer is the capacity of the event channel, in hand-overs of up to
	// handOverMax events each (see Events). Default 64.
	Buffer int
	// HoldConfirmed keeps the confirmed position at StartLSN for the whole
	// stream: Confirm and idle keepalives do not move it, so the source keeps
	// every transaction after StartLSN and a later stream can start there
	// again (used while a table is copied on its own).
	HoldConfirmed bool
	// MaxBufferedBytes bounds the memory of the changes handed over but not
	// yet released (see Stream.Release). Default 64 MiB. A single larger
	// change is still handed over when nothing else is outstanding.
	MaxBufferedBytes int
	// Binary requests pgoutput binary 'true' (PostgreSQL 14+): values arrive
	// as change.ValueBinary in their type's binary send format (a type
	// without a send function still arrives as change.ValueText).
	Binary bool
	// Messages requests pgoutput messages 'true' (PostgreSQL 14+): a
	// transaction that only writes a logical decoding message (the run's
	// heartbeat) then reaches the consumer as a BEGIN and a COMMIT; the
	// message itself is not an event.
	Messages bool
	// SchemaMessages decodes the transactional logical decoding messages
	// with prefix change.SchemaMessagePrefix (written by pgmirror's event
	// trigger on the source, see engine/ddl) into change.OpSchema changes,
	// in place in their transaction. It implies Messages. Other messages,
	// and messages written outside a transaction, are ignored.
	SchemaMessages bool
	// ConfirmLimit, when set, bounds what each standby status update
	// reports as flushed: ConfirmLimit(confirmed), never more than
	// confirmed. The consumer uses it to keep the slot's confirmed
	// position within what it recorded elsewhere first (see
	// cdc.ConfirmCeiling). It is called on the stream's goroutine.
	ConfirmLimit func(confirmed change.LSN) change.LSN
	// Origins says which of pgmirror's replication origins to leave out
	// (see engine/origin.Filter): those of the mirrors that close a loop
	// with this one. Nil leaves out every pgmirror origin.
	Origins *origin.Filter
	// Streaming asks pgoutput to stream large in-progress transactions
	// (proto_version '2', streaming 'on'; PostgreSQL 14+, see
	// pgversion.Server.Streaming): the source sends a transaction that
	// outgrows its logical_decoding_work_mem (lowered to 8 MB for the
	// stream's walsender, see streamingWorkMemKB) while it runs, instead of
	// spilling it to its own disk and sending it at commit. The stream
	// stages it (StageMemory, SpillDir) and hands it over at its commit as
	// one whole transaction, like any other (see streamed.go).
	Streaming bool
	// StageMemory bounds the bytes of streamed transactions staged in
	// memory, all together; past it the largest goes to a temporary file.
	// Default 16 MiB.
	StageMemory int
	// SpillDir is where those temporary files go. Default os.TempDir()
	// ($TMPDIR).
	SpillDir string
	// EarlyChanges also hands over the row changes of one streamed
	// transaction at a time while it streams (EventStreamChange, with
	// EventStreamUnfit, EventStreamAbort and EventStreamCommit), so that
	// the consumer may apply it before its commit. It is staged in memory
	// as well while it fits StageMemory, so that the consumer may still
	// have it whole at its commit; past that its staged records are
	// dropped instead of spilled, and a transaction the consumer then
	// cannot finish early ends the stream with a *RereadError (read it
	// again with the transaction in NotEarly).
	EarlyChanges bool
	// NotEarly lists transactions whose changes are not handed over early
	// (they are staged and handed over whole at their commit), those a
	// *RereadError named. Read only while the stream runs.
	NotEarly map[uint32]bool
	// EarlyDeclined, when set, is asked at the first block of each
	// streamed transaction: true while the consumer would decline its
	// changes early, so that it is staged from the start instead of being
	// handed over and read again. Called on the stream's goroutine.
	EarlyDeclined func() bool
	// EarlyGivenUp, when set, is asked before each change of the
	// transaction being handed over early: why the consumer gave that
	// transaction up (it could not write a change of it early, such as one
	// after a schema change), or "", so that the stream stops handing it
	// over then, not at its commit, and a transaction whose staged records
	// were dropped is read again (*RereadError) while the source may still
	// be writing it. Called on the stream's goroutine.
	EarlyGivenUp func(xid uint32) string
	// Logger receives debug messages. Default: discard.
	Logger *slog.Logger
}

// Stream is a running logical replication stream. One goroutine owns the
// connection; the consumer reads Events and calls Confirm.
type Stream struct {
	conn   *pgconn.PgConn
	cfg    StreamConfig
	log    *slog.Logger
	events chan []Event
	// pending are decoded events not handed over yet: the reader hands them
	// over as one slice when the socket has nothing more for it (or there
	// are handOverMax of them), so a catch-up wakes the consumer once per
	// read instead of once per change.
	pending []Event
	cancel  context.CancelFunc
	done    chan struct{}
	err     error

	confirmed  atomic.Uint64 // set by the consumer (Confirm)
	reported   atomic.Uint64 // confirmed position last sent to the source
	reportedOf atomic.Uint64 // the confirmed position that update was made of (before ConfirmLimit)
	statusDue  atomic.Bool   // ConfirmNow asked for a status update at once
	catchingUp atomic.Bool   // SetCatchingUp: read in gulps (see readGulp); the socket reader reads it too
	buffered   atomic.Int64  // bytes handed over and not yet released
	skippedTx  atomic.Int64  // transactions left out for their origin (a loop)
	space      chan struct{} // signalled by Release
	statsMu    sync.Mutex
	stats      StreamStats // of streamed transactions

	// Owned by the reader goroutine.
	relations      map[uint32]*change.Relation
	arena          arena // memory of decoded changes
	inTx           bool
	skipTx         bool            // the open transaction's origin closes a loop: its changes are left out
	originSeen     map[string]bool // pgmirror origins met, and whether they were left out (logged when that changes)
	lastCommitEnd  change.LSN      // end LSN of the last commit handed over
	inStream       bool            // between Stream Start and Stream Stop
	streamTx       *stagedTx       // the transaction of the open stream block
	streamed       map[uint32]*stagedTx
	earlyTx        *stagedTx  // the streamed transaction handed over early (EarlyChanges)
	stagedMem      int64      // bytes of streamed transactions staged in memory
	received       change.LSN // highest position received
	lastStatus     time.Time
	lastHeard      time.Time
	silenceAsked   bool
	statusInterval time.Duration
}

// StartStream starts replication on conn (a replication connection, see
// ConnectReplication) at cfg.StartLSN with pgoutput protocol version 1 (2
// with cfg.Streaming) and returns the running stream. From then on the
// stream owns conn until Close returns; the caller closes conn afterwards.
//
// A missing slot gives an error matching ErrSlotMissing, a slot with another
// consumer one matching ErrSlotInUse.
func StartStream(ctx context.Context, conn *pgconn.PgConn, cfg StreamConfig) (*Stream, error) {
	if err := ValidateName(cfg.Slot); err != nil {
		return nil, fmt.Errorf("start replication: slot: %w", err)
	}
	if err := ValidateName(cfg.Publication); err != nil {
		return nil, fmt.Errorf("start replication: publication: %w", err)
	}
	cfg.HeartbeatTimeout = cmp.Or(cfg.HeartbeatTimeout, 120*time.Second)
	cfg.StatusInterval = cmp.Or(cfg.StatusInterval, 3*time.Second)
	cfg.Buffer = cmp.Or(cfg.Buffer, 64)
	cfg.MaxBufferedBytes = cmp.Or(cfg.MaxBufferedBytes, 64<<20)
	cfg.StageMemory = cmp.Or(cfg.StageMemory, defaultStageMemory)
	cfg.SpillDir = cmp.Or(cfg.SpillDir, os.TempDir())
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Streaming {
		if err := lowerDecodingWorkMem(ctx, conn); err != nil {
			// Only how soon the source streams depends on it.
			logger.Warn("streaming sooner than the source's logical_decoding_work_mem is not possible", "slot", cfg.Slot, "error", err)
		}
	}
	err := pglogrepl.StartReplication(ctx, conn, cfg.Slot, pglogrepl.LSN(cfg.StartLSN), pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: pluginArgs(cfg),
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "42704":
				return nil, fmt.Errorf("start replication on slot %s: %w: %w", cfg.Slot, ErrSlotMissing, err)
			case "55006":
				return nil, fmt.Errorf("start replication on slot %s: %w: %w", cfg.Slot, ErrSlotInUse, err)
			}
		}
		return nil, fmt.Errorf("start replication on slot %s at %s: %w", cfg.Slot, cfg.StartLSN, err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Stream{
		conn:           conn,
		cfg:            cfg,
		log:            logger.With("slot", cfg.Slot),
		events:         make(chan []Event, cfg.Buffer),
		cancel:         cancel,
		done:           make(chan struct{}),
		space:          make(chan struct{}, 1),
		relations:      map[uint32]*change.Relation{},
		received:       cfg.StartLSN,
		lastCommitEnd:  cfg.StartLSN,
		statusInterval: cfg.StatusInterval,
	}
	s.confirmed.Store(uint64(cfg.StartLSN))
	if g := streamReaderOf(conn); g != nil {
		g.catchingUp = &s.catchingUp // before the stream's goroutine reads
	}
	go func() {
		defer close(s.done)
		defer close(s.events)
		defer s.dropAllStaged()
		s.err = s.run(runCtx)
	}()
	return s, nil
}

// Events returns the channel of decoded events, in order, handed over in
// slices (never empty): everything the stream read and decoded while more
// was already waiting in the socket. It is closed when the stream ends; Err
// then tells why.
func (s *Stream) Events() <-chan []Event { return s.events }

// Done is closed when the stream's goroutine has ended.
func (s *Stream) Done() <-chan struct{} { return s.done }

// Err returns why the stream ended (nil after Close). Call it only after
// Done is closed or Events is drained.
func (s *Stream) Err() error {
	<-s.done
	return s.err
}

// Confirm records that everything up to lsn (the end LSN of a transaction)
// is durably on the destination. The next standby status update reports it
// as flushed, which lets the source discard the WAL before it. Positions
// only move forward.
func (s *Stream) Confirm(lsn change.LSN) {
	if s.cfg.HoldConfirmed {
		return
	}
	for {
		old := s.confirmed.Load()
		if uint64(lsn) <= old || s.confirmed.CompareAndSwap(old, uint64(lsn)) {
			return
		}
	}
}

// While the consumer catches up, a read that had to wait for the
// walsender (longer than blockedRead) is followed by a pause of readGulp:
// the walsender then decodes more slowly than the stream reads, and reading
// each of its small messages as it comes costs a wake-up, an epoll wait and a
// read per message (most of a catch-up's CPU in the pgmirror process for
// single-row transactions). After the pause one read takes what gathered in
// the socket's buffer. The walsender does not wait meanwhile (the buffer
// holds far more than it sends in readGulp), and the consumer is behind by
// more than that anyway.
const (
	blockedRead = 100 * time.Microsecond
	readGulp    = time.Millisecond
)

// SetCatchingUp tells the stream whether its consumer is far behind the
// source (see readGulp). The consumer calls it as it learns it.
func (s *Stream) SetCatchingUp(on bool) {
	if s.catchingUp.Load() != on {
		s.catchingUp.Store(on)
	}
}

// ConfirmNow confirms lsn like Confirm and, when that moves the confirmed
// position past what the source was last told, has the stream send a
// standby status update at once instead of at the next StatusInterval: the
// source frees its WAL and sees the mirror caught up without delay. It wakes
// the reader goroutine by moving the socket's read deadline to now; the
// reader sends the update and waits again.
func (s *Stream) ConfirmNow(lsn change.LSN) {
	s.Confirm(lsn)
	if s.cfg.HoldConfirmed || s.confirmed.Load() <= s.reportedOf.Load() {
		return
	}
	// The flag is set before the deadline moves and the reader reads it
	// after setting its own deadline: either the reader sees the flag, or
	// this deadline comes after the reader's and interrupts its read.
	s.statusDue.Store(true)
	_ = s.conn.Conn().SetReadDeadline(time.Now())
}

// Release tells the stream that ev's memory is no longer needed (the
// change was written to the destination or dropped), so more changes may be
// handed over. Releasing an event more than once over-counts free memory.
//
// A reader that waits for memory is woken only once a quarter of
// MaxBufferedBytes is free again (resumeBelow), not at each release: behind
// a destination slower than the source, waking it for each change let it
// read one change and wait again, tens of thousands of goroutine wake-ups a
// second.
func (s *Stream) Release(ev Event) {
	if ev.Size == 0 {
		return
	}
	if s.buffered.Add(-int64(ev.Size)) > s.resumeBelow() {
		return
	}
	select {
	case s.space <- struct{}{}:
	default:
	}
}

// resumeBelow is the memory in use under which a reader waiting for
// memory goes on: three quarters of MaxBufferedBytes.
func (s *Stream) resumeBelow() int64 {
	return int64(s.cfg.MaxBufferedBytes) - int64(s.cfg.MaxBufferedBytes)/4
}

// SkippedTransactions returns how many source transactions the stream left
// out because pgmirror applied them there (their replication origin is one
// of pgmirror's, see engine/origin): their Begin and Commit events arrive
// without changes.
func (s *Stream) SkippedTransactions() int64 { return s.skippedTx.Load() }

// Confirmed returns the position last confirmed.
func (s *Stream) Confirmed() change.LSN { return change.LSN(s.confirmed.Load()) }

// closeDrain bounds how long Close waits for the walsender to end the
// replication command after the last status update.
const closeDrain = 2 * time.Second

// Close stops the stream's goroutine and waits for it. It sends a last
// status update with the confirmed position and then ends the COPY with
// CopyDone, reading (and dropping) what the walsender still sends until it
// ends the command too, for at most closeDrain: the walsender reads its
// client's messages in order, so the status update is taken in before the
// command ends. Closing the socket right after the update instead could
// lose it: a socket closed with unread data sends a reset, and the
// walsender's system may drop the update unread. The connection is left to
// the caller, who should close it.
func (s *Stream) Close() {
	s.cancel()
	_ = s.conn.Conn().SetReadDeadline(time.Now())
	<-s.done
	if s.conn.IsClosed() {
		return
	}
	if err := s.sendStatus(false); err != nil {
		return
	}
	_ = s.conn.Conn().SetDeadline(time.Now().Add(closeDrain))
	_, _ = pglogrepl.SendStandbyCopyDone(context.Background(), s.conn)
	_ = s.conn.Conn().SetDeadline(time.Time{})
}

func (s *Stream) run(ctx context.Context) error {
	ticker := time.NewTicker(s.statusInterval / 2)
	defer ticker.Stop()
	s.lastHeard = time.Now()
	if err := s.sendStatus(false); err != nil {
		return err
	}
	// The read deadline is set on the socket and only when it changes: a
	// context per message (and pgconn's watcher for it) cost a fifth of the
	// CPU of a busy stream. Close interrupts a waiting read by moving the
	// deadline to now.
	var readDeadline time.Time
	timedOut := false // the last read ended at the deadline
	heard := false    // the last read returned a message
	defer func() { _ = s.conn.Conn().SetReadDeadline(time.Time{}) }()
	for {
		// One clock reading per message (a reading costs tens of
		// nanoseconds, several per message were a tenth of a busy
		// stream's CPU). The message just read, and any wait for the
		// consumer while it was handled, count as heard now.
		now := time.Now()
		if heard {
			s.lastHeard, s.silenceAsked, heard = now, false, false
		}
		if err := s.maybeSendStatus(now); err != nil {
			return err
		}
		silence := now.Sub(s.lastHeard)
		if silence > s.cfg.HeartbeatTimeout {
			return fmt.Errorf("slot %s: nothing received for %s: %w", s.cfg.Slot, silence.Round(time.Second), ErrHeartbeatTimeout)
		}
		if deadline := s.readDeadline(); !deadline.Equal(readDeadline) {
			if err := s.conn.Conn().SetReadDeadline(deadline); err != nil {
				return fmt.Errorf("slot %s: set read deadline: %w", s.cfg.Slot, err)
			}
			readDeadline = deadline
		}
		if ctx.Err() != nil {
			return nil
		}
		if s.statusDue.Swap(false) {
			if err := s.sendStatus(false); err != nil {
				return err
			}
			continue
		}
		// Hand the decoded events over before a read that may wait: when
		// pgconn has no more bytes buffered. (After a timeout pgconn may
		// still be reading in the background: then do not ask it.) Not in
		// the middle of a transaction, though: the walsender sends one
		// once its commit is decoded, its messages one after the other,
		// each flushed on its own, so the socket is often empty between
		// them; the consumer can do nothing with a part before the commit,
		// and a live stream of small transactions would wake it three
		// times per transaction instead of once. handOverMax and the
		// memory bound (emit) still hand a large one over in parts.
		gulp := s.catchingUp.Load()
		if len(s.pending) > 0 && (timedOut || !s.inTx && s.conn.Frontend().ReadBufferLen() == 0) {
			if err := s.handOver(ctx, ticker); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if gulp {
				now = time.Now() // the hand-over may have waited
			}
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		timedOut = false
		if err == nil && gulp && time.Since(now) > blockedRead {
			time.Sleep(readGulp)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				timedOut = true
				// ConfirmNow may have moved the socket's deadline: set ours
				// again on the next round.
				readDeadline = time.Time{}
				continue
			}
			return fmt.Errorf("receive from slot %s: %w", s.cfg.Slot, err)
		}
		heard = true
		if err := s.receive(ctx, ticker, msg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// readDeadline is when the next read must give up waiting: when the next
// standby status is due, or just after the heartbeat timeout if that comes
// first.
func (s *Stream) readDeadline() time.Time {
	deadline := s.lastStatus.Add(s.statusInterval)
	if hb := s.lastHeard.Add(s.cfg.HeartbeatTimeout); hb.Before(deadline) {
		deadline = hb.Add(time.Millisecond)
	}
	return deadline
}

// receive handles one message of the replication connection.
func (s *Stream) receive(ctx context.Context, ticker *time.Ticker, msg pgproto3.BackendMessage) error {
	switch msg := msg.(type) {
	case *pgproto3.CopyData:
		// Time spent waiting for the consumer is not silence: the loop
		// takes the message as heard once it is handled.
		if err := s.handleCopyData(ctx, ticker, msg.Data); err != nil {
			return err
		}
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("slot %s: server error: %w", s.cfg.Slot, pgconn.ErrorResponseToPgError(msg))
	case *pgproto3.CopyDone:
		return fmt.Errorf("slot %s: the server ended the replication stream", s.cfg.Slot)
	case *pgproto3.NoticeResponse, *pgproto3.ParameterStatus:
	default:
		return fmt.Errorf("slot %s: unexpected message %T", s.cfg.Slot, msg)
	}
	return nil
}

// maybeSendStatus sends a standby status update when one is due at now.
// When the stream has been silent for a third of the heartbeat timeout it
// asks the server to reply, so an idle but healthy server is heard from.
func (s *Stream) maybeSendStatus(now time.Time) error {
	if now.Sub(s.lastStatus) < s.statusInterval {
		return nil
	}
	ask := !s.silenceAsked && now.Sub(s.lastHeard) > s.cfg.HeartbeatTimeout/3
	if ask {
		s.silenceAsked = true
	}
	return s.sendStatus(ask)
}

// sendStatus reports write = received, flush = apply = confirmed.
func (s *Stream) sendStatus(replyRequested bool) error {
	wanted := change.LSN(s.confirmed.Load())
	confirmed := wanted
	if s.cfg.ConfirmLimit != nil {
		confirmed = min(confirmed, s.cfg.ConfirmLimit(confirmed))
	}
	write := max(s.received, confirmed)
	if confirmed == 0 {
		// pglogrepl replaces a zero flush position with the write position:
		// never let it confirm what is not applied.
		write = 0
	}
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(write),
		WALFlushPosition: pglogrepl.LSN(confirmed),
		WALApplyPosition: pglogrepl.LSN(confirmed),
		ReplyRequested:   replyRequested,
	})
	if err != nil {
		return fmt.Errorf("send standby status to slot %s: %w", s.cfg.Slot, err)
	}
	s.reported.Store(uint64(confirmed))
	s.reportedOf.Store(uint64(wanted))
	s.lastStatus = time.Now()
	return nil
}

func (s *Stream) handleCopyData(ctx context.Context, ticker *time.Ticker, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("slot %s: parse keepalive: %w", s.cfg.Slot, err)
		}
		walEnd := change.LSN(ka.ServerWALEnd)
		// Idle: no transaction open and everything handed over is on the
		// destination, so nothing of ours lies before the server's WAL end.
		if !s.inTx && !s.inStream && !s.cfg.HoldConfirmed && change.LSN(s.confirmed.Load()) >= s.lastCommitEnd && walEnd > s.lastCommitEnd {
			s.Confirm(walEnd)
			s.lastCommitEnd = walEnd
			s.received = max(s.received, walEnd)
		}
		if ka.ReplyRequested {
			return s.sendStatus(false)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("slot %s: parse XLogData: %w", s.cfg.Slot, err)
		}
		if len(xld.WALData) > 0 && (s.cfg.Streaming || s.inStream) {
			handled, err := s.streamMessage(ctx, ticker, xld.WALData)
			if err != nil {
				return fmt.Errorf("slot %s at %s: %w", s.cfg.Slot, change.LSN(xld.WALStart), err)
			}
			if handled {
				return nil
			}
		}
		ev, ok, err := s.decode(xld.WALData)
		if err != nil {
			return fmt.Errorf("slot %s at %s: %w", s.cfg.Slot, change.LSN(xld.WALStart), err)
		}
		if !ok {
			return nil
		}
		return s.emit(ctx, ticker, ev)
	}
	return nil
}

// emit queues ev for the consumer, first waiting (and sending status
// updates meanwhile) while the changes handed over and not released exceed
// MaxBufferedBytes.
func (s *Stream) emit(ctx context.Context, ticker *time.Ticker, ev Event) error {
	if ev.Change != nil {
		ev.Size = ev.Change.Size()
		for s.buffered.Load() > 0 && s.buffered.Load()+int64(ev.Size) > int64(s.cfg.MaxBufferedBytes) {
			// What waits for memory is not handed over yet: hand it over,
			// so that the consumer can work on it and release memory.
			if err := s.handOver(ctx, ticker); err != nil {
				return err
			}
			select {
			case <-s.space:
			case <-ticker.C:
				if err := s.maybeSendStatus(time.Now()); err != nil {
					return err
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s.buffered.Add(int64(ev.Size))
	}
	s.pending = append(s.pending, ev)
	if len(s.pending) >= handOverMax {
		return s.handOver(ctx, ticker)
	}
	return nil
}

// handOverMax bounds the events handed over in one slice.
const handOverMax = 256

// handOver gives the pending events to the consumer, sending status updates
// while the channel is full.
func (s *Stream) handOver(ctx context.Context, ticker *time.Ticker) error {
	if len(s.pending) == 0 {
		return nil
	}
	evs := s.pending
	s.pending = make([]Event, 0, min(2*len(evs), handOverMax))
	select {
	case s.events <- evs:
		return nil
	default:
	}
	for {
		select {
		case s.events <- evs:
			return nil
		case <-ticker.C:
			if err := s.maybeSendStatus(time.Now()); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
