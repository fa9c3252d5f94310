//go:build !linux

package transport

import "net"

// tcpStateOf knows nothing where TCP_INFO is not read: the keepalive
// then takes a ping left unanswered for the peer's end.
func tcpStateOf(net.Conn) (tcpState, bool) { return tcpState{}, false }
