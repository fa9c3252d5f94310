package transport

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// tcpStateOf asks the kernel about c's TCP socket (TCP_INFO, SIOCINQ,
// SIOCOUTQ and a poll for POLLOUT); false when c is no *net.TCPConn or
// the kernel does not say.
func tcpStateOf(c net.Conn) (tcpState, bool) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return tcpState{}, false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return tcpState{}, false
	}
	var st tcpState
	known := false
	_ = raw.Control(func(fd uintptr) {
		ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil {
			return
		}
		unread, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		if err != nil {
			return
		}
		queued, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
		if err != nil {
			return
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(pfd, 0)
		if err != nil {
			return
		}
		st = tcpState{
			unread:   unread,
			queued:   queued,
			inFlight: int(ti.Unacked),
			probes:   int(ti.Probes),
			sinceAck: time.Duration(ti.Last_ack_recv) * time.Millisecond,
			writable: n > 0 && pfd[0].Revents&unix.POLLOUT != 0,
		}
		known = true
	})
	return st, known
}
