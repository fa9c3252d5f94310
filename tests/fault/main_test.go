package fault

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bound is the most any test waits for one step.
const bound = 20 * time.Second

// ctxFor returns a context done after bound, cancelled at the test's end.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

// await fails the test if cond does not hold within bound.
func await(t *testing.T, r interface {
	Await(context.Context, func() bool) error
}, what string, cond func() bool) {
	t.Helper()
	if err := r.Await(ctxFor(t), cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// target is a TCP server on loopback that runs handle on each connection.
type target struct {
	ln       *net.TCPListener
	accepted atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []*net.TCPConn
}

func newTarget(t *testing.T, handle func(*net.TCPConn)) *target {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &target{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			_ = c.SetDeadline(time.Now().Add(bound))
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *target) addr() string { return s.ln.Addr().String() }

// echo sends back what it reads, then passes the EOF on.
func echo(c *net.TCPConn) {
	buf := make([]byte, 32<<10)
	if _, err := io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, buf); err == nil {
		_ = c.CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}
}

// received is what a sink read from one connection.
type received struct {
	n   int64
	sum [32]byte
	err error // what ended the read: nil for EOF
}

// sink returns a handler that reads until EOF or an error and reports it.
func sink(out chan<- received) func(*net.TCPConn) {
	return func(c *net.TCPConn) {
		h := sha256.New()
		n, err := io.Copy(h, c)
		out <- received{n: n, sum: [32]byte(h.Sum(nil)), err: err}
	}
}

func newTCP(t *testing.T, target string) *TCP {
	t.Helper()
	r, err := NewTCP(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	return r
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(bound))
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg on an echoed connection and checks it comes back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("echo: got %q, want %q", got, msg)
	}
}

// readErr reads c until it fails and returns the error and the count read;
// the error must not be the deadline.
func readErr(t *testing.T, c net.Conn) (int64, error) {
	t.Helper()
	n, err := io.Copy(io.Discard, c)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read timed out after %d bytes", n)
	}
	return n, err
}

// payload returns n bytes drawn from a seeded generator.
func payload(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	_, _ = r.Read(b)
	return b
}
