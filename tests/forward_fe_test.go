package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// End-to-end tests of how `sidecar forward` ends forwarded connections
// and what it says: a channel that cannot open resets its local
// connection, and a server that goes away is named before the count of
// connections reset. Helpers are tcp_test.go's and helpers_test.go's.

// fwReadsReset reads c to its end and fails the test unless the end is a
// reset (ECONNRESET) with nothing read.
func fwReadsReset(t *testing.T, what string, c *net.TCPConn) {
	t.Helper()
	if b, err := io.ReadAll(c); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("%s: local client read %q, %v; want ECONNRESET (a plain close reads as an empty but complete answer)", what, b, err)
	}
}

// fwDialReset connects to addr and checks that the connection is reset
// (fwReadsReset). A reset that arrives before connect has returned fails
// the connect itself with ECONNRESET: the same answer.
func fwDialReset(t *testing.T, what, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	fwReadsReset(t, what, c.(*net.TCPConn))
}

// TestForwardOpenFailedReset: a -L connection whose channel cannot open
// (destination refused, not allowed by the host's policy, the host's
// tcp.max_per_client reached) is reset, and forward says why.
func TestForwardOpenFailedReset(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	closed := tcpClosedPort(t)
	s := startServer(t, "tcp {\n  max_per_client = 1\n}\n")
	fw := tcpStartForward(t, s,
		fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo),
		fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", closed),
		"-L 127.0.0.1:0:10.255.255.1:80")

	from := 0
	check := func(what, addr, line string) {
		t.Helper()
		fwDialReset(t, what, addr)
		from = fw.p.stderr.waitFor(t, "forward stderr", from, line)
	}
	check("refused", fw.addrs[1], fmt.Sprintf("sidecar: %s -> 127.0.0.1:%d: open failed: connect to 127.0.0.1:%d refused\n", fw.addrs[1], closed, closed))
	check("not allowed", fw.addrs[2], fmt.Sprintf("sidecar: %s -> 10.255.255.1:80: open failed: connect to 10.255.255.1:80 not allowed by policy: not in tcp.allow\n", fw.addrs[2]))

	// The one connection max_per_client allows, open; the next one is
	// over the limit.
	held := tcpDial(t, fw.addrs[0])
	if _, err := held.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(held, b[:]); err != nil {
		t.Fatalf("through -L: %v", err)
	}
	check("connection limit", fw.addrs[0], fmt.Sprintf("sidecar: %s -> 127.0.0.1:%d: open failed: TCP connection limit reached: 1 open for this client (tcp.max_per_client); close one first\n", fw.addrs[0], echo))
}

// TestForwardServerGoneOrder: when the connection to the host ends for
// good with a forwarded connection open (here the daemon shut down, SIGTERM,
// and came back with another token, which refuses the reconnect that
// follows), forward says why first, then how many connections it reset,
// and exits 255; the local connection is reset.
func TestForwardServerGoneOrder(t *testing.T) {
	t.Parallel()
	s, relay, _, fw, c := relayedEchoForward(t)
	other := *s
	other.token = "another-token-0123456789"
	twin := startTwin(t, &other)
	relay.SetTarget(twin.host)
	if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := fw.p.wait(t, waitTimeout); code != 255 {
		t.Errorf("forward exited %d when the host refused it after a restart, want 255", code)
	}
	stderr := fw.p.stderr.String()
	if !strings.Contains(stderr, "sidecar: the server is shutting down; reconnecting (attempt 1, ") {
		t.Errorf("stderr does not say the server shut down:\n%s", stderr)
	}
	if !regexp.MustCompile(`sidecar: [^\n]*refused the token[^\n]*\nsidecar: reset 1 forwarded connection\(s\) still open\n$`).MatchString(stderr) {
		t.Errorf("stderr:\n%s\nwant it to end with the refusal, then the reset count", stderr)
	}
	fwReadsReset(t, "after the host refused the reconnect", c)
}

// TestForwardStopsOnNewCertificate: the daemon restarts (SIGTERM) with
// another certificate (a renewed development certificate: another state
// directory here); forward's reconnect meets a pin mismatch and stops at
// once, saying so, instead of retrying until the grace ends.
func TestForwardStopsOnNewCertificate(t *testing.T) {
	t.Parallel()
	s, relay, _, fw, c := relayedEchoForward(t)
	twin := startTwinIn(t, s, t.TempDir())
	if twin.hash == s.hash {
		t.Fatal("the twin has the same certificate")
	}
	relay.SetTarget(twin.host)
	if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := fw.p.wait(t, waitTimeout); code != 255 {
		t.Errorf("forward exited %d when the host's certificate changed, want 255", code)
	}
	stderr := fw.p.stderr.String()
	if !strings.Contains(stderr, "the host's certificate does not match the pin") || !strings.Contains(stderr, "certificate pin mismatch: server presented sha256 "+twin.hash) {
		t.Errorf("stderr does not name the pin mismatch:\n%s", stderr)
	}
	fwReadsReset(t, "after the certificate changed", c)
}
