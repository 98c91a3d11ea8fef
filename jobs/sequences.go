package jobs

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmirror/pgmirror/db"
	"github.com/pgmirror/pgmirror/engine/change"
	"github.com/pgmirror/pgmirror/engine/seqsync"
)

// How a mirror's destination sequences are kept in step (engine/seqsync):
// once after the snapshot, then every Config.SequenceSyncInterval while CDC
// runs, off the apply path. The log says so after the snapshot and then,
// when something moved, at most every sequenceLogEvery.
const sequenceLogEvery = 10 * time.Minute

// sequenceSyncer syncs one run's sequences and reports it.
type sequenceSyncer struct {
	run      *mirrorRun
	mappings []change.Mapping
	listed   []change.TableName // sequences listed in the mirror's configuration
	pairs    []seqsync.Pair
	planned  bool
	periodic bool // the sync every SequenceSyncInterval of a CDC run: logs only when sequences moved
	logged   time.Time
	failing  bool
}

func newSequenceSyncer(r *mirrorRun, m db.Mirror, mappings []change.Mapping) *sequenceSyncer {
	return &sequenceSyncer{run: r, mappings: mappings, listed: listedSequences(m)}
}

// listedSequences are the sequences listed in m's configuration.
func listedSequences(m db.Mirror) []change.TableName {
	out := make([]change.TableName, len(m.Sequences))
	for i, s := range m.Sequences {
		out[i] = change.TableName{Schema: s.Schema, Name: s.Name}
	}
	return out
}

// planSequences pairs the sequences the mapped columns own and the listed
// ones with the destination's, creating listed ones missing there.
func planSequences(ctx context.Context, src, dst *pgx.Conn, mappings []change.Mapping, listed []change.TableName) (pairs []seqsync.Pair, warnings, ddl []string, err error) {
	pairs, warnings, err = seqsync.Plan(ctx, src, dst, mappings)
	if err != nil {
		return nil, nil, nil, err
	}
	more, ddl, err := seqsync.PlanListed(ctx, src, dst, listed)
	if err != nil {
		return nil, warnings, ddl, fmt.Errorf("listed sequences: %w", err)
	}
	return append(pairs, more...), warnings, ddl, nil
}

// sync sets the destination's sequences in step over src and dst, records
// when in the catalog and logs it. A failure (a peer user without SELECT on
// a source sequence, say) is logged at WARN once until a sync works again;
// it never stops replication.
func (s *sequenceSyncer) sync(ctx context.Context, src, dst *pgx.Conn) {
	err := s.syncOnce(ctx, src, dst)
	if err == nil || ctx.Err() != nil {
		return
	}
	if !s.failing {
		s.failing = true
		s.run.log(ctx, db.LevelWarn, "Sequence sync failed", map[string]any{"error": err.Error(),
			"action": "replication goes on; grant the source peer's user SELECT on the tables' sequences (and the destination's UPDATE on theirs); pgmirror tries again at the next sync"})
	}
}

func (s *sequenceSyncer) syncOnce(ctx context.Context, src, dst *pgx.Conn) error {
	if !s.planned {
		pairs, warnings, ddl, err := planSequences(ctx, src, dst, s.mappings, s.listed)
		if len(ddl) > 0 {
			s.run.log(ctx, db.LevelInfo, "Listed sequences created on the destination", map[string]any{"ddl_statements": ddl})
		}
		if err != nil {
			return err
		}
		s.pairs, s.planned = pairs, true
		if len(warnings) > 0 {
			s.run.log(ctx, db.LevelWarn, "Sequences not kept in step", map[string]any{"warnings": warnings})
		}
	}
	res, err := seqsync.Sync(ctx, src, dst, s.pairs)
	if err != nil {
		return err
	}
	now := time.Now()
	if err := s.run.recordSequencesSynced(ctx, now); err != nil {
		s.run.logger.Warn("record sequence sync", "error", err)
	}
	s.failing = false
	if (s.logged.IsZero() && !s.periodic) || (len(res.Moved) > 0 && now.Sub(s.logged) >= sequenceLogEvery) {
		s.logged = now
		moved := make([]string, len(res.Moved))
		for i, t := range res.Moved {
			moved[i] = t.String()
		}
		s.run.log(ctx, db.LevelInfo, "Sequences synced", map[string]any{"sequences_checked": res.Checked, "sequences_moved": moved})
	}
	return nil
}

// keepSequencesInStep syncs the sequences every SequenceSyncInterval until
// ctx ends, on its own connections (opened again after a failure).
func (r *mirrorRun) keepSequencesInStep(ctx context.Context, srcPeer, dstPeer db.Peer, s *sequenceSyncer) {
	s.periodic = true // every run would log its first sync otherwise (one every run budget)
	tick := time.NewTicker(r.cfg.SequenceSyncInterval)
	defer tick.Stop()
	var src, dst *pgx.Conn
	defer func() {
		if src != nil {
			closeConn(src)
		}
		if dst != nil {
			closeConn(dst)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		if src == nil || src.IsClosed() {
			if src, err = connectPeer(ctx, "source", srcPeer); err != nil {
				src = nil
				continue // the CDC run notices a lost peer itself
			}
		}
		if dst == nil || dst.IsClosed() {
			if dst, err = connectPeer(ctx, "destination", dstPeer); err != nil {
				dst = nil
				continue
			}
		}
		s.sync(ctx, src, dst)
		// Not held between syncs: a running mirror keeps few
		// connections to its peers.
		closeConn(src)
		closeConn(dst)
		src, dst = nil, nil
	}
}
