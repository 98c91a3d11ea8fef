package jobs

import (
	"context"
	"time"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/cutover"
)

// reverseCheckTimeout bounds a verification's check of the reverse
// mirror's prerequisites.
const reverseCheckTimeout = 30 * time.Second

// checkReverse records with verification v what would keep a cut-over of
// mirror m from creating a reverse mirror (cutover.ReverseProblems), so
// that an operator learns it weeks before the cut-over rather than on its
// day, and logs a WARN naming them. A check that cannot run is logged by
// the process only: the verification's own outcome stands.
func (w *VerifyWorker) checkReverse(ctx context.Context, m db.Mirror, v db.Verification) {
	ctx, cancel := context.WithTimeout(ctx, reverseCheckTimeout)
	defer cancel()
	problems, err := w.reverseProblems(ctx, m)
	if err != nil {
		w.cfg.Logger.Warn("verification: cannot check the reverse mirror's prerequisites", "mirror", m.Name, "verification_id", v.ID, "error", err)
		return
	}
	if err := w.cfg.Store.VerificationSetReverseProblems(ctx, v.ID, problems); err != nil {
		w.cfg.Logger.Warn("record the reverse mirror's prerequisites", "mirror", m.Name, "verification_id", v.ID, "error", err)
	}
	if len(problems) == 0 {
		return
	}
	_ = w.cfg.Store.LogInsert(ctx, m.ID, db.LevelWarn, "Verification: a reverse mirror could not be created", map[string]any{
		"verification_id": v.ID, "problems": problems,
		"effect": "the mirror replicates as it is; a cut-over asked for a reverse mirror (reverse_mirror_name) would fail (or its reverse mirror would)",
		"action": "fix these before the cut-over, or cut over without a reverse mirror"})
}

func (w *VerifyWorker) reverseProblems(ctx context.Context, m db.Mirror) ([]string, error) {
	store := w.cfg.Store
	tables, err := store.MirrorTables(ctx, m.ID)
	if err != nil {
		return nil, err
	}
	tables = replicating(tables)
	if len(tables) == 0 {
		return nil, nil
	}
	dstTables := make([]change.TableName, len(tables))
	for i, mp := range toMappings(tables) {
		dstTables[i] = mp.Destination
	}
	srcPeer, dstPeer, err := mirrorPeers(ctx, store, m)
	if err != nil {
		return nil, err
	}
	src, dst, err := connectPeers(ctx, srcPeer, dstPeer)
	if err != nil {
		return nil, err
	}
	defer closeConn(src)
	defer closeConn(dst)
	return cutover.ReverseProblems(ctx, src, dst, dstTables)
}
