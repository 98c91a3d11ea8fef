package capture

import "github.com/pgmirror/pgmirror/engine/change"

// A catch-up decodes tens of thousands of row changes a second, and each
// needs a copy of its message (values point into it), a slice of values and
// a *change.Change: three small allocations per change, whose cost in
// malloc and in the collector's work was a fifth of the process's CPU in
// profiles. arena hands them out of blocks instead, one allocation per
// block. A block lives as long as anything handed out of it: changes are
// consumed in the order they were decoded (applied, then dropped with their
// batch), so blocks die about as early as their changes would. What is
// larger than a block's share is allocated on its own, and so are the
// values and the change of a message copied on its own: in a block, they
// would keep that copy alive as long as the block, with every other large
// copy the block's neighbours point to (a block of values holds 128 rows of
// two columns: 128 MB of 1 MB values). The blocks are small
// (about 30 KiB together) because an idle stream keeps its current ones,
// and with them what their changes pointed to.
type arena struct {
	bytes   []byte
	values  []change.Value
	changes []change.Change
}

const (
	// arenaBytes is the size of a block of message copies; a message
	// larger than arenaBytes/8 gets a copy of its own.
	arenaBytes = 16 << 10
	// arenaValues is the number of values in a block; a row image of
	// more than arenaValues/8 columns gets a slice of its own.
	arenaValues = 256
	// arenaChanges is the number of changes in a block.
	arenaChanges = 64
)

// ownCopy says whether a message of n bytes is copied on its own (copyOf),
// and then its values and change too (valueSlice, newChange).
func ownCopy(n int) bool { return n > arenaBytes/8 }

// copyOf returns a copy of b. Its capacity ends with it, so an append to it
// cannot write into a neighbour.
func (a *arena) copyOf(b []byte) []byte {
	n := len(b)
	if ownCopy(n) {
		return append(make([]byte, 0, n), b...)
	}
	if n > cap(a.bytes)-len(a.bytes) {
		a.bytes = make([]byte, 0, arenaBytes)
	}
	start := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	return a.bytes[start : start+n : start+n]
}

// valueSlice returns n zero values, with no capacity beyond them; own: on
// their own, not out of a block.
func (a *arena) valueSlice(n int, own bool) []change.Value {
	if own || n > arenaValues/8 {
		return make([]change.Value, n)
	}
	if n > len(a.values) {
		a.values = make([]change.Value, arenaValues)
	}
	v := a.values[:n:n]
	a.values = a.values[n:]
	return v
}

// newChange returns a zero change; own: on its own, not out of a block.
func (a *arena) newChange(own bool) *change.Change {
	if own {
		return new(change.Change)
	}
	if len(a.changes) == 0 {
		a.changes = make([]change.Change, arenaChanges)
	}
	c := &a.changes[0]
	a.changes = a.changes[1:]
	return c
}
