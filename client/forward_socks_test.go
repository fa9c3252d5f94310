package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestSOCKSReply maps DialTCP errors, worded as the host words them, to
// SOCKS5 reply codes; host names that contain the phrases matched do not
// change the answer.
func TestSOCKSReply(t *testing.T) {
	open := func(kind tcpadapter.FailKind, host, detail string) error {
		e := &tcpadapter.OpenError{Kind: kind, Host: host, Port: 80, Detail: detail}
		code := int64(rpc.CodeTCPConnectionOpenFailed)
		if kind == tcpadapter.KindDenied {
			code = rpc.CodePermissionDenied
		}
		// As the host sends it, and as Conn.Call returns it.
		return fmt.Errorf("call: %w", rpc.Errorf(code, "%s", e.Error()))
	}
	tests := []struct {
		name string
		err  error
		want byte
	}{
		{"denied by tcp.allow", open(tcpadapter.KindDenied, "169.254.169.254", ": not in tcp.allow"), socksNotAllowed},
		{"denied, name says refused", open(tcpadapter.KindDenied, "refused.example", ": not in tcp.allow"), socksNotAllowed},
		{"connection limit", rpc.Errorf(rpc.CodePermissionDenied, "TCP connection limit reached: 64 open for this client (tcp.max_per_client); close one first"), socksNotAllowed},
		{"refused", open(tcpadapter.KindRefused, "127.0.0.1", ""), socksRefused},
		{"refused, name says timed-out", open(tcpadapter.KindRefused, "timed-out.example", ""), socksRefused},
		{"timed out", open(tcpadapter.KindTimeout, "10.0.0.1", " after 10s"), socksTTLExpired},
		{"timed out, name says refused", open(tcpadapter.KindTimeout, "refused.example", " after 10s"), socksTTLExpired},
		{"no route", open(tcpadapter.KindUnreachable, "10.0.0.1", ""), socksHostUnreachable},
		{"no such host", open(tcpadapter.KindNoSuchHost, "refused", ""), socksHostUnreachable},
		{"other open failure", open(tcpadapter.KindFailed, "10.0.0.1", "address not available"), socksHostUnreachable},
		{"overloaded", rpc.Errorf(rpc.CodeOverloaded, "overloaded: 16 requests already in progress on this connection; retry with backoff"), socksGeneralFailure},
		{"client side", context.DeadlineExceeded, socksGeneralFailure},
	}
	for _, tt := range tests {
		if got := socksReply(tt.err); got != tt.want {
			t.Errorf("%s: socksReply(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

// TestSOCKSForward runs `forward -D`'s SOCKS5 server against an in-process
// host (default policy: loopback only) and reads the reply codes: 2 for a
// destination the policy refuses, 5 for a refused loopback port, 0 and the
// bytes through for a listening one, 7 for BIND.
func TestSOCKSForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := testHostConn(t)
	l := startSOCKS(t, conn, io.Discard, time.Second)

	// connect sends a SOCKS5 request (no authentication) for ip:port and
	// returns the reply code and the connection.
	connect := func(cmd byte, ip net.IP, port int) (byte, net.Conn) {
		t.Helper()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		dl, _ := ctx.Deadline()
		_ = c.SetDeadline(dl)
		req := []byte{5, 1, 0, 5, cmd, 0, 1}
		req = append(req, ip.To4()...)
		req = binary.BigEndian.AppendUint16(req, uint16(port))
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		var reply [2 + 10]byte // method selection, then the reply with an IPv4 address
		if _, err := io.ReadFull(c, reply[:]); err != nil {
			t.Fatalf("SOCKS5 reply for %s:%d: %v", ip, port, err)
		}
		if reply[0] != 5 || reply[1] != 0 || reply[2] != 5 {
			t.Fatalf("SOCKS5 reply % x", reply)
		}
		return reply[3], c
	}
	loopback := net.IPv4(127, 0, 0, 1)

	// 192.0.2.1 (TEST-NET-1) is not loopback: refused by policy, not dialed.
	if got, _ := connect(1, net.IPv4(192, 0, 2, 1), 80); got != socksNotAllowed {
		t.Errorf("denied destination: reply %d, want %d (connection not allowed by ruleset)", got, socksNotAllowed)
	}

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()
	if got, _ := connect(1, loopback, closedPort); got != socksRefused {
		t.Errorf("closed port: reply %d, want %d (connection refused)", got, socksRefused)
	}

	dest, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer dest.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := dest.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	got, c := connect(1, loopback, dest.Addr().(*net.TCPAddr).Port)
	if got != 0 {
		t.Fatalf("listening port: reply %d, want 0", got)
	}
	d, ok := <-accepted
	if !ok {
		t.Fatal("the destination accepted nothing")
	}
	defer d.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	var buf [4]byte
	_ = d.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(d, buf[:]); err != nil || string(buf[:]) != "ping" {
		t.Fatalf("destination read %q, %v", buf, err)
	}
	// The destination's half-close reaches the SOCKS client after its bytes.
	if _, err := d.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	_ = d.(*net.TCPConn).CloseWrite()
	if got, err := io.ReadAll(c); err != nil || string(got) != "pong" {
		t.Fatalf("SOCKS client read %q, %v; want \"pong\" then EOF", got, err)
	}
	_ = c.Close()
	if _, err := d.Read(buf[:]); !errors.Is(err, io.EOF) {
		t.Errorf("destination after the SOCKS client closed: %v, want EOF", err)
	}

	if got, _ := connect(2, loopback, 80); got != 7 {
		t.Errorf("BIND: reply %d, want 7 (command not supported)", got)
	}
	if got, _ := connect(1, loopback, 0); got != socksHostUnreachable {
		t.Errorf("port 0: reply %d, want %d (host unreachable, nothing opened)", got, socksHostUnreachable)
	}

	// Whole exchanges, read to the end: a SOCKS4 CONNECT gets SOCKS4's
	// "request rejected", bytes that are no SOCKS at all get the end, a
	// CONNECT to an empty domain name gets host unreachable (nothing is
	// opened), and clients that stall inside the handshake are closed once
	// the handshake timeout (fw.socksTimeout, 1 s here) has passed since
	// their first byte.
	for _, tc := range []struct {
		name       string
		send, want []byte
	}{
		{"SOCKS4", []byte{4, 1, 0, 80, 127, 0, 0, 1, 0}, []byte{0, 91, 0, 0, 0, 0, 0, 0}},
		{"not SOCKS", []byte("GET / HTTP/1.1\r\n\r\n"), nil},
		{"empty domain", []byte{5, 1, 0, 5, 1, 0, 3, 0, 0, 80}, []byte{5, 0, 5, socksHostUnreachable, 0, 1, 0, 0, 0, 0, 0, 0}},
		{"stalls after the version", []byte{5}, nil},
		{"stalls after the method selection", []byte{5, 1, 0}, []byte{5, 0}},
		{"stalls inside the request", []byte{5, 1, 0, 5, 1}, []byte{5, 0}},
	} {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		dl, _ := ctx.Deadline()
		_ = c.SetDeadline(dl)
		if _, err := c.Write(tc.send); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil || string(got) != string(tc.want) {
			t.Errorf("%s: read % x, %v; want % x then the end", tc.name, got, err, tc.want)
		}
		_ = c.Close()
	}
}

// testHostConn is a client connection, initialized, to an in-process host
// (default policy: loopback destinations only) over a pipe; both end at
// cleanup.
func testHostConn(t *testing.T) *Conn {
	t.Helper()
	return testHostConnVia(t, nil)
}

// heldOpens is a host end of the pipe that never hands the host a
// createTcpConnection request (so the client's DialTCP waits until the
// connection ends); one value on held for each request held back.
type heldOpens struct {
	transport.MessageConn
	held chan struct{} // buffered; a test takes one value per open
}

func (h *heldOpens) ReadMessage(ctx context.Context) ([]byte, error) {
	for {
		m, err := h.MessageConn.ReadMessage(ctx)
		if err != nil || !bytes.Contains(m, []byte(`"method":"`+rpc.MethodCreateTCPConnection+`"`)) {
			return m, err
		}
		h.held <- struct{}{}
	}
}

// testHostConnVia is testHostConn with the host's end of the pipe
// wrapped by wrap (nil: as is).
func testHostConnVia(t *testing.T, wrap func(transport.MessageConn) transport.MessageConn) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	srv, err := host.New(cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	a, b := transport.Pipe(64)
	if wrap != nil {
		b = wrap(b)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(context.Background(), b) }()
	conn := NewConn(a, Options{ClientID: "socks-test"})
	t.Cleanup(func() {
		_ = conn.Close()
		select {
		case <-served:
		case <-time.After(10 * time.Second):
			t.Error("ServeConn did not return after the client closed")
		}
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if err := srv.Shutdown(sctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	if err := conn.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	return conn
}

// startSOCKS runs a forwarder's -D on a loopback listener, its lines
// going to log, and returns the listener; everything ends at cleanup.
func startSOCKS(t *testing.T, conn *Conn, log io.Writer, timeout time.Duration) net.Listener {
	t.Helper()
	fw := NewForwarder(conn, ForwarderOptions{Log: log, SOCKSHandshakeTimeout: timeout})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.ServeSOCKS(l); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, fw, 10*time.Second) })
	return l
}

// socksConnect opens a SOCKS5 CONNECT through proxy to 127.0.0.1:port and
// fails the test unless it succeeds; the connection's deadline is 10 s.
func socksConnect(t *testing.T, proxy string, port int) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp4", proxy, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := binary.BigEndian.AppendUint16([]byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1}, uint16(port))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var reply [2 + 10]byte
	if _, err := io.ReadFull(c, reply[:]); err != nil || reply[1] != 0 || reply[3] != 0 {
		t.Fatalf("SOCKS5 CONNECT to port %d: reply % x, %v; want success", port, reply, err)
	}
	return c.(*net.TCPConn)
}

// oneConn listens on loopback and returns its port and the first
// connection accepted (10 s at most).
func oneConn(t *testing.T) (int, <-chan *net.TCPConn) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		defer close(accepted)
		defer l.Close()
		_ = l.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
		if c, err := l.Accept(); err == nil {
			accepted <- c.(*net.TCPConn)
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		if c := <-accepted; c != nil {
			_ = c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port, accepted
}

// TestSOCKSResetAfterConnect: once a CONNECT has succeeded, a reset on
// either side reaches the other as a reset, never as the FIN of a
// complete transfer (go-socks5 alone half-closes whatever ended a
// direction): the destination's reset reaches the SOCKS client, the
// SOCKS client's reset the destination.
func TestSOCKSResetAfterConnect(t *testing.T) {
	conn := testHostConn(t)
	l := startSOCKS(t, conn, io.Discard, time.Second)

	t.Run("destination resets", func(t *testing.T) {
		port, accepted := oneConn(t)
		c := socksConnect(t, l.Addr().String(), port)
		d := <-accepted
		if d == nil {
			t.Fatal("the destination accepted nothing")
		}
		if _, err := d.Write([]byte("data")); err != nil {
			t.Fatal(err)
		}
		var buf [4]byte
		if _, err := io.ReadFull(c, buf[:]); err != nil || string(buf[:]) != "data" {
			t.Fatalf("SOCKS client read %q, %v; want \"data\"", buf, err)
		}
		resetTCP(d)
		if b, err := io.ReadAll(c); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("SOCKS client after the destination's reset: read %q, %v; want ECONNRESET", b, err)
		}
	})

	t.Run("SOCKS client resets", func(t *testing.T) {
		port, accepted := oneConn(t)
		c := socksConnect(t, l.Addr().String(), port)
		d := <-accepted
		if d == nil {
			t.Fatal("the destination accepted nothing")
		}
		_ = d.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		var buf [1]byte
		if _, err := io.ReadFull(d, buf[:]); err != nil {
			t.Fatalf("destination read %q, %v; want \"x\"", buf, err)
		}
		resetTCP(c)
		if b, err := io.ReadAll(d); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("destination after the SOCKS client's reset: read %q, %v; want ECONNRESET", b, err)
		}
	})
}

// waitLog collects what a forwarder writes and lets a test wait for
// lines.
type waitLog struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed and replaced on every write
}

func newWaitLog() *waitLog { return &waitLog{changed: make(chan struct{})} }

func (w *waitLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *waitLog) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// line waits (10 s at most) until line n (from 0) is complete and returns
// it without its newline.
func (w *waitLog) line(t *testing.T, n int) string {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		w.mu.Lock()
		lines := strings.SplitAfter(w.b.String(), "\n")
		changed := w.changed
		w.mu.Unlock()
		if len(lines) > n+1 { // the last element is what follows the last newline
			return strings.TrimSuffix(lines[n], "\n")
		}
		select {
		case <-changed:
		case <-timeout.C:
			t.Fatalf("line %d not written within 10 s; got %q", n, w.String())
		}
	}
}

// TestSOCKSHandshakeMessages: a SOCKS client that gets the handshake
// wrong, or is no SOCKS client, is told so in a line in our words that
// says what it did (go-socks5's own "Failed to authenticate: No supported
// authentication mechanism" never shows); an HTTP proxy client is told
// that -D speaks SOCKS5.
func TestSOCKSHandshakeMessages(t *testing.T) {
	conn := testHostConn(t)
	log := newWaitLog()
	l := startSOCKS(t, conn, log, time.Second)
	ipv4 := func(b ...byte) []byte { return append(b, 127, 0, 0, 1, 0, 80) }
	for i, tc := range []struct {
		name        string
		send, reply []byte
		want        string // the line after "SOCKS5 ADDR: client CLIENT "
	}{
		{"username/password only", []byte{5, 1, 2}, []byte{5, 0xff},
			"offered no method we accept (it offered username/password; we take only no-authentication)"},
		{"several methods, none ours", []byte{5, 3, 1, 2, 0x80}, []byte{5, 0xff},
			"offered no method we accept (it offered GSSAPI, username/password, method 128; we take only no-authentication)"},
		{"no method", []byte{5, 0}, []byte{5, 0xff},
			"offered no method we accept (it offered none; we take only no-authentication)"},
		{"unknown address type", []byte{5, 1, 0, 5, 1, 0, 9, 0, 0}, []byte{5, 0, 5, socksAddrTypeNotSupported, 0, 1, 0, 0, 0, 0, 0, 0},
			`gave a destination of unknown address type 9 (SOCKS5 has 1 IPv4, 3 domain name, 4 IPv6): answered "address type not supported"`},
		{"request of version 4", ipv4(5, 1, 0, 4, 1, 0, 1), []byte{5, 0},
			"sent a request of version 4 after a SOCKS5 greeting, not 5: closed"},
		{"BIND", ipv4(5, 1, 0, 5, 2, 0, 1), []byte{5, 0, 5, socksCommandNotSupported, 0, 1, 0, 0, 0, 0, 0, 0},
			`asked for BIND; -D serves only CONNECT: answered "command not supported"`},
		{"UDP ASSOCIATE", ipv4(5, 1, 0, 5, 3, 0, 1), []byte{5, 0, 5, socksCommandNotSupported, 0, 1, 0, 0, 0, 0, 0, 0},
			`asked for UDP ASSOCIATE; -D serves only CONNECT: answered "command not supported"`},
		{"unknown command", ipv4(5, 1, 0, 5, 9, 0, 1), []byte{5, 0, 5, socksCommandNotSupported, 0, 1, 0, 0, 0, 0, 0, 0},
			`asked for command 9, which SOCKS5 does not have; -D serves only CONNECT: answered "command not supported"`},
		{"HTTP GET", []byte("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), nil,
			"sent what looks like an HTTP proxy request; -D speaks SOCKS5 (curl --socks5-hostname): closed"},
		{"HTTP CONNECT", []byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"), nil,
			"sent what looks like an HTTP proxy request; -D speaks SOCKS5 (curl --socks5-hostname): closed"},
		{"HTTP POST", []byte("POST http://example.com/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), nil,
			"sent what looks like an HTTP proxy request; -D speaks SOCKS5 (curl --socks5-hostname): closed"},
		{"stalls in the greeting", []byte{5, 2, 0}, nil,
			"did not finish the handshake within 1s: closed"},
	} {
		c, err := net.DialTimeout("tcp4", l.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(tc.send); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil || string(got) != string(tc.reply) {
			t.Errorf("%s: read % x, %v; want % x then the end", tc.name, got, err, tc.reply)
		}
		want := fmt.Sprintf("SOCKS5 %s: client %s %s", l.Addr(), c.LocalAddr(), tc.want)
		if line := log.line(t, i); line != want {
			t.Errorf("%s: line\n%q, want\n%q", tc.name, line, want)
		}
		_ = c.Close()
	}
}

// TestReplayConnHeadBound: what replayConn keeps of a handshake for its
// messages is at most socksHeadBytes, however much the client sends
// before the reply.
func TestReplayConnHeadBound(t *testing.T) {
	rc := &replayConn{r: bytes.NewReader(bytes.Repeat([]byte{5}, 4*socksHeadBytes))}
	buf := make([]byte, 100)
	for {
		if _, err := rc.Read(buf); err != nil {
			break
		}
	}
	if len(rc.head) != socksHeadBytes {
		t.Errorf("kept %d bytes of the handshake, want %d", len(rc.head), socksHeadBytes)
	}
}

// TestSOCKSNameEscaped: the destination name of a CONNECT is the SOCKS
// client's, any bytes at all: the line that says its channel could not
// open writes it (and the host's message, which repeats it) escaped, so
// that an escape sequence or a NUL in it never reaches the user's
// terminal.
func TestSOCKSNameEscaped(t *testing.T) {
	conn := testHostConn(t)
	log := newWaitLog()
	l := startSOCKS(t, conn, log, 10*time.Second)
	for i, name := range []string{"\x1b[31mRED\x1b]0;title\x07", "nul\x00byte", "c1\u009b2J"} {
		c, err := net.DialTimeout("tcp4", l.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(name))}, name...)
		req = binary.BigEndian.AppendUint16(req, 80)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		reply, err := io.ReadAll(c)
		if err != nil || len(reply) < 4 || reply[3] == 0 {
			t.Errorf("CONNECT to %q: reply % x, %v; want a refusal", name, reply, err)
		}
		_ = c.Close()
		line := log.line(t, i)
		prefix := fmt.Sprintf("SOCKS5 %s -> %s:80: open failed: ", l.Addr(), printable(name))
		if !strings.HasPrefix(line, prefix) || strings.ContainsAny(line, "\x00\x07\x1b\u009b") {
			t.Errorf("CONNECT to %q: line %q; want it to start %q, with no control character", name, line, prefix)
		}
	}
	if out := log.String(); strings.ContainsAny(out, "\x00\x07\x1b\u009b") {
		t.Errorf("the log has control characters: %q", out)
	}
	// The host's own message (-L and -D alike) is escaped too, whoever
	// words it.
	for err, want := range map[error]string{
		&rpc.Error{Code: rpc.CodeTCPConnectionOpenFailed, Message: "connect to \x1b]0;x\a:80 refused"}: `connect to \x1b]0;x\a:80 refused`,
		errors.New("lost: \x00\x1b[2J"): `lost: \x00\x1b[2J`,
	} {
		if got := (&Forwarder{opts: ForwarderOptions{}.withDefaults()}).openMessage(err); got != want {
			t.Errorf("openMessage(%q) = %q, want %q", err, got, want)
		}
	}
}
