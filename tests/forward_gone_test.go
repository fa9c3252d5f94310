package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := startServer(t, "")
	fw := tcpStartForward(t, s, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	open := tcpDial(t, fw.addrs[0])
	if err := echoRoundTrip(open, "before"); err != nil {
		t.Fatal(err)
	}
	if err := s.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.p.wait(t, waitTimeout)

	// Reset promptly: within 10 s (the first reconnect attempt goes after
	// about 250 ms), not when a deadline ends the read.
	_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := io.ReadAll(open); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection open when the daemon was killed: read %q, %v; want a reset within 10 s\nforward's stderr:\n%s", b, err, fw.p.stderr.String())
	}
	pos := fw.p.stderr.waitFor(t, "forward saying the host is gone", 0,
		"the host's address refuses connections: the process that held the session is gone")
	pos = fw.p.stderr.waitFor(t, "the reset count", pos, "sidecar: reset 1 forwarded connection(s) still open\n")
	pos = fw.p.stderr.waitFor(t, "the wait for the daemon", pos,
		"sidecar: starting a new session with "+s.url+" once it answers; the ports stay open, and connections to them are reset until then\n")

	// The port still accepts; what it accepts now is reset at once.
	fwDialReset(t, "a connection while the daemon is down", fw.addrs[0])

	startAgain(t, s)
	fw.p.stderr.waitFor(t, "the new session", pos, "sidecar: new session with "+s.url+"\n")
	c := tcpDial(t, fw.addrs[0])
	if err := echoRoundTrip(c, "after the restart"); err != nil {
		t.Fatalf("through the same -L port after the new session: %v\nforward's stderr:\n%s", err, fw.p.stderr.String()[pos:])
	}
	select {
	case <-fw.p.done:
		t.Fatalf("forward exited:\n%s", fw.p.stderr.String())
	default:
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
