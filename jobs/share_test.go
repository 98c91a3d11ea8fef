package jobs

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

func TestFairShares(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas []replicaLoad
		wanted   int
		want     map[string]int
	}{
		{"even", []replicaLoad{{Name: "a", Cap: 200}, {Name: "b", Cap: 200}}, 100, map[string]int{"a": 50, "b": 50}},
		{"odd: the first by name gets the extra one", []replicaLoad{{Name: "b", Cap: 200}, {Name: "a", Cap: 200}}, 101, map[string]int{"a": 51, "b": 50}},
		{"three ways", []replicaLoad{{Name: "a", Cap: 200}, {Name: "b", Cap: 200}, {Name: "c", Cap: 200}}, 10, map[string]int{"a": 4, "b": 3, "c": 3}},
		{"a capped replica's rest goes to the others", []replicaLoad{{Name: "a", Cap: 200}, {Name: "b", Cap: 1}, {Name: "c", Cap: 200}}, 10, map[string]int{"a": 5, "b": 1, "c": 4}},
		{"more wanted than room", []replicaLoad{{Name: "a", Cap: 3}, {Name: "b", Cap: 2}}, 10, map[string]int{"a": 3, "b": 2}},
		{"nothing wanted", []replicaLoad{{Name: "a", Cap: 3}, {Name: "b", Cap: 2}}, 0, map[string]int{"a": 0, "b": 0}},
		{"alone", []replicaLoad{{Name: "a", Cap: 200}}, 40, map[string]int{"a": 40}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fairShares(tc.replicas, tc.wanted)
			if !maps.Equal(got, tc.want) {
				t.Errorf("fairShares = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDecideBalance(t *testing.T) {
	two := func(a, b int) []replicaLoad {
		return []replicaLoad{{Name: "a", Running: a, Cap: 200}, {Name: "b", Running: b, Cap: 200}}
	}
	for _, tc := range []struct {
		name       string
		in         balanceInput
		wantShare  int
		wantRefuse bool
		wantAdopt  int
		wantHand   []string
	}{
		{
			name:      "alone: adopts all it has room for",
			in:        balanceInput{Me: "a", Replicas: []replicaLoad{{Name: "a", Running: 10, Cap: 200}}, Wanted: 100},
			wantShare: 100, wantAdopt: 190,
		},
		{
			name:      "a replica joins: the one with every mirror hands a few away at a time, to it",
			in:        balanceInput{Me: "a", Replicas: two(100, 0), Wanted: 100},
			wantShare: 50, wantRefuse: true, wantAdopt: 0, wantHand: []string{"b", "b", "b", "b"},
		},
		{
			name:      "hand-offs under way count against the pace",
			in:        balanceInput{Me: "a", Replicas: []replicaLoad{{Name: "a", Running: 90, Cap: 200}, {Name: "b", Running: 8, Cap: 200, Incoming: 1}}, Wanted: 100, Stopping: 2},
			wantShare: 50, wantRefuse: true, wantHand: []string{"b"},
		},
		{
			name:      "the pace is used up: nothing more until hand-offs complete",
			in:        balanceInput{Me: "a", Replicas: []replicaLoad{{Name: "a", Running: 90, Cap: 200}, {Name: "b", Running: 8, Cap: 200}}, Wanted: 100, Stopping: 4},
			wantShare: 50, wantRefuse: true,
		},
		{
			// The old rule counted running mirrors only: 60 + 30 running
			// of 100 gave a share of 45 and made a hand back 15 more.
			name:      "mirrors between replicas (no worker) still count: no overshoot",
			in:        balanceInput{Me: "a", Replicas: two(52, 38), Wanted: 100},
			wantShare: 50, wantRefuse: true, wantHand: []string{"b", "b"},
		},
		{
			name:      "at its share + 1 while mirrors run nowhere: keeps its mirrors (hysteresis)",
			in:        balanceInput{Me: "a", Replicas: two(51, 40), Wanted: 100},
			wantShare: 50, wantRefuse: true,
		},
		{
			name:      "at its share + 1 with every mirror running: hands one to the replica below its share",
			in:        balanceInput{Me: "a", Replicas: two(7, 5), Wanted: 12},
			wantShare: 6, wantRefuse: true, wantHand: []string{"b"},
		},
		{
			name:      "one mirror on the replica whose share is 0: stays (moving it spreads nothing)",
			in:        balanceInput{Me: "b", Replicas: two(0, 1), Wanted: 1},
			wantShare: 0, wantRefuse: true,
		},
		{
			name:      "at its share + 1, the other one below its share + 1: keeps (13 as 7 and 6 stays)",
			in:        balanceInput{Me: "b", Replicas: two(6, 7), Wanted: 13},
			wantShare: 6, wantRefuse: true,
		},
		{
			name:      "at its share + 1 while a paused mirror's run still holds its lock: keeps (the shares are about to change)",
			in:        balanceInput{Me: "a", Replicas: two(7, 5), Wanted: 11},
			wantShare: 6, wantRefuse: true,
		},
		{
			name:      "at its share + 1, a mirror running nowhere yet: keeps, the other adopts it",
			in:        balanceInput{Me: "a", Replicas: two(7, 4), Wanted: 12},
			wantShare: 6, wantRefuse: true,
		},
		{
			name:      "at its share while the other lacks: keeps, refuses new ones",
			in:        balanceInput{Me: "a", Replicas: two(50, 20), Wanted: 100},
			wantShare: 50, wantRefuse: true,
		},
		{
			name:      "below its share while the other is above: adopts all it has room for, refuses nothing",
			in:        balanceInput{Me: "b", Replicas: two(60, 20), Wanted: 100},
			wantShare: 50, wantAdopt: 180,
		},
		{
			name: "below its share while a third lacks too: adopts up to its share",
			in: balanceInput{Me: "b", Replicas: []replicaLoad{
				{Name: "a", Running: 60, Cap: 200}, {Name: "b", Running: 20, Cap: 200}, {Name: "c", Running: 10, Cap: 200}}, Wanted: 120},
			wantShare: 40, wantAdopt: 20,
		},
		{
			// After a catalog outage the locks come back one by one: a
			// replica at exactly its share must not hand mirrors away.
			name:      "at exactly its share after an outage, the other regaining its locks",
			in:        balanceInput{Me: "a", Replicas: two(50, 10), Wanted: 100},
			wantShare: 50, wantRefuse: true,
		},
		{
			name:      "balanced: nobody lacks, adopts what it has room for",
			in:        balanceInput{Me: "a", Replicas: two(50, 50), Wanted: 100},
			wantShare: 50, wantAdopt: 150,
		},
		{
			name:      "the other is full (its SERVICE_MIRROR_WORKERS): nothing to hand it",
			in:        balanceInput{Me: "a", Replicas: []replicaLoad{{Name: "a", Running: 90, Cap: 200}, {Name: "b", Running: 10, Cap: 10}}, Wanted: 100},
			wantShare: 90, wantAdopt: 110,
		},
		{
			name: "two receivers: the one lacking most first",
			in: balanceInput{Me: "a", Replicas: []replicaLoad{
				{Name: "a", Running: 60, Cap: 200}, {Name: "b", Running: 0, Cap: 200}, {Name: "c", Running: 18, Cap: 200}}, Wanted: 60 + 18},
			wantShare: 26, wantRefuse: true, wantHand: []string{"b", "b", "b", "b"},
		},
		{
			name:      "handing away stops at the share",
			in:        balanceInput{Me: "a", Replicas: two(53, 48), Wanted: 100},
			wantShare: 51, wantRefuse: true, wantHand: []string{"b", "b"},
		},
		{
			name: "one above its share while handing away already: goes on down to its share",
			in: balanceInput{Me: "a", Replicas: []replicaLoad{
				{Name: "a", Running: 68, Cap: 200}, {Name: "b", Running: 68, Cap: 200}, {Name: "c", Running: 64, Cap: 200}}, Wanted: 200, Shedding: true},
			wantShare: 67, wantRefuse: true, wantHand: []string{"c"},
		},
		{
			name: "one above its share, not handing away, every mirror running: hands one away",
			in: balanceInput{Me: "a", Replicas: []replicaLoad{
				{Name: "a", Running: 68, Cap: 200}, {Name: "b", Running: 68, Cap: 200}, {Name: "c", Running: 64, Cap: 200}}, Wanted: 200},
			wantShare: 67, wantRefuse: true, wantHand: []string{"c"},
		},
		{
			name: "one above its share, not handing away, mirrors running nowhere: keeps its mirrors",
			in: balanceInput{Me: "a", Replicas: []replicaLoad{
				{Name: "a", Running: 68, Cap: 200}, {Name: "b", Running: 68, Cap: 200}, {Name: "c", Running: 60, Cap: 200}}, Wanted: 200},
			wantShare: 67, wantRefuse: true,
		},
		{
			name:      "mirrors ending still hold locks: shares never below what runs",
			in:        balanceInput{Me: "a", Replicas: two(30, 30), Wanted: 40},
			wantShare: 30, wantAdopt: 170,
		},
		{
			name:      "not live yet (lock connection being made): no decision",
			in:        balanceInput{Me: "c", Replicas: two(30, 30), Wanted: 60},
			wantShare: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideBalance(tc.in)
			if d.Share != tc.wantShare || d.Refuse != tc.wantRefuse || d.Adopt != tc.wantAdopt || !slices.Equal(d.Handoffs, tc.wantHand) {
				t.Errorf("decideBalance = share %d, refuse %v, adopt %d, hand to %v; want share %d, refuse %v, adopt %d, hand to %v",
					d.Share, d.Refuse, d.Adopt, d.Handoffs, tc.wantShare, tc.wantRefuse, tc.wantAdopt, tc.wantHand)
			}
		})
	}
}

// TestBalanceConverges plays the rule over rounds for a replica that joins
// or restarts: every round each replica decides from the same view, hands
// off what it decided (the receiver takes it in the same round) and
// adopts orphans up to what it decided. It checks that the mirrors without
// a worker stay few, that nobody overshoots below its share - 1 by handing
// away, and that the spread is reached within a bounded number of rounds.
func TestBalanceConverges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		running []int
		wanted  int
	}{
		{"a replica joins 100 mirrors", []int{100, 0}, 100},
		{"a third replica joins 200 mirrors", []int{100, 100, 0}, 200},
		{"a restarted replica comes back", []int{101, 0}, 101},
		{"after a catalog outage, locks half regained", []int{50, 20}, 100},
		{"two replicas at 7 and 5 of 12", []int{7, 5}, 12},
		{"three replicas at share + 1, share + 1, share - 2", []int{68, 68, 64}, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(tc.running)
			loads := make([]replicaLoad, n)
			for i := range loads {
				loads[i] = replicaLoad{Name: fmt.Sprintf("r%d", i), Running: tc.running[i], Cap: 200}
			}
			orphans := tc.wanted
			for _, l := range loads {
				orphans -= l.Running
			}
			start := slices.Clone(loads)
			shedding := make([]bool, n)
			rounds := 0
			for ; rounds < 100; rounds++ {
				view := slices.Clone(loads)
				moved := false
				for i := range loads {
					d := decideBalance(balanceInput{Me: loads[i].Name, Replicas: view, Wanted: tc.wanted, Shedding: shedding[i]})
					shedding[i] = len(d.Handoffs) > 0 || (shedding[i] && view[i].Running > d.Share)
					for _, to := range d.Handoffs {
						loads[i].Running--
						for j := range loads {
							if loads[j].Name == to {
								loads[j].Running++
							}
						}
						moved = true
					}
					if k := min(d.Adopt, orphans); k > 0 {
						loads[i].Running += k
						orphans -= k
						moved = true
					}
				}
				if orphans > maxInFlight*n {
					t.Fatalf("round %d: %d mirrors without a worker", rounds, orphans)
				}
				for i, l := range loads {
					share := fairShares(loads, tc.wanted)[l.Name]
					if l.Running < start[i].Running && l.Running < share-1 {
						t.Fatalf("round %d: %s handed away down to %d, below its share %d", rounds, l.Name, l.Running, share)
					}
				}
				if !moved {
					break
				}
			}
			shares := fairShares(loads, tc.wanted)
			for _, l := range loads {
				if l.Running < shares[l.Name]-1 || l.Running > shares[l.Name]+1 || (tc.running[0] > shares[l.Name]+1 && l.Name == "r0" && l.Running != shares[l.Name]) {
					t.Errorf("after %d rounds %s runs %d, share %d (all: %v)", rounds, l.Name, l.Running, shares[l.Name], loads)
				}
			}
			if orphans != 0 {
				t.Errorf("%d mirrors without a worker at the end", orphans)
			}
			t.Logf("converged in %d rounds: %v", rounds, loads)
		})
	}
}

// TestChangedReplicas: the balance is checked at once when a replica of
// the last check lost its lock connection or a new one joined, not when
// only this replica's own connection comes and goes.
func TestChangedReplicas(t *testing.T) {
	for _, c := range []struct {
		name              string
		others, connected []string
		want              bool
	}{
		{"same", []string{"b"}, []string{"a", "b"}, false},
		{"b gone", []string{"b"}, []string{"a"}, true},
		{"c joined", []string{"b"}, []string{"a", "b", "c"}, true},
		{"joined a lone replica", nil, []string{"a", "b"}, true},
		{"alone", nil, []string{"a"}, false},
		{"own connection down", []string{"b"}, []string{"b"}, false},
	} {
		if got := changedReplicas(c.others, c.connected, "a"); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
