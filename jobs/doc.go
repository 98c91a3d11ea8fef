// Package jobs holds pgmirror's River job kinds: the mirror run job that
// drives setup, snapshot, table copies beside CDC, and CDC through the
// engine; the cleanup job that finishes a deletion; and the periodic
// supervisor (mirrors without a worker), slot monitor (slot lag and WAL
// status) and log pruning jobs.
//
// The HTTP API enqueues these jobs with InsertTx in the same catalog
// transaction that writes the desired state, so either both happen or
// neither does.
package jobs
