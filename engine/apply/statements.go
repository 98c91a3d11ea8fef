package apply

import (
	"fmt"
	"strings"

	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/sqlquote"
)

// This file builds the SQL the applier sends, as pure functions of table
// names, column names, destination types and positions. Identifiers are
// quoted here; values are never part of the SQL (they are parameters or COPY
// data). In every function, names and types are the applied columns in
// order, and positions (keyPos, set, where, unchanged) index them.

// stagePrefix qualifies a staging table: temporary tables live in pg_temp.
const stagePrefix = "pg_temp."

// stageRef returns the quoted, schema-qualified name of staging table stage.
func stageRef(stage string) string { return stagePrefix + sqlquote.Ident(stage) }

// createStageSQL creates staging table stage: op and mask, then a column
// c<i> per applied column, defined by stageTypes[i] (the destination type),
// so that values are parsed (text) or received (binary) by COPY once and
// compare with the destination's columns without casts. Its rows go at
// commit.
func createStageSQL(stage string, stageTypes []string) string {
	cols := []string{"op text", "mask text"}
	for i, t := range stageTypes {
		cols = append(cols, fmt.Sprintf("c%d %s", i, t))
	}
	return "CREATE TEMP TABLE " + sqlquote.Ident(stage) + " (" + strings.Join(cols, ", ") + ") ON COMMIT DELETE ROWS"
}

// truncateStageSQL empties staging table stage.
func truncateStageSQL(stage string) string { return "TRUNCATE " + stageRef(stage) }

// dropStageSQL drops staging table stage.
func dropStageSQL(stage string) string { return "DROP TABLE IF EXISTS " + stageRef(stage) }

// copyStageSQL loads staging table stage from COPY data in binary or text
// format.
func copyStageSQL(stage string, binary bool) string {
	return "COPY " + stageRef(stage) + " FROM STDIN" + copyFormat(binary)
}

// copyTargetSQL loads rows into the named columns of target from COPY data
// in binary or text format.
func copyTargetSQL(target change.TableName, names []string, binary bool) string {
	return "COPY " + target.Quoted() + " (" + strings.Join(quoteAll(names), ", ") + ") FROM STDIN" + copyFormat(binary)
}

func copyFormat(binary bool) string {
	if binary {
		return " WITH (FORMAT binary)"
	}
	return ""
}

// stageValue is staging column i.
func stageValue(i int) string { return fmt.Sprintf("s.c%d", i) }

// keyMatch matches target row t to staging row s on the key columns.
func keyMatch(names []string, keyPos []int) string {
	match := make([]string, len(keyPos))
	for j, k := range keyPos {
		match[j] = "t." + sqlquote.Ident(names[k]) + " = " + stageValue(k)
	}
	return strings.Join(match, " AND ")
}

// deleteSQL deletes the target rows whose key a staging row with op 'd' holds.
func deleteSQL(target change.TableName, stage string, names []string, keyPos []int) string {
	return "DELETE FROM " + target.Quoted() + " AS t USING " + stageRef(stage) + " AS s WHERE s.op = 'd' AND " + keyMatch(names, keyPos)
}

// insertSQL inserts the rows staged with op: for opInsert, every row with
// that op, updating the non-key columns of the rows whose key exists (an
// upsert); for opUpdate, the complete rows (mask ”) whose key does not
// exist, leaving those that do alone (the follow-up of updateSQL for rows
// the destination lacks).
func insertSQL(target change.TableName, stage string, names []string, keyPos []int, op byte) string {
	isKey := flagsAt(len(names), keyPos)
	var sel, keys, sets []string
	for i, n := range names {
		q := sqlquote.Ident(n)
		sel = append(sel, stageValue(i))
		if isKey[i] {
			keys = append(keys, q)
		} else {
			sets = append(sets, q+" = EXCLUDED."+q)
		}
	}
	where := "s.op = 'i'"
	conflict := "DO NOTHING"
	if op == opInsert && len(sets) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
	}
	if op == opUpdate {
		where = "s.op = 'u' AND s.mask = ''"
	}
	// OVERRIDING SYSTEM VALUE: the source's values go into identity
	// columns that are GENERATED ALWAYS on the destination too (a table
	// that existed, a reverse mirror into the old source); it changes
	// nothing for other columns.
	return "INSERT INTO " + target.Quoted() + " AS t (" + strings.Join(quoteAll(names), ", ") + ") OVERRIDING SYSTEM VALUE SELECT " + strings.Join(sel, ", ") +
		" FROM " + stageRef(stage) + " AS s WHERE " + where + " ON CONFLICT (" + strings.Join(keys, ", ") + ") " + conflict
}

// updateSQL updates the target rows staged with op 'u' and the mask of the
// unchanged positions given: with none, the complete rows (mask ”); else
// the rows whose mask is parameter $1, leaving the unchanged columns alone.
// The key is never set. It returns "" when no column is left to set.
func updateSQL(target change.TableName, stage string, names []string, keyPos []int, unchanged []int) string {
	skip := flagsAt(len(names), keyPos)
	for _, i := range unchanged {
		skip[i] = true
	}
	sets := stagedSets(names, skip)
	if len(sets) == 0 {
		return ""
	}
	mask := "''"
	if len(unchanged) > 0 {
		mask = "$1"
	}
	return "UPDATE " + target.Quoted() + " AS t SET " + strings.Join(sets, ", ") + " FROM " + stageRef(stage) +
		" AS s WHERE s.op = 'u' AND s.mask = " + mask + " AND " + keyMatch(names, keyPos)
}

// stagedSets sets each column not in skip to its staged value (s.c<i>).
func stagedSets(names []string, skip []bool) []string {
	var sets []string
	for i, n := range names {
		if !skip[i] {
			sets = append(sets, sqlquote.Ident(n)+" = "+stageValue(i))
		}
	}
	return sets
}

// moveSQL updates the row whose key columns equal the parameters after
// those of set to the values given for the set columns ($1, $2, ...).
// Parameters are cast to the destination types (needed for text
// parameters sent without a type; a no-op for typed binary ones).
func moveSQL(target change.TableName, names, types []string, set, keyPos []int) string {
	sets := paramTerms("%s = $%d::%s", names, types, set, 1)
	where := paramTerms("%s = $%d::%s", names, types, keyPos, len(set)+1)
	return "UPDATE " + target.Quoted() + " SET " + strings.Join(sets, ", ") + " WHERE " + strings.Join(where, " AND ")
}

// paramTerms formats one term per column position in cols with format
// (quoted column name, parameter number, destination type), numbering the
// parameters from first.
func paramTerms(format string, names, types []string, cols []int, first int) []string {
	terms := make([]string, len(cols))
	for j, i := range cols {
		terms[j] = fmt.Sprintf(format, sqlquote.Ident(names[i]), first+j, types[i])
	}
	return terms
}

// rowSQL deletes (del) or updates exactly one target row whose where
// columns match the parameters after those of set; an update sets the set
// columns ($1, $2, ...). Values are compared as text after a round trip
// through the destination type, so types without equality (json, point)
// match too. With no where column it matches nothing; an update with no set
// column does nothing.
func rowSQL(target change.TableName, partitioned, del bool, names, types []string, set, where []int) string {
	if !del && len(set) == 0 {
		return "SELECT 1"
	}
	sets := paramTerms("%s = $%d::%s", names, types, set, 1)
	conds := paramTerms("%s::text IS NOT DISTINCT FROM $%d::%s::text", names, types, where, len(set)+1)
	if len(conds) == 0 {
		conds = append(conds, "false")
	}
	// ctid identifies a row within one table; a partitioned destination
	// needs the partition too.
	lhs, sel := "ctid", "ctid"
	if partitioned {
		lhs, sel = "(tableoid, ctid)", "tableoid, ctid"
	}
	one := lhs + " = (SELECT " + sel + " FROM " + target.Quoted() + " WHERE " + strings.Join(conds, " AND ") + " LIMIT 1)"
	if del {
		return "DELETE FROM " + target.Quoted() + " WHERE " + one
	}
	return "UPDATE " + target.Quoted() + " SET " + strings.Join(sets, ", ") + " WHERE " + one
}

// truncateSQL truncates the tables with the TRUNCATE options given.
func truncateSQL(tables []change.TableName, restartIdentity, cascade bool) string {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Quoted()
	}
	sql := "TRUNCATE " + strings.Join(names, ", ")
	if restartIdentity {
		sql += " RESTART IDENTITY"
	}
	if cascade {
		sql += " CASCADE"
	}
	return sql
}

// dropNotNullSQL lets column of table be NULL.
func dropNotNullSQL(table change.TableName, column string) string {
	return "ALTER TABLE " + table.Quoted() + " ALTER COLUMN " + sqlquote.Ident(column) + " DROP NOT NULL"
}

// quoteAll quotes each name.
func quoteAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = sqlquote.Ident(n)
	}
	return out
}

// flagsAt returns a set of n flags with those at pos set.
func flagsAt(n int, pos []int) []bool {
	out := make([]bool, n)
	for _, i := range pos {
		out[i] = true
	}
	return out
}

// deleteRowSQL deletes the row whose key columns equal the parameters
// ($1, $2, ... in key order), cast to the destination types.
func deleteRowSQL(target change.TableName, names, types []string, keyPos []int) string {
	where := paramTerms("%s = $%d::%s", names, types, keyPos, 1)
	return "DELETE FROM " + target.Quoted() + " WHERE " + strings.Join(where, " AND ")
}

// insertRowSQL inserts one row from the parameters ($1, $2, ... in column
// order), cast to the destination types. When the key exists, update sets
// its non-key columns (an upsert); otherwise the row is left alone.
func insertRowSQL(target change.TableName, names, types []string, keyPos []int, update bool) string {
	isKey := flagsAt(len(names), keyPos)
	vals := make([]string, len(names))
	var keys, sets []string
	for i, n := range names {
		q := sqlquote.Ident(n)
		vals[i] = fmt.Sprintf("$%d::%s", i+1, types[i])
		if isKey[i] {
			keys = append(keys, q)
		} else {
			sets = append(sets, q+" = EXCLUDED."+q)
		}
	}
	conflict := "DO NOTHING"
	if update && len(sets) > 0 {
		conflict = "DO UPDATE SET " + strings.Join(sets, ", ")
	}
	return "INSERT INTO " + target.Quoted() + " (" + strings.Join(quoteAll(names), ", ") + ") OVERRIDING SYSTEM VALUE VALUES (" + strings.Join(vals, ", ") +
		") ON CONFLICT (" + strings.Join(keys, ", ") + ") " + conflict
}
