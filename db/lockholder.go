package db

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// LockHolder is the one catalog connection of a replica that holds the
// session advisory locks of every mirror the replica runs, so that the
// catalog connections of a replica do not grow with its mirrors. On the same
// connection it listens for control requests (pause, resume, delete, table
// actions), which it hands to the runs that subscribed, and it reports the
// replica in the replicas table every few seconds (which also finds out
// early that the connection died).
//
// When the connection dies, every lock it held is gone at once: each
// MirrorLock's Lost channel closes, and the holder connects again (every
// second) so that runs can take their locks back (jobs/catalog_outage.go).
type LockHolder struct {
	name    string
	workers int
	cfg     *pgx.ConnConfig
	logger  *slog.Logger
	reqs    chan holderReq

	mu      sync.Mutex
	lost    chan struct{}  // closed when the current connection dies; nil while there is none
	held    map[int64]bool // locks held on the current connection
	trying  map[int64]bool // locks being taken
	subs    map[int64]map[chan struct{}]struct{}
	stopped chan struct{}
	retired atomic.Bool  // shutting down: no longer reported as a replica
	backAt  atomic.Int64 // when the connection was made again after one died (UnixNano; 0 before)

	jobClient    string   // the replica's River client id (SetJobClientID)
	predecessors []string // River client ids of earlier processes of the same name (TakePredecessors)
}

// holderReq is a statement to run on the holder's connection.
type holderReq struct {
	ctx  context.Context
	run  func(ctx context.Context, conn *pgx.Conn) error
	done chan error
}

// ReplicaReportEvery is how often a replica reports itself in the replicas
// table.
const ReplicaReportEvery = 5 * time.Second

// ReplicaLiveFor is how long after its last report a replica counts as
// live (its lock connection may have died without anybody noticing yet).
const ReplicaLiveFor = 20 * time.Second

// errHolderDown is returned while the holder has no catalog connection.
var errHolderDown = errors.New("the catalog connection that holds mirror locks is down; it is being reconnected")

// NewLockHolder returns the lock holder of the replica name, which runs up
// to workers mirrors, connecting with cfg (a copy of the catalog pool's
// connection configuration). Start it with Run.
func NewLockHolder(name string, workers int, cfg *pgx.ConnConfig, logger *slog.Logger) *LockHolder {
	return &LockHolder{name: name, workers: max(1, workers), cfg: cfg, logger: logger, reqs: make(chan holderReq),
		held: map[int64]bool{}, trying: map[int64]bool{}, subs: map[int64]map[chan struct{}]struct{}{}, stopped: make(chan struct{})}
}

// SetJobClientID records the replica's River client id in its row of the
// replicas table, so that the jobs it leaves running when it dies can be
// told and rescued (Store.BuryReplica). Call it before Run.
func (h *LockHolder) SetJobClientID(id string) { h.jobClient = id }

// TakePredecessors returns, once, the River client ids found in the
// replica's row from an earlier process of the same name (a container
// restarted with the same host name and pid): that process is dead, and
// the jobs it left running are to be rescued (Store.RescueJobsOf).
func (h *LockHolder) TakePredecessors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.predecessors
	h.predecessors = nil
	return out
}

// Name is the replica's name, shown as the worker of the mirrors it runs.
func (h *LockHolder) Name() string { return h.name }

// Run keeps the holder's connection up until ctx ends, then removes the
// replica from the replicas table (its locks go with the connection).
func (h *LockHolder) Run(ctx context.Context) {
	defer close(h.stopped)
	var pending *holderReq // a request that came while the connection was down
	lostOne := false       // a connection was made and died before
	for ctx.Err() == nil {
		conn, err := h.connect(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.logger.Debug("connect the mirror lock connection to the catalog", "error", err)
			}
			if pending != nil {
				pending.done <- errHolderDown
			}
			pending = h.waitDown(ctx)
			continue
		}
		h.mu.Lock()
		h.lost = make(chan struct{})
		h.mu.Unlock()
		if lostOne {
			h.backAt.Store(time.Now().UnixNano())
		}
		h.wakeAll() // control requests may have been missed meanwhile
		h.serve(ctx, conn, pending)
		pending = nil
		h.mu.Lock()
		close(h.lost)
		h.lost = nil
		h.held = map[int64]bool{}
		h.mu.Unlock()
		if ctx.Err() != nil {
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = conn.Exec(closeCtx, `DELETE FROM replicas WHERE name = $1`, h.name)
			_ = conn.Close(closeCtx)
			cancel()
			return
		}
		lostOne = true
		h.logger.Warn("the catalog connection holding the mirror locks died; reconnecting")
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}
	if pending != nil {
		pending.done <- errHolderDown
	}
}

// waitDown waits while the connection is down: a fifth of a second at
// least (requests answered with errHolderDown), then until a second has
// passed or a request comes, which it returns so that the next connection
// attempt serves it at once.
func (h *LockHolder) waitDown(ctx context.Context) *holderReq {
	least := time.NewTimer(200 * time.Millisecond)
	defer least.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-least.C:
			most := time.NewTimer(800 * time.Millisecond)
			defer most.Stop()
			select {
			case <-ctx.Done():
				return nil
			case <-most.C:
				return nil
			case req := <-h.reqs:
				return &req
			}
		case req := <-h.reqs:
			req.done <- errHolderDown
		}
	}
}

// Retire removes the replica from the replicas table for good, as its
// process begins to shut down: the other replicas stop leaving mirrors to it
// at once. The locks it holds stay until their runs release them.
func (h *LockHolder) Retire(ctx context.Context) {
	h.retired.Store(true)
	err := h.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		return h.report(ctx, conn)
	})
	if err != nil {
		h.logger.Debug("remove the replica from the replicas table", "error", err)
	}
}

// Done is closed when Run has returned.
func (h *LockHolder) Done() <-chan struct{} { return h.stopped }

func (h *LockHolder) connect(ctx context.Context) (*pgx.Conn, error) {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(connectCtx, h.cfg.Copy())
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(connectCtx, `LISTEN pgmirror_mirror_control`); err != nil {
		_ = conn.Close(connectCtx)
		return nil, err
	}
	if err := h.report(connectCtx, conn); err != nil {
		_ = conn.Close(connectCtx)
		return nil, err
	}
	return conn, nil
}

// report writes the replica's row: its lock connection's pid, its worker
// cap, the mirrors it runs and the time.
func (h *LockHolder) report(ctx context.Context, conn *pgx.Conn) error {
	if h.retired.Load() {
		_, err := conn.Exec(ctx, `DELETE FROM replicas WHERE name = $1`, h.name)
		return err
	}
	h.mu.Lock()
	running := len(h.held)
	h.mu.Unlock()
	// The row's previous job client id comes back (the CTE reads the row
	// as it was): another one is an earlier, dead process of this name.
	var previous *string
	err := conn.QueryRow(ctx, `WITH old AS (SELECT job_client_id FROM replicas WHERE name = $1)
		INSERT INTO replicas (name, lock_pid, mirror_workers, running, seen_at, job_client_id)
		VALUES ($1, pg_backend_pid(), $2, $3, now(), nullif($4, ''))
		ON CONFLICT (name) DO UPDATE SET lock_pid = EXCLUDED.lock_pid, mirror_workers = EXCLUDED.mirror_workers,
			running = EXCLUDED.running, seen_at = EXCLUDED.seen_at, job_client_id = EXCLUDED.job_client_id
		RETURNING (SELECT job_client_id FROM old)`, h.name, h.workers, running, h.jobClient).Scan(&previous)
	if err == nil && h.jobClient != "" && previous != nil && *previous != h.jobClient {
		h.mu.Lock()
		h.predecessors = append(h.predecessors, *previous)
		h.mu.Unlock()
	}
	return err
}

// serve runs requests and waits for notifications on conn until it dies
// or ctx ends. It reports the replica every ReplicaReportEvery, and forgets
// replicas silent for an hour every so often.
func (h *LockHolder) serve(ctx context.Context, conn *pgx.Conn, pending *holderReq) {
	if pending != nil {
		pending.done <- pending.run(pending.ctx, conn)
	}
	lastReport, lastPrune := time.Now(), time.Time{}
	for ctx.Err() == nil && !conn.IsClosed() {
		if time.Since(lastReport) >= ReplicaReportEvery {
			reportCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := h.report(reportCtx, conn)
			if err == nil && time.Since(lastPrune) > time.Minute {
				_, err = conn.Exec(reportCtx, `DELETE FROM replicas WHERE seen_at < now() - interval '1 hour'`)
				lastPrune = time.Now()
			}
			cancel()
			if err != nil {
				// A connection that cannot report cannot be trusted with
				// locks either: start over on a new one.
				h.logger.Debug("report the replica", "error", err)
				return
			}
			lastReport = time.Now()
		}
		waitCtx, cancel := context.WithTimeout(ctx, time.Until(lastReport.Add(ReplicaReportEvery)))
		var req *holderReq
		stop, watched := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case r := <-h.reqs:
				req = &r
				cancel()
			case <-stop:
			}
		}()
		n, err := conn.WaitForNotification(waitCtx)
		close(stop)
		<-watched
		cancel()
		if err == nil && n != nil {
			if id, perr := strconv.ParseInt(n.Payload, 10, 64); perr == nil {
				h.wake(id)
			}
		}
		if req != nil {
			req.done <- req.run(req.ctx, conn)
		}
	}
}

// do runs fn on the holder's connection.
func (h *LockHolder) do(ctx context.Context, fn func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	select {
	case h.reqs <- holderReq{ctx: ctx, run: fn, done: done}:
	case <-ctx.Done():
		return fmt.Errorf("wait for the mirror lock connection: %w", ctx.Err())
	case <-h.stopped:
		return errHolderDown
	}
	return <-done
}

// TryLock takes the mirror's lock on the holder's connection without
// waiting. It returns nil and no error when another session holds it, or
// when this replica holds it already (another run of the mirror here).
func (h *LockHolder) TryLock(ctx context.Context, mirrorID int64) (*MirrorLock, error) {
	h.mu.Lock()
	if h.held[mirrorID] || h.trying[mirrorID] {
		h.mu.Unlock()
		return nil, nil
	}
	h.trying[mirrorID] = true // session locks nest: keep a second run here from taking it too
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.trying, mirrorID)
		h.mu.Unlock()
	}()
	var ok bool
	var lost chan struct{}
	err := h.do(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, $2)", int32(mirrorLockClass), int32(mirrorID)).Scan(&ok); err != nil {
			return err
		}
		if ok {
			h.mu.Lock()
			h.held[mirrorID] = true
			lost = h.lost
			h.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("try lock of mirror %d: %w", mirrorID, translate(err))
	}
	if !ok {
		return nil, nil
	}
	return &MirrorLock{holder: h, lost: lost, mirrorID: mirrorID}, nil
}

// unlock releases a lock taken by TryLock, unless its connection is gone.
func (h *LockHolder) unlock(l *MirrorLock) {
	h.mu.Lock()
	if h.lost != l.lost || !h.held[l.mirrorID] {
		h.mu.Unlock()
		return
	}
	delete(h.held, l.mirrorID)
	h.mu.Unlock()
	err := h.do(context.Background(), func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1, $2)", int32(mirrorLockClass), int32(l.mirrorID))
		if err != nil {
			// A lock that cannot be released must not stay behind:
			// the connection goes, and its locks with it.
			_ = conn.Close(ctx)
		}
		return err
	})
	if err != nil {
		h.logger.Debug("release mirror lock", "mirror_id", l.mirrorID, "error", err)
	}
}

// BackSince is when the holder's connection was made again after one had
// died (the zero time if none died): until the replicas' runs have taken
// their locks back, counts of locks are not yet what they will be.
func (h *LockHolder) BackSince() time.Time {
	if at := h.backAt.Load(); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// Running is how many mirror locks the holder holds.
func (h *LockHolder) Running() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// Held returns the ids of the mirrors whose locks the replica holds, in
// order (for the log of a decision that counted them).
func (h *LockHolder) Held() []int64 {
	h.mu.Lock()
	ids := make([]int64, 0, len(h.held))
	for id := range h.held {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	slices.Sort(ids)
	return ids
}

// Subscribe returns a channel that receives a signal when a control request
// for the mirror arrives (and after the connection was made again), and the
// function that ends the subscription.
func (h *LockHolder) Subscribe(mirrorID int64) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs[mirrorID] == nil {
		h.subs[mirrorID] = map[chan struct{}]struct{}{}
	}
	h.subs[mirrorID][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.subs[mirrorID], ch)
		if len(h.subs[mirrorID]) == 0 {
			delete(h.subs, mirrorID)
		}
	}
}

func (h *LockHolder) wake(mirrorID int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[mirrorID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (h *LockHolder) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.subs {
		for ch := range subs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}
