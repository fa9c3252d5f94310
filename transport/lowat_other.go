//go:build !linux

package transport

import "net"

// setNotSentLowat is a no-op where TCP_NOTSENT_LOWAT is not used.
func setNotSentLowat(net.Conn, int) {}
