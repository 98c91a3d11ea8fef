package verify

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/schemasync"
	"github.com/pgmirror/pgmirror/engine/session"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Config configures one comparison.
type Config struct {
	// Source and Dest configure the connections (Compare works on copies).
	Source, Dest *pgx.ConnConfig
	// SourceSnapshot and DestSnapshot are the exported snapshots every
	// connection imports. Both must stand at the same source position.
	SourceSnapshot, DestSnapshot string
	// Tables are the tables to compare.
	Tables []change.Mapping
	// ChunkRows is the number of keys per first-level range. Default 10000.
	ChunkRows int
	// LeafRows is the size below which a differing range is compared row by
	// row. Default 200.
	LeafRows int
	// Workers is how many pairs of connections compare ranges at once.
	// Default 2.
	Workers int
	// MaxExamples bounds the example keys reported per kind and table.
	// Default 10.
	MaxExamples int
	// Logger receives debug output. Default: discard.
	Logger *slog.Logger

	// portableHash makes Compare hash rows with md5 even where both sides
	// compute hashtextextended alike (tests of that path).
	portableHash bool
	// destSettings are set in the destination's transactions after the
	// pinned ones (tests: a destination that prints values differently).
	destSettings map[string]string
}

func (c Config) withDefaults() Config {
	c.ChunkRows = cmp.Or(c.ChunkRows, 10000)
	c.LeafRows = cmp.Or(c.LeafRows, 200)
	c.Workers = max(cmp.Or(c.Workers, 2), 1)
	c.MaxExamples = cmp.Or(c.MaxExamples, 10)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Methods of comparison (TableResult.Method).
const (
	MethodKeyRanges = "key_ranges"
	MethodMultiset  = "multiset"
)

// TableResult is the outcome for one table.
type TableResult struct {
	// Table is the source table, Destination the destination table.
	Table       string `json:"table"`
	Destination string `json:"destination"`
	// Method is key_ranges (primary key) or multiset (no primary key).
	Method          string `json:"method"`
	RowsSource      int64  `json:"rows_source"`
	RowsDestination int64  `json:"rows_destination"`
	Chunks          int    `json:"chunks"`
	ChunksDiffering int    `json:"chunks_differing"`
	// RowsDiffering counts rows missing, extra or different.
	RowsDiffering int64 `json:"rows_differing"`
	// Missing, Extra and Different hold up to MaxExamples keys, as
	// "(col, ...)=(value, ...)"; for tables without a primary key, the
	// rows' text forms.
	Missing   []string `json:"missing"`
	Extra     []string `json:"extra"`
	Different []string `json:"different"`
	// Skipped, when set, says why the table was not compared.
	Skipped    string `json:"skipped,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	// RepairRanges are the key ranges where rows differ (tables with a
	// primary key), for Repair.
	RepairRanges *RepairRanges `json:"repair_ranges,omitempty"`
}

// RepairRanges are a table's differing key ranges.
type RepairRanges struct {
	KeyColumns []string `json:"key_columns"`
	KeyTypes   []string `json:"key_types"`
	// Collate says that text keys are compared in the C collation.
	Collate bool       `json:"collate,omitempty"`
	Ranges  []KeyRange `json:"ranges"`
	// Incomplete says that more ranges differ than were kept.
	Incomplete bool `json:"incomplete,omitempty"`
}

// KeyRange is the key range [Lo, Hi) (nil: open), key values as text.
type KeyRange struct {
	Lo []string `json:"lo"`
	Hi []string `json:"hi"`
}

// Equal reports whether the table was compared and no difference found.
func (r TableResult) Equal() bool {
	return r.Skipped == "" && r.RowsDiffering == 0 && r.ChunksDiffering == 0 && r.RowsSource == r.RowsDestination
}

// Reporter hears of each table when it is done (optional).
type Reporter interface {
	TableCompared(ctx context.Context, r TableResult)
}

// pair is one worker's two snapshot transactions.
type pair struct {
	srcConn, dstConn *pgx.Conn
	src, dst         pgx.Tx
}

func openPair(ctx context.Context, cfg Config) (*pair, error) {
	p := &pair{}
	var err error
	if p.srcConn, err = session.Connect(ctx, cfg.Source); err != nil {
		return nil, fmt.Errorf("connect to the source: %w", err)
	}
	if p.dstConn, err = session.Connect(ctx, cfg.Dest); err != nil {
		p.close()
		return nil, fmt.Errorf("connect to the destination: %w", err)
	}
	if p.src, err = importSnapshot(ctx, p.srcConn, cfg.SourceSnapshot); err != nil {
		p.close()
		return nil, fmt.Errorf("source: %w", err)
	}
	if p.dst, err = importSnapshot(ctx, p.dstConn, cfg.DestSnapshot, cfg.destSettings); err != nil {
		p.close()
		return nil, fmt.Errorf("destination: %w", err)
	}
	return p, nil
}

// ValidSnapshotName reports whether name looks like an exported snapshot
// name (hex digits and dashes), so that it can be written into SQL.
func ValidSnapshotName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= '0' && r <= '9' || r >= 'A' && r <= 'F' || r >= 'a' && r <= 'f' || r == '-') {
			return false
		}
	}
	return true
}

// importSnapshot begins a REPEATABLE READ, READ ONLY transaction on conn in
// the exported snapshot name, with the comparison's settings pinned
// (Settings, then overrides).
func importSnapshot(ctx context.Context, conn *pgx.Conn, name string, overrides ...map[string]string) (pgx.Tx, error) {
	if !ValidSnapshotName(name) {
		return nil, fmt.Errorf("invalid snapshot name %q", name)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, fmt.Errorf("begin snapshot transaction: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+sqlquote.Literal(name)); err != nil {
		_ = tx.Rollback(ctx)
		return nil, fmt.Errorf("import snapshot %s (it is valid only while the verification holds it): %w", name, err)
	}
	for _, settings := range append([]map[string]string{Settings()}, overrides...) {
		if err := pinSettings(ctx, tx, settings); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
	}
	return tx, nil
}

func (p *pair) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range []*pgx.Conn{p.srcConn, p.dstConn} {
		if c != nil {
			_ = c.Close(ctx)
		}
	}
}

// Compare compares every table of cfg and returns the results in the order
// of cfg.Tables. A table that cannot be compared (missing on one side, a
// column missing on the destination) gets Skipped and the others go on; an
// error is returned only when the comparison as a whole failed.
func Compare(ctx context.Context, cfg Config, rep Reporter) ([]TableResult, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// The first pair plans each table (columns, boundaries); the others
	// compare ranges.
	pairs, err := openPairs(ctx, cfg, cfg.Workers+1)
	defer func() {
		for _, p := range pairs {
			p.close()
		}
	}()
	if err != nil {
		return nil, err
	}
	workers := startWorkers(pairs[1:], cancel)
	results := make([]TableResult, len(cfg.Tables))
	var tablesWG sync.WaitGroup
	planner := pairs[0]
	sides, err := compareSides(ctx, planner)
	if err != nil {
		return nil, errors.Join(err, workers.wait())
	}
	sides.fastHash = sides.fastHash && !cfg.portableHash
	for i, m := range cfg.Tables {
		if ctx.Err() != nil {
			break
		}
		started := time.Now()
		t, err := plan(ctx, planner, cfg, sides, m)
		var skip *skipError
		switch {
		case err != nil && ctx.Err() != nil:
		case errors.As(err, &skip):
			results[i] = TableResult{Table: m.Source.String(), Destination: m.Destination.String(), Skipped: skip.reason,
				Missing: []string{}, Extra: []string{}, Different: []string{}}
			if rep != nil {
				rep.TableCompared(ctx, results[i])
			}
			continue
		case err != nil:
			workers.fail(err)
		}
		if err != nil {
			break
		}
		tablesWG.Add(1)
		t.done = func() {
			defer tablesWG.Done()
			res := t.result()
			res.DurationMS = time.Since(started).Milliseconds()
			results[i] = res
			if rep != nil && ctx.Err() == nil {
				rep.TableCompared(ctx, res)
			}
		}
		if err := t.submit(ctx, planner, workers.tasks); err != nil {
			workers.fail(err)
			break
		}
	}
	tablesWG.Wait()
	if err := workers.wait(); err != nil {
		return nil, err
	}
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// openPairs opens n pairs of snapshot connections; on an error it returns
// those it opened, for the caller to close.
func openPairs(ctx context.Context, cfg Config, n int) ([]*pair, error) {
	pairs := make([]*pair, 0, n)
	for range n {
		p, err := openPair(ctx, cfg)
		if err != nil {
			return pairs, err
		}
		pairs = append(pairs, p)
	}
	return pairs, nil
}

// comparers run range comparisons on their pairs; the first failure
// cancels the comparison.
type comparers struct {
	tasks  chan func(p *pair) error
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	cancel context.CancelCauseFunc
}

// startWorkers starts one comparer per pair.
func startWorkers(pairs []*pair, cancel context.CancelCauseFunc) *comparers {
	w := &comparers{tasks: make(chan func(p *pair) error), cancel: cancel}
	for _, p := range pairs {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for task := range w.tasks {
				if err := task(p); err != nil {
					w.fail(err)
				}
			}
		}()
	}
	return w
}

// fail records the first failure and cancels the comparison.
func (w *comparers) fail(err error) {
	w.once.Do(func() { w.err = err; w.cancel(err) })
}

// wait lets the comparers finish their tasks and returns the first
// failure.
func (w *comparers) wait() error {
	close(w.tasks)
	w.wg.Wait()
	return w.err
}

// skipError marks a table that cannot be compared.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

// table is the plan and running result of one table.
type table struct {
	cfg     Config
	m       change.Mapping
	rowSQL  string   // ROW(cols)::text, the row as shown in examples
	hashSQL string   // the row hash, a bigint, of its canonical text (hashSQL)
	keys    []string // quoted key columns (with COLLATE "C" where needed)
	names   []string // key column names
	types   []string // key column types
	multi   bool
	collate bool // text keys in the C collation

	mu      sync.Mutex
	res     TableResult
	pending int
	done    func()
}

func plan(ctx context.Context, p *pair, cfg Config, sides sides, m change.Mapping) (*table, error) {
	src, err := schemasync.Describe(ctx, p.src, m.Source)
	if err != nil {
		if errors.Is(err, schemasync.ErrTableNotFound) {
			return nil, &skipError{reason: "the source table does not exist"}
		}
		return nil, fmt.Errorf("describe source table %s: %w", m.Source, err)
	}
	dst, err := schemasync.Describe(ctx, p.dst, m.Destination)
	if err != nil {
		if errors.Is(err, schemasync.ErrTableNotFound) {
			return nil, &skipError{reason: "the destination table does not exist"}
		}
		return nil, fmt.Errorf("describe destination table %s: %w", m.Destination, err)
	}
	cols := src.Replicated(m)
	quoted := make([]string, 0, len(cols))
	canonical := make([]string, 0, len(cols))
	for _, c := range cols {
		d, ok := dst.Column(c.Name)
		if !ok {
			return nil, &skipError{reason: fmt.Sprintf("column %s is missing on the destination: run sync-schema first", c.Name)}
		}
		quoted = append(quoted, sqlquote.Ident(c.Name))
		canonical = append(canonical, canonicalColumn(c, d))
	}
	if len(quoted) == 0 {
		return nil, &skipError{reason: "no replicated columns"}
	}
	t := &table{cfg: cfg, m: m, rowSQL: "ROW(" + strings.Join(quoted, ", ") + ")::pg_catalog.text",
		hashSQL: hashSQL("ROW("+strings.Join(canonical, ", ")+")::pg_catalog.text", sides)}
	t.res = TableResult{Table: m.Source.String(), Destination: m.Destination.String(), Method: MethodKeyRanges,
		Missing: []string{}, Extra: []string{}, Different: []string{}}
	if len(src.PrimaryKey) == 0 {
		t.multi = true
		t.res.Method = MethodMultiset
		return t, nil
	}
	t.collate = sides.collate
	for _, k := range src.PrimaryKey {
		c, _ := src.Column(k)
		expr := sqlquote.Ident(k)
		if t.collate {
			var collatable bool
			if err := p.src.QueryRow(ctx, `SELECT typcollation OPERATOR(pg_catalog.<>) 0 FROM pg_catalog.pg_type WHERE oid OPERATOR(pg_catalog.=) $1::pg_catalog.oid`, c.TypeOID).Scan(&collatable); err != nil {
				return nil, fmt.Errorf("read key column type: %w", err)
			}
			if collatable {
				expr += ` COLLATE "C"`
			}
		}
		t.keys = append(t.keys, expr)
		t.names = append(t.names, k)
		t.types = append(t.types, c.Type)
	}
	return t, nil
}

// sides is what Compare learns once of the two databases.
type sides struct {
	// collate: the databases sort text differently by default (their
	// collations or encodings differ); keys are then compared in the C
	// collation.
	collate bool
	// fastHash: both databases compute hashtextextended alike, so rows are
	// hashed with it rather than with md5.
	fastHash bool
	// encodings: the databases' encodings differ; row texts are converted
	// to UTF8 before they are hashed.
	encodings bool
}

// hashProbe is hashed on both sides to find out whether hashtextextended
// (PostgreSQL 11 and later) gives the same results there (it depends on the
// CPU's byte order).
const hashProbe = `SELECT pg_catalog.hashtextextended('pgmirror verification probe: 0123456789 abcdefghijklmnopqrstuvwxyz'::pg_catalog.text, 7::pg_catalog.int8)::pg_catalog.text`

// compareSides reads the collations of both databases and finds out which
// row hash they share.
func compareSides(ctx context.Context, p *pair) (sides, error) {
	var s sides
	var probes [2]struct {
		collation, encoding string
		version             int
		hash                string
	}
	for i, tx := range []pgx.Tx{p.src, p.dst} {
		err := tx.QueryRow(ctx, `SELECT pg_catalog.concat(datcollate, '/', datctype), pg_catalog.pg_encoding_to_char(encoding), pg_catalog.current_setting('server_version_num'::pg_catalog.text)::pg_catalog.int4
			FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()`).Scan(&probes[i].collation, &probes[i].encoding, &probes[i].version)
		if err == nil && pgversion.Of(probes[i].version).HashTextExtended() {
			err = tx.QueryRow(ctx, hashProbe).Scan(&probes[i].hash)
		}
		if err != nil {
			return s, fmt.Errorf("read the %s database's collation and hash function: %w", [2]string{"source", "destination"}[i], err)
		}
	}
	s.encodings = probes[0].encoding != probes[1].encoding
	s.collate = probes[0].collation != probes[1].collation || s.encodings
	s.fastHash = probes[0].hash != "" && probes[0].hash == probes[1].hash && !s.encodings
	return s, nil
}

// hashSQL returns a 64-bit hash (bigint) of the row text rowSQL:
// hashtextextended (fast) when both sides compute it alike, else the first
// 64 bits of md5, of the text in UTF8 when the databases' encodings differ.
// The text is hashed in the C collation, byte for byte.
func hashSQL(rowSQL string, s sides) string {
	switch {
	case s.encodings:
		return md5Bits("pg_catalog.convert_to(" + rowSQL + ", 'UTF8'::pg_catalog.name)")
	case s.fastHash:
		return "pg_catalog.hashtextextended((" + rowSQL + `) COLLATE "C", 0::pg_catalog.int8)`
	}
	return md5Bits(rowSQL)
}

// md5Bits returns the first 64 bits of the md5 of expr (text or bytea) as
// a bigint. Every function and type is named in pg_catalog, so that
// nothing a database user created can be chosen instead, whatever the
// search_path.
func md5Bits(expr string) string {
	return "pg_catalog.textcat('x'::pg_catalog.text, pg_catalog.substr(pg_catalog.md5(" + expr + "), 1, 16))::pg_catalog.bit(64)::pg_catalog.int8"
}

func (t *table) result() TableResult {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res
}

// submit queues the table's ranges (or buckets) on tasks; done runs after
// the last. The first-level boundaries are read on the planner's source
// snapshot and each range is queued as soon as its end is known, so the
// workers start while the planner still reads.
func (t *table) submit(ctx context.Context, planner *pair, tasks chan<- func(*pair) error) error {
	t.mu.Lock()
	t.pending = 1 // the planning itself, done at the end
	t.mu.Unlock()
	defer t.unitDone()
	queue := func(u func(p *pair) error) error {
		t.mu.Lock()
		t.pending++
		t.mu.Unlock()
		task := func(p *pair) error {
			defer t.unitDone()
			if ctx.Err() != nil {
				return nil
			}
			return u(p)
		}
		select {
		case tasks <- task:
			return nil
		case <-ctx.Done():
			t.unitDone()
			return context.Cause(ctx)
		}
	}
	if t.multi {
		return queue(func(p *pair) error { return t.compareBuckets(ctx, p) })
	}
	var lo []string
	err := t.boundaries(ctx, planner.src, t.m.Source.Quoted(), nil, nil, t.cfg.ChunkRows, func(hi []string) error {
		from := lo
		lo = hi
		return queue(func(p *pair) error { return t.compareRange(ctx, p, from, hi, true) })
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("plan ranges of %s: %w", t.m.Source, err)
	}
	return queue(func(p *pair) error { return t.compareRange(ctx, p, lo, nil, true) })
}

func (t *table) unitDone() {
	t.mu.Lock()
	t.pending--
	last := t.pending == 0
	t.mu.Unlock()
	if last {
		t.done()
	}
}

// where returns the condition of the key range [lo, hi) (nil: open) with
// its parameters numbered from 1.
func (t *table) where(lo, hi []string) (string, []any) {
	var conds []string
	var args []any
	keys := "(" + strings.Join(t.keys, ", ") + ")"
	bound := func(op string, vals []string) {
		ph := make([]string, len(vals))
		for i, v := range vals {
			args = append(args, v)
			ph[i] = fmt.Sprintf("$%d::%s", len(args), t.types[i])
			if strings.HasSuffix(t.keys[i], `COLLATE "C"`) {
				ph[i] += ` COLLATE "C"`
			}
		}
		conds = append(conds, keys+" "+op+" ("+strings.Join(ph, ", ")+")")
	}
	if lo != nil {
		bound(">=", lo)
	}
	if hi != nil {
		bound("<", hi)
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

func (t *table) order() string { return strings.Join(t.keys, ", ") }

// boundaries calls fn, in key order, with the keys that cut [lo, hi) on tx
// into ranges of every keys.
func (t *table) boundaries(ctx context.Context, tx pgx.Tx, rel string, lo, hi []string, every int, fn func([]string) error) error {
	where, args := t.where(lo, hi)
	texts := make([]string, len(t.keys))
	for i, k := range t.keys {
		texts[i] = "(" + k + ")::pg_catalog.text"
	}
	args = append(args, every)
	q := fmt.Sprintf(`SELECT %s FROM (SELECT %s, pg_catalog.row_number() OVER (ORDER BY %s) AS pgmirror_rn FROM %s WHERE %s) s
		WHERE pgmirror_rn OPERATOR(pg_catalog.>) 1 AND pg_catalog.int8mod(pgmirror_rn OPERATOR(pg_catalog.-) 1, $%d::pg_catalog.int8) OPERATOR(pg_catalog.=) 0 ORDER BY pgmirror_rn`,
		strings.Join(texts, ", "), strings.Join(t.keysBare(), ", "), t.order(), rel, where, len(args))
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		vals := make([]string, len(t.keys))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		if err := fn(vals); err != nil {
			return err
		}
	}
	return rows.Err()
}

// keysBare returns the key columns without collation clauses, for a
// subquery's select list.
func (t *table) keysBare() []string {
	out := make([]string, len(t.names))
	for i, n := range t.names {
		out[i] = sqlquote.Ident(n)
	}
	return out
}
