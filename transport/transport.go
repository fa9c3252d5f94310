// Package transport carries AHP messages between a client and the sidecar:
// plain AHP over WebSocket (/ahp, one JSON-RPC message per text frame) now,
// transport-io sessions (WebTransport, its WebSocket mapping, stdio) next.
//
// Every transport presents the same MessageConn: whole JSON-RPC message
// texts in, whole texts out, so sizes are measured on exactly what crossed
// the wire (seed 000 "Measuring Size").
package transport

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"

	"github.com/sidecar-dev/sidecar/transportio"
)

// MessageConn is one connection carrying complete JSON-RPC message texts.
//
// ReadMessage may be called from one goroutine at a time and returns the
// next message; WriteMessage likewise from one goroutine (the delivery
// Scheduler's writer). Close may be called from any goroutine, more than
// once; it ends pending reads and writes.
type MessageConn interface {
	ReadMessage(ctx context.Context) ([]byte, error)
	WriteMessage(ctx context.Context, text []byte) error
	Close(code CloseCode, reason string) error
	// Peer describes the remote end for logs ("127.0.0.1:50122").
	Peer() string
}

// Releaser is implemented by MessageConns whose WriteMessage keeps no
// reference to text once it returns (it was written, or copied into a
// frame): the caller may reuse the buffer.
type Releaser interface {
	WriteReleases() bool
}

// WriteReleases reports whether mc implements Releaser and says so.
func WriteReleases(mc MessageConn) bool {
	r, ok := mc.(Releaser)
	return ok && r.WriteReleases()
}

// ReadRecycler is implemented by MessageConns that can reuse the buffer a
// message was read into: RecycleRead takes back a message ReadMessage
// returned once nothing refers to it any more.
type ReadRecycler interface {
	RecycleRead(b []byte)
}

// RecycleRead hands b back to mc when mc is a ReadRecycler; otherwise it
// does nothing. The caller must not use b afterwards.
func RecycleRead(mc MessageConn, b []byte) {
	if r, ok := mc.(ReadRecycler); ok {
		r.RecycleRead(b)
	}
}

// BinaryConn is implemented by MessageConns that can carry data messages
// in their binary form (rpc.EventBinaryData: an EMIT of that event on
// transport-io, a binary message on /ahp with BinarySubprotocol), which a
// transport carries without looking inside (delivery/bytestream builds and
// parses it; docs/protocol.md "transport-io").
type BinaryConn interface {
	MessageConn
	// CarriesBinary reports whether the peer takes binary forms: the
	// transport-io peer's handshake lists the event, or the /ahp upgrade
	// chose the subprotocol.
	CarriesBinary() bool
	// WriteBinary writes one binary form as it is (one EMIT, one binary
	// message); an error when !CarriesBinary. It keeps no reference to
	// payload once it returns.
	WriteBinary(ctx context.Context, payload []byte) error
	// ReadMessageOrBinary returns the next message: a text (binary false),
	// or a binary form (binary true), which the reader parses
	// (bytestream.ParseBinary) and rejects with Violate when malformed.
	// b is the buffer to hand back with RecycleRead. ReadMessage returns
	// every message as text instead.
	ReadMessageOrBinary(ctx context.Context) (b []byte, binary bool, err error)
	// ReadLimit is the most UTF-8 bytes one message's text may take
	// (the text a binary form stands for too).
	ReadLimit() int
	// Violate closes the connection for a malformed message err, as a
	// protocol error (1002 on /ahp, 1004 on transport-io), and returns
	// the *ViolationError to report as the read's error.
	Violate(err error) error
}

// errNoBinary is what WriteBinary returns on a connection whose peer did
// not take binary forms (a caller's bug: see CarriesBinary).
var errNoBinary = errors.New("transport: the peer does not take binary forms")

// CarriesBinary reports whether mc is a BinaryConn whose peer takes binary
// forms.
func CarriesBinary(mc MessageConn) bool {
	b, ok := mc.(BinaryConn)
	return ok && b.CarriesBinary()
}

// ReadMessageOrBinary reads the next message of mc as BinaryConn does when
// mc implements it, else as text (binary false).
func ReadMessageOrBinary(ctx context.Context, mc MessageConn) (b []byte, binary bool, err error) {
	if r, ok := mc.(BinaryConn); ok {
		return r.ReadMessageOrBinary(ctx)
	}
	b, err = mc.ReadMessage(ctx)
	return b, false, err
}

// ReadLimit returns mc's bound on one message's text (BinaryConn), or
// transportio.MaxPayload (1 MiB) for a MessageConn that states none.
func ReadLimit(mc MessageConn) int {
	if r, ok := mc.(BinaryConn); ok {
		return r.ReadLimit()
	}
	return transportio.MaxPayload
}

// Violate closes mc for the malformed message err (BinaryConn.Violate), or
// with CloseProtocolError, and returns the *ViolationError to report.
func Violate(mc MessageConn, err error) error {
	if r, ok := mc.(BinaryConn); ok {
		return r.Violate(err)
	}
	_ = mc.Close(CloseProtocolError, TruncateReason(err.Error(), 123))
	return &ViolationError{Code: CloseProtocolError, Err: fmt.Errorf("transport: %w", err)}
}

// Describe names what carries mc, for people: "WebTransport",
// "WebSocket (transport-io)", "stdio (transport-io)", "WebSocket (/ahp)",
// or "" when it cannot tell (an in-memory pipe).
func Describe(mc MessageConn) string {
	switch c := mc.(type) {
	case *wsConn:
		return "WebSocket (/ahp)"
	case *tioConn:
		switch c.s.Kind() {
		case transportio.KindWebTransport:
			return "WebTransport"
		case transportio.KindWebSocket:
			return "WebSocket (transport-io)"
		case transportio.KindStdio:
			return "stdio (transport-io)"
		}
	}
	return ""
}

// Kind names what carries a MessageConn in a short stable form, for
// metric labels (Describe is the form for people).
type Kind string

// The Kinds KindOf returns.
const (
	KindWebSocket    Kind = "websocket"             // plain AHP over WebSocket (/ahp)
	KindTIOWebSocket Kind = "transportio_websocket" // transport-io over its WebSocket mapping
	KindWebTransport Kind = "webtransport"          // transport-io over WebTransport (HTTP/3)
	KindStdio        Kind = "stdio"                 // transport-io over stdin/stdout
	KindOther        Kind = "other"                 // anything else: an in-memory pipe
)

// KindOf returns the Kind of mc (KindOther when it cannot tell).
func KindOf(mc MessageConn) Kind {
	switch c := mc.(type) {
	case *wsConn:
		return KindWebSocket
	case *tioConn:
		switch c.s.Kind() {
		case transportio.KindWebTransport:
			return KindWebTransport
		case transportio.KindWebSocket:
			return KindTIOWebSocket
		case transportio.KindStdio:
			return KindStdio
		}
	}
	return KindOther
}

// SessionStats returns the counters of the transport-io session under mc
// (datagrams dropped, by reason, among them), and false when mc is not a
// transport-io connection.
func SessionStats(mc MessageConn) (transportio.Stats, bool) {
	if c, ok := mc.(*tioConn); ok {
		return c.s.Stats(), true
	}
	return transportio.Stats{}, false
}

// CloseCode is why a connection ends, as the WebSocket close code on /ahp.
type CloseCode int

// Close codes used on /ahp (RFC 6455 §7.4 and the private 4000-4999 range).
const (
	CloseNormal          CloseCode = 1000 // the client or server is done
	CloseGoingAway       CloseCode = 1001 // the server is shutting down
	CloseProtocolError   CloseCode = 1002 // a protocol violation (flow control, framing)
	CloseInvalidPayload  CloseCode = 1007 // a text message that is not UTF-8
	CloseMessageTooBig   CloseCode = 1009 // a message over the read limit
	CloseInternalError   CloseCode = 1011
	CloseTryAgainLater   CloseCode = 1013 // too many connections
	ClosePeerTooSlow     CloseCode = 4008 // protected queue stayed full (seed 003)
	CloseVersionMismatch CloseCode = 4005 // no common AHP version
)

// TokenFromRequest returns the bearer token of r: the Authorization header
// ("Bearer T") or, for browsers that cannot set headers, the token query
// parameter.
func TokenFromRequest(r *http.Request) string {
	if t := BearerToken(r); t != "" {
		return t
	}
	return r.URL.Query().Get("token")
}

// TokenEqual reports whether got is the token want (never for an empty
// want). It compares SHA-256 digests of the two in constant time, so the
// time taken tells nothing about want: subtle.ConstantTimeCompare on the
// tokens themselves returns at once when their lengths differ, which
// gives away want's length.
func TokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return ctCompare(g[:], w[:]) == 1 && want != ""
}

// ctCompare is subtle.ConstantTimeCompare; tests replace it to see what
// TokenEqual compares.
var ctCompare = subtle.ConstantTimeCompare
