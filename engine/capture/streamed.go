package capture

// This file handles streamed in-progress transactions (pgoutput protocol
// version 2, streaming 'on'). The source sends a large transaction in blocks
// while it is still running: Stream Start (xid), changes each tagged with the
// (sub)transaction id that made them, Stream Stop; blocks of several
// transactions interleave, and transactions that are not streamed are sent
// whole between blocks as usual. The transaction ends with Stream Commit
// (its commit LSN, end LSN and time) or Stream Abort (of the whole
// transaction, or of one subtransaction: the changes of that subtransaction
// only are void).
//
// The stream stages each streamed transaction's messages as they arrive, as
// the bytes pgoutput sent with the transaction id taken out: in memory up to
// StreamConfig.StageMemory for all of them together, past that in a temporary
// file per transaction (unlinked at once, so nothing is left behind by a
// crash), except the one handed over early, which is dropped instead of
// written to a file (early.go). At Stream Commit it replays the staged messages through the
// ordinary decoder as one transaction: Begin (its commit LSN), its changes
// (those of aborted subtransactions left out), Commit (its end LSN), exactly
// the events a transaction that was not streamed gives. The consumer thus
// sees whole transactions in commit order and never a change of a
// transaction that has not committed. Stream Abort drops what was staged.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pgmirror/pgmirror/engine/change"
)

// defaultStageMemory is StreamConfig.StageMemory's default.
const defaultStageMemory = 16 << 20

// stagedTx is the staged part of one streamed transaction. Records are a
// 4-byte subtransaction id, a 4-byte length and a pgoutput message without
// its transaction id; they are in mem until the transaction is spilled,
// then all in its file.
type stagedTx struct {
	xid uint32
	// mem holds the records in chunks of stageChunk bytes (a record larger
	// than that has a chunk of its own; none spans two), so that growing
	// it never copies what it holds; memBytes counts the bytes in use.
	mem       [][]byte
	memBytes  int64
	file      *os.File
	fileW     *bufio.Writer // writes to file: once a transaction has a file, its records go there
	fileBytes int64
	aborted   map[uint32]bool // subtransactions rolled back
	records   int64
	early     earlyState // its changes handed over while it streams (early.go)
	// unstaged: it was handed over early and outgrew StageMemory, so its
	// records were dropped and no more are staged (early.go).
	unstaged bool
}

// StreamStats counts what the stream did with streamed transactions.
type StreamStats struct {
	// Committed and Aborted count the streamed transactions that ended.
	Committed, Aborted int64
	// SubAborted counts subtransactions rolled back within streamed
	// transactions.
	SubAborted int64
	// StagedBytes counts the bytes staged, SpilledBytes those of them
	// written to temporary files.
	StagedBytes, SpilledBytes int64
	// PeakMemory is the most staged bytes held in memory at once.
	PeakMemory int64
	// Early counts the committed streamed transactions that the consumer
	// applied from their changes handed over while they streamed
	// (StreamConfig.EarlyChanges); the others were handed over whole.
	Early int64
	// Unstaged counts the transactions handed over early whose staged
	// records were dropped when they outgrew StageMemory.
	Unstaged int64
}

// StreamedStats returns the counts of streamed transactions so far.
func (s *Stream) StreamedStats() StreamStats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	return s.stats
}

func (s *Stream) countStats(f func(*StreamStats)) {
	s.statsMu.Lock()
	f(&s.stats)
	s.statsMu.Unlock()
}

// streamMessage handles data when it belongs to the streaming protocol: a
// Stream Start, Stop, Commit or Abort, or any message inside a stream block.
// It reports false for a message that the ordinary decoder handles.
func (s *Stream) streamMessage(ctx context.Context, ticker *time.Ticker, data []byte) (bool, error) {
	switch data[0] {
	case msgStreamStart:
		w := wire{b: data, off: 1}
		xid := w.u32("xid")
		first := w.u8("first segment")
		if err := w.done(); err != nil {
			return true, fmt.Errorf("decode stream start message: %w", err)
		}
		if s.inStream || s.inTx {
			return true, fmt.Errorf("stream start of transaction %d inside another transaction", xid)
		}
		tx := s.streamed[xid]
		switch {
		case first == 1:
			if tx != nil {
				// Begun again: what the consumer had of it early goes too.
				if err := s.earlyAbort(ctx, ticker, tx, xid); err != nil {
					return true, err
				}
				s.dropStaged(tx)
			}
			tx = &stagedTx{xid: xid}
			if s.streamed == nil {
				s.streamed = map[uint32]*stagedTx{}
			}
			s.streamed[xid] = tx
			s.startEarly(tx)
		case tx == nil:
			return true, fmt.Errorf("stream block of transaction %d whose first block was not received", xid)
		}
		s.inStream = true
		s.streamTx = tx
		return true, nil
	case msgStreamStop:
		if !s.inStream {
			return true, errors.New("stream stop outside a stream block")
		}
		s.inStream = false
		s.streamTx = nil
		return true, nil
	case msgStreamAbort:
		w := wire{b: data, off: 1}
		xid := w.u32("xid")
		sub := w.u32("subtransaction xid")
		// Protocol version 4 adds the abort LSN and time; version 2 has
		// neither, but accept them.
		if w.err == nil && len(data)-w.off == 16 {
			w.u64("abort LSN")
			w.u64("abort time")
		}
		if err := w.done(); err != nil {
			return true, fmt.Errorf("decode stream abort message: %w", err)
		}
		if s.inStream {
			return true, fmt.Errorf("stream abort of transaction %d inside a stream block", xid)
		}
		tx := s.streamed[xid]
		if tx == nil {
			return true, nil // nothing of it was staged
		}
		if err := s.earlyAbort(ctx, ticker, tx, sub); err != nil {
			return true, err
		}
		if sub == xid {
			s.dropStaged(tx)
			s.countStats(func(st *StreamStats) { st.Aborted++ })
			s.log.Debug("streamed transaction aborted on the source; its staged changes are dropped", "xid", xid)
			return true, nil
		}
		if tx.aborted == nil {
			tx.aborted = map[uint32]bool{}
		}
		tx.aborted[sub] = true
		s.countStats(func(st *StreamStats) { st.SubAborted++ })
		return true, nil
	case msgStreamCommit:
		w := wire{b: data, off: 1}
		xid := w.u32("xid")
		w.u8("flags")
		commitLSN := w.u64("commit LSN")
		end := w.u64("end LSN")
		at := w.u64("commit time")
		if err := w.done(); err != nil {
			return true, fmt.Errorf("decode stream commit message: %w", err)
		}
		if s.inStream || s.inTx {
			return true, fmt.Errorf("stream commit of transaction %d inside another transaction", xid)
		}
		tx := s.streamed[xid]
		if tx != nil {
			delete(s.streamed, xid)
		} else {
			tx = &stagedTx{xid: xid} // nothing staged: an empty transaction
		}
		defer s.dropStaged(tx)
		applied, err := s.earlyCommit(ctx, ticker, tx, commitLSN, end, at)
		if err != nil {
			return true, fmt.Errorf("streamed transaction %d: %w", xid, err)
		}
		if applied {
			s.countStats(func(st *StreamStats) { st.Committed++; st.Early++ })
			return true, nil
		}
		if err := s.replay(ctx, ticker, tx, commitLSN, end, at); err != nil {
			return true, fmt.Errorf("streamed transaction %d: %w", xid, err)
		}
		s.countStats(func(st *StreamStats) { st.Committed++ })
		return true, nil
	}
	if !s.inStream {
		return false, nil
	}
	tx := s.streamTx
	switch data[0] {
	case msgInsert, msgUpdate, msgDelete, msgTruncate, msgRelation, msgType, msgMessage:
		if len(data) < 5 {
			return true, fmt.Errorf("decode streamed message %q: %w", data[0], errTruncated)
		}
		sub := binary.BigEndian.Uint32(data[1:5])
		if err := s.stage(tx, sub, data[0], data[5:]); err != nil {
			return true, err
		}
		if !tx.early.on {
			return true, nil
		}
		// The message without its xid, for the decoder, in place: it was
		// staged (copied) already and data is not used after this.
		data[4] = data[0]
		return true, s.earlyMessage(ctx, ticker, tx, sub, data[4:])
	case msgOrigin:
		if err := s.stage(tx, tx.xid, data[0], data[1:]); err != nil {
			return true, err
		}
		return true, s.earlyMessage(ctx, ticker, tx, tx.xid, data)
	default:
		s.log.Debug("ignoring pgoutput message in a stream block", "type", string(rune(data[0])))
		return true, nil
	}
}

// stage appends one record to tx, spilling staged transactions to their
// files while the staged bytes in memory exceed StageMemory.
func (s *Stream) stage(tx *stagedTx, sub uint32, typ byte, body []byte) error {
	n := 9 + len(body)
	if tx.unstaged {
		return nil
	}
	if tx.fileW != nil {
		// Spilled before: the rest goes to its file too, through a small
		// buffer, instead of growing a slice in memory to spill again.
		return s.stageToFile(tx, sub, typ, body)
	}
	tx.appendRecord(sub, typ, body)
	tx.records++
	s.stagedMem += int64(n)
	s.countStats(func(st *StreamStats) {
		st.StagedBytes += int64(n)
		st.PeakMemory = max(st.PeakMemory, s.stagedMem)
	})
	for s.stagedMem > int64(s.cfg.StageMemory) {
		var big *stagedTx
		for _, t := range s.streamed {
			if big == nil || t.memBytes > big.memBytes {
				big = t
			}
		}
		if big == nil || big.memBytes == 0 {
			break
		}
		if big.early.on {
			// Handed over early: the consumer applies it from those
			// changes, so its records are dropped rather than written
			// to a file (see early.go).
			s.unstage(big)
			continue
		}
		if err := s.spill(big); err != nil {
			return err
		}
	}
	return nil
}

// stageChunk is the size of the chunks a staged transaction's records are
// kept in while in memory.
const stageChunk = 1 << 20

// appendRecord adds a record to tx's chunks in memory.
func (tx *stagedTx) appendRecord(sub uint32, typ byte, body []byte) {
	need := 9 + len(body)
	last := len(tx.mem) - 1
	if last < 0 || cap(tx.mem[last])-len(tx.mem[last]) < need {
		tx.mem = append(tx.mem, make([]byte, 0, max(stageChunk, need)))
		last++
	}
	head := recordHead(sub, typ, body)
	tx.mem[last] = append(append(tx.mem[last], head[:]...), body...)
	tx.memBytes += int64(need)
}

// recordHead is the head of a staged record: the subtransaction id, the
// length of the message (its type and body) and its type.
func recordHead(sub uint32, typ byte, body []byte) [9]byte {
	var head [9]byte
	binary.BigEndian.PutUint32(head[:4], sub)
	binary.BigEndian.PutUint32(head[4:8], uint32(1+len(body)))
	head[8] = typ
	return head
}

// stageFileBuffer is the write buffer of a spilled transaction's file.
const stageFileBuffer = 256 << 10

// stageToFile appends one record to the file of tx, which was spilled.
func (s *Stream) stageToFile(tx *stagedTx, sub uint32, typ byte, body []byte) error {
	head := recordHead(sub, typ, body)
	if _, err := tx.fileW.Write(head[:]); err != nil {
		return fmt.Errorf("stage streamed transaction %d: write temporary file: %w", tx.xid, err)
	}
	if _, err := tx.fileW.Write(body); err != nil {
		return fmt.Errorf("stage streamed transaction %d: write temporary file: %w", tx.xid, err)
	}
	n := int64(len(head) + len(body))
	tx.records++
	tx.fileBytes += n
	s.countStats(func(st *StreamStats) {
		st.StagedBytes += n
		st.SpilledBytes += n
	})
	return nil
}

// spill writes tx's records in memory to its file; its later records go
// to the file directly (stageToFile).
func (s *Stream) spill(tx *stagedTx) error {
	if tx.file == nil {
		f, err := os.CreateTemp(s.cfg.SpillDir, "pgmirror-streamed-*")
		if err != nil {
			return fmt.Errorf("stage streamed transaction %d: %w (set TMPDIR to a directory with room)", tx.xid, err)
		}
		// Unlinked at once: the space is freed when the file is closed,
		// also by a crash.
		_ = os.Remove(f.Name())
		tx.file = f
		tx.fileW = bufio.NewWriterSize(f, stageFileBuffer)
	}
	for _, chunk := range tx.mem {
		if _, err := tx.fileW.Write(chunk); err != nil {
			return fmt.Errorf("stage streamed transaction %d: write temporary file: %w", tx.xid, err)
		}
	}
	n := tx.memBytes
	tx.fileBytes += n
	s.stagedMem -= n
	tx.mem, tx.memBytes = nil, 0
	s.countStats(func(st *StreamStats) { st.SpilledBytes += n })
	return nil
}

// unstage drops the records of tx, a transaction handed over early, and
// stages none of its later ones.
func (s *Stream) unstage(tx *stagedTx) {
	s.log.Debug("streamed transaction applied while it streams outgrew the staging memory; it is no longer staged", "xid", tx.xid,
		"staged_bytes", tx.memBytes)
	s.stagedMem -= tx.memBytes
	tx.mem, tx.memBytes, tx.unstaged = nil, 0, true
	s.countStats(func(st *StreamStats) { st.Unstaged++ })
}

// dropStaged forgets tx and frees what it holds.
func (s *Stream) dropStaged(tx *stagedTx) {
	if s.streamed[tx.xid] == tx {
		delete(s.streamed, tx.xid)
	}
	if s.earlyTx == tx {
		s.earlyTx = nil
	}
	s.stagedMem -= tx.memBytes
	tx.mem, tx.memBytes = nil, 0
	if tx.file != nil {
		_ = tx.file.Close()
		tx.file = nil
		tx.fileW = nil
	}
}

// dropAllStaged frees every staged transaction (the stream ends).
func (s *Stream) dropAllStaged() {
	for _, tx := range s.streamed {
		s.dropStaged(tx)
	}
}

// replayStatusEvery is how many records the replay of a streamed
// transaction handles between two checks whether a standby status update
// is due (the replay does not read from the connection meanwhile).
const replayStatusEvery = 4096

// replay hands the staged transaction over as Begin, its changes and Commit.
func (s *Stream) replay(ctx context.Context, ticker *time.Ticker, tx *stagedTx, commitLSN, end, at uint64) error {
	s.log.Debug("streamed transaction committed on the source; handing it over", "xid", tx.xid,
		"commit_lsn", change.LSN(commitLSN).String(), "records", tx.records, "spilled_bytes", tx.fileBytes)
	begin := make([]byte, 0, 21)
	begin = append(begin, msgBegin)
	begin = binary.BigEndian.AppendUint64(begin, commitLSN)
	begin = binary.BigEndian.AppendUint64(begin, at)
	begin = binary.BigEndian.AppendUint32(begin, tx.xid)
	ev, _, err := s.decode(begin)
	if err != nil {
		return err
	}
	ev.Streamed = true
	if err := s.emit(ctx, ticker, ev); err != nil {
		return err
	}
	n := 0
	record := func(sub uint32, msg []byte) error {
		n++
		if n%replayStatusEvery == 0 {
			if err := s.maybeSendStatus(time.Now()); err != nil {
				return err
			}
		}
		if tx.aborted[sub] {
			switch msg[0] {
			case msgRelation, msgType, msgOrigin:
				// Descriptions stay: the source does not send a relation
				// again within the transaction once it sent it.
			default:
				return nil
			}
		}
		return s.replayOne(ctx, ticker, msg)
	}
	if tx.file != nil {
		if err := tx.fileW.Flush(); err != nil {
			return fmt.Errorf("stage streamed transaction %d: write temporary file: %w", tx.xid, err)
		}
		if _, err := tx.file.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("read staged changes: %w", err)
		}
		r := bufio.NewReaderSize(io.LimitReader(tx.file, tx.fileBytes), 256<<10)
		var head [8]byte
		var buf []byte
		for {
			if _, err := io.ReadFull(r, head[:]); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return fmt.Errorf("read staged changes: %w", err)
			}
			size := int(binary.BigEndian.Uint32(head[4:]))
			buf = slicesGrow(buf, size)
			if _, err := io.ReadFull(r, buf); err != nil {
				return fmt.Errorf("read staged changes: %w", err)
			}
			// The decoder copies what it keeps, so buf is reused.
			if err := record(binary.BigEndian.Uint32(head[:4]), buf); err != nil {
				return err
			}
		}
	}
	for _, chunk := range tx.mem {
		for off := 0; off < len(chunk); {
			sub := binary.BigEndian.Uint32(chunk[off:])
			size := int(binary.BigEndian.Uint32(chunk[off+4:]))
			msg := chunk[off+8 : off+8+size]
			off += 8 + size
			if err := record(sub, msg); err != nil {
				return err
			}
		}
	}
	commit := make([]byte, 0, 26)
	commit = append(commit, msgCommit, 0)
	commit = binary.BigEndian.AppendUint64(commit, commitLSN)
	commit = binary.BigEndian.AppendUint64(commit, end)
	commit = binary.BigEndian.AppendUint64(commit, at)
	return s.replayOne(ctx, ticker, commit)
}

// replayOne decodes one message of a replayed transaction and queues its
// event.
func (s *Stream) replayOne(ctx context.Context, ticker *time.Ticker, msg []byte) error {
	ev, ok, err := s.decode(msg)
	if err != nil {
		return err
	}
	if !ok {
		return nil
	}
	return s.emit(ctx, ticker, ev)
}

// slicesGrow returns b resized to n bytes (its content is not kept).
func slicesGrow(b []byte, n int) []byte {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]byte, n, max(n, 2*cap(b)))
}
