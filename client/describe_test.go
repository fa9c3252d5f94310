package client

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transportio"
)

// TestDescribeLost: a lost connection is worded once ("connection lost: "
// and the cause, without the transport-io layer's own prefix), a normal
// close by its reason alone (not "WT_NO_ERROR"), and each still unwraps to
// its cause.
func TestDescribeLost(t *testing.T) {
	eof := errors.New("the peer's TCP connection ended without a WebSocket close: EOF")
	for _, c := range []struct {
		err  error
		want string
	}{
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Lost: true, Reason: "no packet from the peer for 15s (QUIC idle timeout)"}},
			"connection lost: no packet from the peer for 15s (QUIC idle timeout)"},
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Lost: true}}, "connection lost: the transport ended"},
		// WT_IDLE_TIMEOUT on the WebSocket mapping, ours or the server's:
		// lost (resumable), not closed.
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseIdleTimeout, Lost: true, Reason: "no message from the peer for 45000 ms"}},
			"connection lost: no message from the peer for 45000 ms"},
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseIdleTimeout, Remote: true, Reason: "no message from the peer for 45000 ms"}},
			"connection lost: the server heard nothing from us: no message from the peer for 45000 ms"},
		{eof, "connection lost: the peer's TCP connection ended without a WebSocket close: EOF"},
		{io.ErrUnexpectedEOF, "connection lost: unexpected EOF"},
		// A normal close: its reason, without the transport's code.
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseNoError, Remote: true, Reason: "the peer closed its end"}},
			"the server closed the connection: the peer closed its end"},
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseNoError, Remote: true}}, "the server closed the connection"},
		{&transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseNoError, Remote: true, Reason: "server shutting down"}}, "the server is shutting down"},
	} {
		got := describeClose(c.err)
		if got.Error() != c.want {
			t.Errorf("describeClose(%v) = %q, want %q", c.err, got, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("describeClose(%v) does not unwrap to its cause", c.err)
		}
		// What readLoop reconnects after: a lost connection, and only that.
		if lost := transport.CloseStatus(c.err) == -1; lost != strings.HasPrefix(c.want, "connection lost: ") {
			t.Errorf("%v: CloseStatus %d", c.err, transport.CloseStatus(c.err))
		}
	}
}
