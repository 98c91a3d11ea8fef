package capture

import (
	"net"
	"syscall"
)

// lowWaterMark returns a function that sets the receive low-water mark
// (SO_RCVLOWAT) of conn's TCP socket, or nil when conn is no TCP socket (a
// Unix socket's readiness ignores the mark). A TLS connection's socket is
// the one under it. Linux wakes a socket's waiters only once the mark is
// reached (or the receive window nearly closed): see gatheringReader.
func lowWaterMark(conn any) func(bytes int) {
	if t, ok := conn.(interface{ NetConn() net.Conn }); ok {
		conn = t.NetConn()
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return nil
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return nil
	}
	return func(bytes int) {
		// A failure leaves the socket as it was: it only costs wake-ups.
		_ = raw.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVLOWAT, bytes)
		})
	}
}
