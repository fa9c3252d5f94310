package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/transport"
	"github.com/sidecar-dev/sidecar/transport/tlscert"
	"github.com/sidecar-dev/sidecar/transportio"
)

// fakeConn is a MessageConn that records its Close.
type fakeConn struct {
	name   string
	mu     sync.Mutex
	closed []transport.CloseCode
}

func (c *fakeConn) ReadMessage(ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
func (c *fakeConn) WriteMessage(context.Context, []byte) error { return nil }
func (c *fakeConn) Peer() string                               { return c.name }
func (c *fakeConn) Close(code transport.CloseCode, _ string) error {
	c.mu.Lock()
	c.closed = append(c.closed, code)
	c.mu.Unlock()
	return nil
}

func (c *fakeConn) closes() []transport.CloseCode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]transport.CloseCode(nil), c.closed...)
}

// fakeDial is one transport's dial in a dialAuto test: it tells started
// when called, then waits for release (its outcome) or its context
// (canceled: it reports ctx.Err(), and canceled is closed).
type fakeDial struct {
	conn     *fakeConn
	started  chan struct{}
	release  chan error // nil: the handshake completes
	canceled chan struct{}
	returned chan struct{}
}

func newFakeDial(name string) *fakeDial {
	return &fakeDial{conn: &fakeConn{name: name}, started: make(chan struct{}), release: make(chan error, 1),
		canceled: make(chan struct{}), returned: make(chan struct{})}
}

func (f *fakeDial) dial(ctx context.Context) (transport.MessageConn, error) {
	close(f.started)
	defer close(f.returned)
	select {
	case err := <-f.release:
		if err != nil {
			return nil, err
		}
		return f.conn, nil
	case <-ctx.Done():
		close(f.canceled)
		return nil, ctx.Err()
	}
}

func (f *fakeDial) wasStarted() bool {
	select {
	case <-f.started:
		return true
	default:
		return false
	}
}

func (f *fakeDial) wasCanceled() bool {
	select {
	case <-f.canceled:
		return true
	default:
		return false
	}
}

// autoRace runs dialAuto with wt and ws against origin u with memory file
// mem, in a goroutine; its outcome comes on the returned channel.
func autoRace(t *testing.T, u *url.URL, wt, ws *fakeDial, mem *transportMemory) <-chan attempt {
	t.Helper()
	out := make(chan attempt, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	go func() {
		mc, err := dialAuto(ctx, u, wt.dial, ws.dial, mem)
		out <- attempt{mc: mc, err: err}
	}()
	return out
}

func waitChan[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func testMemory(t *testing.T) *transportMemory {
	return &transportMemory{path: filepath.Join(t.TempDir(), "sidecar", "transports.json")}
}

var raceURL = &url.URL{Scheme: "https", Host: "h.example:8443", Path: "/vm1/transport-io"}

// TestDialAutoRace: with nothing remembered both transports start at
// once; WebTransport wins when it completes within the grace after
// WebSocket (which is closed with 1000), WebSocket when WebTransport does
// not (which is canceled); the winner is remembered for the origin.
func TestDialAutoRace(t *testing.T) {
	t.Run("WebTransport within the grace wins", func(t *testing.T) {
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		mem := testMemory(t)
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, wt.started, "WebTransport to start")
		waitClosed(t, ws.started, "WebSocket to start at once")
		ws.release <- nil
		waitClosed(t, ws.returned, "WebSocket's handshake")
		wt.release <- nil // within the grace: microseconds later
		r := waitChan(t, out, "dialAuto")
		if r.err != nil || r.mc != wt.conn {
			t.Fatalf("dialAuto = %v, %v; want the WebTransport conn", r.mc, r.err)
		}
		if got := ws.conn.closes(); len(got) != 1 || got[0] != transport.CloseNormal {
			t.Errorf("the losing WebSocket was closed with %v, want once with 1000", got)
		}
		if got := mem.lookup(originKey(raceURL), time.Now()); got != TransportWebTransport {
			t.Errorf("remembered %q, want webtransport", got)
		}
	})
	t.Run("WebSocket after the grace", func(t *testing.T) {
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		mem := testMemory(t)
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, ws.started, "WebSocket to start")
		start := time.Now()
		ws.release <- nil
		r := waitChan(t, out, "dialAuto")
		if r.err != nil || r.mc != ws.conn {
			t.Fatalf("dialAuto = %v, %v; want the WebSocket conn", r.mc, r.err)
		}
		if waited := time.Since(start); waited < webTransportGrace {
			t.Errorf("WebSocket used after %v, before the WebTransport grace %v", waited, webTransportGrace)
		}
		if !wt.wasCanceled() {
			t.Error("the WebTransport attempt was not canceled (or not waited for)")
		}
		if len(ws.conn.closes()) != 0 {
			t.Error("the winner was closed")
		}
		if got := mem.lookup(originKey(raceURL), time.Now()); got != TransportWebSocket {
			t.Errorf("remembered %q, want websocket", got)
		}
	})
	t.Run("WebTransport first wins at once", func(t *testing.T) {
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, testMemory(t))
		waitClosed(t, ws.started, "WebSocket to start")
		wt.release <- nil
		r := waitChan(t, out, "dialAuto")
		if r.err != nil || r.mc != wt.conn || !ws.wasCanceled() {
			t.Fatalf("dialAuto = %v, %v, WebSocket canceled %v; want WebTransport, WebSocket canceled", r.mc, r.err, ws.wasCanceled())
		}
	})
	t.Run("a refused token ends the race", func(t *testing.T) {
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, testMemory(t))
		waitClosed(t, ws.started, "WebSocket to start")
		ws.release <- &transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseUnauthorized, Reason: transport.RefusalReason}}
		r := waitChan(t, out, "dialAuto")
		if r.err == nil || !strings.Contains(r.err.Error(), "refused the token") || !wt.wasCanceled() {
			t.Fatalf("dialAuto = %v (WebTransport canceled %v); want the refusal at once", r.err, wt.wasCanceled())
		}
	})
	t.Run("no decision on the token ends the race", func(t *testing.T) {
		// Over WebTransport while the WebSocket hangs (a path that takes
		// TCP and never answers): the undecided answer, at once.
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, testMemory(t))
		waitClosed(t, ws.started, "WebSocket to start")
		wt.release <- &transport.TIOCloseError{SessionError: &transportio.SessionError{Code: transportio.CloseNoError, Reason: "authorize failed", Remote: true}}
		r := waitChan(t, out, "dialAuto")
		if !Undecided(r.err) || !strings.Contains(r.err.Error(), "could not decide on the credential (WT_NO_ERROR: authorize failed)") || !ws.wasCanceled() {
			t.Fatalf("dialAuto = %v (WebSocket canceled %v); want the undecided answer at once", r.err, ws.wasCanceled())
		}
	})
}

// TestDialAutoRemembered: a remembered transport is tried alone first;
// the other starts attemptDelay later, or at once when the remembered one
// fails, and what wins then is remembered instead.
func TestDialAutoRemembered(t *testing.T) {
	key := originKey(raceURL)
	t.Run("WebSocket alone", func(t *testing.T) {
		mem := testMemory(t)
		if err := mem.remember(key, TransportWebSocket, time.Now()); err != nil {
			t.Fatal(err)
		}
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		start := time.Now()
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, ws.started, "WebSocket to start")
		ws.release <- nil
		r := waitChan(t, out, "dialAuto")
		took := time.Since(start)
		if r.err != nil || r.mc != ws.conn {
			t.Fatalf("dialAuto = %v, %v; want WebSocket", r.mc, r.err)
		}
		// Won within attemptDelay (the fake answers at once), with no
		// grace to wait: WebTransport never started. (On a machine so
		// loaded that the race took longer, it may have, and then it
		// must have been canceled.)
		switch {
		case took < attemptDelay && wt.wasStarted():
			t.Errorf("WebTransport started though WebSocket won in %v, within the attempt delay", took)
		case wt.wasStarted() && !wt.wasCanceled():
			t.Error("WebTransport started and was not canceled")
		case took >= webTransportGrace && !wt.wasStarted():
			t.Errorf("a remembered WebSocket took %v: it waited for a grace", took)
		}
	})
	t.Run("remembered WebTransport fails now", func(t *testing.T) {
		mem := testMemory(t)
		if err := mem.remember(key, TransportWebTransport, time.Now()); err != nil {
			t.Fatal(err)
		}
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, wt.started, "WebTransport to start")
		if ws.wasStarted() {
			t.Error("WebSocket started along with a remembered WebTransport")
		}
		wt.release <- errors.New("CRYPTO_ERROR: no application protocol")
		waitClosed(t, ws.started, "WebSocket to start once WebTransport failed")
		ws.release <- nil
		r := waitChan(t, out, "dialAuto")
		if r.err != nil || r.mc != ws.conn {
			t.Fatalf("dialAuto = %v, %v; want WebSocket", r.mc, r.err)
		}
		if got := mem.lookup(key, time.Now()); got != TransportWebSocket {
			t.Errorf("remembered %q, want websocket now", got)
		}
	})
	t.Run("remembered WebTransport silent now", func(t *testing.T) {
		mem := testMemory(t)
		if err := mem.remember(key, TransportWebTransport, time.Now()); err != nil {
			t.Fatal(err)
		}
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		start := time.Now()
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, ws.started, "WebSocket to start after the attempt delay")
		if d := time.Since(start); d < attemptDelay {
			t.Errorf("WebSocket started after %v, before the attempt delay %v", d, attemptDelay)
		}
		ws.release <- nil
		r := waitChan(t, out, "dialAuto")
		if r.err != nil || r.mc != ws.conn || !wt.wasCanceled() {
			t.Fatalf("dialAuto = %v, %v (WebTransport canceled %v); want WebSocket", r.mc, r.err, wt.wasCanceled())
		}
		if got := mem.lookup(key, time.Now()); got != TransportWebSocket {
			t.Errorf("remembered %q, want websocket now", got)
		}
	})
	t.Run("remembered WebSocket fails, WebTransport silent", func(t *testing.T) {
		mem := testMemory(t)
		if err := mem.remember(key, TransportWebSocket, time.Now()); err != nil {
			t.Fatal(err)
		}
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, ws.started, "WebSocket to start")
		failed := time.Now()
		ws.release <- &transport.HTTPError{StatusCode: http.StatusNotFound, Err: errors.New("expected 101")}
		waitClosed(t, wt.started, "WebTransport to start once WebSocket failed")
		r := waitChan(t, out, "dialAuto")
		if r.err == nil || !strings.Contains(r.err.Error(), "(HTTP 404)") {
			t.Fatalf("dialAuto = %v; want the WebSocket's 404", r.err)
		}
		if waited := time.Since(failed); !wt.wasCanceled() || waited < webTransportAfterWebSocket {
			t.Errorf("WebTransport canceled %v after %v; want canceled after %v, not waited out", wt.wasCanceled(), waited, webTransportAfterWebSocket)
		}
	})
	t.Run("an old WebSocket outcome races again", func(t *testing.T) {
		mem := testMemory(t)
		if err := mem.remember(key, TransportWebSocket, time.Now().Add(-rememberWebSocketFor-time.Minute)); err != nil {
			t.Fatal(err)
		}
		wt, ws := newFakeDial("wt"), newFakeDial("ws")
		out := autoRace(t, raceURL, wt, ws, mem)
		waitClosed(t, wt.started, "WebTransport to start")
		waitClosed(t, ws.started, "WebSocket to start at once")
		wt.release <- nil
		if r := waitChan(t, out, "dialAuto"); r.err != nil || r.mc != wt.conn {
			t.Fatalf("dialAuto = %v, %v; want WebTransport", r.mc, r.err)
		}
	})
}

// TestTransportMemoryFile: the file is written atomically with mode 0600,
// keeps at most memoryMaxOrigins origins (the oldest go), and a corrupt,
// foreign or oversized one reads as empty and is replaced.
func TestTransportMemoryFile(t *testing.T) {
	mem := testMemory(t)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for i := range memoryMaxOrigins + 3 {
		origin := "https://h" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ":443"
		if err := mem.remember(origin, TransportWebTransport, now.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(mem.path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	mf := mem.load()
	if len(mf.Origins) != memoryMaxOrigins {
		t.Errorf("%d origins kept, want %d", len(mf.Origins), memoryMaxOrigins)
	}
	for _, gone := range []string{"https://haa:443", "https://hba:443", "https://hca:443"} {
		if _, ok := mf.Origins[gone]; ok {
			t.Errorf("oldest origin %s kept", gone)
		}
	}
	if got := mem.lookup("https://hdc:443", now); got != TransportWebTransport { // the newest (i = 66)
		t.Errorf("newest origin: %q", got)
	}
	ents, _ := os.ReadDir(filepath.Dir(mem.path))
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temporary left)", len(ents))
	}
	for name, content := range map[string][]byte{
		"corrupt":  []byte(`{"version":1,"origins":{"https://h:443":`),
		"foreign":  []byte(`{"version":2,"origins":{"https://h:443":{"transport":"websocket","at":"2026-12-07T12:00:00Z"}}}`),
		"oversize": append([]byte(`{"version":1,"origins":{},"pad":"`), make([]byte, memoryMaxFileBytes)...),
	} {
		if err := os.WriteFile(mem.path, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := mem.lookup("https://h:443", now); got != "" {
			t.Errorf("%s file: lookup = %q, want nothing", name, got)
		}
		if err := mem.remember("https://h:443", TransportWebSocket, now); err != nil {
			t.Fatal(err)
		}
		if got := mem.lookup("https://h:443", now); got != TransportWebSocket {
			t.Errorf("%s file, rewritten: lookup = %q", name, got)
		}
	}
	var nilMem *transportMemory
	if nilMem.lookup("x", now) != "" || nilMem.remember("x", TransportWebSocket, now) != nil {
		t.Error("no memory file: not a no-op")
	}
}

// tioServer serves transport-io's WebSocket mapping over TLS at
// 127.0.0.1:PORT, and WebTransport on UDP at the same port when
// webTransport; without it, a UDP socket bound to the port takes every
// packet and never answers (a path that drops UDP). sessions tells
// each served session's end, with the close code seen.
type tioServer struct {
	url      string
	pin      string
	ended    chan transport.CloseCode
	started  chan transport.Kind
	received chan struct{} // a UDP packet reached the silent socket
}

func startTIOServer(t *testing.T, webTransport bool) *tioServer {
	t.Helper()
	cert, err := tlscert.LoadOrCreateDev(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s := &tioServer{pin: tlscert.Pin(cert), ended: make(chan transport.CloseCode, 8), started: make(chan transport.Kind, 8), received: make(chan struct{}, 1)}
	serve := func(ctx context.Context, mc transport.MessageConn) {
		s.started <- transport.KindOf(mc)
		for { // echo
			m, err := mc.ReadMessage(ctx)
			if err == nil {
				err = mc.WriteMessage(ctx, m)
			}
			if err != nil {
				s.ended <- transport.CloseStatus(err)
				return
			}
		}
	}
	opts := transport.TIOOptions{Auth: auth.NewStatic("tok")}
	srv := httptest.NewUnstartedServer(transport.TIOWebSocketHandler(opts, serve))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().(*net.TCPAddr)
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr.IP, Port: addr.Port})
	if err != nil {
		t.Skipf("UDP port %d taken: %v", addr.Port, err)
	}
	if webTransport {
		wts := transport.NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, opts, nil, serve)
		served := make(chan error, 1)
		go func() { served <- wts.Serve(udp) }()
		t.Cleanup(func() { _ = wts.Close(); <-served })
	} else {
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 2048)
			for {
				if _, _, err := udp.ReadFrom(buf); err != nil {
					return
				}
				select {
				case s.received <- struct{}{}:
				default:
				}
			}
		}()
		t.Cleanup(func() { _ = udp.Close(); <-done })
	}
	s.url = "https://" + addr.String() + "/"
	return s
}

// dial connects to s with auto, as Dial would, remembering in mem.
func (s *tioServer) dial(t *testing.T, mem *transportMemory) (transport.MessageConn, time.Duration) {
	t.Helper()
	u, err := url.Parse(s.url + "transport-io")
	if err != nil {
		t.Fatal(err)
	}
	pin, _ := tlscert.ParsePin(s.pin)
	tlsConf := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: tlscert.VerifyPin(pin)}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}}
	t.Cleanup(hc.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	mc, err := dialTransportIO(ctx, u, TransportAuto, tlsConf, http.Header{"Authorization": {"Bearer tok"}}, hc, false, mem)
	if err != nil {
		t.Fatalf("auto dial of %s: %v", s.url, err)
	}
	return mc, time.Since(start)
}

// echo sends mc a message and reads the host's echo of it: the host
// serves the session (a session closed right after its handshake may end
// before the host hands it on).
func echo(t *testing.T, mc transport.MessageConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const msg = `{"jsonrpc":"2.0","method":"x"}`
	if err := mc.WriteMessage(ctx, []byte(msg)); err != nil {
		t.Fatalf("the session does not carry a message: %v", err)
	}
	if got, err := mc.ReadMessage(ctx); err != nil || string(got) != msg {
		t.Fatalf("the host's echo: %q, %v", got, err)
	}
}

// TestDialAutoUDPDropped: a host whose QUIC port takes packets and never
// answers (a path that drops UDP) is reached over the WebSocket mapping
// in well under a second (it took the 3 s WebTransport budget), and the
// next dial goes straight to WebSocket.
func TestDialAutoUDPDropped(t *testing.T) {
	s := startTIOServer(t, false)
	mem := testMemory(t)
	mc, took := s.dial(t, mem)
	if k := transport.KindOf(mc); k != transport.KindTIOWebSocket {
		t.Fatalf("connected over %s, want the WebSocket mapping", k)
	}
	if took > time.Second {
		t.Errorf("auto took %v with UDP unanswered, want under 1 s", took)
	}
	waitChan(t, s.received, "the WebTransport attempt's first packet") // it was tried
	t.Logf("first auto dial, UDP unanswered: %v", took)
	echo(t, mc)
	_ = mc.Close(transport.CloseNormal, "")
	if code := waitChan(t, s.ended, "the session's end"); code != transport.CloseNormal {
		t.Errorf("host saw the session end with %d, want 1000", code)
	}
	if got := mem.lookup(originKey(mustURL(t, s.url+"transport-io")), time.Now()); got != TransportWebSocket {
		t.Fatalf("remembered %q, want websocket", got)
	}

	mc, took = s.dial(t, mem)
	if k := transport.KindOf(mc); k != transport.KindTIOWebSocket {
		t.Fatalf("second dial over %s, want the WebSocket mapping", k)
	}
	t.Logf("second auto dial, WebSocket remembered: %v", took)
	if took > webTransportGrace+attemptDelay {
		t.Errorf("second dial took %v: the remembered WebSocket was not tried first", took)
	}
	echo(t, mc)
	_ = mc.Close(transport.CloseNormal, "")
	waitChan(t, s.ended, "the second session's end")
}

// TestDialAutoBothAnswer: with WebTransport and WebSocket both answering,
// auto uses WebTransport; a WebSocket session the race opened too is
// closed, so that once the winner closes every session the host started
// has ended (one left open would hang here). It has not initialized, so a
// host keeps nothing of it (host.shouldRetain).
func TestDialAutoBothAnswer(t *testing.T) {
	s := startTIOServer(t, true)
	mem := testMemory(t)
	mc, took := s.dial(t, mem)
	t.Logf("auto dial, both answering: %v", took)
	if k := transport.KindOf(mc); k != transport.KindWebTransport {
		t.Fatalf("connected over %s, want WebTransport", k)
	}
	echo(t, mc)
	_ = mc.Close(transport.CloseNormal, "")
	started, ended := map[transport.Kind]int{}, 0
	// The winner's session starts on the host for sure; wait for it, and
	// for every session started to end.
	for total := 0; started[transport.KindWebTransport] == 0 || ended < total; {
		select {
		case k := <-s.started:
			started[k]++
			total++
		case code := <-s.ended:
			ended++
			if code != transport.CloseNormal && code != -1 {
				t.Errorf("a session ended with %d, want 1000 (or lost, for a loser canceled mid-handshake)", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("sessions started %v, %d ended: one stays open", started, ended)
		}
	}
	if started[transport.KindWebTransport] != 1 || started[transport.KindTIOWebSocket] > 1 {
		t.Errorf("sessions started: %v, want one WebTransport and at most one WebSocket", started)
	}
	if got := mem.lookup(originKey(mustURL(t, s.url+"transport-io")), time.Now()); got != TransportWebTransport {
		t.Errorf("remembered %q, want webtransport", got)
	}
}

func mustURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
