package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The source table. ts is the row's creation time: generated rows get a
// fixed, deterministic one; rows of the lag load get clock_timestamp(), and
// their lag is the destination's applied_at minus ts. Autovacuum is off on
// the source so that its WAL holds only the workloads (the recorded end LSN
// of a workload is then its last commit).
const sourceDDL = `CREATE TABLE public.bench (
  id   bigint PRIMARY KEY,
  a    integer NOT NULL,
  b    integer NOT NULL,
  c    integer NOT NULL,
  note text NOT NULL,
  ts   timestamptz NOT NULL DEFAULT clock_timestamp()
) WITH (autovacuum_enabled = false)`

// The destination table: the source's columns and applied_at, filled when
// the row is written on the destination. Autovacuum is off on it too: the
// systems run one after the other on one destination cluster, and a vacuum
// of the table an earlier one just loaded or changed (2M rows after a
// snapshot, hundreds of thousands of dead rows after a catch-up) would
// otherwise run during, and be counted in, the next one's measurement.
const destinationDDL = `CREATE TABLE public.bench (
  id   bigint PRIMARY KEY,
  a    integer NOT NULL,
  b    integer NOT NULL,
  c    integer NOT NULL,
  note text NOT NULL,
  ts   timestamptz NOT NULL DEFAULT clock_timestamp(),
  applied_at timestamptz DEFAULT clock_timestamp()
) WITH (autovacuum_enabled = false)`

// destinationUniqueIndex is the destination's extra unique index with
// -unique-index: unique because id is, so no workload can break it, but a
// unique index besides the primary key all the same.
const destinationUniqueIndex = `CREATE UNIQUE INDEX bench_b_id ON public.bench (b, id)`

// benchColumns are the replicated columns, in order.
const benchColumns = "id, a, b, c, note, ts"

// rowsSQL inserts the deterministic rows lo..hi (140-character note).
func rowsSQL(lo, hi int64) string {
	return fmt.Sprintf(`INSERT INTO public.bench (%s)
SELECT g, g %% 1000, (g * 7) %% 100000, g %% 13,
       substr(repeat(md5(g::text), 5), 1, 140),
       timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'
FROM generate_series(%d, %d) g`, benchColumns, lo, hi)
}

// generate creates and fills the source table, then vacuums it (hint bits
// and visibility map set, statistics fresh) so that no measurement pays for
// that.
func generate(ctx context.Context, url string, rows int64) error {
	conn, err := connect(ctx, url)
	if err != nil {
		return err
	}
	defer closeConn(conn)
	if _, err := conn.Exec(ctx, sourceDDL); err != nil {
		return fmt.Errorf("create source table: %w", err)
	}
	const chunk = 500_000
	for lo := int64(1); lo <= rows; lo += chunk {
		if _, err := conn.Exec(ctx, rowsSQL(lo, min(lo+chunk-1, rows))); err != nil {
			return fmt.Errorf("generate rows from %d: %w", lo, err)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM (FREEZE, ANALYZE) public.bench"); err != nil {
		return fmt.Errorf("vacuum source table: %w", err)
	}
	return nil
}

// digest is the row count and an order-independent checksum of the
// replicated columns of the bench table.
type digest struct {
	rows int64
	sum  string
}

func tableDigest(ctx context.Context, url string) (digest, error) {
	var d digest
	err := queryRow(ctx, url, `SELECT count(*), coalesce(sum(hashtextextended((`+benchColumns+`)::text, 0)::numeric), 0)::text FROM public.bench`, &d.rows, &d.sum)
	if err != nil {
		return d, fmt.Errorf("checksum: %w", err)
	}
	return d, nil
}

// waitEqual waits until the destination's bench table has the source's
// rows (count and checksum), then vacuums and analyzes it, as autovacuum
// would have by the next measurement (it is off on the bench tables, see
// destinationDDL): every measurement starts from a maintained table with
// statistics, whichever system loaded or changed it before.
func waitEqual(ctx context.Context, srcURL, dstURL string, timeout time.Duration) error {
	if err := waitDigest(ctx, srcURL, dstURL, timeout); err != nil {
		return err
	}
	if err := execSQL(ctx, dstURL, `VACUUM (ANALYZE) public.bench`); err != nil {
		return fmt.Errorf("vacuum the destination table: %w", err)
	}
	return nil
}

// waitDigest waits until the destination's bench table has the source's
// rows (count and checksum).
func waitDigest(ctx context.Context, srcURL, dstURL string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want, err := tableDigest(ctx, srcURL)
	if err != nil {
		return err
	}
	for {
		got, err := tableDigest(ctx, dstURL)
		if err != nil {
			return err
		}
		if got == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tables differ after %s: source %d rows (checksum %s), destination %d rows (checksum %s)",
				timeout, want.rows, want.sum, got.rows, got.sum)
		}
		if err := sleep(ctx, 500*time.Millisecond); err != nil {
			return err
		}
	}
}

// workload is one catch-up workload: changes in transactions of txSize
// changes each. A transaction of n > 1 changes inserts 30% new rows,
// updates 50% and deletes 20% (three set-based statements); single-row
// transactions follow the same mix, in turn. A oneInsert workload is one
// transaction with a single INSERT ... SELECT of changes new rows.
type workload struct {
	name    string
	changes int64
	txSize  int64
	// oneInsert: one transaction of one INSERT ... SELECT (the RSS
	// measurement).
	oneInsert bool
	// target is the catch-up speed pgmirror should reach, as a multiple of
	// native's; zero for none.
	target float64
	// short names the workload in the summary (without its size, which is
	// the same in every mode).
	short string
}

// largeTxRows is the size of the large transaction: 1,000,000 rows, or
// half the table in smaller runs.
func largeTxRows(o options) int64 { return min(1_000_000, o.rows/2) }

func workloads(o options) []workload {
	large := largeTxRows(o)
	return []workload{
		{name: fmt.Sprintf("%s changes in 100-row tx", count(o.changes)), changes: o.changes, txSize: 100,
			target: targetCatchupBatched, short: "changes in 100-row tx"},
		{name: fmt.Sprintf("%s single-row tx", count(o.single)), changes: o.single, txSize: 1,
			target: targetCatchupSingle, short: "single-row tx"},
		{name: fmt.Sprintf("%s changes in 10,000-row tx", count(o.changes)), changes: o.changes, txSize: 10000,
			target: targetCatchupBatched, short: "changes in 10,000-row tx"},
		{name: fmt.Sprintf("one %s-row tx (INSERT ... SELECT)", count(large)), changes: large, txSize: large,
			oneInsert: true, short: "one large tx"},
	}
}

// catchupWorkloads are the workloads the catch-up measurements run: none
// with -large-only.
func (b *bench) catchupWorkloads() []workload {
	if b.opts.largeOnly {
		return nil
	}
	return workloads(b.opts)
}

// statements returns the statements of the workload's next transaction.
func (w workload) statements(c *cursor) []string {
	if w.oneInsert {
		return []string{c.insert(w.txSize)}
	}
	return c.tx(w.txSize)
}

// cursor decides which rows the workloads touch. Each system gets its own
// cursor over its own copy of the data, so both run the same statements.
type cursor struct {
	rows       int64
	nextInsert int64 // new ids from rows+1 up
	nextUpdate int64 // cycles through the upper half of the original ids
	nextDelete int64 // the lower half, each id once
	singleTx   int64
}

func newCursor(rows int64) *cursor {
	return &cursor{rows: rows, nextInsert: rows + 1, nextUpdate: rows/2 + 1, nextDelete: 1}
}

func (c *cursor) insert(n int64) string {
	lo := c.nextInsert
	c.nextInsert += n
	return rowsSQL(lo, lo+n-1)
}

func (c *cursor) update(n int64) string {
	if c.nextUpdate+n-1 > c.rows {
		c.nextUpdate = c.rows/2 + 1
	}
	lo := c.nextUpdate
	c.nextUpdate += n
	return fmt.Sprintf("UPDATE public.bench SET a = a + 1, b = b + 1 WHERE id BETWEEN %d AND %d", lo, lo+n-1)
}

func (c *cursor) delete(n int64) string {
	lo := c.nextDelete
	c.nextDelete += n
	return fmt.Sprintf("DELETE FROM public.bench WHERE id BETWEEN %d AND %d", lo, lo+n-1)
}

// tx returns the statements of the next transaction of size n.
func (c *cursor) tx(n int64) []string {
	if n == 1 {
		k := c.singleTx % 10
		c.singleTx++
		switch {
		case k < 5:
			return []string{c.update(1)}
		case k < 8:
			return []string{c.insert(1)}
		default:
			return []string{c.delete(1)}
		}
	}
	ins, del := n*3/10, n/5
	return []string{c.insert(ins), c.update(n - ins - del), c.delete(del)}
}

// workloadEnd is where a workload ended on the source.
type workloadEnd struct {
	// target is pg_current_wal_lsn() after the last commit.
	target lsn
	// beforeLast is pg_current_wal_insert_lsn() just before the last
	// transaction was sent: a position past it is that transaction's.
	beforeLast lsn
	elapsed    time.Duration
	// lastID is the highest id inserted so far: the workload's last
	// insert (every workload but the single-row one inserts in each
	// transaction), which the destination shows once it applied it.
	lastID int64
}

// runWorkload runs w on the source database at url, with
// synchronous_commit on. Several transactions (BEGIN ... COMMIT each) go in
// one simple-protocol round trip; the rows each statement touched are
// checked.
func runWorkload(ctx context.Context, url string, cur *cursor, w workload) (workloadEnd, error) {
	var end workloadEnd
	conn, err := connect(ctx, url+"&synchronous_commit=on")
	if err != nil {
		return end, err
	}
	defer closeConn(conn)
	t0 := time.Now()
	txs := w.changes / w.txSize
	perTrip := max(1, 1000/w.txSize)
	for done := int64(0); done < txs; {
		n := min(perTrip, txs-done)
		if done+n == txs {
			if n > 1 {
				// The last transaction goes alone, so that beforeLast
				// follows every other commit and precedes it.
				n--
			} else if end.beforeLast, err = queryLSN(ctx, conn, "SELECT pg_current_wal_insert_lsn()::text"); err != nil {
				return end, err
			}
		}
		var sb strings.Builder
		for range n {
			sb.WriteString("BEGIN;\n")
			for _, s := range w.statements(cur) {
				sb.WriteString(s)
				sb.WriteString(";\n")
			}
			sb.WriteString("COMMIT;\n")
		}
		results, err := conn.PgConn().Exec(ctx, sb.String()).ReadAll()
		if err != nil {
			return end, fmt.Errorf("workload %s, transaction %d: %w", w.name, done+1, err)
		}
		if got, want := touched(results), n*w.txSize; got != want {
			return end, fmt.Errorf("workload %s, transactions %d-%d: touched %d rows, want %d", w.name, done+1, done+n, got, want)
		}
		done += n
	}
	if end.target, err = queryLSN(ctx, conn, "SELECT pg_current_wal_lsn()::text"); err != nil {
		return end, err
	}
	end.elapsed = time.Since(t0)
	end.lastID = cur.nextInsert - 1
	return end, nil
}

func touched(results []*pgconn.Result) int64 {
	var n int64
	for _, r := range results {
		if r.CommandTag.Insert() || r.CommandTag.Update() || r.CommandTag.Delete() {
			n += r.CommandTag.RowsAffected()
		}
	}
	return n
}

// lsn is a WAL position. It scans from pg_lsn's text form.
type lsn uint64

func parseLSN(s string) (lsn, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("invalid LSN %q", s)
	}
	return lsn(h<<32 | l), nil
}

func (l lsn) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint64(l)&0xFFFFFFFF) }

// queryLSN runs a query that returns one pg_lsn as text.
func queryLSN(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (lsn, error) {
	var text *string
	if err := conn.QueryRow(ctx, sql, args...).Scan(&text); err != nil {
		return 0, fmt.Errorf("%s: %w", firstLine(sql), err)
	}
	if text == nil {
		return 0, nil
	}
	return parseLSN(*text)
}

// count formats n with thousands separators.
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}
