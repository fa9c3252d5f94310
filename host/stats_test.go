package host

import (
	"errors"
	"io"
	"testing"

	"github.com/sidecar-dev/sidecar/transport"
)

// TestEndReasonOf: how the end of a connection is classified for
// sidecar_disconnects_total: the code the host closed it with first,
// else how the client's side ended (as shouldRetain reads it).
func TestEndReasonOf(t *testing.T) {
	readErr := func(err error) *error { return &err }
	pipeClose := func(code transport.CloseCode) *error {
		return readErr(&transport.PipeCloseError{Code: code})
	}
	for _, tt := range []struct {
		name      string
		code      transport.CloseCode
		reason    string
		read      *error
		handover  bool
		writeLost bool
		want      string
	}{
		{"client closed 1000", transport.CloseNormal, "", pipeClose(transport.CloseNormal), false, false, "client_close"},
		{"client closed 1001", transport.CloseNormal, "", pipeClose(transport.CloseGoingAway), false, false, "client_close"},
		{"client closed 1011", transport.CloseNormal, "", pipeClose(transport.CloseInternalError), false, false, "lost"},
		{"read failed", transport.CloseNormal, "", readErr(io.ErrUnexpectedEOF), false, false, "lost"},
		{"write failed", transport.CloseInternalError, "write failed", nil, false, true, "lost"},
		{"message too big", transport.CloseNormal, "", pipeClose(transport.CloseMessageTooBig), false, false, "protocol_error"},
		{"violation", transport.CloseProtocolError, "flow control", nil, false, false, "protocol_error"},
		{"no initialize", transport.CloseProtocolError, initTimeoutReason, nil, false, false, "init_timeout"},
		{"answers not read", transport.ClosePeerTooSlow, "responses not read within 30s", nil, false, false, "write_timeout"},
		{"version", transport.CloseVersionMismatch, "no common protocol version", nil, false, false, "version_mismatch"},
		{"shutdown", transport.CloseGoingAway, "server shutting down", pipeClose(transport.CloseGoingAway), false, false, "server_shutdown"},
		{"handed over", transport.CloseGoingAway, "resumed on another connection", nil, true, false, "resumed_elsewhere"},
		{"internal", transport.CloseInternalError, "boom", nil, false, false, "internal_error"},
		{"nothing known", transport.CloseNormal, "", nil, false, false, "other"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &conn{closeCode: tt.code}
			if tt.reason != "" {
				c.closeErr = errors.New(tt.reason)
			}
			if tt.read != nil {
				c.readErr.Store(tt.read)
			}
			c.handover.Store(tt.handover)
			c.writeLost.Store(tt.writeLost)
			if got := disconnectNames[endReasonOf(c)]; got != tt.want {
				t.Errorf("reason %q, want %q", got, tt.want)
			}
		})
	}
}
