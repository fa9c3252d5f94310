// Package conntypes runs one test body over every transport a client can
// reach the host by (as yamux's testConnTypes does): the in-memory pipe,
// plain AHP over WebSocket (/ahp, with its binary subprotocol), the
// transport-io WebSocket mapping, and transport-io over WebTransport
// (HTTP/3 over loopback UDP). Each gives the test the client's end of a
// fresh connection whose other end the test's serve function serves, as
// `sidecar serve` does; Lose ends a connection as a lost network does.
// Tests only.
package conntypes

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
	"github.com/sidecar-dev/sidecar/transportio"
)

// Token is the bearer token of the real transports' listeners.
const Token = "conntypes-token"

// dialTimeout bounds one dial.
const dialTimeout = 10 * time.Second

// Type is one way to reach a host.
type Type struct {
	// Name names it in subtests: "pipe", "ahp", "tio-websocket",
	// "webtransport".
	Name string
	// Binary says the connection carries data messages in their binary
	// form (transport.CarriesBinary).
	Binary bool
	// Listen starts a listener serving each connection with serve, and
	// returns a dial function for new client connections to it; both end
	// at t's cleanup.
	Listen func(t testing.TB, serve func(ctx context.Context, mc transport.MessageConn)) (dial func(t testing.TB) transport.MessageConn)
}

// All is every Type.
var All = []Type{Pipe, AHP, TIOWebSocket, WebTransport}

// Run runs body once per Type, each a subtest named after it.
func Run(t *testing.T, body func(t *testing.T, ct Type)) {
	for _, ct := range All {
		t.Run(ct.Name, func(t *testing.T) { body(t, ct) })
	}
}

// Pipe is transport.Pipe: no network at all.
var Pipe = Type{Name: "pipe", Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	return func(t testing.TB) transport.MessageConn {
		a, b := transport.Pipe(64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ctx, b)
		}()
		t.Cleanup(func() { _ = a.Close(transport.CloseNormal, "") })
		losable(t, a, func() { _ = a.Close(transport.CloseInternalError, "conntypes: lost") })
		return a
	}
}}

// AHP is plain AHP over WebSocket (/ahp), the sidecar client's binary
// subprotocol chosen.
var AHP = Type{Name: "ahp", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	srv := httptest.NewUnstartedServer(transport.AHPHandler(transport.AcceptOptions{Auth: auth.NewStatic(Token), ReadLimit: 2 << 20}, serve))
	// As sidecar serve does: each connection a CorkConn the handler finds.
	srv.Listener = transport.CorkListener(srv.Listener)
	srv.Config.ConnContext = transport.CorkContext
	srv.Start()
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ahp"
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		client, raw := tcpClient(t)
		mc, err := transport.DialWebSocket(ctx, url, bearer(), client, 2<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close(transport.CloseNormal, "") })
		losable(t, mc, func() { _ = raw().Close() })
		return mc
	}
}}

// TIOWebSocket is transport-io's WebSocket mapping (/transport-io).
var TIOWebSocket = Type{Name: "tio-websocket", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	srv := httptest.NewServer(transport.TIOWebSocketHandler(transport.TIOOptions{Auth: auth.NewStatic(Token)}, serve))
	t.Cleanup(srv.Close)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + transport.TIOPath
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		client, raw := tcpClient(t)
		mc, err := transport.DialTIOWebSocket(ctx, url, bearer(), client, false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = mc.Close(transport.CloseNormal, "") })
		losable(t, mc, func() { _ = raw().Close() })
		return mc
	}
}}

// WebTransport is transport-io over WebTransport (HTTP/3, QUIC over a
// loopback UDP socket), with a development certificate pinned by its
// SHA-256. Its dial is transport.DialWebTransport's, done here to keep the
// QUIC connection for Lose.
var WebTransport = Type{Name: "webtransport", Binary: true, Listen: func(t testing.TB, serve func(context.Context, transport.MessageConn)) func(testing.TB) transport.MessageConn {
	cert, err := tlscert.LoadOrCreateDev(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pin, err := tlscert.ParsePin(tlscert.Pin(cert))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := transport.NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, transport.TIOOptions{Auth: auth.NewStatic(Token)}, nil, serve)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-served
	})
	url := "https://" + pc.LocalAddr().String() + transport.TIOPath
	return func(t testing.TB) transport.MessageConn {
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		defer cancel()
		mc, s, qconn, err := dialWebTransport(ctx, url, &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: tlscert.VerifyPin(pin)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = mc.Close(transport.CloseNormal, "")
			s.Wait()
			// The session is over: its QUIC connection need not wait out
			// transportio.CloseCapsuleGrace, which the listener's Close
			// would wait for.
			_ = qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		})
		// Not H3_NO_ERROR: the peer reads that as a close (a client that
		// exited right after its own), not a loss.
		losable(t, mc, func() {
			_ = qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "conntypes: lost")
		})
		return mc
	}
}}

func bearer() http.Header { return http.Header{"Authorization": {"Bearer " + Token}} }

// Connect dials a connection over ct whose other end serve serves, and
// returns the client's end. The connections one test makes over ct come
// through one listener, as many clients reach one `sidecar serve` (and
// its cost, such as WebTransport's close grace, is paid once); it closes
// when the test ends. Connect is for one goroutine of the test at a time.
func Connect(t testing.TB, ct Type, serve func(ctx context.Context, mc transport.MessageConn)) transport.MessageConn {
	t.Helper()
	key := sharedKey{t, ct.Name}
	v, ok := shared.Load(key)
	if !ok {
		l := &sharedListener{next: make(chan func(context.Context, transport.MessageConn))}
		l.dial = ct.Listen(t, func(ctx context.Context, mc transport.MessageConn) {
			select {
			case serve := <-l.next:
				serve(ctx, mc)
			case <-time.After(dialTimeout):
				_ = mc.Close(transport.CloseInternalError, "conntypes: a connection nobody dialled")
			}
		})
		shared.Store(key, l)
		t.Cleanup(func() { shared.Delete(key) })
		v = l
	}
	l := v.(*sharedListener)
	// One dial at a time: the next connection the listener serves is
	// this one.
	l.mu.Lock()
	defer l.mu.Unlock()
	mc := l.dial(t)
	select {
	case l.next <- serve:
	case <-time.After(dialTimeout):
		t.Fatalf("conntypes: the %s listener did not serve the connection", ct.Name)
	}
	return mc
}

// shared holds the listener of each test and Type that Connect uses.
var shared sync.Map // sharedKey → *sharedListener

type sharedKey struct {
	t    testing.TB
	name string
}

type sharedListener struct {
	mu   sync.Mutex
	dial func(testing.TB) transport.MessageConn
	next chan func(context.Context, transport.MessageConn)
}

// Lose ends mc, the client's end of a connection a Type's dial returned,
// as a lost network does, and returns at once. The host hears no close
// from the client: its read fails as when a cable is cut
// (transport.CloseStatus -1), and it keeps the client's state for a
// reconnect.
//
//   - ahp, tio-websocket: the TCP connection under the WebSocket is
//     closed, with no WebSocket close (the host reads EOF);
//   - webtransport: the QUIC connection under the session is closed, with
//     no WebTransport or transport-io close;
//   - pipe: an in-memory pipe cannot be lost; it is closed with
//     transport.CloseInternalError, a code the host takes for a loss as
//     well (neither a normal close nor a violation).
//
// mc.Close(transport.CloseInternalError, ...) is no substitute on
// transport-io, which carries its own close codes only and maps that one
// to WT_NO_ERROR, a normal close: the host would take it for a detach.
func Lose(t testing.TB, mc transport.MessageConn) {
	t.Helper()
	f, ok := losers.Load(mc)
	if !ok {
		t.Fatalf("conntypes.Lose: %T was not dialled by a conntypes.Type", mc)
	}
	f.(func())()
}

// losers maps each open client connection to how Lose ends it.
var losers sync.Map

func losable(t testing.TB, mc transport.MessageConn, lose func()) {
	losers.Store(mc, lose)
	t.Cleanup(func() { losers.Delete(mc) })
}

// tcpClient returns an HTTP client whose connections are dialled plainly,
// and a func that returns the last one: the TCP connection under a
// WebSocket, for Lose.
func tcpClient(t testing.TB) (*http.Client, func() net.Conn) {
	var mu sync.Mutex
	var last net.Conn
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			last = c
			mu.Unlock()
		}
		return c, err
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, func() net.Conn {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// dialWebTransport is transport.DialWebTransport (transportio's dial and
// the client's session), returning the session (whose goroutines the
// caller waits for after Close, as transport's own dials do in Close) and
// the QUIC connection too.
func dialWebTransport(ctx context.Context, rawURL string, tlsConf *tls.Config) (transport.MessageConn, *transportio.Session, *quic.Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, nil, err
	}
	tc := tlsConf.Clone()
	tc.NextProtos = []string{http3.NextProtoH3}
	qconn, err := quic.DialAddrEarly(ctx, u.Host, tc, transportio.QUICConfig())
	if err != nil {
		return nil, nil, nil, err
	}
	closeConn := func() { _ = qconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "") }
	cc, err := (&webtransport.Transport{TLSClientConfig: tc, QUICConfig: transportio.QUICConfig()}).NewClientConn(qconn)
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	_, sess, err := cc.Dial(ctx, rawURL, bearer())
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	s := transportio.Start(transportio.NewWebTransportCarrier(sess, func(*transportio.SessionError) {
		time.AfterFunc(transportio.CloseCapsuleGrace, closeConn) // the close capsule first, as transportio's dial does
	}), transportio.Config{Contract: transport.Contract, PayloadsChecked: true, Role: transportio.RoleClient})
	if err := s.WaitHandshake(ctx); err != nil {
		s.Close(transportio.CloseNoError, "")
		s.Wait()
		return nil, nil, nil, err
	}
	return transport.NewTIOConn(s), s, qconn, nil
}
