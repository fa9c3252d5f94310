package tests

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Reverse forwarding (issue 29): `sidecar forward -R` makes the daemon
// listen on the workload's machine and each connection accepted there
// reaches a destination dialled from the client's machine, on a TCP
// channel with everything -L has; the tunnels channel (ahp-tunnels://)
// lists every forward with its lifecycle.

var reverseLine = regexp.MustCompile(`sidecar: forwarding (\S+) on the host -> \S+\n`)

// reverseStart runs `sidecar forward` against s with specs (each a full
// "-R x" or "-L x", or another flag) and returns it with the addresses
// the host listens on for its -R, in order.
func reverseStart(t *testing.T, s *server, specs ...string) (*tcpForward, []string) {
	t.Helper()
	args := append([]string{"forward", s.url}, s.connArgs()...)
	n := 0
	for _, sp := range specs {
		args = append(args, strings.Fields(sp)...)
		if strings.HasPrefix(sp, "-R") {
			n++
		}
	}
	p := start(t, args...)
	var addrs []string
	text, ok := p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m := reverseLine.FindAllStringSubmatch(text, -1)
		if len(m) < n {
			return false
		}
		addrs = addrs[:0]
		for _, x := range m {
			addrs = append(addrs, x[1])
		}
		return true
	})
	if !ok {
		t.Fatalf("sidecar forward -R did not start within %v; stderr:\n%s", waitTimeout, text)
	}
	return &tcpForward{p: p}, addrs
}

// TestReverseForwardSurvivesCuts: 64 MiB each way at once through one
// connection accepted by a -R listener on the host, to a destination on
// the client's side, while the link is cut 10 times at random points:
// every byte arrives once, in order, both ways (SHA-256).
func TestReverseForwardSurvivesCuts(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	port, got := bulkDestination(t, size, 2901)
	s := startServer(t, "")
	relay, url := relayed(t, s)
	fw, addrs := reverseStart(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash},
		fmt.Sprintf("-R 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, addrs[0]) // a program on the workload's machine
	_ = c.SetDeadline(time.Now().Add(5 * waitTimeout))
	local := make(chan exchange, 1)
	done := make(chan struct{})
	go func() {
		local <- duplex(c, size, 2900)
		close(done)
	}()
	start := time.Now()
	n := cutsUntil(t, fw, relay, mrand.New(mrand.NewPCG(29, 10)), 10, done)
	l := <-local
	var d exchange
	select {
	case d = <-got:
	case <-time.After(waitTimeout):
		t.Fatal("the destination did not finish")
	}
	t.Logf("64 MiB each way through -R and %d cuts in %v", n, time.Since(start).Round(time.Millisecond))
	if l.err != nil || l.n != size || l.sum != wantSum(size, 2901) {
		t.Errorf("workload end: %d bytes, error %v, sum match %v", l.n, l.err, l.sum == wantSum(size, 2901))
	}
	if d.err != nil || d.n != size || d.sum != wantSum(size, 2900) {
		t.Errorf("destination: %d bytes, error %v, sum match %v", d.n, d.err, d.sum == wantSum(size, 2900))
	}
	if n < 3 {
		t.Errorf("only %d cuts fell in the transfer", n)
	}
}

// TestReverseForwardMany: 64 connections at once through one -R listener,
// each echoing its own 64 KiB back exactly; and a -L in the same
// forward works beside it.
func TestReverseForwardMany(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c); _ = c.CloseWrite() })
	s := startServer(t, "")
	fw, addrs := reverseStart(t, s, fmt.Sprintf("-R 0:127.0.0.1:%d", echo), fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	const conns, size = 64, 64 << 10
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.DialTimeout("tcp", addrs[0], waitTimeout)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * waitTimeout))
			msg := make([]byte, size)
			_, _ = rand.Read(msg)
			go func() { _, _ = c.Write(msg); _ = c.(*net.TCPConn).CloseWrite() }()
			back, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(back, msg) {
				errs <- fmt.Errorf("connection %d: %d bytes back (want %d), error %v", i, len(back), size, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The -L beside it.
	m := tcpForwardLine.FindStringSubmatch(fw.p.stderr.String())
	if m == nil {
		t.Fatalf("no -L line; stderr:\n%s", fw.p.stderr.String())
	}
	c := tcpDial(t, m[1])
	if err := echoRoundTrip(c, "beside"); err != nil {
		t.Fatal(err)
	}
}

// TestReverseForwardBindRefused: the host's policy refuses a listener on
// all interfaces and one on a port below 1024, each naming the setting;
// forward exits 1.
func TestReverseForwardBindRefused(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	for spec, want := range map[string]string{
		"*:0:127.0.0.1:1":          "tunnels.allow_non_loopback is false",
		"127.0.0.1:80:127.0.0.1:1": "tunnels.allow_privileged_ports is false",
	} {
		_, stderr, code := s.run(t, append([]string{"forward", s.url, "-R", spec}, s.connArgs()...)...)
		if code != 1 || !strings.Contains(stderr, want) {
			t.Errorf("-R %s: exit %d, stderr %q; want 1 and %q", spec, code, stderr, want)
		}
	}
}

// TestReverseForwardCutPastGraceResets: when the link is lost for longer
// than the host's grace, the connection is reset at both ends: the
// program on the workload's machine and the destination on the client's.
func TestReverseForwardCutPastGraceResets(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	port, got := bulkDestination(t, size, 2911)
	s := startServer(t, "journal {\n  reconnect_grace = \"2s\"\n}\n")
	relay, url := relayed(t, s)
	_, addrs := reverseStart(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash},
		fmt.Sprintf("-R 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, addrs[0])
	if _, err := io.CopyN(io.Discard, c, 1<<20); err != nil {
		t.Fatal(err)
	}
	relay.Refuse(true)
	relay.Cut()
	n, err := io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the workload's reader got %v after %d more bytes, want a reset", err, n)
	}
	select {
	case d := <-got:
		if d.err == nil {
			t.Fatalf("the destination's connection ended cleanly after %d bytes, want a reset", d.n)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the destination's connection was not reset")
	}
	// The listener is gone with its client. The reset is visible before
	// the listener closes (the host ends the parked channels, then tells
	// the kinds the client is gone): wait, bounded, for the daemon to log
	// the close, which follows the socket's.
	s.p.stderr.waitFor(t, "the listener's close at the end of the grace", 0, `"@message":"reverse forward closed"`)
	if c, err := net.DialTimeout("tcp", addrs[0], waitTimeout); err == nil {
		_ = c.Close()
		t.Errorf("%s still accepts after the client's grace ended", addrs[0])
	}
}

// tunnelPort is what the tests read of a TunnelPort.
type tunnelPort struct {
	Resource    string `json:"resource"`
	Direction   string `json:"direction"`
	RequestedBy struct {
		ClientID string `json:"clientId"`
	} `json:"requestedBy"`
	Client *struct {
		ClientID string `json:"clientId"`
		State    struct {
			Status       string `json:"status"`
			LocalAddress *struct {
				Host string `json:"host"`
				Port int    `json:"port"`
			} `json:"localAddress"`
		} `json:"state"`
	} `json:"client"`
	Clients []struct {
		ClientID string `json:"clientId"`
		State    struct {
			Status string `json:"status"`
		} `json:"state"`
	} `json:"clients"`
}

// TestTunnelsChannelRaw: a raw AHP client sees tunnels in initialize,
// the entries of another client's -R and -L with their lifecycle (-R:
// accepted, then ready with the address the host listens on), and the
// host rejects its update of the other client's participant, its claim
// of another clientId, a listener on a non-loopback address, and an -L
// entry (hostToClient) with itself ready, a direction it did not declare
// in initialize's capabilities.tunnels.
func TestTunnelsChannelRaw(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	rc := s.dialRaw(t)
	defer rc.close()
	init := rc.mustCall("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": "raw-tunnels",
		"capabilities": map[string]any{"tunnels": map[string]any{"clientToHost": map[string]any{}}}})
	var ir struct {
		Tunnels struct {
			Channel string `json:"channel"`
		} `json:"tunnels"`
	}
	_ = json.Unmarshal(init.Result, &ir)
	if ir.Tunnels.Channel != "ahp-tunnels://" {
		t.Fatalf("initialize result tunnels = %s", init.Result)
	}
	sub := rc.mustCall("subscribe", map[string]any{"channel": "ahp-tunnels://"})
	var sr struct {
		Snapshot struct {
			State struct {
				Ports []tunnelPort `json:"ports"`
			} `json:"state"`
		} `json:"snapshot"`
	}
	_ = json.Unmarshal(sub.Result, &sr)
	if len(sr.Snapshot.State.Ports) != 0 {
		t.Fatalf("snapshot has entries before any forward: %s", sub.Result)
	}
	_, addrs := reverseStart(t, s, fmt.Sprintf("-R 0:127.0.0.1:%d", echo), fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))

	// The actions, in server order: the -L's portSet (ready), the -R's
	// portSet (accepted) and the host's portClientUpdated (ready).
	type envelope struct {
		Action struct {
			Type     string      `json:"type"`
			Port     *tunnelPort `json:"port"`
			Resource string      `json:"resource"`
			ClientID string      `json:"clientId"`
			State    *struct {
				Status       string `json:"status"`
				LocalAddress *struct {
					Host string `json:"host"`
					Port int    `json:"port"`
				} `json:"localAddress"`
			} `json:"state"`
		} `json:"action"`
		Origin *struct {
			ClientID string `json:"clientId"`
		} `json:"origin"`
		RejectionReason string `json:"rejectionReason"`
	}
	var reverse, local tunnelPort
	readyAt := ""
	for reverse.Resource == "" || local.Resource == "" || readyAt == "" {
		m := rc.waitNotification("tunnel actions", func(m message) bool { return m.Method == "action" && m.channelOf() == "ahp-tunnels://" })
		var e envelope
		_ = json.Unmarshal(m.Params, &e)
		switch a := e.Action; {
		case a.Type == "tunnel/portSet" && a.Port.Direction == "clientToHost":
			reverse = *a.Port
			if reverse.Client == nil || reverse.Client.State.Status != "accepted" || e.Origin == nil || e.Origin.ClientID != reverse.RequestedBy.ClientID {
				t.Errorf("-R portSet: %s", m.raw)
			}
		case a.Type == "tunnel/portSet" && a.Port.Direction == "hostToClient":
			local = *a.Port
			if len(local.Clients) != 1 || local.Clients[0].State.Status != "ready" {
				t.Errorf("-L portSet: %s", m.raw)
			}
		case a.Type == "tunnel/portClientUpdated" && a.State != nil && a.State.Status == "ready" && e.Origin == nil:
			if a.State.LocalAddress != nil {
				readyAt = fmt.Sprintf("%s:%d", a.State.LocalAddress.Host, a.State.LocalAddress.Port)
			}
		}
	}
	if readyAt != addrs[0] {
		t.Errorf("the host reported ready at %s, forward printed %s", readyAt, addrs[0])
	}
	other := reverse.RequestedBy.ClientID

	// Rejected: another client's lifecycle, another client's entry, a
	// participant that is not us, a non-loopback listener.
	for i, tc := range []struct {
		action any
		want   string
	}{
		{map[string]any{"type": "tunnel/portClientUpdated", "resource": reverse.Resource, "clientId": other,
			"state": map[string]any{"status": "failed", "error": map[string]any{"errorType": "x", "message": "x"}}}, "only its own participant"},
		{map[string]any{"type": "tunnel/portRemoved", "resource": reverse.Resource}, "belongs to another client"},
		{map[string]any{"type": "tunnel/portSet", "port": map[string]any{"resource": "ahp-tunnel:/mine", "direction": "clientToHost",
			"requestedLocalAddress": map[string]any{"host": "127.0.0.1", "port": 0}, "requestedRemoteAddress": map[string]any{"host": "localhost", "port": 80},
			"requestedBy": map[string]any{"kind": "client", "clientId": "raw-tunnels"}, "createdAt": "2025-01-01T00:00:00Z",
			"client": map[string]any{"clientId": other, "state": map[string]any{"status": "accepted"}}}}, "only itself"},
		{map[string]any{"type": "tunnel/portSet", "port": map[string]any{"resource": "ahp-tunnel:/wide", "direction": "clientToHost",
			"requestedLocalAddress": map[string]any{"host": "0.0.0.0", "port": 0}, "requestedRemoteAddress": map[string]any{"host": "localhost", "port": 80},
			"requestedBy": map[string]any{"kind": "client", "clientId": "raw-tunnels"}, "createdAt": "2025-01-01T00:00:00Z",
			"client": map[string]any{"clientId": "raw-tunnels", "state": map[string]any{"status": "accepted"}}}}, "tunnels.allow_non_loopback"},
		{map[string]any{"type": "tunnel/portSet", "port": map[string]any{"resource": "ahp-tunnel:/local", "direction": "hostToClient",
			"requestedLocalAddress": map[string]any{"host": "127.0.0.1", "port": 5000}, "requestedRemoteAddress": map[string]any{"host": "localhost", "port": 80},
			"requestedBy": map[string]any{"kind": "client", "clientId": "raw-tunnels"}, "createdAt": "2025-01-01T00:00:00Z",
			"clients": []any{map[string]any{"clientId": "raw-tunnels", "state": map[string]any{"status": "accepted"}}}}},
			"did not declare capabilities.tunnels.hostToClient in initialize"},
	} {
		seq := 100 + i
		rc.sendJSON(map[string]any{"jsonrpc": "2.0", "method": "dispatchAction", "params": map[string]any{
			"channel": "ahp-tunnels://", "clientSeq": seq, "action": tc.action}})
		m := rc.waitNotification("echo", func(m message) bool {
			var e struct {
				Origin *struct {
					ClientID  string `json:"clientId"`
					ClientSeq int    `json:"clientSeq"`
				} `json:"origin"`
			}
			_ = json.Unmarshal(m.Params, &e)
			return m.Method == "action" && e.Origin != nil && e.Origin.ClientID == "raw-tunnels" && e.Origin.ClientSeq == seq
		})
		var e envelope
		_ = json.Unmarshal(m.Params, &e)
		if !strings.Contains(e.RejectionReason, tc.want) {
			t.Errorf("action %d: rejectionReason %q, want it to say %q", i, e.RejectionReason, tc.want)
		}
	}
	// Still listening, still forwarding.
	c := tcpDial(t, addrs[0])
	if err := echoRoundTrip(c, "after the rejections"); err != nil {
		t.Fatal(err)
	}
}

// TestReverseForwardTakeover: a forward -R killed with SIGKILL leaves its
// listener kept for its grace; another forward of the same token asking
// for the same address at once takes it over (the port and the one
// listener tunnels.max_listeners_per_principal allows) and connections
// reach its destination; a third, while that one is connected, is
// refused, naming the holder.
func TestReverseForwardTakeover(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c); _ = c.CloseWrite() })
	s := startServer(t, "tunnels {\n  max_listeners_per_principal = 1\n}\n")
	_, port, _ := net.SplitHostPort(freePort(t))
	spec := fmt.Sprintf("-R 127.0.0.1:%s:127.0.0.1:%d", port, echo)
	fw1, addrs := reverseStart(t, s, spec)
	if err := echoRoundTrip(tcpDial(t, addrs[0]), "first"); err != nil {
		t.Fatal(err)
	}
	if err := fw1.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = fw1.p.wait(t, waitTimeout)
	s.p.stderr.waitFor(t, "the killed client's link loss", 0, "client state kept for reconnect")
	_, addrs2 := reverseStart(t, s, spec)
	if addrs2[0] != addrs[0] {
		t.Fatalf("the second forward listens on %s, want %s", addrs2[0], addrs[0])
	}
	if err := echoRoundTrip(tcpDial(t, addrs2[0]), "second"); err != nil {
		t.Fatal(err)
	}
	s.p.stderr.waitFor(t, "the takeover's log", 0, "reverse forward taken over")
	_, stderr, code := s.run(t, append(append([]string{"forward", s.url}, strings.Fields(spec)...), s.connArgs()...)...)
	if code != 1 || !strings.Contains(stderr, "of connected client") {
		t.Errorf("a third forward of the same address: exit %d, stderr %q; want 1 and the holder named", code, stderr)
	}
}

// TestReverseForwardRestartPortTaken: after the daemon restarts, forward
// starts a new session; a -R whose port something else took meanwhile is
// reported on one line and retried, while the -L beside it goes on
// working (forward does not exit); once the port is free again the -R
// listens again and reaches its destination.
func TestReverseForwardRestartPortTaken(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c); _ = c.CloseWrite() })
	s := startServer(t, "")
	relay, url := relayed(t, s)
	rs := &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}
	_, port, _ := net.SplitHostPort(freePort(t))
	rspec := fmt.Sprintf("127.0.0.1:%s:127.0.0.1:%d", port, echo)
	fw, addrs := reverseStart(t, rs, "-R "+rspec, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	m := tcpForwardLine.FindStringSubmatch(fw.p.stderr.String())
	if m == nil {
		t.Fatalf("no -L line; stderr:\n%s", fw.p.stderr.String())
	}
	local := m[1]
	// The daemon restarts; meanwhile a program takes the -R's port.
	relay.Refuse(true)
	relay.Cut()
	if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := s.p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("the daemon exited %d on SIGTERM", code)
	}
	squatter, err := net.Listen("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	twin := startTwin(t, s)
	relay.SetTarget(twin.host)
	relay.Refuse(false)
	pos := fw.p.stderr.waitFor(t, "the new session", 0, "sidecar: new session with "+url+"\n")
	pos = fw.p.stderr.waitFor(t, "the -R reported", pos, "sidecar: -R "+rspec+" cannot be set up again in the new session: ")
	if err := echoRoundTrip(tcpDial(t, local), "the -L goes on"); err != nil {
		t.Fatalf("the -L after the new session: %v\nforward's stderr:\n%s", err, fw.p.stderr.String())
	}
	_ = squatter.Close()
	fw.p.stderr.waitFor(t, "the -R set up again", pos, "sidecar: forwarding "+addrs[0]+" on the host -> ")
	if err := echoRoundTrip(tcpDial(t, addrs[0]), "the -R again"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fw.p.done:
		t.Fatalf("forward exited:\n%s", fw.p.stderr.String())
	default:
	}
}
