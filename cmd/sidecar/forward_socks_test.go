package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestSOCKSReply maps DialTCP errors, worded as the host words them, to
// SOCKS5 reply codes; host names that contain the phrases matched do not
// change the answer.
func TestSOCKSReply(t *testing.T) {
	open := func(kind tcpadapter.Kind, host, detail string) error {
		e := &tcpadapter.OpenError{Kind: kind, Host: host, Port: 80, Detail: detail}
		code := int64(rpc.CodeTCPConnectionOpenFailed)
		if kind == tcpadapter.KindDenied {
			code = rpc.CodePermissionDenied
		}
		// As the host sends it, and as client.Conn.Call returns it.
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

	fw := &forwarder{conn: conn, active: map[*net.TCPConn]struct{}{}, socksTimeout: time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fw.wg.Add(1)
	go fw.serveSOCKS(l)
	t.Cleanup(func() {
		_ = l.Close()
		fw.closeActive()
		fw.wg.Wait()
	})

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
func testHostConn(t *testing.T) *client.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	srv := host.New(cfg, hclog.NewNullLogger())
	a, b := transport.Pipe(64)
	served := make(chan error, 1)
	go func() { served <- srv.ServeConn(context.Background(), b) }()
	conn := client.NewConn(a, client.Options{ClientID: "socks-test"})
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
