package jobs

import (
	"cmp"
	"slices"
)

// This file holds the balancer's decision as a pure function of what it
// read from the catalog (balance.go gathers the input and carries out the
// decision), so that the rule is tested without a database.
//
// The rule:
//   - Shares come from the live replicas and every mirror that should run
//     now (wanted), whether or not it holds a worker at this moment: a
//     mirror being handed over, or one whose replica just died, still counts.
//     Counting only the mirrors that hold a worker made every hand-off lower
//     the share and trigger more hand-offs. The wanted mirrors are dealt out
//     by capacity (SERVICE_MIRROR_WORKERS), the smallest first, and evenly
//     otherwise: the shares add up to the wanted mirrors, and differ by one
//     at most between replicas with room.
//   - Hysteresis: a replica at its share keeps its mirrors; so does one
//     above it by one while some wanted mirrors run nowhere (not handed to
//     anyone either): those go to the replicas below their share, which
//     likely fills them; and while runs that end still hold their locks.
//     Once every wanted mirror runs, and nothing else, a replica one above
//     its share hands one away to a replica below its share that runs two
//     fewer (two replicas at 7 and 5 of 12 end at 6 and 6; one mirror on
//     two replicas stays where it is; the shares are the same on every
//     replica, so the mirror does not come back).
//     A replica more than one above its share starts handing mirrors away
//     and goes on down to its share (not to share + 1: three replicas at
//     share + 1, share + 1 and share - 2 would stay so while mirrors run
//     nowhere), only to replicas below theirs (with room), so a mirror
//     never moves back and forth.
//   - Pacing: at most maxInFlight hand-offs of a replica are under way at
//     once (runs stopping at their batch boundary, and mirrors handed to a
//     receiver that has not taken them yet), and never more than the
//     receivers lack.
//   - While another replica is below its share, a replica at or above its
//     share takes no new mirrors (run jobs it fetches end at once) and
//     adopts none; one below its share adopts up to its share. When no other
//     replica lacks mirrors, a replica adopts whatever it has room for: a
//     takeover is not held back by shares.

// maxInFlight bounds the hand-offs of one replica under way at once.
const maxInFlight = 4

// replicaLoad is one live replica as the balancer sees it.
type replicaLoad struct {
	Name    string
	Running int // mirror locks it holds now
	Cap     int // its SERVICE_MIRROR_WORKERS
	// Incoming: mirrors this replica handed to it that it has not taken
	// yet (only known for hand-offs of the deciding replica).
	Incoming int
}

// balanceInput is what one replica knows when it decides.
type balanceInput struct {
	Me       string
	Replicas []replicaLoad // the live replicas, Me among them
	// Wanted is the number of mirrors that should run now: live, desired
	// running, not paused, stopped or completed, and not waiting for a
	// retry after a failure.
	Wanted int
	// Stopping is how many of Me's runs were asked to hand their mirror
	// away and are not handed over yet (finishing their batch, still in
	// Running, or just released).
	Stopping int
	// Shedding: Me handed mirrors away at its previous check and is still
	// above its share (it goes on down to its share).
	Shedding bool
}

// balanceDecision is what a replica does until its next check.
type balanceDecision struct {
	Shares map[string]int // every live replica's share
	Share  int            // Me's share
	// Refuse: leave new mirrors to replicas below their share (run jobs
	// fetched end at once).
	Refuse bool
	// Adopt is how many mirrors without a worker Me may adopt now.
	Adopt int
	// Handoffs names, for each run to hand away now, the replica to hand
	// it to (len(Handoffs) runs).
	Handoffs []string
}

// fairShares deals wanted mirrors out over the replicas: the ones with
// the least room first, each at most its capacity, the rest evenly. Ties go
// by name, so that every replica computes the same shares.
func fairShares(replicas []replicaLoad, wanted int) map[string]int {
	sorted := slices.Clone(replicas)
	slices.SortFunc(sorted, func(a, b replicaLoad) int {
		return cmp.Or(cmp.Compare(a.Cap, b.Cap), cmp.Compare(a.Name, b.Name))
	})
	shares := make(map[string]int, len(sorted))
	remaining := max(wanted, 0)
	for i, r := range sorted {
		left := len(sorted) - i
		s := min(max(r.Cap, 0), (remaining+left-1)/left)
		shares[r.Name] = s
		remaining -= s
	}
	return shares
}

// decideBalance applies the rule above for in.Me.
func decideBalance(in balanceInput) balanceDecision {
	var me *replicaLoad
	total := 0
	for i := range in.Replicas {
		total += in.Replicas[i].Running
		if in.Replicas[i].Name == in.Me {
			me = &in.Replicas[i]
		}
	}
	if me == nil {
		// Not among the live replicas (its lock connection is being made
		// again): nothing to compare with; it adopts what it has room for
		// and its lock connection decides.
		return balanceDecision{}
	}
	// Mirrors whose runs are ending (paused, deleted) still hold a lock
	// for a moment: never share out fewer than run.
	shares := fairShares(in.Replicas, max(in.Wanted, total))
	d := balanceDecision{Shares: shares, Share: shares[me.Name]}
	room := max(0, me.Cap-me.Running)

	// What the other replicas lack to reach their share (within their
	// capacity), less what is on its way to them.
	type lack struct {
		name string
		n    int
		has  int // what it runs, and what is on its way to it
	}
	var lacking []lack
	for _, r := range in.Replicas {
		if r.Name == me.Name {
			continue
		}
		if n := min(shares[r.Name], r.Cap) - r.Running - r.Incoming; n > 0 {
			lacking = append(lacking, lack{r.Name, n, r.Running + r.Incoming})
		}
	}
	if len(lacking) == 0 {
		d.Adopt = room
		return d
	}
	d.Refuse = me.Running >= d.Share
	d.Adopt = min(room, max(0, d.Share-me.Running))

	placed := 0
	for _, r := range in.Replicas {
		placed += r.Running + r.Incoming
	}
	staying := me.Running - in.Stopping
	if staying <= d.Share || (staying == d.Share+1 && !in.Shedding && placed != in.Wanted) {
		// At its share, or one above while mirrors without a worker
		// remain for those below theirs, or while runs that end (paused,
		// deleted) still hold locks and the shares are about to change:
		// it keeps its mirrors (one above, it goes on handing away when
		// it was already).
		return d
	}
	if staying == d.Share+1 && !in.Shedding {
		// One above with every mirror running: a mirror moves only to a
		// replica that runs two fewer, where the spread gets better (one
		// mirror on two replicas stays where it is, whoever's share it
		// is by name).
		lacking = slices.DeleteFunc(lacking, func(l lack) bool { return l.has > staying-2 })
	}
	deficit := 0
	for _, l := range lacking {
		deficit += l.n
	}
	incoming := 0
	for _, r := range in.Replicas {
		incoming += r.Incoming
	}
	n := min(staying-d.Share, deficit, maxInFlight-in.Stopping-incoming)
	for range max(n, 0) {
		// The receiver that lacks the most (ties by name).
		best := 0
		for i, l := range lacking {
			if l.n > lacking[best].n || (l.n == lacking[best].n && l.name < lacking[best].name) {
				best = i
			}
		}
		d.Handoffs = append(d.Handoffs, lacking[best].name)
		lacking[best].n--
	}
	return d
}
