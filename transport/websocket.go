package transport

import (
	"cmp"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/internal/bufpool"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transportio"
)

// wsConn adapts a coder/websocket connection carrying plain AHP text frames.
type wsConn struct {
	compressed bool // a dialled connection negotiated permessage-deflate (Compressed)
	// binary: the upgrade chose BinarySubprotocol, so data messages may
	// cross in their binary form, as binary messages (BinaryConn).
	binary    bool
	readLimit int64
	c         *websocket.Conn
	cork      *CorkConn // under TLS, when known: each message leaves in one write
	peer      string
	lastSize  bufpool.SizeHint // for the next message's buffer (reader goroutine only)

	// wmu is held by each message's write, and by the keepalive while its
	// ping frame leaves (keepalive.go pingNow), so that a ping never waits
	// in the socket behind a message.
	wmu sync.Mutex

	lastRead atomic.Int64          // unix nanoseconds of the last message read
	lost     atomic.Pointer[error] // why keepalive gave up on the peer
	done     chan struct{}         // closed by Close: stops keepalive
	doneOnce sync.Once
	// hostEnd is set on the /ahp endpoint's end (AHPHandler): there a
	// peer whose TCP acknowledges is alive however long it does not
	// answer (keepalive.go).
	hostEnd   bool
	slow      atomic.Int64 // keepalive looks that found the peer alive but not answering
	owedSince time.Time    // keepalive goroutine only: see silent
	// connErr, when set (AHPHandler), is the first read error of the
	// connection beneath (transportio.ConnWatch): a compressed message
	// that does not inflate once it failed was cut short, not corrupt.
	connErr func() error
}

// readErr words a read failure: why keepalive gave up, or a TCP
// connection that ended without a WebSocket close.
func (w *wsConn) readErr(err error) error {
	if lost := w.lost.Load(); lost != nil {
		return *lost
	}
	if errors.Is(err, websocket.ErrMessageTooBig) {
		// The library has closed the connection with 1009.
		return &ViolationError{Code: CloseMessageTooBig, Err: err}
	}
	if reason, ok := transportio.LostReason(err); ok {
		return &lostError{reason, err}
	}
	return err
}

// ViolationError is a read error after which the transport itself closed
// the connection with Code, for what the peer sent: a message over the
// read limit (1009), a text message that is not UTF-8 or a compressed
// one that does not inflate (1007), or a binary message of the
// subprotocol ahp-tcp-data that is no such payload (1002). It is not
// a lost connection: the host keeps nothing for a reconnect.
type ViolationError struct {
	Code CloseCode
	Err  error
}

func (e *ViolationError) Error() string { return e.Err.Error() }
func (e *ViolationError) Unwrap() error { return e.Err }

// Violation returns the code the transport closed with when err is a
// ViolationError, or the peer's own 1002, 1007 or 1009 close (a PipeConn's
// message too big reads as one); ok is false for any other error.
func Violation(err error) (code CloseCode, ok bool) {
	var ve *ViolationError
	if errors.As(err, &ve) {
		return ve.Code, true
	}
	switch c := CloseStatus(err); c {
	case CloseProtocolError, CloseInvalidPayload, CloseMessageTooBig:
		return c, true
	}
	return 0, false
}

// lostError says what happened to the connection in words; err is the
// library's error (failed to get reader: failed to read frame header: EOF).
type lostError struct {
	msg string
	err error
}

func (e *lostError) Error() string { return e.msg }
func (e *lostError) Unwrap() error { return e.err }

// NewWebSocketConn wraps c (already upgraded or dialled) as a MessageConn;
// readLimit bounds one message in UTF-8 bytes (a larger one closes the
// connection with 1009).
func NewWebSocketConn(c *websocket.Conn, peer string, readLimit int64) MessageConn {
	c.SetReadLimit(readLimit)
	w := &wsConn{c: c, peer: peer, done: make(chan struct{}), readLimit: readLimit,
		// coder/websocket chooses a subprotocol ignoring case and answers
		// with the client's spelling: whatever it agreed to, we speak.
		binary: strings.EqualFold(c.Subprotocol(), BinarySubprotocol)}
	w.lastRead.Store(time.Now().UnixNano())
	return w
}

// ReadMessage returns the next message as text: a binary form is turned
// into the text it stands for (delivery/bytestream).
func (w *wsConn) ReadMessage(ctx context.Context) ([]byte, error) {
	b, binary, err := w.ReadMessageOrBinary(ctx)
	if err != nil || !binary {
		return b, err
	}
	text, err := bytestream.TextOfBinary(nil, b, int(w.readLimit))
	readBufs.Put(b)
	if err != nil {
		return nil, w.Violate(err)
	}
	return text, nil
}

// ReadMessageOrBinary implements BinaryConn: on BinarySubprotocol a binary
// message is a data message's binary form, which comes as it is.
func (w *wsConn) ReadMessageOrBinary(ctx context.Context) ([]byte, bool, error) {
	for {
		typ, data, err := w.read(ctx)
		var corrupt flate.CorruptInputError
		if errors.As(err, &corrupt) && w.connErr != nil {
			if cut := w.connErr(); cut != nil {
				err = cut // the connection ended inside the message
			}
		}
		if errors.As(err, &corrupt) {
			// A compressed message that does not inflate (RFC 7692
			// §7.2.2) is invalid payload data: 1007, as for text that
			// is not UTF-8.
			_ = w.c.Close(websocket.StatusInvalidFramePayloadData, "invalid compressed data")
			return nil, false, &ViolationError{Code: CloseInvalidPayload, Err: fmt.Errorf("transport: invalid compressed data: %w", err)}
		}
		if err != nil {
			return nil, false, w.readErr(err)
		}
		w.lastRead.Store(time.Now().UnixNano())
		if typ == websocket.MessageBinary && w.binary {
			return data, true, nil
		}
		if typ == websocket.MessageText || typ == websocket.MessageBinary {
			if !utf8.Valid(data) {
				_ = w.c.Close(websocket.StatusInvalidFramePayloadData, "message is not valid UTF-8")
				return nil, false, &ViolationError{Code: CloseInvalidPayload, Err: errors.New("transport: message is not valid UTF-8")}
			}
			return data, false, nil
		}
	}
}

// read reads one message into a buffer sized from the previous messages
// (Conn.Read's io.ReadAll starts at 512 bytes and doubles, which cost a
// fifth of a receiver's CPU on 16 KiB frames): a recycled one (RecycleRead)
// when one is big enough, else a fresh one. Callers keep slices of it
// until they recycle it, if ever. The read limit still applies.
func (w *wsConn) read(ctx context.Context) (websocket.MessageType, []byte, error) {
	typ, r, err := w.c.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	buf, err := readBufs.ReadMessage(r, &w.lastSize)
	return typ, buf, err
}

// WriteMessage writes text as one text message; with a CorkConn under
// TLS, its frame header and TLS records leave in one system call.
func (w *wsConn) WriteMessage(ctx context.Context, text []byte) error {
	return w.write(ctx, websocket.MessageText, text)
}

// WriteBinary implements BinaryConn: one binary message, when the upgrade
// chose BinarySubprotocol.
func (w *wsConn) WriteBinary(ctx context.Context, payload []byte) error {
	if !w.binary {
		return errNoBinary
	}
	return w.write(ctx, websocket.MessageBinary, payload)
}

func (w *wsConn) write(ctx context.Context, typ websocket.MessageType, msg []byte) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.cork == nil {
		return w.c.Write(ctx, typ, msg)
	}
	w.cork.Cork()
	err := w.c.Write(ctx, typ, msg)
	if ferr := w.cork.Uncork(); err == nil {
		err = ferr
	}
	return err
}

// CarriesBinary implements BinaryConn.
func (w *wsConn) CarriesBinary() bool { return w.binary }

// ReadLimit implements BinaryConn: the read limit (1009 beyond it).
func (w *wsConn) ReadLimit() int { return int(w.readLimit) }

// Violate implements BinaryConn: a 1002 close (protocol error).
func (w *wsConn) Violate(err error) error {
	_ = w.c.Close(websocket.StatusProtocolError, TruncateReason(err.Error(), 123))
	return &ViolationError{Code: CloseProtocolError, Err: fmt.Errorf("transport: %w", err)}
}

// BinarySubprotocol is the WebSocket subprotocol (RFC 6455 §1.9) by which
// a client of /ahp asks for data messages in their binary form, both ways:
// each is one binary message whose payload is the form that
// rpc.EventBinaryData carries on transport-io (Offset, Channel Length,
// Channel, Data: the stream bytes, not base64) and stands for the exact
// text it replaces, whose UTF-16 bytes windows and credit count as ever
// (docs/protocol.md "/ahp"). Every other message stays one JSON-RPC text
// message. A client that does not offer it, or a host that does not choose
// it, gets plain AHP: text messages only.
const BinarySubprotocol = rpc.EventBinaryData

// readBufs holds message buffers given back with RecycleRead: at most 8
// (bufpool: bounded), of 4 KiB to 1 MiB.
var readBufs = bufpool.New(8, 4<<10, 1<<20)

// RecycleRead implements ReadRecycler.
func (w *wsConn) RecycleRead(b []byte) { readBufs.Put(b) }

// WriteReleases implements Releaser: coder/websocket writes (or copies)
// the message before Write returns.
func (w *wsConn) WriteReleases() bool { return true }

// Close sends a close frame with code and reason and waits for the
// peer's, at most closeHandshakeWait when the connection's socket is known
// (the CorkConn under it): a peer that does not answer (a laptop that
// slept, a client that stopped reading) then has its TCP connection closed
// under it, instead of holding the caller for coder/websocket's 5 s.
func (w *wsConn) Close(code CloseCode, reason string) error {
	w.doneOnce.Do(func() { close(w.done) })
	if w.cork == nil {
		return w.c.Close(websocket.StatusCode(code), TruncateReason(reason, 123))
	}
	done := make(chan error, 1)
	go func() { done <- w.c.Close(websocket.StatusCode(code), TruncateReason(reason, 123)) }()
	t := time.NewTimer(closeHandshakeWait)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		_ = w.cork.Conn.Close() // the close frame went; its answer does not come
		return <-done
	}
}

// closeHandshakeWait bounds how long Close waits for the peer's close
// frame after sending its own: a peer that reads answers within a round
// trip.
var closeHandshakeWait = time.Second

func (w *wsConn) Peer() string { return w.peer }

// TruncateReason cuts reason to at most n UTF-8 bytes on a character
// boundary (a WebSocket close reason is at most 123 bytes).
func TruncateReason(reason string, n int) string {
	if len(reason) <= n {
		return reason
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// AcceptOptions configure the /ahp endpoint.
type AcceptOptions struct {
	// Auth decides every client's credential (Authorization: Bearer, or
	// ?token=): a refusal is 401 before the upgrade, a failure to decide
	// 503. Nil refuses everyone.
	Auth auth.Authenticator
	// Audit records each decision ("auth.success", "auth.failure");
	// nil is audit.Discard.
	Audit audit.Sink
	// Origins, when set, is the origin rule (checked first, 403 when
	// refused); OriginPatterns are then ignored.
	Origins *Origins
	// OriginPatterns are host patterns (path.Match) allowed in the Origin
	// header when present and Origins is nil; the request's own host is
	// always allowed.
	OriginPatterns []string
	// ReadLimit bounds one incoming message, in UTF-8 bytes.
	ReadLimit int64
	// OnReject is called for each refused request (for logging).
	OnReject func(r *http.Request, status int, why string)
}

// AHPHandler returns the http.Handler of the /ahp endpoint: it checks
// Origin, refuses a credential opts.Auth refuses with 401 before the
// upgrade (503 when it reached no decision), and hands each accepted
// connection to serve (which owns it until it returns) with a context
// carrying its identity (IdentityFrom).
func AHPHandler(opts AcceptOptions, serve func(ctx context.Context, mc MessageConn)) http.Handler {
	accept := &websocket.AcceptOptions{OriginPatterns: opts.OriginPatterns}
	if opts.Origins != nil {
		accept = &websocket.AcceptOptions{InsecureSkipVerify: true} // Origins decided
	}
	accept.CompressionMode, accept.CompressionThreshold = Compression, CompressionThreshold
	accept.Subprotocols = []string{BinarySubprotocol}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if opts.Origins != nil && !opts.Origins.Check(w, r) {
			return
		}
		id, err := authenticate(opts.Auth, opts.Audit, r, "ahp", TokenFromRequest(r))
		if err != nil {
			status, why := http.StatusUnauthorized, "missing or wrong token"
			if ref := failureReason(err); ref == transportio.ReasonAuthorizeFailed {
				status, why = http.StatusServiceUnavailable, "authorize failed: "+err.Error()
			} else if ref != auth.ErrUnknown.Reason {
				why = ref
			}
			if opts.OnReject != nil {
				opts.OnReject(r, status, why)
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="sidecar"`)
				http.Error(w, "401 unauthorized: "+why, status)
			} else {
				http.Error(w, "503 authorize failed: "+ReasonTryAgain, status)
			}
			return
		}
		if why := transportio.RefuseNotHTTP1(w, r); why != "" {
			if opts.OnReject != nil {
				opts.OnReject(r, http.StatusHTTPVersionNotSupported, why)
			}
			return
		}
		cw := &transportio.ConnWatch{ResponseWriter: w}
		sw := &transportio.StatusRecorder{ResponseWriter: cw}
		var wc *wsConn // set before anything is read
		ao := *accept
		ao.OnPingReceived = func(ctx context.Context, p []byte) bool { return wc.answerPing(ctx, p) }
		c, err := websocket.Accept(sw, r, &ao)
		if err != nil {
			// Accept has written the HTTP error: 403 for a foreign origin,
			// 426 for a request that is no upgrade, 400 for a bad one.
			if opts.OnReject != nil {
				opts.OnReject(r, cmp.Or(sw.Status, http.StatusForbidden), err.Error())
			}
			return
		}
		mc := NewWebSocketConn(c, r.RemoteAddr, opts.ReadLimit)
		wc = mc.(*wsConn)
		wc.cork = corkFrom(r.Context())
		wc.connErr = cw.Err
		wc.hostEnd = true
		go wc.keepalive(keepaliveInterval, keepaliveTimeout)
		serve(WithIdentity(r.Context(), id), mc)
	})
}

// Compression is how both WebSocket endpoints (/ahp and the transport-io
// mapping) answer a client's offer of permessage-deflate (RFC 7692): they
// accept it, without context takeover (nothing kept per connection
// between messages: a compressor is taken from a pool for each message),
// and compress the messages of at least CompressionThreshold bytes. A
// client that does not offer it (the sidecar client unless asked:
// Options.Compress) gets uncompressed messages, as before.
const Compression = websocket.CompressionNoContextTakeover

// CompressionThreshold is the smallest message (UTF-8 bytes) a compressed
// connection compresses: smaller ones (credit, a keystroke, a ping's
// bytes) go as they are, without the compressor's latency and CPU.
const CompressionThreshold = 1024

// dialCompression is a DialOptions.CompressionMode: permessage-deflate
// offered (Compression) when compress is set, else not offered.
func dialCompression(compress bool) websocket.CompressionMode {
	if compress {
		return Compression
	}
	return websocket.CompressionDisabled
}

// DialWebSocket dials a plain-AHP WebSocket endpoint with header (which
// carries the Authorization) and client (which carries TLS settings);
// compress offers permessage-deflate (see Compression). A refusal before
// the upgrade returns *HTTPError.
func DialWebSocket(ctx context.Context, url string, header http.Header, client *http.Client, readLimit int64, compress bool) (MessageConn, error) {
	client, dialed := corkClient(client)
	var w *wsConn // set before anything is read
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: header, HTTPClient: client,
		CompressionMode: dialCompression(compress), CompressionThreshold: CompressionThreshold,
		Subprotocols:   []string{BinarySubprotocol},
		OnPingReceived: func(ctx context.Context, p []byte) bool { return w.answerPing(ctx, p) }})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, &HTTPError{StatusCode: resp.StatusCode, Err: err, Reason: transportio.ReasonFromBody(resp.Body)}
		}
		return nil, err
	}
	mc := NewWebSocketConn(c, url, readLimit)
	w = mc.(*wsConn)
	w.cork = dialed()
	w.compressed = compress && resp != nil && acceptsDeflate(resp.Header.Get("Sec-WebSocket-Extensions"))
	go w.keepalive(keepaliveInterval, keepaliveTimeout)
	return mc, nil
}

// corkClient returns a copy of hc whose connections are *CorkConn (when
// its Transport is an *http.Transport, or nil, the default), and a func
// returning the last one dialled.
func corkClient(hc *http.Client) (*http.Client, func() *CorkConn) {
	none := func() *CorkConn { return nil }
	if hc == nil {
		hc = http.DefaultClient
	}
	base, ok := hc.Transport.(*http.Transport)
	if hc.Transport == nil {
		base, ok = http.DefaultTransport.(*http.Transport)
	}
	if !ok || base.DialTLSContext != nil {
		return hc, none
	}
	tr := base.Clone()
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var mu sync.Mutex
	var last *CorkConn
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := NewCorkConn(c)
		mu.Lock()
		last = cc
		mu.Unlock()
		return cc, nil
	}
	out := *hc
	out.Transport = tr
	return &out, func() *CorkConn {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// HTTPError is a refusal of the upgrade request: an HTTP status other than
// the upgrade's, on every transport (the transport-io dials return it too).
type HTTPError = transportio.StatusError

// CloseStatus returns the close code in err (a WebSocket close or a Pipe
// close), or -1.
func CloseStatus(err error) CloseCode {
	var pe *PipeCloseError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CloseCode(websocket.CloseStatus(err))
}

// CloseReason returns the close reason in err, if any.
func CloseReason(err error) string {
	var pe *PipeCloseError
	if errors.As(err, &pe) {
		return pe.Reason
	}
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Reason
	}
	return ""
}
