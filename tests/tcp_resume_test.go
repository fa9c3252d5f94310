package tests

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// Forwarded TCP connections survive a cut (issue 15, seed 001: "complete
// replay to the same retained socket, or explicit failure, never a silent
// loss"). Each test moves pseudo-random bytes both ways at once through
// `sidecar forward -L` and compares SHA-256 sums at both ends.

// streamSum writes n pseudo-random bytes (seed) to w and returns their
// SHA-256.
func streamSum(w io.Writer, n int64, seed uint64) ([32]byte, error) {
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 0x15})
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for n > 0 {
		b := buf[:min(int64(len(buf)), n)]
		_, _ = rng.Read(b)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return [32]byte{}, err
		}
		n -= int64(len(b))
	}
	return [32]byte(h.Sum(nil)), nil
}

// readSum reads r to its end and returns the bytes' count and SHA-256.
func readSum(r io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	return n, [32]byte(h.Sum(nil)), err
}

// wantSum is the SHA-256 of streamSum's n bytes for seed.
func wantSum(n int64, seed uint64) [32]byte {
	s, _ := streamSum(io.Discard, n, seed)
	return s
}

// exchange is one connection's transfer: what one end received.
type exchange struct {
	n   int64
	sum [32]byte
	err error
}

// duplex sends n bytes (seed out) on c, half-closes, and reads what comes
// back until EOF: the received count and sum, or the first error.
func duplex(c *net.TCPConn, n int64, out uint64) exchange {
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, werr = streamSum(c, n, out); werr == nil {
			werr = c.CloseWrite()
		}
	}()
	got, sum, rerr := readSum(c)
	wg.Wait()
	return exchange{n: got, sum: sum, err: errors.Join(rerr, werr)}
}

// bulkDestination listens for connections that each send n bytes (seed
// down) while reading what the client sends; each one's receipt goes to
// the returned channel.
func bulkDestination(t *testing.T, n int64, down uint64) (int, <-chan exchange) {
	port, got, _ := bulkDestinationOpened(t, n, down)
	return port, got
}

// bulkDestinationOpened is bulkDestination that also tells each
// connection it accepts, on opened (64 at most are told).
func bulkDestinationOpened(t *testing.T, n int64, down uint64) (int, <-chan exchange, <-chan struct{}) {
	got := make(chan exchange, 64)
	opened := make(chan struct{}, 64)
	port := tcpListen(t, func(c *net.TCPConn) {
		select {
		case opened <- struct{}{}:
		default:
		}
		got <- duplex(c, n, down)
	})
	return port, got, opened
}

// cutsUntil arms a cut after a random number of bytes (1 KB to 4 MB, in a
// random direction) on relay, waits for forward to say it resumed, and
// repeats, up to cuts times or until done is closed. It returns the cuts
// that were resumed.
func cutsUntil(t *testing.T, fw *tcpForward, relay *fault.TCP, rng *rand.Rand, cuts int, done <-chan struct{}) int {
	t.Helper()
	// Not before the connections opened and data flows both ways (a cut
	// while one opens fails its open: forward's own test).
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := relay.Await(ctx, func() bool { return relay.Bytes(fault.Up) > 4<<20 && relay.Bytes(fault.Down) > 4<<20 }); err != nil {
		t.Fatalf("no data through the relay: %v", err)
	}
	resumed := 0
	from := 0
	for resumed < cuts {
		dir := fault.Down
		if rng.IntN(2) == 0 {
			dir = fault.Up
		}
		relay.CutAfter(int64(1000+rng.IntN(4<<20)), dir)
		deadline := time.NewTimer(2 * waitTimeout)
		// A direction whose transfer has ended (or crawls, on a loaded
		// machine) may never relay the armed bytes: cut now after 10 s.
		force := time.NewTimer(10 * time.Second)
		for {
			fw.p.stderr.mu.Lock()
			text, changed := fw.p.stderr.buf.String(), fw.p.stderr.changed
			fw.p.stderr.mu.Unlock()
			if i := strings.Index(text[from:], "sidecar: resumed\n"); i >= 0 {
				from += i + len("sidecar: resumed\n")
				resumed++
				break
			}
			select {
			case <-changed:
				continue
			case <-force.C:
				if relay.Armed(dir) {
					relay.CutAfter(0, dir)
				}
				continue
			case <-done:
				relay.CutAfter(1<<62, fault.Up) // nothing more to cut
				relay.CutAfter(1<<62, fault.Down)
				deadline.Stop()
				force.Stop()
				return resumed
			case <-deadline.C:
				t.Fatalf("cut %d not resumed within %v; stderr:\n%s", resumed+1, 2*waitTimeout, tail(text, 2000))
			}
		}
		deadline.Stop()
		force.Stop()
	}
	return resumed
}

// TestForwardSurvivesCuts: 64 MiB each way at once through one connection
// forwarded with -L while the link to the host fails: over /ahp and the
// transport-io WebSocket mapping, cut 20 times at random points
// (mid-frame, mid-message, between a message and its credit); over
// WebTransport, once a black hole until the client notices and
// reconnects, then four times every datagram dropped for a while and the
// path changed (QUIC migrates). Every byte
// arrives once, in order, both ways (SHA-256).
func TestForwardSurvivesCuts(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	for i, tc := range []struct {
		name string
		// start returns forward's URL and flags, and the fault loop.
		start func(t *testing.T, s *server) (fwServer *server, flags []string, faults func(fw *tcpForward, done <-chan struct{}) int)
	}{
		{"ahp", func(t *testing.T, s *server) (*server, []string, func(*tcpForward, <-chan struct{}) int) {
			relay, url := relayed(t, s)
			return &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}, nil,
				func(fw *tcpForward, done <-chan struct{}) int {
					return cutsUntil(t, fw, relay, rand.New(rand.NewPCG(15, 64)), 20, done)
				}
		}},
		{"transport-io WebSocket", func(t *testing.T, s *server) (*server, []string, func(*tcpForward, <-chan struct{}) int) {
			relay, _ := relayed(t, s)
			return &server{p: s.p, url: "https://" + relay.Addr() + "/transport-io", host: relay.Addr(), token: s.token, hash: s.hash}, []string{"--transport websocket"},
				func(fw *tcpForward, done <-chan struct{}) int {
					return cutsUntil(t, fw, relay, rand.New(rand.NewPCG(15, 65)), 20, done)
				}
		}},
		{"WebTransport", func(t *testing.T, s *server) (*server, []string, func(*tcpForward, <-chan struct{}) int) {
			tcp, udp, err := fault.NewPair(s.host)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tcp.Close(); _ = udp.Close() })
			return &server{p: s.p, url: "https://" + tcp.Addr() + "/transport-io", host: tcp.Addr(), token: s.token, hash: s.hash}, []string{"--transport webtransport"},
				func(fw *tcpForward, done <-chan struct{}) int {
					return udpBlackHole(t, fw, udp) + udpFaultsUntil(t, udp, 4, done)
				}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up, down := uint64(1500+2*i), uint64(1501+2*i)
			port, got := bulkDestination(t, size, down)
			s := startServer(t, "")
			fs, flags, faults := tc.start(t, s)
			fw := tcpStartForward(t, fs, append(flags, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))...)
			c := tcpDial(t, fw.addrs[0])
			_ = c.SetDeadline(time.Now().Add(5 * waitTimeout))
			local := make(chan exchange, 1)
			done := make(chan struct{})
			go func() {
				local <- duplex(c, size, up)
				close(done)
			}()
			start := time.Now()
			n := faults(fw, done)
			l := <-local
			var d exchange
			select {
			case d = <-got:
			case <-time.After(waitTimeout):
				t.Fatal("the destination did not finish")
			}
			t.Logf("64 MiB each way through %d faults (%d reconnects) in %v", n, strings.Count(fw.p.stderr.String(), "sidecar: resumed\n"), time.Since(start).Round(time.Millisecond))
			if l.err != nil || l.n != size || l.sum != wantSum(size, down) {
				t.Errorf("local end: %d bytes, error %v, sum match %v", l.n, l.err, l.sum == wantSum(size, down))
			}
			if d.err != nil || d.n != size || d.sum != wantSum(size, up) {
				t.Errorf("destination: %d bytes, error %v, sum match %v", d.n, d.err, d.sum == wantSum(size, up))
			}
			if n < 3 {
				t.Errorf("only %d faults fell in the transfer", n)
			}
		})
	}
}

// udpBlackHole drops every datagram, once 2,000 went down, until forward
// says it lost the connection (QUIC's idle timeout, 15-20 s), then lets
// them through and waits for the resume: one reconnect over WebTransport.
func udpBlackHole(t *testing.T, fw *tcpForward, udp *fault.UDP) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := udp.Await(ctx, func() bool { return udp.Datagrams(fault.Down) >= 2000 }); err != nil {
		t.Fatalf("no data through the relay: %v", err)
	}
	from := len(fw.p.stderr.String())
	udp.Drop(true)
	pos := fw.p.stderr.waitFor(t, "the reconnecting line", from, "sidecar: connection lost, reconnecting")
	udp.Drop(false)
	fw.p.stderr.waitFor(t, "the resumed line", pos, "sidecar: resumed\n")
	return 1
}

// udpFaultsUntil drops every datagram until at least 20 more were
// dropped, then moves the relay to a new port (the path changes), up to
// faults times, each once another 2,000 datagrams went down, or until
// done is closed. It returns the faults made.
func udpFaultsUntil(t *testing.T, udp *fault.UDP, faults int, done <-chan struct{}) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitTimeout)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	made := 0
	for made < faults {
		from := udp.Datagrams(fault.Down)
		if udp.Await(ctx, func() bool { return udp.Datagrams(fault.Down) >= from+2000 }) != nil {
			return made
		}
		udp.Drop(true)
		dropped := udp.Dropped(fault.Down) + udp.Dropped(fault.Up)
		err := udp.Await(ctx, func() bool { return udp.Dropped(fault.Down)+udp.Dropped(fault.Up) >= dropped+20 })
		udp.Cut()
		udp.Drop(false)
		if err != nil {
			return made
		}
		made++
	}
	return made
}

// TestForwardManySurviveCut: 16 connections through one forward, each
// moving 8 MiB both ways, survive a cut together.
func TestForwardManySurviveCut(t *testing.T) {
	t.Parallel()
	const size, conns = 8 << 20, 16
	const up, down = 1601, 1602
	port, got, opened := bulkDestinationOpened(t, size, down)
	s := startServer(t, "")
	relay, url := relayed(t, s)
	fw := tcpStartForward(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	local := make(chan exchange, conns)
	var wg sync.WaitGroup
	for range conns {
		c := tcpDial(t, fw.addrs[0])
		_ = c.SetDeadline(time.Now().Add(4 * waitTimeout))
		wg.Add(1)
		go func() {
			defer wg.Done()
			local <- duplex(c, size, up)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	// One cut, once every connection is open at the destination (the
	// opens go a few at a time; one lost in flight is dialled again and
	// the destination sees the first reset: TestForwardOpensOnceResumed)
	// and a good part of the data moved.
	for i := range conns {
		select {
		case <-opened:
		case <-time.After(waitTimeout):
			t.Fatalf("%d of %d connections open at the destination", i, conns)
		}
	}
	if cuts := cutsUntil(t, fw, relay, rand.New(rand.NewPCG(15, 16)), 1, done); cuts != 1 {
		t.Fatalf("the cut did not fall in the transfer")
	}
	for i := range conns {
		l := <-local
		if l.err != nil || l.n != size || l.sum != wantSum(size, down) {
			t.Errorf("local end %d: %d bytes, error %v", i, l.n, l.err)
		}
	}
	// An open whose result the cut lost is dialled again: the destination
	// then sees the first connection reset before any byte (an orphan),
	// never one cut short.
	for i, orphans := 0, 0; i < conns; {
		select {
		case d := <-got:
			switch {
			case d.n == 0 && d.err != nil && orphans < conns:
				orphans++
				t.Logf("an orphan of an open lost in flight: %v", d.err)
			case d.err != nil || d.n != size || d.sum != wantSum(size, up):
				t.Errorf("destination %d: %d bytes, error %v", i, d.n, d.err)
				i++
			default:
				i++
			}
		case <-time.After(waitTimeout):
			t.Fatal("a destination did not finish")
		}
	}
}

// TestForwardCutPastGraceResets: a cut longer than the host's grace (2 s
// here) resets both ends of a forwarded connection in the middle of a
// download: the local reader sees a reset, never an end of stream, and
// the destination sees its connection reset too.
func TestForwardCutPastGraceResets(t *testing.T) {
	t.Parallel()
	const size = 64 << 20
	port, got := bulkDestination(t, size, 1701)
	s := startServer(t, "journal {\n  reconnect_grace = \"2s\"\n}\n")
	relay, url := relayed(t, s)
	fw := tcpStartForward(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", port))
	c := tcpDial(t, fw.addrs[0])
	// Some of the download first, then the link goes for good.
	if _, err := io.CopyN(io.Discard, c, 1<<20); err != nil {
		t.Fatal(err)
	}
	relay.Refuse(true)
	relay.Cut()
	n, err := io.Copy(io.Discard, c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the local reader got %v after %d more bytes, want a reset", err, n)
	}
	select {
	case d := <-got:
		if d.err == nil {
			t.Fatalf("the destination's connection ended cleanly after %d bytes, want a reset", d.n)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the destination's connection was not reset")
	}
}

// startTwin starts a second `sidecar serve` with s's config file, state
// directory (so the same certificate) and token, on another port: what a
// restarted host is to its clients, which know nothing of the restart.
func startTwin(t *testing.T, s *server) *server {
	t.Helper()
	return startTwinIn(t, s, filepath.Join(filepath.Dir(s.config), "state"))
}

// startTwinIn is startTwin with the state directory state: another one is
// another certificate (the pin check below is then skipped).
func startTwinIn(t *testing.T, s *server, state string) *server {
	t.Helper()
	p := start(t, "serve", "--config", s.config, "--listen", "127.0.0.1:0", "--token", s.token, "--state-dir", state)
	var m []string
	text, ok := p.stdout.waitMatch(waitTimeout, func(text string) bool {
		m = attachLine.FindStringSubmatch(text)
		return m != nil
	})
	if !ok {
		t.Fatalf("the twin printed no attach line within %v\nstdout:\n%s\nstderr:\n%s", waitTimeout, text, tail(p.stderr.String(), 3000))
	}
	if m[4] != s.hash && state == filepath.Join(filepath.Dir(s.config), "state") {
		t.Fatalf("the twin's certificate pin %s differs from %s", m[4], s.hash)
	}
	return &server{p: p, url: m[1], host: m[2], token: s.token, hash: m[4], config: s.config}
}

// relayedEchoForward starts a host, a relay in front of it and `sidecar
// forward` through the relay with one -L to an echo server; open is a
// connection through that port, which has echoed once.
func relayedEchoForward(t *testing.T) (s *server, relay *fault.TCP, url string, fw *tcpForward, open *net.TCPConn) {
	t.Helper()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s = startServer(t, "")
	relay, url = relayed(t, s)
	fw = tcpStartForward(t, &server{p: s.p, url: url, host: relay.Addr(), token: s.token, hash: s.hash}, fmt.Sprintf("-L 127.0.0.1:0:127.0.0.1:%d", echo))
	open = tcpDial(t, fw.addrs[0])
	if err := echoRoundTrip(open, "before"); err != nil {
		t.Fatal(err)
	}
	return s, relay, url, fw, open
}

// echoRoundTrip writes msg to c, an echoed connection, and reads it back.
func echoRoundTrip(c net.Conn, msg string) error {
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return fmt.Errorf("echoed %q, want %q", b, msg)
	}
	return nil
}

// TestForwardNewSessionAfterHostRestart: the host forward talks to
// restarts, and the relay now leads to a twin that never knew this
// client; the old host is either cut off (a crash) or shut down the usual
// way (SIGTERM, as systemctl restart: forward is told the server is
// shutting down and reconnects instead of exiting). forward's resume is
// answered "expired", so it starts a new session and the same local port
// forwards again, without a restart of forward; the connection open at the
// restart is reset.
func TestForwardNewSessionAfterHostRestart(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cut", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s, relay, url, fw, open := relayedEchoForward(t)
			twin := startTwin(t, s)
			relay.SetTarget(twin.host)
			if how == "cut" {
				relay.Cut()
			} else if err := s.p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			pos := fw.p.stderr.waitFor(t, "the new session", 0, "sidecar: new session with "+url+"\n")
			told := strings.Contains(fw.p.stderr.String(), "sidecar: the server is shutting down; reconnecting (attempt 1, ")
			if told != (how == "SIGTERM") {
				t.Errorf("forward said the server was shutting down: %v; stderr:\n%s", told, fw.p.stderr.String())
			}
			if _, err := io.Copy(io.Discard, open); !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the connection open at the restart ended with %v, want a reset", err)
			}
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
