package host

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
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

// writeRec is a MessageConn that records how a binary form was written.
type writeRec struct {
	transport.BinaryConn // nil: only the writes below are called
	how                  string
	got                  []byte
}

func (w *writeRec) WriteBinary(_ context.Context, p []byte) error {
	w.how, w.got = "binary", p
	return nil
}

// framedRec is a writeRec that is also a delivery.FramedWriter.
type framedRec struct{ writeRec }

func (w *framedRec) WriteFramed(_ context.Context, framed []byte) error {
	w.how, w.got = "framed", framed
	return nil
}

// TestCountingWriteFramed: countingConn hands a framed binary form to a
// conn that writes from the frame room (transport-io) as it is, and to
// one that does not (/ahp) as the form alone; either way it counts the
// form's bytes and one message, as WriteBinary does.
func TestCountingWriteFramed(t *testing.T) {
	framed := []byte("ROOM-0123456binary-form")
	form := framed[delivery.FrameRoom:]
	for _, tc := range []struct {
		inner interface {
			transport.MessageConn
			rec() *writeRec
		}
		how  string
		want []byte
	}{
		{&framedRec{}, "framed", framed},
		{&plainRec{}, "binary", form},
	} {
		c := &countingConn{MessageConn: tc.inner}
		if err := c.WriteFramed(context.Background(), framed); err != nil {
			t.Fatal(err)
		}
		r := tc.inner.rec()
		if r.how != tc.how || string(r.got) != string(tc.want) {
			t.Fatalf("written as %s %q, want %s %q", r.how, r.got, tc.how, tc.want)
		}
		if c.sentBytes.Load() != uint64(len(form)) || c.sentMessages.Load() != 1 {
			t.Fatalf("counted %d bytes in %d messages, want %d in 1", c.sentBytes.Load(), c.sentMessages.Load(), len(form))
		}
	}
}

type plainRec struct{ writeRec }

func (w *plainRec) rec() *writeRec  { return &w.writeRec }
func (w *framedRec) rec() *writeRec { return &w.writeRec }

// flushRec counts Flush calls.
type flushRec struct {
	writeRec
	flushes int
}

func (w *flushRec) Flush() error {
	w.flushes++
	return nil
}

// TestCountingFlush: countingConn flushes a conn that holds writes back
// (delivery.Flusher: transport-io) and does nothing for one that does not.
func TestCountingFlush(t *testing.T) {
	f := &flushRec{}
	if err := (&countingConn{MessageConn: f}).Flush(); err != nil || f.flushes != 1 {
		t.Fatalf("Flush: %v, %d flushes of the conn, want 1", err, f.flushes)
	}
	if err := (&countingConn{MessageConn: &plainRec{}}).Flush(); err != nil {
		t.Fatalf("Flush of a conn that holds nothing: %v", err)
	}
}
