package transportio

import (
	"cmp"
	"compress/flate"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/internal/bufpool"
)

// WebSocketOptions tune the §3.3 mapping; zero values are the normative
// defaults.
type WebSocketOptions struct {
	// Keepalive: after this long with nothing sent, an empty binary message
	// is sent. Default KeepaliveInterval (15000 ms).
	Keepalive time.Duration
	// Idle: after this long with nothing received, the session closes as
	// WT_IDLE_TIMEOUT. Default IdleTimeout (45000 ms). Time the reader
	// spends waiting for the application to take messages does not count.
	Idle time.Duration
	// CloseWait bounds the closing handshake; the session counts as closed
	// at once regardless (§3.3). Default 2 s.
	CloseWait time.Duration
	// Cork, when set, returns what can hold back the socket's writes so
	// that each WebSocket message leaves in one system call (the sidecar's
	// transport.CorkConn under TLS); nil when there is none. It is called
	// once per socket, with the upgrade request on a server and nil on a
	// client.
	Cork func(r *http.Request) Corker
	// ReadErr, when set, returns the first read error of the connection
	// beneath the socket (ConnWatch.Err), or nil: a compressed message
	// that does not inflate once the connection failed is a connection
	// lost, not a protocol error. The listener sets it.
	ReadErr func() error
}

// Corker holds back a connection's writes until Uncork, which sends them
// together.
type Corker interface {
	Cork()
	Uncork() error
}

// readErr is ReadErr's answer, nil when ReadErr is not set.
func (o *WebSocketOptions) readErr() error {
	if o.ReadErr == nil {
		return nil
	}
	return o.ReadErr()
}

func (o *WebSocketOptions) defaults() {
	if o.Keepalive <= 0 {
		o.Keepalive = KeepaliveInterval
	}
	if o.Idle <= 0 {
		o.Idle = IdleTimeout
	}
	if o.CloseWait <= 0 {
		o.CloseWait = 2 * time.Second
	}
}

// wsReadLimit bounds one inbound WebSocket message: a message carries bytes
// of the stream, and a peer may coalesce frames; the frame caps still apply
// frame by frame.
const wsReadLimit = 4 << 20

// wsCarrier is the §3.3 mapping: the socket is both peers' emit streams.
type wsCarrier struct {
	c      *websocket.Conn
	remote string
	opts   WebSocketOptions

	ctx    context.Context // hard lifetime of the socket
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	err    atomic.Pointer[SessionError]
	wg     sync.WaitGroup

	lastSend, lastRecv atomic.Int64 // unix nanoseconds
	blocked            atomic.Bool  // the reader waits for the application
	chunks             chan []byte
	cur                []byte           // what Read has not returned yet of chunk
	chunk              []byte           // the message buffer cur is in
	lastSize           bufpool.SizeHint // for the next message's buffer (reader)
	cork               Corker           // nil: writes go straight to the socket
}

// NewWebSocketCarrier wraps an upgraded or dialled socket as the §3.3
// mapping. It starts reading at once (keepalives count as received).
func NewWebSocketCarrier(c *websocket.Conn, remote string, opts WebSocketOptions) Carrier {
	opts.defaults()
	c.SetReadLimit(wsReadLimit)
	w := &wsCarrier{c: c, remote: remote, opts: opts, done: make(chan struct{}), chunks: make(chan []byte, 16)}
	if opts.Cork != nil {
		w.cork = opts.Cork(nil)
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	now := time.Now().UnixNano()
	w.lastSend.Store(now)
	w.lastRecv.Store(now)
	w.wg.Add(2)
	go w.readLoop()
	go w.liveness()
	return w
}

func (w *wsCarrier) Kind() Kind                                    { return KindWebSocket }
func (w *wsCarrier) RemoteAddr() string                            { return w.remote }
func (w *wsCarrier) Done() <-chan struct{}                         { return w.done }
func (w *wsCarrier) Err() *SessionError                            { return w.err.Load() }
func (w *wsCarrier) Wait()                                         { w.wg.Wait() }
func (w *wsCarrier) OpenEmit(context.Context) (io.Writer, error)   { return wsWriter{w}, nil }
func (w *wsCarrier) AcceptEmit(context.Context) (io.Reader, error) { return w, nil }

// end records how the socket ended and releases it.
func (w *wsCarrier) end(e *SessionError) bool {
	first := false
	w.once.Do(func() {
		first = true
		w.err.Store(e)
		close(w.done)
	})
	return first
}

func (w *wsCarrier) Close(code CloseCode, reason string) error {
	w.closeWith(&SessionError{Code: code, Reason: reason})
	return nil
}

// closeWith ends the session as e says and sends its close frame (e.Code,
// e.Reason), once.
func (w *wsCarrier) closeWith(e *SessionError) {
	if !w.end(e) {
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if w.cork != nil {
			_ = w.cork.Uncork() // what WriteHeld held, before the close frame
		}
		t := time.AfterFunc(w.opts.CloseWait, func() { _ = w.c.CloseNow() })
		_ = w.c.Close(websocket.StatusCode(e.Code.WebSocketCode()), TruncateReason(e.Reason, MaxWebSocketCloseReason))
		t.Stop()
		_ = w.c.CloseNow()
		w.cancel()
	}()
}

// LostReason words a read error that ended a WebSocket without a close:
// what happened to the TCP connection ("the peer's TCP connection ended
// without a WebSocket close", "... was reset"), not the library's layers
// ("failed to get reader: failed to read frame header: EOF"); ok is false
// for any other error.
func LostReason(err error) (reason string, ok bool) {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "the peer's TCP connection ended without a WebSocket close", true
	case errors.Is(err, syscall.ECONNRESET):
		return "the peer's TCP connection was reset", true
	case errors.Is(err, syscall.EPIPE):
		// A write (a pong, a close) found it closed by the peer.
		return "the peer had closed the TCP connection", true
	}
	return "", false
}

func (w *wsCarrier) readLoop() {
	defer w.wg.Done()
	for {
		typ, data, err := w.read()
		if corrupt := new(flate.CorruptInputError); errors.As(err, corrupt) {
			if cut := w.opts.readErr(); cut != nil {
				// The connection ended inside the message: what did
				// not inflate was a frame cut short (ConnWatch).
				err = cut
			} else {
				// A compressed message that does not inflate (RFC
				// 7692 §7.2.2): the peer broke the protocol, nothing
				// was lost.
				w.Close(CloseProtocolError, "invalid compressed data")
				return
			}
		}
		if err != nil {
			var ce websocket.CloseError
			reason, ok := LostReason(err)
			if !ok {
				reason = err.Error()
			}
			e := &SessionError{Lost: true, Reason: reason}
			if errors.As(err, &ce) {
				if code, ok := CloseCodeFromWebSocket(int(ce.Code)); ok {
					e = &SessionError{Code: code, Reason: ce.Reason, Remote: true}
				} else {
					e = &SessionError{Lost: true, Reason: fmt.Sprintf("WebSocket close %d %s", ce.Code, ce.Reason)}
				}
			}
			if w.end(e) {
				_ = w.c.CloseNow()
				w.cancel()
			}
			return
		}
		w.lastRecv.Store(time.Now().UnixNano())
		if typ != websocket.MessageBinary {
			w.Close(CloseProtocolError, "a text message on the emit lane")
			return
		}
		if len(data) == 0 {
			continue // a keepalive: no bytes of the stream
		}
		w.blocked.Store(true)
		select {
		case w.chunks <- data:
		case <-w.done:
			return
		}
		w.blocked.Store(false)
		w.lastRecv.Store(time.Now().UnixNano())
	}
}

// chunkBufs recycles message buffers once Read has copied them out: at
// most 8 of at most 1 MiB are kept (bufpool: bounded; a larger message's
// buffer, which a peer may send up to wsReadLimit, is left to the
// collector).
var chunkBufs = bufpool.New(8, 4<<10, 1<<20)

// read reads one message into a buffer sized from the previous ones
// (Conn.Read's io.ReadAll starts small, doubles and clears each step: a
// third of a receiver's CPU on bulk data), a recycled one when one is big
// enough. The read limit still applies.
func (w *wsCarrier) read() (websocket.MessageType, []byte, error) {
	typ, r, err := w.c.Reader(w.ctx)
	if err != nil {
		return 0, nil, err
	}
	buf, err := chunkBufs.ReadMessage(r, &w.lastSize)
	return typ, buf, err
}

// Read is the peer's emit stream. A message's buffer is recycled once
// Read has copied all of it out.
func (w *wsCarrier) Read(p []byte) (int, error) {
	for len(w.cur) == 0 {
		if w.chunk != nil {
			chunkBufs.Put(w.chunk)
			w.chunk = nil
		}
		select {
		case w.cur = <-w.chunks:
			w.chunk = w.cur
			continue
		default:
		}
		select {
		case w.cur = <-w.chunks:
		case <-w.done:
			select {
			case w.cur = <-w.chunks:
			default:
				return 0, io.EOF
			}
		}
		w.chunk = w.cur
	}
	n := copy(p, w.cur)
	w.cur = w.cur[n:]
	return n, nil
}

type wsWriter struct{ w *wsCarrier }

// Write sends p as one binary message. A message carries bytes of the
// stream; its boundary means nothing (§3.3).
func (x wsWriter) Write(p []byte) (int, error) {
	var err error
	if ck := x.w.cork; ck != nil {
		ck.Cork()
		err = x.w.c.Write(x.w.ctx, websocket.MessageBinary, p)
		if uerr := ck.Uncork(); err == nil {
			err = uerr
		}
	} else {
		err = x.w.c.Write(x.w.ctx, websocket.MessageBinary, p)
	}
	if err != nil {
		return 0, err
	}
	x.w.lastSend.Store(time.Now().UnixNano())
	return len(p), nil
}

// WriteHeld implements heldWriter: p goes as one binary message, as
// Write sends it, but with a Corker it stays in the Corker's buffer (the
// bytes are copied there: p is free on return) until Flush or the next
// Write, so consecutive frames leave in one system call. Once the carrier
// has ended nothing is held (its close frame must not wait).
func (x wsWriter) WriteHeld(p []byte) (int, error) {
	ck := x.w.cork
	if ck == nil {
		return x.Write(p)
	}
	ck.Cork()
	err := x.w.c.Write(x.w.ctx, websocket.MessageBinary, p)
	select {
	case <-x.w.done:
		if uerr := ck.Uncork(); err == nil {
			err = uerr
		}
	default:
	}
	if err != nil {
		_ = ck.Uncork()
		return 0, err
	}
	x.w.lastSend.Store(time.Now().UnixNano())
	return len(p), nil
}

// Flush implements heldWriter: what WriteHeld held goes to the socket.
func (x wsWriter) Flush() error {
	if ck := x.w.cork; ck != nil {
		return ck.Uncork()
	}
	return nil
}

// liveness sends a keepalive at last-send + Keepalive and closes as
// WT_IDLE_TIMEOUT at last-receive + Idle (§3.3).
func (w *wsCarrier) liveness() {
	defer w.wg.Done()
	t := time.NewTimer(min(w.opts.Keepalive, w.opts.Idle))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-w.done:
			return
		}
		now := time.Now()
		if w.blocked.Load() {
			w.lastRecv.Store(now.UnixNano())
		}
		recv := time.Unix(0, w.lastRecv.Load())
		if now.Sub(recv) >= w.opts.Idle {
			// The peer says WT_IDLE_TIMEOUT if it hears us at all; here
			// the path went silent: the connection is lost (a client
			// reconnects), not closed by either side's choice.
			w.closeWith(&SessionError{Code: CloseIdleTimeout, Lost: true,
				Reason: fmt.Sprintf("no message from the peer for %d ms", w.opts.Idle.Milliseconds())})
			return
		}
		send := time.Unix(0, w.lastSend.Load())
		if now.Sub(send) >= w.opts.Keepalive {
			if err := w.c.Write(w.ctx, websocket.MessageBinary, nil); err == nil {
				send = time.Now()
				w.lastSend.Store(send.UnixNano())
			}
		}
		next := time.Until(earlier(send.Add(w.opts.Keepalive), recv.Add(w.opts.Idle)))
		t.Reset(max(next, time.Millisecond))
	}
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// ----- listener side: the door (§4) -----

// Authorize decides a peer from the request that opened the session (path,
// query, headers, peer address) before the session is accepted. nil
// accepts; a *RefusalError (Refuse, Refused) closes as WT_UNAUTHORIZED with
// its reason before this side's frame 0; any other error means no decision
// was reached and closes as WT_NO_ERROR with ReasonAuthorizeFailed.
type Authorize func(r *http.Request) error

// ReasonAuthorizeFailed is the reason of the WT_NO_ERROR close of a
// session whose Authorize reached no decision (§4): a peer may try again.
const ReasonAuthorizeFailed = "authorize failed"

// refusal turns an authorize error into the close it causes.
func refusal(err error) (CloseCode, string) {
	var re *RefusalError
	if errors.As(err, &re) {
		return CloseUnauthorized, re.Reason
	}
	return CloseNoError, ReasonAuthorizeFailed
}

// Listener holds what every accepted session shares.
type Listener struct {
	// Contract, Feat and HandshakeTimeout go into each session's Config.
	Session Config
	// Authorize is the door; nil accepts every peer.
	Authorize Authorize
	// OriginPatterns for the WebSocket mapping's Origin check (coder/websocket).
	OriginPatterns []string
	// Compression and CompressionThreshold: how the WebSocket mapping
	// answers a client's offer of permessage-deflate (RFC 7692; the zero
	// value, websocket.CompressionDisabled, declines it). The mapping's
	// binary messages are compressed whole; nothing of §3.3 changes.
	Compression          websocket.CompressionMode
	CompressionThreshold int
	WebSocket            WebSocketOptions
	// HostOrdinal partitions datagram origins across hosts (0 for one):
	// the allocator made on first use when Origins is nil.
	HostOrdinal int
	// Origins, when set, is the allocator this listener shares with the
	// other listeners of the same session host (the WebSocket and the
	// WebTransport mapping of one daemon), so that no two of its peers
	// get the same origin (§7.3); HostOrdinal is then not used.
	Origins *SharedOrigins
	// OnRefuse is told about each refused or failed door decision.
	OnRefuse func(r *http.Request, code CloseCode, reason string)
	// OnUpgradeRefused is told about each WebSocket upgrade refused before
	// any session (the HTTP status sent, and why); the door is not run.
	OnUpgradeRefused func(r *http.Request, status int, reason string)

	mu      sync.Mutex
	origins *SharedOrigins
}

func (l *Listener) sharedOrigins() (*SharedOrigins, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.origins == nil {
		l.origins = l.Origins
	}
	if l.origins == nil {
		o, err := NewSharedOrigins(l.HostOrdinal)
		if err != nil {
			return nil, err
		}
		l.origins = o
	}
	return l.origins, nil
}

func (l *Listener) allocateOrigin() (uint32, error) {
	o, err := l.sharedOrigins()
	if err != nil {
		return 0, err
	}
	return o.Allocate()
}

func (l *Listener) releaseOrigin(v uint32) {
	if o, err := l.sharedOrigins(); err == nil {
		o.Release(v)
	}
}

// decide runs the door.
func (l *Listener) decide(r *http.Request) (ok bool, code CloseCode, reason string) {
	if l.Authorize == nil {
		return true, 0, ""
	}
	if err := l.Authorize(r); err != nil {
		code, reason = refusal(err)
		if l.OnRefuse != nil {
			l.OnRefuse(r, code, reason)
		}
		return false, code, reason
	}
	return true, 0, ""
}

// serve runs one accepted carrier: the origin, the session, the handler.
func (l *Listener) serve(car Carrier, serve func(*Session)) {
	origin, err := l.allocateOrigin()
	if err != nil {
		_ = car.Close(CloseNoError, ErrOriginsExhausted.Error())
		car.Wait()
		return
	}
	defer l.releaseOrigin(origin)
	cfg := l.Session
	cfg.Role = RoleServer
	cfg.Origin = origin
	s := Start(car, cfg)
	defer s.Wait()
	defer s.Close(CloseNoError, "")
	serve(s)
}

// WebSocketHandler serves the §3.3 mapping. It decides the door from the
// request, completes the upgrade either way (a refusal is a close, never an
// HTTP status, so the client can read the reason), and hands each accepted
// session to serve, which owns it until it returns; the session is then
// closed and its goroutines joined.
func (l *Listener) WebSocketHandler(serve func(*Session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if why := RefuseNotHTTP1(w, r); why != "" {
			if l.OnUpgradeRefused != nil {
				l.OnUpgradeRefused(r, http.StatusHTTPVersionNotSupported, why)
			}
			return
		}
		cw := &ConnWatch{ResponseWriter: w}
		sw := &StatusRecorder{ResponseWriter: cw}
		c, err := websocket.Accept(sw, r, &websocket.AcceptOptions{OriginPatterns: l.OriginPatterns,
			CompressionMode: l.Compression, CompressionThreshold: l.CompressionThreshold})
		if err != nil {
			// Accept wrote the HTTP error (426 for a request that is no
			// upgrade, 403 for a foreign origin): no session, no door.
			if l.OnUpgradeRefused != nil {
				l.OnUpgradeRefused(r, cmp.Or(sw.Status, http.StatusBadRequest), err.Error())
			}
			return
		}
		ok, code, reason := l.decide(r)
		opts := l.WebSocket
		opts.ReadErr = cw.Err
		if opts.Cork != nil {
			ck := opts.Cork(r)
			opts.Cork = func(*http.Request) Corker { return ck }
		}
		car := NewWebSocketCarrier(c, r.RemoteAddr, opts)
		if !ok {
			_ = car.Close(code, reason)
			car.Wait()
			return
		}
		l.serve(car, serve)
	})
}

// RefuseNotHTTP1 answers a WebSocket upgrade request that came over
// HTTP/2 or 3 with 505 and returns why, or returns "" for HTTP/1.x:
// websocket.Accept would answer 426 with an Upgrade header, which HTTP/2
// forbids (the client sees a stream error).
func RefuseNotHTTP1(w http.ResponseWriter, r *http.Request) string {
	if r.ProtoMajor == 1 {
		return ""
	}
	http.Error(w, "505 the WebSocket upgrade needs HTTP/1.1", http.StatusHTTPVersionNotSupported)
	return "WebSocket needs HTTP/1.1, got " + r.Proto
}

// StatusRecorder records the status an http.ResponseWriter was given (the
// first); Unwrap lets websocket.Accept reach the Hijacker beneath.
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

func (s *StatusRecorder) WriteHeader(code int) {
	if s.Status == 0 {
		s.Status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *StatusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// ProbePath answers the reference client's UDP-unreachable probe.
const ProbePath = "/.well-known/transport-io"

// ProbeHandler answers HEAD (and GET) at ProbePath with 204.
func ProbeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery != "" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// DialWebSocket opens a client session over the §3.3 mapping at url
// (ws:// or wss://). It returns once the socket is open; call
// WaitHandshake to learn whether the server accepted. An answer other than
// 101 is a *StatusError.
func DialWebSocket(ctx context.Context, url string, dopts *websocket.DialOptions, cfg Config, opts WebSocketOptions) (*Session, error) {
	c, rsp, err := websocket.Dial(ctx, url, dopts)
	if err != nil {
		if rsp != nil && rsp.StatusCode != http.StatusSwitchingProtocols {
			err = &StatusError{StatusCode: rsp.StatusCode, Err: err}
		}
		return nil, err
	}
	cfg.Role = RoleClient
	return Start(NewWebSocketCarrier(c, url, opts), cfg), nil
}
