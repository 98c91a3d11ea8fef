// Package apply writes decoded source changes to the destination database.
//
// An Applier owns one destination connection. A batch is Begin, Apply for
// each change, Commit: one destination transaction that also records the
// mirror's applied position in _pgmirror.applied (engine/positions owns
// that table: positions.QueueApplied), so a batch is either wholly on the
// destination with its position, or not at all. The transaction is the
// session's (BEGIN, statements on the connection, then COMMIT in the same
// round trip as reading the destination's WAL positions). The session runs
// with synchronous_commit = off, as PostgreSQL's apply worker does: Commit
// does not wait for the WAL flush, and LastCommitWAL tells the caller which
// WAL position must be flushed on the destination before the batch's
// source position may be confirmed.
//
// Changes are buffered in chunks (Config.ChunkSize) and written into the
// open transaction chunk by chunk, so memory stays bounded whatever the
// size of a source transaction. For a table whose destination has a primary
// key, a chunk is collapsed to the final state of each key (deleted, new, or
// updated: new when the key's first change in the chunk was an insert),
// loaded with COPY into a temporary staging table whose columns have the
// destination's types, and applied with set-based statements, each as cheap
// as the state allows:
//
//   - DELETE ... USING staging for deleted keys (also the old key of an
//     update that changed the primary key),
//   - UPDATE ... FROM staging for complete rows of updated keys, followed,
//     only when it found fewer rows than it was given, by INSERT ... ON
//     CONFLICT DO NOTHING for the rows the destination lacks,
//   - INSERT ... SELECT ... ON CONFLICT (pk) DO UPDATE for new rows at
//     keys that had a row when the chunk started (deleted and inserted
//     again: an upsert, so that the destination's row is replaced); new
//     rows at keys that had none go by COPY straight into the table after
//     the statements, about half the destination's work, and a row the
//     destination has all the same (a mirror started without a snapshot
//     over a copy taken later) then fails it with an OrderConflictError
//     (the table is applied again in order, where inserts are upserts),
//   - UPDATE ... FROM staging for rows with unchanged TOAST values, one
//     statement per set of unchanged columns, leaving those columns alone.
//
// A chunk of binary values that holds only updates of complete rows (a bulk
// UPDATE on the source) skips the staging table when every column has a
// built-in scalar type and the key none with a collation: one UPDATE ...
// FROM ROWS FROM (unnest of one binary array parameter per column), one
// round trip instead of three and a sixth less destination CPU per row
// (arrays.go). When the key is one integer column and a statement's keys
// are dense (a bulk statement in the table's order), it is also bounded to
// the keys' range and run as a merge join: one walk along the primary
// key's index instead of a descent per row.
//
// An update is thus one UPDATE, not an insert attempt that conflicts and
// then updates: cheaper for the destination, in CPU and in WAL. As the
// staging table is typed, COPY parses each value once and keys compare with
// the primary key's index without casts.
//
// Values come in one of two forms, and a stream sends only one. Text values
// (change.ValueText) go by text COPY and text parameters, parsed by the
// destination's type input functions. Binary values (change.ValueBinary,
// pgoutput's binary mode) go by binary COPY and binary parameters typed
// with the destination column's type OID, untouched: this needs the types
// to be identical on both sides, which the caller checked when the run
// started (Config.Binary, Config.BinaryTypes); a relation whose columns no
// longer match that check fails with ErrBinaryMismatch, and the caller
// starts the stream again in a format decided anew.
//
// A destination table with unique constraints besides its primary key (a
// unique index, also one that only a partition has, or an exclusion
// constraint; typically a schema restored from the source with pg_dump) is
// folded too, but a value that moves between rows within a chunk (two rows
// swapping it through a temporary one, a new row taking it over from one
// deleted later) makes a set-based statement meet a row that still holds
// it, whatever the statements' order. Such a violation is returned as an
// OrderConflictError; the caller rolls the batch back and applies it again
// with the table in Config.InOrder: one statement per change in the
// source's order, pipelined in one round trip per chunk, with the folded
// path's outcomes (delete by key, upsert, update of the columns a change
// has), as PostgreSQL's own apply worker writes every table. A violation
// in order is a real one and is returned as it is. Tables that pgmirror
// creates get their secondary unique indexes only at the cut-over.
//
// An unchanged TOAST value is taken from an earlier image of the same row in
// the chunk when there is one (an insert and an update of one row in one
// batch keep the inserted value). An update that moves a row to a new key
// while keeping an unchanged TOAST value is applied in order as an UPDATE of
// the old key.
//
// A table without a usable primary key (for example REPLICA IDENTITY FULL
// with duplicate rows) is applied in order: runs of inserts by COPY into the
// table, and
// each update or delete on exactly one row whose columns match the old row
// image (compared as text after a round trip through the destination type,
// so json and point compare too). TRUNCATE truncates the mapped destination
// tables in order. Columns are matched by name; excluded columns never reach
// the destination.
//
// Foreign keys and triggers: see Applier.
//
// The package's files: applier.go (the Applier and its batch), plan.go
// (destination tables, plans per relation, source DDL), collapse.go
// (folding a chunk to the final state of each key), keyed.go (staging, the
// set-based statements, and the in-order statements of Config.InOrder), ordered.go (tables without a key, one-row
// statements), statements.go (the SQL, as pure functions), copyenc.go (COPY
// data in text and binary format). The destination metadata (_pgmirror) is
// engine/positions's.
package apply
