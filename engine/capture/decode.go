package capture

// This file decodes pgoutput protocol version 1 messages (the logical
// replication message formats of the PostgreSQL documentation) straight from
// the received bytes. Protocol version 2 (streamed transactions, see
// streamed.go) sends the same messages outside a stream; inside one they
// carry the transaction id after their type byte, which streamed.go strips
// before it stages them, so that they replay through this decoder. A row
// change takes three pieces of memory, handed out of blocks (arena.go): a
// copy of the message (the receive buffer is reused by the next receive, so
// values point into the copy), one slice of values (shared by the old and
// new image of an update) and the *change.Change.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/origin"
)

// pgoutput message types (the first byte of a message).
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'

	// Protocol version 2: in-progress transactions streamed in blocks.
	msgStreamStart  = 'S'
	msgStreamStop   = 'E'
	msgStreamCommit = 'c'
	msgStreamAbort  = 'A'
)

// Tuple parts and column kinds of the TupleData submessage.
const (
	tupleNew = 'N' // new row image
	tupleKey = 'K' // old replica identity key
	tupleOld = 'O' // old row image (REPLICA IDENTITY FULL)

	columnNull      = 'n'
	columnUnchanged = 'u' // unchanged TOASTed value, not sent
	columnText      = 't'
	columnBinary    = 'b'
)

// messageTransactional is the flag of a transactional logical decoding
// message.
const messageTransactional = 1

// Truncate options.
const (
	truncateCascade         = 1
	truncateRestartIdentity = 2
)

// errTruncated reports a message that ends before its fields do.
var errTruncated = errors.New("message truncated")

// microsecFromUnixEpochToY2K is the PostgreSQL epoch (2000-01-01) in Unix
// microseconds.
const microsecFromUnixEpochToY2K = 946684800 * 1000000

// pluginArgs returns the pgoutput options for START_REPLICATION.
func pluginArgs(cfg StreamConfig) []string {
	proto := "proto_version '1'"
	if cfg.Streaming {
		proto = "proto_version '2'"
	}
	args := []string{proto, "publication_names '" + cfg.Publication + "'"}
	if cfg.Binary {
		args = append(args, "binary 'true'")
	}
	if cfg.Messages || cfg.SchemaMessages {
		args = append(args, "messages 'true'")
	}
	if cfg.Streaming {
		args = append(args, "streaming 'on'")
	}
	return args
}

// wire reads the fields of one message. Every read checks the length left:
// the first short read records an error (reads then return zero values), so
// arbitrary bytes give an error and never a panic.
type wire struct {
	b   []byte
	off int
	err error
}

// need reports whether n more bytes are there, recording an error if not.
func (w *wire) need(n uint64, what string) bool {
	if w.err != nil {
		return false
	}
	if n > uint64(len(w.b)-w.off) {
		w.err = fmt.Errorf("%s: %w at byte %d of %d (%d needed)", what, errTruncated, w.off, len(w.b), n)
		return false
	}
	return true
}

func (w *wire) u8(what string) byte {
	if !w.need(1, what) {
		return 0
	}
	v := w.b[w.off]
	w.off++
	return v
}

func (w *wire) u16(what string) uint16 {
	if !w.need(2, what) {
		return 0
	}
	b := w.b[w.off : w.off+2]
	w.off += 2
	return uint16(b[0])<<8 | uint16(b[1])
}

func (w *wire) u32(what string) uint32 {
	if !w.need(4, what) {
		return 0
	}
	b := w.b[w.off : w.off+4]
	w.off += 4
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func (w *wire) u64(what string) uint64 {
	hi := w.u32(what)
	return uint64(hi)<<32 | uint64(w.u32(what))
}

// bytes returns the next n bytes. The slice's capacity ends with it, so an
// append to it cannot overwrite what follows.
func (w *wire) bytes(n uint32, what string) []byte {
	if !w.need(uint64(n), what) {
		return nil
	}
	end := w.off + int(n)
	v := w.b[w.off:end:end]
	w.off = end
	return v
}

// cstring returns the next NUL-terminated string, without the NUL.
func (w *wire) cstring(what string) string {
	if w.err != nil {
		return ""
	}
	for i := w.off; i < len(w.b); i++ {
		if w.b[i] == 0 {
			s := string(w.b[w.off:i])
			w.off = i + 1
			return s
		}
	}
	w.err = fmt.Errorf("%s: %w at byte %d of %d (no string terminator)", what, errTruncated, w.off, len(w.b))
	return ""
}

// done returns the first read error, or an error if bytes are left over:
// protocol version 1 messages have a fixed layout, so leftover bytes mean
// the decoder and the server disagree about it.
func (w *wire) done() error {
	if w.err != nil {
		return w.err
	}
	if w.off != len(w.b) {
		return fmt.Errorf("%d unexpected bytes after byte %d", len(w.b)-w.off, w.off)
	}
	return nil
}

// decode turns one pgoutput message into an event; ok is false for
// messages that only update state (relations) or carry nothing the mirror
// uses (types, origins, logical decoding messages, unknown types).
func (s *Stream) decode(walData []byte) (Event, bool, error) {
	if len(walData) == 0 {
		return Event{}, false, errors.New("decode pgoutput message: empty message")
	}
	switch walData[0] {
	case msgBegin:
		w := wire{b: walData, off: 1}
		final := w.u64("final LSN")
		at := w.u64("commit time")
		xid := w.u32("xid")
		if err := w.done(); err != nil {
			return Event{}, false, fmt.Errorf("decode begin message: %w", err)
		}
		s.inTx = true
		s.skipTx = false
		return Event{Kind: EventBegin, LSN: change.LSN(final), Xid: xid, CommitTime: pgTime(at)}, true, nil
	case msgCommit:
		w := wire{b: walData, off: 1}
		w.u8("flags")
		w.u64("commit LSN")
		end := change.LSN(w.u64("end LSN"))
		at := w.u64("commit time")
		if err := w.done(); err != nil {
			return Event{}, false, fmt.Errorf("decode commit message: %w", err)
		}
		s.inTx = false
		if s.skipTx {
			s.skipTx = false
			s.skippedTx.Add(1)
		}
		s.lastCommitEnd = end
		s.received = max(s.received, end)
		return Event{Kind: EventCommit, LSN: end, CommitTime: pgTime(at)}, true, nil
	case msgRelation:
		rel, err := decodeRelation(walData)
		if err != nil {
			return Event{}, false, fmt.Errorf("decode relation message: %w", err)
		}
		s.relations[rel.ID] = rel
		return Event{}, false, nil
	case msgInsert:
		if s.skipTx {
			return Event{}, false, nil
		}
		c, err := s.decodeInsert(walData)
		if err != nil {
			return Event{}, false, fmt.Errorf("decode insert message: %w", err)
		}
		return Event{Kind: EventChange, Change: c}, true, nil
	case msgUpdate:
		if s.skipTx {
			return Event{}, false, nil
		}
		c, err := s.decodeUpdate(walData)
		if err != nil {
			return Event{}, false, fmt.Errorf("decode update message: %w", err)
		}
		return Event{Kind: EventChange, Change: c}, true, nil
	case msgDelete:
		if s.skipTx {
			return Event{}, false, nil
		}
		c, err := s.decodeDelete(walData)
		if err != nil {
			return Event{}, false, fmt.Errorf("decode delete message: %w", err)
		}
		return Event{Kind: EventChange, Change: c}, true, nil
	case msgTruncate:
		if s.skipTx {
			return Event{}, false, nil
		}
		c, err := s.decodeTruncate(walData)
		if err != nil {
			return Event{}, false, fmt.Errorf("decode truncate message: %w", err)
		}
		return Event{Kind: EventChange, Change: c}, true, nil
	case msgType:
		w := wire{b: walData, off: 1}
		w.u32("type OID")
		w.cstring("type namespace")
		w.cstring("type name")
		if err := w.done(); err != nil {
			return Event{}, false, fmt.Errorf("decode type message: %w", err)
		}
		return Event{}, false, nil
	case msgOrigin:
		w := wire{b: walData, off: 1}
		w.u64("origin commit LSN")
		name := w.cstring("origin name")
		if err := w.done(); err != nil {
			return Event{}, false, fmt.Errorf("decode origin message: %w", err)
		}
		if s.inTx {
			// Begin and Commit of a transaction left out still go to the
			// consumer, so that positions move past it.
			s.skipTx = s.dropsOrigin(name)
		}
		return Event{}, false, nil
	case msgMessage:
		w := wire{b: walData, off: 1}
		flags := w.u8("flags")
		lsn := w.u64("message LSN")
		prefix := w.cstring("message prefix")
		content := w.bytes(w.u32("message length"), "message content")
		if err := w.done(); err != nil {
			return Event{}, false, fmt.Errorf("decode logical decoding message: %w", err)
		}
		if !s.cfg.SchemaMessages || prefix != change.SchemaMessagePrefix || flags&messageTransactional == 0 || !s.inTx || s.skipTx {
			return Event{}, false, nil
		}
		c, err := schemaChange(change.LSN(lsn), content)
		if err != nil {
			// A message pgmirror cannot read is left out with a warning:
			// the table keeps replicating, without that schema change.
			s.log.Warn("ignoring a schema change message that cannot be read", "lsn", change.LSN(lsn).String(), "error", err.Error())
			return Event{}, false, nil
		}
		return Event{Kind: EventChange, Change: c}, true, nil
	default:
		s.log.Debug("ignoring pgoutput message", "type", string(rune(walData[0])))
		return Event{}, false, nil
	}
}

// pgTime converts a PostgreSQL timestamp (microseconds since 2000-01-01).
func pgTime(microsecSinceY2K uint64) time.Time {
	return time.Unix(0, (microsecFromUnixEpochToY2K+int64(microsecSinceY2K))*1000)
}

// dropsOrigin reports whether the transaction of origin name is left out.
// A transaction pgmirror applied on the source is left out when its mirror
// closes a loop with this one (engine/origin.Filter): its changes came from
// this mirror's destination and must not go back. Otherwise (a chain, or
// an origin that is not pgmirror's) it is carried. The first of each
// pgmirror origin, and each change of its verdict, is logged.
func (s *Stream) dropsOrigin(name string) bool {
	if !origin.IsPgmirror(name) {
		return false
	}
	drop := s.cfg.Origins.Drops(name)
	if seen, ok := s.originSeen[name]; !ok || seen != drop {
		if s.originSeen == nil {
			s.originSeen = map[string]bool{}
		}
		s.originSeen[name] = drop
		if drop {
			s.log.Info("leaving out transactions that a mirror in the opposite direction applied on the source", "origin", name)
		} else {
			s.log.Info("carrying transactions that another mirror applied on the source (a chain of mirrors)", "origin", name)
		}
	}
	return drop
}

// decodeRelation decodes a Relation message into a new relation.
func decodeRelation(data []byte) (*change.Relation, error) {
	w := wire{b: data, off: 1}
	id := w.u32("relation id")
	schema := w.cstring("namespace")
	name := w.cstring("relation name")
	identity := w.u8("replica identity")
	n := w.u16("column count")
	// A column takes at least 10 bytes: check before allocating.
	if !w.need(uint64(n)*10, "columns") {
		return nil, w.err
	}
	rel := &change.Relation{
		ID:              id,
		Table:           change.TableName{Schema: schema, Name: name},
		ReplicaIdentity: identity,
		Columns:         make([]change.Column, n),
	}
	for i := range rel.Columns {
		flags := w.u8("column flags")
		colName := w.cstring("column name")
		typ := w.u32("column type")
		mod := int32(w.u32("column type modifier"))
		if w.err != nil {
			return nil, fmt.Errorf("column %d: %w", i+1, w.err)
		}
		rel.Columns[i] = change.Column{Name: colName, TypeOID: typ, TypeMod: mod, Key: flags&1 != 0}
	}
	if err := w.done(); err != nil {
		return nil, err
	}
	return rel, nil
}

func (s *Stream) relation(id uint32) (*change.Relation, error) {
	rel, ok := s.relations[id]
	if !ok {
		return nil, fmt.Errorf("change for relation %d before its description", id)
	}
	return rel, nil
}

// changeHeader reads the relation id and the first tuple part byte of an
// Insert, Update or Delete message and returns the relation and a reader over
// a copy of the message positioned after that byte. Values decoded from the
// copy may point into it: the caller's buffer is reused by the next receive.
func (s *Stream) changeHeader(data []byte) (*change.Relation, wire, byte, error) {
	w := wire{b: data, off: 1}
	id := w.u32("relation id")
	part := w.u8("tuple part")
	if w.err != nil {
		return nil, wire{}, 0, w.err
	}
	rel, err := s.relation(id)
	if err != nil {
		return nil, wire{}, 0, err
	}
	return rel, wire{b: s.arena.copyOf(data), off: w.off}, part, nil
}

// tuple decodes a TupleData submessage of rel into vals (len(vals) is the
// relation's column count).
func (w *wire) tuple(rel *change.Relation, vals []change.Value) error {
	n := w.u16("column count")
	if w.err != nil {
		return w.err
	}
	if int(n) != len(vals) {
		return fmt.Errorf("relation %s: tuple has %d columns, relation %d", rel.Table, n, len(rel.Columns))
	}
	for i := range vals {
		switch kind := w.u8("column kind"); kind {
		case columnNull:
			vals[i] = change.Value{Kind: change.ValueNull}
		case columnUnchanged:
			vals[i] = change.Value{Kind: change.ValueUnchanged}
		case columnText:
			vals[i] = change.Value{Kind: change.ValueText, Text: w.bytes(w.u32("column length"), "column value")}
		case columnBinary:
			vals[i] = change.Value{Kind: change.ValueBinary, Text: w.bytes(w.u32("column length"), "column value")}
		default:
			if w.err != nil {
				break
			}
			return fmt.Errorf("relation %s column %s: unsupported tuple data type %q", rel.Table, rel.Columns[i].Name, kind)
		}
		if w.err != nil {
			return fmt.Errorf("relation %s column %s: %w", rel.Table, rel.Columns[i].Name, w.err)
		}
	}
	return nil
}

func (s *Stream) decodeInsert(data []byte) (*change.Change, error) {
	rel, w, part, err := s.changeHeader(data)
	if err != nil {
		return nil, err
	}
	own := ownCopy(len(data)) // see arena.go
	if part != tupleNew {
		return nil, fmt.Errorf("tuple part %q, want 'N'", part)
	}
	vals := s.arena.valueSlice(len(rel.Columns), own)
	if err := w.tuple(rel, vals); err != nil {
		return nil, err
	}
	if err := w.done(); err != nil {
		return nil, err
	}
	c := s.arena.newChange(own)
	*c = change.Change{Op: change.OpInsert, Relation: rel, New: vals}
	return c, nil
}

func (s *Stream) decodeUpdate(data []byte) (*change.Change, error) {
	rel, w, part, err := s.changeHeader(data)
	if err != nil {
		return nil, err
	}
	own := ownCopy(len(data)) // see arena.go
	n := len(rel.Columns)
	c := s.arena.newChange(own)
	*c = change.Change{Op: change.OpUpdate, Relation: rel}
	switch part {
	case tupleKey, tupleOld:
		vals := s.arena.valueSlice(2*n, own)
		c.Old, c.New = vals[:n:n], vals[n:]
		c.OldKeyOnly = part == tupleKey
		if err := w.tuple(rel, c.Old); err != nil {
			return nil, fmt.Errorf("old tuple: %w", err)
		}
		if next := w.u8("new tuple part"); w.err == nil && next != tupleNew {
			return nil, fmt.Errorf("tuple part %q after the old tuple, want 'N'", next)
		}
	case tupleNew:
		c.New = s.arena.valueSlice(n, own)
	default:
		return nil, fmt.Errorf("tuple part %q, want 'K', 'O' or 'N'", part)
	}
	if err := w.tuple(rel, c.New); err != nil {
		return nil, fmt.Errorf("new tuple: %w", err)
	}
	if err := w.done(); err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Stream) decodeDelete(data []byte) (*change.Change, error) {
	rel, w, part, err := s.changeHeader(data)
	if err != nil {
		return nil, err
	}
	own := ownCopy(len(data)) // see arena.go
	if part != tupleKey && part != tupleOld {
		return nil, fmt.Errorf("tuple part %q, want 'K' or 'O'", part)
	}
	c := s.arena.newChange(own)
	*c = change.Change{Op: change.OpDelete, Relation: rel, OldKeyOnly: part == tupleKey, Old: s.arena.valueSlice(len(rel.Columns), own)}
	if err := w.tuple(rel, c.Old); err != nil {
		return nil, err
	}
	if err := w.done(); err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Stream) decodeTruncate(data []byte) (*change.Change, error) {
	w := wire{b: data, off: 1}
	n := w.u32("relation count")
	opts := w.u8("options")
	// Check the ids are there before allocating for them.
	if !w.need(uint64(n)*4, "relation ids") {
		return nil, w.err
	}
	c := &change.Change{
		Op:              change.OpTruncate,
		Cascade:         opts&truncateCascade != 0,
		RestartIdentity: opts&truncateRestartIdentity != 0,
	}
	if n > 0 {
		c.Truncated = make([]*change.Relation, n)
	}
	for i := range c.Truncated {
		rel, err := s.relation(w.u32("relation id"))
		if err != nil {
			return nil, err
		}
		c.Truncated[i] = rel
	}
	if err := w.done(); err != nil {
		return nil, err
	}
	return c, nil
}

// schemaChange turns the content of a schema change message into an
// OpSchema change: the table it concerns is read from the "schema" and
// "table" fields of the JSON object after its signature (engine/ddl checks
// the signature and reads the rest).
func schemaChange(lsn change.LSN, content []byte) (*change.Change, error) {
	var head struct {
		Schema string `json:"schema"`
		Table  string `json:"table"`
	}
	start := bytes.IndexByte(content, '{')
	if start < 0 {
		return nil, errors.New("decode schema change message: no JSON object")
	}
	if err := json.Unmarshal(content[start:], &head); err != nil {
		return nil, fmt.Errorf("decode schema change message: %w", err)
	}
	if head.Schema == "" {
		return nil, errors.New("decode schema change message: no schema")
	}
	msg := &change.SchemaMessage{LSN: lsn, Table: change.TableName{Schema: head.Schema, Name: head.Table}, Content: append([]byte(nil), content...)}
	return &change.Change{Op: change.OpSchema, Schema: msg}, nil
}
