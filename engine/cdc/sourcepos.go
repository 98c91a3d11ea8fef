package cdc

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// sourcePollEvery is how often the run reads the source's WAL position.
const sourcePollEvery = 100 * time.Millisecond

// sourcePosition follows the end of the source's WAL on a plain source
// connection, to tell a catch-up from a live stream. The replication stream
// itself cannot say: a logical walsender sends, as "WAL end" of a message,
// the position of that message (walsender.c, WalSndPrepareWrite), and in
// keepalives the position it has decoded up to, never the server's WAL end.
//
// It also writes the heartbeats (see Config.HeartbeatInterval) on the same
// connection and remembers those not yet seen coming back through the slot.
type sourcePosition struct {
	end     atomic.Uint64
	shared  *sharedSource // set when the position follows a SourceWatch's poll (conn is nil then)
	conn    *pgx.Conn
	stopped chan struct{}
	wg      sync.WaitGroup

	heartbeatEvery time.Duration // 0: no heartbeats
	log            *slog.Logger
	lastHeartbeat  time.Time
	begun          chan struct{} // closed by begin: heartbeats may start
	mu             sync.Mutex
	heartbeats     []heartbeat // written, not yet received; oldest first
	// known is the source position up to which nothing is pending for the
	// mirror: where the stream started (everything before is applied or
	// confirmed), then the end of each transaction received.
	known change.LSN
}

// heartbeat is one logical decoding message written on the source: the
// position of its record and when it was written.
type heartbeat struct {
	lsn change.LSN
	at  time.Time
	// pending: the source's WAL reached past the known position when the
	// heartbeat was written, so changes may wait before it and the lag
	// counts from it until it is received. A heartbeat written when the
	// source had nothing past the known position says nothing is pending
	// before it: it only waits to come back (which takes a while when the
	// stream starts, for instance after a restart).
	pending bool
}

// maxHeartbeats bounds the heartbeats remembered while the stream is far
// behind; the oldest is kept (it says how far behind).
const maxHeartbeats = 64

// watchSourcePosition polls conn every sourcePollEvery until stop; conn is
// closed then. A failed poll ends the polling quietly (the replication
// stream notices a lost source by itself); End then stays where it was.
// With heartbeatEvery > 0 it writes a heartbeat that often.
func watchSourcePosition(ctx context.Context, conn *pgx.Conn, heartbeatEvery time.Duration, log *slog.Logger) *sourcePosition {
	p := &sourcePosition{conn: conn, stopped: make(chan struct{}), heartbeatEvery: heartbeatEvery, log: log, begun: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(sourcePollEvery)
		defer tick.Stop()
		for {
			if err := p.poll(ctx); err != nil {
				return
			}
			if p.heartbeatEvery > 0 && time.Since(p.lastHeartbeat) >= p.heartbeatEvery && p.hasBegun() {
				p.beat(ctx)
			}
			select {
			case <-ctx.Done():
				return
			case <-p.stopped:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// begin sets the position the stream starts from, up to which nothing is
// pending (the lowest applied position, or the slot's confirmed position
// when that is higher), and lets the heartbeats start.
func (p *sourcePosition) begin(known change.LSN) {
	p.mu.Lock()
	p.known = max(p.known, known)
	p.mu.Unlock()
	close(p.begun)
}

func (p *sourcePosition) hasBegun() bool {
	select {
	case <-p.begun:
		return true
	default:
		return false
	}
}

func (p *sourcePosition) poll(ctx context.Context) error {
	pollCtx, cancel := statementContext(ctx, 5*time.Second)
	defer cancel()
	lsn, err := readWALEnd(pollCtx, p.conn)
	if err != nil {
		return err
	}
	p.end.Store(uint64(lsn))
	return nil
}

// beat writes a heartbeat: a transactional logical decoding message, which
// the slot delivers as a transaction of its own (pgoutput's messages
// option). A source that refuses it (a user without the right to call
// pg_logical_emit_message, a standby) gets no more heartbeats in this run
// and a warning; lag is then measured from received transactions only.
func (p *sourcePosition) beat(ctx context.Context) {
	// The source's WAL insert position just before the heartbeat: past the
	// known position, something may be pending before the heartbeat.
	before := readInsertPosition(ctx, p.conn)
	p.lastHeartbeat = time.Now()
	lsn, err := writeHeartbeat(ctx, p.conn)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("cannot write heartbeats on the source (pg_logical_emit_message); lag_seconds then only counts transactions received, and an idle mirror whose stream is stuck shows 0",
				"error", err.Error())
		}
		p.heartbeatEvery = 0
		return
	}
	// The WAL end just after it: a heartbeat with nothing pending before
	// it extends the known position over its own WAL, so that the next one
	// is not taken for a pending change while this one is on its way.
	after := readInsertPosition(ctx, p.conn)
	p.addHeartbeat(lsn, p.lastHeartbeat, before, after)
}

// addHeartbeat remembers a heartbeat written on the source at lsn, with
// the source's WAL insert positions just before and after it.
func (p *sourcePosition) addHeartbeat(lsn change.LSN, at time.Time, before, after change.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pending := before == 0 || before > p.known
	if !pending {
		p.known = max(p.known, after)
	}
	if len(p.heartbeats) < maxHeartbeats {
		p.heartbeats = append(p.heartbeats, heartbeat{lsn: lsn, at: at, pending: pending})
	}
}

// readInsertPosition reads the source's current WAL insert position (which,
// unlike the flush position, includes a commit just made even under
// synchronous_commit off); 0 when it cannot be read.
func readInsertPosition(ctx context.Context, conn *pgx.Conn) change.LSN {
	qctx, cancel := statementContext(ctx, 5*time.Second)
	defer cancel()
	var text string
	if err := conn.QueryRow(qctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&text); err != nil {
		return 0
	}
	lsn, err := change.ParseLSN(text)
	if err != nil {
		return 0
	}
	return lsn
}

// received forgets the heartbeats at or before end, the end of a
// transaction received from the slot.
func (p *sourcePosition) received(end change.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.known = max(p.known, end)
	n := 0
	for n < len(p.heartbeats) && p.heartbeats[n].lsn < end {
		n++
	}
	p.heartbeats = p.heartbeats[n:]
}

// oldestHeartbeat is when the oldest heartbeat not yet received that may
// have changes pending before it (heartbeat.pending) was written; zero when
// none is on its way.
func (p *sourcePosition) oldestHeartbeat() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.heartbeats {
		if h.pending {
			return h.at
		}
	}
	return time.Time{}
}

// End is the source's WAL end at the last poll (0 before the first).
func (p *sourcePosition) End() change.LSN { return change.LSN(p.end.Load()) }

// behind says how many bytes of source WAL lie past lsn, as far as known.
func (p *sourcePosition) behind(lsn change.LSN) uint64 {
	if end := p.End(); end > lsn {
		return uint64(end - lsn)
	}
	return 0
}

// stop ends the polling and closes the connection.
func (p *sourcePosition) stop() {
	if p.shared != nil {
		p.shared.leave(p)
		return
	}
	close(p.stopped)
	p.wg.Wait()
	closeQuietly(p.conn)
}
