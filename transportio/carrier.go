package transportio

import (
	"context"
	"io"
)

// Carrier is an established transport under a session: what a mapping
// (WebTransport, the §3.3 WebSocket mapping, stdio) provides. Session is
// its only user.
type Carrier interface {
	// Kind names the mapping; a reliable-only kind refuses a contract with
	// an undeclared unreliable event (§2).
	Kind() Kind
	// OpenEmit opens this side's emit stream (§3.1).
	OpenEmit(ctx context.Context) (io.Writer, error)
	// AcceptEmit returns the peer's emit stream. A second emit stream from
	// the peer is a protocol error the carrier reports by closing (1004).
	AcceptEmit(ctx context.Context) (io.Reader, error)
	// Close ends the session with code and reason (cut to the mapping's
	// cap on a character boundary). It returns at once; the session counts
	// as closed from then on (§3.3). Idempotent: the first call wins.
	Close(code CloseCode, reason string) error
	// Done is closed once the carrier has ended, by either side or by loss.
	Done() <-chan struct{}
	// Err says how it ended; nil while open.
	Err() *SessionError
	// Wait blocks until the carrier's goroutines have returned (after Done).
	Wait()
	// RemoteAddr describes the peer for logs.
	RemoteAddr() string
}

// CallCarrier is a Carrier with bidirectional streams (WebTransport).
type CallCarrier interface {
	OpenCall(ctx context.Context) (CallStream, error)
	AcceptCall(ctx context.Context) (CallStream, error)
}

// CallStream is one bidirectional call stream (§3.2).
type CallStream interface {
	io.Reader
	io.Writer
	// CloseWrite sends FIN on the send side.
	CloseWrite() error
	// CancelRead sends STOP_SENDING; CancelWrite sends RESET_STREAM.
	CancelRead(ResetCode)
	CancelWrite(ResetCode)
}

// DatagramCarrier is a Carrier with QUIC datagrams (WebTransport).
type DatagramCarrier interface {
	SendDatagram(b []byte) error
	ReceiveDatagram(ctx context.Context) ([]byte, error)
	// MaxDatagramSize is the path's current datagram size, 0 if unknown.
	MaxDatagramSize() int
}
