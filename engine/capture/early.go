package capture

// This file hands the row changes of one streamed transaction at a time to
// the consumer while the transaction still streams (StreamConfig.
// EarlyChanges), so that the consumer can apply them in a destination
// transaction of their own and only commit it at the source's commit.
//
// A subtransaction rolled back within the transaction is told to the
// consumer (EventStreamAbort with its Sub), which undoes that
// subtransaction's changes, and the transaction goes on early.
//
// The fallback. Whenever the consumer cannot use the early changes (it
// declined, or met something it does not apply early), it answers false at
// the commit and must receive the whole transaction as without
// EarlyChanges. While the transaction's staged
// records fit in memory (streamed.go) they are kept for that, and the
// transaction is handed over from them. A transaction that outgrows
// StageMemory is not spilled to a file like the others: its records are
// dropped (a bulk statement applied early would otherwise write all its
// changes to a temporary file only to delete it at the commit, 290 MB per
// million rows of the bench's table). If such a transaction is then given
// up, the stream ends with a *RereadError, and the consumer reads the
// stream again from its confirmed position with the transaction in
// StreamConfig.NotEarly: the source sends a transaction that is still in
// progress, or committed after that position, again from its first change,
// and the stream stages it like any other.
//
// The changes are decoded with the relations described within the
// transaction: pgoutput describes every table of a streamed transaction in
// the transaction itself, before its first change of it. Those
// descriptions also hold once the transaction committed (pgoutput then
// counts them as sent), so a transaction applied early still has them
// applied to the stream's relations at its commit, in order.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pgmirror/pgmirror/engine/change"
)

// earlyState is what a staged transaction keeps for its early hand-over.
type earlyState struct {
	// on: its changes are being handed over; ever: they were, from its
	// first block (the consumer is asked at its commit).
	on, ever bool
	rels     map[uint32]*change.Relation // relations described in it
	descs    [][]byte                    // its Relation and Type messages, in order
	subs     map[uint32]bool             // its subtransactions with changes handed over
}

// maxEarlySubtransactions bounds the subtransactions of a transaction
// handed over early: the consumer sets a savepoint (a subtransaction of its
// destination transaction) for each, and past 64 a PostgreSQL backend's
// cache of its subtransaction ids overflows, which makes every snapshot
// taken on the destination meanwhile look transactions up in pg_subtrans.
// A transaction with more (a PL/pgSQL exception block per row) is handed
// over whole at its commit instead, its rolled back subtransactions left
// out there.
const maxEarlySubtransactions = 64

// startEarly decides, at the first block of tx, whether its changes are
// handed over while it streams: with EarlyChanges, when no other
// transaction's are and the consumer does not decline them.
func (s *Stream) startEarly(tx *stagedTx) {
	if !s.cfg.EarlyChanges || s.earlyTx != nil || s.cfg.NotEarly[tx.xid] || s.cfg.EarlyDeclined != nil && s.cfg.EarlyDeclined() {
		return
	}
	s.earlyTx = tx
	tx.early = earlyState{on: true, ever: true, rels: map[uint32]*change.Relation{}}
}

// earlyMessage hands over msg (a pgoutput message without its xid, already
// staged; it may point into the receive buffer) of subtransaction sub of tx
// when tx's changes are handed over early.
func (s *Stream) earlyMessage(ctx context.Context, ticker *time.Ticker, tx *stagedTx, sub uint32, msg []byte) error {
	if !tx.early.on {
		return nil
	}
	switch msg[0] {
	case msgRelation:
		rel, err := decodeRelation(msg)
		if err != nil {
			return fmt.Errorf("decode relation message: %w", err)
		}
		prev := tx.early.rels[rel.ID]
		if prev == nil {
			prev = s.relations[rel.ID]
		}
		tx.early.rels[rel.ID] = rel
		tx.early.descs = append(tx.early.descs, slices.Clone(msg))
		if prev != nil && !sameDescription(prev, rel) {
			// A schema change (in this transaction, or committed before it
			// and not described since): the consumer applies it at the
			// commit, so it is told now, while the source may still be
			// writing the transaction, not at its next change.
			return s.earlyUnfit(ctx, ticker, tx, fmt.Sprintf("table %s described with other columns", rel.Table))
		}
		return nil
	case msgType:
		tx.early.descs = append(tx.early.descs, slices.Clone(msg))
		return nil
	case msgInsert, msgUpdate, msgDelete, msgTruncate:
		if msg[0] == msgTruncate && len(msg) > 5 && msg[5] != 0 {
			// A truncate's options (byte 5, after the type and the
			// relation count): CASCADE would lock and empty destination
			// tables beyond the transaction's, RESTART IDENTITY their
			// sequences, which the run's sequence sync writes: applied at
			// the commit.
			return s.earlyUnfit(ctx, ticker, tx, "a truncate with CASCADE or RESTART IDENTITY")
		}
		if s.cfg.EarlyGivenUp != nil {
			if reason := s.cfg.EarlyGivenUp(tx.xid); reason != "" {
				return s.earlyUnfit(ctx, ticker, tx, reason)
			}
		}
		if sub != tx.xid && !tx.early.subs[sub] {
			if len(tx.early.subs) == maxEarlySubtransactions {
				return s.earlyUnfit(ctx, ticker, tx, fmt.Sprintf("more than %d subtransactions", maxEarlySubtransactions))
			}
			if tx.early.subs == nil {
				tx.early.subs = map[uint32]bool{}
			}
			tx.early.subs[sub] = true
		}
		saved := s.relations
		s.relations = tx.early.rels
		ev, _, err := s.decode(msg)
		s.relations = saved
		if err != nil {
			return s.earlyUnfit(ctx, ticker, tx, err.Error())
		}
		ev.Kind, ev.Xid, ev.Sub = EventStreamChange, tx.xid, sub
		return s.emit(ctx, ticker, ev)
	case msgOrigin:
		// A transaction another mirror applied on the source (a chain) goes
		// on early; one of a mirror in the opposite direction is left out,
		// at its commit.
		w := wire{b: msg, off: 1}
		w.u64("origin commit LSN")
		name := w.cstring("origin name")
		if err := w.done(); err != nil {
			return s.earlyUnfit(ctx, ticker, tx, fmt.Sprintf("decode origin message: %v", err))
		}
		if s.dropsOrigin(name) {
			return s.earlyUnfit(ctx, ticker, tx, "a transaction of a mirror in the opposite direction")
		}
		return nil
	case msgMessage:
		if s.cfg.SchemaMessages {
			return s.earlyUnfit(ctx, ticker, tx, "a logical decoding message")
		}
		return nil
	}
	return nil
}

// sameDescription reports whether two descriptions of a relation name the
// same table, replica identity and columns (names, types, key flags).
func sameDescription(a, b *change.Relation) bool {
	return a.Table == b.Table && a.ReplicaIdentity == b.ReplicaIdentity && slices.Equal(a.Columns, b.Columns)
}

// earlyUnfit stops handing over tx's changes early and tells the consumer.
func (s *Stream) earlyUnfit(ctx context.Context, ticker *time.Ticker, tx *stagedTx, reason string) error {
	tx.early.on = false
	s.log.Debug("streamed transaction cannot be applied while it streams; it is handed over whole at its commit", "xid", tx.xid, "reason", reason)
	if err := s.emit(ctx, ticker, Event{Kind: EventStreamUnfit, Xid: tx.xid, Note: &StreamNote{Reason: reason}}); err != nil {
		return err
	}
	return tx.rereadIfUnstaged(reason)
}

// RereadError ends a stream when a streamed transaction whose staged
// records were dropped (it was handed over early and outgrew
// StageMemory) cannot be finished early after all. Start the stream again
// from the confirmed position with Xid in StreamConfig.NotEarly: the
// source sends the transaction again from its first change.
type RereadError struct {
	Xid    uint32
	Reason string // why the consumer could not finish it early
}

func (e *RereadError) Error() string {
	return fmt.Sprintf("streamed transaction %d cannot be applied while it streams (%s) and was not staged: it must be read again from the source", e.Xid, e.Reason)
}

// rereadIfUnstaged returns a *RereadError when tx's staged records were
// dropped, nil when it can still be handed over whole from them.
func (tx *stagedTx) rereadIfUnstaged(reason string) error {
	if !tx.unstaged {
		return nil
	}
	return &RereadError{Xid: tx.xid, Reason: reason}
}

// earlyAbort tells the consumer that tx (sub == tx.xid) or its
// subtransaction sub rolled back, when tx was handed over early. After a
// subtransaction's rollback tx's changes go on being handed over.
func (s *Stream) earlyAbort(ctx context.Context, ticker *time.Ticker, tx *stagedTx, sub uint32) error {
	if !tx.early.ever {
		return nil
	}
	if sub != tx.xid && !tx.early.on {
		return nil // the consumer gave it up already
	}
	if sub == tx.xid {
		tx.early.on = false
	}
	// A subtransaction's rollback: the consumer undoes its changes (a
	// savepoint at its first one) and the transaction goes on early.
	return s.emit(ctx, ticker, Event{Kind: EventStreamAbort, Xid: tx.xid, Sub: sub})
}

// earlyCommit asks the consumer, for a transaction handed over early,
// whether it applied it, and waits for the answer (sending status updates
// meanwhile). When it did, the transaction's descriptions are applied to
// the stream's relations and its end counts as handed over.
func (s *Stream) earlyCommit(ctx context.Context, ticker *time.Ticker, tx *stagedTx, commitLSN, end, at uint64) (bool, error) {
	if !tx.early.ever {
		return false, nil
	}
	note := &StreamNote{End: change.LSN(end), answer: make(chan bool, 1)}
	ev := Event{Kind: EventStreamCommit, LSN: change.LSN(commitLSN), Xid: tx.xid, CommitTime: pgTime(at), Note: note}
	if err := s.emit(ctx, ticker, ev); err != nil {
		return false, err
	}
	if err := s.handOver(ctx, ticker); err != nil {
		return false, err
	}
	var applied bool
	for waiting := true; waiting; {
		select {
		case applied = <-note.answer:
			waiting = false
		case <-ticker.C:
			if err := s.maybeSendStatus(time.Now()); err != nil {
				return false, err
			}
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	if !applied {
		return false, tx.rereadIfUnstaged("the consumer declined it at its commit")
	}
	for _, desc := range tx.early.descs {
		if _, _, err := s.decode(desc); err != nil {
			return false, err
		}
	}
	s.lastCommitEnd = change.LSN(end)
	s.received = max(s.received, change.LSN(end))
	s.log.Debug("streamed transaction committed on the source; it was applied while it streamed", "xid", tx.xid,
		"commit_lsn", change.LSN(commitLSN).String())
	return true, nil
}
