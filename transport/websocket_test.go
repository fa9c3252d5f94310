package transport

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/internal/wstest"
	"github.com/sidecar-dev/sidecar/transportio"
)

// TestKeepaliveHungPeer: a dialled /ahp connection whose server stopped
// reading (so it answers no ping) ends once a ping went unanswered, and
// ReadMessage says so; one whose server answers stays up across several
// pings.
func TestKeepaliveHungPeer(t *testing.T) {
	keepaliveInterval, keepaliveTimeout = 150*time.Millisecond, 150*time.Millisecond
	t.Cleanup(func() { keepaliveInterval, keepaliveTimeout = KeepaliveInterval, KeepaliveTimeout })
	for _, hung := range []bool{true, false} {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			if hung {
				<-release // reads nothing: pings go unanswered
				return
			}
			ctx := c.CloseRead(context.Background()) // answers pings
			select {
			case <-ctx.Done():
			case <-release:
			}
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		mc, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil, nil, 1<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		if hung {
			_, err = mc.ReadMessage(ctx)
			if err == nil || !strings.Contains(err.Error(), "stopped answering") {
				t.Errorf("hung server: ReadMessage error %v, want one saying it stopped answering", err)
			}
		} else {
			// Several keepalive periods pass without the connection ending.
			rctx, rcancel := context.WithTimeout(ctx, 8*keepaliveInterval)
			_, err = mc.ReadMessage(rctx)
			rcancel()
			if err == nil || rctx.Err() == nil {
				t.Errorf("answering server: ReadMessage ended with %v before its deadline", err)
			}
		}
		_ = mc.Close(CloseNormal, "")
		close(release)
		srv.Close()
		cancel()
	}
}

// TestKeepaliveHungClient: without the kernel's word on the socket (a
// connection not over a CorkConn: httptest's), the /ahp endpoint ends a
// connection whose client stopped reading (so it answers no ping); the
// host's ReadMessage says why. Over a CorkConn on Linux the host keeps a
// client whose TCP acknowledges (keepalive_linux_test.go).
func TestKeepaliveHungClient(t *testing.T) {
	keepaliveInterval, keepaliveTimeout = 150*time.Millisecond, 150*time.Millisecond
	t.Cleanup(func() { keepaliveInterval, keepaliveTimeout = KeepaliveInterval, KeepaliveTimeout })
	ended := make(chan error, 1)
	srv := httptest.NewServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("t"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
		_, err := mc.ReadMessage(ctx)
		_ = mc.Close(CloseNormal, "")
		ended <- err
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer t"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow() // never reads: pings go unanswered
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "stopped answering") {
			t.Errorf("host's ReadMessage ended with %v, want one saying the client stopped answering", err)
		}
	case <-ctx.Done():
		t.Fatal("the host never gave up on a client that answers no ping")
	}
}

// TestAHPRejectStatus: OnReject is told the status the client got: 401
// for a wrong token, 426 for a request that asks for no upgrade (it was
// told 403 whatever Accept had answered).
func TestAHPRejectStatus(t *testing.T) {
	type reject struct{ status int }
	got := make(chan reject, 2)
	srv := httptest.NewServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("t"), OnReject: func(_ *http.Request, status int, _ string) {
		got <- reject{status}
	}}, func(context.Context, MessageConn) {}))
	defer srv.Close()
	for _, c := range []struct {
		token string
		want  int
	}{{"wrong", http.StatusUnauthorized}, {"t", http.StatusUpgradeRequired}} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ahp", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if r := <-got; res.StatusCode != c.want || r.status != c.want {
			t.Errorf("token %q: answered %d, OnReject told %d; want %d", c.token, res.StatusCode, r.status, c.want)
		}
	}
}

// TestTIORejectStatus: on /transport-io a request that is no upgrade is
// reported with the status it got (426), with or without a token, and the
// door (the token's refusal, a close) is not run for it.
func TestTIORejectStatus(t *testing.T) {
	upgrades := make(chan int, 2)
	refusals := make(chan string, 2)
	srv := httptest.NewServer(TIOWebSocketHandler(TIOOptions{Auth: auth.NewStatic("t"),
		OnReject: func(_ *http.Request, code transportio.CloseCode, _ string) { refusals <- code.String() },
		OnUpgradeRefused: func(_ *http.Request, status int, _ string) {
			upgrades <- status
		},
	}, func(context.Context, MessageConn) {}))
	defer srv.Close()
	for _, token := range []string{"", "t"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+TIOPath, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		var got int
		select { // the handler has returned: it was called by now, or never
		case got = <-upgrades:
		case <-time.After(5 * time.Second):
		}
		if res.StatusCode != http.StatusUpgradeRequired || got != http.StatusUpgradeRequired {
			t.Errorf("token %q: answered %d, OnUpgradeRefused told %d; want 426", token, res.StatusCode, got)
		}
	}
	select {
	case r := <-refusals:
		t.Errorf("OnReject told %s for a request that is no upgrade", r)
	default:
	}
}

// TestWebSocketOverHTTP2: a request over HTTP/2 (curl's default over TLS)
// gets 505 on both WebSocket endpoints, a status HTTP/2 can carry (426
// with an Upgrade header broke the stream).
func TestWebSocketOverHTTP2(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/ahp", AHPHandler(AcceptOptions{Auth: auth.NewStatic("t")}, func(context.Context, MessageConn) {}))
	mux.Handle(TIOPath, TIOWebSocketHandler(TIOOptions{Auth: auth.NewStatic("t")}, func(context.Context, MessageConn) {}))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for _, path := range []string{"/ahp", TIOPath} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer t")
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("%s over HTTP/2: %v", path, err)
		}
		_ = res.Body.Close()
		if res.ProtoMajor != 2 || res.StatusCode != http.StatusHTTPVersionNotSupported {
			t.Errorf("%s: %s %d, want HTTP/2 505", path, res.Proto, res.StatusCode)
		}
	}
}

// TestPeerVanished: a server whose TCP connection ends without a WebSocket
// close (it died) is worded as such on both WebSocket endpoints' clients,
// without the library's layers ("failed to get reader: failed to read
// frame header: EOF"), and the error still unwraps to io.EOF on /ahp.
func TestPeerVanished(t *testing.T) {
	const want = "the peer's TCP connection ended without a WebSocket close"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		_ = c.CloseNow() // the TCP connection ends, no close frame
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil, nil, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = mc.ReadMessage(ctx)
	if err == nil || err.Error() != want || !errors.Is(err, io.EOF) {
		t.Errorf("/ahp: ReadMessage error %v, want %q wrapping io.EOF", err, want)
	}
	_ = mc.Close(CloseNormal, "")

	// transport-io: the session is lost before its handshake (our frame
	// 0 may meet the closed socket first: then it was reset).
	_, err = DialTIOWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+TIOPath, nil, nil, false)
	if err == nil || (!strings.HasSuffix(err.Error(), want) && !strings.HasSuffix(err.Error(), "the peer's TCP connection was reset")) {
		t.Errorf("transport-io: dial error %v, want one ending %q (or: was reset)", err, want)
	}
}

// TestViolationErrors: a message over the read limit and a text message
// that is not UTF-8 each end the connection with their close code (1009,
// 1007), and ReadMessage returns a ViolationError with it: a violation,
// not a lost connection.
func TestViolationErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  []byte
		code CloseCode
	}{
		{"too big", []byte(strings.Repeat("x", 2048)), CloseMessageTooBig},
		{"not UTF-8", []byte{'"', 0xff, '"'}, CloseInvalidPayload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := make(chan error, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, nil)
				if err != nil {
					got <- err
					return
				}
				mc := NewWebSocketConn(c, r.RemoteAddr, 1024)
				_, err = mc.ReadMessage(r.Context())
				got <- err
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			if err := c.Write(ctx, websocket.MessageText, tc.msg); err != nil {
				t.Fatal(err)
			}
			_, _, rerr := c.Read(ctx) // the server's close
			if code := websocket.CloseStatus(rerr); code != websocket.StatusCode(tc.code) {
				t.Errorf("the client read %v (close %d), want close %d", rerr, code, tc.code)
			}
			serr := <-got
			if code, ok := Violation(serr); !ok || code != tc.code {
				t.Errorf("ReadMessage: %v; Violation = %d, %v, want %d, true", serr, code, ok, tc.code)
			}
		})
	}
	if _, ok := Violation(io.EOF); ok {
		t.Error("io.EOF reads as a violation")
	}
}

// TestAHPCompression: DialWebSocket offers permessage-deflate only when
// asked; AHPHandler accepts the offer (and answers without it when there
// is none); a large message crosses a compressed connection intact, in
// fewer bytes on the wire than its text.
func TestAHPCompression(t *testing.T) {
	for _, compress := range []bool{false, true} {
		type seen struct{ offer, answer string }
		seenc := make(chan seen, 1)
		var wire countingConn
		h := AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
			defer mc.Close(CloseNormal, "")
			msg, err := mc.ReadMessage(ctx)
			if err == nil {
				_ = mc.WriteMessage(ctx, msg) // echo
			}
			_, _ = mc.ReadMessage(ctx) // until the client closes
		})
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			offer := r.Header.Get("Sec-WebSocket-Extensions")
			h.ServeHTTP(&headerSpy{ResponseWriter: w, done: func(hd http.Header) {
				seenc <- seen{offer, hd.Get("Sec-WebSocket-Extensions")}
			}}, r)
		}))
		srv.Listener = &countingListener{Listener: srv.Listener, c: &wire}
		srv.Start()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		mc, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"?token=tok", nil, nil, 1<<20, compress)
		if err != nil {
			t.Fatal(err)
		}
		s := <-seenc
		t.Logf("compress %v: offer %q, answer %q", compress, s.offer, s.answer)
		if got := strings.Contains(s.offer, "permessage-deflate"); got != compress {
			t.Errorf("compress %v: offer %q", compress, s.offer)
		}
		if got := strings.Contains(s.answer, "permessage-deflate"); got != compress {
			t.Errorf("compress %v: answer %q", compress, s.answer)
		}
		// 256 KiB of base64 text, as tcp/data carries: 6 bits a character.
		raw := make([]byte, 192<<10)
		for i := range raw {
			raw[i] = byte(i*7919 + i>>5*31 + i>>11*17)
		}
		text := []byte(`{"data":"` + base64.StdEncoding.EncodeToString(raw) + `"}`)
		before := wire.read.Load()
		if err := mc.WriteMessage(ctx, text); err != nil {
			t.Fatal(err)
		}
		echo, err := mc.ReadMessage(ctx)
		if err != nil || !bytes.Equal(echo, text) {
			t.Fatalf("compress %v: echo of %d bytes: %d bytes, %v", compress, len(text), len(echo), err)
		}
		got := wire.read.Load() - before // the server read our message from the wire
		if compress && got > int64(len(text))*80/100 {
			t.Errorf("compressed: %d bytes on the wire for %d of text, want at most 80%%", got, len(text))
		}
		if !compress && got < int64(len(text)) {
			t.Errorf("uncompressed: %d bytes on the wire for %d of text", got, len(text))
		}
		_ = mc.Close(CloseNormal, "")
		cancel()
		srv.Close()
	}
}

// headerSpy calls done with the response headers when they are written.
type headerSpy struct {
	http.ResponseWriter
	done func(http.Header)
	once sync.Once
}

func (h *headerSpy) WriteHeader(code int) {
	h.once.Do(func() { h.done(h.Header()) })
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerSpy) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// countingListener counts the bytes its connections read.
type countingListener struct {
	net.Listener
	c *countingConn
}

type countingConn struct{ read atomic.Int64 }

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, n: &l.c.read}, nil
}

type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// TestCorruptCompressedMessage: a peer that negotiated permessage-deflate
// and sends a compressed message (RSV1) whose data does not inflate gets
// close 1007, and ReadMessage a ViolationError with it (the connection
// was closed 1000 as if the peer had closed it).
func TestCorruptCompressedMessage(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionContextTakeover})
		if err != nil {
			got <- err
			return
		}
		mc := NewWebSocketConn(c, r.RemoteAddr, 1<<20)
		_, err = mc.ReadMessage(r.Context())
		got <- err
	}))
	defer srv.Close()
	p := wstest.DialDeflate(t, srv.Listener.Addr().String(), "/")
	p.WriteCompressed(0x1, wstest.CorruptDeflate) // text
	if code, reason := p.ReadClose(); code != 1007 || reason != "invalid compressed data" {
		t.Errorf("close %d %q, want 1007 \"invalid compressed data\"", code, reason)
	}
	serr := <-got
	if code, ok := Violation(serr); !ok || code != CloseInvalidPayload {
		t.Errorf("ReadMessage: %v; Violation = %d, %v, want 1007", serr, code, ok)
	}
}

// TestCutCompressedMessage: on /ahp, a compressed message whose frame
// the connection's end cut short is a connection lost, not invalid
// payload data, however its bytes read: coder/websocket hands the
// inflater a cut frame's bytes still masked, and this mask makes them a
// reserved deflate block (BTYPE 11), which does not inflate, before the
// end is read (transportio.ConnWatch).
func TestCutCompressedMessage(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
		defer mc.Close(CloseNormal, "")
		_, err := mc.ReadMessage(ctx)
		got <- err
	}))
	defer srv.Close()
	p := wstest.DialDeflate(t, srv.Listener.Addr().String(), "/ahp", "Authorization: Bearer tok")
	// A stored block's header, then 100 bytes of it: a deflate prefix
	// that inflates, cut after 20 of its 105 bytes.
	payload := append([]byte{0x00, 100, 0, 0xff - 100, 0xff}, make([]byte, 100)...)
	p.WriteCompressedCut(0x1, payload, [4]byte{0x06, 0, 0, 0}, 20)
	select {
	case err := <-got:
		if _, ok := Violation(err); ok || err == nil || err.Error() != "the peer's TCP connection ended without a WebSocket close" {
			t.Errorf("ReadMessage: %v, want the connection lost (its TCP connection ended)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadMessage did not return")
	}
}

// TestCloseBoundedWithoutAnswer: the host closing an /ahp connection whose
// peer never answers the close frame (a laptop that slept) is held at most
// closeHandshakeWait, not coder/websocket's 5 s; a peer that answers is
// not waited for longer than its answer.
func TestCloseBoundedWithoutAnswer(t *testing.T) {
	closed := make(chan time.Duration, 1)
	srv := httptest.NewUnstartedServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
		start := time.Now()
		_ = mc.Close(CloseGoingAway, "resumed on another connection")
		closed <- time.Since(start)
	}))
	srv.Listener = CorkListener(srv.Listener)
	srv.Config.ConnContext = CorkContext
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, wsURL(srv), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	// The client reads nothing: the close frame is never answered.
	select {
	case took := <-closed:
		if took < closeHandshakeWait || took > closeHandshakeWait+2*time.Second {
			t.Fatalf("Close took %v, want about closeHandshakeWait (%v)", took, closeHandshakeWait)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
}
