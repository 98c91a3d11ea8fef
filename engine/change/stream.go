package change

// This file holds the decoded form of a logical replication stream: the
// relations (table descriptions) and the row changes that engine/capture
// produces and engine/apply consumes.

import "unsafe"

// Column describes one column of a replicated relation as the source sent it.
type Column struct {
	// Name is the column name, unquoted.
	Name string
	// TypeOID is the source type's OID (it names the format of ValueBinary
	// values; text values are read by the destination's type input).
	TypeOID uint32
	// TypeMod is the type modifier (atttypmod: a varchar's length, a
	// numeric's precision and scale), -1 for none.
	TypeMod int32
	// Key reports whether the column is part of the replica identity.
	Key bool
}

// Replica identity settings a relation can have (pg_class.relreplident).
const (
	IdentityDefault byte = 'd'
	IdentityNothing byte = 'n'
	IdentityFull    byte = 'f'
	IdentityIndex   byte = 'i'
)

// Relation describes a source table as the stream last described it. A new
// Relation value is created whenever the source re-sends the description
// (for example after DDL), so a Change always points at the description that
// was current when it was decoded.
type Relation struct {
	// ID is the source relation OID.
	ID uint32
	// Table is the source table (the partition root when the publication
	// publishes through the root).
	Table TableName
	// Columns are the published columns in source order.
	Columns []Column
	// ReplicaIdentity is one of the Identity constants.
	ReplicaIdentity byte
}

// ValueKind says what a Value holds.
type ValueKind uint8

const (
	// ValueNull is an SQL NULL.
	ValueNull ValueKind = iota
	// ValueText is a value in PostgreSQL's text output format.
	ValueText
	// ValueUnchanged marks an unchanged TOASTed value that the source did
	// not send: the destination keeps what it has.
	ValueUnchanged
	// ValueBinary is a value in its type's binary send format (the bytes
	// the type's send function produces, the same bytes a binary COPY
	// field carries). The source sends it when the stream asked for
	// pgoutput binary mode.
	ValueBinary
)

// Value is one column value of a row image.
type Value struct {
	Kind ValueKind
	// Text holds the value's bytes when Kind is ValueText (the text output
	// format) or ValueBinary (the binary send format); it is nil otherwise.
	// The name is kept from the time all values were text.
	Text []byte
}

// Op is the kind of a Change.
type Op uint8

const (
	// OpInsert is a new row (New is set).
	OpInsert Op = iota + 1
	// OpUpdate is a changed row (New is set; Old is set when the key changed
	// or the relation has REPLICA IDENTITY FULL).
	OpUpdate
	// OpDelete is a removed row (Old is set).
	OpDelete
	// OpTruncate empties the relations in Truncated.
	OpTruncate
)

// String returns the operation name.
func (o Op) String() string {
	switch o {
	case OpInsert:
		return "insert"
	case OpUpdate:
		return "update"
	case OpDelete:
		return "delete"
	case OpTruncate:
		return "truncate"
	case OpSchema:
		return "schema change"
	}
	return "unknown"
}

// changeSize and valueSize are the sizes of a Change and a Value;
// valueWireSize is a value's kind and length in the pgoutput message.
const (
	changeSize    = int(unsafe.Sizeof(Change{}))
	valueSize     = int(unsafe.Sizeof(Value{}))
	valueWireSize = 5
)

// Change is one row change (or a truncate) of a source transaction.
type Change struct {
	Op Op
	// Relation is the changed table (nil for OpTruncate).
	Relation *Relation
	// Old is the old row image: for updates and deletes, the replica
	// identity columns (OldKeyOnly, other columns are null) or the whole
	// row (REPLICA IDENTITY FULL). Nil for an update that kept its key.
	Old []Value
	// OldKeyOnly reports that Old holds only the key columns.
	OldKeyOnly bool
	// New is the new row image for inserts and updates.
	New []Value
	// Truncated lists the relations of an OpTruncate.
	Truncated []*Relation
	// Cascade and RestartIdentity are the TRUNCATE options.
	Cascade, RestartIdentity bool
	// Schema is the captured schema change of an OpSchema.
	Schema *SchemaMessage
}

// Size estimates the memory the change holds, in bytes: the Change, its
// Values and their bytes, plus each value's kind and length, which a
// decoded change keeps in its copy of the wire message.
func (c *Change) Size() int {
	n := changeSize + (valueSize+valueWireSize)*(len(c.Old)+len(c.New))
	if c.Schema != nil {
		n += len(c.Schema.Content)
	}
	for _, v := range c.Old {
		n += len(v.Text)
	}
	for _, v := range c.New {
		n += len(v.Text)
	}
	return n
}

// OpSchema is a schema change captured on the source (a logical decoding
// message written by pgmirror's event trigger, see engine/ddl): Schema is
// set, Relation is nil.
const OpSchema Op = OpTruncate + 1

// SchemaMessage is a schema change captured on the source by pgmirror's
// event trigger, decoded where it happened inside its transaction.
type SchemaMessage struct {
	// LSN is the position of the message in the source's WAL.
	LSN LSN
	// Table is the source table the change concerns. Name is "" for a
	// dropped index, whose table the source no longer knows: it concerns
	// the tables of Schema.
	Table TableName
	// Content is the message's JSON payload (engine/ddl describes it).
	Content []byte
}

// SchemaMessagePrefix is the prefix of the logical decoding messages that
// pgmirror's event trigger writes on the source (pg_logical_emit_message).
const SchemaMessagePrefix = "pgmirror_ddl"
