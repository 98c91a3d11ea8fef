// Package apply writes decoded source changes to the destination database.
//
// An Applier owns one destination connection. A batch is Begin, Apply for
// each change, Commit: one destination transaction that also records the
// mirror's applied position in _pgmirror.applied (EnsureMeta,
// AppliedPosition, SetAppliedPosition), so a batch is either wholly on the
// destination with its position, or not at all.
//
// Changes are buffered in chunks (Config.ChunkSize) and written into the
// open transaction chunk by chunk, so memory stays bounded whatever the
// size of a source transaction. For a table whose destination has a primary
// key, a chunk is collapsed to the final state of each key (deleted, new, or
// updated: new when the key's first change in the chunk was an insert),
// loaded with COPY (text format, every value as text) into a temporary
// staging table, and applied with set-based statements that cast each value
// to the destination column type, each as cheap as the state allows:
//
//   - DELETE ... USING staging for deleted keys (also the old key of an
//     update that changed the primary key),
//   - UPDATE ... FROM staging for complete rows of updated keys, followed,
//     only when it found fewer rows than it was given, by INSERT ... ON
//     CONFLICT DO NOTHING for the rows the destination lacks,
//   - INSERT ... SELECT ... ON CONFLICT (pk) DO UPDATE for new rows (an
//     upsert, so that a destination that already has the row converges),
//   - UPDATE ... FROM staging for rows with unchanged TOAST values, one
//     statement per set of unchanged columns, leaving those columns alone.
//
// An update is thus one UPDATE, not an insert attempt that conflicts and
// then updates: cheaper for the destination, in CPU and in WAL.
//
// An unchanged TOAST value is taken from an earlier image of the same row in
// the chunk when there is one (an insert and an update of one row in one
// batch keep the inserted value). An update that moves a row to a new key
// while keeping an unchanged TOAST value is applied in order as an UPDATE of
// the old key.
//
// A table without a usable primary key (for example REPLICA IDENTITY FULL
// with duplicate rows) is applied in order: runs of inserts by COPY, and
// each update or delete on exactly one row whose columns match the old row
// image (compared as text after a round trip through the destination type,
// so json and point compare too). TRUNCATE truncates the mapped destination
// tables in order. Columns are matched by name; excluded columns never reach
// the destination.
//
// Foreign keys and triggers: see Applier.
package apply
