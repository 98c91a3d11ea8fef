// Package verify compares a mirror's destination tables with their source
// tables as of one source position, while replication runs.
//
// The caller provides two snapshots that stand at the same source position
// (see docs/consistency.md for how pgmirror obtains them): a snapshot
// exported by a temporary logical slot on the source, and a snapshot exported
// on the destination while the mirror's CDC run was held at that slot's
// consistent point. Every connection of Compare imports one of them
// (SET TRANSACTION SNAPSHOT) as the first statement of a REPEATABLE READ,
// READ ONLY transaction, so any number of workers see the same data.
//
// # Tables with a primary key
//
// Every row is hashed inside its database into 64 bits: hashtextextended of
// its text form when both databases compute that alike (a probe at the
// start; it depends on the byte order), else the first 64 bits of its md5.
//
// A table is cut into ranges of its source primary key (a boundary every
// Config.ChunkRows keys, in key order; ranges are compared while the planner
// still reads the boundaries). For each range both databases compute, at
// the same time, the row count and the sum of the row hashes: only these
// cross the network. The sum does not depend on row order, and rows that
// carry their keys are equal as sets exactly when the range is equal. A
// range whose sums differ is cut again into smaller ranges (boundaries from
// the side with more rows there) until it holds at most Config.LeafRows
// rows; then the keys and row hashes of that small range are fetched from
// both sides and each difference is classified as missing on the
// destination, extra on the destination, or different.
//
// # Tables without a primary key
//
// Rows are compared as multisets: the rows are spread over 16 buckets by the
// low bits of their hash, and per bucket both sides compute the count and
// the sum of the row hashes, which does not depend on row order. A differing
// bucket is compared by grouping its row hashes on both sides; examples are
// the rows' text forms.
//
// # Row text forms
//
// Every comparison transaction pins the settings that change how values
// print (Settings: pgmirror's session settings, TimeZone UTC, lc_monetary
// C), and floating-point columns are hashed by their bits, whose text
// changed in PostgreSQL 12 (canonical.go), so a value has one text form on
// both sides across major versions and settings. Excluded and generated
// columns are left out; renamed destination tables are followed through the
// mapping.
package verify
