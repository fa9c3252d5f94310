package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/sidecar-dev/sidecar/auth"
)

// shortKeepalive makes both ends' keepalive check after 100 ms with
// nothing read and wait 100 ms for a pong, for the test.
func shortKeepalive(t *testing.T) {
	keepaliveInterval, keepaliveTimeout = 100*time.Millisecond, 100*time.Millisecond
	t.Cleanup(func() { keepaliveInterval, keepaliveTimeout = KeepaliveInterval, KeepaliveTimeout })
}

// corkedAHP serves AHPHandler (token "t") on loopback as sidecar serve
// does: connections are CorkConns, recorded in the requests' context.
// It returns the ws:// URL and the accepted TCP connections, in order.
func corkedAHP(t *testing.T, serve func(ctx context.Context, mc MessageConn)) (string, <-chan *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *net.TCPConn, 4)
	srv := httptest.NewUnstartedServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("t"), ReadLimit: 1 << 20}, serve))
	srv.Listener = CorkListener(recordingListener{ln, accepted})
	srv.Config.ConnContext = CorkContext
	srv.Start()
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http"), accepted
}

type recordingListener struct {
	net.Listener
	accepted chan<- *net.TCPConn
}

func (l recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		select {
		case l.accepted <- tc:
		default:
		}
	}
	return c, err
}

var authT = http.Header{"Authorization": {"Bearer t"}}

// blackHole makes c's TCP connection a black hole both ways, as a dead
// route or a laptop asleep: c's socket now demands a TCP MD5 signature
// (RFC 2385) from its peer, so its kernel drops every segment the peer
// sends, and signs its own, which the peer's kernel (expecting none)
// drops. Nothing is acknowledged and nothing is reset. No privilege is
// needed; a kernel without TCP MD5 skips the test.
func blackHole(t *testing.T, c *net.TCPConn) {
	t.Helper()
	peer := c.RemoteAddr().(*net.TCPAddr)
	var sig unix.TCPMD5Sig
	sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(&sig.Addr))
	sa.Family = unix.AF_INET
	copy(sa.Addr[:], peer.IP.To4())
	sig.Keylen = 8
	copy(sig.Key[:], "blackhol")
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptTCPMD5Sig(int(fd), unix.IPPROTO_TCP, unix.TCP_MD5SIG, &sig)
	}); err != nil {
		t.Fatal(err)
	}
	if serr != nil {
		t.Skipf("no TCP MD5 signatures here (%v): cannot make a black hole", serr)
	}
}

// await polls cond (a counter or the kernel's state, which notify no
// one) until it holds, failing t after 10 s.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// floodMessage is message i of a flood: its number, then padding to 16 KiB.
func floodMessage(i int) []byte {
	return []byte(fmt.Sprintf("%08d", i) + strings.Repeat(".", 16<<10-8))
}

// TestKeepaliveSlowReader: a client that reads nothing for 40 keepalive
// periods while the host floods it (its reader busy: a terminal that
// cannot keep up) is not dropped by either end's keepalive: the host's
// socket is full and the client's kernel acknowledges (the host's TCP
// says so), and the client has bytes of the host's waiting unread. Once
// it reads again it gets every message, in order, and both ways still
// work.
func TestKeepaliveSlowReader(t *testing.T) {
	shortKeepalive(t)
	const total = 512 // 8 MiB: far more than both sockets hold
	hostEnd := make(chan error, 1)
	url, _ := corkedAHP(t, func(ctx context.Context, mc MessageConn) {
		flooded := make(chan error, 1)
		go func() {
			for i := range total {
				if err := mc.WriteMessage(ctx, floodMessage(i)); err != nil {
					flooded <- err
					return
				}
			}
			flooded <- nil
		}()
		msg, err := mc.ReadMessage(ctx)
		if ferr := <-flooded; err == nil {
			err = ferr
		}
		if err == nil {
			err = mc.WriteMessage(ctx, append([]byte("echo "), msg...))
		}
		hostEnd <- err
		_, _ = mc.ReadMessage(ctx) // until the client closes
		_ = mc.Close(CloseNormal, "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mc, err := DialWebSocket(ctx, url, authT, nil, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Close(CloseNormal, "") }()
	// The reader stops: 40 keepalive periods pass with nothing read (the
	// hole's length is what is tested, not a synchronization).
	<-time.After(40 * keepaliveInterval)
	select {
	case err := <-hostEnd:
		t.Fatalf("the host's end stopped while the client was only slow: %v", err)
	default:
	}
	for i := range total {
		b, err := mc.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("the client's read of message %d after the pause: %v", i, err)
		}
		if want := fmt.Sprintf("%08d", i); string(b[:8]) != want || len(b) != 16<<10 {
			t.Fatalf("message %d is %q… (%d bytes), want %s… (16384)", i, b[:8], len(b), want)
		}
	}
	if err := mc.WriteMessage(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if b, err := mc.ReadMessage(ctx); err != nil || string(b) != "echo still here" {
		t.Fatalf("after the pause: read %q, %v; want the host's echo", b, err)
	}
	if err := <-hostEnd; err != nil {
		t.Fatalf("the host's end: %v", err)
	}
}

// TestKeepaliveHostKeepsSilentReader: a client whose program reads
// nothing at all (a plain WebSocket client, no keepalive of its own)
// while its kernel acknowledges everything, and holds what the host sent
// unread, is kept by the host round after round; it answers once it
// reads again.
func TestKeepaliveHostKeepsSilentReader(t *testing.T) {
	shortKeepalive(t)
	conns := make(chan *wsConn, 1)
	read := make(chan string, 1)
	url, _ := corkedAHP(t, func(ctx context.Context, mc MessageConn) {
		conns <- mc.(*wsConn)
		if err := mc.WriteMessage(ctx, []byte("hello")); err != nil {
			read <- err.Error()
			return
		}
		b, err := mc.ReadMessage(ctx)
		if err != nil {
			read <- err.Error()
		} else {
			read <- string(b)
		}
		_ = mc.Close(CloseNormal, "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: authT})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	host := <-conns
	await(t, "the host finding the client alive 10 times", func() bool { return host.slow.Load() >= 10 })
	typ, b, err := c.Read(ctx) // answers the pings waiting behind it, too
	if err != nil || typ != websocket.MessageText || string(b) != "hello" {
		t.Fatalf("client read %v %q %v, want hello", typ, b, err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("back")); err != nil {
		t.Fatal(err)
	}
	if got := <-read; got != "back" {
		t.Fatalf("the host read %q, want back", got)
	}
}

// TestKeepaliveDeadPeer: a peer that is gone without a word (its link a
// black hole: no TCP acknowledgement) is still given up on, by each end,
// and ReadMessage says why; the host also gives up on a client it found
// slow (its socket full) once that client's kernel stops answering the
// window probes.
func TestKeepaliveDeadPeer(t *testing.T) {
	shortKeepalive(t)
	t.Run("idle", func(t *testing.T) {
		ended := make(chan error, 1)
		url, _ := corkedAHP(t, func(ctx context.Context, mc MessageConn) {
			_, err := mc.ReadMessage(ctx)
			ended <- err
			_ = mc.Close(CloseNormal, "")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		mc, err := DialWebSocket(ctx, url, authT, nil, 1<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = mc.Close(CloseNormal, "") }()
		blackHole(t, mc.(*wsConn).cork.Conn.(*net.TCPConn))
		const want = "the peer stopped answering: its TCP acknowledged nothing for"
		if _, err := mc.ReadMessage(ctx); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("the client's ReadMessage: %v, want %q…", err, want)
		}
		if err := <-ended; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("the host's ReadMessage: %v, want %q…", err, want)
		}
	})
	t.Run("slow then gone", func(t *testing.T) {
		conns := make(chan *wsConn, 1)
		ended := make(chan error, 1)
		url, _ := corkedAHP(t, func(ctx context.Context, mc MessageConn) {
			conns <- mc.(*wsConn)
			go func() {
				for i := 0; ; i++ {
					if mc.WriteMessage(ctx, floodMessage(i)) != nil {
						return
					}
				}
			}()
			_, err := mc.ReadMessage(ctx)
			ended <- err
			_ = mc.Close(CloseNormal, "")
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		mc, err := DialWebSocket(ctx, url, authT, nil, 1<<20, false)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = mc.(*wsConn).c.CloseNow() }() // no close handshake through the hole
		host := <-conns
		await(t, "the host finding the client slow twice", func() bool { return host.slow.Load() >= 2 })
		select {
		case err := <-ended:
			t.Fatalf("the host gave up on a slow client: %v", err)
		default:
		}
		blackHole(t, mc.(*wsConn).cork.Conn.(*net.TCPConn))
		const want = "the peer stopped answering: its TCP acknowledged nothing for"
		if err := <-ended; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("the host's ReadMessage: %v, want %q…", err, want)
		}
	})
}

// TestNoPongBehindFullSocket: a ping that reaches the host while its
// socket to the client is full (the client reads nothing) is not
// answered, rather than its pong waiting behind data the client does not
// take: coder/websocket gives a control frame 5 s, then fails the read,
// which ended the connection of a merely slow client. The host's reader
// goes on at once with what follows the ping.
func TestNoPongBehindFullSocket(t *testing.T) {
	conns := make(chan *wsConn, 1)
	read := make(chan error, 1)
	url, _ := corkedAHP(t, func(ctx context.Context, mc MessageConn) {
		conns <- mc.(*wsConn)
		go func() {
			for i := 0; ; i++ {
				if mc.WriteMessage(ctx, floodMessage(i)) != nil {
					return
				}
			}
		}()
		b, err := mc.ReadMessage(ctx)
		if err == nil && string(b) != "after the ping" {
			err = fmt.Errorf("read %q", b)
		}
		read <- err
		_ = mc.Close(CloseNormal, "")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: authT})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	host := <-conns
	await(t, "the host's socket full", func() bool {
		st, ok := tcpStateOf(host.cork.Conn)
		return ok && !st.writable
	})
	pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = c.Ping(pctx) // the client reads nothing: no pong reaches it anyway
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ping: %v", err)
	}
	if err := c.Write(ctx, websocket.MessageText, []byte("after the ping")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("the host's read after the ping: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the host's reader did not go on within 3 s of the ping")
	}
}

// TestKeepaliveReadSinceUnansweredPing: a client whose ping goes
// unanswered (a host answers only when its socket takes the pong at once
// and no message is being written: answerPing) but which read a message
// from the host after sending it keeps the connection; the host's next
// ping answer comes and both ways still work.
func TestKeepaliveReadSinceUnansweredPing(t *testing.T) {
	shortKeepalive(t)
	pings := make(chan int, 16)
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(rw, r, &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool {
			i := int(n.Add(1))
			pings <- i
			return i > 1 // the first ping gets no pong
		}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		ctx := r.Context()
		gone := make(chan struct{}) // the client's end closed
		go func() {                 // the reader: answers control frames, echoes
			defer close(gone)
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					return
				}
				_ = c.Write(ctx, websocket.MessageText, append([]byte("echo "), b...))
			}
		}()
		for i := 1; i <= 2; i++ {
			// A message after each ping: the first while its pong
			// does not come; the second once the first's wait ended
			// (the client sends one ping at a time).
			select {
			case <-pings:
			case <-gone:
				return
			}
			if err := c.Write(ctx, websocket.MessageText, fmt.Appendf(nil, "after ping %d", i)); err != nil {
				return
			}
		}
		<-gone
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil, nil, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mc.Close(CloseNormal, "") }()
	for _, want := range []string{"after ping 1", "after ping 2"} {
		b, err := mc.ReadMessage(ctx)
		if err != nil || string(b) != want {
			t.Fatalf("read %q, %v; want %q (the client gave up on a host that sent it a message since its ping)", b, err, want)
		}
	}
	if err := mc.WriteMessage(ctx, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if b, err := mc.ReadMessage(ctx); err != nil || string(b) != "echo still here" {
		t.Fatalf("after the unanswered ping: read %q, %v; want the host's echo", b, err)
	}
}
