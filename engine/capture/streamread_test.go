package capture

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// pieces is a socket that returns one small message per read, after wait.
type pieces struct {
	wait time.Duration
	msg  []byte
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.wait > 0 {
		time.Sleep(p.wait)
	}
	return copy(b, p.msg), nil
}

// readFor reads through g for d and returns the reads and waits.
func readFor(g *gatheringReader, d time.Duration, size int) (reads, waits int) {
	g.sleep = func(time.Duration) { waits++ }
	buf := make([]byte, size)
	for end := time.Now().Add(d); time.Now().Before(end); reads++ {
		if _, err := g.Read(buf); err != nil {
			panic(err)
		}
	}
	return reads, waits
}

func TestGatheringReaderWaitsOnlyOnABusyDrainedStream(t *testing.T) {
	msg := bytes.Repeat([]byte{'d'}, 240)

	// Messages arrive as fast as they are read (far above 8 MiB/s), one
	// per read: once the first window showed the rate, every read that
	// drained the socket is followed by a wait.
	busy := &gatheringReader{r: &pieces{msg: msg}}
	readFor(busy, rateWindow+5*time.Millisecond, 8192) // the window that shows the rate
	reads, waits := readFor(busy, 2*rateWindow, 8192)
	if waits == 0 || waits < reads*9/10 {
		t.Errorf("busy stream: %d waits in %d reads, want a wait before (almost) every read", waits, reads)
	}

	// The same stream read with a buffer no larger than a message never
	// drains the socket: no wait.
	full := &gatheringReader{r: &pieces{msg: msg}}
	if reads, waits := readFor(full, 2*rateWindow, len(msg)); waits != 0 {
		t.Errorf("full reads: %d waits in %d reads, want none", waits, reads)
	}

	// A quiet stream (a message every 2 ms, about 120 KB/s) is read as soon
	// as data arrives.
	quiet := &gatheringReader{r: &pieces{msg: msg, wait: 2 * time.Millisecond}}
	if reads, waits := readFor(quiet, 3*rateWindow, 8192); waits != 0 {
		t.Errorf("quiet stream: %d waits in %d reads, want none", waits, reads)
	}

	// A busy stream that goes quiet stops waiting after one window.
	busy.r = &pieces{msg: msg, wait: 2 * time.Millisecond}
	readFor(busy, rateWindow+10*time.Millisecond, 8192) // the window that ends the busy rate
	if reads, waits := readFor(busy, 2*rateWindow, 8192); waits != 0 {
		t.Errorf("busy stream gone quiet: %d waits in %d reads, want none", waits, reads)
	}
}

func TestStreamReaderPassesTheStreamThrough(t *testing.T) {
	var want bytes.Buffer
	for i := range 10000 {
		want.WriteString("message ")
		want.WriteByte(byte('a' + i%26))
	}
	got, err := io.ReadAll(newStreamReader(bytes.NewReader(want.Bytes())))
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (err %v), want the %d written", len(got), err, want.Len())
	}
}
