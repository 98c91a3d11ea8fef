package apply

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// This file writes a chunk of deletes, complete-row updates and new rows
// (every chunk of a bulk UPDATE or DELETE on the source, and most chunks of
// a mixed load) without the staging table: the deletes as one DELETE ...
// USING and the updates as one UPDATE ... FROM, each from ROWS FROM
// (unnest of one binary array parameter per column), in one round trip,
// and the new rows by COPY straight into the table as before. Through the
// staging table the same chunk costs three more round trips (empty it,
// COPY into it, then the statements) and about a sixth more destination
// CPU per updated row (measured on PostgreSQL 18: 12.5 s against 10.4 s
// for a million rows in 5,000-row chunks; the update itself, an index
// lookup and a new row version, is the rest).
//
// It is used for binary chunks whose columns all have one of the built-in
// scalar types below (the array of such a type holds its values one to one;
// an array or domain column does not, and goes through the staging table
// as before), with a key of types that have no collation (a key compared
// under the column's collation needs the staging table's typed column).
// Keys deleted and inserted again, and updates with unchanged TOAST
// values, need the staging table's statements: a chunk with one goes
// through it whole.
//
// Dense integer keys. By default PostgreSQL joins the arrays' rows to the
// table by a nested loop: one descent of the key's index per row. When the
// key is one integer column and a statement's keys are dense (they span
// fewer than twice as many values as there are keys: the chunks of a bulk
// UPDATE or DELETE in the table's order, a backfill), the statement also
// bounds the key to the keys' smallest and largest value and is planned as
// a merge join: one walk along that stretch of the index, about a sixth
// less destination CPU per updated row (PostgreSQL 18, a million rows in
// 5,000-row chunks, 9.5 s against 11.1 s on average over four pairs of
// runs). The planner, left to itself, picks a hash join for the bounded
// statement, no cheaper than the nested loop, so the batch turns nested
// loops and hash joins off around these statements (SET LOCAL, back to the
// session's value right after them, in the same round trip). The key is
// the destination's primary key, so the index exists; sparse keys keep the
// nested loop, which reads only what it needs.

// arrayElementTypes are the built-in types whose values go in arrays: their
// OIDs (the binary array's element type) and names.
var arrayElementTypes = map[uint32]string{
	16:   "bool",
	17:   "bytea",
	20:   "int8",
	21:   "int2",
	23:   "int4",
	25:   "text",
	26:   "oid",
	114:  "json",
	700:  "float4",
	701:  "float8",
	1042: "bpchar",
	1043: "varchar",
	1082: "date",
	1083: "time",
	1114: "timestamp",
	1184: "timestamptz",
	1186: "interval",
	1266: "timetz",
	1700: "numeric",
	2950: "uuid",
	3802: "jsonb",
}

// collatableTypes are those of arrayElementTypes that have a collation.
var collatableTypes = map[uint32]bool{25: true, 1042: true, 1043: true}

// arrayCasts returns the array type of each of p's columns ("" for none
// when one column has none): the casts of the array parameters.
func arrayCasts(typeOIDs []uint32, keyPos []int) []string {
	isKey := flagsAt(len(typeOIDs), keyPos)
	casts := make([]string, len(typeOIDs))
	for i, oid := range typeOIDs {
		name, ok := arrayElementTypes[oid]
		if !ok || (isKey[i] && collatableTypes[oid]) {
			return nil
		}
		casts[i] = "pg_catalog." + name + "[]"
	}
	return casts
}

// fitsArrays reports whether every key of p's chunk can be written without
// the staging table: deleted, updated with every value sent, or new at a
// key that had no row.
func (p *plan) fitsArrays() bool {
	for _, e := range p.entries {
		switch {
		case e.op == opDelete:
		case hasUnchanged(e.vals):
			return false
		case e.op == opInsert && !e.fresh:
			return false
		}
	}
	return true
}

// flushFromArrays writes p's chunk (fitsArrays) without the staging table:
// the deletes and the updates from arrays in one round trip, the rows the
// destination lacks of the updated ones inserted, as the staged path does,
// then the new rows by COPY straight into the table.
func (a *Applier) flushFromArrays(ctx context.Context, p *plan, binary bool) error {
	var deletes, updates []*entry
	var fresh [][]change.Value
	for _, k := range p.order {
		switch e := p.entries[k]; e.op {
		case opDelete:
			deletes = append(deletes, e)
		case opUpdate:
			updates = append(updates, e)
		default:
			fresh = append(fresh, e.vals)
		}
	}
	all := allColumns(len(p.names))
	var stmts []arrayStatement
	if len(deletes) > 0 {
		params, err := a.arrayParams(p, deletes, p.keyPos)
		if err != nil {
			return err
		}
		bounds := p.denseKeyRange(deletes)
		stmts = append(stmts, arrayStatement{"delete", deleteArraysSQL(p.dest.name, p.names, p.keyPos, p.arrayCasts, bounds != nil), params, bounds})
	}
	var updateParams [][]byte
	if len(updates) > 0 {
		params, err := a.arrayParams(p, updates, all)
		if err != nil {
			return err
		}
		updateParams = params
		bounds := p.denseKeyRange(updates)
		if sql := updateArraysSQL(p.dest.name, p.names, p.keyPos, p.arrayCasts, bounds != nil); sql != "" {
			stmts = append(stmts, arrayStatement{"update", sql, params, bounds})
		}
	}
	updated, err := a.execArrayStatements(ctx, p, stmts)
	if err != nil {
		return err
	}
	if updated < int64(len(updates)) {
		// Updated rows the destination lacks: insert them as they are now
		// on the source.
		sql := insertArraysSQL(p.dest.name, p.names, p.keyPos, p.arrayCasts)
		if _, err := a.conn.PgConn().ExecParams(ctx, sql, updateParams, nil, a.binaryFormats(len(updateParams)), nil).Close(); err != nil {
			return a.classifyFolded(p, fmt.Errorf("insert updated rows missing from %s: %w", p.dest.name, err))
		}
	}
	clear(p.entries)
	p.order = p.order[:0]
	return a.copyRows(ctx, p, binary, fresh)
}

// arrayStatement is a DELETE or UPDATE from arrays: what it does (for
// errors), its SQL, its array parameters and, when its keys are bounded to
// a dense range, the two bounds (sent after the arrays).
type arrayStatement struct {
	what   string
	sql    string
	arrays [][]byte
	bounds [][]byte
}

// mergeJoinOnly and plannerDefaults turn the planner's nested loops and
// hash joins off for the rest of the transaction, and back to the
// session's value.
var (
	mergeJoinOnly   = []string{"SET LOCAL enable_nestloop = off", "SET LOCAL enable_hashjoin = off"}
	plannerDefaults = []string{"SET LOCAL enable_nestloop TO DEFAULT", "SET LOCAL enable_hashjoin TO DEFAULT"}
)

// execArrayStatements runs stmts in one round trip, the ranged ones as
// merge joins, and returns how many rows the update changed.
func (a *Applier) execArrayStatements(ctx context.Context, p *plan, stmts []arrayStatement) (int64, error) {
	if len(stmts) == 0 {
		return 0, nil
	}
	batch := &pgconn.Batch{}
	var what []string
	planner := func(sqls []string) {
		for _, sql := range sqls {
			batch.ExecParams(sql, nil, nil, nil, nil)
			what = append(what, "planner settings")
		}
	}
	ranged := false
	for _, st := range stmts {
		ranged = ranged || st.bounds != nil
	}
	if ranged {
		planner(mergeJoinOnly)
	}
	for _, st := range stmts {
		params := append(st.arrays[:len(st.arrays):len(st.arrays)], st.bounds...)
		batch.ExecParams(st.sql, params, nil, a.binaryFormats(len(params)), nil)
		what = append(what, st.what)
	}
	if ranged {
		planner(plannerDefaults)
	}
	var updated int64
	results, err := a.conn.PgConn().ExecBatch(ctx, batch).ReadAll()
	for i, r := range results {
		if r.Err != nil {
			return 0, a.classifyFolded(p, fmt.Errorf("apply %s to %s: %w", what[i], p.dest.name, r.Err))
		}
		if what[i] == "update" {
			updated = r.CommandTag.RowsAffected()
		}
	}
	if err != nil {
		return 0, a.classifyFolded(p, fmt.Errorf("apply changes to %s: %w", p.dest.name, err))
	}
	return updated, nil
}

// denseKeyRange returns the smallest and the largest key of entries (their
// binary values) when p's key is one integer column and the keys are
// dense: they span fewer than twice as many values as there are entries.
// It returns nil otherwise.
func (p *plan) denseKeyRange(entries []*entry) [][]byte {
	if len(p.keyPos) != 1 || len(entries) == 0 {
		return nil
	}
	k := p.keyPos[0]
	var least, greatest int64
	var lo, hi []byte
	for i, e := range entries {
		v, ok := binaryInteger(p.typeOIDs[k], e.vals[k])
		if !ok {
			return nil
		}
		if i == 0 || v < least {
			least, lo = v, e.vals[k].Text
		}
		if i == 0 || v > greatest {
			greatest, hi = v, e.vals[k].Text
		}
	}
	// The span as unsigned: greatest - least never overflows there.
	if uint64(greatest)-uint64(least) >= 2*uint64(len(entries)) {
		return nil
	}
	return [][]byte{lo, hi}
}

// binaryInteger decodes v, a binary int2, int4 or int8 value of a column of
// type typeOID; ok is false for any other type or value.
func binaryInteger(typeOID uint32, v change.Value) (int64, bool) {
	if v.Kind != change.ValueBinary {
		return 0, false
	}
	switch {
	case typeOID == 20 && len(v.Text) == 8:
		return int64(binary.BigEndian.Uint64(v.Text)), true
	case typeOID == 23 && len(v.Text) == 4:
		return int64(int32(binary.BigEndian.Uint32(v.Text))), true
	case typeOID == 21 && len(v.Text) == 2:
		return int64(int16(binary.BigEndian.Uint16(v.Text))), true
	}
	return 0, false
}

// binaryFormats returns n binary parameter formats.
func (a *Applier) binaryFormats(n int) []int16 {
	for len(a.arrayFormats) < n {
		a.arrayFormats = append(a.arrayFormats, 1)
	}
	return a.arrayFormats[:n]
}

// arrayParams encodes the values at cols of entries as one binary
// one-dimensional array per column. The buffers are the applier's, reused
// by the next chunk: those of one call must be sent before the next call
// reuses them, so a delete's (key columns) come from the spare buffers
// after the columns'. A text value (the chunk is binary) is an error
// matching ErrBinaryMismatch, as in COPY data.
func (a *Applier) arrayParams(p *plan, entries []*entry, cols []int) ([][]byte, error) {
	first := 0
	if len(cols) < len(p.names) {
		first = len(p.names) // key columns only: the spare buffers
	}
	for len(a.arrays) < first+len(cols) {
		a.arrays = append(a.arrays, nil)
	}
	params := a.arrays[first : first+len(cols)]
	for j, c := range cols {
		buf := params[j][:0]
		buf = binary.BigEndian.AppendUint32(buf, 1) // dimensions
		buf = binary.BigEndian.AppendUint32(buf, 0) // has NULLs: set below
		buf = binary.BigEndian.AppendUint32(buf, p.typeOIDs[c])
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(entries)))
		buf = binary.BigEndian.AppendUint32(buf, 1) // lower bound
		params[j] = buf
	}
	for _, e := range entries {
		for j, c := range cols {
			switch v := e.vals[c]; v.Kind {
			case change.ValueBinary:
				params[j] = binary.BigEndian.AppendUint32(params[j], uint32(len(v.Text)))
				params[j] = append(params[j], v.Text...)
			case change.ValueText:
				return nil, mixedError(true)
			default:
				params[j] = binary.BigEndian.AppendUint32(params[j], 0xffffffff)
				params[j][7] = 1 // the low byte of the has-NULLs flag
			}
		}
	}
	return params, nil
}

// unnestFrom is the FROM item of the arrays of columns cols: rows s with
// columns c<i> for each column i of cols
// (as in the staging table, so stageValue and keyMatch apply). (A bare
// unnest of several arrays means the same, but only unqualified.)
func unnestFrom(casts []string, cols []int) string {
	args := make([]string, len(cols))
	names := make([]string, len(cols))
	for j, c := range cols {
		args[j] = fmt.Sprintf("pg_catalog.unnest($%d::%s)", j+1, casts[c])
		names[j] = fmt.Sprintf("c%d", c)
	}
	return "ROWS FROM (" + strings.Join(args, ", ") + ") AS s(" + strings.Join(names, ", ") + ")"
}

// updateArraysSQL updates the target rows at the arrays' keys to their
// values. The key is never set. It returns "" when no column is left to
// set. Ranged: the key is also bounded by the two parameters after the
// arrays (keyBounds).
func updateArraysSQL(target change.TableName, names []string, keyPos []int, casts []string, ranged bool) string {
	sets := stagedSets(names, flagsAt(len(names), keyPos))
	if len(sets) == 0 {
		return ""
	}
	return "UPDATE " + target.Quoted() + " AS t SET " + strings.Join(sets, ", ") + " FROM " + unnestFrom(casts, allColumns(len(names))) +
		" WHERE " + keyMatch(names, keyPos) + keyBounds(names, keyPos, casts, len(names), ranged)
}

// keyBounds bounds the one key column to parameters n+1 and n+2 when
// ranged, and is "" otherwise.
func keyBounds(names []string, keyPos []int, casts []string, n int, ranged bool) string {
	if !ranged {
		return ""
	}
	k := keyPos[0]
	key, typ := "t."+sqlquote.Ident(names[k]), strings.TrimSuffix(casts[k], "[]")
	return fmt.Sprintf(" AND %s OPERATOR(pg_catalog.>=) $%d::%s AND %s OPERATOR(pg_catalog.<=) $%d::%s", key, n+1, typ, key, n+2, typ)
}

// insertArraysSQL inserts the arrays' rows whose key the target lacks.
func insertArraysSQL(target change.TableName, names []string, keyPos []int, casts []string) string {
	sel := make([]string, len(names))
	for i := range names {
		sel[i] = stageValue(i)
	}
	keys := make([]string, len(keyPos))
	for j, k := range keyPos {
		keys[j] = sqlquote.Ident(names[k])
	}
	return "INSERT INTO " + target.Quoted() + " (" + strings.Join(quoteAll(names), ", ") + ") SELECT " + strings.Join(sel, ", ") +
		" FROM " + unnestFrom(casts, allColumns(len(names))) + " ON CONFLICT (" + strings.Join(keys, ", ") + ") DO NOTHING"
}

// deleteArraysSQL deletes the target rows at the keys of the key columns'
// arrays (ranged: see keyBounds).
func deleteArraysSQL(target change.TableName, names []string, keyPos []int, casts []string, ranged bool) string {
	return "DELETE FROM " + target.Quoted() + " AS t USING " + unnestFrom(casts, keyPos) + " WHERE " + keyMatch(names, keyPos) +
		keyBounds(names, keyPos, casts, len(keyPos), ranged)
}

// allColumns returns the positions 0 to n-1.
func allColumns(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}
