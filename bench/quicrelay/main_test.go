package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const payloadSize = 8 << 20

func payload(seed byte) []byte {
	b := make([]byte, payloadSize)
	rand.NewChaCha8([32]byte{seed}).Read(b)
	return b
}

// relay starts a server and a client with one mapping to dest, all on
// loopback, and returns the mapping's local address. Cleanup stops both and
// checks that they return without error.
func relay(t *testing.T, dest string) string {
	addr, _ := stoppableRelay(t, dest)
	return addr
}

// stoppableRelay is relay that also returns its stop function (idempotent).
func stoppableRelay(t *testing.T, dest string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	qc := quicConfig(0, 0)
	spc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- serve(ctx, spc, qc) }()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cpc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := dial(ctx, cpc, spc.LocalAddr().String(), qc)
	if err != nil {
		t.Fatal(err)
	}
	fwdErr := make(chan error, 1)
	go func() { fwdErr <- forward(ctx, conn, []mapping{{ln.(*net.TCPListener), dest}}) }()
	stop := sync.OnceFunc(func() {
		cancel()
		for name, ch := range map[string]chan error{"serve": serveErr, "forward": fwdErr} {
			select {
			case err := <-ch:
				if err != nil {
					t.Errorf("%s: %v", name, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s did not stop", name)
			}
		}
		cpc.Close()
		spc.Close()
	})
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// target accepts one connection and runs fn on it in a goroutine; the
// returned channel yields fn's error once it is done.
func target(t *testing.T, fn func(c *net.TCPConn) error) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		ln.Close()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		done <- fn(c.(*net.TCPConn))
	}()
	return ln.Addr().String(), done
}

func dialMapping(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(30 * time.Second))
	return c.(*net.TCPConn)
}

// readSum reads c to EOF and returns the SHA-256 of what it read.
func readSum(c io.Reader) ([]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, c)
	return h.Sum(nil), n, err
}

// Upload 8 MiB, then half-close: the target answers with the digest only
// after it has seen EOF, and the client still reads that answer.
func TestUploadHalfClose(t *testing.T) {
	data := payload(1)
	want := sha256.Sum256(data)
	dest, done := target(t, func(c *net.TCPConn) error {
		sum, _, err := readSum(c)
		if err != nil {
			return err
		}
		_, err = c.Write(sum)
		return err
	})
	c := dialMapping(t, relay(t, dest))
	if _, err := c.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want[:]) {
		t.Fatalf("target received data with SHA-256 %x, want %x", got, want)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Download 8 MiB: the target sends and half-closes, the client checks the
// digest and answers with it on the still-open upstream direction.
func TestDownloadHalfClose(t *testing.T) {
	data := payload(2)
	want := sha256.Sum256(data)
	dest, done := target(t, func(c *net.TCPConn) error {
		if _, err := c.Write(data); err != nil {
			return err
		}
		if err := c.CloseWrite(); err != nil {
			return err
		}
		got, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want[:]) {
			return errors.New("client's answer is not the payload's digest")
		}
		return nil
	})
	c := dialMapping(t, relay(t, dest))
	sum, n, err := readSum(c)
	if err != nil {
		t.Fatal(err)
	}
	if n != payloadSize || !bytes.Equal(sum, want[:]) {
		t.Fatalf("client received %d bytes with SHA-256 %x, want %d bytes %x", n, sum, payloadSize, want)
	}
	if _, err := c.Write(sum); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A destination nobody listens on: the server resets the stream and the
// client closes the TCP connection instead of leaving it hanging.
func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c := dialMapping(t, relay(t, dead))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read = %d, %v; want the connection closed", n, err)
	}
}

// Stopping the relay while a forwarded connection is open closes it on both
// sides (and goleak checks that no copy goroutine is left behind).
func TestStopWithOpenConnection(t *testing.T) {
	accepted := make(chan struct{})
	dest, done := target(t, func(c *net.TCPConn) error {
		close(accepted)
		_, err := io.Copy(io.Discard, c)
		return err
	})
	addr, stop := stoppableRelay(t, dest)
	c := dialMapping(t, addr)
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-accepted:
	case err := <-done:
		t.Fatalf("target: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not dial the target")
	}
	stop()
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("client read = %d, %v; want the connection closed", n, err)
	}
	if err := <-done; errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("target: %v; want the connection closed", err)
	}
}
