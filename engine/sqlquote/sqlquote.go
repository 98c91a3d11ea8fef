// Package sqlquote is the one place pgmirror quotes text for SQL it builds:
// identifiers (names from users and catalogs) and literals (where a value
// cannot be a parameter, such as trigger arguments and DDL text).
//
// Values that can be parameters are parameters; these functions are for the
// rest. NUL bytes, which PostgreSQL never accepts in names or text, are
// dropped.
package sqlquote

import "strings"

// Ident quotes an SQL identifier, doubling embedded double quotes.
func Ident(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), `"`, `""`) + `"`
}

// Qualified quotes schema.name, each part on its own.
func Qualified(schema, name string) string {
	return Ident(schema) + "." + Ident(name)
}

// Idents quotes each name and joins them with ", " (a column list).
func Idents(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = Ident(n)
	}
	return strings.Join(quoted, ", ")
}

// Literal quotes s as an SQL string literal. A string with a backslash
// becomes an escape string (E'...'), so the result means the same text
// whatever standard_conforming_strings says.
func Literal(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\x00", ""), "'", "''")
	if strings.Contains(s, `\`) {
		return "E'" + strings.ReplaceAll(s, `\`, `\\`) + "'"
	}
	return "'" + s + "'"
}
