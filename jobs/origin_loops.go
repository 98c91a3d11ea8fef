package jobs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/db/dbident"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// This file decides which of pgmirror's replication origins a mirror's
// stream leaves out (engine/origin.Filter): the origins of the mirrors that
// close a loop with it (origin.LoopMirrors), over the graph of every
// mirror in the catalog, whatever its status. The databases are told apart
// as the API's loop check tells them: the same peer, or peers with the same
// host, port and database name, or peers whose servers report the same
// database (engine dbident); a peer that cannot be reached is compared by
// host, port and database name only. The filter is computed when a run
// prepares, again at each control check of the run (a control request and
// the poll every controlPollEvery), and when the stream meets an origin of
// a mirror it did not know (a mirror created since).

// peerIdentityTTL is how long a peer's database identity is reused before
// its server is asked again; peerUnreachableTTL the same for a peer that
// could not be asked.
const (
	peerIdentityTTL    = 10 * time.Minute
	peerUnreachableTTL = time.Minute
	peerIdentifyWait   = 5 * time.Second
)

// identifiedPeer is what a peer's server said about its database (ok), or
// that it could not be asked.
type identifiedPeer struct {
	settings string // the peer's connection settings when it was asked
	id       dbident.Identity
	ok       bool
	until    time.Time
}

// peerIdentities caches identifiedPeer by peer id, for the whole process.
var peerIdentities sync.Map

// peerSettings is what a cached identity depends on.
func peerSettings(p db.Peer) string {
	return fmt.Sprintf("%s\x00%d\x00%s\x00%s\x00%v", p.Host, p.Port, p.Database, p.User, p.UpdatedAt)
}

// rememberIdentity caches the identity of p read over an open connection.
func rememberIdentity(ctx context.Context, p db.Peer, conn *pgx.Conn) {
	id, err := dbident.Of(ctx, conn)
	if err == nil {
		peerIdentities.Store(p.ID, identifiedPeer{settings: peerSettings(p), id: id, ok: true, until: time.Now().Add(peerIdentityTTL)})
	}
}

// identify returns p's database identity, from the cache or its server.
func identify(ctx context.Context, p db.Peer) identifiedPeer {
	settings := peerSettings(p)
	if v, ok := peerIdentities.Load(p.ID); ok {
		if c := v.(identifiedPeer); c.settings == settings && time.Now().Before(c.until) {
			return c
		}
	}
	c := identifiedPeer{settings: settings, until: time.Now().Add(peerUnreachableTTL)}
	cctx, cancel := context.WithTimeout(ctx, peerIdentifyWait)
	defer cancel()
	if conn, err := connectPeer(cctx, "peer", p); err == nil {
		if c.id, err = dbident.Of(cctx, conn); err == nil {
			c.ok, c.until = true, time.Now().Add(peerIdentityTTL)
		}
		closeConn(conn)
	}
	if ctx.Err() == nil {
		peerIdentities.Store(p.ID, c)
	}
	return c
}

// sameDatabase reports whether peers a and b name one database.
func sameDatabase(a, b db.Peer, ia, ib identifiedPeer) bool {
	if a.ID == b.ID || (strings.EqualFold(a.Host, b.Host) && a.Port == b.Port && a.Database == b.Database) {
		return true
	}
	return ia.ok && ib.ok && dbident.Same(ia.id, ib.id)
}

// originLoops keeps a run's origin filter up to date.
type originLoops struct {
	store  loopReader
	uid    string
	run    *mirrorRun
	filter *origin.Filter

	mu      sync.Mutex // one refresh at a time
	dropped []string   // names of the mirrors left out, as last logged
}

// originFilter returns the run's origin filter, created on first use.
func (r *mirrorRun) originFilter(uid string) *originLoops {
	r.loopsOnce.Do(func() {
		l := &originLoops{store: r.store, uid: uid, run: r}
		l.filter = origin.NewFilter(l.refresh)
		r.loops.Store(l)
	})
	return r.loops.Load()
}

// refreshSoon refreshes the filter in the background, unless a refresh
// runs already: a control check must not wait for peers' servers.
func (l *originLoops) refreshSoon(ctx context.Context) {
	if !l.mu.TryLock() {
		return
	}
	go func() {
		defer l.mu.Unlock()
		_ = l.refreshLocked(ctx)
	}()
}

// refresh computes which mirrors close a loop with the run's mirror and
// sets the filter.
func (l *originLoops) refresh(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refreshLocked(ctx)
}

// refreshLocked is refresh with l.mu held.
func (l *originLoops) refreshLocked(ctx context.Context) error {
	ends, err := l.store.MirrorEnds(ctx)
	if err != nil {
		return err
	}
	peers, err := l.store.PeerList(ctx)
	if err != nil {
		return err
	}
	byID := map[int64]db.Peer{}
	for _, p := range peers {
		byID[p.ID] = p
	}
	var used []int64
	for _, e := range ends {
		for _, id := range []int64{e.SourcePeerID, e.DestinationPeerID} {
			if _, ok := byID[id]; ok && !slices.Contains(used, id) {
				used = append(used, id)
			}
		}
	}
	slices.Sort(used)
	ids := make([]identifiedPeer, len(used))
	var wg sync.WaitGroup
	for i, id := range used {
		wg.Go(func() { ids[i] = identify(ctx, byID[id]) })
	}
	wg.Wait()
	// Each peer's database: the first peer before it naming the same one.
	class := map[int64]int{}
	for i, id := range used {
		class[id] = i
		for j := range i {
			if sameDatabase(byID[used[j]], byID[id], ids[j], ids[i]) {
				class[id] = class[used[j]]
				break
			}
		}
	}
	edges := make([]origin.Edge, 0, len(ends))
	known := make([]string, 0, len(ends))
	names := map[string]string{}
	for _, e := range ends {
		known = append(known, e.UID)
		names[e.UID] = e.Name
		from, okFrom := class[e.SourcePeerID]
		to, okTo := class[e.DestinationPeerID]
		if okFrom && okTo {
			edges = append(edges, origin.Edge{UID: e.UID, From: from, To: to})
		}
	}
	drop := origin.LoopMirrors(l.uid, edges)
	l.filter.Set(drop, known)
	dropped := make([]string, len(drop))
	for i, u := range drop {
		dropped[i] = names[u]
	}
	slices.Sort(dropped)
	if !slices.Equal(dropped, l.dropped) {
		l.dropped = dropped
		if len(dropped) > 0 {
			l.run.logger.Info("leaving out the writes of mirrors that close a loop with this one", "mirrors", dropped)
		}
	}
	return nil
}
