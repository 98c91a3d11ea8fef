// Package change holds the plain types that the engine's packages share:
// log sequence numbers, table names and table mappings. Besides the
// standard library it uses only sqlquote, to quote table names.
package change

import (
	"fmt"
	"strings"

	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// LSN is a PostgreSQL log sequence number.
type LSN uint64

// String formats the LSN as PostgreSQL does: two hexadecimal parts, X/Y.
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// ParseLSN parses the X/Y text form of an LSN.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("parse LSN %q: want two hexadecimal parts separated by a slash", s)
	}
	var h, l uint32
	if _, err := fmt.Sscanf(hi, "%X", &h); err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	if _, err := fmt.Sscanf(lo, "%X", &l); err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return LSN(uint64(h)<<32 | uint64(l)), nil
}

// TableName is a schema-qualified table name, unquoted.
type TableName struct {
	Schema string
	Name   string
}

// String returns schema.table without quoting, the form users see in the API.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Quoted returns "schema"."table" with every identifier quoted for SQL.
func (t TableName) Quoted() string { return sqlquote.Qualified(t.Schema, t.Name) }

// Mapping says which source table is replicated into which destination
// table, and which columns are left out.
type Mapping struct {
	Source         TableName
	Destination    TableName
	ExcludeColumns []string
}

// Excluded reports whether column is left out of replication.
func (m Mapping) Excluded(column string) bool {
	for _, c := range m.ExcludeColumns {
		if c == column {
			return true
		}
	}
	return false
}

// Counts are the changes of one table: every source change counts once,
// even when several changes to one row collapse into one statement on the
// destination. Truncated counts TRUNCATEs.
type Counts struct {
	Inserted, Updated, Deleted, Truncated int64
}

// Add adds o to c.
func (c *Counts) Add(o Counts) {
	c.Inserted += o.Inserted
	c.Updated += o.Updated
	c.Deleted += o.Deleted
	c.Truncated += o.Truncated
}

// Rows is the number of row changes: inserts, updates and deletes.
func (c Counts) Rows() int64 { return c.Inserted + c.Updated + c.Deleted }
