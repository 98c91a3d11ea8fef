package apply

import (
	"bytes"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file encodes rows as COPY data.

// writeCopyRow writes vals as a text-format COPY row. With only set, the
// other columns are written as NULL.
func writeCopyRow(buf *bytes.Buffer, vals []change.Value, only []int) {
	j := 0
	for i := range vals {
		if i > 0 {
			buf.WriteByte('\t')
		}
		if only == nil || (j < len(only) && only[j] == i) {
			j++
			writeCopyValue(buf, vals[i])
		} else {
			buf.WriteString(`\N`)
		}
	}
	buf.WriteByte('\n')
}

// writeCopyValue writes one value in COPY text format.
func writeCopyValue(buf *bytes.Buffer, v change.Value) {
	if v.Kind != change.ValueText {
		buf.WriteString(`\N`)
		return
	}
	for _, c := range v.Text {
		switch c {
		case '\\':
			buf.WriteString(`\\`)
		case '\t':
			buf.WriteString(`\t`)
		case '\n':
			buf.WriteString(`\n`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteByte(c)
		}
	}
}
