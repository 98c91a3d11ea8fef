package cdc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/session"
)

// pollRegistry is the part SourceWatch and DestWatch have in common: a set,
// shared by the runs of one process, of pollers that each follow one
// database (host, port, database and user: see connKey) on one connection
// for the runs that joined it. A poller starts with the first run of its
// database and stops when the last one leaves; its connection is made with
// the configuration of the newest run to join, so that a run that joins
// after a peer's password changed brings the new password, which the next
// reconnection uses.
//
// K is a run's handle (what leaves), V what the poller keeps of each run,
// and P the poller, which embeds a *sharedPoll[K, V]. The zero value is not
// usable: use newPollRegistry.
type pollRegistry[K comparable, V any, P sharedPoller[K, V]] struct {
	mu    sync.Mutex
	polls map[string]P
}

// sharedPoller is what a pollRegistry needs of a poller.
type sharedPoller[K comparable, V any] interface {
	// base is the poller's shared part (promoted from its embedded
	// *sharedPoll).
	base() *sharedPoll[K, V]
	// run polls until ctx ends, which it does when the last run leaves.
	run(ctx context.Context)
}

// sharedPoll is the shared part of one poller: the runs that joined it,
// the configuration its connection uses and its lifetime.
type sharedPoll[K comparable, V any] struct {
	key string
	// log is the first run's logger.
	log *slog.Logger
	// registry is where the poller is registered, for leave.
	registry interface {
		leave(s *sharedPoll[K, V], sub K)
	}

	// mu guards cfg and subs (and a poller may guard the values of subs
	// with it).
	mu sync.Mutex
	// cfg is the connection's configuration, the newest run's.
	cfg     *pgx.ConnConfig
	subs    map[K]V
	stopped chan struct{} // closed when the last run leaves
	done    chan struct{} // closed when run has returned
}

// newPollRegistry returns an empty registry.
func newPollRegistry[K comparable, V any, P sharedPoller[K, V]]() pollRegistry[K, V, P] {
	return pollRegistry[K, V, P]{polls: map[string]P{}}
}

// connKey names the database cfg connects to as the user it connects as:
// the runs whose configurations have the same key share a poller.
func connKey(cfg *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s/%s", cfg.Host, cfg.Port, cfg.Database, cfg.User)
}

// count is the number of pollers (one connection each).
func (r *pollRegistry[K, V, P]) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.polls)
}

// join adds a run on cfg's database to its poller, starting the poller with
// newPoller if this is the database's first run; newSub makes the run's
// handle and what the poller keeps of it. cfg becomes the configuration of
// the poller's next connection. log may be nil.
func (r *pollRegistry[K, V, P]) join(cfg *pgx.ConnConfig, log *slog.Logger,
	newPoller func(*sharedPoll[K, V]) P, newSub func(P) (K, V)) K {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key := connKey(cfg)
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.polls[key]
	if !ok {
		s := &sharedPoll[K, V]{key: key, log: log, registry: r, cfg: cfg.Copy(), subs: map[K]V{},
			stopped: make(chan struct{}), done: make(chan struct{})}
		p = newPoller(s)
		r.polls[key] = p
		go s.start(p.run)
	}
	sub, v := newSub(p)
	s := p.base()
	s.mu.Lock()
	s.cfg = cfg.Copy()
	s.subs[sub] = v
	s.mu.Unlock()
	return sub
}

// leave removes sub from s; the last run to leave stops the poller.
func (r *pollRegistry[K, V, P]) leave(s *sharedPoll[K, V], sub K) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s.mu.Lock()
	delete(s.subs, sub)
	last := len(s.subs) == 0
	s.mu.Unlock()
	if last {
		delete(r.polls, s.key)
		close(s.stopped)
	}
}

// base returns s (see sharedPoller).
func (s *sharedPoll[K, V]) base() *sharedPoll[K, V] { return s }

// leave removes sub; the last run to leave stops the poller.
func (s *sharedPoll[K, V]) leave(sub K) { s.registry.leave(s, sub) }

// start runs the poll until the last run leaves.
func (s *sharedPoll[K, V]) start(run func(context.Context)) {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stopped
		cancel()
	}()
	run(ctx)
}

// connect opens the poller's connection with the newest run's
// configuration, giving up after 10 seconds.
func (s *sharedPoll[K, V]) connect(ctx context.Context) (*pgx.Conn, error) {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	return session.Connect(connectCtx, cfg)
}

// statementContext is the context of one short statement of a poll, a
// heartbeat or a flush: it ends after timeout, but not when ctx is
// cancelled. A run that stops (or the last run leaving a shared poller)
// lets the statement in flight finish, a matter of milliseconds, instead
// of cancelling it: a cancelled statement is an ERROR line ("canceling
// statement due to user request") in the peer's server log, where DBAs'
// alerts look.
func statementContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}
