package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/verify"
)

// VerifyArgs enqueues the job that carries out one verification (a row of
// the verifications table): it compares the mirror's destination with its
// source at one source position while CDC runs.
type VerifyArgs struct {
	VerificationID int64 `json:"verification_id"`
}

// Kind is the River job kind.
func (VerifyArgs) Kind() string { return "mirror_verify" }

// InsertOpts: a second attempt only records that the first one's replica
// stopped (a verification is not resumed).
func (VerifyArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 2} }

// VerifyWorker runs verifications.
type VerifyWorker struct {
	river.WorkerDefaults[VerifyArgs]
	cfg Config
}

// Timeout is long: a comparison reads every row of both sides.
func (w *VerifyWorker) Timeout(*river.Job[VerifyArgs]) time.Duration { return 24 * time.Hour }

// verifyError is a verification failure whose text is meant for users.
type verifyError struct{ msg string }

func (e *verifyError) Error() string { return e.msg }

// errVerificationEnded: the verification was cancelled (or ended) meanwhile.
var errVerificationEnded = errors.New("the verification was cancelled")

// verifyAttempts is how often a verification tries to obtain its snapshots
// when the mirror's hold timed out (slow slot creation under load).
const verifyAttempts = 3

// touchEvery is how often a running verification's job shows it is alive.
const touchEvery = 5 * time.Second

// Work carries out the verification.
func (w *VerifyWorker) Work(ctx context.Context, job *river.Job[VerifyArgs]) error {
	store := w.cfg.Store
	v, err := store.VerificationByID(ctx, job.Args.VerificationID)
	if errors.Is(err, db.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if v.State != db.VerifyRunning {
		return nil
	}
	if job.Attempt > 1 {
		_, err := store.VerificationFinish(ctx, v.ID, db.VerifyFailed,
			"the pgmirror replica running this verification stopped before it finished; start a new verification", []verify.TableResult{}, nil)
		return err
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.keepAlive(runCtx, cancel, v.ID)
	}()
	started := time.Now()
	results, lsn, err := w.run(runCtx, v)
	cancel(nil)
	wg.Wait()
	m, merr := store.MirrorGetByID(ctx, v.MirrorID)
	if merr != nil {
		return merr
	}
	if !errors.Is(context.Cause(runCtx), errVerificationEnded) && ctx.Err() == nil {
		w.checkReverse(ctx, m, v)
	}
	if err != nil {
		if errors.Is(context.Cause(runCtx), errVerificationEnded) || errors.Is(err, errVerificationEnded) {
			_ = store.LogInsert(ctx, m.ID, db.LevelInfo, "Verification cancelled", map[string]any{"verification_id": v.ID})
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err() // shutting down: the next attempt marks it failed
		}
		return w.failed(ctx, m, v, results, err)
	}
	return w.done(ctx, m, v, results, lsn, time.Since(started))
}

// keepAlive shows that the verification runs every touchEvery, and
// cancels it (errVerificationEnded) once it was ended from outside.
func (w *VerifyWorker) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, id int64) {
	t := time.NewTicker(touchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			state, err := w.cfg.Store.VerificationTouch(ctx, id)
			if err == nil && state != db.VerifyRunning {
				cancel(errVerificationEnded)
				return
			}
		}
	}
}

// failed records a verification that failed with err, with the tables
// compared before it.
func (w *VerifyWorker) failed(ctx context.Context, m db.Mirror, v db.Verification, results []verify.TableResult, err error) error {
	msg := err.Error()
	var ve *verifyError
	if !errors.As(err, &ve) {
		msg = "verification failed: " + msg
	}
	if results == nil {
		results = []verify.TableResult{}
	}
	if ok, ferr := w.cfg.Store.VerificationFinish(ctx, v.ID, db.VerifyFailed, msg, results, nil); ferr != nil || !ok {
		return ferr
	}
	_ = w.cfg.Store.LogInsert(ctx, m.ID, db.LevelError, "Verification failed", map[string]any{"verification_id": v.ID, "error": msg})
	return nil
}

// done records a finished verification, clears the lost changes it
// proved gone and logs the summary.
func (w *VerifyWorker) done(ctx context.Context, m db.Mirror, v db.Verification, results []verify.TableResult, lsn change.LSN, took time.Duration) error {
	store := w.cfg.Store
	var differing int64
	var tablesDiffering, skipped []string
	for _, r := range results {
		switch {
		case r.Skipped != "":
			skipped = append(skipped, r.Table)
		case !r.Equal():
			differing += r.RowsDiffering
			tablesDiffering = append(tablesDiffering, r.Table)
		}
	}
	ok, err := store.VerificationFinish(ctx, v.ID, db.VerifyDone, "", results, &differing)
	if err != nil || !ok {
		return err
	}
	w.lostChangesVerified(ctx, m, results, lsn)
	level := db.LevelInfo
	if len(tablesDiffering) > 0 {
		level = db.LevelWarn
	}
	_ = store.LogInsert(ctx, m.ID, level, "Verification completed", map[string]any{
		"verification_id": v.ID, "lsn": lsn.String(), "tables": len(results), "tables_differing": nonNil(tablesDiffering),
		"rows_differing": differing, "tables_skipped": nonNil(skipped), "duration_seconds": took.Seconds()})
	return nil
}

// run obtains the snapshots and compares the tables.
func (w *VerifyWorker) run(ctx context.Context, v db.Verification) ([]verify.TableResult, change.LSN, error) {
	store := w.cfg.Store
	m, err := store.MirrorGetByID(ctx, v.MirrorID)
	if err != nil {
		return nil, 0, err
	}
	if m.Status != db.StatusRunning || m.DeletedAt != nil {
		return nil, 0, &verifyError{msg: fmt.Sprintf("mirror %q is %s: a verification needs a running mirror; resume or retry it first", m.Name, m.Status)}
	}
	tables, err := store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, 0, err
	}
	srcPeer, dstPeer, err := mirrorPeers(ctx, store, m)
	if err != nil {
		return nil, 0, err
	}
	vr := &verifyRun{w: w, m: m, v: v, hold: &catalogHold{store: store, id: v.ID}}
	if vr.src, vr.dst, err = peerConfigs(srcPeer, dstPeer); err != nil {
		return nil, 0, err
	}
	// A dropped source table has nothing to compare.
	maps, skipped := vr.selectTables(replicating(tables))
	_ = store.LogInsert(ctx, m.ID, db.LevelInfo, "Verification started", map[string]any{
		"verification_id": v.ID, "tables": len(maps), "requested_by": v.RequestedBy})
	if v.RepairOf != nil {
		if err := vr.repair(ctx, maps, skipped); err != nil {
			return nil, 0, err
		}
	}
	snaps, err := vr.open(ctx, verifySlotName(m.UID, v.ID), nil)
	if err != nil {
		return nil, 0, err
	}
	defer snaps.Close()
	compare, outOfStep := snaps.Comparable(maps)
	for t, reason := range outOfStep {
		skipped[t] = reason
	}
	compare = slices.DeleteFunc(compare, func(mp change.Mapping) bool { return skipped[mp.Source] != "" })
	if err := store.VerificationSetResult(ctx, v.ID, snaps.LSN.String(), []verify.TableResult{}); err != nil {
		return nil, 0, err
	}
	rep := &verifyReporter{store: store, mirrorID: m.ID, id: v.ID, lsn: snaps.LSN}
	res, err := verify.Compare(ctx, verify.Config{
		Source: vr.src, Dest: vr.dst, SourceSnapshot: snaps.Source, DestSnapshot: snaps.Dest, Tables: compare,
		Workers: max(1, min(m.SnapshotMaxParallelWorkers, 4)), Logger: w.cfg.Logger,
	}, rep)
	if err != nil {
		return rep.results(), snaps.LSN, err
	}
	byTable := map[string]verify.TableResult{}
	for _, r := range res {
		byTable[r.Table] = r
	}
	out := make([]verify.TableResult, 0, len(maps))
	for _, mp := range maps {
		if reason := skipped[mp.Source]; reason != "" {
			out = append(out, verify.TableResult{Table: mp.Source.String(), Destination: mp.Destination.String(), Skipped: reason,
				Missing: []string{}, Extra: []string{}, Different: []string{}})
			continue
		}
		out = append(out, byTable[mp.Source.String()])
	}
	return out, snaps.LSN, nil
}

// verifyRun is one verification of mirror m as the job carries it out.
type verifyRun struct {
	w        *VerifyWorker
	m        db.Mirror
	v        db.Verification
	src, dst *pgx.ConnConfig
	hold     *catalogHold
	all      []change.TableName // every replicating source table of the mirror
}

// selectTables returns the tables to compare, in mapping order (those the
// request names, or all), and the reasons of those skipped: tables not
// running (being copied).
func (vr *verifyRun) selectTables(tables []db.MirrorTable) ([]change.Mapping, map[change.TableName]string) {
	var maps []change.Mapping
	skipped := map[change.TableName]string{}
	for _, t := range tables {
		vr.all = append(vr.all, t.Source())
		if len(vr.v.Tables) > 0 && !slices.Contains(vr.v.Tables, t.Source().String()) {
			continue
		}
		mp := toMappings([]db.MirrorTable{t})[0]
		maps = append(maps, mp)
		if t.Status != db.TableStatusRunning || t.ResyncRequestedAt != nil {
			skipped[mp.Source] = fmt.Sprintf("the table is %s (being copied); verify it once it is running", t.Status)
		}
	}
	return maps, skipped
}

// open obtains the source and destination snapshots at one source position
// (verify.OpenSnapshots), trying again when the mirror's hold timed out.
func (vr *verifyRun) open(ctx context.Context, slot string, whileHeld func(context.Context, *verify.Snapshots) error) (*verify.Snapshots, error) {
	m, v := vr.m, vr.v
	store := vr.w.cfg.Store
	var snaps *verify.Snapshots
	var err error
	for attempt := 1; ; attempt++ {
		snaps, err = verify.OpenSnapshots(ctx, verify.SnapshotConfig{
			Source: vr.src, Dest: vr.dst, MirrorUID: m.UID,
			SlotName: slot, Note: fmt.Sprintf("verify %s %d", m.UID, v.ID), Tables: vr.all, WhileHeld: whileHeld,
			Waiting: func(ctx context.Context, oldestXid int64) {
				_ = store.LogInsert(ctx, m.ID, db.LevelInfo, "Verification waits for transactions open on the source", map[string]any{
					"verification_id": v.ID, "oldest_xid": oldestXid,
					"note": "PostgreSQL takes the consistent snapshot a verification needs only once the transactions open on the source cluster have ended; the mirror keeps streaming meanwhile (pg_stat_activity shows them: backend_xid)"})
			},
		}, vr.hold)
		if err == nil || (!errors.Is(err, verify.ErrHoldTimeout) && !errors.Is(err, verify.ErrRepairMoved)) || attempt == verifyAttempts {
			break
		}
		vr.w.cfg.Logger.Info("verification hold timed out; trying again", "mirror", m.Name, "verification_id", v.ID, "attempt", attempt)
	}
	if errors.Is(err, verify.ErrHoldTimeout) {
		return nil, &verifyError{msg: fmt.Sprintf("could not hold the mirror at one source position in %d attempts (%v): long-running transactions on the source delay the temporary slot; try again later", verifyAttempts, err)}
	}
	return snaps, err
}

// repair copies again, chunk by chunk with the mirror held, the rows the
// verification it repairs found different (verify.RepairChunks), and logs
// what it wrote.
func (vr *verifyRun) repair(ctx context.Context, maps []change.Mapping, skipped map[change.TableName]string) error {
	m, v := vr.m, vr.v
	repairs, err := vr.w.repairsOf(ctx, *v.RepairOf, maps, skipped)
	if err != nil {
		return err
	}
	started := time.Now()
	res, at, err := verify.RepairChunks(ctx, verify.RepairConfig{Source: vr.src, Dest: vr.dst, MirrorUID: m.UID, Tables: repairs, MarkWrites: true},
		func(ctx context.Context, chunk int, whileHeld func(context.Context, *verify.Snapshots) error) (*verify.Snapshots, error) {
			return vr.open(ctx, fmt.Sprintf("%s_r%d", verifySlotName(m.UID, v.ID), chunk), whileHeld)
		})
	if err != nil {
		return fmt.Errorf("repair (%d key ranges, %d rows repaired before): %w", res.Ranges, res.Written, err)
	}
	names := make([]string, len(repairs))
	ranges := 0
	for i, r := range repairs {
		names[i] = r.Mapping.Source.String()
		ranges += len(r.Ranges.Ranges)
	}
	_ = vr.w.cfg.Store.LogInsert(ctx, m.ID, db.LevelInfo, "Verification repair applied", map[string]any{
		"verification_id": v.ID, "repair_of": *v.RepairOf, "lsn": at.String(), "tables": names,
		"key_ranges": ranges, "rows_written": res.Written, "chunks": res.Chunks, "duration_ms": time.Since(started).Milliseconds()})
	return nil
}

// verifyReporter logs each compared table and keeps the partial result in
// the catalog.
type verifyReporter struct {
	store    *db.Store
	mirrorID int64
	id       int64
	lsn      change.LSN
	mu       sync.Mutex
	done     []verify.TableResult
}

func (r *verifyReporter) TableCompared(ctx context.Context, t verify.TableResult) {
	r.mu.Lock()
	r.done = append(r.done, t)
	partial := slices.Clone(r.done)
	r.mu.Unlock()
	level := db.LevelInfo
	if !t.Equal() && t.Skipped == "" {
		level = db.LevelWarn
	}
	_ = r.store.LogInsert(ctx, r.mirrorID, level, "Verification table compared", map[string]any{
		"verification_id": r.id, "table": t.Table, "rows_source": t.RowsSource, "rows_destination": t.RowsDestination,
		"chunks": t.Chunks, "chunks_differing": t.ChunksDiffering, "rows_differing": t.RowsDiffering, "duration_ms": t.DurationMS})
	_ = r.store.VerificationSetResult(ctx, r.id, r.lsn.String(), partial)
}

func (r *verifyReporter) results() []verify.TableResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.done)
}

// repairsOf returns the differing key ranges that verification id found in
// the tables of maps (that are not skipped now).
func (w *VerifyWorker) repairsOf(ctx context.Context, id int64, maps []change.Mapping, skipped map[change.TableName]string) ([]verify.TableRepair, error) {
	old, err := w.cfg.Store.VerificationByID(ctx, id)
	if err != nil {
		return nil, err
	}
	var results []verify.TableResult
	if err := json.Unmarshal(old.Result, &results); err != nil {
		return nil, fmt.Errorf("read the result of verification %d: %w", id, err)
	}
	byTable := map[string]verify.TableResult{}
	for _, r := range results {
		byTable[r.Table] = r
	}
	var out []verify.TableRepair
	for _, mp := range maps {
		r, ok := byTable[mp.Source.String()]
		if !ok || r.RepairRanges == nil || len(r.RepairRanges.Ranges) == 0 {
			continue
		}
		if reason := skipped[mp.Source]; reason != "" {
			return nil, &verifyError{msg: fmt.Sprintf("cannot repair %s: %s", mp.Source, reason)}
		}
		out = append(out, verify.TableRepair{Mapping: mp, Ranges: *r.RepairRanges})
	}
	if len(out) == 0 {
		return nil, &verifyError{msg: fmt.Sprintf("verification %d found no key ranges to repair", id)}
	}
	return out, nil
}

// verifySlotName names the temporary slot of verification id of the mirror
// with uid. Verification ids count per catalog, so the mirror's uid is part
// of the name: two installations (or two catalogs) verifying mirrors of one
// source cluster at once would otherwise ask for the same slot name.
func verifySlotName(uid string, id int64) string {
	short := strings.ToLower(strings.ReplaceAll(uid, "-", ""))
	if len(short) > 12 {
		short = short[:12]
	}
	return fmt.Sprintf("pgmirror_verify_%s_%d", short, id)
}

// lostChangesVerified clears the lost changes of the tables the
// verification found equal at lsn (see db.MirrorLostChangesVerified) and
// logs it. A failure is logged only: the marks stay.
func (w *VerifyWorker) lostChangesVerified(ctx context.Context, m db.Mirror, results []verify.TableResult, lsn change.LSN) {
	if len(m.LostChanges) == 0 {
		return
	}
	var equal []string
	for _, r := range results {
		if r.Skipped == "" && r.Equal() {
			equal = append(equal, r.Table)
		}
	}
	cleared, err := w.cfg.Store.MirrorLostChangesVerified(ctx, m.ID, equal, lsn.String())
	if err != nil {
		w.cfg.Logger.Warn("clear the lost changes of verified tables", "mirror", m.Name, "error", err)
		return
	}
	if len(cleared) > 0 {
		_ = w.cfg.Store.LogInsert(ctx, m.ID, db.LevelInfo, "Lost changes cleared", map[string]any{"tables": cleared, "by": "verification", "lsn": lsn.String(),
			"note": "a verification found these tables equal on both sides at this source position"})
	}
}
