package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transportio"
)

// Contract is the sidecar's transport-io contract (DESIGN.md §3.2):
// rpc.EventAHP, reliable, codec JSON, carrying exactly one JSON-RPC message
// per EMIT, and rpc.EventBinaryData (codec bytes), a data message's binary
// form between peers that both list it (docs/protocol.md "transport-io").
var Contract = transportio.MustContract(transportio.Event{Name: rpc.EventAHP},
	transportio.Event{Name: rpc.EventBinaryData, Payload: transportio.CodecBytes})

// EmitQueueMark and EmitQueueBytes bound the transport queue under
// delivery's scheduler: WriteMessage waits while this many emit frames, or
// this many bytes of them, are unsent (the bytes bound lets one larger
// frame go alone). 32 frames is far under the 256 that closes a session as
// WT_PEER_TOO_SLOW; 256 KiB is what a message of a quiet channel may wait
// behind in the transport once delivery has chosen it (its fair turn
// comes in delivery, seed 000): on WebTransport, whose rate is quic-go's
// congestion window's (20-30 MiB/s on a 1 Gbit/s, 50 ms path), 32 grown
// frames of 192 KiB would be 300 ms of wait; 256 KiB is about 10 ms there,
// and two frames, enough to keep the stream busy on loopback.
const (
	EmitQueueMark  = 32
	EmitQueueBytes = 256 << 10
)

// TIOPath is where transport-io is served, over HTTP/3 and over WebSocket.
const TIOPath = "/transport-io"

// tioConn presents a transport-io session as a MessageConn.
type tioConn struct {
	s *transportio.Session
	// compressed: the WebSocket mapping negotiated permessage-deflate
	// (dialled sessions; see Compressed).
	compressed bool
	// binary: the peer's handshake lists rpc.EventBinaryData, so data
	// messages may go in their binary form (BinaryConn).
	binary bool
	// owned: Close also joins the session's goroutines (dialled sessions;
	// a listener joins the ones it accepted itself).
	owned bool
}

// NewTIOConn turns an established transport-io session (WebTransport, the
// WebSocket mapping or stdio) into a MessageConn: ReadMessage returns the
// next rpc.EventAHP EMIT payload, WriteMessage emits one and blocks while
// EmitQueueMark frames are queued (stdio sessions also block rather than
// disconnect), Close maps the CloseCode as docs/protocol.md §1 says. It is
// a BinaryConn: data messages travel in their binary form
// (rpc.EventBinaryData) when the peer lists that event.
func NewTIOConn(s *transportio.Session) MessageConn { return newTIOConn(s, false) }

func newTIOConn(s *transportio.Session, owned bool) *tioConn {
	c := &tioConn{s: s, owned: owned}
	if s.WaitHandshake(context.Background()) == nil { // done already, or the session ended
		c.binary = !slices.Contains(s.Negotiation().LocalOnly, rpc.EventBinaryData)
	}
	return c
}

// ReadMessage returns the next message as text: a binary form is turned
// into the text it stands for (delivery/bytestream).
func (c *tioConn) ReadMessage(ctx context.Context) ([]byte, error) {
	b, binary, err := c.ReadMessageOrBinary(ctx)
	if err != nil || !binary {
		return b, err
	}
	text, err := bytestream.TextOfBinary(nil, b, transportio.MaxPayload)
	transportio.RecyclePayload(b)
	if err != nil {
		c.s.Close(transportio.CloseProtocolError, err.Error())
		return nil, tioError(c.s.Err())
	}
	return text, nil
}

// ReadMessageOrBinary implements BinaryConn: an rpc.EventBinaryData
// payload comes as it is.
func (c *tioConn) ReadMessageOrBinary(ctx context.Context) ([]byte, bool, error) {
	for {
		m, err := c.s.Receive(ctx)
		if err != nil {
			return nil, false, tioError(err)
		}
		switch m.Event {
		case rpc.EventAHP:
			return m.Payload, false, nil
		case rpc.EventBinaryData:
			return m.Payload, true, nil
		}
	}
}

// CarriesBinary implements BinaryConn.
func (c *tioConn) CarriesBinary() bool { return c.binary }

// ReadLimit implements BinaryConn: an EMIT payload's bound.
func (c *tioConn) ReadLimit() int { return transportio.MaxPayload }

// Violate implements BinaryConn: a 1004 close (WT_PROTOCOL_ERROR).
func (c *tioConn) Violate(err error) error {
	c.s.Close(transportio.CloseProtocolError, err.Error())
	return &ViolationError{Code: CloseProtocolError, Err: fmt.Errorf("transport: %w", err)}
}

func (c *tioConn) WriteMessage(ctx context.Context, text []byte) error {
	return tioError(c.s.EmitWaitQueue(ctx, rpc.EventAHP, text, EmitQueueMark, EmitQueueBytes))
}

// WriteBinary implements BinaryConn: one rpc.EventBinaryData EMIT.
func (c *tioConn) WriteBinary(ctx context.Context, payload []byte) error {
	if !c.binary {
		return errNoBinary
	}
	return tioError(c.s.EmitWaitQueue(ctx, rpc.EventBinaryData, payload, EmitQueueMark, EmitQueueBytes))
}

// WriteFramed implements delivery.FramedWriter: one rpc.EventBinaryData
// EMIT whose header goes into framed's room, written from framed itself
// when its payload is large (transportio.EmitFramedWaitQueue: no copy),
// else as WriteBinary writes it.
func (c *tioConn) WriteFramed(ctx context.Context, framed []byte) error {
	if !c.binary {
		return errNoBinary
	}
	return tioError(c.s.EmitFramedWaitQueue(ctx, rpc.EventBinaryData, framed, EmitQueueMark, EmitQueueBytes))
}

// Flush implements delivery.Flusher: the frames WriteFramed left held
// (transportio.Session.Flush) go to the socket.
func (c *tioConn) Flush() error { return tioError(c.s.Flush()) }

// The room a delivery.Message leaves in front of its binary form is one
// EMIT header (a compile error unless the two are equal).
const _ = uint(delivery.FrameRoom-transportio.FrameHeaderLen) + uint(transportio.FrameHeaderLen-delivery.FrameRoom)

// WriteReleases implements Releaser: the session copies each payload into
// its EMIT frame, or has written it (WriteFramed), when a write returns.
func (c *tioConn) WriteReleases() bool { return true }

// RecycleRead implements ReadRecycler: a message is an EMIT payload in a
// buffer of its own (transportio.Decoder).
func (c *tioConn) RecycleRead(b []byte) { transportio.RecyclePayload(b) }

func (c *tioConn) Close(code CloseCode, reason string) error {
	tc, r := ToTIOClose(code, reason)
	err := c.s.Close(tc, r)
	if c.owned {
		c.s.Wait()
	}
	return err
}

func (c *tioConn) Peer() string { return c.s.RemoteAddr() }

// internalErrorReason opens the reason of a session closed for a
// CloseInternalError, which seed 002's table has no code for: WT_NO_ERROR
// with this reason reads back as CloseInternalError (FromTIOClose), so a
// client that gives a link up ("connection lost") is not taken for one
// that left (a detach), which ends its state.
const internalErrorReason = "internal error: "

// ToTIOClose maps a MessageConn close to a session close (docs/protocol.md §1).
func ToTIOClose(code CloseCode, reason string) (transportio.CloseCode, string) {
	switch code {
	case CloseInternalError:
		if !strings.HasPrefix(reason, internalErrorReason) {
			reason = internalErrorReason + reason
		}
		return transportio.CloseNoError, reason
	case CloseProtocolError, CloseMessageTooBig:
		return transportio.CloseProtocolError, reason
	case ClosePeerTooSlow:
		return transportio.ClosePeerTooSlow, reason
	case CloseUnauthorized:
		return transportio.CloseUnauthorized, reason
	case CloseGoingAway:
		if reason == "" {
			reason = "server shutting down"
		}
		return transportio.CloseNoError, reason
	default: // normal, AHP version mismatch: not transport faults
		return transportio.CloseNoError, reason
	}
}

// FromTIOClose maps a session close code back to a CloseCode for callers
// that read CloseStatus: 0 is CloseNormal (CloseGoingAway when the reason
// says the server is shutting down, CloseInternalError when it starts with
// "internal error: "), 1003 ClosePeerTooSlow, 1004 CloseProtocolError, any
// other code 3000+code, as on the WebSocket mapping.
func FromTIOClose(code transportio.CloseCode, reason string) CloseCode {
	switch code {
	case transportio.CloseNoError:
		switch {
		case reason == "server shutting down":
			return CloseGoingAway
		case strings.HasPrefix(reason, internalErrorReason):
			return CloseInternalError
		}
		return CloseNormal
	case transportio.ClosePeerTooSlow:
		return ClosePeerTooSlow
	case transportio.CloseProtocolError:
		return CloseProtocolError
	}
	return CloseCode(3000 + int(code))
}

// TIOCloseError is what a transport-io MessageConn returns once the session
// ended. CloseStatus and CloseReason read it (through errors.As to
// websocket.CloseError); a lost connection reports -1, and so does a
// session either side ended as WT_IDLE_TIMEOUT (§3.3: nothing heard for
// the idle deadline; the path went silent, which a client resumes from).
type TIOCloseError struct{ *transportio.SessionError }

func (e *TIOCloseError) Unwrap() error { return e.SessionError }

// As lets CloseStatus see the mapped code.
func (e *TIOCloseError) As(target any) bool {
	ce, ok := target.(*websocket.CloseError)
	if !ok || e.Lost || e.Code == transportio.CloseIdleTimeout {
		return false
	}
	*ce = websocket.CloseError{Code: websocket.StatusCode(FromTIOClose(e.Code, e.Reason)), Reason: e.Reason}
	return true
}

func tioError(err error) error {
	var se *transportio.SessionError
	if errors.As(err, &se) {
		return &TIOCloseError{se}
	}
	return err
}

// TIOOptions configure the transport-io endpoints of the host.
type TIOOptions struct {
	// Auth decides every peer's credential (Authorization: Bearer, or
	// ?token=): a refusal closes as WT_UNAUTHORIZED with the refusal's
	// reason ("unauthorized", "expired", "revoked") before the server's
	// frame 0; a failure to decide as WT_NO_ERROR "authorize failed"
	// (seed 002 §4). Nil refuses everyone but ticket holders.
	Auth auth.Authenticator
	// Tickets, when set, lets a peer in with ?ticket=T instead of a
	// credential (the web page: its token never goes into a URL), as the
	// identity the ticket was issued to. The ticket is consumed by this
	// use; a used, expired, unknown or revoked one closes as
	// WT_UNAUTHORIZED with the TicketError's reason (ticket-used,
	// ticket-expired, ticket-unknown).
	Tickets *Tickets
	// Audit records each door decision ("auth.success", "auth.failure");
	// nil is audit.Discard.
	Audit audit.Sink
	// Origins, when set, is the origin rule of both mappings (checked
	// before anything else, 403 when refused); OriginPatterns are then
	// ignored.
	Origins *Origins
	// OriginPatterns are Origin host patterns allowed on the WebSocket
	// mapping (path.Match) when Origins is nil; the request's own host is
	// always allowed.
	OriginPatterns []string
	// OnReject is told about each refusal (for logging).
	OnReject func(r *http.Request, code transportio.CloseCode, reason string)
	// OnUpgradeRefused is told about each WebSocket upgrade refused with an
	// HTTP status before any session (a request that is no upgrade, a
	// foreign origin).
	OnUpgradeRefused func(r *http.Request, status int, reason string)
	// Path is where NewWebTransportServer serves sessions: TIOPath when
	// empty, the base path and TIOPath under listener.base_path. (The
	// WebSocket mapping is mounted by its caller.)
	Path string
	// DatagramOrigins is the daemon's one datagram origin allocator (seed
	// 002 §7.3), shared by its WebSocket and WebTransport mappings so
	// their peers never share an origin; its host ordinal is
	// listener.host_ordinal. Nil: each mapping allocates on its own in
	// ordinal 0 (tests).
	DatagramOrigins *transportio.SharedOrigins
	// HandshakeTimeout and WebSocket override the protocol's timings (tests).
	HandshakeTimeout time.Duration
	WebSocket        transportio.WebSocketOptions
}

// RefusalReason is the close reason of a refused token.
const RefusalReason = "unauthorized"

func (o TIOOptions) listener() *transportio.Listener {
	patterns := o.OriginPatterns
	if o.Origins != nil {
		patterns = []string{"*"} // Origins decided before the listener runs
	}
	return &transportio.Listener{
		Session:              transportio.Config{Contract: Contract, HandshakeTimeout: o.HandshakeTimeout, PayloadsChecked: true},
		Authorize:            o.authorize,
		OriginPatterns:       patterns,
		Compression:          Compression,
		CompressionThreshold: CompressionThreshold,
		WebSocket:            o.webSocket(),
		OnRefuse:             o.OnReject,
		OnUpgradeRefused:     o.OnUpgradeRefused,
		Origins:              o.DatagramOrigins,
	}
}

// doorSlot is where a request's door decision is left for its serve
// function: transportio's Authorize answers only yes or no.
type doorSlot struct{ id auth.Identity }

type doorSlotKey struct{}

// withSlot returns r with an empty doorSlot in its context.
func withSlot(r *http.Request) (*http.Request, *doorSlot) {
	slot := &doorSlot{}
	return r.WithContext(context.WithValue(r.Context(), doorSlotKey{}, slot)), slot
}

// tioTransport names r's mapping for the audit trail.
func tioTransport(r *http.Request) string {
	if r.ProtoMajor == 3 {
		return "webtransport"
	}
	return "transport-io-websocket"
}

// authorize is the door of both mappings: a ticket when the request
// carries one (consumed here), else the credential. The identity goes
// into the request's doorSlot.
func (o TIOOptions) authorize(r *http.Request) error {
	var id auth.Identity
	if t := TicketFromRequest(r); t != "" && o.Tickets != nil {
		var err error
		id, err = o.Tickets.Redeem(t)
		var te *TicketError
		if errors.As(err, &te) {
			RecordFailure(o.Audit, r, tioTransport(r), te.Reason)
			return transportio.Refuse(te.Reason)
		}
		if err != nil {
			RecordFailure(o.Audit, r, tioTransport(r), transportio.ReasonAuthorizeFailed)
			return err
		}
		RecordSuccess(o.Audit, r, tioTransport(r), id, "ticket")
	} else {
		var err error
		id, err = authenticate(o.Auth, o.Audit, r, tioTransport(r), TokenFromRequest(r))
		var ref *auth.Refusal
		if errors.As(err, &ref) {
			return transportio.Refuse(ref.Reason)
		}
		if err != nil {
			return err
		}
	}
	if slot, _ := r.Context().Value(doorSlotKey{}).(*doorSlot); slot != nil {
		slot.id = id
	}
	return nil
}

// webSocket is o.WebSocket with the request's CorkConn (CorkContext) as
// the sockets' Corker.
func (o TIOOptions) webSocket() transportio.WebSocketOptions {
	ws := o.WebSocket
	if ws.Cork == nil {
		ws.Cork = func(r *http.Request) transportio.Corker {
			if r == nil {
				return nil
			}
			if cc := corkFrom(r.Context()); cc != nil {
				return cc
			}
			return nil
		}
	}
	return ws
}

// serveTIO waits for the peer's handshake and hands the session to serve.
func serveTIO(ctx context.Context, serve func(ctx context.Context, mc MessageConn)) func(*transportio.Session) {
	return func(s *transportio.Session) {
		if s.WaitHandshake(ctx) != nil {
			return
		}
		serve(ctx, NewTIOConn(s))
	}
}

// TIOWebSocketHandler serves the §3.3 WebSocket mapping (mount it at
// TIOPath): the credential is decided before the session is accepted,
// the upgrade is completed either way, and a refusal closes with 4007.
// serve's context carries the identity (IdentityFrom).
func TIOWebSocketHandler(opts TIOOptions, serve func(ctx context.Context, mc MessageConn)) http.Handler {
	l := opts.listener()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.Origins != nil && !opts.Origins.Check(w, r) {
			return
		}
		r, slot := withSlot(r)
		ctx := context.WithoutCancel(r.Context())
		l.WebSocketHandler(serveTIO(ctx, func(ctx context.Context, mc MessageConn) {
			serve(WithIdentity(ctx, slot.id), mc)
		})).ServeHTTP(w, r)
	})
}

// ProbeHandler answers HEAD /.well-known/transport-io with 204.
func ProbeHandler() http.Handler { return transportio.ProbeHandler() }

// ServeStdio runs one transport-io session over r and w (stdin/stdout of
// `sidecar stdio`): emit lane only, a slow reader blocks and is never
// disconnected, no token (whoever can start the process is already in).
// It returns when the session ends.
func ServeStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser, serve func(ctx context.Context, mc MessageConn)) error {
	s := transportio.Start(transportio.NewStreamCarrier(r, w, "stdio"), transportio.Config{
		Contract: Contract, Role: transportio.RoleServer, BlockOnFull: true, Origin: 1, PayloadsChecked: true,
	})
	defer s.Wait()
	defer s.Close(transportio.CloseNoError, "")
	if err := s.WaitHandshake(ctx); err != nil {
		return err
	}
	serve(ctx, NewTIOConn(s))
	return nil
}

// clientConn waits for the handshake of a dialled client session s and
// returns it as a MessageConn it owns; on failure s is closed and joined,
// and a refusal is a *TIOCloseError.
func clientConn(ctx context.Context, s *transportio.Session) (MessageConn, error) {
	if err := s.WaitHandshake(ctx); err != nil {
		s.Close(transportio.CloseNoError, "")
		s.Wait()
		return nil, tioError(err)
	}
	return newTIOConn(s, true), nil
}

// DialStdio starts a client session over r (the peer's output) and w (its
// input), and waits for the handshake.
func DialStdio(ctx context.Context, r io.ReadCloser, w io.WriteCloser, name string) (MessageConn, error) {
	s := transportio.Start(transportio.NewStreamCarrier(r, w, name), transportio.Config{
		Contract: Contract, Role: transportio.RoleClient, BlockOnFull: true, PayloadsChecked: true,
	})
	return clientConn(ctx, s)
}

// DialTIOWebSocket dials the WebSocket mapping at url (wss://…/transport-io)
// and waits for the handshake; compress offers permessage-deflate (see
// Compression). A refusal returns a *TIOCloseError with code 1007; an
// answer other than 101 (no upgrade) an *HTTPError.
func DialTIOWebSocket(ctx context.Context, url string, header http.Header, client *http.Client, compress bool) (MessageConn, error) {
	client, dialed := corkClient(client)
	cork := func(*http.Request) transportio.Corker {
		if cc := dialed(); cc != nil {
			return cc
		}
		return nil
	}
	client, answer := extensionsSpy(client)
	s, err := transportio.DialWebSocket(ctx, url, &websocket.DialOptions{HTTPHeader: header, HTTPClient: client,
		CompressionMode: dialCompression(compress), CompressionThreshold: CompressionThreshold},
		transportio.Config{Contract: Contract, PayloadsChecked: true}, transportio.WebSocketOptions{Cork: cork})
	if err != nil {
		return nil, err
	}
	mc, err := clientConn(ctx, s)
	if err == nil {
		mc.(*tioConn).compressed = compress && acceptsDeflate(answer())
	}
	return mc, err
}

// extensionsSpy returns a copy of hc that notes the
// Sec-WebSocket-Extensions of the last answer it got, and a func that
// returns it.
func extensionsSpy(hc *http.Client) (*http.Client, func() string) {
	spy := &extSpy{rt: hc.Transport}
	if spy.rt == nil {
		spy.rt = http.DefaultTransport
	}
	c := *hc
	c.Transport = spy
	return &c, func() string {
		v, _ := spy.ext.Load().(string)
		return v
	}
}

type extSpy struct {
	rt  http.RoundTripper
	ext atomic.Value // string
}

func (s *extSpy) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := s.rt.RoundTrip(r)
	if resp != nil {
		s.ext.Store(resp.Header.Get("Sec-WebSocket-Extensions"))
	}
	return resp, err
}

// acceptsDeflate reports whether a Sec-WebSocket-Extensions answer
// accepts permessage-deflate.
func acceptsDeflate(answer string) bool {
	for _, ext := range strings.Split(answer, ",") {
		name, _, _ := strings.Cut(ext, ";")
		if strings.TrimSpace(name) == "permessage-deflate" {
			return true
		}
	}
	return false
}

// Compressed reports whether the client connection mc negotiated
// WebSocket permessage-deflate (it offered it and the host accepted):
// false on WebTransport, stdio and connections accepted by a host.
func Compressed(mc MessageConn) bool {
	switch c := mc.(type) {
	case *tioConn:
		return c.compressed
	case *wsConn:
		return c.compressed
	}
	return false
}

// IsNoQUICAnswer reports whether err is a WebTransport dial whose QUIC
// handshake got no answer in time (nothing listens on the UDP port, or the
// path drops UDP).
func IsNoQUICAnswer(err error) bool { return transportio.IsNoAnswer(err) }

// IsUnauthorized reports whether err is a WT_UNAUTHORIZED refusal, which a
// client treats as final.
func IsUnauthorized(err error) bool {
	var se *transportio.SessionError
	return errors.As(err, &se) && se.Code == transportio.CloseUnauthorized && !se.Lost
}
