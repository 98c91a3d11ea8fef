// Package colsync owns the rules that bring a destination table's columns
// to its source table's: given the source's columns (names, types,
// attnums, defaults), the destination's and the columns the destination
// last followed (known, by attnum), it returns the ordered steps (add,
// rename, retype, drop or keep, default, NOT NULL) with warnings, as pure
// functions without I/O. The callers read the catalogs, execute the steps
// (or, under schema_changes warn and stop, only look at them) and report
// them:
//
//   - engine/apply while streaming, when a Relation message or a captured
//     ALTER TABLE differs from the known columns (schema_changes apply,
//     mode Follow): Diff, then Stream.
//   - engine/schemasync before a copy (ReshapeForCopy: Reshape, then
//     SyncTable in mode Copying) and for sync-schema and a column the
//     stream met that the destination lacks (SyncColumns: SyncTable in
//     mode Sync).
//   - engine/ddl for a captured ALTER TABLE's NOT NULL and defaults
//     (Attributes); indexes and constraints stay there.
//
// # The rules and where they differ on purpose
//
// Matching is by attnum (Diff) where the destination's shape was recorded
// and by name otherwise. An added column takes the source's type, the value
// the source's older rows have (attmissingval) as a default for the
// destination's existing rows, dropped at once, then the source's default
// for new rows. Following the stream, it is NOT NULL when the source's is
// and older rows have a value, and a column whose older rows got values
// computed one by one (a volatile default, a sequence, an identity), or a
// type change the source made with a table rewrite (NoRewrite), asks for a
// resync of the table; under Sync such a column is added nullable and a
// warning says to resync; before a copy neither matters. A type change
// drops a destination default first (it may not cast) and sets the
// source's after. Following, the destination takes the source's type
// exactly (the source converted its values); under Sync and Copying a
// destination type that holds every source value (Compatible) is kept. A
// retyped column the destination lacks is added with the new type.
// A column the source dropped is dropped following and before a copy
// (outside the primary key there), and kept under Sync with its NOT NULL
// relaxed (Relax). A column renamed to a name the mapping excludes is
// dropped; one renamed from an excluded name is added. Renames that swap
// names go through temporary names; a name a staying column holds is left
// alone.
//
// Common to every path: a default that draws from a sequence (UsesSequence)
// is never set or changed on an existing destination table, a default whose
// expression may not run on the destination is left out with a note
// (NotCarriedNote), and a default the destination rejects is optional: it
// is undone alone and reported.
//
// # Disagreements this package ended
//
// Before the three paths shared these rules they disagreed on: whether a
// sequence default is set on an added or retyped column (streaming tried
// it and the destination rejected it unless it happened to have a sequence
// of that name; the pre-copy path skipped only owned sequences; captured
// DDL skipped all); whether an identity or serial column added by
// sync-schema warns that the destination's older rows are NULL (streaming
// resynced; sync-schema said nothing); a column renamed to an excluded
// name (streaming dropped it; the pre-copy reshape kept it and warned that
// the source no longer has it); renames whose target a staying column
// holds (the pre-copy reshape left the old column under a temporary name);
// whether a kept identity column loses its NOT NULL (the applier tried,
// which PostgreSQL refuses, failing every batch of the table under warn;
// sync-schema did not: Relax); a retyped column the destination lacks
// (streaming failed every batch on ALTER COLUMN TYPE; sync-schema added
// it); and the wording of a default not carried.
package colsync
