package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
)

// This file encodes rows as COPY data, in text format (values in their
// text form, parsed by the destination's type input functions) or in binary
// format (values in their binary send form, passed through untouched).

// binarySignature starts binary COPY data; flags and the header extension
// length (both zero) follow.
const binarySignature = "PGCOPY\n\377\r\n\x00"

// copyWriter builds the COPY data of one load.
type copyWriter struct {
	buf    bytes.Buffer
	binary bool
	// bad is a value the format cannot carry (a text value in binary data
	// or the other way round); the data is then useless.
	bad change.ValueKind
}

// reset starts new COPY data in binary or text format.
func (w *copyWriter) reset(binary bool) {
	w.buf.Reset()
	w.binary = binary
	w.bad = 0
	if binary {
		w.buf.WriteString(binarySignature)
		w.buf.Write(make([]byte, 8))
	}
}

// stageRow writes a staging row: op, mask, then vals. With only set, the
// other values are written as NULL.
func (w *copyWriter) stageRow(op byte, mask string, vals []change.Value, only []int) {
	if w.binary {
		w.fieldCount(2 + len(vals))
		w.buf.Write([]byte{0, 0, 0, 1, op})
		w.binaryString(mask)
	} else {
		w.buf.WriteByte(op)
		w.buf.WriteByte('\t')
		w.buf.WriteString(mask) // digits and commas: nothing to escape
		w.buf.WriteByte('\t')
	}
	w.values(vals, only)
}

// row writes vals as one row.
func (w *copyWriter) row(vals []change.Value) {
	if w.binary {
		w.fieldCount(len(vals))
	}
	w.values(vals, nil)
}

// data returns the COPY data, or an error when a value had the wrong form.
func (w *copyWriter) data() ([]byte, error) {
	if w.bad != 0 {
		return nil, mixedError(w.binary)
	}
	if w.binary {
		// The trailer: a field count of -1.
		return append(w.buf.Bytes(), 0xff, 0xff), nil
	}
	return w.buf.Bytes(), nil
}

// mixedError reports a text value in a binary stream or the other way round.
func mixedError(binary bool) error {
	if binary {
		return fmt.Errorf("%w: a text value among binary values", ErrBinaryMismatch)
	}
	return fmt.Errorf("%w: a binary value among text values", ErrBinaryMismatch)
}

func (w *copyWriter) values(vals []change.Value, only []int) {
	j := 0
	for i, v := range vals {
		if only != nil {
			if j < len(only) && only[j] == i {
				j++
			} else {
				v = change.Value{Kind: change.ValueNull}
			}
		}
		if w.binary {
			switch v.Kind {
			case change.ValueBinary:
				w.binaryField(v.Text)
			case change.ValueText:
				w.bad = v.Kind
				w.nullField()
			default:
				w.nullField()
			}
			continue
		}
		if i > 0 {
			w.buf.WriteByte('\t')
		}
		switch v.Kind {
		case change.ValueText:
			writeCopyText(&w.buf, v.Text)
		case change.ValueBinary:
			w.bad = v.Kind
			w.buf.WriteString(`\N`)
		default:
			w.buf.WriteString(`\N`)
		}
	}
	if !w.binary {
		w.buf.WriteByte('\n')
	}
}

// fieldCount starts a binary row of n fields.
func (w *copyWriter) fieldCount(n int) {
	var c [2]byte
	binary.BigEndian.PutUint16(c[:], uint16(n))
	w.buf.Write(c[:])
}

// nullField writes a binary NULL field.
func (w *copyWriter) nullField() { w.buf.Write([]byte{0xff, 0xff, 0xff, 0xff}) }

// binaryString writes one binary field holding s.
func (w *copyWriter) binaryString(s string) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(s)))
	w.buf.Write(n[:])
	w.buf.WriteString(s)
}

// binaryField writes one binary field holding b (empty is not NULL).
func (w *copyWriter) binaryField(b []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	w.buf.Write(n[:])
	w.buf.Write(b)
}

// writeCopyText writes a value in COPY text format, escaped.
func writeCopyText(buf *bytes.Buffer, b []byte) {
	for _, c := range b {
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

// binaryValues reports whether vals are binary: a stream is all-binary or
// all-text, so the first value that is neither NULL nor unchanged tells.
// (Mixed values are caught when they are encoded.)
func binaryValues(vals []change.Value) bool {
	for _, v := range vals {
		switch v.Kind {
		case change.ValueBinary:
			return true
		case change.ValueText:
			return false
		}
	}
	return false
}

// binaryChunk reports whether the chunk buffered in p holds binary values.
func (p *plan) binaryChunk() bool {
	for _, k := range p.order {
		if vals := p.entries[k].vals; hasValue(vals) {
			return binaryValues(vals)
		}
	}
	for _, c := range p.ops {
		for _, vals := range [][]change.Value{c.New, c.Old} {
			if hasValue(vals) {
				return binaryValues(vals)
			}
		}
	}
	return false
}

// hasValue reports whether vals has a value that is neither NULL nor
// unchanged.
func hasValue(vals []change.Value) bool {
	for _, v := range vals {
		if v.Kind == change.ValueText || v.Kind == change.ValueBinary {
			return true
		}
	}
	return false
}

// copyFrom sends data, the COPY data of w, with the COPY statement sql on
// the applier's session. When it fails, pgconn may return while a goroutine
// of its own still reads data (on a broken or cancelled connection it does
// not wait for it), so w then lets go of its buffer instead of reusing it.
func (a *Applier) copyFrom(ctx context.Context, w *copyWriter, data []byte, sql string) error {
	_, err := a.conn.PgConn().CopyFrom(ctx, bytes.NewReader(data), sql)
	if err != nil {
		w.buf = bytes.Buffer{}
	}
	return err
}
