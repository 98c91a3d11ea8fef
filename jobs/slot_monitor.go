package jobs

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/pgversion"
	"github.com/pgmirror/pgmirror/engine/session"
)

// SlotMonitorArgs is the periodic job (enqueued by the leader every
// SlotMonitorInterval) that reads every mirror's replication slot on its
// source and records in the catalog how much WAL the source keeps for it
// (slot_lag_bytes) and the slot's wal_status, so that a mirror that falls
// behind is visible before the source's disk fills up.
type SlotMonitorArgs struct{}

// Kind is the River job kind.
func (SlotMonitorArgs) Kind() string { return "mirror_slot_monitor" }

// InsertOpts keeps at most one slot monitor job waiting or running at a time
// (the periodic enqueuer uses periodicInsertOpts, which also keys by period).
func (SlotMonitorArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: 1,
		UniqueOpts: river.UniqueOpts{ByState: []rivertype.JobState{
			rivertype.JobStateAvailable, rivertype.JobStatePending, rivertype.JobStateRunning,
			rivertype.JobStateRetryable, rivertype.JobStateScheduled,
		}},
	}
}

// Bounds of one slot monitor pass.
const (
	// slotCheckTimeout bounds connecting to one source and reading its slots:
	// a source that does not answer is skipped (its mirrors keep their last
	// reading and an old slot_checked_at).
	slotCheckTimeout = 5 * time.Second
	// slotCheckParallel is how many sources are read at once.
	slotCheckParallel = 8
)

// SlotMonitorWorker reads the mirrors' slots on their sources.
type SlotMonitorWorker struct {
	river.WorkerDefaults[SlotMonitorArgs]
	cfg Config
}

// Timeout bounds one pass.
func (w *SlotMonitorWorker) Timeout(*river.Job[SlotMonitorArgs]) time.Duration { return time.Minute }

// Work reads the slot of every live mirror that created one, grouped by
// source peer (one connection per source). One source that cannot be read
// does not keep the others from being checked.
func (w *SlotMonitorWorker) Work(ctx context.Context, job *river.Job[SlotMonitorArgs]) error {
	watches, err := w.cfg.Store.MirrorsWithSlot(ctx)
	if err != nil {
		return err
	}
	bySource := map[int64][]db.SlotWatch{}
	var order []int64
	for _, sw := range watches {
		if _, ok := bySource[sw.SourcePeerID]; !ok {
			order = append(order, sw.SourcePeerID)
		}
		bySource[sw.SourcePeerID] = append(bySource[sw.SourcePeerID], sw)
	}
	sem := make(chan struct{}, slotCheckParallel)
	var wg sync.WaitGroup
	logins := &peerLogins{seen: map[int64]error{}}
	for _, peerID := range order {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := w.checkSource(ctx, peerID, bySource[peerID], logins); err != nil {
				names := make([]string, len(bySource[peerID]))
				for i, sw := range bySource[peerID] {
					names[i] = sw.Name
				}
				w.cfg.Logger.Warn("slot monitor: cannot read replication slots on a source", "source_peer_id", peerID, "mirrors", names, "error", err)
			}
		}()
	}
	wg.Wait()
	w.checkPeerLogins(ctx, logins, sem)
	return nil
}

// slotRow is one row of pg_replication_slots.
type slotRow struct {
	walStatus *string
	lag       *int64
	// invalidation is invalidation_reason (PostgreSQL 17+) or
	// "conflicting" (16+), "" for a valid slot.
	invalidation string
}

// checkSource reads the slots of the given mirrors (all on one source) and
// records each one, and in logins whether the source took the connection.
func (w *SlotMonitorWorker) checkSource(ctx context.Context, peerID int64, watches []db.SlotWatch, logins *peerLogins) error {
	peer, err := w.cfg.Store.PeerGetByID(ctx, peerID)
	if err != nil {
		return fmt.Errorf("load source peer %d: %w", peerID, err)
	}
	slots, err := readSlots(ctx, peer, watches)
	logins.record(peerID, err)
	if err != nil {
		return err
	}
	// One catalog transaction for the source's mirrors, not one each.
	tx, err := w.cfg.Store.Pool().Begin(ctx)
	if err != nil {
		return fmt.Errorf("record slot health: %w", err)
	}
	defer tx.Rollback(ctx)
	store := w.cfg.Store.With(tx)
	type recorded struct {
		sw       db.SlotWatch
		previous *string
		h        db.SlotHealth
		row      slotRow
		found    bool
	}
	var done []recorded
	for _, sw := range watches {
		h := db.SlotHealth{}
		row, ok := slots[sw.Slot]
		if ok {
			h.LagBytes, h.WALStatus = row.lag, row.walStatus
		} else {
			missing := db.SlotWALMissing
			h.WALStatus = &missing
		}
		previous, found, err := store.MirrorRecordSlotHealth(ctx, sw.MirrorID, h)
		if err != nil {
			return err
		}
		if found {
			done = append(done, recorded{sw: sw, previous: previous, h: h, row: row, found: ok})
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("record slot health: %w", err)
	}
	for _, d := range done {
		w.warnIfAtRisk(ctx, d.sw, d.previous, d.h)
		w.recordIfLost(ctx, d.sw, d.row, d.found)
	}
	return nil
}

// recordIfLost records lost changes (lost_changes.go) of a mirror whose
// slot is missing or invalidated, unless the mirror is not settled (a full
// resync or a cut-over drops the slot on purpose).
func (w *SlotMonitorWorker) recordIfLost(ctx context.Context, sw db.SlotWatch, row slotRow, found bool) {
	lost := db.LostChanges{Reason: db.LostSlotMissing, OnlyIfSettled: true}
	detail := "does not exist on the source any more (dropped)"
	switch {
	case !found:
	case row.walStatus != nil && *row.walStatus == "lost" || row.invalidation != "":
		lost.Reason = db.LostSlotInvalidated
		why := "wal_status lost"
		if row.invalidation != "" {
			why = row.invalidation
		}
		detail = "was invalidated on the source (" + why + "): the source removed WAL the mirror had not replicated"
	default:
		return
	}
	if sw.LastLSN != nil {
		lost.SinceLSN = *sw.LastLSN
	}
	logEntry := func(ctx context.Context, level db.LogLevel, message string, details any) {
		if err := w.cfg.Store.LogInsert(ctx, sw.MirrorID, level, message, details); err != nil {
			w.cfg.Logger.Warn("write mirror log entry", "mirror", sw.Name, "error", err)
		}
	}
	if _, err := recordLostChanges(ctx, w.cfg.Store, w.cfg.Logger, logEntry, lostRecord{mirrorID: sw.MirrorID, mirror: sw.Name, slot: sw.Slot, lost: lost,
		detail: detail + "; the next run creates it again"}); err != nil {
		w.cfg.Logger.Warn("slot monitor: record lost changes", "mirror", sw.Name, "error", err)
	}
}

// readSlots connects to the source (at most slotCheckTimeout) and returns
// the mirrors' slots found there by name.
func readSlots(ctx context.Context, peer db.Peer, watches []db.SlotWatch) (map[string]slotRow, error) {
	ctx, cancel := context.WithTimeout(ctx, slotCheckTimeout)
	defer cancel()
	cfg, err := peer.ConnConfig()
	if err != nil {
		return nil, fmt.Errorf("source peer: %w", err)
	}
	conn, err := session.Connect(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to source peer %q: %w", peer.Name, err)
	}
	defer closeConn(conn)
	names := make([]string, len(watches))
	for i, sw := range watches {
		names[i] = sw.Slot
	}
	srv, err := pgversion.Read(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("source peer %q: %w", peer.Name, err)
	}
	walStatus := "wal_status" // none on PostgreSQL 12 (which never invalidates a slot)
	if !srv.WALStatus() {
		walStatus = "NULL::text"
	}
	// On a standby (PostgreSQL 16 allows logical slots there) the current
	// position is the replayed one.
	rows, err := conn.Query(ctx, `
		SELECT slot_name::text, `+walStatus+`,
		       pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
		                       confirmed_flush_lsn)::bigint,
		       coalesce(pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'invalidation_reason',
		                CASE WHEN (pg_catalog.to_jsonb(s) OPERATOR(pg_catalog.->>) 'conflicting')::boolean THEN 'conflicting' END, '')
		FROM pg_replication_slots s WHERE slot_name = ANY($1::text[])`, names)
	if err != nil {
		return nil, fmt.Errorf("read replication slots on source peer %q: %w", peer.Name, err)
	}
	defer rows.Close()
	out := map[string]slotRow{}
	for rows.Next() {
		var name string
		var r slotRow
		if err := rows.Scan(&name, &r.walStatus, &r.lag, &r.invalidation); err != nil {
			return nil, fmt.Errorf("read replication slots on source peer %q: %w", peer.Name, err)
		}
		out[name] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read replication slots on source peer %q: %w", peer.Name, err)
	}
	return out, nil
}

// warnIfAtRisk writes a WARN entry to the mirror's log when its slot enters
// a state in which the source removes (unreserved) or has removed (lost)
// WAL that the mirror still needs.
func (w *SlotMonitorWorker) warnIfAtRisk(ctx context.Context, sw db.SlotWatch, previous *string, h db.SlotHealth) {
	if h.WALStatus == nil || (previous != nil && *previous == *h.WALStatus) {
		return
	}
	var action string
	switch *h.WALStatus {
	case "unreserved":
		action = "the slot retains more WAL than max_slot_wal_keep_size allows and will lose it at the next checkpoint: " +
			"let the mirror catch up (resume or fix it) or raise max_slot_wal_keep_size on the source"
	default:
		// lost: recordIfLost logs it as lost changes (ERROR).
		return
	}
	details := map[string]any{"slot": sw.Slot, "wal_status": *h.WALStatus, "action": action}
	if h.LagBytes != nil {
		details["lag_bytes"] = *h.LagBytes
	}
	if err := w.cfg.Store.LogInsert(ctx, sw.MirrorID, db.LevelWarn, "Replication slot is losing WAL", details); err != nil {
		w.cfg.Logger.Warn("write mirror log entry", "mirror", sw.Name, "error", err)
	}
}
