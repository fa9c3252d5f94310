package transportio

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/qlog"
	"github.com/quic-go/webtransport-go"
)

// QUICKeepAlive and QUICIdleTimeout are the QUIC keepalive period and idle
// timeout of our WebTransport endpoints (quic-go sends no keepalives by
// default and waits 30 s): a peer that vanished (killed, its network gone)
// is noticed after QUICIdleTimeout without a packet; a live one sends at
// least two keepalives meanwhile.
const (
	QUICKeepAlive   = 5 * time.Second
	QUICIdleTimeout = 15 * time.Second
)

// QUICConfig returns the QUIC configuration of both roles: datagrams,
// partial-delivery resets (both required by webtransport-go), keepalive
// and idle timeout. With the environment variable QLOGDIR set (a
// directory), each connection writes a qlog trace there
// (<connection id>_<client|server>.sqlog: packets, losses, congestion
// window), for a developer reading what QUIC did; without it,
// CongestionLogEnv set writes only the congestion state changes to
// standard error (CongestionLog).
func QUICConfig() *quic.Config {
	c := &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true,
		KeepAlivePeriod: QUICKeepAlive, MaxIdleTimeout: QUICIdleTimeout}
	switch {
	case os.Getenv("QLOGDIR") != "":
		c.Tracer = qlog.DefaultConnectionTracer
	case os.Getenv(CongestionLogEnv) != "":
		c.Tracer = CongestionLog(congestionLogOutput)
	}
	return c
}

// wtCarrier carries a session on WebTransport over HTTP/3: every lane.
type wtCarrier struct {
	s       *webtransport.Session
	onClose func(*SessionError)

	done   chan struct{}
	once   sync.Once
	err    atomic.Pointer[SessionError]
	wg     sync.WaitGroup
	emitCh chan *webtransport.ReceiveStream
}

// NewWebTransportCarrier wraps an established WebTransport session. onClose,
// if set, runs once after the session ended, with how it ended, before
// Wait returns (a dialler closes its QUIC connection there).
func NewWebTransportCarrier(s *webtransport.Session, onClose func(*SessionError)) Carrier {
	c := &wtCarrier{s: s, onClose: onClose, done: make(chan struct{}), emitCh: make(chan *webtransport.ReceiveStream, 1)}
	c.wg.Add(1)
	go c.acceptUni()
	return c
}

func (c *wtCarrier) Kind() Kind            { return KindWebTransport }
func (c *wtCarrier) RemoteAddr() string    { return c.s.RemoteAddr().String() }
func (c *wtCarrier) Done() <-chan struct{} { return c.done }
func (c *wtCarrier) Err() *SessionError    { return c.err.Load() }
func (c *wtCarrier) Wait()                 { c.wg.Wait() }

func (c *wtCarrier) end(e *SessionError) bool {
	first := false
	c.once.Do(func() {
		first = true
		c.err.Store(e)
		close(c.done)
	})
	return first
}

func (c *wtCarrier) Close(code CloseCode, reason string) error {
	if c.end(&SessionError{Code: code, Reason: reason}) {
		_ = c.s.CloseWithError(webtransport.SessionErrorCode(code), TruncateReason(reason, MaxCloseReason))
	}
	return nil
}

// peerClosedNoError is the text of the peer's CONNECTION_CLOSE without an
// error (H3_NO_ERROR), as http3 wraps it.
var peerClosedNoError = (&quic.ApplicationError{Remote: true, ErrorCode: quic.ApplicationErrorCode(http3.ErrCodeNoError)}).Error()

// convertErr turns a webtransport error into how the session ended.
func convertErr(err error) *SessionError {
	var se *webtransport.SessionError
	if errors.As(err, &se) {
		return &SessionError{Code: CloseCode(se.ErrorCode), Reason: se.Message, Remote: se.Remote}
	}
	if ae, ok := errors.AsType[*quic.ApplicationError](err); ok && ae.Remote && ae.ErrorCode == quic.ApplicationErrorCode(http3.ErrCodeNoError) ||
		strings.Contains(err.Error(), peerClosedNoError) {
		// (http3 passes it on as text only, as the idle timeout below.)
		// The peer closed its QUIC connection on purpose, without an
		// error (a dialler does once its session ended): a close, not a
		// loss, even when the session's close capsule did not come first
		// (a client process that exits right after its close).
		return &SessionError{Code: CloseNoError, Remote: true, Reason: "the peer closed its QUIC connection"}
	}
	// http3 may pass the idle timeout on as text only (an H3_DATAGRAM_ERROR
	// whose message is the quic-go error's).
	if _, ok := errors.AsType[*quic.IdleTimeoutError](err); ok || strings.Contains(err.Error(), "no recent network activity") {
		return &SessionError{Lost: true, Reason: fmt.Sprintf("no packet from the peer for %s (QUIC idle timeout)", QUICIdleTimeout)}
	}
	if _, ok := errors.AsType[*quic.StatelessResetError](err); ok || strings.Contains(err.Error(), "received a stateless reset") {
		return &SessionError{Lost: true, Reason: "the peer no longer knows this connection (QUIC stateless reset: it restarted)"}
	}
	return &SessionError{Lost: true, Reason: err.Error()}
}

// acceptUni takes the peer's emit stream; a second uni stream is a protocol
// error (checklist 44). Its error is how the session ended.
func (c *wtCarrier) acceptUni() {
	defer c.wg.Done()
	defer func() {
		if c.onClose != nil {
			c.onClose(c.err.Load())
		}
	}()
	n := 0
	for {
		str, err := c.s.AcceptUniStream(context.Background())
		if err != nil {
			c.end(convertErr(err))
			return
		}
		n++
		if n == 1 {
			c.emitCh <- str
			continue
		}
		str.CancelRead(webtransport.StreamErrorCode(ResetNoError))
		c.Close(CloseProtocolError, "a second emit stream from the peer")
	}
}

func (c *wtCarrier) OpenEmit(ctx context.Context) (io.Writer, error) {
	str, err := c.s.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, wtErr(err)
	}
	return wtWriter{str}, nil
}

func (c *wtCarrier) AcceptEmit(ctx context.Context) (io.Reader, error) {
	select {
	case str := <-c.emitCh:
		return wtReader{str}, nil
	case <-c.done:
		return nil, c.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func wtErr(err error) error {
	var se *webtransport.SessionError
	if errors.As(err, &se) {
		return convertErr(err)
	}
	return err
}

type wtReader struct{ s *webtransport.ReceiveStream }

func (r wtReader) Read(p []byte) (int, error) {
	n, err := r.s.Read(p)
	if err != nil && err != io.EOF {
		err = wtErr(err)
	}
	return n, err
}

type wtWriter struct{ s *webtransport.SendStream }

func (w wtWriter) Write(p []byte) (int, error) {
	n, err := w.s.Write(p)
	if err != nil {
		err = wtErr(err)
	}
	return n, err
}

func (c *wtCarrier) SendDatagram(b []byte) error { return c.s.SendDatagram(b) }

func (c *wtCarrier) ReceiveDatagram(ctx context.Context) ([]byte, error) {
	return c.s.ReceiveDatagram(ctx)
}

// MaxDatagramSize is unknown ahead of a send in webtransport-go, so the
// §7.4 floor applies.
func (c *wtCarrier) MaxDatagramSize() int { return 0 }

func (c *wtCarrier) OpenCall(ctx context.Context) (CallStream, error) {
	str, err := c.s.OpenStreamSync(ctx)
	if err != nil {
		return nil, wtErr(err)
	}
	return wtStream{str}, nil
}

func (c *wtCarrier) AcceptCall(ctx context.Context) (CallStream, error) {
	str, err := c.s.AcceptStream(ctx)
	if err != nil {
		return nil, wtErr(err)
	}
	return wtStream{str}, nil
}

type wtStream struct{ s *webtransport.Stream }

// streamErr turns a webtransport stream reset into a *StreamResetError.
func streamErr(err error) error {
	var se *webtransport.StreamError
	if errors.As(err, &se) {
		return &StreamResetError{Code: ResetCode(se.ErrorCode), Remote: se.Remote}
	}
	return wtErr(err)
}

func (w wtStream) Read(p []byte) (int, error) {
	n, err := w.s.Read(p)
	if err != nil && err != io.EOF {
		err = streamErr(err)
	}
	return n, err
}

func (w wtStream) Write(p []byte) (int, error) {
	n, err := w.s.Write(p)
	if err != nil {
		err = streamErr(err)
	}
	return n, err
}
func (w wtStream) CloseWrite() error { return w.s.Close() }

// CancelRead stops reading with code c. It also expires the read deadline:
// webtransport-go does not wake a Read parked after the peer's session
// went away, and a yields responder waits for its reader to end.
func (w wtStream) CancelRead(c ResetCode) {
	w.s.CancelRead(webtransport.StreamErrorCode(c))
	_ = w.s.SetReadDeadline(time.Now())
}
func (w wtStream) CancelWrite(c ResetCode) { w.s.CancelWrite(webtransport.StreamErrorCode(c)) }

// Context ends when the send side is closed, including by the peer's
// STOP_SENDING, which cancels a call being served (checklist 55).
func (w wtStream) Context() context.Context { return w.s.Context() }

// NewWebTransportServer returns a WebTransport server over HTTP/3 only: it
// never offers WebTransport on HTTP/2 (§2), so it cannot be negotiated into
// a reliable-only mapping. mux receives the CONNECT requests; mount
// Listener.WebTransportHandler on it. checkOrigin nil allows a missing
// Origin or one equal to Host.
func NewWebTransportServer(tlsConf *tls.Config, mux http.Handler, checkOrigin func(*http.Request) bool) *webtransport.Server {
	h3 := &http3.Server{
		TLSConfig:  http3.ConfigureTLSConfig(tlsConf),
		QUICConfig: QUICConfig(),
		Handler:    mux,
	}
	return &webtransport.Server{H3: h3, CheckOrigin: checkOrigin}
}

// WebTransportHandler serves WebTransport CONNECT requests on wts: the door
// first, then the upgrade; a refused peer is closed as WT_UNAUTHORIZED
// before any stream is opened (§4, checklist 20). Each accepted session is
// handed to serve, which owns it until it returns.
func (l *Listener) WebTransportHandler(wts *webtransport.Server, serve func(*Session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 3 {
			http.Error(w, "transport-io needs WebTransport over HTTP/3", http.StatusNotImplemented)
			return
		}
		ok, code, reason := l.decide(r)
		sess, err := wts.Upgrade(w, r)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if !ok {
			_ = sess.CloseWithError(webtransport.SessionErrorCode(code), reason)
			return
		}
		l.serve(NewWebTransportCarrier(sess, nil), serve)
	})
}

// DialWebTransport opens a client session on WebTransport at url
// (https://HOST:PORT/PATH). tlsConf carries the trust (a pin via
// VerifyPeerCertificate works: QUIC always runs TLS 1.3). It returns once
// the session is established; call WaitHandshake next. An answer other
// than 200 is a *StatusError.
func DialWebTransport(ctx context.Context, rawURL string, header http.Header, tlsConf *tls.Config, cfg Config) (*Session, error) {
	// The QUIC connection is dialled here rather than by Transport.Dial,
	// which closes it the moment the session ends and so can drop the
	// session's close capsule, and with it our close code (§10.2).
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	tc := &tls.Config{}
	if tlsConf != nil {
		tc = tlsConf.Clone()
	}
	if len(tc.NextProtos) == 0 {
		tc.NextProtos = []string{http3.NextProtoH3}
	}
	tr := &webtransport.Transport{TLSClientConfig: tc, QUICConfig: QUICConfig()}
	qc := QUICConfig()
	if dl, ok := ctx.Deadline(); ok {
		// The caller's deadline bounds the handshake, not quic-go's own
		// 5 s (HandshakeIdleTimeout), shorter than a --connect-timeout.
		if d := time.Until(dl); d > 0 {
			qc.HandshakeIdleTimeout = d
		}
	}
	qconn, err := quic.DialAddrEarly(ctx, u.Host, tc, qc)
	if err != nil {
		return nil, err
	}
	// Transport.Close is not called: it only cancels session setup, and
	// it panics on a Transport that never ran Dial (golibs.md §1).
	closeConn := func() {
		_ = qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
	}
	cc, err := tr.NewClientConn(qconn)
	if err != nil {
		closeConn()
		return nil, err
	}
	rsp, sess, err := cc.Dial(ctx, rawURL, header)
	if err != nil {
		closeConn()
		if rsp != nil && rsp.StatusCode != http.StatusOK {
			err = &StatusError{StatusCode: rsp.StatusCode, Err: err}
		}
		return nil, err
	}
	cfg.Role = RoleClient
	car := NewWebTransportCarrier(sess, func(e *SessionError) {
		// Runs before the session's Wait returns, so a process that exits
		// right after its close still tells the peer. The capsule (the
		// code and reason) and what the last emits left in QUIC's buffers
		// get closeWait to go out, unless the peer ends the connection
		// sooner; then a CONNECTION_CLOSE without an error, which the
		// peer reads as a close even if the capsule was lost.
		t := time.NewTimer(closeWait(qconn.ConnectionStats()))
		select {
		case <-qconn.Context().Done():
		case <-t.C:
		}
		t.Stop()
		closeConn()
	})
	return Start(car, cfg), nil
}

// closeWait is how long a dialled connection stays open after its session
// ended, for the close capsule and the last emits to go out: two probe
// timeouts (RFC 9002 §6.2.1: smoothed RTT + 4 × its deviation + the
// 25 ms maximum ACK delay), so that a packet lost once is sent again, and
// at most CloseCapsuleGrace. About 50 ms on loopback, which every command
// over WebTransport waits before it exits.
func closeWait(st quic.ConnectionStats) time.Duration {
	pto := st.SmoothedRTT + 4*st.MeanDeviation + 25*time.Millisecond
	return min(2*pto, CloseCapsuleGrace)
}

// IsNoAnswer reports whether err is a QUIC dial that got no answer at all
// (a handshake or idle timeout): nothing listens on the UDP port, or
// something drops the packets.
func IsNoAnswer(err error) bool {
	_, hs := errors.AsType[*quic.HandshakeTimeoutError](err)
	_, idle := errors.AsType[*quic.IdleTimeoutError](err)
	return hs || idle
}

// CloseCapsuleGrace is how long a WebTransport connection stays open
// after its session ends (a dialled one; a server's at Close), so that the
// close capsule (code and reason) reaches the peer first.
const CloseCapsuleGrace = 200 * time.Millisecond
