package apply

import (
	"strconv"
	"strings"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file folds the changes of a table with a usable key into the final
// state of each key in the chunk. It needs no connection: what cannot be
// folded (a row moving to a new key while keeping values only the
// destination has) is handed back to the caller.

// entry is the final state of one key in the chunk.
type entry struct {
	op   byte           // opDelete, opInsert or opUpdate
	vals []change.Value // applied-column order; for a delete, only the key columns count
	// fresh: the key had no row when the chunk started (its first change
	// in the chunk made it: an insert, or an update that moved a row to
	// it), so an insert cannot meet a row on the destination. A key
	// deleted and inserted again in the chunk is new (opInsert) but not
	// fresh.
	fresh bool
}

// Final states of a key in a chunk, and the op column of its staging row.
const (
	// opDelete: the row is gone (a delete, or the old key of an update
	// that changed the key).
	opDelete byte = 'd'
	// opInsert: the row is new, so it should be absent when the chunk
	// starts (the key's first change was an insert, or the key was deleted
	// or left by another row first). It is written with an upsert, so a
	// destination that already has the row (filled before the mirror
	// started without a snapshot) converges too.
	opInsert byte = 'i'
	// opUpdate: the key's first change in the chunk was an update of a row
	// that should exist on the destination.
	opUpdate byte = 'u'
)

// move is an update that the caller must apply in place, in order, after
// writing what the chunk holds: the row moved from old's key to new's and
// new keeps unchanged TOAST values that only the destination has.
type move struct {
	old, new []change.Value // applied-column order
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

// fold folds c (an insert, update or delete of p's relation) into the final
// state of its key(s). It returns a move, and leaves the chunk as it was,
// when c must be applied in place instead.
func (p *plan) fold(c *change.Change) *move {
	switch c.Op {
	case change.OpInsert:
		vals := p.project(c.New)
		key := p.key(vals)
		_, seen := p.entries[key]
		p.put(key, &entry{op: opInsert, vals: vals, fresh: !seen})
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
			if prev := p.entries[oldKey]; prev != nil && prev.op != opDelete {
				for i, v := range vals {
					if v.Kind == change.ValueUnchanged {
						vals[i] = prev.vals[i]
					}
				}
			}
		}
		if oldKey != newKey {
			if hasUnchanged(vals) {
				return &move{old: oldVals, new: vals}
			}
			// The row left its old key and is new at its new one.
			_, seen := p.entries[newKey]
			p.put(oldKey, &entry{op: opDelete, vals: oldVals})
			p.put(newKey, &entry{op: opInsert, vals: vals, fresh: !seen})
			return nil
		}
		op, fresh := opUpdate, false
		if prev := p.entries[newKey]; prev != nil && prev.op != opUpdate {
			// Inserted in this chunk (or deleted first): still new.
			op, fresh = opInsert, prev.fresh
		}
		p.put(newKey, &entry{op: op, vals: vals, fresh: fresh})
	case change.OpDelete:
		vals := p.project(c.Old)
		p.put(p.key(vals), &entry{op: opDelete, vals: vals})
	}
	return nil
}

// put sets the final state of key.
func (p *plan) put(key string, e *entry) {
	if _, ok := p.entries[key]; !ok {
		p.order = append(p.order, key)
	}
	p.entries[key] = e
}

// unchangedMask lists the positions of vals' unchanged values, comma
// separated ("" when there are none): rows with the same mask are updated
// by one statement.
func unchangedMask(vals []change.Value) string {
	var b strings.Builder
	for i, v := range vals {
		if v.Kind != change.ValueUnchanged {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

// parseMask returns the positions listed in an unchangedMask.
func parseMask(mask string) []int {
	if mask == "" {
		return nil
	}
	var out []int
	for _, s := range strings.Split(mask, ",") {
		i, _ := strconv.Atoi(s)
		out = append(out, i)
	}
	return out
}

// stageOp is the op column of e's staging row: an entry with unchanged
// values is always an update (of the columns it has), since only the
// destination has the rest of the row.
func (e *entry) stageOp() byte {
	if e.op != opDelete && hasUnchanged(e.vals) {
		return opUpdate
	}
	return e.op
}
