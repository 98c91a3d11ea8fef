package cdc

import (
	"sync"

	"github.com/jackc/pgx/v5"
)

// Sessions are open sessions on a run's source and destination, handed to
// Run by a caller that opened them with session.Connect for its own setup
// (the mirror run's preparation), so that the stream does not open two more
// right after it closed two: starting a hundred mirrors at once (a replica's
// takeover) costs a connection, a backend and its catalog caches fewer per
// peer and mirror. The first stream run takes them (and closes them as its
// own); a stream started again connects anew.
type Sessions struct {
	mu       sync.Mutex
	src, dst *pgx.Conn
}

// NewSessions hands src and dst (either may be nil) to the first run that
// takes them.
func NewSessions(src, dst *pgx.Conn) *Sessions {
	return &Sessions{src: src, dst: dst}
}

// take returns the sessions not taken yet; nil-safe.
func (s *Sessions) take() (src, dst *pgx.Conn) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	src, dst = s.src, s.dst
	s.src, s.dst = nil, nil
	if src != nil && src.IsClosed() {
		src = nil
	}
	if dst != nil && dst.IsClosed() {
		dst = nil
	}
	return src, dst
}

// Close closes the sessions no run took.
func (s *Sessions) Close() {
	src, dst := s.take()
	for _, c := range []*pgx.Conn{src, dst} {
		if c != nil {
			closeQuietly(c)
		}
	}
}
