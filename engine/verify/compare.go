package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// rangeSum is a range's row count and hash on one side.
type rangeSum struct {
	count int64
	hash  string
}

func (t *table) sum(ctx context.Context, tx pgx.Tx, rel, where string, args []any) (rangeSum, error) {
	q := fmt.Sprintf(`SELECT count(*), coalesce(md5(string_agg(md5(%s), '' ORDER BY %s)), '') FROM %s WHERE %s`,
		t.rowSQL, t.order(), rel, where)
	var s rangeSum
	if err := tx.QueryRow(ctx, q, args...).Scan(&s.count, &s.hash); err != nil {
		return s, fmt.Errorf("hash a key range of %s: %w", rel, err)
	}
	return s, nil
}

// compareRange compares the key range [lo, hi); top says it is a
// first-level range (counted in Chunks and the row totals).
func (t *table) compareRange(ctx context.Context, p *pair, lo, hi []string, top bool) error {
	where, args := t.where(lo, hi)
	src, err := t.sum(ctx, p.src, t.m.Source.Quoted(), where, args)
	if err != nil {
		return err
	}
	dst, err := t.sum(ctx, p.dst, t.m.Destination.Quoted(), where, args)
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
	bounds, err := t.boundaries(ctx, tx, rel, lo, hi, every)
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
	fetch := func(tx pgx.Tx, rel string) (map[string]string, error) {
		texts := make([]string, len(t.names))
		for i, n := range t.names {
			texts[i] = "quote_nullable((" + quoteCol(n) + ")::text)"
		}
		q := fmt.Sprintf(`SELECT concat_ws(', ', %s), md5(%s) FROM %s WHERE %s`, strings.Join(texts, ", "), t.rowSQL, rel, where)
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("read row hashes of %s: %w", rel, err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var k, h string
			if err := rows.Scan(&k, &h); err != nil {
				return nil, err
			}
			out[k] = h
		}
		return out, rows.Err()
	}
	src, err := fetch(p.src, t.m.Source.Quoted())
	if err != nil {
		return err
	}
	dst, err := fetch(p.dst, t.m.Destination.Quoted())
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

// bucketSum is one hash bucket of a table without a primary key.
type bucketSum struct {
	count int64
	sum   string // numeric sum of the rows' first 64 hash bits, as text
}

// compareBuckets compares a table without a primary key as multisets.
func (t *table) compareBuckets(ctx context.Context, p *pair) error {
	sums := func(tx pgx.Tx, rel string) (map[string]bucketSum, error) {
		q := fmt.Sprintf(`SELECT substr(h, 1, 1), count(*), sum(('x' || substr(h, 1, 16))::bit(64)::bigint::numeric)::text
			FROM (SELECT md5(%s) AS h FROM %s) s GROUP BY 1`, t.rowSQL, rel)
		rows, err := tx.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("hash the rows of %s: %w", rel, err)
		}
		defer rows.Close()
		out := map[string]bucketSum{}
		for rows.Next() {
			var b string
			var s bucketSum
			if err := rows.Scan(&b, &s.count, &s.sum); err != nil {
				return nil, err
			}
			out[b] = s
		}
		return out, rows.Err()
	}
	src, err := sums(p.src, t.m.Source.Quoted())
	if err != nil {
		return err
	}
	dst, err := sums(p.dst, t.m.Destination.Quoted())
	if err != nil {
		return err
	}
	var differing []string
	t.mu.Lock()
	for _, b := range strings.Split("0123456789abcdef", "") {
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
	fetch := func(tx pgx.Tx, rel string) (map[string]group, error) {
		q := fmt.Sprintf(`SELECT h, count(*), min(r) FROM (SELECT %[1]s AS r, md5(%[1]s) AS h FROM %[2]s) s
			WHERE substr(h, 1, 1) = $1 GROUP BY h`, t.rowSQL, rel)
		rows, err := tx.Query(ctx, q, bucket)
		if err != nil {
			return nil, fmt.Errorf("read row hashes of %s: %w", rel, err)
		}
		defer rows.Close()
		out := map[string]group{}
		for rows.Next() {
			var h string
			var g group
			if err := rows.Scan(&h, &g.n, &g.text); err != nil {
				return nil, err
			}
			out[h] = g
		}
		return out, rows.Err()
	}
	src, err := fetch(p.src, t.m.Source.Quoted())
	if err != nil {
		return err
	}
	dst, err := fetch(p.dst, t.m.Destination.Quoted())
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
