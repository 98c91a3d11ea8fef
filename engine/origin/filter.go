package origin

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// MirrorUID returns the uid of the mirror whose origin name is (its
// applier's, Name, or one of its copy origins, Name + "_c" + a number),
// and false for a name that is not pgmirror's.
func MirrorUID(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok || rest == "" {
		return "", false
	}
	if i := strings.LastIndex(rest, "_c"); i > 0 && allDigits(rest[i+2:]) {
		return rest[:i], true
	}
	return rest, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Edge is one mirror of the mirror graph: it reads database From and
// writes database To (any two equal values name the same database).
type Edge struct {
	UID      string
	From, To int
}

// LoopMirrors returns the uids of the mirrors among edges that close a loop
// with mirror self: those that write self's source database and read a
// database that self's destination reaches through mirrors (self's
// destination itself, or any database a chain of mirrors carries it into).
// Their transactions on self's source came, directly or around a ring,
// from what self wrote, so self must leave them out. A mirror that writes
// self's source but reads a database self never feeds (the first mirror of
// a chain self continues) is not among them. Nil when self is not in edges.
func LoopMirrors(self string, edges []Edge) []string {
	var me *Edge
	for i := range edges {
		if edges[i].UID == self {
			me = &edges[i]
			break
		}
	}
	if me == nil {
		return nil
	}
	reached := map[int]bool{me.To: true}
	for grew := true; grew; {
		grew = false
		for _, e := range edges {
			if reached[e.From] && !reached[e.To] {
				reached[e.To], grew = true, true
			}
		}
	}
	var loops []string
	for _, e := range edges {
		if e.To == me.From && reached[e.From] {
			loops = append(loops, e.UID)
		}
	}
	return loops
}

// Filter tells a mirror's stream which of pgmirror's origins to leave out
// (Drops): the origins of the mirrors that close a loop with it
// (LoopMirrors), set from the catalog with Set. The transactions of every
// other origin are carried: a mirror reading a database that another
// mirror writes (a chain) carries that mirror's writes.
//
// A nil *Filter leaves out every pgmirror origin.
//
// An origin of a mirror the last Set did not know (a mirror created since,
// or one of another pgmirror installation) makes Drops call the Filter's
// refresh function and decide with what it learnt. A mirror that a
// successful refresh does not know either is carried from then on; after a
// failed refresh its transactions are carried and the next one met after
// refreshEvery tries again. Safe for concurrent use.
type Filter struct {
	state   atomic.Pointer[filterState]
	refresh func(ctx context.Context) error

	mu      sync.Mutex           // serialises refreshes, guards retryAt
	retryAt map[string]time.Time // uid: when Drops may refresh again to learn of it
}

type filterState struct {
	drop  map[string]bool // uids whose origins are left out
	known map[string]bool // uids the last Set knew of
}

// refreshEvery is how long after a failed refresh an unknown origin makes
// Drops try again.
const refreshEvery = 10 * time.Second

// refreshTimeout bounds one refresh called by Drops (the stream waits).
const refreshTimeout = 10 * time.Second

// NewFilter returns a Filter that leaves nothing out until Set. refresh,
// when not nil, is called by Drops for an origin of a mirror Set did not
// name; it is expected to call Set.
func NewFilter(refresh func(ctx context.Context) error) *Filter {
	f := &Filter{refresh: refresh, retryAt: map[string]time.Time{}}
	f.state.Store(&filterState{})
	return f
}

// Set replaces what the filter knows: drop are the uids of the mirrors
// whose origins are left out, known every mirror uid considered (drop's
// included).
func (f *Filter) Set(drop, known []string) {
	st := &filterState{drop: make(map[string]bool, len(drop)), known: make(map[string]bool, len(known)+len(drop))}
	for _, u := range drop {
		st.drop[u], st.known[u] = true, true
	}
	for _, u := range known {
		st.known[u] = true
	}
	f.state.Store(st)
}

// Dropped returns the uids whose origins the filter leaves out.
func (f *Filter) Dropped() []string {
	st := f.state.Load()
	out := make([]string, 0, len(st.drop))
	for u := range st.drop {
		out = append(out, u)
	}
	return out
}

// Drops reports whether the transactions of origin name are left out:
// every pgmirror origin for a nil Filter, else the origins of the mirrors
// Set named in drop. A name that is not pgmirror's is never left out.
func (f *Filter) Drops(name string) bool {
	uid, ok := MirrorUID(name)
	if !ok {
		return false
	}
	if f == nil {
		return true
	}
	// A mirror uid that ends in "_c" and digits would read as a copy
	// origin of a shorter uid: the whole name is looked up too.
	whole := strings.TrimPrefix(name, Prefix)
	st := f.state.Load()
	if !st.known[uid] && !st.known[whole] {
		st = f.learn(uid)
	}
	return st.drop[uid] || st.drop[whole]
}

// learn refreshes the filter to learn of mirror uid, unless a refresh
// already tried (see Filter), and returns the state to decide with.
func (f *Filter) learn(uid string) *filterState {
	if f.refresh == nil {
		return f.state.Load()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.state.Load(); st.known[uid] {
		return st // learnt by a refresh that ran meanwhile
	}
	if at, ok := f.retryAt[uid]; ok && time.Now().Before(at) {
		return f.state.Load()
	}
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	if err := f.refresh(ctx); err != nil {
		f.retryAt[uid] = time.Now().Add(refreshEvery)
	} else if !f.state.Load().known[uid] {
		f.retryAt[uid] = time.Now().Add(100 * 365 * 24 * time.Hour) // not a mirror of the catalog: carried
	}
	return f.state.Load()
}
