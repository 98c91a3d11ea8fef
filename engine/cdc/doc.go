// Package cdc runs a mirror's change data capture: it streams changes from
// the source's replication slot and applies them to the destination in
// batches, exactly once.
//
// # Pipeline
//
//	source walsender --pgoutput--> capture.Stream goroutine --events (bounded channel)--> Run loop --> apply.Applier --> destination
//	        ^                                   |                                              |
//	        +------ standby status updates <----+---------- Stream.Confirm(end LSN) <------------+ (after the destination commit)
//
// Run opens a destination connection, reads the mirror's applied position
// from _pgmirror.applied on the destination (the truth; when there is none
// yet, the slot's confirmed position), and starts replication on the slot at
// that position. The capture goroutine owns the replication connection: it
// receives and decodes pgoutput messages and hands Begin/Change/Commit
// events to the loop through a bounded channel. While the loop is busy it
// keeps sending standby status updates every StatusInterval, so the source
// never times the connection out; silence longer than HeartbeatTimeout ends
// the run with ErrHeartbeatTimeout.
//
// The loop groups whole source transactions into a batch. The first change
// of a batch opens a destination transaction; changes are written into it
// in bounded chunks (so a transaction of millions of rows never sits in
// memory). Memory is bounded by count and by bytes at both stages: the
// stream hands over at most MaxBufferedBytes of unreleased changes, and the
// applier writes a chunk once it holds ChunkSize changes or MaxBufferedBytes
// of values. A batch closes on a transaction boundary when it holds BatchSize
// changes, when SyncInterval has passed since its first change, or once
// nothing more is waiting in the stream right after a commit: under low load
// every transaction is applied at once, under high load batches grow by
// themselves. Should what waited after the commit hold no commit (the
// changes of a streamed transaction still open on the source), the batch is
// decided again once the loop has handled it, as at a dry commit. When the stream is momentarily empty but the source's WAL ends
// past the commit (a plain source connection polls pg_current_wal_flush_lsn()
// every 100 ms, sourcepos.go; the stream's own "WAL end" is only the
// message's position), the batch waits up to 2 ms for more transactions, or
// up to 20 ms when the source is 1 MiB or more ahead (a catch-up, where a
// destination commit per few transactions would cost the CPU the source's
// walsender needs); the stream is then also told to read in gulps
// (Stream.SetCatchingUp). Closing a batch records the end LSN of its last transaction
// and the next batch id in _pgmirror.applied inside the same destination
// transaction, and commits, with synchronous_commit = off as PostgreSQL's
// own apply worker does: the loop never waits for the destination's disk.
// Reporter.BatchApplied is called right after the commit. The batch's LSN is
// confirmed to the source (reported as flushed) only once the destination's
// WAL is flushed past the commit: a flush watcher with its own destination
// connection polls pg_current_wal_flush_lsn() every 25 ms for up to 100 ms
// once the stream is dry and then forces a flush with a tiny synchronous
// commit, and the stream sends the standby status update at once
// (Stream.ConfirmNow), so the slot is confirmed within about a tenth of a
// second of the commit, not at the next status interval.
//
// While nothing waits in the stream and no batch is open, the loop has the
// applier read ahead, one table per round, what the first change of each
// mapped table would otherwise wait for (apply.Applier.Prefetch: the
// destination table's description and the source columns recorded for it,
// a few round trips): the first transactions after a run starts (a resume,
// a restart, a hand-over) are then applied as soon as they arrive. Tables
// being copied are left to the moment they join.
//
// A source of PostgreSQL 14 or later streams a transaction that outgrows
// its logical_decoding_work_mem while it runs (pgoutput protocol 2): the
// loop applies its row changes as they arrive into a destination
// transaction of their own, on a second session, and commits it at the
// source's commit right after the batch before it (early.go). The stream
// stages the streamed transactions it does not hand over early
// (Config.StageMemory in memory, the rest in a temporary file in
// Config.SpillDir) and hands them to the loop at their commit, whole and in
// commit order, so the loop and the applier treat them as any other
// transaction; the one handed over early is staged while it fits in
// memory, and when the loop gives it up after it outgrew that, Run starts
// the stream again with it staged (capture.RereadError;
// docs/consistency.md, "Large transactions streamed by the source").
//
// With Config.Origin the apply connection's transactions carry the
// mirror's replication origin (engine/origin), and the stream leaves out
// source transactions that carry one of pgmirror's (engine/capture): two
// runs in opposite directions over the same tables never feed each other.
//
// # Binary values
//
// When the source runs PostgreSQL 14 or later and every replicated column
// has the identical, portable type on both sides (schemasync.BinaryCompatible;
// no arrays or composites of user-defined types), the run asks pgoutput for
// binary 'true' and the applier carries the values' bytes untouched into a
// binary COPY. Otherwise values travel as text. A column whose type was not
// checked at the start (DDL on the source) ends the run's attempt with
// apply.ErrBinaryMismatch and Run starts again with the format decided anew.
//
// # Schema changes
//
// With Config.SchemaChanges set, the applier keeps each table's source
// columns by attnum on the destination and handles a renamed, dropped,
// added or retyped column at its position in the stream (engine/apply,
// schema.go): under "apply" it alters the destination in the batch
// transaction and settles the changed columns' binary format, so the run
// goes on in binary without a restart; a change whose values the stream
// does not carry asks the Reporter (SchemaChangeReporter.ResyncTable) for
// a copy of the table. Under "stop" Run returns a SchemaStopError before
// the change. The format check at the start then tolerates a source that
// is ahead of the stream (trackedBinaryTypes).
//
// # Tables applied in order
//
// The applier folds each chunk by key. On a destination table with unique
// constraints besides its primary key (or, with foreign keys checked, a
// self-referencing one), rows that trade a value within a chunk make the
// folded statements fail (apply.OrderConflictError). The batch is rolled
// back, and Run starts again at the applied position with that table in
// apply.Config.InOrder for the rest of the run; a violation in order ends
// the run.
//
// # Guarantees
//
//   - Nothing is lost: the source keeps every transaction after the
//     confirmed LSN, and the LSN is confirmed only after the destination
//     commit that holds it is flushed to the destination's disk. A commit
//     lost in a destination crash takes its applied position with it, so
//     the source sends it again and nothing skips it.
//   - Nothing is applied twice: the applied position commits atomically with
//     the data, replication restarts there, and any transaction the source
//     re-sends that ends at or before it is skipped. This holds for tables
//     without a primary key too.
//   - The destination never shows half a source transaction: batches end on
//     transaction boundaries and commit atomically. On stop, a batch that
//     ends on a boundary is committed; one in the middle of a transaction is
//     rolled back and re-sent by the next run.
//   - A table copied on its own (a table resync, a table added to the
//     mirror) stands at its copy's snapshot LSN, recorded in
//     _pgmirror.table_positions. Run starts at the lowest position of any
//     table, applies each table's changes only from transactions at or after
//     its own position, and forgets the entry inside the batch that brings
//     the table level with the mirror. While the copy runs, a Run with
//     Config.SkipTables drops those tables' changes and confirms nothing, so
//     the slot still holds everything after the copy point.
//   - On an idle source, keepalives advance the confirmed position once
//     everything received is applied, so the slot does not retain WAL that
//     other databases write.
//
// # Lag and heartbeats
//
// Every Config.HeartbeatInterval (10 s) the run writes a transactional
// logical decoding message on the source (pg_logical_emit_message; the
// stream asks pgoutput for messages, PostgreSQL 14+), which comes back
// through the slot as an empty transaction. A Reporter that is also a
// LagReporter hears every second, and after every batch, how long ago the
// oldest transaction not yet applied (of the open batch) or the oldest
// heartbeat not yet received committed: 0 when everything is applied, and
// growing while the stream is stuck with WAL waiting on the source. A
// heartbeat written while the source had no WAL past the position the run
// has received (its own earlier heartbeats aside) does not count: nothing
// is pending before it, so an idle mirror shows 0 while its first
// heartbeat is on its way. The heartbeats start once the stream is open.
// A source that refuses the heartbeat gets one warning and none for the
// rest of the run.
//
// # Holding for a verification
//
// Config.Holder lets a verification hold the run for an instant at the
// first transaction whose commit LSN is at or after a source position,
// with everything before it committed on the destination (see Holder and
// engine/verify). The run never waits long: the Holder bounds its waits.
//
// # Errors
//
// Run returns nil when stop is closed and ctx.Err() when ctx is done. Other
// failures are wrapped errors that match, where it applies, ErrConnect
// (could not connect; also ErrConnectionTimeout when it timed out),
// ErrConnectionTimeout, ErrHeartbeatTimeout, ErrSlotMissing, ErrSlotInUse,
// ErrMissingColumn or ErrForeignKeyViolation. Foreign keys and triggers on the destination do
// not fire while applying when the destination user may set
// session_replication_role (see apply.Applier), so the last one only occurs
// without that right. Error texts never contain passwords.
package cdc
