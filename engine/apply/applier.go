package apply

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// ErrForeignKeyViolation matches (errors.Is) a destination foreign key
// violation (SQLSTATE 23503). With session_replication_role = replica
// (the default whenever the destination user may set it) foreign keys are
// not checked and this cannot happen.
var ErrForeignKeyViolation = errors.New("foreign key violation on the destination")

// ErrMissingColumn matches (errors.Is) a source column, not excluded, that
// the destination table lacks: the destination schema must be synced (for
// example after a column was added on the source) before CDC can go on.
var ErrMissingColumn = errors.New("destination table lacks a replicated column")

// Counts are the changes received for one source table: every source change
// counts once, even when several changes to one row collapse into one
// statement.
type Counts struct {
	Inserted, Updated, Deleted int64
}

// Config configures an Applier.
type Config struct {
	// MirrorUID identifies the mirror's row in _pgmirror.applied.
	MirrorUID string
	// Mappings says where each source table goes and which columns stay out.
	Mappings []change.Mapping
	// ChunkSize is how many changes are buffered before they are written
	// into the open destination transaction. Default 5000.
	ChunkSize int
	// ChunkBytes also ends a chunk once the buffered values hold this many
	// bytes (for rows with large values). Default 64 MiB.
	ChunkBytes int
	// Logger receives warnings. Default: discard.
	Logger *slog.Logger
	// OnColumnsDropped, when set, is called when the source describes a
	// table again without columns it sent before (dropped or renamed on the
	// source). The destination keeps those columns; new rows leave them
	// to their default.
	OnColumnsDropped func(ctx context.Context, table change.TableName, columns []string)
}

// Applier writes batches of source changes to the destination. It owns its
// connection for its life (temporary staging tables live in the session)
// and is not safe for concurrent use.
//
// A batch is Begin, any number of Apply calls, then Commit (or Rollback).
// The whole batch is one destination transaction that also records the
// applied position, so the destination never shows part of a batch and
// never applies a batch twice.
//
// Foreign keys and triggers: the session runs with
// session_replication_role = replica, as PostgreSQL's own apply worker does,
// so destination foreign keys and ordinary triggers do not fire; the source
// already checked the constraints, and the destination converges to the
// source's state at every batch boundary. If the destination user may not
// set it (it needs superuser), the applier logs a warning and applies with
// constraints checked, writing each run of consecutive changes to one table
// before the next so that the source's order across tables is kept; a
// violation is then returned as an error matching ErrForeignKeyViolation.
// (Within one table, collapsing by key still reorders changes, so a
// self-referencing foreign key can fail in that mode.)
type Applier struct {
	conn        *pgx.Conn
	cfg         Config
	log         *slog.Logger
	mappings    map[change.TableName]*change.Mapping
	tables      map[change.TableName]*destTable
	plans       map[*change.Relation]*plan
	current     map[change.TableName]*plan // latest plan per source table
	dirty       []*plan                    // plans with buffered changes, in first-use order
	tx          pgx.Tx
	pending     int
	pendingSize int
	counts      map[string]*Counts
	stageSeq    int
	replicaRole bool
	lastPlan    *plan // plan of the previous change (ordering without replica role)
	copyBuf     bytes.Buffer
}

// New prepares an Applier on conn: it creates the metadata table when
// absent and sets session_replication_role = replica when allowed.
func New(ctx context.Context, conn *pgx.Conn, cfg Config) (*Applier, error) {
	cfg.ChunkSize = cmp.Or(cfg.ChunkSize, 5000)
	cfg.ChunkBytes = cmp.Or(cfg.ChunkBytes, 64<<20)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &Applier{
		conn:     conn,
		cfg:      cfg,
		log:      logger,
		mappings: map[change.TableName]*change.Mapping{},
		tables:   map[change.TableName]*destTable{},
		plans:    map[*change.Relation]*plan{},
		current:  map[change.TableName]*plan{},
		counts:   map[string]*Counts{},
	}
	for i := range cfg.Mappings {
		m := cfg.Mappings[i]
		a.mappings[m.Source] = &m
	}
	if err := EnsureMeta(ctx, conn); err != nil {
		return nil, err
	}
	_, err := conn.Exec(ctx, "SET session_replication_role = replica")
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		a.replicaRole = true
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		a.log.Warn("destination user may not set session_replication_role; foreign keys and triggers on the destination will fire during apply")
	default:
		return nil, fmt.Errorf("set session_replication_role on destination: %w", err)
	}
	return a, nil
}

// InBatch reports whether a batch transaction is open.
func (a *Applier) InBatch() bool { return a.tx != nil }

// Begin opens the batch transaction.
func (a *Applier) Begin(ctx context.Context) error {
	if a.tx != nil {
		return errors.New("begin batch: a batch is already open")
	}
	tx, err := a.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin destination transaction: %w", err)
	}
	a.tx = tx
	return nil
}

// Apply adds one change to the open batch. Changes are buffered and written
// in chunks of Config.ChunkSize; changes to tables without a mapping are
// ignored.
func (a *Applier) Apply(ctx context.Context, c *change.Change) error {
	if a.tx == nil {
		return errors.New("apply change: no batch open")
	}
	if c.Op == change.OpTruncate {
		return a.truncate(ctx, c)
	}
	p, err := a.planFor(ctx, c.Relation)
	if err != nil || p == nil {
		return err
	}
	cnt := a.counts[c.Relation.Table.String()]
	if cnt == nil {
		cnt = &Counts{}
		a.counts[c.Relation.Table.String()] = cnt
	}
	switch c.Op {
	case change.OpInsert:
		cnt.Inserted++
	case change.OpUpdate:
		cnt.Updated++
	case change.OpDelete:
		cnt.Deleted++
	default:
		return fmt.Errorf("apply change: unknown operation %d", c.Op)
	}
	if !a.replicaRole && a.lastPlan != p && a.pending > 0 {
		// Foreign keys are checked: keep the source's order across tables
		// by writing each run of changes to one table before the next.
		if err := a.flush(ctx); err != nil {
			return err
		}
	}
	a.lastPlan = p
	if !p.buffered() {
		a.dirty = append(a.dirty, p)
	}
	if p.keyed {
		if err := a.collapse(ctx, p, c); err != nil {
			return err
		}
	} else {
		p.ops = append(p.ops, c)
	}
	a.pending++
	a.pendingSize += c.Size()
	if a.pending >= a.cfg.ChunkSize || a.pendingSize >= a.cfg.ChunkBytes {
		return a.flush(ctx)
	}
	return nil
}

// Commit writes what is buffered, records lsn and batchID as the mirror's
// applied position in the same transaction, and commits. It returns the
// per-table counts of the batch (key: source schema.table).
func (a *Applier) Commit(ctx context.Context, lsn change.LSN, batchID int64) (map[string]Counts, error) {
	if a.tx == nil {
		return nil, errors.New("commit batch: no batch open")
	}
	if err := a.flush(ctx); err != nil {
		return nil, err
	}
	if err := SetAppliedPosition(ctx, a.tx, a.cfg.MirrorUID, lsn, batchID); err != nil {
		return nil, err
	}
	err := a.tx.Commit(ctx)
	a.tx = nil
	if err != nil {
		a.reset()
		return nil, classify(fmt.Errorf("commit batch %d at %s: %w", batchID, lsn, err))
	}
	for _, p := range a.plans {
		p.stageUsed = false
	}
	counts := make(map[string]Counts, len(a.counts))
	for k, v := range a.counts {
		counts[k] = *v
	}
	a.counts = map[string]*Counts{}
	return counts, nil
}

// SetTablePositions records, inside the open batch, the per-table positions
// in set and forgets those in forget (see TablePositions).
func (a *Applier) SetTablePositions(ctx context.Context, set map[string]change.LSN, forget []string) error {
	if a.tx == nil {
		return errors.New("set table positions: no batch open")
	}
	for table, lsn := range set {
		if err := SetTablePosition(ctx, a.tx, a.cfg.MirrorUID, table, lsn); err != nil {
			return err
		}
	}
	if len(forget) > 0 {
		return DeleteTablePositions(ctx, a.tx, a.cfg.MirrorUID, forget)
	}
	return nil
}

// Rollback abandons the open batch (nothing of it reaches the destination).
func (a *Applier) Rollback(ctx context.Context) error {
	if a.tx == nil {
		return nil
	}
	err := a.tx.Rollback(ctx)
	a.tx = nil
	a.reset()
	if err != nil {
		return fmt.Errorf("roll back destination transaction: %w", err)
	}
	return nil
}

// reset forgets everything tied to the session's transaction state: a
// rolled-back transaction may have created staging tables that are gone.
func (a *Applier) reset() {
	a.plans = map[*change.Relation]*plan{}
	a.current = map[change.TableName]*plan{}
	a.tables = map[change.TableName]*destTable{}
	a.dirty = nil
	a.lastPlan = nil
	a.pending = 0
	a.pendingSize = 0
	a.counts = map[string]*Counts{}
}

// flush writes every buffered change into the open transaction.
func (a *Applier) flush(ctx context.Context) error {
	for _, p := range a.dirty {
		if err := a.flushPlan(ctx, p); err != nil {
			return err
		}
	}
	a.dirty = a.dirty[:0]
	a.pending = 0
	a.pendingSize = 0
	return nil
}

func (a *Applier) flushPlan(ctx context.Context, p *plan) error {
	if p.keyed {
		return a.flushKeyed(ctx, p)
	}
	return a.flushOrdered(ctx, p)
}

func (a *Applier) truncate(ctx context.Context, c *change.Change) error {
	if err := a.flush(ctx); err != nil {
		return err
	}
	var names []string
	for _, rel := range c.Truncated {
		if m := a.mappings[rel.Table]; m != nil {
			names = append(names, m.Destination.Quoted())
		}
	}
	if len(names) == 0 {
		return nil
	}
	sql := "TRUNCATE " + strings.Join(names, ", ")
	if c.RestartIdentity {
		sql += " RESTART IDENTITY"
	}
	if c.Cascade {
		sql += " CASCADE"
	}
	if _, err := a.tx.Exec(ctx, sql); err != nil {
		return classify(fmt.Errorf("truncate %s: %w", strings.Join(names, ", "), err))
	}
	return nil
}

// classify marks foreign key violations with ErrForeignKeyViolation.
func classify(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23503" {
		return fmt.Errorf("%w: %w", ErrForeignKeyViolation, err)
	}
	return err
}

// destTable is what the applier knows of a destination table.
type destTable struct {
	name        change.TableName
	types       map[string]string // column name -> SQL type (format_type)
	pk          map[string]bool
	required    map[string]bool // NOT NULL without a default: an insert must name it
	partitioned bool
}

func (a *Applier) destTable(ctx context.Context, name change.TableName) (*destTable, error) {
	if t := a.tables[name]; t != nil {
		return t, nil
	}
	rows, err := a.tx.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
			coalesce(a.attnum = ANY (i.indkey), false), c.relkind = 'p', a.attnotnull AND NOT a.atthasdef
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')
		ORDER BY a.attnum`, name.Schema, name.Name)
	if err != nil {
		return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
	}
	t := &destTable{name: name, types: map[string]string{}, pk: map[string]bool{}, required: map[string]bool{}}
	for rows.Next() {
		var col, typ string
		var pk, part, required bool
		if err := rows.Scan(&col, &typ, &pk, &part, &required); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
		}
		t.types[col] = typ
		if pk {
			t.pk[col] = true
		}
		if required && !pk {
			t.required[col] = true
		}
		t.partitioned = part
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of destination table %s: %w", name, err)
	}
	if len(t.types) == 0 {
		return nil, fmt.Errorf("destination table %s does not exist", name)
	}
	a.tables[name] = t
	return t, nil
}

// plan is how changes of one relation version are applied.
type plan struct {
	rel    *change.Relation
	dest   *destTable
	srcIdx []int    // relation column index of each applied column
	names  []string // applied column names (same on both sides)
	types  []string // destination SQL types of the applied columns
	keyed  bool     // the destination primary key identifies rows
	keyPos []int    // positions (in applied columns) of the key columns
	// identPos are positions of the source's replica identity columns
	// (ordered mode, when the old row image holds only the key).
	identPos []int

	stage     string // keyed: staging table name, "" until created
	stageUsed bool   // keyed: the staging table has rows in this transaction

	entries map[string]*entry // keyed: final state per key
	order   []string          // keyed: keys in first-seen order
	ops     []*change.Change  // ordered: changes in order
}

type entry struct {
	del  bool
	vals []change.Value // applied-column order
}

func (p *plan) buffered() bool { return len(p.entries) > 0 || len(p.ops) > 0 }

// planFor returns the plan for rel, or nil when rel has no mapping.
func (a *Applier) planFor(ctx context.Context, rel *change.Relation) (*plan, error) {
	if p := a.plans[rel]; p != nil {
		return p, nil
	}
	m := a.mappings[rel.Table]
	if m == nil {
		return nil, nil
	}
	old := a.current[rel.Table]
	if old != nil && sameShape(old.rel, rel) {
		// The source re-sends descriptions after cache invalidations that
		// change nothing we use (VACUUM, ANALYZE): keep the plan and its
		// staging table.
		delete(a.plans, old.rel)
		old.rel = rel
		a.plans[rel] = old
		return old, nil
	}
	reported := map[string]bool{}
	if old != nil {
		if dropped := droppedColumns(old.rel, rel); len(dropped) > 0 && a.cfg.OnColumnsDropped != nil {
			a.cfg.OnColumnsDropped(ctx, rel.Table, dropped)
			for _, c := range dropped {
				reported[c] = true
			}
		}
		// A new shape of the table (DDL on the source): write what was
		// buffered under the old one first, to keep the order, and drop
		// the old staging table.
		if err := a.flush(ctx); err != nil {
			return nil, err
		}
		if old.stage != "" {
			if _, err := a.tx.Exec(ctx, "DROP TABLE IF EXISTS pg_temp."+change.QuoteIdent(old.stage)); err != nil {
				return nil, fmt.Errorf("drop staging table for %s: %w", old.dest.name, err)
			}
		}
		delete(a.plans, old.rel)
	}
	dest, err := a.destTable(ctx, m.Destination)
	if err != nil {
		return nil, err
	}
	// The destination may have been altered since it was read (a schema
	// sync adding a column): read it again when a column seems missing.
	for _, c := range rel.Columns {
		if _, ok := dest.types[c.Name]; !ok && !m.Excluded(c.Name) {
			delete(a.tables, m.Destination)
			if dest, err = a.destTable(ctx, m.Destination); err != nil {
				return nil, err
			}
			break
		}
	}
	if err := a.relaxUnsent(ctx, m, rel, dest, reported); err != nil {
		return nil, err
	}
	p := &plan{rel: rel, dest: dest, entries: map[string]*entry{}}
	for i, c := range rel.Columns {
		if m.Excluded(c.Name) {
			continue
		}
		typ, ok := dest.types[c.Name]
		if !ok {
			return nil, fmt.Errorf("%w: destination table %s has no column %q of source table %s (sync the schema)", ErrMissingColumn, m.Destination, c.Name, rel.Table)
		}
		if c.Key {
			p.identPos = append(p.identPos, len(p.names))
		}
		if dest.pk[c.Name] {
			p.keyPos = append(p.keyPos, len(p.names))
		}
		p.srcIdx = append(p.srcIdx, i)
		p.names = append(p.names, c.Name)
		p.types = append(p.types, typ)
	}
	// Keyed apply needs every destination key column in the stream, and in
	// every old row image the source sends.
	p.keyed = len(dest.pk) > 0 && len(p.keyPos) == len(dest.pk)
	if p.keyed && rel.ReplicaIdentity != change.IdentityFull {
		for _, k := range p.keyPos {
			if !rel.Columns[p.srcIdx[k]].Key {
				p.keyed = false
			}
		}
	}
	a.plans[rel] = p
	a.current[rel.Table] = p
	return p, nil
}

// sameShape reports whether two descriptions of a table have the same
// columns, types, key flags and replica identity.
// relaxUnsent drops NOT NULL from destination columns (outside the primary
// key, without a default, not excluded) that the source does not send,
// typically columns dropped or renamed on the source: inserts leave them
// NULL, and would fail otherwise. It runs in the batch transaction and
// reports the columns not yet reported as dropped.
func (a *Applier) relaxUnsent(ctx context.Context, m *change.Mapping, rel *change.Relation, dest *destTable, reported map[string]bool) error {
	sent := map[string]bool{}
	for _, c := range rel.Columns {
		sent[c.Name] = true
	}
	for col := range dest.required {
		// Excluded columns are the user's choice: leave their definition.
		if sent[col] || m.Excluded(col) {
			continue
		}
		stmt := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL", dest.name.Quoted(), change.QuoteIdent(col))
		if _, err := a.tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("relax destination column the source does not send: %s: %w", stmt, err)
		}
		delete(dest.required, col)
		a.log.Warn("destination column is not sent by the source; dropped its NOT NULL so rows can be inserted",
			"table", dest.name.String(), "column", col)
		if a.cfg.OnColumnsDropped != nil && !reported[col] {
			a.cfg.OnColumnsDropped(ctx, rel.Table, []string{col})
		}
	}
	return nil
}

// droppedColumns returns the columns of before that after no longer has.
func droppedColumns(before, after *change.Relation) []string {
	now := map[string]bool{}
	for _, c := range after.Columns {
		now[c.Name] = true
	}
	var out []string
	for _, c := range before.Columns {
		if !now[c.Name] {
			out = append(out, c.Name)
		}
	}
	return out
}

func sameShape(a, b *change.Relation) bool {
	if a.ReplicaIdentity != b.ReplicaIdentity || len(a.Columns) != len(b.Columns) {
		return false
	}
	for i := range a.Columns {
		if a.Columns[i] != b.Columns[i] {
			return false
		}
	}
	return true
}

// project maps a source row image to applied-column order.
func (p *plan) project(vals []change.Value) []change.Value {
	out := make([]change.Value, len(p.srcIdx))
	for i, s := range p.srcIdx {
		out[i] = vals[s]
	}
	return out
}

// key encodes the key columns of vals (applied-column order).
func (p *plan) key(vals []change.Value) string {
	var b strings.Builder
	for _, k := range p.keyPos {
		v := vals[k]
		b.WriteByte(byte(v.Kind))
		b.WriteString(strconv.Itoa(len(v.Text)))
		b.WriteByte(':')
		b.Write(v.Text)
	}
	return b.String()
}

func hasUnchanged(vals []change.Value) bool {
	for _, v := range vals {
		if v.Kind == change.ValueUnchanged {
			return true
		}
	}
	return false
}

// collapse folds c into the final state of its key(s).
func (a *Applier) collapse(ctx context.Context, p *plan, c *change.Change) error {
	switch c.Op {
	case change.OpInsert:
		vals := p.project(c.New)
		p.put(p.key(vals), &entry{vals: vals})
	case change.OpUpdate:
		vals := p.project(c.New)
		newKey := p.key(vals)
		oldKey := newKey
		var oldVals []change.Value
		if c.Old != nil {
			oldVals = p.project(c.Old)
			oldKey = p.key(oldVals)
		}
		if hasUnchanged(vals) {
			// Unchanged TOAST values: take them from an earlier image of
			// the row in this chunk when there is one.
			if prev := p.entries[oldKey]; prev != nil && !prev.del {
				for i, v := range vals {
					if v.Kind == change.ValueUnchanged {
						vals[i] = prev.vals[i]
					}
				}
			}
		}
		if oldKey != newKey {
			if hasUnchanged(vals) {
				// The row moved to a new key and keeps values only the
				// destination has: move it in place, in order.
				if err := a.flushPlan(ctx, p); err != nil {
					return err
				}
				return a.moveRow(ctx, p, oldVals, vals)
			}
			p.put(oldKey, &entry{del: true, vals: oldVals})
		}
		p.put(newKey, &entry{vals: vals})
	case change.OpDelete:
		vals := p.project(c.Old)
		p.put(p.key(vals), &entry{del: true, vals: vals})
	}
	return nil
}

func (p *plan) put(key string, e *entry) {
	if _, ok := p.entries[key]; !ok {
		p.order = append(p.order, key)
	}
	p.entries[key] = e
}

// moveRow updates the row at the old key to the new image, leaving
// unchanged columns alone.
func (a *Applier) moveRow(ctx context.Context, p *plan, oldVals, vals []change.Value) error {
	var (
		sets, where []string
		args        []any
	)
	for i, v := range vals {
		if v.Kind == change.ValueUnchanged {
			continue
		}
		args = append(args, textArg(v))
		sets = append(sets, fmt.Sprintf("%s = $%d::%s", change.QuoteIdent(p.names[i]), len(args), p.types[i]))
	}
	for _, k := range p.keyPos {
		args = append(args, textArg(oldVals[k]))
		where = append(where, fmt.Sprintf("%s = $%d::%s", change.QuoteIdent(p.names[k]), len(args), p.types[k]))
	}
	sql := "UPDATE " + p.dest.name.Quoted() + " SET " + strings.Join(sets, ", ") + " WHERE " + strings.Join(where, " AND ")
	if _, err := a.tx.Exec(ctx, sql, args...); err != nil {
		return classify(fmt.Errorf("move row of %s to a new key: %w", p.dest.name, err))
	}
	return nil
}

func textArg(v change.Value) any {
	if v.Kind != change.ValueText {
		return nil
	}
	return string(v.Text)
}

// flushKeyed loads the final state of every key into the staging table and
// applies it with set-based statements: deletes, upserts of complete rows,
// and updates of rows with unchanged TOAST columns (one per set of
// unchanged columns).
func (a *Applier) flushKeyed(ctx context.Context, p *plan) error {
	if len(p.entries) == 0 {
		return nil
	}
	if err := a.prepareStage(ctx, p); err != nil {
		return err
	}
	buf := &a.copyBuf
	buf.Reset()
	hasDel := false
	masks := map[string]bool{}
	for _, k := range p.order {
		e := p.entries[k]
		if e.del {
			hasDel = true
			buf.WriteString("d\t\t")
			writeCopyRow(buf, e.vals, p.keyPos)
			continue
		}
		var mask []string
		for i, v := range e.vals {
			if v.Kind == change.ValueUnchanged {
				mask = append(mask, strconv.Itoa(i))
			}
		}
		m := strings.Join(mask, ",")
		masks[m] = true
		buf.WriteString("u\t")
		buf.WriteString(m)
		buf.WriteByte('\t')
		writeCopyRow(buf, e.vals, nil)
	}
	stage := "pg_temp." + change.QuoteIdent(p.stage)
	if _, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), "COPY "+stage+" FROM STDIN"); err != nil {
		return fmt.Errorf("load staging rows for %s: %w", p.dest.name, err)
	}
	p.stageUsed = true
	clear(p.entries)
	p.order = p.order[:0]

	target := p.dest.name.Quoted()
	var keyMatch []string
	for _, k := range p.keyPos {
		keyMatch = append(keyMatch, fmt.Sprintf("t.%s = s.c%d::%s", change.QuoteIdent(p.names[k]), k, p.types[k]))
	}
	match := strings.Join(keyMatch, " AND ")
	batch := &pgx.Batch{}
	var what []string
	if hasDel {
		batch.Queue("DELETE FROM " + target + " AS t USING " + stage + " AS s WHERE s.op = 'd' AND " + match)
		what = append(what, "delete")
	}
	if masks[""] {
		var cols, sel, keys, sets []string
		for i, n := range p.names {
			q := change.QuoteIdent(n)
			cols = append(cols, q)
			sel = append(sel, fmt.Sprintf("s.c%d::%s", i, p.types[i]))
			if p.dest.pk[n] {
				keys = append(keys, q)
			} else {
				sets = append(sets, q+" = EXCLUDED."+q)
			}
		}
		conflict := "DO NOTHING"
		if len(sets) > 0 {
			conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
		}
		batch.Queue("INSERT INTO " + target + " AS t (" + strings.Join(cols, ", ") + ") SELECT " + strings.Join(sel, ", ") +
			" FROM " + stage + " AS s WHERE s.op = 'u' AND s.mask = '' ON CONFLICT (" + strings.Join(keys, ", ") + ") " + conflict)
		what = append(what, "upsert")
	}
	maskList := make([]string, 0, len(masks))
	for m := range masks {
		if m != "" {
			maskList = append(maskList, m)
		}
	}
	sort.Strings(maskList)
	for _, m := range maskList {
		skip := map[int]bool{}
		for _, s := range strings.Split(m, ",") {
			i, _ := strconv.Atoi(s)
			skip[i] = true
		}
		var sets []string
		for i, n := range p.names {
			if skip[i] || p.dest.pk[n] {
				continue
			}
			sets = append(sets, fmt.Sprintf("%s = s.c%d::%s", change.QuoteIdent(n), i, p.types[i]))
		}
		if len(sets) == 0 {
			continue
		}
		batch.Queue("UPDATE "+target+" AS t SET "+strings.Join(sets, ", ")+" FROM "+stage+" AS s WHERE s.op = 'u' AND s.mask = $1 AND "+match, m)
		what = append(what, "update")
	}
	br := a.tx.SendBatch(ctx, batch)
	for _, w := range what {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return classify(fmt.Errorf("apply %s to %s: %w", w, p.dest.name, err))
		}
	}
	if err := br.Close(); err != nil {
		return classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
	}
	return nil
}

// prepareStage makes sure p's staging table exists and is empty.
func (a *Applier) prepareStage(ctx context.Context, p *plan) error {
	if p.stage != "" {
		if p.stageUsed {
			if _, err := a.tx.Exec(ctx, "TRUNCATE pg_temp."+change.QuoteIdent(p.stage)); err != nil {
				return fmt.Errorf("empty staging table for %s: %w", p.dest.name, err)
			}
			p.stageUsed = false
		}
		return nil
	}
	a.stageSeq++
	name := fmt.Sprintf("pgmirror_stage_%d", a.stageSeq)
	cols := []string{"op text", "mask text"}
	for i := range p.names {
		cols = append(cols, fmt.Sprintf("c%d text", i))
	}
	sql := "CREATE TEMP TABLE " + change.QuoteIdent(name) + " (" + strings.Join(cols, ", ") + ") ON COMMIT DELETE ROWS"
	if _, err := a.tx.Exec(ctx, sql); err != nil {
		return fmt.Errorf("create staging table for %s: %w", p.dest.name, err)
	}
	p.stage = name
	return nil
}

// writeCopyRow writes vals as a text-format COPY row. With only set, the
// other columns are written as NULL.
func writeCopyRow(buf *bytes.Buffer, vals []change.Value, only []int) {
	j := 0
	for i := range vals {
		if i > 0 {
			buf.WriteByte('\t')
		}
		if only == nil || (j < len(only) && only[j] == i) {
			j++
			writeCopyValue(buf, vals[i])
		} else {
			buf.WriteString(`\N`)
		}
	}
	buf.WriteByte('\n')
}

// writeCopyValue writes one value in COPY text format.
func writeCopyValue(buf *bytes.Buffer, v change.Value) {
	if v.Kind != change.ValueText {
		buf.WriteString(`\N`)
		return
	}
	for _, c := range v.Text {
		switch c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteByte(c)
		}
	}
}

// flushOrdered applies the changes of a table without a usable key in
// order: runs of inserts by COPY, each update and delete on exactly one
// matching row.
func (a *Applier) flushOrdered(ctx context.Context, p *plan) error {
	buf := &a.copyBuf
	buf.Reset()
	batch := &pgx.Batch{}
	var stmts []string
	cols := make([]string, len(p.names))
	for i, n := range p.names {
		cols[i] = change.QuoteIdent(n)
	}
	copySQL := "COPY " + p.dest.name.Quoted() + " (" + strings.Join(cols, ", ") + ") FROM STDIN"
	flushInserts := func() error {
		if buf.Len() == 0 {
			return nil
		}
		_, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), copySQL)
		buf.Reset()
		if err != nil {
			return classify(fmt.Errorf("copy inserted rows into %s: %w", p.dest.name, err))
		}
		return nil
	}
	flushStmts := func() error {
		if len(stmts) == 0 {
			return nil
		}
		br := a.tx.SendBatch(ctx, batch)
		for _, op := range stmts {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return classify(fmt.Errorf("apply %s to %s: %w", op, p.dest.name, err))
			}
			if tag.RowsAffected() == 0 {
				a.log.Warn("no destination row matched a replicated change", "table", p.dest.name.String(), "op", op)
			}
		}
		batch = &pgx.Batch{}
		stmts = stmts[:0]
		if err := br.Close(); err != nil {
			return classify(fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
		}
		return nil
	}
	for _, c := range p.ops {
		if c.Op == change.OpInsert {
			if err := flushStmts(); err != nil {
				return err
			}
			writeCopyRow(buf, p.project(c.New), nil)
			continue
		}
		if err := flushInserts(); err != nil {
			return err
		}
		sql, args := p.rowStatement(c)
		batch.Queue(sql, args...)
		stmts = append(stmts, c.Op.String())
	}
	p.ops = p.ops[:0]
	if err := flushStmts(); err != nil {
		return err
	}
	return flushInserts()
}

// rowStatement builds the statement that updates or deletes exactly one
// destination row matching the change's old image. Values are compared as
// text after a round trip through the destination type, so types without
// equality (json, point) match too.
func (p *plan) rowStatement(c *change.Change) (string, []any) {
	var (
		args  []any
		where []string
		sets  []string
	)
	var old []change.Value
	positions := p.identPos
	switch {
	case c.Old != nil:
		old = p.project(c.Old)
		if !c.OldKeyOnly {
			positions = nil
			for i := range p.names {
				positions = append(positions, i)
			}
		}
	default: // an update that kept its key: the key is in the new image
		old = p.project(c.New)
	}
	if c.Op == change.OpUpdate {
		for i, v := range p.project(c.New) {
			if v.Kind == change.ValueUnchanged {
				continue
			}
			args = append(args, textArg(v))
			sets = append(sets, fmt.Sprintf("%s = $%d::%s", change.QuoteIdent(p.names[i]), len(args), p.types[i]))
		}
	}
	for _, i := range positions {
		if old[i].Kind == change.ValueUnchanged {
			continue
		}
		args = append(args, textArg(old[i]))
		where = append(where, fmt.Sprintf("%s::text IS NOT DISTINCT FROM $%d::%s::text", change.QuoteIdent(p.names[i]), len(args), p.types[i]))
	}
	if len(where) == 0 {
		where = append(where, "false")
	}
	target := p.dest.name.Quoted()
	// ctid identifies a row within one table; a partitioned destination
	// needs the partition too.
	lhs, sel := "ctid", "ctid"
	if p.dest.partitioned {
		lhs, sel = "(tableoid, ctid)", "tableoid, ctid"
	}
	one := lhs + " = (SELECT " + sel + " FROM " + target + " WHERE " + strings.Join(where, " AND ") + " LIMIT 1)"
	if c.Op == change.OpDelete {
		return "DELETE FROM " + target + " WHERE " + one, args
	}
	if len(sets) == 0 {
		return "SELECT 1", nil
	}
	return "UPDATE " + target + " SET " + strings.Join(sets, ", ") + " WHERE " + one, args
}
