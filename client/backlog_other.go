//go:build !linux

package client

import "net"

// TCPBacklog returns -1: the socket's queue is not known here.
func TCPBacklog(*net.TCPConn) int { return -1 }
