package apply

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

func bv(b ...byte) change.Value { return change.Value{Kind: change.ValueBinary, Text: b} }

func TestCopyText(t *testing.T) {
	t.Parallel()
	var w copyWriter
	w.reset(false)
	w.stageRow(opUpdate, "2", []change.Value{tv("1"), tv("a\tb\\c\nd\re"), tu}, nil)
	w.stageRow(opDelete, "", []change.Value{tv("2"), tv("x"), tnull}, []int{0})
	w.row([]change.Value{tv(""), tnull})
	data, err := w.data()
	require.NoError(t, err)
	require.Equal(t, "u\t2\t1\ta\\tb\\\\c\\nd\\re\t\\N\n"+"d\t\t2\t\\N\t\\N\n"+"\t\\N\n", string(data))
}

func TestCopyBinary(t *testing.T) {
	t.Parallel()
	var w copyWriter
	w.reset(true)
	w.stageRow(opUpdate, "2", []change.Value{bv(0, 0, 0, 1), bv(), tu}, nil)
	w.stageRow(opDelete, "", []change.Value{bv(0, 0, 0, 2), bv('x'), tnull}, []int{0})
	w.row([]change.Value{bv('a', 'b'), tnull})
	data, err := w.data()
	require.NoError(t, err)
	want := "PGCOPY\n\xff\r\n\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00" +
		// op, mask, a 4-byte value, an empty value (not NULL), unchanged as NULL
		"\x00\x05" + "\x00\x00\x00\x01u" + "\x00\x00\x00\x012" + "\x00\x00\x00\x04\x00\x00\x00\x01" + "\x00\x00\x00\x00" + "\xff\xff\xff\xff" +
		// a delete: only the key
		"\x00\x05" + "\x00\x00\x00\x01d" + "\x00\x00\x00\x00" + "\x00\x00\x00\x04\x00\x00\x00\x02" + "\xff\xff\xff\xff" + "\xff\xff\xff\xff" +
		// a target row
		"\x00\x02" + "\x00\x00\x00\x02ab" + "\xff\xff\xff\xff" +
		"\xff\xff"
	require.Equal(t, []byte(want), data)
}

func TestCopyMixed(t *testing.T) {
	t.Parallel()
	var w copyWriter
	w.reset(true)
	w.row([]change.Value{bv(1), tv("1")})
	_, err := w.data()
	require.ErrorIs(t, err, ErrBinaryMismatch)
	w.reset(false)
	w.row([]change.Value{tv("1"), bv(1)})
	_, err = w.data()
	require.ErrorIs(t, err, ErrBinaryMismatch)
	w.reset(false)
	w.row([]change.Value{tv("1"), tnull})
	_, err = w.data()
	require.NoError(t, err)
}

func TestBinaryChunk(t *testing.T) {
	t.Parallel()
	p := newKeyedPlan()
	require.False(t, p.binaryChunk())
	p.fold(upd(tv("1"), tnull, tu))
	require.False(t, p.binaryChunk())
	p = newKeyedPlan()
	p.fold(upd(bv(1), tnull, tu))
	require.True(t, p.binaryChunk())
	p = &plan{srcIdx: []int{0}, ops: []*change.Change{{Op: change.OpDelete, Old: []change.Value{tnull}}, {Op: change.OpDelete, Old: []change.Value{bv(1)}}}}
	require.True(t, p.binaryChunk())
}

func TestCheckBinary(t *testing.T) {
	t.Parallel()
	rel := &change.Relation{Table: change.TableName{Schema: "public", Name: "t"},
		Columns: []change.Column{{Name: "id", TypeOID: 20, Key: true}, {Name: "secret", TypeOID: 999}}}
	m := &change.Mapping{Source: rel.Table, Destination: rel.Table, ExcludeColumns: []string{"secret"}}
	require.NoError(t, checkBinary(m, rel, map[string]uint32{"id": 20}))
	require.ErrorIs(t, checkBinary(m, rel, map[string]uint32{"id": 23}), ErrBinaryMismatch)
	require.ErrorIs(t, checkBinary(m, rel, nil), ErrBinaryMismatch)
	require.ErrorIs(t, checkBinary(&change.Mapping{Source: rel.Table, Destination: rel.Table}, rel, map[string]uint32{"id": 20}), ErrBinaryMismatch)
}
