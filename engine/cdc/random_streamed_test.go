package cdc_test

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestRandomStreamedSavepoints replays seeded random large transactions
// that the source streams (past 64 kB), each a bulk insert followed by the
// random statements of TestRandomWorkload in nested savepoints that are
// released or rolled back at random, with the odd TRUNCATE (applied early,
// undone with its savepoint; every second one with RESTART IDENTITY, which
// gives the early apply up: with 64 kB of staging memory the transaction
// is then read again from the source). Half are written before the run starts,
// half while it streams. The destination must end equal to the source.
// PGMIRROR_RANDOM_SEEDS=n runs n seeds from the clock instead.
func TestRandomStreamedSavepoints(t *testing.T) {
	t.Parallel()
	seeds, fixed := randomSeeds(11, 12, 13)
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			b := setup(t, randomDDL+`; ALTER TABLE public.dup REPLICA IDENTITY FULL`, randomDDL,
				same("public", "acct"), same("public", "plain"), same("public", "dup"))
			streamSmall(t, b)
			b.cfg.StageMemory = 64 << 10
			b.cfg.ChunkSize = []int{7, 60, 0}[seed%3]
			var log lockedBuffer
			b.cfg.Logger = slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
			w := &randomWorkload{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), acct: &keySet{}, plain: &keySet{}}
			const transactions = 12
			for range transactions / 2 {
				pgtest.Exec(t, b.src, w.savepointTransaction())
			}
			r := b.start(t)
			for range transactions / 2 {
				pgtest.Exec(t, b.src, w.savepointTransaction())
			}
			for _, table := range []string{"acct", "plain", "dup"} {
				q := `SELECT * FROM ` + table
				b.waitEqual(t, r, q, q)
			}
			require.NoError(t, r.halt(t))
			undone, reread := strings.Count(log.String(), "rolling the early transaction back to its savepoint"), strings.Count(log.String(), "reading it again")
			t.Logf("%d subtransactions undone in an early transaction, %d transactions read again", undone, reread)
			if fixed {
				// These seeds roll subtransactions back in early
				// transactions and truncate (the counts do not depend on
				// timing: the transactions are written one after the
				// other); TestStreamedReadAgain reads transactions again.
				require.Positive(t, undone)
				require.Positive(t, allCounts(b.rep)["public.plain"].Truncated)
			}
		})
	}
}

// savepointTransaction returns one large transaction: a bulk insert, then
// blocks of statements, some in nested savepoints.
func (w *randomWorkload) savepointTransaction() string {
	var s strings.Builder
	s.WriteString("BEGIN;\n")
	k := w.plain
	n := 500 + w.rng.IntN(1500)
	fmt.Fprintf(&s, "INSERT INTO plain SELECT g, 0, 'bulk' FROM generate_series(%d, %d) g;\n", k.next+1, k.next+n)
	for range n {
		k.live = append(k.live, k.fresh())
	}
	sp := 0
	for range 3 + w.rng.IntN(5) {
		w.block(&s, &sp, 0)
	}
	s.WriteString("COMMIT")
	return s.String()
}

// block writes a few statements, in a savepoint (nested up to two deep)
// that is released or rolled back, keeping the model of the keys in step.
func (w *randomWorkload) block(s *strings.Builder, sp *int, depth int) {
	if depth == 2 || w.rng.IntN(3) == 0 {
		for range 1 + w.rng.IntN(8) {
			s.WriteString(w.statement())
			s.WriteString(";\n")
		}
		if w.rng.IntN(3) == 0 {
			// A bulk update, so that the source streams in the middle
			// of the savepoints too.
			fmt.Fprintf(s, "UPDATE plain SET n = n + 1 WHERE id %% %d = 0;\n", 2+w.rng.IntN(5))
		}
		return
	}
	*sp++
	name := fmt.Sprintf("s%d", *sp)
	acct, plain := w.acct.clone(), w.plain.clone()
	fmt.Fprintf(s, "SAVEPOINT %s;\n", name)
	for range 1 + w.rng.IntN(3) {
		w.block(s, sp, depth+1)
	}
	if w.rng.IntN(2) == 0 {
		fmt.Fprintf(s, "ROLLBACK TO SAVEPOINT %s;\n", name)
		// The rows and keys of the savepoint are gone on the source.
		w.acct, w.plain = acct, plain
		return
	}
	fmt.Fprintf(s, "RELEASE SAVEPOINT %s;\n", name)
}

func (k *keySet) clone() *keySet {
	return &keySet{live: slices.Clone(k.live), deleted: slices.Clone(k.deleted), next: k.next}
}
