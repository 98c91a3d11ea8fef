package jobs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/capture"
	"github.com/pgmirror/pgmirror/engine/cdc"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/positions"
	"github.com/pgmirror/pgmirror/engine/tablesync"
)

// reasonCopied stops the CDC phase that ran beside a table copy once the
// copy is done.
const reasonCopied stopReason = "copied"

// copyTablesDuringCDC copies targets (a table resync, or tables added to the
// mirror) while CDC keeps replicating the mirror's other tables.
//
// A temporary slot exports a snapshot at its consistent point P; every
// target is truncated (a table's first copy: checked against the mirror's
// existing_destination_rows, see existingRows) and copied as of that
// snapshot, and its position P is recorded on the destination
// (_pgmirror.table_positions) before the table is marked running. Meanwhile a CDC phase runs with the targets skipped and
// the mirror slot's confirmed position held, so the slot still has every
// transaction after P. When the copy is done the CDC phase stops at a batch
// boundary and the next one starts at P: it applies the targets' changes
// from P on and skips what the other tables already have. A crash at any
// point leaves the targets in snapshotting, and the next run copies them
// again.
func (r *mirrorRun) copyTablesDuringCDC(ctx context.Context, in *phaseInputs, targets []db.MirrorTable) error {
	m, srcPeer, dstPeer, dst, tables := in.m, in.srcPeer, in.dstPeer, in.dst, in.tables
	ids := make([]int64, len(targets))
	names := make([]string, len(targets))
	skip := make([]change.TableName, len(targets))
	for i, t := range targets {
		ids[i] = t.ID
		skip[i] = change.TableName{Schema: t.SourceSchema, Name: t.SourceTable}
		names[i] = skip[i].String()
	}
	// The copies replace whatever the targets held and wherever they stood.
	if err := positions.CopyStarting(ctx, dst, m.UID, skip); err != nil {
		return err
	}
	if err := r.store.MirrorTablesSetStatus(ctx, m.ID, ids, db.TableStatusSnapshotting); err != nil {
		return err
	}
	if err := r.store.MirrorMarkRunning(ctx, m.ID); err != nil {
		return err
	}
	r.setCopying(ids)
	defer r.setCopying(nil)
	r.log(ctx, db.LevelInfo, "Starting table snapshot", map[string]any{
		"tables": names, "note": "the other tables keep replicating while these are copied"})

	mappings := toMappings(tables)
	stop := r.beginCDC()
	rep := newBatchReporter(r, m, mappings)
	cdcDone := make(chan error, 1)
	go func() {
		cfg, err := r.cdcConfig(m, srcPeer, dstPeer, mappings, skip)
		if err != nil {
			cdcDone <- err
			return
		}
		cdcDone <- cdc.Run(ctx, cfg, rep, stop)
	}()
	copyCtx, cancelCopy := context.WithCancel(ctx)
	defer cancelCopy()
	copyDone := make(chan error, 1)
	go func() { copyDone <- r.copyTablesAt(copyCtx, m, srcPeer, dstPeer, targets, in.prepared) }()

	var cdcErr, copyErr error
	select {
	case copyErr = <-copyDone:
		r.stopCDC(reasonCopied)
		cdcErr = <-cdcDone
	case cdcErr = <-cdcDone:
		cancelCopy()
		copyErr = <-copyDone
	}
	rep.close(ctx)
	reason := r.endCDC()
	switch {
	case cdcErr != nil:
		return inStep(opCDC, cdcErr)
	case reason == reasonPaused:
		return r.store.MirrorSetPausedIfRequested(ctx, m.ID)
	case reason == reasonDeleted:
		return nil
	case copyErr != nil && !(reason != reasonCopied && errors.Is(copyErr, context.Canceled)):
		return copyErr
	}
	// Copied (or interrupted by another control request, which the next
	// iteration carries out): CDC starts again from the lowest position.
	return errAgain
}

// copyTablesAt copies targets from a temporary slot's snapshot and records
// each one's position on the destination as its copy completes; a target
// whose columns in the snapshot differ from its prepared shape fails it
// (tablesync.SourceChangedError).
func (r *mirrorRun) copyTablesAt(ctx context.Context, m db.Mirror, srcPeer, dstPeer db.Peer, targets []db.MirrorTable, prepared tablesync.Shapes) error {
	repl, err := openReplication(ctx, srcPeer)
	if err != nil {
		return err
	}
	defer closeReplication(repl)
	info, err := capture.CreateTemporarySlot(ctx, repl, tempSlotName(m))
	if err != nil {
		return fmt.Errorf("create temporary slot for the table copy: %w", err)
	}
	dst, err := connectPeer(ctx, "destination", dstPeer)
	if err != nil {
		return err
	}
	defer closeConn(dst)

	rep := newSnapshotReporter(r, targets)
	rep.copyLSN = info.ConsistentPoint
	defer rep.endMetrics()
	var dstMu sync.Mutex
	rep.beforeDone = func(ctx context.Context, t change.Mapping) error {
		dstMu.Lock()
		defer dstMu.Unlock()
		return positions.TableCopied(ctx, dst, m.UID, t.Source, info.ConsistentPoint)
	}
	srcCfg, dstCfg, err := peerConfigs(srcPeer, dstPeer)
	if err != nil {
		return err
	}
	existing, taken := r.existingRows(m, targets)
	err = tablesync.Run(ctx, tablesync.Config{
		Source:             srcCfg,
		Dest:               dstCfg,
		SnapshotName:       info.SnapshotName,
		Tables:             toMappings(targets),
		Existing:           existing,
		Taken:              taken,
		RowsPerPartition:   m.SnapshotNumRowsPerPartition,
		MaxParallelWorkers: m.SnapshotMaxParallelWorkers,
		TablesInParallel:   m.SnapshotNumTablesInParallel,
		Logger:             r.logger,
		OriginMirrorUID:    r.originUID(m),
		// CDC tracks the tables' columns from their shape at P.
		SourceColumnsMirrorUID: m.UID,
		Prepared:               prepared,
	}, rep)
	return r.refusedCopy(ctx, m, targets, err)
}

// tempSlotName names the temporary slot of a table copy: unique per mirror
// (the mirror's uid), within PostgreSQL's 63 characters.
func tempSlotName(m db.Mirror) string {
	return "pgmirror_copy_" + strings.ReplaceAll(m.UID, "-", "")
}

// setCopying records the mirror tables being copied by this run, so that
// the control watcher does not take their resync requests for new ones.
func (r *mirrorRun) setCopying(ids []int64) {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	r.copying = map[int64]bool{}
	for _, id := range ids {
		r.copying[id] = true
	}
}

func (r *mirrorRun) isCopying(id int64) bool {
	r.stopMu.Lock()
	defer r.stopMu.Unlock()
	return r.copying[id]
}
