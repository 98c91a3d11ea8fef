package capture

import (
	"bufio"
	"io"
	"time"
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
)

// gatheringReader reads a replication connection's socket (through
// pgconn's reader), gathering a busy stream's messages as described above.
// It is used by one goroutine at a time, as pgconn reads.
type gatheringReader struct {
	r     io.Reader
	sleep func(time.Duration) // time.Sleep; tests count the waits

	drained     bool      // the last read returned less than it could take
	busy        bool      // the last rate window ran above busyBytesPerSecond
	windowStart time.Time // start of the current rate window
	windowBytes int       // bytes read in it
}

// newStreamReader returns the reader a replication connection's frontend
// reads from: buffered, so that one read of the socket takes up to
// streamReadBuffer, and gathering.
func newStreamReader(r io.Reader) io.Reader {
	return bufio.NewReaderSize(&gatheringReader{r: r, sleep: time.Sleep}, streamReadBuffer)
}

// Read reads from the socket, first waiting gatherWait when the stream is
// busy and the previous read drained it.
func (g *gatheringReader) Read(p []byte) (int, error) {
	if g.busy && g.drained {
		g.sleep(gatherWait)
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
	return n, err
}
