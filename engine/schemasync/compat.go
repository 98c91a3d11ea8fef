package schemasync

import (
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
)

// Compatible reports whether a destination column of type dst can take every
// value of a source column of type src without loss (colsync.Compatible,
// which lists the widenings).
func Compatible(src, dst string) bool { return colsync.Compatible(src, dst) }

// BinaryCompatible reports whether rows of src can be copied into dst with
// binary COPY under mapping m: every replicated column has the identical type
// on both sides and that type's binary form is portable (Column.BinarySafe).
func BinaryCompatible(src, dst Table, m change.Mapping) bool {
	for _, sc := range src.Replicated(m) {
		dc, ok := dst.Column(sc.Name)
		if !ok || dc.Type != sc.Type || !sc.BinarySafe || !dc.BinarySafe {
			return false
		}
	}
	return true
}
