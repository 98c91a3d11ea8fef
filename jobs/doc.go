// Package jobs holds pgmirror's River job kinds: the mirror run job that
// drives setup, snapshot, table copies beside CDC, CDC and cut-overs through
// the engine; the cleanup job that finishes a deletion; the verification
// job (verify.go), which compares a mirror's destination with its source at
// one source position while the run holds CDC there for an instant
// (verify_hold.go: the run's side of that hold, through the verifications
// table; verify_reverse.go: the check of a reverse mirror's prerequisites
// that every verification makes); and the periodic supervisor (mirrors
// without a worker), slot monitor (slot lag and WAL status, and peers that
// refuse connections: peer_logins.go), verification schedule and log
// pruning jobs.
//
// The HTTP API enqueues these jobs with InsertTx in the same catalog
// transaction that writes the desired state, so either both happen or
// neither does.
//
// # A mirror's run (mirror_run.go)
//
// MirrorRunWorker.Work returns at once, without touching the catalog, while
// the replica runs SERVICE_MIRROR_WORKERS mirrors or leaves new mirrors to
// replicas below their fair share (a job of the mirrors queue only; the
// rules are in share.go, balance.go carries them out: a replica with room
// adopts the mirror on its own queue, and a replica above its share hands
// runs to a replica below it by a job on that replica's queue), and unless the mirror wants to run
// (db.Mirror.WantsToRun: live, desired state running, status not paused, stopped or
// completed) and its session advisory lock is free; holding the lock, the
// run snoozes until next_retry_at for a mirror in error, starts the control
// watcher (notifications of pgmirror_mirror_control from the replica's lock
// connection, db.LockHolder, plus a poll every minute: a delete or pause
// stops the CDC phase at a batch boundary and cancels other phases; a
// pending action or table request stops the CDC phase so that the loop
// carries it out), and drives the mirror.
//
// # One iteration (mirror_drive.go, plan.go)
//
// prepare loads the mirror, tables and peers, connects to both peers
// (engine/session), runs preflight.Check, ensures the publication, prepares
// the destination tables as schemaPreparation says (the first setup creates
// them, later runs follow source DDL, a requested schema sync does it
// itself), ensures _pgmirror (engine/positions) and reads the slot. Then
// nextPhase, a pure function of the mirror, its tables, the slot and
// whether the destination holds the mirror's applied position, picks one
// phase (plan_test.go covers every case):
//
//   - phaseCutover: the requested cut-over (cutover.go; its steps are in
//     docs/operations.md);
//   - phaseAction: a requested resync (every table pending, status
//     snapshotting) or schema sync, then the loop decides again;
//   - phaseSlotTaken: a slot of the mirror's name it did not create: fail;
//   - phaseSnapshot: drop and create the slot with an exported snapshot,
//     tablesync.Run, positions.SnapshotTaken, sequences synced;
//   - phaseNewSlot: create the slot without a copy, or recreate a missing
//     or invalidated one: then the mirror's tables are marked as having
//     lost changes first (lost_changes.go);
//   - phaseCopyTables: copy some tables from a temporary slot's snapshot
//     while CDC replicates the others (table_copy.go);
//   - phaseCDC: mark waiting tables running and stream (cdc.Run) until the
//     run budget, a control request, a pause or a delete stops it.
//
// Before the phases that stream from an existing slot, the run checks that
// the slot has not moved past what the mirror applied or confirmed
// (checkSlotPosition, lost_changes.go).
//
// The snapshot, new slot and table-start phases continue with CDC. When CDC
// meets a column the destination lacks (cdc.ErrMissingColumn), the loop adds
// it (schemasync.SyncColumns) and starts over; the batch was rolled back.
// Column changes of the source follow the mirror's schema_changes: CDC
// applies them itself (cdc.Config.SchemaChanges, batchReporter logs and
// counts them and requests a table's resync), and under stop the run pauses
// the mirror (pauseForSchemaChange).
//
// # Failures
//
// Every phase's error is wrapped with its step (stepError: setup, snapshot,
// cdc, sync_schema, cutover; the innermost step names a failure). fail
// records it (status error, or stopped after MaxFailures), logs the
// catalogue message failureMessage picks, first from the error's kind
// (slot taken, heartbeat timeout, a peer that rejected the login or could
// not be reached, judged by session.Classify), else from the step, and
// snoozes the job for Backoff(n): 5 s doubling to 5 minutes.
//
// A run ends with the run budget (the job snoozes 0 s and comes straight
// back, possibly on another replica), on shutdown (snooze 0 s: another
// replica takes over), on pause or delete, or when its cut-over completed.
// While the catalog is unreachable during CDC the run goes on and takes its
// lock back later (catalog_outage.go).
//
// # Seams for tests (seams.go)
//
// A run reaches the catalog through runStore and the replica's lock holder
// through runLocks, two interfaces that *db.Store and *db.LockHolder
// satisfy (Config.Store and Config.Locks in production). runStore is made
// of a few groups (seams.go: mirrorReader, runStatus, tableStore,
// cutoverStore, holdStore, logStore); a part of a run that needs fewer
// methods takes only its group (the verification hold a holdStore, the
// origin filter a loopReader). The package's
// lifecycle tests wrap the real ones to make a catalog call fail or the
// lock impossible to take back, and check what the run does about it.
//
// # Reporting
//
// batch_reporter.go writes CDC progress (last LSN, table counters) at most
// every 200 ms and the batch log entries at most every 5 s off the apply
// path; snapshotReporter (mirror_drive.go) writes snapshot progress;
// sequences.go keeps destination sequences in step every
// SequenceSyncInterval on its own connections.
package jobs
