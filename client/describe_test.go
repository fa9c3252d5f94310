package client

import (
	"errors"
	"io"
	"testing"

	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transportio"
)

// TestDescribeLost: a lost connection is worded once ("connection lost: "
// and the cause, without the transport-io layer's own prefix) and still
// unwraps to its cause.
func TestDescribeLost(t *testing.T) {
	eof := errors.New("the peer's TCP connection ended without a WebSocket close: EOF")
	for _, c := range []struct {
		err  error
		want string
	}{
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Lost: true, Reason: "no packet from the peer for 15s (QUIC idle timeout)"}},
			"connection lost: no packet from the peer for 15s (QUIC idle timeout)"},
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Lost: true}}, "connection lost: the transport ended"},
		{eof, "connection lost: the peer's TCP connection ended without a WebSocket close: EOF"},
		{io.ErrUnexpectedEOF, "connection lost: unexpected EOF"},
	} {
		got := describeClose(c.err)
		if got.Error() != c.want {
			t.Errorf("describeClose(%v) = %q, want %q", c.err, got, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("describeClose(%v) does not unwrap to its cause", c.err)
		}
	}
}
