package client

import (
	"net"

	"golang.org/x/sys/unix"
)

// TCPBacklog returns the bytes queued in c's socket that its peer has not
// acknowledged yet (Linux SIOCOUTQ), for TCPConn.SetBacklog; -1 when it
// cannot tell.
func TCPBacklog(c *net.TCPConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = raw.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			n = v
		}
	})
	return n
}
