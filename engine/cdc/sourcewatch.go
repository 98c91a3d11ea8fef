package cdc

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
)

// SourceWatch shares, among the runs of one process, the work a run does
// on a plain source connection besides its replication stream: reading the
// source's WAL end (every sharedPollEvery) and writing heartbeats. Runs whose
// sources are the same database as the same user share one connection and
// one poll, so that a hundred mirrors of one source cost one poll, not a
// hundred. A heartbeat (a logical decoding message) is decoded by every
// slot of its database, so one heartbeat serves every run of that source.
//
// Set Config.SourceWatch to use it; without one a run polls on a
// connection of its own. The zero value is not usable: use NewSourceWatch.
type SourceWatch struct {
	polls pollRegistry[*sourcePosition, struct{}, *sharedSource]
}

// NewSourceWatch returns an empty SourceWatch.
func NewSourceWatch() *SourceWatch {
	return &SourceWatch{polls: newPollRegistry[*sourcePosition, struct{}, *sharedSource]()}
}

// Sources is the number of source databases being watched (one connection
// each).
func (w *SourceWatch) Sources() int {
	return w.polls.count()
}

// sharedPollEvery is how often a shared poll reads the source's WAL end. It
// only tells a catch-up from a live stream, for which a quarter of a second
// is fresh enough.
const sharedPollEvery = 250 * time.Millisecond

// sharedSource polls one source database for the runs that joined it (the
// keys of subs).
type sharedSource struct {
	*sharedPoll[*sourcePosition, struct{}]

	end            atomic.Uint64 // the WAL end at the last poll
	heartbeatEvery time.Duration // 0: none (or the source refused them)
	lastHeartbeat  time.Time
}

// join returns a position that follows the shared poll of cfg's database,
// starting it if this is its first run. The position's stop leaves.
func (w *SourceWatch) join(cfg *pgx.ConnConfig, heartbeatEvery time.Duration, log *slog.Logger) *sourcePosition {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return w.polls.join(cfg, log,
		func(poll *sharedPoll[*sourcePosition, struct{}]) *sharedSource {
			return &sharedSource{sharedPoll: poll, heartbeatEvery: heartbeatEvery}
		},
		func(s *sharedSource) (*sourcePosition, struct{}) {
			p := &sourcePosition{shared: s, stopped: make(chan struct{}), log: log, begun: make(chan struct{})}
			p.end.Store(s.end.Load())
			return p, struct{}{}
		})
}

// run polls the source every sharedPollEvery until the last run leaves,
// connecting again (at most every second) when the connection fails.
func (s *sharedSource) run(ctx context.Context) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			closeQuietly(conn)
		}
	}()
	tick := time.NewTicker(sharedPollEvery)
	defer tick.Stop()
	lastConnect := time.Time{}
	for {
		if conn == nil && time.Since(lastConnect) >= time.Second {
			lastConnect = time.Now()
			c, err := s.connect(ctx)
			if err == nil {
				conn = c
			} else if ctx.Err() == nil {
				s.log.Debug("connect to the source to follow its WAL position", "error", err.Error())
			}
		}
		if conn != nil {
			if err := s.poll(ctx, conn); err != nil {
				closeQuietly(conn)
				conn = nil
			} else if s.heartbeatEvery > 0 && time.Since(s.lastHeartbeat) >= s.heartbeatEvery {
				s.beat(ctx, conn)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (s *sharedSource) poll(ctx context.Context, conn *pgx.Conn) error {
	pollCtx, cancel := statementContext(ctx, 5*time.Second)
	defer cancel()
	lsn, err := readWALEnd(pollCtx, conn)
	if err != nil {
		return err
	}
	s.end.Store(uint64(lsn))
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.subs {
		p.end.Store(uint64(lsn))
	}
	return nil
}

// beat writes one heartbeat and hands it to every run of the source whose
// stream has begun (none have: no heartbeat).
func (s *sharedSource) beat(ctx context.Context, conn *pgx.Conn) {
	s.mu.Lock()
	begun := false
	for p := range s.subs {
		begun = begun || p.hasBegun()
	}
	s.mu.Unlock()
	if !begun {
		return
	}
	before := readInsertPosition(ctx, conn)
	s.lastHeartbeat = time.Now()
	lsn, err := writeHeartbeat(ctx, conn)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot write heartbeats on the source (pg_logical_emit_message); lag_seconds then only counts transactions received, and an idle mirror whose stream is stuck shows 0",
				"error", err.Error())
		}
		s.heartbeatEvery = 0
		return
	}
	after := readInsertPosition(ctx, conn)
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.subs {
		if p.hasBegun() {
			p.addHeartbeat(lsn, s.lastHeartbeat, before, after)
		}
	}
}

// readWALEnd reads the source's WAL end (its replay position on a standby).
func readWALEnd(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	var text string
	if err := conn.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()
		ELSE pg_current_wal_flush_lsn() END)::text`).Scan(&text); err != nil {
		return 0, err
	}
	return change.ParseLSN(text)
}

// writeHeartbeat writes a transactional logical decoding message, which
// every slot of the database delivers as a transaction of its own
// (pgoutput's messages option), and returns its position.
func writeHeartbeat(ctx context.Context, conn *pgx.Conn) (change.LSN, error) {
	beatCtx, cancel := statementContext(ctx, 5*time.Second)
	defer cancel()
	var text string
	if err := conn.QueryRow(beatCtx, `SELECT pg_logical_emit_message(true, 'pgmirror_heartbeat', '')::text`).Scan(&text); err != nil {
		return 0, err
	}
	return change.ParseLSN(text)
}
