package cdc_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/db/pgtest"
)

// TestRandomWorkload replays seeded random transactions on three tables
// and checks that the destination ends equal to the source: a table with a
// unique column besides its key (values move between rows, so folding by
// key meets conflicts and the table falls back to the source's order), a
// keyed table (folded), and a table without a key (REPLICA IDENTITY FULL,
// duplicate rows). Transactions mix inserts, updates of plain, unique and
// TOASTed columns, key changes, deletes, re-inserts of deleted keys and the
// odd TRUNCATE; chunk sizes vary with the seed, so that transactions
// straddle chunks and both ways of writing a folded chunk run. Half the
// transactions are written before the run starts (a backlog, large
// batches), half while it streams, with a stop and a new run in between. The seeds are fixed so the test is
// deterministic; PGMIRROR_RANDOM_SEEDS=n runs n seeds from the clock
// instead (each one's seed is in the test name).
func TestRandomWorkload(t *testing.T) {
	t.Parallel()
	seeds, _ := randomSeeds(1, 2, 3)
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runRandomWorkload(t, seed)
		})
	}
}

// randomSeeds returns fixed, or with PGMIRROR_RANDOM_SEEDS=n n seeds from
// the clock; isFixed says which.
func randomSeeds(fixed ...uint64) (seeds []uint64, isFixed bool) {
	n, err := strconv.Atoi(os.Getenv("PGMIRROR_RANDOM_SEEDS"))
	if err != nil || n <= 0 {
		return fixed, true
	}
	for i := range n {
		seeds = append(seeds, uint64(time.Now().UnixNano())+uint64(i))
	}
	return seeds, false
}

const randomDDL = `CREATE TABLE public.acct (id int PRIMARY KEY, email text NOT NULL UNIQUE, n int, body text);
	CREATE TABLE public.plain (id int PRIMARY KEY, n int, body text);
	CREATE TABLE public.dup (a int, b text)`

func runRandomWorkload(t *testing.T, seed uint64) {
	b := setup(t, randomDDL+`; ALTER TABLE public.dup REPLICA IDENTITY FULL`, randomDDL,
		same("public", "acct"), same("public", "plain"), same("public", "dup"))
	// Chunks of at most 7 changes go by row statements, larger ones
	// through the staging table; the default chunk holds whole batches.
	b.cfg.BatchSize = 40
	b.cfg.ChunkSize = []int{7, 60, 0}[seed%3]
	w := &randomWorkload{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), acct: &keySet{}, plain: &keySet{}}
	const transactions = 160
	for range transactions / 2 {
		pgtest.Exec(t, b.src, w.transaction())
	}
	r := b.start(t)
	for i := range transactions / 2 {
		if i == transactions/4 {
			// A stop and a new run in the middle of the stream.
			require.NoError(t, r.halt(t))
			r = b.start(t)
		}
		pgtest.Exec(t, b.src, w.transaction())
	}
	for _, table := range []string{"acct", "plain", "dup"} {
		q := `SELECT * FROM ` + table
		b.waitEqual(t, r, q, q)
	}
	require.NoError(t, r.halt(t))
}

// keySet is the model of a keyed table's live and deleted keys, so that
// every generated statement succeeds on the source.
type keySet struct {
	live, deleted []int
	next          int
}

func (k *keySet) fresh() int {
	k.next++
	return k.next
}

func (w *randomWorkload) pick(k *keySet) (int, bool) {
	if len(k.live) == 0 {
		return 0, false
	}
	return k.live[w.rng.IntN(len(k.live))], true
}

func (k *keySet) remove(id int) {
	k.live = slices.DeleteFunc(k.live, func(v int) bool { return v == id })
}

type randomWorkload struct {
	rng         *rand.Rand
	acct, plain *keySet
	emails      int // unique email counter
	truncates   int // every second truncate resets sequences too
}

func (w *randomWorkload) email() string {
	w.emails++
	return fmt.Sprintf("'m%d'", w.emails)
}

// body is NULL, a short value, or one large enough to be TOASTed.
func (w *randomWorkload) body() string {
	switch w.rng.IntN(4) {
	case 0:
		return "NULL"
	case 1:
		return fmt.Sprintf("'short %d'", w.rng.IntN(1000))
	default:
		return fmt.Sprintf(`(SELECT string_agg(md5('%d' || g), '') FROM generate_series(1, 100) g)`, w.rng.IntN(1<<30))
	}
}

// transaction returns one source transaction of 1 to 15 statements.
func (w *randomWorkload) transaction() string {
	var s strings.Builder
	s.WriteString("BEGIN;\n")
	for range 1 + w.rng.IntN(15) {
		s.WriteString(w.statement())
		s.WriteString(";\n")
	}
	s.WriteString("COMMIT")
	return s.String()
}

func (w *randomWorkload) statement() string {
	switch w.rng.IntN(3) {
	case 0:
		return w.acctStatement()
	case 1:
		return w.plainStatement()
	default:
		return w.dupStatement()
	}
}

func (w *randomWorkload) acctStatement() string {
	k := w.acct
	id, ok := w.pick(k)
	op := w.rng.IntN(9)
	if !ok || op == 0 {
		id := k.fresh()
		k.live = append(k.live, id)
		return fmt.Sprintf("INSERT INTO acct VALUES (%d, %s, %d, %s)", id, w.email(), w.rng.IntN(100), w.body())
	}
	switch op {
	case 1:
		return fmt.Sprintf("UPDATE acct SET n = n + 1 WHERE id = %d", id)
	case 2:
		return fmt.Sprintf("UPDATE acct SET email = %s WHERE id = %d", w.email(), id)
	case 3: // two rows swap their emails through a temporary one
		other, _ := w.pick(k)
		if other == id {
			return fmt.Sprintf("UPDATE acct SET n = n - 1 WHERE id = %d", id)
		}
		return fmt.Sprintf(`UPDATE acct SET email = email || '|' || (SELECT email FROM acct WHERE id = %[2]d) WHERE id = %[1]d;
			UPDATE acct SET email = split_part((SELECT email FROM acct WHERE id = %[1]d), '|', 1) WHERE id = %[2]d;
			UPDATE acct SET email = split_part(email, '|', 2) WHERE id = %[1]d`, id, other)
	case 4: // the key changes
		newID := k.fresh()
		k.remove(id)
		k.live = append(k.live, newID)
		return fmt.Sprintf("UPDATE acct SET id = %d WHERE id = %d", newID, id)
	case 5:
		k.remove(id)
		k.deleted = append(k.deleted, id)
		return fmt.Sprintf("DELETE FROM acct WHERE id = %d", id)
	case 6: // a deleted key comes back
		if len(k.deleted) == 0 {
			return fmt.Sprintf("UPDATE acct SET body = %s WHERE id = %d", w.body(), id)
		}
		back := k.deleted[len(k.deleted)-1]
		k.deleted = k.deleted[:len(k.deleted)-1]
		k.live = append(k.live, back)
		return fmt.Sprintf("INSERT INTO acct VALUES (%d, %s, 0, %s)", back, w.email(), w.body())
	case 7: // a new row takes over the email of a row deleted right after
		newID := k.fresh()
		k.remove(id)
		k.deleted = append(k.deleted, id)
		k.live = append(k.live, newID)
		return fmt.Sprintf(`UPDATE acct SET email = 'old' || email WHERE id = %d;
			INSERT INTO acct SELECT %d, substr(email, 4), 1, NULL FROM acct WHERE id = %d;
			DELETE FROM acct WHERE id = %d`, id, newID, id, id)
	default:
		return fmt.Sprintf("UPDATE acct SET body = %s WHERE id = %d", w.body(), id)
	}
}

func (w *randomWorkload) plainStatement() string {
	k := w.plain
	id, ok := w.pick(k)
	op := w.rng.IntN(30)
	if !ok || op < 6 {
		id := k.fresh()
		k.live = append(k.live, id)
		return fmt.Sprintf("INSERT INTO plain VALUES (%d, %d, %s)", id, w.rng.IntN(100), w.body())
	}
	switch {
	case op < 12:
		return fmt.Sprintf("UPDATE plain SET n = n + 1 WHERE id = %d", id)
	case op < 15:
		newID := k.fresh()
		k.remove(id)
		k.live = append(k.live, newID)
		return fmt.Sprintf("UPDATE plain SET id = %d, n = n + 1 WHERE id = %d", newID, id)
	case op < 18:
		newID := k.fresh()
		k.remove(id)
		k.live = append(k.live, newID)
		return fmt.Sprintf("UPDATE plain SET id = %d WHERE id = %d", newID, id)
	case op < 23:
		k.remove(id)
		k.deleted = append(k.deleted, id)
		return fmt.Sprintf("DELETE FROM plain WHERE id = %d", id)
	case op < 25 && len(k.deleted) > 0:
		back := k.deleted[0]
		k.deleted = k.deleted[1:]
		k.live = append(k.live, back)
		return fmt.Sprintf("INSERT INTO plain VALUES (%d, -1, %s)", back, w.body())
	case op == 29 && w.rng.IntN(4) == 0:
		k.deleted = append(k.deleted, k.live...)
		k.live = nil
		// Both kinds: a plain one is applied early in a streamed
		// transaction, one with RESTART IDENTITY at its commit.
		if w.truncates++; w.truncates%2 == 0 {
			return "TRUNCATE plain RESTART IDENTITY"
		}
		return "TRUNCATE plain"
	default:
		return fmt.Sprintf("UPDATE plain SET body = %s WHERE id = %d", w.body(), id)
	}
}

func (w *randomWorkload) dupStatement() string {
	a := w.rng.IntN(8)
	switch w.rng.IntN(4) {
	case 0, 1:
		return fmt.Sprintf("INSERT INTO dup VALUES (%d, 'v%d')", a, w.rng.IntN(3))
	case 2:
		return fmt.Sprintf("UPDATE dup SET b = b || '+' WHERE ctid = (SELECT ctid FROM dup WHERE a = %d LIMIT 1)", a)
	default:
		return fmt.Sprintf("DELETE FROM dup WHERE ctid = (SELECT ctid FROM dup WHERE a = %d LIMIT 1)", a)
	}
}
