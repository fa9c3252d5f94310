package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/tests/fault"
)

// The end-to-end tests of `sidecar connect` (issue 29): standard input
// and output as one forwarded TCP connection, for ssh's ProxyCommand.
// Each starts the real binary with a pipe on its standard input and one
// on its standard output, and the token and pin in the environment.

// connectProc is a running `sidecar connect`: write to in (its standard
// input), read from out (its standard output); its stderr and exit are
// in p.
type connectProc struct {
	p   *proc
	in  *os.File
	out *os.File
}

// startConnect runs `sidecar connect args...` with $SIDECAR_TOKEN and
// $SIDECAR_CERT_HASH from s.
func startConnect(t *testing.T, s *server, args ...string) *connectProc {
	t.Helper()
	cmd := exec.Command(sidecarBin, append([]string{"connect"}, args...)...)
	cmd.Env = append(cleanEnv(), "SIDECAR_TOKEN="+s.token, "SIDECAR_CERT_HASH="+s.hash)
	p, in, out := startPiped(t, cmd)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s stderr:\n%s", cmd.Args[0], tail(p.stderr.String(), 4000))
		}
	})
	return &connectProc{p: p, in: in, out: out}
}

// startPiped starts cmd with a pipe on its standard input (in: write to
// it) and one on its standard output (out: read from it), stderr
// collected in p.stderr. Reads and writes of the test through them fail
// past a deadline rather than block; the process is killed (if still
// running) at cleanup.
func startPiped(t *testing.T, cmd *exec.Cmd) (p *proc, in, out *os.File) {
	t.Helper()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	p = &proc{cmd: cmd, stdout: newStreamBuf(), stderr: newStreamBuf(), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = inR.Close()
	_ = outW.Close()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	_ = outR.SetDeadline(time.Now().Add(4 * waitTimeout))
	_ = inW.SetDeadline(time.Now().Add(4 * waitTimeout))
	t.Cleanup(func() {
		p.kill(t)
		_ = inW.Close()
		_ = outR.Close()
	})
	return p, inW, outR
}

// transfer is a bulk transfer through a running connect: size bytes
// (seed up) written to its standard input, which is then closed, while
// its standard output is read to its end.
type transfer struct {
	c    *connectProc
	size int64
	werr chan error
	read chan exchange
	done chan struct{} // closed once standard output has ended
}

func (c *connectProc) transfer(size int64, up uint64) *transfer {
	tr := &transfer{c: c, size: size, werr: make(chan error, 1), read: make(chan exchange, 1), done: make(chan struct{})}
	go func() {
		_, err := streamSum(c.in, size, up)
		if err == nil {
			err = c.in.Close()
		}
		tr.werr <- err
	}()
	go func() {
		n, sum, err := readSum(c.out)
		tr.read <- exchange{n: n, sum: sum, err: err}
		close(tr.done)
	}()
	return tr
}

// check fails t unless every byte arrived once both ways (standard output
// got seed down, the destination, which reports on got, seed up) and
// connect exited 0.
func (tr *transfer) check(t *testing.T, up, down uint64, got <-chan exchange) {
	t.Helper()
	size := tr.size
	if r := <-tr.read; r.err != nil || r.n != size || r.sum != wantSum(size, down) {
		t.Errorf("standard output: %d bytes, error %v, sum match %v", r.n, r.err, r.sum == wantSum(size, down))
	}
	if err := <-tr.werr; err != nil {
		t.Errorf("standard input: %v", err)
	}
	select {
	case d := <-got:
		if d.err != nil || d.n != size || d.sum != wantSum(size, up) {
			t.Errorf("destination: %d bytes, error %v, sum match %v", d.n, d.err, d.sum == wantSum(size, up))
		}
	case <-time.After(waitTimeout):
		t.Fatal("the destination did not finish")
	}
	if code := tr.c.p.wait(t, waitTimeout); code != 0 {
		t.Errorf("connect exited %d, want 0", code)
	}
}

// TestConnectBulk: 16 MiB each way at once through `sidecar connect` to a
// destination that sends while it reads: the end of standard input
// reaches the destination as its end of file, the destination's end
// closes standard output, every byte arrives once (SHA-256 at both ends),
// connect exits 0, and its standard error stays empty.
func TestConnectBulk(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	const up, down = 2901, 2902
	port, got := bulkDestination(t, size, down)
	s := startServer(t, "")
	c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", port))
	c.transfer(size, up).check(t, up, down, got)
	if e := c.p.stderr.String(); e != "" {
		t.Errorf("connect wrote to standard error:\n%s", e)
	}
}

// TestConnectHalfClose: each side's end of file is a half-close, the
// other direction going on: the destination answers only after the end
// of standard input; and when the destination ends first, connect closes
// standard output but still carries standard input until its end.
func TestConnectHalfClose(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	t.Run("standard input ends first", func(t *testing.T) {
		port := tcpListen(t, func(c *net.TCPConn) {
			req, err := io.ReadAll(c)
			if err != nil {
				return
			}
			fmt.Fprintf(c, "got %d bytes: %s", len(req), bytes.ToUpper(req))
		})
		c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", port))
		if _, err := c.in.Write([]byte("question")); err != nil {
			t.Fatal(err)
		}
		_ = c.in.Close()
		answer, err := io.ReadAll(c.out)
		if err != nil || string(answer) != "got 8 bytes: QUESTION" {
			t.Fatalf("answer %q, %v", answer, err)
		}
		if code := c.p.wait(t, waitTimeout); code != 0 {
			t.Fatalf("connect exited %d, want 0", code)
		}
	})
	t.Run("the destination ends first", func(t *testing.T) {
		later := make(chan string, 1)
		port := tcpListen(t, func(c *net.TCPConn) {
			_, _ = c.Write([]byte("hello"))
			_ = c.CloseWrite()
			b, _ := io.ReadAll(c)
			later <- string(b)
		})
		c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", port))
		if hello, err := io.ReadAll(c.out); err != nil || string(hello) != "hello" {
			t.Fatalf("standard output %q, %v", hello, err)
		}
		// Still carried: connect did not end with standard output.
		if _, err := c.in.Write([]byte("after the end of output")); err != nil {
			t.Fatal(err)
		}
		_ = c.in.Close()
		select {
		case b := <-later:
			if b != "after the end of output" {
				t.Fatalf("the destination read %q", b)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the destination's read did not end")
		}
		if code := c.p.wait(t, waitTimeout); code != 0 {
			t.Fatalf("connect exited %d, want 0", code)
		}
	})
}

// TestConnectFailures: what does not end in order exits non-zero with a
// line naming why, and nothing on standard output: a destination that
// refuses or that the host's policy forbids (1), one that resets the
// connection (1), a host that is not there (255), a usage error (2).
func TestConnectFailures(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	closed := tcpClosedPort(t)
	reset := tcpListen(t, func(c *net.TCPConn) {
		_, _ = io.ReadFull(c, make([]byte, 4))
		_ = c.SetLinger(0) // the deferred Close sends an RST
	})
	for _, tc := range []struct {
		name, url, dest string
		send            string // written to standard input, which stays open
		code            int
		line            string
	}{
		{"refused", s.url, fmt.Sprintf("127.0.0.1:%d", closed), "", 1,
			fmt.Sprintf("sidecar: 127.0.0.1:%d: open failed: connect to 127.0.0.1:%d refused\n", closed, closed)},
		{"not allowed", s.url, "10.255.255.1:22", "", 1,
			"sidecar: 10.255.255.1:22: open failed: connect to 10.255.255.1:22 not allowed by policy"},
		{"destination resets", s.url, fmt.Sprintf("127.0.0.1:%d", reset), "ping", 1,
			fmt.Sprintf("sidecar: 127.0.0.1:%d: connection reset by the destination\n", reset)},
		{"no host", "wss://" + freePort(t) + "/ahp", "127.0.0.1:22", "", 255,
			"sidecar: nothing is listening at 127.0.0.1:"},
		{"bad destination", s.url, "127.0.0.1", "", 2,
			`sidecar: bad HOST:PORT "127.0.0.1": want host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startConnect(t, s, tc.url, tc.dest)
			if tc.send != "" {
				if _, err := c.in.Write([]byte(tc.send)); err != nil {
					t.Fatal(err)
				}
			}
			if code := c.p.wait(t, waitTimeout); code != tc.code {
				t.Errorf("connect exited %d, want %d", code, tc.code)
			}
			if e := c.p.stderr.String(); !strings.Contains(e, tc.line) || strings.Count(e, "\n") != 1 {
				t.Errorf("standard error:\n%s\nwant one line with %q", e, tc.line)
			}
			if out, err := io.ReadAll(c.out); len(out) != 0 || err != nil {
				t.Errorf("standard output %q, %v; want nothing", out, err)
			}
		})
	}
}

// TestConnectSurvivesCuts: 32 MiB each way through `sidecar connect -v`
// while the link to the host is cut at random points (mid-frame,
// mid-message, between a message and its credit); every byte arrives
// once, in order, both ways, and connect exits 0. So it does across a
// black hole (16 MiB each way): the link goes silent until connect says it
// is reconnecting, then comes back. A link whose address
// then refuses connections (the daemon gone with the connection's state)
// ends connect with 255 and a line saying so once it has refused for
// connectRefusedRetry (12 s), rather than after the host's grace; a relay
// in front of the daemon that refuses for a moment (restarting) is
// retried, and the connection resumes with nothing lost.
func TestConnectSurvivesCuts(t *testing.T) {
	t.Parallel()
	t.Run("cuts", func(t *testing.T) {
		t.Parallel()
		const size = 32 << 20
		const up, down = 2911, 2912
		port, got := bulkDestination(t, size, down)
		s := startServer(t, "")
		relay, url := relayed(t, s)
		c := startConnect(t, s, url, fmt.Sprintf("127.0.0.1:%d", port), "-v")
		c.p.stderr.waitFor(t, "the connected line", 0, "sidecar: connected to "+url+" over ")
		tr := c.transfer(size, up)
		cuts := cutsUntil(t, &tcpForward{p: c.p}, relay, rand.New(rand.NewPCG(29, 32)), 6, tr.done)
		tr.check(t, up, down, got)
		t.Logf("32 MiB each way through %d cuts", cuts)
		if cuts < 2 {
			t.Errorf("only %d cuts fell in the transfer", cuts)
		}
	})
	t.Run("black hole", func(t *testing.T) {
		t.Parallel()
		const size = 16 << 20
		const up, down = 2921, 2922
		port, got := bulkDestination(t, size, down)
		s := startServer(t, "")
		relay, url := relayed(t, s)
		c := startConnect(t, s, url, fmt.Sprintf("127.0.0.1:%d", port), "-v")
		pos := c.p.stderr.waitFor(t, "the connected line", 0, "sidecar: connected to "+url+" over ")
		tr := c.transfer(size, up)
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := relay.Await(ctx, func() bool { return relay.Bytes(fault.Up) > 4<<20 && relay.Bytes(fault.Down) > 4<<20 }); err != nil {
			t.Fatalf("no data through the relay: %v", err)
		}
		relay.Stall(true)
		// The keepalive gives up on the silent path after some 30 s.
		lost := "sidecar: connection lost, reconnecting"
		if text, ok := c.p.stderr.waitMatch(3*waitTimeout, func(text string) bool { return strings.Contains(text[pos:], lost) }); !ok {
			relay.Stall(false)
			t.Fatalf("no %q line within %v:\n%s", lost, 3*waitTimeout, text)
		}
		relay.Stall(false)
		c.p.stderr.waitFor(t, "the resumed line", pos, "sidecar: resumed\n")
		tr.check(t, up, down, got)
	})
	t.Run("relay restarting", func(t *testing.T) {
		t.Parallel()
		echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c); _ = c.CloseWrite() })
		s := startServer(t, "")
		relay, err := fault.NewTCP(s.host)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(relay.Addr()[strings.LastIndexByte(relay.Addr(), ':')+1:])
		url := "wss://" + relay.Addr() + "/ahp"
		c := startConnect(t, s, url, fmt.Sprintf("127.0.0.1:%d", echo), "-v")
		pos := c.p.stderr.waitFor(t, "the connected line", 0, "sidecar: connected to "+url+" over ")
		echoed := func(msg string) {
			t.Helper()
			if _, err := c.in.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, len(msg))
			if _, err := io.ReadFull(c.out, b); err != nil || string(b) != msg {
				t.Fatalf("echoed %q, %v; want %q\nstandard error:\n%s", b, err, msg, c.p.stderr.String())
			}
		}
		echoed("before")
		// The relay in front of the daemon restarts: its port refuses
		// for a while (two attempts at least), then answers again.
		_ = relay.Close()
		pos = c.p.stderr.waitFor(t, "two refused attempts", pos, "sidecar: connection lost, reconnecting (attempt 3, next in ")
		relay, err = fault.NewTCPAt(port, s.host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = relay.Close() })
		c.p.stderr.waitFor(t, "the resumed line", pos, "sidecar: resumed\n")
		echoed("after, nothing lost")
		_ = c.in.Close()
		if rest, err := io.ReadAll(c.out); err != nil || len(rest) != 0 {
			t.Errorf("after standard input's end: %q, %v; want end of file", rest, err)
		}
		if code := c.p.wait(t, waitTimeout); code != 0 {
			t.Errorf("connect exited %d, want 0; standard error:\n%s", code, c.p.stderr.String())
		}
	})
	t.Run("host gone", func(t *testing.T) {
		t.Parallel()
		echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
		s := startServer(t, "")
		relay, url := relayed(t, s)
		c := startConnect(t, s, url, fmt.Sprintf("127.0.0.1:%d", echo))
		if _, err := c.in.Write([]byte("before")); err != nil {
			t.Fatal(err)
		}
		if b := make([]byte, 6); func() error { _, err := io.ReadFull(c.out, b); return err }() != nil || string(b) != "before" {
			t.Fatalf("echoed %q", b)
		}
		// As ssh does with its ProxyCommand: SIGHUP as soon as our
		// output ends. The reason must be on standard error by then.
		hup := make(chan struct{})
		go func() {
			defer close(hup)
			_, _ = io.Copy(io.Discard, c.out)
			_ = c.p.cmd.Process.Signal(syscall.SIGHUP)
		}()
		_ = relay.Close() // its port now refuses, as a killed daemon's does
		code := c.p.wait(t, waitTimeout)
		<-hup
		// 255; or, the SIGHUP coming after its line, 129 (caught) or
		// killed by it (-1: past the handler, on the way out).
		if code != 255 && code != 128+int(syscall.SIGHUP) && code != -1 {
			t.Errorf("connect exited %d, want 255 (or 129 or killed: the SIGHUP after its line)", code)
		}
		if e := c.p.stderr.String(); !strings.Contains(e, "the host's address refuses connections") {
			t.Errorf("standard error:\n%s\nwant a line saying the host's address refuses connections, written before standard output ended", e)
		}
	})
}

// TestConnectVia: through --via's command (`sidecar stdio`), no URL.
func TestConnectVia(t *testing.T) {
	t.Parallel()
	echo := tcpListen(t, func(c *net.TCPConn) { _, _ = io.Copy(c, c) })
	s := &server{} // nothing to authenticate: the pipe is the connection
	c := startConnect(t, s, "--via", sidecarBin+" stdio", fmt.Sprintf("127.0.0.1:%d", echo))
	if _, err := c.in.Write([]byte("through stdio")); err != nil {
		t.Fatal(err)
	}
	_ = c.in.Close()
	if got, err := io.ReadAll(c.out); err != nil || string(got) != "through stdio" {
		t.Fatalf("standard output %q, %v", got, err)
	}
	if code := c.p.wait(t, waitTimeout); code != 0 {
		t.Fatalf("connect --via exited %d, want 0", code)
	}
}

// TestConnectCutShort: a connect ended before the connection did resets
// it, so that the destination never takes a cut stream for a complete
// one: a signal (SIGHUP, as ssh sends its ProxyCommand when it exits)
// while standard input is open exits 129 without a line (after the end
// of input, the orderly close finishes first); a reader of standard output that went away
// exits 1 with a line naming standard output.
func TestConnectCutShort(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	// ended reports how each destination connection's read ended.
	ended := make(chan error, 4)
	echo := tcpListen(t, func(c *net.TCPConn) {
		_, err := io.Copy(c, c)
		if err == nil {
			err = io.EOF
		}
		ended <- err
	})
	flood := tcpListen(t, func(c *net.TCPConn) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				ended <- err
				return
			}
		}
	})
	wantReset := func(t *testing.T) {
		t.Helper()
		select {
		case err := <-ended:
			if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Errorf("the destination's connection ended with %v, want a reset", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the destination's connection did not end")
		}
	}
	t.Run("SIGHUP", func(t *testing.T) {
		c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", echo))
		if _, err := c.in.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.out, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if err := c.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if code := c.p.wait(t, waitTimeout); code != 129 {
			t.Errorf("connect exited %d, want 129", code)
		}
		if e := c.p.stderr.String(); e != "" {
			t.Errorf("standard error:\n%s\nwant nothing", e)
		}
		wantReset(t)
	})
	t.Run("SIGHUP after the end of input", func(t *testing.T) {
		// As ssh exits: its last bytes and the end of standard input
		// come just before the signal. They go through, and the close
		// is an orderly one, not a reset.
		c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", echo))
		if _, err := c.in.Write([]byte("ping")); err != nil { // connect is up, its signals caught
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c.out, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.in.Write([]byte("bye")); err != nil {
			t.Fatal(err)
		}
		_ = c.in.Close()
		if err := c.p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(c.out); err != nil || string(got) != "bye" {
			t.Errorf("standard output %q, %v; want %q", got, err, "bye")
		}
		if code := c.p.wait(t, waitTimeout); code != 0 {
			t.Errorf("connect exited %d, want 0", code)
		}
		if e := c.p.stderr.String(); e != "" {
			t.Errorf("standard error:\n%s\nwant nothing", e)
		}
		select {
		case err := <-ended:
			if err != io.EOF {
				t.Errorf("the destination's connection ended with %v, want end of file", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the destination's connection did not end")
		}
	})
	t.Run("standard output gone", func(t *testing.T) {
		c := startConnect(t, s, s.url, fmt.Sprintf("127.0.0.1:%d", flood))
		if _, err := io.ReadFull(c.out, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		_ = c.out.Close()
		if code := c.p.wait(t, waitTimeout); code != 1 {
			t.Errorf("connect exited %d, want 1", code)
		}
		if e := c.p.stderr.String(); !strings.HasPrefix(e, "sidecar: standard output: ") || !strings.Contains(e, "broken pipe") || strings.Count(e, "\n") != 1 {
			t.Errorf("standard error:\n%s\nwant one line on standard output's broken pipe", e)
		}
		wantReset(t)
	})
}
