package apply

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// keyedRel is a source table (id, v, big) keyed on id.
var keyedRel = &change.Relation{ID: 7, Table: change.TableName{Schema: "public", Name: "t"}, ReplicaIdentity: change.IdentityDefault,
	Columns: []change.Column{{Name: "id", Key: true}, {Name: "v"}, {Name: "big"}}}

// newKeyedPlan is the plan of keyedRel with every column applied, as planFor
// builds it for a destination keyed on id.
func newKeyedPlan() *plan {
	return &plan{rel: keyedRel, srcIdx: []int{0, 1, 2}, names: []string{"id", "v", "big"}, keyed: true,
		keyPos: []int{0}, identPos: []int{0}, entries: map[string]*entry{}}
}

func tv(s string) change.Value { return change.Value{Kind: change.ValueText, Text: []byte(s)} }

var (
	tnull = change.Value{Kind: change.ValueNull}
	tu    = change.Value{Kind: change.ValueUnchanged}
)

func ins(vals ...change.Value) *change.Change {
	return &change.Change{Op: change.OpInsert, Relation: keyedRel, New: vals}
}

func upd(vals ...change.Value) *change.Change {
	return &change.Change{Op: change.OpUpdate, Relation: keyedRel, New: vals}
}

// moveKey is an update from key old to the row vals (old image: key only).
func moveKey(old string, vals ...change.Value) *change.Change {
	return &change.Change{Op: change.OpUpdate, Relation: keyedRel, Old: []change.Value{tv(old), tnull, tnull}, OldKeyOnly: true, New: vals}
}

func del(key string) *change.Change {
	return &change.Change{Op: change.OpDelete, Relation: keyedRel, Old: []change.Value{tv(key), tnull, tnull}, OldKeyOnly: true}
}

// states renders the chunk's final states in key order: the staged op, the
// unchanged mask, and the values (NULL as ~, unchanged as ?).
func states(p *plan) []string {
	var out []string
	for _, k := range p.order {
		e := p.entries[k]
		var b strings.Builder
		b.WriteString(string(e.stageOp()))
		b.WriteString("[" + unchangedMask(e.vals) + "]")
		for i, v := range e.vals {
			if e.op == opDelete && i != p.keyPos[0] {
				continue
			}
			b.WriteByte(' ')
			switch v.Kind {
			case change.ValueNull:
				b.WriteString("~")
			case change.ValueUnchanged:
				b.WriteString("?")
			default:
				b.Write(v.Text)
			}
		}
		out = append(out, b.String())
	}
	return out
}

func TestFold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		changes []*change.Change
		want    []string
		move    bool
	}{
		{name: "update with unchanged value, no earlier image",
			changes: []*change.Change{upd(tv("1"), tv("a"), tu)},
			want:    []string{"u[2] 1 a ?"}},
		{name: "update with unchanged value after an insert",
			changes: []*change.Change{ins(tv("1"), tv("a"), tv("big")), upd(tv("1"), tv("b"), tu)},
			want:    []string{"i[] 1 b big"}},
		{name: "update with unchanged value after a complete update",
			changes: []*change.Change{upd(tv("1"), tv("a"), tv("big")), upd(tv("1"), tv("b"), tu)},
			want:    []string{"u[] 1 b big"}},
		{name: "updates with unchanged values keep the mask",
			changes: []*change.Change{upd(tv("1"), tv("a"), tu), upd(tv("1"), tnull, tu)},
			want:    []string{"u[2] 1 ~ ?"}},
		{name: "update after a delete",
			changes: []*change.Change{del("1"), upd(tv("1"), tv("a"), tu)},
			want:    []string{"u[2] 1 a ?"}},
		{name: "key change with an unchanged value is moved in place",
			changes: []*change.Change{upd(tv("2"), tv("x"), tv("y")), moveKey("1", tv("3"), tv("a"), tu)},
			want:    []string{"u[] 2 x y"},
			move:    true},
		{name: "key change with an unchanged value known from an earlier image",
			changes: []*change.Change{ins(tv("1"), tv("a"), tv("big")), moveKey("1", tv("3"), tv("b"), tu)},
			want:    []string{"d[] 1", "i[] 3 b big"}},
		{name: "key change with complete values",
			changes: []*change.Change{moveKey("1", tv("3"), tv("b"), tv("c"))},
			want:    []string{"d[] 1", "i[] 3 b c"}},
		{name: "delete then insert",
			changes: []*change.Change{del("1"), ins(tv("1"), tv("a"), tnull)},
			want:    []string{"i[] 1 a ~"}},
		{name: "insert then update",
			changes: []*change.Change{ins(tv("1"), tv("a"), tnull), upd(tv("1"), tv("b"), tv("c"))},
			want:    []string{"i[] 1 b c"}},
		{name: "insert then delete",
			changes: []*change.Change{ins(tv("1"), tv("a"), tnull), del("1")},
			want:    []string{"d[] 1"}},
		{name: "update then delete",
			changes: []*change.Change{upd(tv("1"), tv("a"), tu), del("1")},
			want:    []string{"d[] 1"}},
		{name: "swapped keys",
			changes: []*change.Change{moveKey("1", tv("3"), tv("a"), tv("x")), moveKey("2", tv("1"), tv("b"), tv("y")), moveKey("3", tv("2"), tv("a"), tv("x"))},
			want:    []string{"i[] 1 b y", "d[] 3", "i[] 2 a x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := newKeyedPlan()
			var moved *move
			for _, c := range tc.changes {
				if mv := p.fold(c); mv != nil {
					require.Nil(t, moved, "a second move")
					moved = mv
				}
			}
			require.Equal(t, tc.want, states(p))
			require.Equal(t, tc.move, moved != nil)
		})
	}
}

func TestFoldMoveKeepsValues(t *testing.T) {
	t.Parallel()
	p := newKeyedPlan()
	mv := p.fold(moveKey("1", tv("3"), tv("a"), tu))
	require.NotNil(t, mv)
	require.Equal(t, []change.Value{tv("1"), tnull, tnull}, mv.old)
	require.Equal(t, []change.Value{tv("3"), tv("a"), tu}, mv.new)
	require.Empty(t, p.entries)
}

func TestMask(t *testing.T) {
	t.Parallel()
	require.Equal(t, "", unchangedMask([]change.Value{tv("1"), tnull}))
	require.Equal(t, "0,2", unchangedMask([]change.Value{tu, tnull, tu}))
	require.Equal(t, []int{0, 2}, parseMask("0,2"))
	require.Nil(t, parseMask(""))
}

// TestFoldLeavesTheChangeAlone: with every column applied in order, a
// change's own values are the entry's, and filling an update's unchanged
// TOAST value from an earlier image in the chunk must not write into the
// change (a batch that fails is folded again from the same changes).
func TestFoldLeavesTheChangeAlone(t *testing.T) {
	t.Parallel()
	p := newKeyedPlan()
	p.identity = true
	p.fold(ins(tv("1"), tv("a"), tv("toast")))
	u := upd(tv("1"), tv("b"), tu)
	p.fold(u)
	require.Equal(t, []string{"i[] 1 b toast"}, states(p))
	require.Equal(t, []change.Value{tv("1"), tv("b"), tu}, u.New)
}

// TestFoldRecyclesEntries: once a chunk is written, its entries are
// zeroed (an idle plan keeps no change's values alive) and handed out again
// for the next chunk; a chunk larger than the plan's block gets more.
func TestFoldRecyclesEntries(t *testing.T) {
	t.Parallel()
	p := newKeyedPlan()
	for i := range entryBlock + 10 {
		p.fold(ins(tv(fmt.Sprint(i)), tv("a"), tnull))
	}
	require.Len(t, p.entries, entryBlock+10)
	p.recycleEntries() // the chunk is not written yet: nothing changes
	require.Equal(t, entryBlock, p.entriesUsed)

	clear(p.entries) // as a flush leaves it
	p.order = p.order[:0]
	p.recycleEntries()
	require.Zero(t, p.entriesUsed)
	require.Nil(t, p.entryOverflow)
	for i, e := range p.entryBlock {
		require.Equal(t, entry{}, e, "entry %d still holds its values", i)
	}
	p.fold(ins(tv("x"), tv("b"), tnull))
	require.Same(t, &p.entryBlock[0], p.entries[p.key([]change.Value{tv("x"), tv("b"), tnull})])
}

// BenchmarkFold folds single-row updates of distinct keys (binary bigint
// keys, every column applied) in chunks of 10,000, as a catch-up does.
func BenchmarkFold(b *testing.B) {
	p := newKeyedPlan()
	p.identity = true
	const chunk = 10_000
	changes := make([]*change.Change, chunk)
	for i := range changes {
		key := binary.BigEndian.AppendUint64(nil, uint64(i))
		changes[i] = &change.Change{Op: change.OpUpdate, Relation: keyedRel, New: []change.Value{
			{Kind: change.ValueBinary, Text: key}, tv("some value"), tnull}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%chunk == 0 {
			clear(p.entries)
			p.order = p.order[:0]
			p.recycleEntries()
		}
		p.fold(changes[i%chunk])
	}
}
