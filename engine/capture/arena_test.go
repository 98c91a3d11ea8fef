package capture

import (
	"bytes"
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

	v1 := a.valueSlice(3)
	v2 := a.valueSlice(2)
	require.Len(t, v1, 3)
	require.Len(t, v1, cap(v1))
	_ = append(v1, change.Value{Kind: change.ValueText, Text: []byte("x")})
	require.Equal(t, []change.Value{{}, {}}, v2, "an append to one value slice wrote into the next")
	require.Len(t, a.valueSlice(arenaValues), arenaValues)

	seen := map[*change.Change]bool{}
	for range 3 * arenaChanges {
		c := a.newChange()
		require.Equal(t, change.Change{}, *c)
		require.False(t, seen[c], "a change handed out twice")
		seen[c] = true
		c.Op = change.OpDelete
	}
}
