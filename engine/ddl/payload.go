package ddl

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/colsync"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// Message is the decoded payload of a schema change message (the content
// of a change.SchemaMessage). Kind says which of its parts are set.
type Message struct {
	// V is the payload's version (1).
	V int `json:"v"`
	// Kind is "state" (the table's resulting state, see State) or "drop"
	// (an index or constraint was dropped, see Drop).
	Kind string `json:"kind"`
	// Tag is the command tag of the source's DDL (ALTER TABLE, CREATE
	// INDEX, ALTER INDEX, DROP INDEX).
	Tag    string `json:"tag"`
	Schema string `json:"schema"`
	// Table is the source table ("" for a dropped index).
	Table string `json:"table"`
	// Xid is the id of the source transaction that wrote the message
	// (modulo 2^32, as pgoutput's Begin message carries it).
	Xid uint32 `json:"xid"`
	// Trees reports that the trigger put the node trees of the
	// expressions into the message (Index.Tree, Constraint.Tree,
	// Column.DefaultTree); an older trigger did not, and then no
	// expression of the message is carried (see Screen).
	Trees bool `json:"trees"`
	State
	Drop
}

// State is a source table's state after a DDL command.
type State struct {
	// Indexes are the table's indexes except its primary key's and those
	// backing a constraint.
	Indexes []Index `json:"indexes"`
	// Constraints are the table's check (type c), unique (u) and exclusion
	// (x) constraints.
	Constraints []Constraint `json:"constraints"`
	// Columns are the table's columns in attnum order.
	Columns []Column `json:"columns"`
}

// Index is an index as pg_get_indexdef prints it with only pg_catalog on
// the search path; Prefix is what it prints before the access method
// ("CREATE INDEX name ON schema.table USING ").
type Index struct {
	Name   string `json:"name"`
	Def    string `json:"def"`
	Prefix string `json:"prefix"`
	Unique bool   `json:"unique"`
	// Tree is the node tree text of its expressions and predicate
	// (pg_index.indexprs, indpred), "" for plain columns.
	Tree string `json:"tree"`
	// NotCarried, set by Screen, says why the index is not created on
	// the destination.
	NotCarried string `json:"-"`
}

// Constraint is a check, unique or exclusion constraint; Def is
// pg_get_constraintdef (ending in NOT VALID when not validated).
type Constraint struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Def       string `json:"def"`
	Validated bool   `json:"validated"`
	// Tree is the node tree text of its expression (conbin), of the
	// expressions of its index, and its exclusion operators as ":opno N".
	Tree string `json:"tree"`
	// NotCarried, set by Screen, says why the constraint is not created
	// on the destination.
	NotCarried string `json:"-"`
}

// Column is a column's NOT NULL flag and default (pg_get_expr; nil for
// none). Generated and identity columns carry no default.
type Column struct {
	Attnum  int    `json:"attnum"`
	Name    string `json:"name"`
	NotNull bool   `json:"not_null"`
	// Generated reports a generated or an identity column.
	Generated bool    `json:"generated"`
	Default   *string `json:"default"`
	// DefaultTree is the default's node tree text (pg_attrdef.adbin).
	DefaultTree *string `json:"default_tree"`
	// NotCarried, set by Screen, says why the default is not set on the
	// destination.
	NotCarried string `json:"-"`
	// TypeOID and TypeMod are the column's type (atttypid, atttypmod), and
	// Stored reports a stored generated column, which the stream does not
	// carry. Messages of a trigger installed by an older pgmirror lack
	// them (TypeOID 0).
	TypeOID uint32 `json:"type_oid"`
	TypeMod int32  `json:"typmod"`
	Stored  bool   `json:"stored"`
}

// Drop is a dropped index or table constraint.
type Drop struct {
	// Object is "index" or "constraint".
	Object string `json:"object"`
	// Name is the index's or constraint's name.
	Name string `json:"name"`
}

// Parse decodes the content of a schema change message.
func Parse(content []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(content, &m); err != nil {
		return Message{}, fmt.Errorf("decode schema change message: %w", err)
	}
	if m.V != 1 {
		return Message{}, fmt.Errorf("decode schema change message: version %d, want 1 (update pgmirror or install the trigger again)", m.V)
	}
	switch m.Kind {
	case "state":
		if m.Table == "" {
			return Message{}, fmt.Errorf("decode schema change message: state without a table")
		}
	case "drop":
		if m.Object != "index" && m.Object != "constraint" || m.Name == "" {
			return Message{}, fmt.Errorf("decode schema change message: drop of %q %q", m.Object, m.Name)
		}
	default:
		return Message{}, fmt.Errorf("decode schema change message: unknown kind %q", m.Kind)
	}
	return m, nil
}

// Concerns reports whether the message concerns the source table of m: it
// names it, or it is a dropped index of m's source schema.
func (msg Message) Concerns(m change.Mapping) bool {
	if msg.Schema != m.Source.Schema {
		return false
	}
	return msg.Table == m.Source.Name || (msg.Kind == "drop" && msg.Object == "index" && msg.Table == "")
}

// signatureLen is the length of the hex signature before a message's JSON.
const signatureLen = 2 * sha256.Size

// ErrUnsigned matches (errors.Is) a message that the trigger did not write:
// its signature does not match the key, or it was written in another
// transaction than the one it claims (a copy of an older message).
var ErrUnsigned = errors.New("schema change message not signed by the DDL capture trigger")

// sign returns the signature of body under key: hex(sha256(key ||
// hex(sha256(key || body)))), as the trigger's emit function computes it.
func sign(key string, body []byte) string {
	inner := sha256.Sum256(append([]byte(key), body...))
	outer := sha256.Sum256([]byte(key + hex.EncodeToString(inner[:])))
	return hex.EncodeToString(outer[:])
}

// Open checks the signature of the content of a schema change message with
// key (ReadKey) and that it was written in the transaction xid, then
// decodes it (Parse). Anyone connected to the source may write a logical
// decoding message with pgmirror's prefix: only the trigger knows the key.
func Open(content []byte, key string, xid uint32) (Message, error) {
	if key == "" || len(content) < signatureLen {
		return Message{}, ErrUnsigned
	}
	sig, body := content[:signatureLen], content[signatureLen:]
	if subtle.ConstantTimeCompare(sig, []byte(sign(key, body))) != 1 {
		return Message{}, ErrUnsigned
	}
	m, err := Parse(body)
	if err != nil {
		return Message{}, err
	}
	if m.Xid != xid {
		return Message{}, fmt.Errorf("%w: written in transaction %d, found in transaction %d", ErrUnsigned, m.Xid, xid)
	}
	return m, nil
}

// CheckFunc checks node trees of expressions (exprcheck.Checker.Check on
// the source's catalog): "" when they may be evaluated on the
// destination, otherwise why not.
type CheckFunc func(ctx context.Context, trees ...string) (string, error)

// Screen checks every expression of a state message with check and marks
// those that are not to be created on the destination (NotCarried): Plan
// leaves them out, and the destination keeps what it has for that object.
// It returns one warning per object left out, naming the table, the
// object and the reason. A message of a trigger older than the node trees
// carries none of its expressions.
func (msg *Message) Screen(ctx context.Context, source change.TableName, check CheckFunc) ([]string, error) {
	if msg.Kind != "state" {
		return nil, nil
	}
	verdict := func(tree string, has bool) (string, error) {
		if !has {
			return "", nil
		}
		if !msg.Trees {
			return "it was captured by an older DDL capture trigger that does not say which functions it calls", nil
		}
		return check(ctx, tree)
	}
	var warnings []string
	for i := range msg.Indexes {
		ix := &msg.Indexes[i]
		reason, err := verdict(ix.Tree, ix.Tree != "" || !msg.Trees)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			ix.NotCarried = reason
			warnings = append(warnings, fmt.Sprintf("index %s of %s is not carried to the destination: %s", sqlquote.Ident(ix.Name), source, reason))
		}
	}
	for i := range msg.Constraints {
		c := &msg.Constraints[i]
		reason, err := verdict(c.Tree, c.Tree != "" || !msg.Trees)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			c.NotCarried = reason
			warnings = append(warnings, fmt.Sprintf("constraint %s of %s is not carried to the destination: %s", sqlquote.Ident(c.Name), source, reason))
		}
	}
	for i := range msg.Columns {
		c := &msg.Columns[i]
		if c.Default == nil || colsync.UsesSequence(*c.Default) {
			continue
		}
		tree := ""
		if c.DefaultTree != nil {
			tree = *c.DefaultTree
		}
		reason, err := verdict(tree, true)
		if err != nil {
			return nil, err
		}
		if reason != "" {
			c.NotCarried = reason
			warnings = append(warnings, colsync.NotCarriedNote(colsync.Source{Name: c.Name, NotCarried: reason}, source))
		}
	}
	return warnings, nil
}
