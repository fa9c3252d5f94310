package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/internal/syncbuf"
	"github.com/sidecar-dev/sidecar/transport"
)

// emfile is the error Accept returns when the process is out of file
// descriptors, as net.TCPListener returns it.
func emfile(l net.Listener) error {
	return &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
}

// flakyListener is a real loopback listener whose Accept fails `fails`
// times first (forever if negative) with EMFILE, sending a value on failed
// for each failure; once closed, Accept returns net.ErrClosed.
type flakyListener struct {
	net.Listener
	failed chan struct{} // one value per failure; never blocks (buffered, dropped when full)

	mu     sync.Mutex
	fails  int
	closed bool
}

func newFlakyListener(t *testing.T, fails int) *flakyListener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: l, fails: fails, failed: make(chan struct{}, 64)}
	t.Cleanup(func() { _ = fl.Close() })
	return fl
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: net.ErrClosed}
	}
	if f.fails != 0 {
		f.fails--
		f.mu.Unlock()
		select {
		case f.failed <- struct{}{}:
		default:
		}
		return nil, emfile(f)
	}
	f.mu.Unlock()
	return f.Listener.Accept()
}

func (f *flakyListener) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return f.Listener.Close()
}

// syncBuffer is a buffer for one writer goroutine and a reading test.
type syncBuffer = syncbuf.Buffer

// closeWithin closes fw and waits for it, failing the test after d (and
// leaving what still runs behind).
func closeWithin(t *testing.T, fw *Forwarder, d time.Duration) {
	t.Helper()
	fw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := fw.Wait(ctx); err != nil {
		t.Errorf("the forwarder still running %v after Close", d)
	}
}

// echoServer is a loopback destination that echoes one line per
// connection; it returns its port.
func echoServer(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = io.WriteString(c, "echo: "+line)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port
}

// TestAcceptRetriesAfterEMFILE: an Accept that fails (EMFILE, out of file
// descriptors) does not end -L's or -D's accept loop: it is logged once and
// retried, and the connection waiting in the backlog is accepted and
// forwarded when Accept works again.
func TestAcceptRetriesAfterEMFILE(t *testing.T) {
	conn := testHostConn(t)
	destPort := echoServer(t)
	const fails = 3

	start := func(t *testing.T, serve func(fw *Forwarder, l net.Listener) error) (*flakyListener, *syncBuffer) {
		fl := newFlakyListener(t, fails)
		var log syncBuffer
		fw := NewForwarder(conn, ForwarderOptions{Log: &log})
		if err := serve(fw, fl); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeWithin(t, fw, 10*time.Second) })
		return fl, &log
	}
	dial := func(t *testing.T, l net.Listener) net.Conn {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		// Without the retry nothing accepts: the reads below end here.
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	checkLog := func(t *testing.T, l net.Listener, log *syncBuffer) {
		want := "accept on " + l.Addr().String() + ": too many open files (retrying)\n"
		again := "accepting on " + l.Addr().String() + " again\n"
		if got := log.String(); !strings.HasPrefix(got, want) || !strings.HasSuffix(got, again) {
			t.Errorf("stderr %q, want it to start with %q and end with %q", got, want, again)
		}
	}

	t.Run("-L", func(t *testing.T) {
		fl, log := start(t, func(fw *Forwarder, l net.Listener) error {
			return fw.ServeLocal(l, "127.0.0.1", destPort)
		})
		c := dial(t, fl)
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			t.Fatal(err)
		}
		if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "echo: ping\n" {
			t.Fatalf("through -L after %d failed Accepts: %q, %v; want \"echo: ping\\n\"", fails, got, err)
		}
		checkLog(t, fl, log)
	})

	t.Run("-D", func(t *testing.T) {
		fl, log := start(t, (*Forwarder).ServeSOCKS)
		c := dial(t, fl)
		req := []byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1}
		req = binary.BigEndian.AppendUint16(req, uint16(destPort))
		if _, err := c.Write(append(req, "ping\n"...)); err != nil {
			t.Fatal(err)
		}
		var reply [2 + 10]byte
		if _, err := io.ReadFull(c, reply[:]); err != nil || reply[1] != 0 || reply[3] != 0 {
			t.Fatalf("SOCKS5 after %d failed Accepts: reply % x, %v; want success", fails, reply, err)
		}
		if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "echo: ping\n" {
			t.Fatalf("through -D: %q, %v; want \"echo: ping\\n\"", got, err)
		}
		checkLog(t, fl, log)
	})
}

// TestAcceptRetryEndsAtShutdown: forward shutting down (done closed, the
// listener closed) ends an accept loop at once even while it waits after a
// failed Accept, here a wait of an hour, for -L and -D alike.
func TestAcceptRetryEndsAtShutdown(t *testing.T) {
	for name, serve := range map[string]func(fw *Forwarder, l net.Listener) error{
		"-L": func(fw *Forwarder, l net.Listener) error { return fw.ServeLocal(l, "127.0.0.1", 1) },
		"-D": (*Forwarder).ServeSOCKS,
	} {
		t.Run(name, func(t *testing.T) {
			fl := newFlakyListener(t, -1)
			fw := NewForwarder(nil, ForwarderOptions{AcceptRetryMin: time.Hour, AcceptRetryMax: time.Hour})
			if err := serve(fw, fl); err != nil {
				t.Fatal(err)
			}
			select {
			case <-fl.failed:
			case <-time.After(10 * time.Second):
				t.Fatal("Accept was not called")
			}
			closeWithin(t, fw, 10*time.Second)
		})
	}
}

// fixedAddrListener is a listener that only has an address.
type fixedAddrListener struct {
	net.Listener
	addr net.Addr
}

func (f fixedAddrListener) Addr() net.Addr { return f.addr }

// TestAcceptFailureLogRateLimit: the first failure is logged, a repeat
// within acceptLogEvery is counted, not logged, and logged with the count
// once acceptLogEvery has passed; a different failure is logged at once.
func TestAcceptFailureLogRateLimit(t *testing.T) {
	var log bytes.Buffer
	var now time.Time
	l := fixedAddrListener{addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5602}}
	r := &retryListener{Listener: l, log: &log, now: func() time.Time { return now }}
	enfile := &net.OpError{Op: "accept", Net: "tcp", Addr: l.addr, Err: os.NewSyscallError("accept4", syscall.ENFILE)}
	const prefix = "accept on 127.0.0.1:5602: "
	steps := []struct {
		after time.Duration // since the previous step
		err   error
		want  string // the line logged, "" for none
	}{
		{0, emfile(l), prefix + "too many open files (retrying)\n"},
		{5 * time.Millisecond, emfile(l), ""},
		{10 * time.Millisecond, emfile(l), ""},
		{500 * time.Millisecond, emfile(l), ""},
		{485 * time.Millisecond, emfile(l), prefix + "too many open files (retrying; 3 more since the last line)\n"},
		{time.Millisecond, enfile, prefix + "too many open files in system (retrying)\n"},
		{time.Millisecond, enfile, ""},
		{2 * time.Second, enfile, prefix + "too many open files in system (retrying; 1 more since the last line)\n"},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		log.Reset()
		r.logFailure(s.err)
		if got := log.String(); got != s.want {
			t.Errorf("step %d (%v): logged %q, want %q", i, s.err, got, s.want)
		}
	}
}

// TestForwardOpenFailedResets: a -L connection whose channel cannot open
// (here a refused destination) is reset, with the line that says why: a
// local client that only reads gets ECONNRESET, not the EOF of an empty
// but complete answer.
func TestForwardOpenFailedResets(t *testing.T) {
	conn := testHostConn(t)
	log := newWaitLog()
	fw := NewForwarder(conn, ForwarderOptions{Log: log})
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()
	if err := fw.ServeLocal(l, "127.0.0.1", port); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeWithin(t, fw, 10*time.Second) })
	c, err := net.DialTimeout("tcp4", l.Addr().String(), 10*time.Second)
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		// The reset came before connect returned: the same answer.
	case err != nil:
		t.Fatal(err)
	default:
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if b, err := io.ReadAll(c); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("local client of a refused destination read %q, %v; want ECONNRESET", b, err)
		}
	}
	want := fmt.Sprintf("%s -> 127.0.0.1:%d: open failed: connect to 127.0.0.1:%d refused", l.Addr(), port, port)
	if got := log.line(t, 0); got != want {
		t.Errorf("line %q, want %q", got, want)
	}
}

// TestForwardCloseWhileOpening: Close while channels are still opening
// (the host never answers their createTcpConnection here) resets their
// local connections like every other one still open, counts them, and
// says nothing else: the opens that fail because forward is ending are no
// "open failed" (-L and -D alike).
func TestForwardCloseWhileOpening(t *testing.T) {
	held := make(chan struct{}, 4)
	conn := testHostConnVia(t, func(mc transport.MessageConn) transport.MessageConn {
		return &heldOpens{MessageConn: mc, held: held}
	})
	log := newWaitLog()
	fw := NewForwarder(conn, ForwarderOptions{Log: log, SOCKSHandshakeTimeout: 10 * time.Second})
	ll, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dl, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.ServeLocal(ll, "127.0.0.1", 80); err != nil {
		t.Fatal(err)
	}
	if err := fw.ServeSOCKS(dl); err != nil {
		t.Fatal(err)
	}

	dial := func(addr string, send []byte) net.Conn {
		c, err := net.DialTimeout("tcp4", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(send); err != nil {
			t.Fatal(err)
		}
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatalf("no channel opening for %s within 10 s", addr)
		}
		return c
	}
	lc := dial(ll.Addr().String(), nil)
	sc := dial(dl.Addr().String(), []byte{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	var method [2]byte
	if _, err := io.ReadFull(sc, method[:]); err != nil || method != [2]byte{5, 0} {
		t.Fatalf("SOCKS5 method selection % x, %v; want 05 00", method, err)
	}

	if n := fw.Close(); n != 2 {
		t.Errorf("Close reset %d connections, want 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fw.Wait(ctx); err != nil {
		t.Errorf("Wait after Close: %v", err)
	}
	if got := log.String(); got != "" {
		t.Errorf("log %q, want nothing", got)
	}
	if n := fw.Close(); n != 0 {
		t.Errorf("a second Close reset %d, want 0", n)
	}
	if err := fw.ServeLocal(ll, "127.0.0.1", 80); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ServeLocal after Close: %v, want net.ErrClosed", err)
	}
	if b, err := io.ReadAll(lc); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("-L connection opening at Close: read %q, %v; want ECONNRESET", b, err)
	}
	if b, err := io.ReadAll(sc); len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("-D connection opening at Close: read % x, %v; want ECONNRESET", b, err)
	}
}
