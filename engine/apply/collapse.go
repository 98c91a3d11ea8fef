package apply

import (
	"encoding/binary"
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

// appendKey appends the encoding of the key columns of vals
// (applied-column order) to dst: per column its kind, its length (4 bytes)
// and its bytes.
func (p *plan) appendKey(dst []byte, vals []change.Value) []byte {
	for _, k := range p.keyPos {
		v := vals[k]
		dst = append(dst, byte(v.Kind))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v.Text)))
		dst = append(dst, v.Text...)
	}
	return dst
}

// key encodes the key columns of vals (applied-column order).
func (p *plan) key(vals []change.Value) string {
	return string(p.appendKey(nil, vals))
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
//
// It runs once per change of a catch-up, so it allocates little: the key is
// encoded into a reused buffer and looked up without a copy, a key's entry
// is overwritten in place when the key is already in the chunk, and new
// entries come from the plan's block of them, reused chunk after chunk
// (see newEntry).
func (p *plan) fold(c *change.Change) *move {
	switch c.Op {
	case change.OpInsert:
		vals := p.project(c.New)
		p.keyBuf = p.appendKey(p.keyBuf[:0], vals)
		p.setNew(p.keyBuf, vals)
	case change.OpUpdate:
		vals := p.project(c.New)
		p.keyBuf = p.appendKey(p.keyBuf[:0], vals)
		newKey := p.keyBuf
		oldKey := newKey
		var oldVals []change.Value
		if c.Old != nil {
			oldVals = p.project(c.Old)
			p.oldKeyBuf = p.appendKey(p.oldKeyBuf[:0], oldVals)
			oldKey = p.oldKeyBuf
		}
		if hasUnchanged(vals) {
			// Unchanged TOAST values: take them from an earlier image of
			// the row in this chunk when there is one (into a copy: vals
			// may be the change's own slice).
			if prev := p.entries[string(oldKey)]; prev != nil && prev.op != opDelete {
				vals = append([]change.Value(nil), vals...)
				for i, v := range vals {
					if v.Kind == change.ValueUnchanged {
						vals[i] = prev.vals[i]
					}
				}
			}
		}
		if string(oldKey) != string(newKey) {
			if hasUnchanged(vals) {
				return &move{old: oldVals, new: vals}
			}
			// The row left its old key and is new at its new one.
			p.set(oldKey, entry{op: opDelete, vals: oldVals})
			p.setNew(newKey, vals)
			return nil
		}
		prev := p.entries[string(newKey)]
		switch {
		case prev == nil:
			p.add(newKey, entry{op: opUpdate, vals: vals})
		case prev.op != opUpdate:
			// Inserted in this chunk (or deleted first): still new.
			*prev = entry{op: opInsert, vals: vals, fresh: prev.fresh}
		default:
			*prev = entry{op: opUpdate, vals: vals}
		}
	case change.OpDelete:
		vals := p.project(c.Old)
		p.keyBuf = p.appendKey(p.keyBuf[:0], vals)
		p.set(p.keyBuf, entry{op: opDelete, vals: vals})
	}
	return nil
}

// set makes e the final state of key.
func (p *plan) set(key []byte, e entry) {
	if prev := p.entries[string(key)]; prev != nil {
		*prev = e
		return
	}
	p.add(key, e)
}

// setNew makes vals a new row at key: fresh when the chunk has no state
// for key yet, so that an insert cannot meet a row on the destination.
func (p *plan) setNew(key []byte, vals []change.Value) {
	if prev := p.entries[string(key)]; prev != nil {
		*prev = entry{op: opInsert, vals: vals}
		return
	}
	p.add(key, entry{op: opInsert, vals: vals, fresh: true})
}

// add makes e the final state of key, which the chunk does not have yet.
func (p *plan) add(key []byte, e entry) {
	k := string(key)
	ne := p.newEntry()
	*ne = e
	p.entries[k] = ne
	p.order = append(p.order, k)
}

// entryBlock is how many entries a plan keeps for reuse, and how many more
// newEntry allocates at once when a chunk needs more.
const entryBlock = 256

// newEntry returns a zero entry: from the plan's own block of entries,
// reused chunk after chunk (see recycleEntries), and once that is used up
// from blocks allocated for the chunk.
func (p *plan) newEntry() *entry {
	if p.entryBlock == nil {
		p.entryBlock = make([]entry, entryBlock)
	}
	if p.entriesUsed < len(p.entryBlock) {
		e := &p.entryBlock[p.entriesUsed]
		p.entriesUsed++
		return e
	}
	if len(p.entryOverflow) == 0 {
		p.entryOverflow = make([]entry, entryBlock)
	}
	e := &p.entryOverflow[0]
	p.entryOverflow = p.entryOverflow[1:]
	return e
}

// recycleEntries makes the plan's block of entries reusable once its chunk
// is written (the chunk is empty and the flush that wrote it is over, so
// nothing refers to the entries any more): they are zeroed, which also lets
// go of the changes' values they held, and blocks allocated for a large
// chunk are dropped.
func (p *plan) recycleEntries() {
	if len(p.entries) > 0 {
		return
	}
	clear(p.entryBlock[:p.entriesUsed])
	p.entriesUsed = 0
	p.entryOverflow = nil
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
