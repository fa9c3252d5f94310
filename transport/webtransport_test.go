package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
	"github.com/sidecar-dev/sidecar/transportio"
)

// echoServe echoes every AHP message until the connection ends.
func echoServe(ctx context.Context, mc MessageConn) {
	defer mc.Close(CloseNormal, "")
	for {
		m, err := mc.ReadMessage(ctx)
		if err != nil {
			return
		}
		if mc.WriteMessage(ctx, m) != nil {
			return
		}
	}
}

func devCert(t *testing.T) (tls.Certificate, string) {
	c, err := tlscert.LoadOrCreateDev(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c, tlscert.Pin(c)
}

func pinned(t *testing.T, pin string) *tls.Config {
	p, err := tlscert.ParsePin(pin)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: tlscert.VerifyPin(p)}
}

func roundTrip(t *testing.T, mc MessageConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, `{"jsonrpc":"2.0","method":"x","params":{"s":"☃"}}`} {
		if err := mc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		got, err := mc.ReadMessage(ctx)
		if err != nil || string(got) != m {
			t.Fatalf("echo %q %v", got, err)
		}
	}
}

// serveWT serves WebTransport (token "tok", cert) with serve on pc, a new
// loopback UDP socket when nil, with key as its stateless reset key when
// not nil. stop closes the server and waits for Serve to return; it runs
// at cleanup too, once.
func serveWT(t *testing.T, cert tls.Certificate, pc *net.UDPConn, key *[32]byte, serve func(context.Context, MessageConn)) (udp *net.UDPConn, stop func()) {
	t.Helper()
	if pc == nil {
		var err error
		if pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	srv := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, TIOOptions{Auth: auth.NewStatic("tok")}, nil, serve)
	if key != nil {
		srv.SetStatelessResetKey(*key)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			<-served
		})
	}
	t.Cleanup(stop)
	return pc, stop
}

// WebTransport listener and dialler, with the --cert-hash pin over QUIC
// (TLS 1.3) and the token refusal (WT_UNAUTHORIZED, final).
func TestWebTransportMessageConn(t *testing.T) {
	cert, pin := devCert(t)
	udp, _ := serveWT(t, cert, nil, nil, echoServe)
	url := "https://" + udp.LocalAddr().String() + TIOPath
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	mc, err := DialWebTransport(ctx, url, http.Header{"Authorization": {"Bearer tok"}}, pinned(t, pin))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, mc)
	mc.Close(CloseNormal, "")

	_, err = DialWebTransport(ctx, url+"?token=wrong", nil, pinned(t, pin))
	if !IsUnauthorized(err) || CloseReason(err) != RefusalReason {
		t.Fatalf("wrong token: %v", err)
	}

	_, err = DialWebTransport(ctx, url, http.Header{"Authorization": {"Bearer tok"}}, pinned(t, strings.Repeat("00", 32)))
	if err == nil || !strings.Contains(err.Error(), "pin") {
		t.Fatalf("wrong pin: %v", err)
	}
}

// TIOOptions.Path moves the WebTransport endpoint (listener.base_path):
// sessions are served there, and TIOPath itself answers 404.
func TestWebTransportPath(t *testing.T) {
	cert, pin := devCert(t)
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, TIOOptions{Auth: auth.NewStatic("tok"), Path: "/vm1" + TIOPath}, nil, echoServe)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(pc) }()
	defer func() {
		srv.Close()
		<-served
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := "https://" + pc.LocalAddr().String()
	auth := http.Header{"Authorization": {"Bearer tok"}}
	mc, err := DialWebTransport(ctx, base+"/vm1"+TIOPath, auth, pinned(t, pin))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, mc)
	mc.Close(CloseNormal, "")
	_, err = DialWebTransport(ctx, base+TIOPath, auth, pinned(t, pin))
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusNotFound {
		t.Fatalf("dial at the root path: %v, want HTTP 404", err)
	}
}

// The WebSocket mapping behind the token, and the close-code mapping seen
// through CloseStatus.
func TestTIOWebSocketMessageConn(t *testing.T) {
	closing := make(chan struct{})
	mux := http.NewServeMux()
	mux.Handle(TIOPath, TIOWebSocketHandler(TIOOptions{Auth: auth.NewStatic("tok")}, func(ctx context.Context, mc MessageConn) {
		echoServe(ctx, &closeAfter{MessageConn: mc, n: 2, closing: closing})
	}))
	mux.Handle(transportio.ProbePath, ProbeHandler())
	hs := httptest.NewServer(mux)
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + TIOPath

	if _, err := DialTIOWebSocket(ctx, url, nil, nil, false); !IsUnauthorized(err) {
		t.Fatalf("no token: %v", err)
	}
	mc, err := DialTIOWebSocket(ctx, url+"?token=tok", nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, mc)
	_, err = mc.ReadMessage(ctx)
	if CloseStatus(err) != CloseGoingAway || CloseReason(err) != "server shutting down" {
		t.Fatalf("after the server's close: %v (status %d)", err, CloseStatus(err))
	}
	mc.Close(CloseNormal, "")

	req, _ := http.NewRequest(http.MethodHead, hs.URL+transportio.ProbePath, nil)
	rsp, err := http.DefaultClient.Do(req)
	if err != nil || rsp.StatusCode != http.StatusNoContent {
		t.Fatalf("probe: %v %v", rsp, err)
	}
	rsp.Body.Close()
}

// closeAfter closes with CloseGoingAway after n writes.
type closeAfter struct {
	MessageConn
	n       int
	closing chan struct{}
}

func (c *closeAfter) WriteMessage(ctx context.Context, m []byte) error {
	err := c.MessageConn.WriteMessage(ctx, m)
	if c.n--; c.n == 0 {
		c.MessageConn.Close(CloseGoingAway, "")
		return errors.New("closed")
	}
	return err
}

func TestCloseMapping(t *testing.T) {
	cases := []struct {
		in   CloseCode
		out  transportio.CloseCode
		back CloseCode
	}{
		{CloseNormal, 0, CloseNormal}, {CloseProtocolError, 1004, CloseProtocolError},
		{CloseMessageTooBig, 1004, CloseProtocolError}, {ClosePeerTooSlow, 1003, ClosePeerTooSlow},
		{CloseInternalError, 0, CloseInternalError}, {CloseVersionMismatch, 0, CloseNormal},
	}
	for _, c := range cases {
		got, r := ToTIOClose(c.in, "x")
		if got != c.out || FromTIOClose(got, r) != c.back {
			t.Errorf("%d → %d → %d", c.in, got, FromTIOClose(got, r))
		}
	}
	if FromTIOClose(transportio.CloseUnauthorized, "") != 4007 {
		t.Error("1007 → 4007")
	}
	// A client that gives a link up closes 1011 "connection lost": the host
	// reads it back as such (a loss, its state kept), not as 1000 (a
	// detach), and the reason is said once.
	if code, r := ToTIOClose(CloseInternalError, "connection lost"); code != 0 || r != "internal error: connection lost" {
		t.Errorf("1011 connection lost → %d %q", code, r)
	}
	if _, r := ToTIOClose(CloseInternalError, "internal error: x"); r != "internal error: x" {
		t.Errorf("reason prefixed twice: %q", r)
	}
}

// Checklist 48: a call on the sidecar's contract (no call events) gets a
// CALL_ERROR WT_UNKNOWN_EVENT and FIN; the session stays up.
func TestWebTransportCallRefused(t *testing.T) {
	cert, _ := devCert(t)
	udp, _ := serveWT(t, cert, nil, nil, echoServe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := transportio.DialWebTransport(ctx, "https://"+udp.LocalAddr().String()+TIOPath+"?token=tok", nil,
		&tls.Config{InsecureSkipVerify: true}, transportio.Config{Contract: Contract})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Wait()
	defer s.Close(transportio.CloseNoError, "")
	if err := s.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := transportio.OpenCallForTest(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = st.Write(transportio.AppendFrame(nil, transportio.Frame{Type: transportio.FrameCallRequest, Codec: transportio.CodecJSON, EventID: transportio.EventID(rpc.EventAHP), Payload: []byte("{}")}))
	_ = st.CloseWrite()
	f, err := transportio.NewDecoder(st).Next()
	if err != nil || f.Type != transportio.FrameCallError || !strings.Contains(string(f.Payload), `"code":"WT_UNKNOWN_EVENT"`) {
		t.Fatalf("answer %+v %v", f, err)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}

// TestWebTransportStatelessReset: a server that comes back with the same
// stateless reset key after its previous run vanished (its socket gone,
// no CONNECTION_CLOSE sent) resets the connections that run held as soon
// as a client sends, so the client learns at once that its connection is
// gone, not after the 15 s idle timeout.
func TestWebTransportStatelessReset(t *testing.T) {
	cert, pin := devCert(t)
	key := [32]byte{7}
	udp1, _ := serveWT(t, cert, nil, &key, echoServe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := DialWebTransport(ctx, "https://"+udp1.LocalAddr().String()+TIOPath, http.Header{"Authorization": {"Bearer tok"}}, pinned(t, pin))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(CloseNormal, "")
	roundTrip(t, mc)

	_ = udp1.Close() // the first run vanishes
	udp2, err := net.ListenUDP("udp", udp1.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	serveWT(t, cert, udp2, &key, echoServe)
	// Well below the idle timeout: only a stateless reset ends it in time.
	rctx, rcancel := context.WithTimeout(ctx, transportio.QUICIdleTimeout/3)
	defer rcancel()
	_ = mc.WriteMessage(rctx, []byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}`))
	_, err = mc.ReadMessage(rctx)
	if err == nil || rctx.Err() != nil || !strings.Contains(err.Error(), "stateless reset") {
		t.Fatalf("ReadMessage after the server restarted: %v (deadline: %v); want a stateless reset at once", err, rctx.Err())
	}
}

// TestWebTransportShutdownReason: a server that closes its sessions as
// going away (the host's shutdown) and then Close at once still lets the
// close capsule out: the client reads 1001, not a lost connection.
func TestWebTransportShutdownReason(t *testing.T) {
	cert, pin := devCert(t)
	accepted := make(chan MessageConn, 1)
	release := make(chan struct{})
	udp, stop := serveWT(t, cert, nil, nil, func(ctx context.Context, mc MessageConn) {
		accepted <- mc
		<-release
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := DialWebTransport(ctx, "https://"+udp.LocalAddr().String()+TIOPath, http.Header{"Authorization": {"Bearer tok"}}, pinned(t, pin))
	if err != nil {
		t.Fatal(err)
	}
	defer mc.Close(CloseNormal, "")
	smc := <-accepted
	_ = smc.Close(CloseGoingAway, "server shutting down") // as the host does
	close(release)
	stop()
	_, err = mc.ReadMessage(ctx)
	if code := CloseStatus(err); code != CloseGoingAway {
		t.Fatalf("client read %v (close code %d), want %d", err, code, CloseGoingAway)
	}
}
