package transportio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestLostReason: a WebSocket that ended without a close is worded plainly,
// whatever the library wrapped around the cause (a pong write that found
// the connection closed read "failed to get reader: failed to handle
// control frame opPing: ... write: broken pipe").
func TestLostReason(t *testing.T) {
	sys := func(e syscall.Errno) error {
		return fmt.Errorf("failed to get reader: failed to handle control frame opPing: failed to write frame: %w",
			&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", e)})
	}
	for _, tc := range []struct {
		err  error
		want string
		ok   bool
	}{
		{fmt.Errorf("failed to read frame header: %w", io.EOF), "the peer's TCP connection ended without a WebSocket close", true},
		{sys(syscall.ECONNRESET), "the peer's TCP connection was reset", true},
		{sys(syscall.EPIPE), "the peer had closed the TCP connection", true},
		{errors.New("something else"), "", false},
	} {
		if got, ok := LostReason(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("LostReason(%v) = %q, %v; want %q, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}
