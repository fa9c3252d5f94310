package host

import (
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
)

// TestKeepable: a channel may keep a data message's read buffer only when
// the message came in binary form and the buffer is at most twice the
// message (what a channel holds in buffers stays within twice its
// window); a short message in a buffer sized for bulk ones is copied.
func TestKeepable(t *testing.T) {
	bin := &rpc.Header{Method: rpc.BinaryDataMethod, Binary: &rpc.BinaryData{Data: []byte("x")}}
	text := &rpc.Header{Method: rpc.MethodTCPData}
	for _, c := range []struct {
		name   string
		h      *rpc.Header
		len    int
		cap    int
		expect bool
	}{
		{"binary, exact buffer", bin, 64 << 10, 64 << 10, true},
		{"binary, buffer twice the message", bin, 32 << 10, 64 << 10, true},
		{"binary, buffer over twice the message", bin, 32<<10 - 1, 64 << 10, false},
		{"binary, 1 byte in a 1 MiB buffer", bin, 1, 1 << 20, false},
		{"text form", text, 64 << 10, 64 << 10, false},
	} {
		if got := keepable(c.h, make([]byte, c.len, c.cap)); got != c.expect {
			t.Errorf("%s: keepable %v, want %v", c.name, got, c.expect)
		}
	}
}
