package ddl

import (
	"encoding/json"
	"fmt"

	"github.com/pgmirror/pgmirror/engine/change"
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
}

// Constraint is a check, unique or exclusion constraint; Def is
// pg_get_constraintdef (ending in NOT VALID when not validated).
type Constraint struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Def       string `json:"def"`
	Validated bool   `json:"validated"`
}

// Column is a column's NOT NULL flag and default (pg_get_expr; nil for
// none). Generated and identity columns carry no default.
type Column struct {
	Attnum    int     `json:"attnum"`
	Name      string  `json:"name"`
	NotNull   bool    `json:"not_null"`
	Generated bool    `json:"generated"`
	Default   *string `json:"default"`
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
