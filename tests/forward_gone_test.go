package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// TestForwardDaemonKilled: the daemon forward talks to is killed (kill
// -9: it closes nothing and keeps nothing). Its address then refuses
// connections, so the state a reconnect would resume is gone: forward
// resets the local connection open at that moment at once (it hung until
// the daemon came back, or the grace ended), says so, keeps its port and
// resets what it accepts while the daemon is down; once the daemon is
// back on the same port (same token, same certificate) a new session
// forwards again, without a restart of forward.
func TestForwardDaemonKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		url  func(s *server) string
		flag []string
		// reset bounds the wait for the reset: the loss is noticed at
		// once over TCP, after QUIC's idle timeout (15 s) over UDP.
		reset time.Duration
	}{
		{"ahp", func(s *server) string { return s.url }, nil, 10 * time.Second},
		// UDP refuses nothing: the daemon's TCP port, the same number,
		// tells that nothing listens.
		{"WebTransport", func(s *server) string { return "https://" + s.host + "/transport-io" }, []string{"--transport webtransport"}, 25 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
			s := startServer(t, "")
			url := tc.url(s)
			fw := tcpStartForwardAt(t, s, url, append(tc.flag, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))...)
			open := tcpDial(t, fw.addrs[0])
			if err := echoRoundTrip(open, "before"); err != nil {
				t.Fatal(err)
			}
			if err := s.p.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			s.p.wait(t, waitTimeout)

			// Reset promptly: the first reconnect attempt goes about 250 ms
			// after the loss is noticed, not when a deadline ends the read.
			_ = open.SetReadDeadline(time.Now().Add(tc.reset))
			if b, err := io.ReadAll(open); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("the connection open when the daemon was killed: read %q, %v; want a reset within %v\nforward's stderr:\n%s", b, err, tc.reset, fw.p.stderr.String())
			}
			pos := fw.p.stderr.waitFor(t, "forward saying the host is gone", 0,
				"the host's address refuses connections: its daemon is gone (or a tunnel or proxy in front of it is down)")
			pos = fw.p.stderr.waitFor(t, "the reset count", pos, "sidecar: reset 1 forwarded connection(s) still open\n")
			pos = fw.p.stderr.waitFor(t, "the wait for the daemon", pos,
				"sidecar: starting a new session with "+url+" once it answers; the ports stay open, and connections to them are reset until then\n")

			// The port still accepts; what it accepts now is reset at once.
			fwDialReset(t, "a connection while the daemon is down", fw.addrs[0])

			startAgain(t, s)
			fw.p.stderr.waitFor(t, "the new session", pos, "sidecar: new session with "+url+"\n")
			c := tcpDial(t, fw.addrs[0])
			if err := echoRoundTrip(c, "after the restart"); err != nil {
				t.Fatalf("through the same -L port after the new session: %v\nforward's stderr:\n%s", err, fw.p.stderr.String()[pos:])
			}
			select {
			case <-fw.p.done:
				t.Fatalf("forward exited:\n%s", fw.p.stderr.String())
			default:
			}
		})
	}
}

// startAgain starts `sidecar serve` again as s was (its config file,
// state directory, so its certificate, and token) on s's own address,
// which the killed s left free: a daemon that came back.
func startAgain(t *testing.T, s *server) *server {
	t.Helper()
	p := start(t, "serve", "--config", s.config, "--listen", s.host, "--token", s.token, "--state-dir", filepath.Join(filepath.Dir(s.config), "state"))
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("the daemon started again printed no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	if m[2] != s.host || m[4] != s.hash {
		t.Fatalf("the daemon came back on %s with pin %s, want %s and %s", m[2], m[4], s.host, s.hash)
	}
	return &server{p: p, url: m[1], host: m[2], token: s.token, hash: m[4], config: s.config}
}

// TestRunHostRestarted: `run` whose daemon is killed and started again
// (same address, token and certificate) learns on reconnecting that the
// host keeps nothing of its session, and the host lists no such terminal
// (it restarted, its terminals with it): run says the command is not
// running there, rather than that it may still be and how to attach.
func TestRunHostRestarted(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	args := append([]string{"run", s.url}, s.connArgs()...)
	r := start(t, append(args, "--", "sh", "-c", "echo started; while :; do sleep 1; done")...)
	r.stdout.waitFor(t, "the command's first line", 0, "started")
	if err := s.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.p.wait(t, waitTimeout)
	startAgain(t, s)
	if code := r.wait(t, 60*time.Second); code != 255 {
		t.Fatalf("run exited %d, want 255\nstderr:\n%s", code, r.stderr.String())
	}
	stderr := r.stderr.String()
	if !strings.Contains(stderr, "sidecar: the host no longer has ahp-terminal:/") || !strings.Contains(stderr, "(it restarted, or the grace ended): sh is not running there") {
		t.Fatalf("run's stderr does not say the command is gone:\n%s", stderr)
	}
	if strings.Contains(stderr, "may still be running") {
		t.Fatalf("run's stderr suggests attaching to a terminal the restarted host cannot have:\n%s", stderr)
	}
}

// TestForwardRelayRestarted: forward reaches a live daemon through a relay
// (an ssh tunnel, kubectl port-forward) that is stopped and started again.
// While it is down its address refuses, so forward resets its local
// connection as for a killed daemon; but the daemon kept the session, and
// with it the destination connection. Once the relay answers, forward
// releases that session: the destination's connection ends at once
// rather than when the grace (2 h by default) does.
func TestForwardRelayRestarted(t *testing.T) {
	t.Parallel()
	ended := make(chan error, 1)
	dest := tcpListen(t, func(c *net.TCPConn) {
		_, _ = io.Copy(c, c)
		_, err := c.Read(make([]byte, 1))
		ended <- err
	})
	s := startServer(t, "")
	relay, err := fault.NewTCP(s.host)
	if err != nil {
		t.Fatal(err)
	}
	port := relay.Addr()[strings.LastIndexByte(relay.Addr(), ':')+1:]
	url := "wss://" + relay.Addr() + "/ahp"
	fw := tcpStartForwardAt(t, s, url, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", dest))
	open := tcpDial(t, fw.addrs[0])
	if err := echoRoundTrip(open, "before"); err != nil {
		t.Fatal(err)
	}
	_ = relay.Close()
	pos := fw.p.stderr.waitFor(t, "forward saying the address refuses", 0,
		"the host's address refuses connections: its daemon is gone (or a tunnel or proxy in front of it is down)")
	_ = open.SetReadDeadline(time.Now().Add(waitTimeout))
	if b, err := io.ReadAll(open); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the local connection: read %q, %v; want a reset", b, err)
	}
	select {
	case err := <-ended:
		t.Fatalf("the destination's connection ended while the relay was down (%v): the daemon should still keep it", err)
	default:
	}
	p, _ := strconv.Atoi(port)
	relay, err = fault.NewTCPAt(p, s.host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = relay.Close() })
	pos = fw.p.stderr.waitFor(t, "the new session", pos, "sidecar: new session with "+url+"\n")
	fw.p.stderr.waitFor(t, "the release", pos, "sidecar: the host had kept the previous session")
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		t.Fatalf("the destination's connection is still open %v after forward's new session\nforward's stderr:\n%s", waitTimeout, fw.p.stderr.String())
	}
	c := tcpDial(t, fw.addrs[0])
	if err := echoRoundTrip(c, "after the relay restarted"); err != nil {
		t.Fatalf("through the same -L port after the new session: %v", err)
	}
}
