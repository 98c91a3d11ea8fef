package capture

import (
	"bytes"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// TestArenaHandsOutSeparateMemory: what the arena hands out is as long as
// asked, ends there (an append cannot write into the next piece), starts
// zeroed, and pieces larger than a block's share are allocated on their own.
func TestArenaHandsOutSeparateMemory(t *testing.T) {
	t.Parallel()
	var a arena
	first := a.copyOf([]byte("first"))
	second := a.copyOf([]byte("second"))
	require.Equal(t, "first", string(first))
	require.Len(t, first, cap(first))
	_ = append(first, "XXXXXX"...)
	require.Equal(t, "second", string(second), "an append to one copy wrote into the next")

	src := []byte("changed later")
	c := a.copyOf(src)
	copy(src, "CHANGED")
	require.Equal(t, "changed later", string(c), "a copy shares memory with its source")

	big := bytes.Repeat([]byte{1}, arenaBytes)
	require.Equal(t, big, a.copyOf(big))
	require.Equal(t, "second", string(second))

	v1 := a.valueSlice(3, false)
	v2 := a.valueSlice(2, false)
	require.Len(t, v1, 3)
	require.Len(t, v1, cap(v1))
	_ = append(v1, change.Value{Kind: change.ValueText, Text: []byte("x")})
	require.Equal(t, []change.Value{{}, {}}, v2, "an append to one value slice wrote into the next")
	require.Len(t, a.valueSlice(arenaValues, false), arenaValues)

	seen := map[*change.Change]bool{}
	for range 3 * arenaChanges {
		c := a.newChange(false)
		require.Equal(t, change.Change{}, *c)
		require.False(t, seen[c], "a change handed out twice")
		seen[c] = true
		c.Op = change.OpDelete
	}
}

// TestLargeChangesDoNotKeepEachOther: decoded changes of large values are
// dropped as they are consumed. The one still held does not keep the
// others' copies alive through a block of values or changes they shared
// (200 changes of 1 MiB; a shared block of values kept 46 MiB of them).
func TestLargeChangesDoNotKeepEachOther(t *testing.T) {
	// Not parallel: it measures the live heap.
	s := primedStream(t)
	note := strings.Repeat("x", 1<<20)
	data := msg{'I'}.u32(relOrders).u8('N').u16(5).
		text("1").text("name").text("42").text("2024-05-01 12:34:56+00").text(note)
	runtime.GC()
	before := liveHeap()
	var held *change.Change
	for range 200 {
		ev, ok, err := s.decode(data)
		require.NoError(t, err)
		require.True(t, ok)
		held = ev.Change // the consumer holds the last one only
	}
	runtime.GC()
	grown := int64(liveHeap()) - int64(before)
	require.Equal(t, note, string(held.New[4].Text))
	require.Less(t, grown, int64(8<<20), "the live heap grew by %d MiB holding one change of 1 MiB", grown>>20)
}

// liveHeap is the heap the last garbage collection kept.
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}
