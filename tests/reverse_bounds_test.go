package tests

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Reverse forwarding's bounds (issue 29): what a -R listener's
// connections do while their client's link is lost, and every limit the
// host puts on them, each shown to hold through the real binary.

// reverseWatched starts a server with extra config (and a metrics
// listener), a raw client watching its tunnels channel, and `sidecar
// forward -R` to an echo server through a fault relay; it returns them
// with the address the host listens on.
func reverseWatched(t *testing.T, extra string) (s *server, rc *rawConn, relay interface {
	Refuse(bool)
	Cut()
}, fw *tcpForward, addr, metrics string) {
	t.Helper()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c); _ = c.CloseWrite() })
	s = startServer(t, "metrics {\n  listen = \"127.0.0.1:0\"\n}\n"+extra)
	var m []string
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m = metricsLine.FindStringSubmatch(text)
		return m != nil
	}); !ok {
		t.Fatal("no metrics listening line in the log")
	}
	r, url := relayed(t, s)
	rc = s.dialRaw(t)
	t.Cleanup(rc.close)
	rc.initialize("watch")
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-tunnels://"})
	fw, addrs := reverseStart(t, &server{p: s.p, url: url, host: r.Addr(), token: s.token, hash: s.hash},
		fmt.Sprintf("-R 127.0.0.1:0:127.0.0.1:%d", echo))
	return s, rc, r, fw, addrs[0], m[1]
}

// cutFor loses the forward's link for good (until relay.Refuse(false))
// and waits until the host has marked its entry unavailable.
func cutFor(t *testing.T, rc *rawConn, relay interface {
	Refuse(bool)
	Cut()
}) {
	t.Helper()
	relay.Refuse(true)
	relay.Cut()
	awaitTunnelStatus(t, rc, "", "unavailable", 1)
}

// waitingOnHost is sidecar_tunnel_connections{state="waiting"}.
func waitingOnHost(t *testing.T, metrics string) int {
	return int(scrapeMetrics(t, metrics)[`sidecar_tunnel_connections{state="waiting"}`])
}

// listenQueue is how many connections wait in the kernel's accept queue
// of the loopback listener at addr (/proc/net/tcp: a LISTEN socket's
// rx_queue).
func listenQueue(t *testing.T, addr string) int {
	t.Helper()
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := fmt.Sprintf("0100007F:%04X", port)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && fields[1] == want && fields[3] == "0A" {
			_, rx, _ := strings.Cut(fields[4], ":")
			n, _ := strconv.ParseInt(rx, 16, 32)
			return int(n)
		}
	}
	t.Fatalf("no listener %s in /proc/net/tcp", addr)
	return 0
}

// TestReverseForwardWaitsForResume: a connection the host accepts while
// its client's link is lost waits on the host (not reset, not served)
// and opens once the link is back; the 1 MiB it sent meanwhile comes
// back whole, in order.
func TestReverseForwardWaitsForResume(t *testing.T) {
	t.Parallel()
	_, rc, relay, _, addr, metrics := reverseWatched(t, "")
	cutFor(t, rc, relay)
	c := tcpDial(t, addr)
	_ = c.SetDeadline(time.Now().Add(2 * waitTimeout))
	msg := make([]byte, 1<<20)
	_, _ = rand.Read(msg)
	go func() { _, _ = c.Write(msg); _ = c.CloseWrite() }()
	until(t, "the connection waits on the host", func() bool { return waitingOnHost(t, metrics) == 1 })
	relay.Refuse(false)
	back, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(back, msg) {
		t.Fatalf("%d bytes back (want %d, equal %v), error %v", len(back), len(msg), bytes.Equal(back, msg), err)
	}
	if n := waitingOnHost(t, metrics); n != 0 {
		t.Errorf("%d connections still wait on the host", n)
	}
}

// TestReverseForwardWaitTimeout: a connection waiting for a client whose
// link is lost is reset after tunnels.wait_timeout, the host's log
// saying why.
func TestReverseForwardWaitTimeout(t *testing.T) {
	t.Parallel()
	s, rc, relay, _, addr, _ := reverseWatched(t, "tunnels {\n  wait_timeout = \"1s\"\n}\n")
	cutFor(t, rc, relay)
	c := tcpDial(t, addr)
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	began := time.Now()
	n, err := io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the waiting connection got %v after %d bytes, want a reset", err, n)
	}
	if d := time.Since(began); d < 900*time.Millisecond {
		t.Errorf("reset after %v, before tunnels.wait_timeout (1s)", d)
	}
	s.p.stderr.waitFor(t, "the reason in the log", 0, `"reason":"its client did not take it within 1s (tunnels.wait_timeout)"`)
}

// TestReverseForwardMaxWaiting: with tunnels.max_waiting = 2, of 5
// connections made while the client's link is lost the host takes 2 and
// leaves 3 in the kernel's accept queue (none refused); once the link is
// back all 5 are served, each its own bytes.
func TestReverseForwardMaxWaiting(t *testing.T) {
	t.Parallel()
	_, rc, relay, _, addr, metrics := reverseWatched(t, "tunnels {\n  max_waiting = 2\n  wait_timeout = \"2m\"\n}\n")
	cutFor(t, rc, relay)
	var conns []*net.TCPConn
	for i := range 5 {
		c := tcpDial(t, addr)
		_ = c.SetDeadline(time.Now().Add(3 * waitTimeout))
		fmt.Fprintf(c, "connection %d\n", i)
		_ = c.CloseWrite()
		conns = append(conns, c)
	}
	until(t, "2 waiting on the host and 3 in the listen queue", func() bool {
		return waitingOnHost(t, metrics) == 2 && listenQueue(t, addr) == 3
	})
	relay.Refuse(false)
	for i, c := range conns {
		back, err := io.ReadAll(c)
		if want := fmt.Sprintf("connection %d\n", i); err != nil || string(back) != want {
			t.Errorf("connection %d: got %q, error %v; want %q", i, back, err, want)
		}
	}
}

// TestReverseForwardQuotas: tunnels.max_listeners_per_principal and
// max_connections_per_principal, each refusal naming its rule: a second
// -R of the same token is refused (forward exits 1); a third connection
// while two are open is reset and the forward says why; once one closes
// a new one is served.
func TestReverseForwardQuotas(t *testing.T) {
	t.Parallel()
	s, _, _, fw, addr, _ := reverseWatched(t, "tunnels {\n  max_listeners_per_principal = 1\n  max_connections_per_principal = 2\n}\n")
	_, stderr, code := s.run(t, append([]string{"forward", s.url, "-R", "0:127.0.0.1:9"}, s.connArgs()...)...)
	if want := "reverse-forward listener limit reached: 1 listeners for this token (tunnels.max_listeners_per_principal); remove one first"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("a second -R: exit %d, stderr %q; want 1 and %q", code, stderr, want)
	}
	var open []*net.TCPConn
	for i := range 2 {
		c := tcpDial(t, addr)
		if err := echoRoundTrip(c, fmt.Sprintf("open %d", i)); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	// Reset as soon as the host accepts: on loopback the reset may come
	// before the dial returns.
	if c, err := net.DialTimeout("tcp", addr, waitTimeout); err == nil {
		_ = c.SetDeadline(time.Now().Add(waitTimeout))
		n, err := io.Copy(io.Discard, c)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("a third connection got %v after %d bytes, want a reset", err, n)
		}
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a third connection: %v, want a reset", err)
	}
	fw.p.stderr.waitFor(t, "the refusal", 0, "reverse-forwarded connection limit reached: 2 open for this token (tunnels.max_connections_per_principal); close one first")
	s.p.stderr.waitFor(t, "the refusal in the host's log", 0, "(tunnels.max_connections_per_principal)")
	_ = open[0].Close()
	// The host frees the count once both ends of the channel closed: a
	// connection made before may still be refused.
	served := false
	for try := 0; !served && try < 50; try++ {
		c, err := net.DialTimeout("tcp", addr, waitTimeout)
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(waitTimeout))
		served = echoRoundTrip(c, "after one closed") == nil
		_ = c.Close()
	}
	if !served {
		t.Error("no connection served after one of the two closed")
	}
}

// TestReverseForwardOfferLease: a connection tunnel/accept handed out to
// a client that never subscribes to its channel is reset after the lease
// (adapters/tcp.SubscribeLease, 10 s), with the reason in the host's
// log; it no longer counts as waiting.
func TestReverseForwardOfferLease(t *testing.T) {
	t.Parallel()
	s := startServer(t, "metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
	var m []string
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m = metricsLine.FindStringSubmatch(text)
		return m != nil
	}); !ok {
		t.Fatal("no metrics listening line in the log")
	}
	rc := s.dialRaw(t)
	defer rc.close()
	rc.mustCall("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": "lease",
		"capabilities": map[string]any{"tunnels": map[string]any{"clientToHost": map[string]any{}}}})
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-tunnels://"})
	rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
		"channel": "ahp-tunnels://", "clientSeq": 1, "action": map[string]any{"type": "tunnel/portSet", "port": map[string]any{
			"resource": "ahp-tunnel:/lease", "direction": "clientToHost",
			"requestedLocalAddress": map[string]any{"host": "127.0.0.1", "port": 0}, "requestedRemoteAddress": map[string]any{"host": "localhost", "port": 80},
			"requestedBy": map[string]any{"kind": "client", "clientId": "lease"}, "createdAt": "2025-01-01T00:00:00Z",
			"client": map[string]any{"clientId": "lease", "state": map[string]any{"status": "accepted"}}}}}})
	var addr string
	rc.waitNotification("ready", func(m message) bool {
		var e struct {
			Action struct {
				Type  string `json:"type"`
				State *struct {
					Status       string `json:"status"`
					LocalAddress *struct {
						Host string `json:"host"`
						Port int    `json:"port"`
					} `json:"localAddress"`
				} `json:"state"`
			} `json:"action"`
		}
		_ = json.Unmarshal(m.Params, &e)
		if a := e.Action; a.Type == "tunnel/portClientUpdated" && a.State != nil && a.State.Status == "ready" && a.State.LocalAddress != nil {
			addr = net.JoinHostPort(a.State.LocalAddress.Host, strconv.Itoa(a.State.LocalAddress.Port))
			return true
		}
		return false
	})
	c := tcpDial(t, addr)
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	r := rc.mustCall("tunnel/accept", map[string]any{"channel": "ahp-root://"})
	var res struct {
		Resource string `json:"resource"`
		Channel  string `json:"channel"`
	}
	_ = json.Unmarshal(r.Result, &res)
	if res.Resource != "ahp-tunnel:/lease" || !strings.HasPrefix(res.Channel, "ahp-tcp:") {
		t.Fatalf("tunnel/accept: %s", r.Result)
	}
	handed := time.Now()
	if n := waitingOnHost(t, m[1]); n != 1 {
		t.Errorf("%d connections wait on the host while handed out, want 1", n)
	}
	if n, err := io.Copy(io.Discard, c); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection handed out got %v after %d bytes, want a reset", err, n)
	}
	if d := time.Since(handed); d < 9*time.Second {
		t.Errorf("reset %v after it was handed out, before the 10 s lease", d)
	}
	s.p.stderr.waitFor(t, "the reason in the log", 0, `"reason":"not subscribed within 10s"`)
	if n := waitingOnHost(t, m[1]); n != 0 {
		t.Errorf("%d connections wait on the host after the lease, want 0", n)
	}
}

// TestTunnelsUndeclaredClient: a client that declared no tunnels in
// initialize's capabilities still sees the channel (the host advertises
// it to all), but the host makes it a participant of no forward: its -R
// entry is rejected, naming the capability, and nothing listens.
func TestTunnelsUndeclaredClient(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	rc := s.dialRaw(t)
	defer rc.close()
	init := rc.initialize("undeclared")
	if !strings.Contains(string(init.Result), `"tunnels":{"channel":"ahp-tunnels://"}`) {
		t.Fatalf("initialize result without tunnels: %s", init.Result)
	}
	rc.mustCall("subscribe", map[string]any{"channel": "ahp-tunnels://"})
	rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
		"channel": "ahp-tunnels://", "clientSeq": 1, "action": map[string]any{"type": "tunnel/portSet", "port": map[string]any{
			"resource": "ahp-tunnel:/undeclared", "direction": "clientToHost",
			"requestedLocalAddress": map[string]any{"host": "127.0.0.1", "port": 0}, "requestedRemoteAddress": map[string]any{"host": "localhost", "port": 80},
			"requestedBy": map[string]any{"kind": "client", "clientId": "undeclared"}, "createdAt": "2025-01-01T00:00:00Z",
			"client": map[string]any{"clientId": "undeclared", "state": map[string]any{"status": "accepted"}}}}}})
	m := rc.waitNotification("the echo", func(m message) bool { return m.Method == "action" && m.channelOf() == "ahp-tunnels://" })
	var e struct {
		RejectionReason string `json:"rejectionReason"`
	}
	_ = json.Unmarshal(m.Params, &e)
	if want := "this client did not declare capabilities.tunnels.clientToHost in initialize: it takes part in no clientToHost forward"; e.RejectionReason != want {
		t.Errorf("rejectionReason %q, want %q", e.RejectionReason, want)
	}
	s.p.stderr.waitFor(t, "the rejection in the log", 0, `"@message":"tunnel action rejected"`)
	if strings.Contains(s.p.stderr.String(), "reverse forward listening") {
		t.Errorf("the host listened for a client that did not declare clientToHost:\n%s", tail(s.p.stderr.String(), 2000))
	}
}
