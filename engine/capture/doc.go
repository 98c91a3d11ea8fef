// Package capture reads changes from a PostgreSQL source through logical
// replication.
//
// It manages the two server-side objects a mirror needs on its source: a
// publication (EnsurePublication, AlterPublicationTables, DropPublication),
// which says which tables are replicated, and a pgoutput replication slot
// (CreateSlot, SlotState, DropSlot), which keeps the WAL the mirror has not
// confirmed yet.
//
// StartStream runs START_REPLICATION on a replication connection (see
// ConnectReplication) and hands one goroutine the connection for the rest of
// its life. That goroutine receives the pgoutput messages, decodes them into
// Events (Begin, Change, Commit; see engine/change for the row types) and
// hands them to a bounded channel in slices: everything decoded while pgconn
// still had bytes buffered (at most 256 events), so a busy stream wakes its
// consumer once per read, not once per change. A transaction of any size is
// never held whole in memory; the consumer calls Stream.Release for each event it
// is done with, which also bounds the bytes in flight (large values). While it waits for the consumer it keeps sending
// standby status updates, so the server's wal_sender_timeout never fires
// however long the destination takes. The updates report as flushed only
// the position the consumer passed to Stream.Confirm: the end of the last
// transaction durably committed on the destination. When the stream is idle
// and everything handed over has been confirmed, a keepalive's WAL end is
// confirmed too, so the slot advances on a quiet source.
//
// With StreamConfig.Streaming (sources of PostgreSQL 14 or later) the
// stream asks pgoutput for protocol version 2 and streaming: the source
// sends a transaction that outgrows its logical_decoding_work_mem in blocks
// while it runs (the stream lowers that setting to 8 MB for its walsender,
// see streamingWorkMemKB). The stream stages each such transaction (in memory up to
// StageMemory for all of them, then in an unlinked temporary file per
// transaction; one handed over early with StreamConfig.EarlyChanges is
// never written to a file, see early.go), drops it on Stream Abort and drops a subtransaction's
// changes when that one is rolled back, and hands a committed one over at
// its Stream Commit as Begin, changes and Commit: the consumer sees the same
// whole transactions, in commit order, as from a source that does not
// stream. Stream.StreamedStats counts them.
//
// A transaction whose replication origin (pgoutput's Origin message) is
// the origin of a mirror that closes a loop with this one (pgmirror applied
// it on this database, coming from this mirror's destination; see
// engine/origin.Filter and StreamConfig.Origins) reaches the consumer as
// its Begin and Commit only: its changes are left out, so that mirrors in
// opposite directions never feed each other, and positions still move past
// it. Stream.SkippedTransactions counts them. Transactions of every other
// origin are kept: those of a mirror whose destination this mirror reads
// (a chain of mirrors), and those of native replication.
//
// A busy stream is read in gulps: the replication connection reads its
// socket up to 256 KiB at a time, and when a read drained the socket of a
// stream running above 8 MiB/s, the next one waits 1 ms first
// (gatheringReader), so that it takes what gathered instead of one small
// message at a time (the walsender flushes each message of a streamed
// transaction on its own). Likewise while the consumer is far behind the
// source (SetCatchingUp), a read that had to wait for the walsender is
// followed by a 1 ms pause. In both cases, between two reads the socket's
// receive low-water mark is raised (Linux), so that the messages arriving
// meanwhile do not each wake an idle thread of the process, which would
// preempt the walsender; it is lowered to one byte before the next read.
//
// A stream on which nothing arrives (not even a keepalive requested with a
// status update) for longer than the heartbeat timeout ends with
// ErrHeartbeatTimeout.
package capture
