package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/rpc"
)

// loopbackServer listens on loopback and runs handle for each connection
// (a destination for forwarded and bridged connections); it returns the
// port. The listener is closed, and its handlers waited for, at cleanup.
func loopbackServer(t *testing.T, handle func(c *net.TCPConn)) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
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
				handle(c.(*net.TCPConn))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// bridged runs Bridge to 127.0.0.1:port with pipes for its local end:
// write to in, read from out; err gets Bridge's result.
type bridged struct {
	fw  *client.Forwarder
	in  *io.PipeWriter
	out *io.PipeReader
	err chan error
}

func startBridge(t *testing.T, port int) *bridged {
	t.Helper()
	ctx := testCtx(t)
	h := newRealHost(t, nil)
	c := h.connect(ctx, newStatuses())
	fw := client.NewForwarder(c, client.ForwarderOptions{})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	b := &bridged{fw: fw, in: inW, out: outR, err: make(chan error, 1)}
	go func() { b.err <- fw.Bridge(ctx, inR, outW, "127.0.0.1", port) }()
	// Bounded: a test that waits on out past its deadline reads an error.
	stop := context.AfterFunc(ctx, func() { _ = outR.CloseWithError(ctx.Err()) })
	t.Cleanup(func() { stop() })
	t.Cleanup(func() {
		// Ends a Read or Write Bridge left blocked.
		_ = inR.Close()
		_ = outR.Close()
		fw.Close()
		_ = fw.Wait(ctx)
	})
	return b
}

func (b *bridged) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-b.err:
		return err
	case <-testCtx(t).Done():
		t.Fatal("Bridge did not return")
		return nil
	}
}

// TestBridgeHalfClose: the local end's EOF reaches the destination as
// EOF, the destination answers only then, and its EOF closes out; Bridge
// returns nil. 1 MiB goes up, its SHA-256 comes down.
func TestBridgeHalfClose(t *testing.T) {
	port := loopbackServer(t, func(c *net.TCPConn) {
		h := sha256.New()
		n, err := io.Copy(h, c)
		if err != nil {
			return
		}
		fmt.Fprintf(c, "%d %x", n, h.Sum(nil))
	})
	b := startBridge(t, port)
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	go func() {
		_, _ = b.in.Write(data)
		_ = b.in.Close()
	}()
	got, err := io.ReadAll(b.out)
	if want := fmt.Sprintf("%d %x", len(data), sha256.Sum256(data)); err != nil || string(got) != want {
		t.Fatalf("out: %q, %v; want %q", got, err, want)
	}
	if err := b.result(t); err != nil {
		t.Fatalf("Bridge: %v, want nil", err)
	}
}

// TestBridgeRemoteEOFFirst: the destination's EOF closes out while the
// local end still sends; Bridge returns only once in ends too, and what
// was sent after arrives.
func TestBridgeRemoteEOFFirst(t *testing.T) {
	got := make(chan string, 1)
	port := loopbackServer(t, func(c *net.TCPConn) {
		_, _ = c.Write([]byte("hello"))
		_ = c.CloseWrite()
		b, _ := io.ReadAll(c)
		got <- string(b)
	})
	b := startBridge(t, port)
	if hello, err := io.ReadAll(b.out); err != nil || string(hello) != "hello" {
		t.Fatalf("out: %q, %v", hello, err)
	}
	select {
	case err := <-b.err:
		t.Fatalf("Bridge returned %v with the local end still open", err)
	default:
	}
	if _, err := b.in.Write([]byte("after")); err != nil {
		t.Fatal(err)
	}
	_ = b.in.Close()
	if err := b.result(t); err != nil {
		t.Fatalf("Bridge: %v", err)
	}
	if s := <-got; s != "after" {
		t.Fatalf("the destination got %q", s)
	}
}

// TestBridgeFailures: a refused destination is an *OpenError carrying the
// host's code; a destination that resets is ErrTCPReset; a local writer
// that fails is a *LocalError and resets the destination; Close resets
// it too, and Bridge says it was closed. out is closed each time.
func TestBridgeFailures(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		b := startBridge(t, port)
		err = b.result(t)
		var oe *client.OpenError
		var re *rpc.Error
		if !errors.As(err, &oe) || !errors.As(err, &re) || re.Code != rpc.CodeTCPConnectionOpenFailed {
			t.Fatalf("Bridge: %v, want an *OpenError with code %d", err, rpc.CodeTCPConnectionOpenFailed)
		}
		// An io.PipeWriter has CloseWithError: the reader learns why.
		if _, err := b.out.Read(make([]byte, 1)); !errors.As(err, &oe) {
			t.Fatalf("out read %v, want the *OpenError", err)
		}
	})
	t.Run("destination resets", func(t *testing.T) {
		port := loopbackServer(t, func(c *net.TCPConn) {
			_, _ = io.ReadFull(c, make([]byte, 4))
			_ = c.SetLinger(0)
		})
		b := startBridge(t, port)
		if _, err := b.in.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if err := b.result(t); !errors.Is(err, client.ErrTCPReset) {
			t.Fatalf("Bridge: %v, want ErrTCPReset", err)
		}
		if _, err := io.ReadAll(b.out); !errors.Is(err, client.ErrTCPReset) {
			t.Fatalf("out: %v, want ErrTCPReset (closed with Bridge's error)", err)
		}
	})
	t.Run("local write fails", func(t *testing.T) {
		destErr := make(chan error, 1)
		port := loopbackServer(t, func(c *net.TCPConn) {
			for {
				if _, err := c.Write(make([]byte, 32<<10)); err != nil {
					destErr <- err
					return
				}
			}
		})
		b := startBridge(t, port)
		_ = b.out.CloseWithError(syscall.EPIPE)
		err := b.result(t)
		var le *client.LocalError
		if !errors.As(err, &le) || le.Op != "write" || !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("Bridge: %v, want a *LocalError writing, EPIPE", err)
		}
		if err := <-destErr; !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("the destination's write failed with %v, want a reset", err)
		}
	})
	t.Run("forwarder closed", func(t *testing.T) {
		destErr := make(chan error, 1)
		port := loopbackServer(t, func(c *net.TCPConn) {
			_, err := io.Copy(c, c)
			if err == nil {
				err = io.EOF
			}
			destErr <- err
		})
		b := startBridge(t, port)
		if _, err := b.in.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(b.out, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		b.fw.Close()
		if err := b.result(t); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Bridge: %v, want net.ErrClosed", err)
		}
		if err := <-destErr; !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the destination's connection ended with %v, want a reset", err)
		}
	})
}
