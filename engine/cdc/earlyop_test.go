package cdc

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestEarlyOpSize: the early worker's queue holds one op per change of a
// transaction far behind the destination (hundreds of thousands, twice
// while the worker takes them); an op of more than 32 bytes took the heap
// through TestMillionRowTransaction's streamed UPDATE past its bound.
func TestEarlyOpSize(t *testing.T) {
	t.Parallel()
	require.EqualValues(t, 32, unsafe.Sizeof(earlyOp{}))
}
