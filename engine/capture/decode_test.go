package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// msg builds a pgoutput message by appending fields.
type msg []byte

func (m msg) u8(b byte) msg     { return append(m, b) }
func (m msg) u16(v uint16) msg  { return binary.BigEndian.AppendUint16(m, v) }
func (m msg) u32(v uint32) msg  { return binary.BigEndian.AppendUint32(m, v) }
func (m msg) u64(v uint64) msg  { return binary.BigEndian.AppendUint64(m, v) }
func (m msg) str(s string) msg  { return append(append(m, s...), 0) }
func (m msg) raw(b []byte) msg  { return append(m, b...) }
func (m msg) text(s string) msg { return m.u8('t').u32(uint32(len(s))).raw([]byte(s)) }
func (m msg) bin(b []byte) msg  { return m.u8('b').u32(uint32(len(b))).raw(b) }
func (m msg) null() msg         { return m.u8('n') }
func (m msg) toast() msg        { return m.u8('u') }

func newTestStream() *Stream {
	return &Stream{log: slog.New(slog.DiscardHandler), relations: map[uint32]*change.Relation{}}
}

const (
	relOrders = 16384 // public.orders: id int8 key, name text, n int4, at timestamptz, note text
	relPair   = 16390 // s."T x": a int4 key, b bytea key
)

func relationOrders() []byte {
	return msg{'R'}.u32(relOrders).str("public").str("orders").u8('d').u16(5).
		u8(1).str("id").u32(20).u32(0xffffffff).
		u8(0).str("name").u32(25).u32(0xffffffff).
		u8(0).str("n").u32(23).u32(0xffffffff).
		u8(0).str("at").u32(1184).u32(0xffffffff).
		u8(0).str("note").u32(25).u32(0xffffffff)
}

func relationPair() []byte {
	return msg{'R'}.u32(relPair).str("s").str("T x").u8('f').u16(2).
		u8(1).str("a").u32(23).u32(0xffffffff).
		u8(3).str("b").u32(17).u32(12)
}

func insertOrders() []byte {
	return msg{'I'}.u32(relOrders).u8('N').u16(5).
		text("123456789").text("some customer name").text("42").text("2024-05-01 12:34:56.789+00").null()
}

func int8Bytes(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func int4Bytes(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func insertOrdersBinary() []byte {
	return msg{'I'}.u32(relOrders).u8('N').u16(5).
		bin(int8Bytes(123456789)).bin([]byte("some customer name")).bin(int4Bytes(42)).
		bin(int8Bytes(768314096789000)).null()
}

func text(s string) change.Value { return change.Value{Kind: change.ValueText, Text: []byte(s)} }
func bin(b []byte) change.Value  { return change.Value{Kind: change.ValueBinary, Text: b} }

var (
	null      = change.Value{Kind: change.ValueNull}
	unchanged = change.Value{Kind: change.ValueUnchanged}
)

// pgMicros is t as a PostgreSQL timestamp.
func pgMicros(t time.Time) uint64 {
	return uint64(t.UnixMicro() - microsecFromUnixEpochToY2K)
}

// validMessages are well-formed messages of every kind, decodable by a
// stream that has seen relationOrders and relationPair.
func validMessages() map[string][]byte {
	at := pgMicros(time.Date(2024, 5, 1, 12, 0, 0, 123456000, time.UTC))
	return map[string][]byte{
		"begin":         msg{'B'}.u64(0x1_0000_0100).u64(at).u32(777),
		"commit":        msg{'C'}.u8(0).u64(0x1_0000_0100).u64(0x1_0000_0180).u64(at),
		"relation":      relationOrders(),
		"relation pair": relationPair(),
		"relation none": msg{'R'}.u32(99).str("public").str("empty").u8('n').u16(0),
		"insert":        insertOrders(),
		"insert binary": insertOrdersBinary(),
		"insert mixed":  msg{'I'}.u32(relPair).u8('N').u16(2).text("").bin(nil),
		"update":        msg{'U'}.u32(relOrders).u8('N').u16(5).text("1").text("y").null().toast().text(""),
		"update key":    msg{'U'}.u32(relOrders).u8('K').u16(5).text("2").null().null().null().null().u8('N').u16(5).text("3").text("x").text("7").toast().null(),
		"update old":    msg{'U'}.u32(relPair).u8('O').u16(2).bin(int4Bytes(1)).bin([]byte{0xde, 0xad}).u8('N').u16(2).bin(int4Bytes(2)).bin([]byte{0xbe, 0xef}),
		"delete key":    msg{'D'}.u32(relOrders).u8('K').u16(5).text("3").null().null().null().null(),
		"delete old":    msg{'D'}.u32(relPair).u8('O').u16(2).text("1").text(`\xdead`),
		"truncate":      msg{'T'}.u32(2).u8(0).u32(relOrders).u32(relPair),
		"truncate opts": msg{'T'}.u32(1).u8(3).u32(relPair),
		"type":          msg{'Y'}.u32(70000).str("public").str("mood"),
		"origin":        msg{'O'}.u64(0x2_0000_0000).str("pg_16400"),
		"message":       msg{'M'}.u8(1).u64(0x1_0000_0000).str("prefix").u32(3).raw([]byte("abc")),
		"message empty": msg{'M'}.u8(0).u64(0x1_0000_0000).str("").u32(0),
	}
}

func primedStream(t testing.TB) *Stream {
	t.Helper()
	s := newTestStream()
	for _, r := range [][]byte{relationOrders(), relationPair()} {
		_, ok, err := s.decode(r)
		require.NoError(t, err)
		require.False(t, ok)
	}
	return s
}

func TestDecode(t *testing.T) {
	t.Parallel()
	msgs := validMessages()
	at := time.Date(2024, 5, 1, 12, 0, 0, 123456000, time.UTC)
	cols := []change.Column{{Name: "id", TypeOID: 20, TypeMod: -1, Key: true}, {Name: "name", TypeOID: 25, TypeMod: -1}, {Name: "n", TypeOID: 23, TypeMod: -1}, {Name: "at", TypeOID: 1184, TypeMod: -1}, {Name: "note", TypeOID: 25, TypeMod: -1}}
	pairCols := []change.Column{{Name: "a", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "b", TypeOID: 17, TypeMod: 12, Key: true}}
	for _, tc := range []struct {
		name string
		// check gets the stream (primed with both relations) and the result.
		check func(t *testing.T, s *Stream, ev Event, ok bool)
	}{
		{"begin", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, EventBegin, ev.Kind)
			require.Equal(t, change.LSN(0x1_0000_0100), ev.LSN)
			require.Equal(t, uint32(777), ev.Xid)
			require.True(t, at.Equal(ev.CommitTime), ev.CommitTime)
			require.Nil(t, ev.Change)
			require.True(t, s.inTx)
		}},
		{"commit", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, Event{Kind: EventCommit, LSN: 0x1_0000_0180, CommitTime: ev.CommitTime}, ev)
			require.True(t, at.Equal(ev.CommitTime), ev.CommitTime)
			require.False(t, s.inTx)
			require.Equal(t, change.LSN(0x1_0000_0180), s.lastCommitEnd)
			require.Equal(t, change.LSN(0x1_0000_0180), s.received)
		}},
		{"relation", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.False(t, ok)
			rel := s.relations[relOrders]
			require.Equal(t, &change.Relation{ID: relOrders, Table: change.TableName{Schema: "public", Name: "orders"}, Columns: cols, ReplicaIdentity: 'd'}, rel)
		}},
		{"relation pair", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.False(t, ok)
			require.Equal(t, &change.Relation{ID: relPair, Table: change.TableName{Schema: "s", Name: "T x"}, Columns: pairCols, ReplicaIdentity: 'f'}, s.relations[relPair])
		}},
		{"relation none", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.False(t, ok)
			require.Equal(t, &change.Relation{ID: 99, Table: change.TableName{Schema: "public", Name: "empty"}, Columns: []change.Column{}, ReplicaIdentity: 'n'}, s.relations[99])
		}},
		{"insert", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, EventChange, ev.Kind)
			require.Equal(t, &change.Change{Op: change.OpInsert, Relation: s.relations[relOrders],
				New: []change.Value{text("123456789"), text("some customer name"), text("42"), text("2024-05-01 12:34:56.789+00"), null}}, ev.Change)
		}},
		{"insert binary", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, []change.Value{bin(int8Bytes(123456789)), bin([]byte("some customer name")), bin(int4Bytes(42)), bin(int8Bytes(768314096789000)), null}, ev.Change.New)
		}},
		{"insert mixed", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			// Empty values are empty, not nil (nil means no value).
			require.Equal(t, []change.Value{{Kind: change.ValueText, Text: []byte{}}, {Kind: change.ValueBinary, Text: []byte{}}}, ev.Change.New)
			require.NotNil(t, ev.Change.New[0].Text)
			require.NotNil(t, ev.Change.New[1].Text)
		}},
		{"update", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpUpdate, Relation: s.relations[relOrders],
				New: []change.Value{text("1"), text("y"), null, unchanged, text("")}}, ev.Change)
		}},
		{"update key", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpUpdate, Relation: s.relations[relOrders], OldKeyOnly: true,
				Old: []change.Value{text("2"), null, null, null, null},
				New: []change.Value{text("3"), text("x"), text("7"), unchanged, null}}, ev.Change)
			require.Equal(t, 5, cap(ev.Change.Old), "an append to Old must not overwrite New")
		}},
		{"update old", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpUpdate, Relation: s.relations[relPair],
				Old: []change.Value{bin(int4Bytes(1)), bin([]byte{0xde, 0xad})},
				New: []change.Value{bin(int4Bytes(2)), bin([]byte{0xbe, 0xef})}}, ev.Change)
		}},
		{"delete key", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpDelete, Relation: s.relations[relOrders], OldKeyOnly: true,
				Old: []change.Value{text("3"), null, null, null, null}}, ev.Change)
		}},
		{"delete old", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpDelete, Relation: s.relations[relPair],
				Old: []change.Value{text("1"), text(`\xdead`)}}, ev.Change)
		}},
		{"truncate", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpTruncate, Truncated: []*change.Relation{s.relations[relOrders], s.relations[relPair]}}, ev.Change)
		}},
		{"truncate opts", func(t *testing.T, s *Stream, ev Event, ok bool) {
			require.True(t, ok)
			require.Equal(t, &change.Change{Op: change.OpTruncate, Truncated: []*change.Relation{s.relations[relPair]}, Cascade: true, RestartIdentity: true}, ev.Change)
		}},
		{"type", func(t *testing.T, s *Stream, ev Event, ok bool) { require.False(t, ok) }},
		{"origin", func(t *testing.T, s *Stream, ev Event, ok bool) { require.False(t, ok) }},
		{"message", func(t *testing.T, s *Stream, ev Event, ok bool) { require.False(t, ok) }},
		{"message empty", func(t *testing.T, s *Stream, ev Event, ok bool) { require.False(t, ok) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, found := msgs[tc.name]
			require.True(t, found)
			s := primedStream(t)
			ev, ok, err := s.decode(data)
			require.NoError(t, err)
			tc.check(t, s, ev, ok)
		})
	}
	for name := range msgs {
		found := false
		for _, n := range []string{"begin", "commit", "relation", "relation pair", "relation none", "insert", "insert binary", "insert mixed", "update", "update key", "update old", "delete key", "delete old", "truncate", "truncate opts", "type", "origin", "message", "message empty"} {
			found = found || n == name
		}
		require.True(t, found, "message %q has no test case", name)
	}
}

// TestDecodeTruncateOptions checks each TRUNCATE option bit.
func TestDecodeTruncateOptions(t *testing.T) {
	t.Parallel()
	for opts, want := range map[byte][2]bool{0: {false, false}, 1: {true, false}, 2: {false, true}, 3: {true, true}, 4: {false, false}} {
		s := primedStream(t)
		ev, ok, err := s.decode(msg{'T'}.u32(1).u8(opts).u32(relOrders))
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, [2]bool{ev.Change.Cascade, ev.Change.RestartIdentity}, "options %d", opts)
	}
}

// TestDecodeRelationResent checks that a re-sent description makes a new
// relation and leaves changes decoded before with the old one.
func TestDecodeRelationResent(t *testing.T) {
	t.Parallel()
	s := primedStream(t)
	before := s.relations[relOrders]
	ev, _, err := s.decode(insertOrders())
	require.NoError(t, err)
	_, _, err = s.decode(msg{'R'}.u32(relOrders).str("public").str("orders").u8('d').u16(1).u8(1).str("id").u32(20).u32(0xffffffff))
	require.NoError(t, err)
	after := s.relations[relOrders]
	require.NotSame(t, before, after)
	require.Same(t, before, ev.Change.Relation)
	require.Len(t, before.Columns, 5)
	require.Len(t, after.Columns, 1)

	// The old five-column insert no longer matches.
	_, _, err = s.decode(insertOrders())
	require.ErrorContains(t, err, "tuple has 5 columns, relation 1")
}

// TestDecodeIgnoresUnknown checks that an unknown message type is skipped.
func TestDecodeIgnoresUnknown(t *testing.T) {
	t.Parallel()
	s := primedStream(t)
	for _, data := range [][]byte{{'Z'}, {'S', 1, 2, 3}, {0}} {
		ev, ok, err := s.decode(data)
		require.NoError(t, err)
		require.False(t, ok)
		require.Equal(t, Event{}, ev)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty message"},
		{"unknown relation", msg{'I'}.u32(5).u8('N').u16(0), "decode insert message: change for relation 5 before its description"},
		{"truncate unknown relation", msg{'T'}.u32(2).u8(0).u32(relOrders).u32(6), "change for relation 6 before its description"},
		{"too few columns", msg{'I'}.u32(relPair).u8('N').u16(1).text("1"), "relation s.T x: tuple has 1 columns, relation 2"},
		{"too many columns", msg{'D'}.u32(relPair).u8('K').u16(3).text("1").text("2").text("3"), "tuple has 3 columns, relation 2"},
		{"unsupported column kind", msg{'I'}.u32(relPair).u8('N').u16(2).text("1").u8('x'), `column b: unsupported tuple data type 'x'`},
		{"insert with key", msg{'I'}.u32(relPair).u8('K').u16(2).text("1").text("2"), `tuple part 'K', want 'N'`},
		{"update with bad part", msg{'U'}.u32(relPair).u8('X').u16(2).text("1").text("2"), `tuple part 'X', want 'K', 'O' or 'N'`},
		{"update without new part", msg{'U'}.u32(relPair).u8('K').u16(2).text("1").text("2").u8('K').u16(2).text("1").text("2"), `tuple part 'K' after the old tuple, want 'N'`},
		{"update without new tuple", msg{'U'}.u32(relPair).u8('K').u16(2).text("1").text("2"), `new tuple part: message truncated`},
		{"delete with new", msg{'D'}.u32(relPair).u8('N').u16(2).text("1").text("2"), `tuple part 'N', want 'K' or 'O'`},
		{"value longer than message", msg{'I'}.u32(relPair).u8('N').u16(2).text("1").u8('t').u32(100).raw([]byte("abc")), "column b: column value: message truncated"},
		{"huge value length", msg{'I'}.u32(relPair).u8('N').u16(2).text("1").u8('b').u32(0xffffffff), "message truncated"},
		{"trailing bytes", append(insertOrders(), 0), "1 unexpected bytes"},
		{"huge relation count", msg{'T'}.u32(0xffffffff).u8(0).u32(relOrders), "relation ids: message truncated"},
		{"huge column count", msg{'R'}.u32(1).str("a").str("b").u8('d').u16(0xffff), "columns: message truncated"},
		{"unterminated name", msg{'R'}.u32(1).str("a").raw([]byte("b")), "relation name: message truncated"},
		{"huge message content", msg{'M'}.u8(0).u64(1).str("p").u32(0xfffffff0).raw([]byte("x")), "message content: message truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := primedStream(t)
			_, _, err := s.decode(tc.data)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestDecodeTruncatedInput checks that every proper prefix of a valid
// message, and the message with a byte more, is an error.
func TestDecodeTruncatedInput(t *testing.T) {
	t.Parallel()
	for name, data := range validMessages() {
		for n := 1; n < len(data); n++ {
			s := primedStream(t)
			_, _, err := s.decode(data[:n:n])
			require.Error(t, err, "%s cut to %d of %d bytes", name, n, len(data))
		}
		s := primedStream(t)
		_, _, err := s.decode(append(data[:len(data):len(data)], 'x'))
		require.ErrorContains(t, err, "unexpected bytes", name)
	}
}

// TestDecodeBufferReuse checks that decoded values do not point into the
// input, which the next receive overwrites.
func TestDecodeBufferReuse(t *testing.T) {
	t.Parallel()
	s := primedStream(t)
	var evs []Event
	want := []Event{}
	for _, data := range [][]byte{insertOrders(), insertOrdersBinary(), validMessages()["update key"], validMessages()["delete old"]} {
		ev, ok, err := s.decode(data)
		require.NoError(t, err)
		require.True(t, ok)
		evs = append(evs, ev)
		// The expected event: decoded from a private copy.
		ref, _, err := primedStream(t).decode(append([]byte(nil), data...))
		require.NoError(t, err)
		ref.Change.Relation = ev.Change.Relation
		want = append(want, ref)
		for i := range data {
			data[i] = 0xff
		}
	}
	require.Equal(t, want, evs)

	// An append to a value must not overwrite the value after it.
	ev := evs[0]
	_ = append(ev.Change.New[0].Text, "XXXXXXXX"...)
	require.Equal(t, text("some customer name"), ev.Change.New[1])
}

// TestDecodeMatchesPglogrepl compares the decoder with the pglogrepl path
// it replaced, on text-mode changes.
func TestDecodeMatchesPglogrepl(t *testing.T) {
	t.Parallel()
	msgs := validMessages()
	for _, name := range []string{"insert", "update", "update key", "delete key", "delete old"} {
		s := primedStream(t)
		ev, _, err := s.decode(msgs[name])
		require.NoError(t, err)
		old, err := pglogreplDecode(s, msgs[name])
		require.NoError(t, err, name)
		require.Equal(t, old, ev.Change, name)
	}
}

func TestPluginArgs(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"proto_version '1'", "publication_names 'p'"}, pluginArgs(StreamConfig{Publication: "p"}))
	require.Equal(t, []string{"proto_version '1'", "publication_names 'p'", "binary 'true'"}, pluginArgs(StreamConfig{Publication: "p", Binary: true}))
	require.Equal(t, []string{"proto_version '1'", "publication_names 'p'", "messages 'true'"}, pluginArgs(StreamConfig{Publication: "p", Messages: true}))
	require.Equal(t, []string{"proto_version '2'", "publication_names 'p'", "binary 'true'", "streaming 'on'"}, pluginArgs(StreamConfig{Publication: "p", Binary: true, Streaming: true}))
}

// FuzzDecode checks that no input makes the decoder panic, and that what
// it accepts is consistent.
func FuzzDecode(f *testing.F) {
	for _, data := range validMessages() {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := primedStream(t)
		in := append([]byte(nil), data...)
		ev, ok, err := s.decode(in)
		if err != nil {
			if ok {
				t.Fatal("ok with an error")
			}
			return
		}
		if c := ev.Change; c != nil {
			size := 0
			for _, vals := range [][]change.Value{c.Old, c.New} {
				if vals != nil && len(vals) != len(c.Relation.Columns) {
					t.Fatalf("%d values for %d columns", len(vals), len(c.Relation.Columns))
				}
				for _, v := range vals {
					size += len(v.Text)
					if (v.Text != nil) != (v.Kind == change.ValueText || v.Kind == change.ValueBinary) {
						t.Fatalf("value %+v", v)
					}
				}
			}
			if size > len(data) {
				t.Fatalf("%d value bytes from a %d byte message", size, len(data))
			}
			// The values do not share the input.
			for i := range in {
				in[i] ^= 0xff
			}
			again, _, err := primedStream(t).decode(data)
			if err != nil {
				t.Fatal(err)
			}
			again.Change.Relation, again.Change.Truncated = c.Relation, c.Truncated
			require.Equal(t, again, ev)
		}
	})
}

// pglogreplDecode is the decoding path this decoder replaced (pglogrepl.Parse
// and a conversion of its tuples), kept for comparison and benchmarks.
func pglogreplDecode(s *Stream, data []byte) (*change.Change, error) {
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, err
	}
	conv := func(rel *change.Relation, t *pglogrepl.TupleData) ([]change.Value, error) {
		if len(t.Columns) != len(rel.Columns) {
			return nil, fmt.Errorf("tuple has %d columns, relation %d", len(t.Columns), len(rel.Columns))
		}
		vals := make([]change.Value, len(t.Columns))
		for i, c := range t.Columns {
			switch c.DataType {
			case pglogrepl.TupleDataTypeNull:
				vals[i] = change.Value{Kind: change.ValueNull}
			case pglogrepl.TupleDataTypeToast:
				vals[i] = change.Value{Kind: change.ValueUnchanged}
			case pglogrepl.TupleDataTypeText:
				vals[i] = change.Value{Kind: change.ValueText, Text: c.Data}
			default:
				return nil, fmt.Errorf("unsupported tuple data type %q", c.DataType)
			}
		}
		return vals, nil
	}
	switch m := m.(type) {
	case *pglogrepl.InsertMessage:
		rel := s.relations[m.RelationID]
		vals, err := conv(rel, m.Tuple)
		if err != nil {
			return nil, err
		}
		return &change.Change{Op: change.OpInsert, Relation: rel, New: vals}, nil
	case *pglogrepl.UpdateMessage:
		rel := s.relations[m.RelationID]
		c := &change.Change{Op: change.OpUpdate, Relation: rel}
		if c.New, err = conv(rel, m.NewTuple); err != nil {
			return nil, err
		}
		if m.OldTuple != nil {
			if c.Old, err = conv(rel, m.OldTuple); err != nil {
				return nil, err
			}
			c.OldKeyOnly = m.OldTupleType == pglogrepl.UpdateMessageTupleTypeKey
		}
		return c, nil
	case *pglogrepl.DeleteMessage:
		rel := s.relations[m.RelationID]
		c := &change.Change{Op: change.OpDelete, Relation: rel, OldKeyOnly: m.OldTupleType == pglogrepl.DeleteMessageTupleTypeKey}
		if c.Old, err = conv(rel, m.OldTuple); err != nil {
			return nil, err
		}
		return c, nil
	}
	return nil, fmt.Errorf("unexpected %T", m)
}

func benchDecode(b *testing.B, data []byte) {
	s := primedStream(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ev, ok, err := s.decode(data)
		if err != nil || !ok || ev.Change == nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeInsert decodes a five-column text-mode insert.
func BenchmarkDecodeInsert(b *testing.B) { benchDecode(b, insertOrders()) }

// BenchmarkDecodeInsertBinary decodes the same insert in binary mode.
func BenchmarkDecodeInsertBinary(b *testing.B) { benchDecode(b, insertOrdersBinary()) }

// BenchmarkDecodeUpdateKey decodes an update with its old key.
func BenchmarkDecodeUpdateKey(b *testing.B) { benchDecode(b, validMessages()["update key"]) }

// BenchmarkDecodeInsertPglogrepl decodes the insert of BenchmarkDecodeInsert
// the way the stream did before (pglogrepl.Parse and a conversion).
func BenchmarkDecodeInsertPglogrepl(b *testing.B) {
	s := primedStream(b)
	data := insertOrders()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := pglogreplDecode(s, data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeSkipsPgmirrorOrigins: the changes of a transaction whose origin
// is one of pgmirror's are left out, its Begin and Commit still come (so
// positions move past it), and a relation message inside it is still
// learnt; a transaction of another origin (native replication) is kept.
func TestDecodeSkipsPgmirrorOrigins(t *testing.T) {
	t.Parallel()
	s := newTestStream()
	msgs := validMessages()
	kinds := func(seq ...[]byte) []EventKind {
		var out []EventKind
		for _, m := range seq {
			ev, ok, err := s.decode(m)
			require.NoError(t, err)
			if ok {
				out = append(out, ev.Kind)
			}
		}
		return out
	}
	got := kinds(msgs["begin"], msg{'O'}.u64(0x2_0000_0000).str("pgmirror_8d1c2a"), relationOrders(), insertOrders(),
		msgs["update"], msgs["delete key"], msg{'T'}.u32(1).u8(0).u32(relOrders), msgs["commit"])
	require.Equal(t, []EventKind{EventBegin, EventCommit}, got)
	require.EqualValues(t, 1, s.SkippedTransactions())

	got = kinds(msgs["begin"], insertOrders(), msgs["commit"])
	require.Equal(t, []EventKind{EventBegin, EventChange, EventCommit}, got, "the next transaction, without origin, is kept")
	got = kinds(msgs["begin"], msgs["origin"], insertOrders(), msgs["commit"])
	require.Equal(t, []EventKind{EventBegin, EventChange, EventCommit}, got, "another origin's transaction is kept")
	require.EqualValues(t, 1, s.SkippedTransactions())
}

// TestDecodeOriginFilter: with StreamConfig.Origins, only the origins of
// the mirrors that close a loop (the applier's and the copy origins) are
// left out; another mirror's transactions (a chain) are carried, and an
// origin of a mirror the filter does not know makes it refresh once.
func TestDecodeOriginFilter(t *testing.T) {
	t.Parallel()
	refreshes := 0
	var f *origin.Filter
	f = origin.NewFilter(func(context.Context) error {
		refreshes++
		f.Set([]string{"loop", "late-loop"}, []string{"chain", "late-loop"})
		return nil
	})
	f.Set([]string{"loop"}, []string{"chain"})
	s := newTestStream()
	s.cfg.Origins = f
	msgs := validMessages()
	_, _, err := s.decode(relationOrders())
	require.NoError(t, err)
	tx := func(originName string) []EventKind {
		var out []EventKind
		for _, m := range [][]byte{msgs["begin"], msg{'O'}.u64(0x2_0000_0000).str(originName), insertOrders(), msgs["commit"]} {
			ev, ok, err := s.decode(m)
			require.NoError(t, err)
			if ok {
				out = append(out, ev.Kind)
			}
		}
		return out
	}
	kept, left := []EventKind{EventBegin, EventChange, EventCommit}, []EventKind{EventBegin, EventCommit}
	require.Equal(t, left, tx("pgmirror_loop"))
	require.Equal(t, left, tx("pgmirror_loop_c3"), "a copy origin of the loop's mirror")
	require.Equal(t, kept, tx("pgmirror_chain"), "the mirror before this one in a chain")
	require.Equal(t, kept, tx("pgmirror_chain_c1"))
	require.Equal(t, 0, refreshes)
	require.Equal(t, left, tx("pgmirror_late-loop"), "a mirror created after the filter was set")
	require.Equal(t, 1, refreshes)
	require.Equal(t, kept, tx("pgmirror_elsewhere"), "a mirror the catalog does not know")
	require.Equal(t, kept, tx("pgmirror_elsewhere"))
	require.Equal(t, 2, refreshes, "an unknown mirror refreshes the filter once")
	require.EqualValues(t, 3, s.SkippedTransactions())
}

// TestDecodeSchemaMessages: with SchemaMessages, a transactional message
// with prefix pgmirror_ddl inside a transaction becomes an OpSchema change
// carrying its table, content and position; a non-transactional one, one of
// another prefix, one without SchemaMessages, and one in a transaction of a
// pgmirror origin are left out.
func TestDecodeSchemaMessages(t *testing.T) {
	t.Parallel()
	// A signature (engine/ddl checks it) precedes the JSON object.
	content := []byte(strings.Repeat("ab", 32) + `{"v":1,"kind":"state","schema":"public","table":"orders","indexes":[]}`)
	ddlMsg := func(flags byte, prefix string) []byte {
		return msg{'M'}.u8(flags).u64(0x1_0000_0042).str(prefix).u32(uint32(len(content))).raw(content)
	}
	msgs := validMessages()
	decodeAll := func(s *Stream, seq ...[]byte) []Event {
		var out []Event
		for _, m := range seq {
			ev, ok, err := s.decode(m)
			require.NoError(t, err)
			if ok {
				out = append(out, ev)
			}
		}
		return out
	}

	s := newTestStream()
	s.cfg.SchemaMessages = true
	evs := decodeAll(s, msgs["begin"], ddlMsg(1, "pgmirror_ddl"), ddlMsg(1, "other"), msgs["commit"])
	require.Len(t, evs, 3)
	c := evs[1].Change
	require.Equal(t, change.OpSchema, c.Op)
	require.Equal(t, change.TableName{Schema: "public", Name: "orders"}, c.Schema.Table)
	require.Equal(t, change.LSN(0x1_0000_0042), c.Schema.LSN)
	require.Equal(t, content, c.Schema.Content)

	require.Empty(t, decodeAll(s, ddlMsg(0, "pgmirror_ddl")), "non-transactional")
	evs = decodeAll(s, msgs["begin"], msg{'O'}.u64(0x2_0000_0000).str("pgmirror_8d1c2a"), ddlMsg(1, "pgmirror_ddl"), msgs["commit"])
	require.Len(t, evs, 2, "a pgmirror origin's transaction")
	evs = decodeAll(s, msgs["begin"], msg{'M'}.u8(1).u64(1).str("pgmirror_ddl").u32(3).raw([]byte("{x]")), msgs["commit"])
	require.Len(t, evs, 2, "unreadable content is left out")

	off := newTestStream()
	evs = decodeAll(off, msgs["begin"], ddlMsg(1, "pgmirror_ddl"), msgs["commit"])
	require.Len(t, evs, 2, "without SchemaMessages")
	require.Contains(t, pluginArgs(StreamConfig{Publication: "p", SchemaMessages: true}), "messages 'true'")
}
