package verify

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// both runs f on the source and on the destination at once, each on its own
// connection of p, and returns the first error.
func (t *table) both(ctx context.Context, p *pair, f func(ctx context.Context, tx pgx.Tx, rel string) error) error {
	var wg sync.WaitGroup
	var srcErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		srcErr = f(ctx, p.src, t.m.Source.Quoted())
	}()
	dstErr := f(ctx, p.dst, t.m.Destination.Quoted())
	wg.Wait()
	return cmpErr(srcErr, dstErr)
}

// cmpErr returns the first of the two sides' errors.
func cmpErr(src, dst error) error {
	if src != nil {
		return src
	}
	return dst
}

// bothMaps runs the query that query(rel) returns on both sides at once and
// collects each side's rows into a map by the key scan returns.
func bothMaps[V any](ctx context.Context, t *table, p *pair, what string, query func(rel string) string, args []any,
	scan func(rows pgx.Rows) (string, V, error)) (src, dst map[string]V, err error) {
	err = t.both(ctx, p, func(ctx context.Context, tx pgx.Tx, rel string) error {
		rows, err := tx.Query(ctx, query(rel), args...)
		if err != nil {
			return fmt.Errorf("%s of %s: %w", what, rel, err)
		}
		defer rows.Close()
		out := map[string]V{}
		for rows.Next() {
			k, v, err := scan(rows)
			if err != nil {
				return fmt.Errorf("%s of %s: %w", what, rel, err)
			}
			out[k] = v
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("%s of %s: %w", what, rel, err)
		}
		if tx == p.src {
			src = out
		} else {
			dst = out
		}
		return nil
	})
	return src, dst, err
}

// rangeSum is a range's row count and the sum of its row hashes on one
// side.
type rangeSum struct {
	count int64
	sum   string
}

// sum computes the row count and the sum of the row hashes of a range. The
// sum does not depend on the order of the rows: within a range of a table
// with a primary key, equal sets of rows (each with its key) are equal
// contents.
func (t *table) sum(ctx context.Context, tx pgx.Tx, rel, where string, args []any) (rangeSum, error) {
	q := fmt.Sprintf(`SELECT pg_catalog.count(*), coalesce(pg_catalog.sum(h), 0)::pg_catalog.text FROM (SELECT %s AS h FROM %s WHERE %s) s`,
		t.hashSQL, rel, where)
	var s rangeSum
	if err := tx.QueryRow(ctx, q, args...).Scan(&s.count, &s.sum); err != nil {
		return s, fmt.Errorf("hash a key range of %s: %w", rel, err)
	}
	return s, nil
}

// compareRange compares the key range [lo, hi); top says it is a
// first-level range (counted in Chunks and the row totals).
func (t *table) compareRange(ctx context.Context, p *pair, lo, hi []string, top bool) error {
	where, args := t.where(lo, hi)
	var src, dst rangeSum
	err := t.both(ctx, p, func(ctx context.Context, tx pgx.Tx, rel string) error {
		s, err := t.sum(ctx, tx, rel, where, args)
		if tx == p.src {
			src = s
		} else {
			dst = s
		}
		return err
	})
	if err != nil {
		return err
	}
	if top {
		t.mu.Lock()
		t.res.Chunks++
		t.res.RowsSource += src.count
		t.res.RowsDestination += dst.count
		if src != dst {
			t.res.ChunksDiffering++
		}
		t.mu.Unlock()
	}
	if src == dst {
		return nil
	}
	if max(src.count, dst.count) <= int64(t.cfg.LeafRows) {
		return t.compareRows(ctx, p, lo, hi, where, args)
	}
	// Cut the range further, with boundaries from the side with more rows
	// in it (a range may be empty on one side).
	tx, rel, n := p.src, t.m.Source.Quoted(), src.count
	if dst.count > src.count {
		tx, rel, n = p.dst, t.m.Destination.Quoted(), dst.count
	}
	every := max(int(n/16), t.cfg.LeafRows/2, 1)
	var bounds [][]string
	err = t.boundaries(ctx, tx, rel, lo, hi, every, func(b []string) error {
		bounds = append(bounds, b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("cut a differing range of %s: %w", rel, err)
	}
	if len(bounds) == 0 {
		return t.compareRows(ctx, p, lo, hi, where, args)
	}
	bs := append([][]string{lo}, bounds...)
	for i := range bs {
		var next []string
		if i+1 < len(bs) {
			next = bs[i+1]
		} else {
			next = hi
		}
		if err := t.compareRange(ctx, p, bs[i], next, false); err != nil {
			return err
		}
	}
	return nil
}

// compareRows fetches keys and row hashes of a small range from both sides
// and records each difference.
func (t *table) compareRows(ctx context.Context, p *pair, lo, hi []string, where string, args []any) error {
	texts := make([]string, len(t.names))
	for i, n := range t.names {
		texts[i] = "pg_catalog.quote_nullable((" + quoteCol(n) + ")::pg_catalog.text)"
	}
	src, dst, err := bothMaps(ctx, t, p, "read row hashes", func(rel string) string {
		return fmt.Sprintf(`SELECT pg_catalog.concat_ws(', '::pg_catalog.text, %s), (%s)::pg_catalog.text FROM %s WHERE %s`, strings.Join(texts, ", "), t.hashSQL, rel, where)
	}, args, func(rows pgx.Rows) (k, h string, err error) {
		return k, h, rows.Scan(&k, &h)
	})
	if err != nil {
		return err
	}
	prefix := "(" + strings.Join(t.names, ", ") + ")=("
	t.mu.Lock()
	defer t.mu.Unlock()
	before := t.res.RowsDiffering
	defer func() {
		if t.res.RowsDiffering > before {
			t.addRange(lo, hi)
		}
	}()
	for k, h := range src {
		dh, ok := dst[k]
		switch {
		case !ok:
			t.res.RowsDiffering++
			t.res.Missing = t.example(t.res.Missing, prefix+k+")")
		case dh != h:
			t.res.RowsDiffering++
			t.res.Different = t.example(t.res.Different, prefix+k+")")
		}
	}
	for k := range dst {
		if _, ok := src[k]; !ok {
			t.res.RowsDiffering++
			t.res.Extra = t.example(t.res.Extra, prefix+k+")")
		}
	}
	return nil
}

func (t *table) example(list []string, s string) []string {
	if len(list) >= t.cfg.MaxExamples {
		return list
	}
	const maxLen = 300
	if len(s) > maxLen {
		s = s[:maxLen] + "..."
	}
	return append(list, s)
}

func quoteCol(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// multisetBuckets is how many buckets a table without a primary key is
// spread over (by the low bits of the row hash).
const multisetBuckets = 16

// compareBuckets compares a table without a primary key as multisets.
func (t *table) compareBuckets(ctx context.Context, p *pair) error {
	src, dst, err := bothMaps(ctx, t, p, "hash the rows", func(rel string) string {
		return fmt.Sprintf(`SELECT pg_catalog.int8and(h, %d)::pg_catalog.text, pg_catalog.count(*), pg_catalog.sum(h)::pg_catalog.text FROM (SELECT %s AS h FROM %s) s GROUP BY 1`,
			multisetBuckets-1, t.hashSQL, rel)
	}, nil, func(rows pgx.Rows) (b string, s rangeSum, err error) {
		return b, s, rows.Scan(&b, &s.count, &s.sum)
	})
	if err != nil {
		return err
	}
	var differing []string
	t.mu.Lock()
	for i := range multisetBuckets {
		b := fmt.Sprint(i)
		t.res.Chunks++
		t.res.RowsSource += src[b].count
		t.res.RowsDestination += dst[b].count
		if src[b] != dst[b] {
			t.res.ChunksDiffering++
			differing = append(differing, b)
		}
	}
	t.mu.Unlock()
	for _, b := range differing {
		if err := t.compareBucketRows(ctx, p, b); err != nil {
			return err
		}
	}
	return nil
}

// compareBucketRows groups one bucket's rows by hash on both sides and
// records the differences: rows missing or extra on the destination (a row
// of a multiset that is "different" shows as one missing and one extra).
func (t *table) compareBucketRows(ctx context.Context, p *pair, bucket string) error {
	type group struct {
		n    int64
		text string
	}
	src, dst, err := bothMaps(ctx, t, p, "read row hashes", func(rel string) string {
		return fmt.Sprintf(`SELECT h::pg_catalog.text, pg_catalog.count(*), pg_catalog.min(r) FROM (SELECT %s AS r, %s AS h FROM %s) s
			WHERE pg_catalog.int8and(h, %d)::pg_catalog.text OPERATOR(pg_catalog.=) $1::pg_catalog.text GROUP BY h`, t.rowSQL, t.hashSQL, rel, multisetBuckets-1)
	}, []any{bucket}, func(rows pgx.Rows) (h string, g group, err error) {
		return h, g, rows.Scan(&h, &g.n, &g.text)
	})
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for h, g := range src {
		if d := g.n - dst[h].n; d > 0 {
			t.res.RowsDiffering += d
			t.res.Missing = t.example(t.res.Missing, g.text)
		}
	}
	for h, g := range dst {
		if d := g.n - src[h].n; d > 0 {
			t.res.RowsDiffering += d
			t.res.Extra = t.example(t.res.Extra, g.text)
		}
	}
	return nil
}

// maxRepairRanges bounds the differing key ranges a result keeps for a
// repair; a table with more is repaired with a table resync.
const maxRepairRanges = 1000

// addRange records a differing leaf range for a repair; call with mu held.
func (t *table) addRange(lo, hi []string) {
	if t.res.RepairRanges == nil {
		t.res.RepairRanges = &RepairRanges{KeyColumns: t.names, KeyTypes: t.types, Collate: t.collate}
	}
	rr := t.res.RepairRanges
	if len(rr.Ranges) >= maxRepairRanges {
		rr.Incomplete = true
		return
	}
	rr.Ranges = append(rr.Ranges, KeyRange{Lo: lo, Hi: hi})
}
