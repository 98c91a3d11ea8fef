package capture

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmirror/pgmirror/engine/change"
)

// streamingTestStream is a stream that takes protocol version 2 messages
// through handleXLog, with stageMemory bytes of staging in memory.
func streamingTestStream(t *testing.T, stageMemory int) *Stream {
	t.Helper()
	s := &Stream{
		log: slog.New(slog.DiscardHandler), relations: map[uint32]*change.Relation{},
		events: make(chan []Event, 1<<16), space: make(chan struct{}, 1),
		cfg: StreamConfig{Streaming: true, StageMemory: stageMemory, SpillDir: t.TempDir(), MaxBufferedBytes: 1 << 30, StatusInterval: time.Hour},
		// A status update is never due (lastStatus is now), so conn is
		// not used.
		lastStatus: time.Now(), statusInterval: time.Hour,
	}
	t.Cleanup(s.dropAllStaged)
	return s
}

// feed passes messages to the stream as the reader goroutine does and
// returns the events handed over.
func (s *Stream) feed(t *testing.T, msgs ...[]byte) []Event {
	t.Helper()
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	ctx := context.Background()
	for _, m := range msgs {
		handled, err := s.streamMessage(ctx, ticker, m)
		require.NoError(t, err)
		if handled {
			continue
		}
		ev, ok, err := s.decode(m)
		require.NoError(t, err)
		if ok {
			require.NoError(t, s.emit(ctx, ticker, ev))
		}
	}
	require.NoError(t, s.handOver(ctx, ticker))
	var out []Event
	for len(s.events) > 0 {
		out = append(out, <-s.events...)
	}
	return out
}

// inStream inserts m (a protocol version 1 message) with xid after its type
// byte, as pgoutput sends it inside a stream block.
func inStream(xid uint32, m []byte) []byte {
	return msg{m[0]}.u32(xid).raw(m[1:])
}

func streamStart(xid uint32, first bool) []byte {
	f := byte(0)
	if first {
		f = 1
	}
	return msg{'S'}.u32(xid).u8(f)
}

func streamStop() []byte { return []byte{'E'} }

func streamCommit(xid uint32, commit, end uint64) []byte {
	return msg{'c'}.u32(xid).u8(0).u64(commit).u64(end).u64(pgMicros(time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)))
}

func streamAbort(xid, sub uint32) []byte { return msg{'A'}.u32(xid).u32(sub) }

func insertID(id string) []byte {
	return msg{'I'}.u32(relOrders).u8('N').u16(5).text(id).null().null().null().null()
}

// ids lists the ids of the inserts among evs, with "B" and "C" for the
// transactions' bounds.
func ids(evs []Event) []string {
	var out []string
	for _, ev := range evs {
		switch ev.Kind {
		case EventBegin:
			out = append(out, "B")
		case EventCommit:
			out = append(out, "C")
		case EventChange:
			out = append(out, string(ev.Change.New[0].Text))
		}
	}
	return out
}

// TestStreamedInterleaved: blocks of two streamed transactions interleave
// with a transaction that is not streamed; each streamed one is handed over
// whole at its Stream Commit, in commit order, without the changes of its
// rolled back subtransaction, with its commit LSN on Begin and end LSN on
// Commit; an aborted one gives nothing.
func TestStreamedInterleaved(t *testing.T) {
	t.Parallel()
	s := streamingTestStream(t, 1<<20)
	msgs := validMessages()
	evs := s.feed(t,
		streamStart(100, true), inStream(100, relationOrders()), inStream(100, insertID("a1")), streamStop(),
		streamStart(200, true), inStream(200, relationOrders()), inStream(200, insertID("b1")), streamStop(),
		streamStart(300, true), inStream(300, relationOrders()), inStream(300, insertID("x1")), streamStop(),
		// A transaction sent whole between the blocks.
		msgs["begin"], relationOrders(), insertID("plain"), msgs["commit"],
		streamStart(100, false), inStream(101, insertID("a-sub")), inStream(102, insertID("a-sub2")), inStream(100, insertID("a2")), streamStop(),
		streamAbort(100, 101),
		streamStart(200, false), inStream(200, insertID("b2")), streamStop(),
		streamAbort(300, 300),
		streamCommit(200, 0x2_0000_0000, 0x2_0000_0010),
		streamCommit(100, 0x2_0000_0100, 0x2_0000_0110),
	)
	require.Equal(t, []string{"B", "plain", "C", "B", "b1", "b2", "C", "B", "a1", "a-sub2", "a2", "C"}, ids(evs))
	require.Equal(t, change.LSN(0x2_0000_0000), evs[3].LSN)
	require.Equal(t, uint32(200), evs[3].Xid)
	require.Equal(t, change.LSN(0x2_0000_0010), evs[6].LSN)
	require.Equal(t, change.LSN(0x2_0000_0100), evs[7].LSN)
	require.Equal(t, change.LSN(0x2_0000_0110), evs[11].LSN)
	require.True(t, time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC).Equal(evs[11].CommitTime))
	require.Equal(t, change.LSN(0x2_0000_0110), s.lastCommitEnd)
	require.False(t, s.inTx)
	require.Empty(t, s.streamed)
	require.Zero(t, s.stagedMem)
	st := s.StreamedStats()
	require.EqualValues(t, 2, st.Committed)
	require.EqualValues(t, 1, st.Aborted)
	require.EqualValues(t, 1, st.SubAborted)
	require.Zero(t, st.SpilledBytes)
}

// TestStreamedSpill: past StageMemory the staged changes go to a temporary
// file and come back in order; memory stays within the bound.
func TestStreamedSpill(t *testing.T) {
	t.Parallel()
	const limit = 4096
	s := streamingTestStream(t, limit)
	in := [][]byte{streamStart(7, true), inStream(7, relationOrders())}
	var want []string
	want = append(want, "B")
	for i := range 2000 {
		id := string(rune('a'+i%26)) + string(rune('0'+i%10))
		if i%100 == 50 {
			in = append(in, streamStop(), streamStart(7, false))
		}
		sub := uint32(7)
		if i >= 1000 && i < 1100 {
			sub = 8 // rolled back below
		} else {
			want = append(want, id)
		}
		in = append(in, inStream(sub, insertID(id)))
	}
	in = append(in, streamStop(), streamAbort(7, 8), streamCommit(7, 0x5_0000_0000, 0x5_0000_0100))
	evs := s.feed(t, in...)
	require.Equal(t, append(want, "C"), ids(evs))
	st := s.StreamedStats()
	require.Greater(t, st.SpilledBytes, int64(limit))
	require.LessOrEqual(t, st.PeakMemory, int64(limit+200), "one record past the bound at most")
	require.Zero(t, s.stagedMem)
	require.Empty(t, s.streamed)
}

// TestStreamedTypes: truncates, logical decoding messages, relations sent
// again with another shape and the origin inside a stream block are staged
// and replayed as the decoder reads them outside one.
func TestStreamedTypes(t *testing.T) {
	t.Parallel()
	s := streamingTestStream(t, 1<<20)
	s.cfg.SchemaMessages = true
	evs := s.feed(t,
		streamStart(9, true), msg{'O'}.u64(0).str("pg_16400"), inStream(9, relationOrders()), inStream(9, relationPair()),
		inStream(9, msg{'T'}.u32(1).u8(0).u32(relPair)),
		inStream(9, msg{'Y'}.u32(70000).str("public").str("mood")),
		inStream(9, msg{'M'}.u8(1).u64(0x1_0000_0000).str("other").u32(3).raw([]byte("abc"))),
		inStream(9, insertID("1")), streamStop(),
		streamCommit(9, 0x6_0000_0000, 0x6_0000_0100))
	require.Len(t, evs, 4)
	require.Equal(t, change.OpTruncate, evs[1].Change.Op)
	require.Equal(t, "T x", evs[1].Change.Truncated[0].Table.Name)
	require.Equal(t, "1", string(evs[2].Change.New[0].Text))
	require.Equal(t, "T x", s.relations[relPair].Table.Name, "relations staged in a committed transaction are known after it")
}

// TestStreamedPgmirrorOrigin: a streamed transaction whose origin closes a
// loop reaches the consumer as Begin and Commit only.
func TestStreamedPgmirrorOrigin(t *testing.T) {
	t.Parallel()
	s := streamingTestStream(t, 1<<20)
	evs := s.feed(t,
		streamStart(9, true), msg{'O'}.u64(0).str("pgmirror_abc"), inStream(9, relationOrders()), inStream(9, insertID("1")), streamStop(),
		streamCommit(9, 0x6_0000_0000, 0x6_0000_0100))
	require.Equal(t, []string{"B", "C"}, ids(evs))
	require.EqualValues(t, 1, s.SkippedTransactions())
}

// TestStreamedErrors: protocol violations end the stream with an error
// instead of applying a part of a transaction.
func TestStreamedErrors(t *testing.T) {
	t.Parallel()
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	for name, seq := range map[string][][]byte{
		"later block of an unknown transaction": {streamStart(5, false)},
		"nested block":                          {streamStart(5, true), streamStart(6, true)},
		"stop outside a block":                  {streamStop()},
		"commit inside a block":                 {streamStart(5, true), streamCommit(5, 1, 2)},
		"truncated start":                       {{'S', 0, 0}},
		"truncated change":                      {streamStart(5, true), {'I', 0, 0}},
		"truncated commit":                      {msg{'c'}.u32(5).u8(0)},
	} {
		s := streamingTestStream(t, 1<<20)
		var err error
		for _, m := range seq {
			if _, err = s.streamMessage(context.Background(), ticker, m); err != nil {
				break
			}
		}
		require.Error(t, err, name)
	}
	// An abort of a transaction nothing was staged of is fine.
	s := streamingTestStream(t, 1<<20)
	_, err := s.streamMessage(context.Background(), ticker, streamAbort(5, 5))
	require.NoError(t, err)
}

// TestEarlyChanges: with EarlyChanges, the changes of one streamed
// transaction at a time are handed over while it streams, a plain truncate
// too; a truncate with CASCADE makes it unfit; rollbacks are told; at its commit the consumer's answer decides
// whether it is handed over whole again (false) or not (true, and its
// relations are known after it all the same).
func TestEarlyChanges(t *testing.T) {
	t.Parallel()
	s := streamingTestStream(t, 1<<20)
	s.cfg.EarlyChanges = true
	answers := map[uint32]bool{100: false, 400: true}
	events := consume(s, func(xid uint32) bool { return answers[xid] }, func(ev Event) string {
		switch ev.Kind {
		case EventStreamChange:
			if ev.Change.Op == change.OpTruncate {
				return fmt.Sprintf("early %d/%d truncate", ev.Xid, ev.Sub)
			}
			return fmt.Sprintf("early %d/%d %s", ev.Xid, ev.Sub, ev.Change.New[0].Text)
		case EventStreamUnfit:
			return fmt.Sprintf("unfit %d: %s", ev.Xid, ev.Note.Reason)
		case EventStreamAbort:
			return fmt.Sprintf("abort %d/%d", ev.Xid, ev.Sub)
		case EventStreamCommit:
			return fmt.Sprintf("commit %d at %s end %s", ev.Xid, ev.LSN, ev.Note.End)
		case EventBegin:
			return fmt.Sprintf("begin %d", ev.Xid)
		case EventChange:
			if ev.Change.Op == change.OpTruncate {
				return "change truncate"
			}
			return "change " + string(ev.Change.New[0].Text)
		case EventCommit:
			return "commit"
		}
		return ""
	})
	ticker := time.NewTicker(time.Hour)
	defer ticker.Stop()
	for _, m := range [][]byte{
		streamStart(100, true), inStream(100, relationOrders()), inStream(100, insertID("a1")), inStream(101, insertID("a-sub")), streamStop(),
		// A second streamed transaction while the first one is early: staged only.
		streamStart(200, true), inStream(200, relationOrders()), inStream(200, insertID("b1")), streamStop(),
		streamStart(100, false), inStream(100, msg{'T'}.u32(1).u8(truncateCascade).u32(relOrders)), inStream(100, insertID("a2")), streamStop(),
		streamCommit(200, 0x2_0000_0000, 0x2_0000_0010),
		streamCommit(100, 0x2_0000_0100, 0x2_0000_0110),
		// Early again, a plain truncate too, and applied by the consumer:
		// not handed over again.
		streamStart(400, true), inStream(400, relationPair()), inStream(400, relationOrders()),
		inStream(400, msg{'T'}.u32(1).u8(0).u32(relOrders)), inStream(400, insertID("d1")), streamStop(),
		streamCommit(400, 0x3_0000_0000, 0x3_0000_0010),
		// A subtransaction rolled back, then a whole transaction.
		streamStart(500, true), inStream(500, relationOrders()), inStream(501, insertID("e1")), streamStop(),
		streamAbort(500, 501), streamAbort(500, 500),
		streamStart(600, true), inStream(600, relationOrders()), inStream(600, insertID("f1")), streamStop(),
		streamAbort(600, 600),
		// Begun again from its first block: what came early before goes.
		streamStart(700, true), inStream(700, relationOrders()), inStream(700, insertID("g1")), streamStop(),
		streamStart(700, true), inStream(700, relationOrders()), inStream(700, insertID("g2")), streamStop(),
		streamCommit(700, 0x4_0000_0000, 0x4_0000_0010),
	} {
		_, err := s.streamMessage(context.Background(), ticker, m)
		require.NoError(t, err)
	}
	require.NoError(t, s.handOver(context.Background(), ticker))
	require.Equal(t, []string{
		"early 100/100 a1", "early 100/101 a-sub",
		"unfit 100: a truncate with CASCADE or RESTART IDENTITY",
		"begin 200", "change b1", "commit",
		"commit 100 at 2/100 end 2/110",
		"begin 100", "change a1", "change a-sub", "change truncate", "change a2", "commit",
		"early 400/400 truncate", "early 400/400 d1",
		"commit 400 at 3/0 end 3/10",
		"early 500/501 e1", "abort 500/501", "abort 500/500",
		"early 600/600 f1", "abort 600/600",
		"early 700/700 g1", "abort 700/700", "early 700/700 g2",
		"commit 700 at 4/0 end 4/10", "begin 700", "change g2", "commit",
	}, events())
	require.Equal(t, "T x", s.relations[relPair].Table.Name, "relations of a transaction applied early are known after it")
	require.Equal(t, change.LSN(0x4_0000_0010), s.lastCommitEnd)
	st := s.StreamedStats()
	require.EqualValues(t, 4, st.Committed)
	require.EqualValues(t, 1, st.Early)
	require.Nil(t, s.earlyTx)
	require.Empty(t, s.streamed)
}

// TestEarlyUnstaged: a transaction handed over early that outgrows the
// staging memory is not spilled: its records are dropped. Applied early at
// its commit, it ends like any other, also after a rolled back
// subtransaction; given up after that (a truncate with RESTART IDENTITY, the consumer's answer
// at its commit), the stream ends with a RereadError naming it. A transaction in NotEarly is
// staged (and spilled) and handed over whole at its commit.
func TestEarlyUnstaged(t *testing.T) {
	t.Parallel()
	const limit = 2048
	// run feeds xid's first block of n inserts (sub for the last one),
	// then the messages in end, to a new stream, and returns the events
	// and the error of the last message.
	run := func(t *testing.T, xid uint32, n int, answer bool, notEarly map[uint32]bool, end ...[]byte) ([]string, *Stream, error) {
		t.Helper()
		s := streamingTestStream(t, limit)
		s.cfg.EarlyChanges, s.cfg.NotEarly = true, notEarly
		events := consume(s, func(uint32) bool { return answer }, func(ev Event) string {
			switch ev.Kind {
			case EventStreamChange:
				return "early"
			case EventStreamUnfit:
				return "unfit"
			case EventStreamAbort:
				return fmt.Sprintf("abort %d", ev.Sub)
			case EventStreamCommit:
				return "commit"
			case EventBegin:
				return "begin"
			case EventCommit:
				return "end"
			case EventChange:
				return "whole"
			}
			return ""
		})
		ticker := time.NewTicker(time.Hour)
		defer ticker.Stop()
		ctx := context.Background()
		msgs := [][]byte{streamStart(xid, true), inStream(xid, relationOrders())}
		for i := range n {
			msgs = append(msgs, inStream(xid, insertID(fmt.Sprintf("r%03d", i))))
		}
		msgs = append(msgs, streamStop())
		var err error
		for i, m := range append(msgs, end...) {
			_, err = s.streamMessage(ctx, ticker, m)
			if i < len(msgs)+len(end)-1 {
				require.NoError(t, err)
			}
		}
		require.NoError(t, s.handOver(ctx, ticker))
		return compact(events()), s, err
	}
	const rows = 200 // about 8 kB staged: past the limit
	commit := streamCommit(9, 0x6_0000_0000, 0x6_0000_0100)

	t.Run("applied early", func(t *testing.T) {
		got, s, err := run(t, 9, rows, true, nil, commit)
		require.NoError(t, err)
		require.Equal(t, []string{fmt.Sprintf("early x%d", rows), "commit"}, got)
		st := s.StreamedStats()
		require.EqualValues(t, 1, st.Unstaged)
		require.EqualValues(t, 1, st.Early)
		require.Zero(t, st.SpilledBytes, "nothing written to a file")
		require.Zero(t, s.stagedMem)
		require.LessOrEqual(t, st.PeakMemory, int64(limit+200))
		require.Equal(t, change.LSN(0x6_0000_0100), s.lastCommitEnd)
	})
	t.Run("small one given up is handed over whole", func(t *testing.T) {
		got, _, err := run(t, 9, 10, false, nil, commit)
		require.NoError(t, err)
		require.Equal(t, []string{"early x10", "commit", "begin", "whole x10", "end"}, got)
	})
	for _, c := range []struct {
		name   string
		end    [][]byte
		want   []string
		reason string
	}{
		{"truncate", [][]byte{streamStart(9, false), inStream(9, msg{'T'}.u32(1).u8(truncateRestartIdentity).u32(relOrders))},
			[]string{fmt.Sprintf("early x%d", rows), "unfit"}, "a truncate with CASCADE or RESTART IDENTITY"},
		{"declined at the commit", [][]byte{commit},
			[]string{fmt.Sprintf("early x%d", rows), "commit"}, "declined"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _, err := run(t, 9, rows, false, nil, c.end...)
			var reread *RereadError
			require.ErrorAs(t, err, &reread)
			require.EqualValues(t, 9, reread.Xid)
			require.Contains(t, reread.Reason, c.reason)
			require.Equal(t, c.want, got)
		})
	}
	t.Run("subtransaction rolled back", func(t *testing.T) {
		got, s, err := run(t, 9, rows, true, nil, streamStart(9, false), inStream(10, insertID("sub")), streamStop(), streamAbort(9, 10),
			streamStart(9, false), inStream(9, insertID("after")), streamStop(), commit)
		require.NoError(t, err, "the consumer undoes the subtransaction and goes on")
		require.Equal(t, []string{fmt.Sprintf("early x%d", rows+1), "abort 10", "early x1", "commit"}, got)
		require.EqualValues(t, 1, s.StreamedStats().Early)
	})
	t.Run("too many subtransactions", func(t *testing.T) {
		var subs [][]byte
		for i := range maxEarlySubtransactions + 1 {
			subs = append(subs, inStream(uint32(100+i), insertID(fmt.Sprintf("s%d", i))))
		}
		msgs := append([][]byte{streamStart(9, false)}, subs...) // the last one is one too many
		got, _, err := run(t, 9, 10, false, nil, msgs...)
		var reread *RereadError
		require.ErrorAs(t, err, &reread, "past the staging memory by then")
		require.Contains(t, reread.Reason, "more than 64 subtransactions")
		require.Equal(t, []string{fmt.Sprintf("early x%d", 10+maxEarlySubtransactions), "unfit"}, got)
	})
	t.Run("not early", func(t *testing.T) {
		got, s, err := run(t, 9, rows, false, map[uint32]bool{9: true}, commit)
		require.NoError(t, err)
		require.Equal(t, []string{"begin", fmt.Sprintf("whole x%d", rows), "end"}, got)
		st := s.StreamedStats()
		require.Zero(t, st.Unstaged)
		require.Positive(t, st.SpilledBytes, "staged past the limit in a file, as any other")
	})
}

// compact joins runs of one event name into "name xN".
func compact(names []string) []string {
	var out []string
	for i := 0; i < len(names); {
		j := i
		for j < len(names) && names[j] == names[i] {
			j++
		}
		if n := j - i; n > 1 || names[i] == "early" || names[i] == "whole" {
			out = append(out, fmt.Sprintf("%s x%d", names[i], n))
		} else {
			out = append(out, names[i])
		}
		i = j
	}
	return out
}

// consume reads s's events on a goroutine as a consumer does, answering
// each EventStreamCommit with answer(xid), and describes each event with
// describe ("" leaves it out). The returned function closes the events
// and returns the descriptions.
func consume(s *Stream, answer func(xid uint32) bool, describe func(Event) string) func() []string {
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for evs := range s.events {
			for _, ev := range evs {
				if ev.Kind == EventStreamCommit {
					ev.Note.Answer(answer(ev.Xid))
				}
				if d := describe(ev); d != "" {
					got = append(got, d)
				}
			}
		}
	}()
	return func() []string {
		close(s.events)
		<-done
		return got
	}
}
