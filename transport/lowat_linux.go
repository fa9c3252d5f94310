package transport

import (
	"net"

	"golang.org/x/sys/unix"
)

// setNotSentLowat bounds the bytes a TCP socket keeps queued but not yet
// sent (TCP_NOTSENT_LOWAT): past it, writes wait. What waits in the
// kernel below the scheduler stays small, so a message of a quiet
// subscription is not queued behind megabytes of a busy one; the window
// still bounds what is in flight. Best effort: errors are ignored.
func setNotSentLowat(c net.Conn, n int) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}
