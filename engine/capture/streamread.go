package capture

import (
	"bufio"
	"io"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A walsender flushes every message of a busy stream to its socket on its
// own (a streamed transaction's changes: one CopyData of a couple of hundred
// bytes each), so a reader that keeps up reads one message per system call,
// finds the socket empty and parks until the next one arrives: two reads, an
// epoll wait and a goroutine wake-up per change, about half of the pgmirror
// process's CPU through a streamed million-row transaction. gatheringReader
// lets a busy stream gather instead: when the last read drained the socket
// while the stream runs faster than busyBytesPerSecond, it waits gatherWait
// before reading again, so that one read takes what arrived meanwhile. A
// quiet stream (a lag load of a few thousand single-row transactions a
// second is a few hundred KB/s) is read as soon as data arrives. The
// walsender does not wait meanwhile: the socket's buffer holds far more than
// arrives in gatherWait. (A consumer far behind the source gathers too, by
// its own rule: see readGulp.)
//
// Waiting is not enough to spare the wake-ups, though: the socket is in the
// Go runtime's epoll set, and while the stream's goroutine waits or handles
// what it read, a thread of the process idle in epoll_wait is woken by
// every message the walsender sends, finds nobody reading, and sleeps
// again; each such wake-up preempts the walsender on its core. Measured
// through a durable catch-up of single-row transactions on two cores: the
// walsender was preempted 13,000 times in its first 1.3 s (native's: 235)
// and used 40 % more CPU than native's; with the mark raised, 1,300 times,
// and the pgmirror process used a third less CPU. So between the reads of
// a busy stream the socket's receive low-water mark is raised to hushBytes
// (on Linux, a socket below its mark wakes nobody), and lowered to one byte
// before the next read, which thus waits for data as usual.
const (
	// streamReadBuffer is the most one read takes from the socket.
	streamReadBuffer = 256 << 10
	// busyBytesPerSecond is the rate above which a stream gathers: 8 MiB/s
	// is about 30,000 row changes a second.
	busyBytesPerSecond = 8 << 20
	// gatherWait is the wait before reading a drained busy stream again:
	// at busyBytesPerSecond about 8 KiB arrives meanwhile, and a change
	// waits at most this long more.
	gatherWait = time.Millisecond
	// rateWindow is how long the stream's rate is measured over.
	rateWindow = 50 * time.Millisecond
	// hushBytes is the socket's low-water mark between the reads of a busy
	// stream: as much as one read takes.
	hushBytes = streamReadBuffer
)

// gatheringReader reads a replication connection's socket (through
// pgconn's reader), gathering a busy stream's messages as described above.
// It is used by one goroutine at a time, as pgconn reads.
type gatheringReader struct {
	r     io.Reader
	sleep func(time.Duration) // time.Sleep; tests count the waits
	hush  func(bytes int)     // sets the socket's low-water mark (lowWaterMark); nil: none

	catchingUp  *atomic.Bool // the stream's SetCatchingUp flag (StartStream); nil before a stream starts
	hushed      bool         // the mark is raised
	drained     bool         // the last read returned less than it could take
	busy        bool         // the last rate window ran above busyBytesPerSecond
	windowStart time.Time    // start of the current rate window
	windowBytes int          // bytes read in it
}

// newStreamReader returns the reader a replication connection's frontend
// reads from: buffered, so that one read of the socket takes up to
// streamReadBuffer, and gathering. r reads conn, the connection (whose
// socket's low-water mark it raises between the reads of a busy stream).
func newStreamReader(r io.Reader, conn any) (io.Reader, *gatheringReader) {
	g := &gatheringReader{r: r, sleep: time.Sleep, hush: lowWaterMark(conn)}
	return bufio.NewReaderSize(g, streamReadBuffer), g
}

// streamReaderKey is the key of a replication connection's gatheringReader
// in its pgconn CustomData (ConnectReplication), so that the stream started
// on it can hand the reader its catching-up flag.
const streamReaderKey = "pgmirror.capture.streamReader"

// streamReaderOf returns conn's gatheringReader, or nil when conn was not
// made by ConnectReplication.
func streamReaderOf(conn *pgconn.PgConn) *gatheringReader {
	g, _ := conn.CustomData()[streamReaderKey].(*gatheringReader)
	return g
}

// Read reads from the socket, first waiting gatherWait when the stream is
// busy and the previous read drained it. After a read of a busy stream the
// socket's low-water mark stays raised until the next read, and so it does
// while the stream's consumer catches up, whatever the rate: it is behind by
// far more than a wait for the mark could add.
func (g *gatheringReader) Read(p []byte) (int, error) {
	if g.busy && g.drained {
		g.sleep(gatherWait)
	}
	if g.hushed {
		g.hush(1)
		g.hushed = false
	}
	n, err := g.r.Read(p)
	g.drained = n < len(p)
	now := time.Now()
	if g.windowStart.IsZero() {
		g.windowStart = now
	}
	g.windowBytes += n
	if elapsed := now.Sub(g.windowStart); elapsed >= rateWindow {
		g.busy = float64(g.windowBytes) >= busyBytesPerSecond*elapsed.Seconds()
		g.windowStart, g.windowBytes = now, 0
	}
	if (g.busy || g.catchingUp != nil && g.catchingUp.Load()) && err == nil && g.hush != nil {
		g.hush(hushBytes)
		g.hushed = true
	}
	return n, err
}
