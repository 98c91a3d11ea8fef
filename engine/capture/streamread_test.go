package capture

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
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
	r, _ := newStreamReader(bytes.NewReader(want.Bytes()), nil)
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("read %d bytes (err %v), want the %d written", len(got), err, want.Len())
	}
}

// lowWaterMarkOf reads the socket's SO_RCVLOWAT.
func lowWaterMarkOf(t *testing.T, c *net.TCPConn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mark int
	var gerr error
	if err := raw.Control(func(fd uintptr) {
		mark, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	return mark
}

// Over a real loopback socket: between the reads of a busy stream the
// socket's low-water mark is raised (no wake-up for each message that
// arrives meanwhile), and a read still returns a lone small message at
// once: the mark is lowered before it waits.
func TestStreamReaderHushesABusySocketBetweenReads(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the low-water mark is set on Linux only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sender, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	sock := accepted.(*net.TCPConn)
	g := &gatheringReader{r: sock, sleep: time.Sleep, hush: lowWaterMark(sock)}
	if g.hush == nil {
		t.Fatal("no low-water mark setter for a TCP connection")
	}

	// Quiet: a message now and then leaves the mark alone.
	msg := bytes.Repeat([]byte{'q'}, 240)
	buf := make([]byte, streamReadBuffer)
	for range 3 {
		if _, err := sender.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Read(buf); err != nil {
			t.Fatal(err)
		}
		if got := lowWaterMarkOf(t, sock); got > 1 {
			t.Fatalf("quiet stream: low-water mark %d between reads, want 1 (or the default 0)", got)
		}
		time.Sleep(5 * time.Millisecond)
	}

	// Busy: far more than 8 MiB/s for more than a rate window.
	chunk := bytes.Repeat([]byte{'b'}, 64<<10)
	done := make(chan error, 1)
	go func() {
		for end := time.Now().Add(3 * rateWindow); time.Now().Before(end); {
			if _, err := sender.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Read until the sender is done; the sender stops after its last
	// write, so a read that waits past it ends at the deadline.
	hushedSeen, sent := 0, false
	for !sent {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			sent = true
		default:
		}
		_ = sock.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := g.Read(buf); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		if g.busy {
			hushedSeen = max(hushedSeen, lowWaterMarkOf(t, sock))
		}
	}
	if hushedSeen < hushBytes {
		t.Fatalf("busy stream: low-water mark at most %d between reads, want %d or more", hushedSeen, hushBytes)
	}
	// Drain what is left.
	for {
		_ = sock.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := g.Read(buf); err != nil {
			break
		}
	}
	_ = sock.SetReadDeadline(time.Time{})

	// A lone message after the busy spell, sent while the read waits: read
	// at once, not at the deadline that a raised mark would wait for.
	g.hushed, g.busy = true, true // as after the busy spell's last read
	g.hush(hushBytes)
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, err := sender.Write(msg)
		done <- err
	}()
	_ = sock.SetReadDeadline(time.Now().Add(2 * time.Second))
	start := time.Now()
	n, err := g.Read(buf)
	if err != nil || n != len(msg) {
		t.Fatalf("lone message after a busy spell: read %d bytes, err %v, after %s", n, err, time.Since(start))
	}
	if waited := time.Since(start); waited > 500*time.Millisecond {
		t.Fatalf("lone message after a busy spell read after %s", waited)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
