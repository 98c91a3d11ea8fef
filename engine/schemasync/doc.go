// Package schemasync reads table definitions from a source database and
// creates or alters their copies on a destination database.
//
// # Reading
//
// Describe returns a Table: its columns in attnum order (name, type, NOT NULL,
// defaults, identity and generated columns), its primary key, its replica
// identity and the columns that identify a row in replicated UPDATEs and
// DELETEs. Column types are read with only pg_catalog on the search path, so
// Column.Type is "numeric(12,3)" for a built-in type and `public.mood[]` or
// `"Mixed Schema".dom` for anything else: a string that is valid DDL on any
// database and that compares equal across databases when the types match.
//
// # Creating destination tables
//
// EnsureTables runs when a mirror is set up. For every change.Mapping it
// creates the destination table when it is missing (schema included), with
// the source's columns minus excluded ones, NOT NULL and primary key; a
// partitioned source table becomes one plain table, since rows are copied
// and replicated through the partition root. User-defined types that columns
// use (enums, composite types, domains, ranges, arrays of them) are created
// first, in dependency order, under their source schema and name. A
// destination table that already exists is checked rather than changed: each
// replicated column must exist with a Compatible type (the same type, or a
// lossless widening such as integer to bigint), and extra destination columns
// must be nullable or have defaults. All DDL for one call runs in one
// destination transaction under an advisory lock and is returned for the
// mirror's log; a second call on an unchanged source returns no statements.
//
// # Keeping up with source DDL
//
// SyncColumns implements sync-schema: it adds columns the destination lacks,
// changes the type of columns whose destination type cannot hold the
// source's, adds new enum labels, and never drops anything (columns dropped
// on the source are reported as warnings and lose their NOT NULL). The
// mirror's worker also calls it on its own when the change stream shows a
// column the destination lacks.
//
// # Binary COPY
//
// BinaryCompatible tells the snapshot (package tablesync) whether a table
// can be copied in binary COPY format: every column must have the identical
// type on both sides, and a type whose binary form embeds OIDs that differ
// between databases (arrays of user-defined types, composite values) forces
// text format.
//
// Every identifier in generated SQL is quoted with change.QuoteIdent; values
// are query parameters, except enum labels in DDL, which are quoted literals.
package schemasync
