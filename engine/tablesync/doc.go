// Package tablesync copies tables from a source to a destination PostgreSQL
// database as of one snapshot: the initial snapshot of a mirror and the copy
// of a resynced table. Run is the entry point.
//
// # Consistency
//
// Every reading transaction is REPEATABLE READ and imports the snapshot that
// the replication slot exported (SET TRANSACTION SNAPSHOT), so the copy
// shows the source exactly as of the slot's consistent point and CDC starts
// there. Each partition commits on the destination on its own; the snapshot
// counts as done only when Run returns nil.
//
// # Constraints and indexes
//
// Once every partition of a table is committed, Run gives a destination
// table that pgmirror created the source's check constraints and non-unique
// indexes (schemasync.AddIndexesAndConstraints with AfterCopy) over one of
// its worker connections, before reporting TableDone: the copy writes into
// a table with nothing but its primary key, and a Reporter that implements
// IndexReporter learns what was created.
//
// # Partitions and parallelism
//
// A table's partitions are its units of work and progress: each is
// committed on the destination on its own and reported (PartitionDone).
// There is one per snapshot_num_rows_per_partition rows of each leaf (each
// leaf partition of a partitioned table), but a partition holds at least
// 2 MiB worth of rows: each costs a destination transaction, the start of a
// COPY and a log entry, which must stay small next to its copy.
//
// How many streams are copied at once:
//
//   - Over all tables: at most snapshot_max_parallel_workers (each worker is
//     one source and one destination connection), from at most
//     snapshot_num_tables_in_parallel tables. Streams of different tables
//     go into different destination tables and do not contend.
//   - Of one table: one writer per full 512 MiB of the source table (TOAST
//     included), so one below 1 GiB, and never more than it has
//     partitions or snapshot_max_parallel_workers allows, and, when the
//     destination server runs on this host (a Unix socket, a loopback
//     address, or an address of this host), never more than half this
//     host's CPUs. Parallel COPYs into one table contend on the destination
//     (the relation extension lock, index page splits as the writers insert
//     into each other's key ranges): on a 2-core machine four of them cost
//     the destination twice the CPU of one and took longer than a single
//     COPY. They pay only where the destination has idle cores, which SQL
//     cannot show (max_worker_processes and max_parallel_workers are
//     settings, not cores), and only where the copy is long enough to gain
//     from them.
//
// A table with one writer is read in one stream per leaf, a plain
// COPY table TO STDOUT (a sequential scan), which its worker cuts into the
// partitions at row boundaries: every CopyData message from the server is
// one row, so each partition becomes a complete COPY FROM STDIN of its own
// (in binary format with its own header and trailer). A table with several
// writers is read in ctid block ranges, one partition each, so that the
// writers can share them; a TID range scan cost the source about twice the
// CPU of a sequential scan (measured: 1.3-1.5 s against 0.6 s for 1,000,000
// rows), which only parallel writers make worth paying.
//
// # Time before the first row
//
// A snapshot's fixed cost is mostly connection setups (a fork and a SCRAM
// exchange each, tens of milliseconds on a busy host) and catalog reads on
// fresh backends, so Run avoids and overlaps them: with the caller's open
// connections (Config.SourceConn and DestConn, whose catalog caches the
// setup has already warmed) it opens none before the first row moves, and
// otherwise it opens the source and destination connections at once. The
// source tables are described and measured, in the snapshot, while the
// destination tables are described; all destination tables are truncated in
// one statement; the first worker copies the first stream over the
// planning connections; each transaction begins in one round trip (BEGIN,
// SET TRANSACTION SNAPSHOT and, on borrowed connections, SET LOCAL of the
// session settings in one statement).
//
// # Marked writes
//
// With Config.OriginMirrorUID every destination connection of the run is
// marked with a copy origin of the mirror (engine/origin.SetupCopy) before
// it writes, the truncate's included, and the origin is dropped when the
// connection is done: a mirror reading from the destination leaves the
// copy out.
package tablesync
