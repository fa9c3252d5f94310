package client_test

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
)

// slowWriter records the size of every Write; the first one blocks until
// behind returns, so that tcp/data messages queue up behind it.
type slowWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	sizes []int
	// behind, when set, is waited for in the first Write: more is
	// queued behind it.
	behind func()
}

func (w *slowWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	first := len(w.sizes) == 0
	w.sizes = append(w.sizes, len(p))
	w.buf.Write(p)
	w.mu.Unlock()
	if first && w.behind != nil {
		w.behind()
	}
	return len(p), nil
}

// TestTCPWriteToBatches: after a Read, WriteTo delivers the rest exactly
// and in order until tcp/eof, and the tcp/data messages queued while the
// writer was busy reach it in one Write (more than one message's bytes).
func TestTCPWriteToBatches(t *testing.T) {
	payload := make([]byte, 512<<10)
	for i := range payload {
		payload[i] = byte(i*7 + i>>9)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	served := make(chan struct{})
	go func() {
		defer close(served)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(payload)
		_ = c.(*net.TCPConn).CloseWrite()
		_, _ = io.Copy(io.Discard, c)
	}()
	p := newPair(t, client.Options{}, nil)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := p.c.DialTCP(ctx, "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := io.ReadFull(tc, head); err != nil {
		t.Fatal(err)
	}
	per := bytestream.NewEncoder(rpc.TCPStream, tc.Channel()).MaxPayload(0, client.DefaultReceive.MaximumFrameBytes)
	// The first Write blocks until the host sent two messages more (its
	// window holds eight), bounded: they then wait for the next Write.
	w := slowWriter{behind: func() {
		for deadline := time.Now().Add(testDeadline); client.ReceivedBytes(tc) < 3*client.DefaultReceive.MaximumFrameBytes; {
			if time.Now().After(deadline) {
				return // the assertion below says what did not arrive
			}
			time.Sleep(time.Millisecond) // no event to wait on: the counter is polled
		}
	}}
	n, err := tc.WriteTo(&w)
	if err != nil || n != int64(len(payload)-len(head)) {
		t.Fatalf("WriteTo = %d, %v; want %d, nil", n, err, len(payload)-len(head))
	}
	if got := append(head, w.buf.Bytes()...); !bytes.Equal(got, payload) {
		t.Fatalf("received %d bytes, not the %d sent", len(got), len(payload))
	}
	// While the first Write blocks, the host sends more than one message
	// (its window is not full): the Write after it, if not the first
	// itself, carries them together.
	if len(w.sizes) < 2 || max(w.sizes[0], w.sizes[1]) <= per {
		t.Errorf("Write sizes %v: the messages queued behind the first Write were not gathered (one message carries %d)", w.sizes, per)
	}
	_ = tc.Close()
	<-served
}
