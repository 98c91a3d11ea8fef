package apply

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file writes the chunk of a table whose destination has a usable
// primary key: the final state of every key goes by COPY into a staging
// table, then a few set-based statements apply it.

// flushKeyed loads the final state of every key into the staging table and
// applies it with set-based statements, each as cheap as the state allows:
//
//   - DELETE ... USING for deleted keys;
//   - UPDATE ... FROM for complete rows of keys whose first change was an
//     update; when it updates fewer rows than were staged (the destination
//     lacks some), INSERT ... ON CONFLICT DO NOTHING adds the missing ones,
//     so an update of a missing row still ends as the source's row;
//   - INSERT ... ON CONFLICT DO UPDATE for new rows at keys that had a row
//     when the chunk started (deleted and inserted again);
//   - UPDATE ... FROM for rows with unchanged TOAST values, one statement
//     per set of unchanged columns, leaving those columns alone;
//   - then COPY straight into the table for new rows at keys that had none
//     (copyRows), the whole chunk when it holds nothing else
//     (copyNewRows).
//
// A binary chunk of deletes, complete-row updates and new rows goes without
// the staging table, from arrays, when its columns allow (flushFromArrays).
//
// Keys are distinct within a chunk, so the statements touch distinct rows
// and their order does not matter.
func (a *Applier) flushKeyed(ctx context.Context, p *plan) error {
	if len(p.entries) == 0 {
		return nil
	}
	if len(p.entries) <= a.cfg.RowStatementsUpTo {
		return a.flushKeyedRows(ctx, p)
	}
	if p.onlyNewRows() {
		return a.copyNewRows(ctx, p)
	}
	if err := a.begin(ctx); err != nil {
		return err
	}
	binary := p.binaryChunk()
	if binary && p.arrayCasts != nil && p.fitsArrays() {
		return a.flushFromArrays(ctx, p, binary)
	}
	if err := a.prepareStage(ctx, p); err != nil {
		return err
	}
	staged, err := a.stageChunk(ctx, p, binary)
	if err != nil {
		return err
	}
	updated, err := a.applyStaged(ctx, p, staged)
	if err != nil {
		return err
	}
	if updated < int64(staged.updates) {
		// Updated rows the destination lacks: insert them as they are now
		// on the source.
		if _, err := a.conn.Exec(ctx, insertSQL(p.dest.name, p.stage, p.names, p.keyPos, opUpdate)); err != nil {
			return a.classifyFolded(p, fmt.Errorf("insert updated rows missing from %s: %w", p.dest.name, err))
		}
	}
	return a.copyRows(ctx, p, binary, staged.fresh)
}

// stagedChunk is what stageChunk loaded: how many rows of each kind, the
// sets of unchanged columns of updates that have some, and the new rows at
// keys that had none (left out of the staging table: they go by COPY).
type stagedChunk struct {
	deletes, inserts, updates int
	masks                     []string // sorted
	fresh                     [][]change.Value
}

// stageChunk loads the final state of every key of p's chunk, but new rows
// at keys that had none, into p's staging table by COPY, and empties the
// chunk.
func (a *Applier) stageChunk(ctx context.Context, p *plan, binary bool) (stagedChunk, error) {
	var st stagedChunk
	w := &a.copy
	w.reset(binary)
	masks := map[string]bool{}
	for _, k := range p.order {
		e := p.entries[k]
		switch op := e.stageOp(); op {
		case opDelete:
			st.deletes++
			w.stageRow(op, "", e.vals, p.keyPos)
		default:
			m := ""
			if op == opInsert && e.fresh {
				st.fresh = append(st.fresh, e.vals)
				continue
			}
			if op == opInsert {
				st.inserts++
			} else if m = unchangedMask(e.vals); m == "" {
				st.updates++
			} else {
				masks[m] = true
			}
			w.stageRow(op, m, e.vals, nil)
		}
	}
	data, err := w.data()
	if err != nil {
		return st, fmt.Errorf("load staging rows for %s: %w", p.dest.name, err)
	}
	if err := a.copyFrom(ctx, w, data, copyStageSQL(p.stage, w.binary)); err != nil {
		return st, fmt.Errorf("load staging rows for %s: %w", p.dest.name, err)
	}
	p.stageUsed = true
	clear(p.entries)
	p.order = p.order[:0]
	for m := range masks {
		st.masks = append(st.masks, m)
	}
	sort.Strings(st.masks)
	return st, nil
}

// applyStaged applies the staged rows with set-based statements in one
// round trip and returns how many rows the UPDATE of complete rows updated.
func (a *Applier) applyStaged(ctx context.Context, p *plan, st stagedChunk) (updated int64, err error) {
	batch := &pgx.Batch{}
	var what []string
	queue := func(w, sql string, args ...any) {
		if sql != "" {
			batch.Queue(sql, args...)
			what = append(what, w)
		}
	}
	if st.deletes > 0 {
		queue("delete", deleteSQL(p.dest.name, p.stage, p.names, p.keyPos))
	}
	updateAt := -1 // position of the complete rows' UPDATE in the batch
	if sql := updateSQL(p.dest.name, p.stage, p.names, p.keyPos, nil); st.updates > 0 && sql != "" {
		updateAt = len(what)
		queue("update", sql)
	}
	if st.inserts > 0 {
		queue("insert", insertSQL(p.dest.name, p.stage, p.names, p.keyPos, opInsert))
	}
	for _, m := range st.masks {
		queue("update", updateSQL(p.dest.name, p.stage, p.names, p.keyPos, parseMask(m)), m)
	}
	if len(what) == 0 {
		return 0, nil
	}
	br := a.conn.SendBatch(ctx, batch)
	for i, w := range what {
		tag, err := br.Exec()
		if err != nil {
			br.Close()
			return 0, a.classifyFolded(p, fmt.Errorf("apply %s to %s: %w", w, p.dest.name, err))
		}
		if i == updateAt {
			updated = tag.RowsAffected()
		}
	}
	if err := br.Close(); err != nil {
		return 0, a.classifyFolded(p, fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
	}
	return updated, nil
}

// onlyNewRows reports whether every key of p's chunk is a complete row at
// a key that had none when the chunk started (a chunk of inserts, as a bulk
// load or an append-only table gives; not a key deleted and inserted
// again, whose row the destination still has).
func (p *plan) onlyNewRows() bool {
	for _, e := range p.entries {
		if e.op != opInsert || !e.fresh || hasUnchanged(e.vals) {
			return false
		}
	}
	return true
}

// copyNewRows writes a chunk of new rows only (onlyNewRows) with COPY
// straight into the table (copyRows).
func (a *Applier) copyNewRows(ctx context.Context, p *plan) error {
	if err := a.begin(ctx); err != nil {
		return err
	}
	rows := make([][]change.Value, 0, len(p.order))
	for _, k := range p.order {
		rows = append(rows, p.entries[k].vals)
	}
	binary := p.binaryChunk()
	clear(p.entries)
	p.order = p.order[:0]
	return a.copyRows(ctx, p, binary, rows)
}

// copyRows writes complete new rows at keys that had none when the chunk
// started with COPY straight into the table: about half the destination's
// work of loading them into the staging table and upserting them from
// there. A row the destination already has (a mirror started without a
// snapshot over a filled table) fails the COPY with a unique violation,
// returned as an OrderConflictError: the batch is then applied again with
// the table in order, whose upserts converge.
func (a *Applier) copyRows(ctx context.Context, p *plan, binary bool, rows [][]change.Value) error {
	if len(rows) == 0 {
		return nil
	}
	w := &a.copy
	w.reset(binary)
	for _, vals := range rows {
		w.row(vals)
	}
	data, err := w.data()
	if err == nil {
		err = a.copyFrom(ctx, w, data, copyTargetSQL(p.dest.name, p.names, binary))
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("copy new rows into %s: %w", p.dest.name, err)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "23P01") {
		return &OrderConflictError{Table: p.rel.Table, Err: err}
	}
	return a.classifyFolded(p, err)
}

// prepareStage makes sure p's staging table exists and is empty.
func (a *Applier) prepareStage(ctx context.Context, p *plan) error {
	if p.stage != "" {
		if p.stageUsed {
			if _, err := a.conn.Exec(ctx, truncateStageSQL(p.stage)); err != nil {
				return fmt.Errorf("empty staging table for %s: %w", p.dest.name, err)
			}
			p.stageUsed = false
		}
		return nil
	}
	a.stageSeq++
	name := fmt.Sprintf("pgmirror_stage_%d", a.stageSeq)
	if _, err := a.conn.Exec(ctx, createStageSQL(name, p.stageTypes)); err != nil {
		return fmt.Errorf("create staging table for %s: %w", p.dest.name, err)
	}
	p.stage = name
	return nil
}

// moveRow updates the row at the old key to the new image, leaving
// unchanged columns alone.
func (a *Applier) moveRow(ctx context.Context, p *plan, oldVals, vals []change.Value) error {
	var (
		set  []int
		args []change.Value
	)
	for i, v := range vals {
		if v.Kind != change.ValueUnchanged {
			set = append(set, i)
			args = append(args, v)
		}
	}
	for _, k := range p.keyPos {
		args = append(args, oldVals[k])
	}
	b := a.newRowBatch(ctx, binaryValues(vals) || binaryValues(oldVals))
	if err := b.queue(p, "move", moveSQL(p.dest.name, p.names, p.types, set, p.keyPos), args, append(set, p.keyPos...)); err != nil {
		return fmt.Errorf("move row of %s to a new key: %w", p.dest.name, err)
	}
	if _, err := a.sendRows(ctx, p, b); err != nil {
		return err
	}
	return nil
}

// defaultRowStatementsUpTo is the default of Config.RowStatementsUpTo: under
// light load a batch holds a transaction or two, and one pipelined round
// trip of row statements costs the destination less than a COPY, set-based
// statements over a staging table and its truncation at commit.
const defaultRowStatementsUpTo = 8

// flushKeyedRows writes the final state of each key with its own statement,
// all in one pipelined round trip, with the same outcome as flushKeyed:
// a delete by key, an upsert for new rows, an update by key of the columns
// the change has (a complete row the destination lacks is then inserted).
func (a *Applier) flushKeyedRows(ctx context.Context, p *plan) error {
	b := a.newRowBatch(ctx, p.binaryChunk())
	var missing []*entry // complete updates, in statement order
	var updateAt []int   // their statements' positions in b
	all := allPositions(len(p.names))
	for _, k := range p.order {
		e := p.entries[k]
		var err error
		switch e.stageOp() {
		case opDelete:
			err = b.queue(p, "delete", p.statement("d", func() string { return deleteRowSQL(p.dest.name, p.names, p.types, p.keyPos) }), pick(e.vals, p.keyPos), p.keyPos)
		case opInsert:
			err = b.queue(p, "insert", p.statement("i", func() string { return insertRowSQL(p.dest.name, p.names, p.types, p.keyPos, true) }), e.vals, all)
		default:
			set := p.settable(e.vals)
			if len(set) == 0 {
				if hasUnchanged(e.vals) {
					continue // only unchanged values besides the key: nothing to write
				}
				// A key-only table: the row exists or is added.
				err = b.queue(p, "insert", p.statement("n", func() string { return insertRowSQL(p.dest.name, p.names, p.types, p.keyPos, false) }), e.vals, all)
				break
			}
			cols := append(set, p.keyPos...)
			if !hasUnchanged(e.vals) {
				missing = append(missing, e)
				updateAt = append(updateAt, len(b.ops))
			}
			err = b.queue(p, "update", p.statement(fmt.Sprint("u", set), func() string { return moveSQL(p.dest.name, p.names, p.types, set, p.keyPos) }), pick(e.vals, cols), cols)
		}
		if err != nil {
			return fmt.Errorf("apply changes to %s: %w", p.dest.name, err)
		}
	}
	clear(p.entries)
	p.order = p.order[:0]
	if len(b.ops) == 0 {
		return nil
	}
	if a.tailAllowed && b.binary && len(updateAt) == 0 {
		// Nothing to check before COMMIT: the statements go in the
		// commit's round trip (a small batch costs one round trip).
		a.tail = &tailRows{plan: p, rows: b}
		return nil
	}
	affected, err := a.sendRows(ctx, p, b)
	if err != nil {
		return a.classifyFolded(p, err)
	}
	// Updated rows the destination lacks: insert them as they are now on
	// the source.
	fix := a.newRowBatch(ctx, b.binary)
	for j, at := range updateAt {
		if affected[at] == 0 {
			if err := fix.queue(p, "insert", p.statement("n", func() string { return insertRowSQL(p.dest.name, p.names, p.types, p.keyPos, false) }), missing[j].vals, all); err != nil {
				return fmt.Errorf("apply changes to %s: %w", p.dest.name, err)
			}
		}
	}
	if len(fix.ops) > 0 {
		if _, err := a.sendRows(ctx, p, fix); err != nil {
			return a.classifyFolded(p, err)
		}
	}
	return nil
}

// flushKeyedInOrder writes the changes of a keyed table listed in
// Config.InOrder (plan.inOrder) with one statement per change, in the
// source's order, all in one pipelined round trip. Folding by key reorders
// them: two rows that swap a unique value through a third
// (a to tmp, b to a, a to b) end as one update each, and whichever runs
// first meets the other row still holding the value. In order, every
// statement leaves a state the source had. The outcomes are flushKeyed's: a
// delete by key; an upsert for an insert and for a complete update (so an
// update of a row the destination lacks still ends as the source's row); an
// update of the columns the change has when it carries unchanged TOAST
// values, which only the destination holds; for a key change, a delete of
// the old key and an upsert of the new one, or an update in place when
// values are unchanged.
func (a *Applier) flushKeyedInOrder(ctx context.Context, p *plan) error {
	if len(p.ops) == 0 {
		return nil
	}
	b := a.newRowBatch(ctx, p.binaryChunk())
	all := allPositions(len(p.names))
	for _, c := range p.ops {
		if err := p.queueInOrder(b, c, all); err != nil {
			return fmt.Errorf("apply %s to %s: %w", c.Op, p.dest.name, err)
		}
	}
	p.ops = p.ops[:0]
	if len(b.ops) == 0 {
		return nil
	}
	if a.tailAllowed && b.binary {
		// Nothing to check before COMMIT: the statements go in the
		// commit's round trip.
		a.tail = &tailRows{plan: p, rows: b}
		return nil
	}
	_, err := a.sendRows(ctx, p, b)
	return err
}

// queueInOrder adds the statement (or two, for a key change) that applies
// c on its own to b (see flushKeyedInOrder); all lists every applied
// column's position.
func (p *plan) queueInOrder(b *rowBatch, c *change.Change, all []int) error {
	upsert := func(op string, vals []change.Value) error {
		sql := p.statement("i", func() string { return insertRowSQL(p.dest.name, p.names, p.types, p.keyPos, true) })
		return b.queue(p, op, sql, vals, all)
	}
	deleteKey := func(vals []change.Value) error {
		sql := p.statement("d", func() string { return deleteRowSQL(p.dest.name, p.names, p.types, p.keyPos) })
		return b.queue(p, "delete", sql, pick(vals, p.keyPos), p.keyPos)
	}
	switch c.Op {
	case change.OpInsert:
		return upsert("insert", p.project(c.New))
	case change.OpDelete:
		return deleteKey(p.project(c.Old))
	}
	vals := p.project(c.New)
	old := vals
	if c.Old != nil {
		old = p.project(c.Old)
	}
	moved := p.key(old) != p.key(vals)
	if !hasUnchanged(vals) {
		if moved {
			if err := deleteKey(old); err != nil {
				return err
			}
		}
		return upsert("update", vals)
	}
	// Only the destination has the unchanged values: update the row in
	// place, at its old key when it moved.
	set := p.settable(vals)
	if moved {
		set = set[:0]
		for i, v := range vals {
			if v.Kind != change.ValueUnchanged {
				set = append(set, i)
			}
		}
	}
	if len(set) == 0 {
		return nil
	}
	cols := append(append([]int(nil), set...), p.keyPos...)
	args := append(pick(vals, set), pick(old, p.keyPos)...)
	sql := p.statement(fmt.Sprint("u", set), func() string { return moveSQL(p.dest.name, p.names, p.types, set, p.keyPos) })
	return b.queue(p, "update", sql, args, cols)
}

// allPositions returns 0, 1, ..., n-1: every applied column.
func allPositions(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// settable returns the positions of vals that an update by key sets: the
// non-key columns whose value the change has.
func (p *plan) settable(vals []change.Value) []int {
	isKey := flagsAt(len(p.names), p.keyPos)
	var set []int
	for i, v := range vals {
		if !isKey[i] && v.Kind != change.ValueUnchanged {
			set = append(set, i)
		}
	}
	return set
}

// pick returns the values at positions pos.
func pick(vals []change.Value, pos []int) []change.Value {
	out := make([]change.Value, len(pos))
	for j, i := range pos {
		out[j] = vals[i]
	}
	return out
}

// statement returns the row statement of p called key, building it with
// build the first time: a small chunk's statements are the same for every
// transaction.
func (p *plan) statement(key string, build func() string) string {
	if sql, ok := p.rowSQL[key]; ok {
		return sql
	}
	if p.rowSQL == nil {
		p.rowSQL = map[string]string{}
	}
	sql := build()
	p.rowSQL[key] = sql
	return sql
}
