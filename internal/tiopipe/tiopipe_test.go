package tiopipe

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/transportio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type lockedWriter struct {
	mu  sync.Mutex
	w   io.WriteCloser
	buf bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.buf.Write(p)
	l.mu.Unlock()
	return l.w.Write(p)
}
func (l *lockedWriter) Close() error { return l.w.Close() }

// TestPair: both handshakes are done when Pair returns, an EMIT crosses
// each way, and the tap sees the client's frames.
func TestPair(t *testing.T) {
	contract := transportio.MustContract(transportio.Event{Name: "ahp"})
	tap := &lockedWriter{}
	c, s := Pair(t, contract, contract, func(w io.WriteCloser) io.WriteCloser { tap.w = w; return tap })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, x := range []struct{ from, to *transportio.Session }{{c, s}, {s, c}} {
		if err := x.from.Emit("ahp", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		m, err := x.to.Receive(ctx)
		if err != nil || m.Event != "ahp" || string(m.Payload) != `{"n":1}` {
			t.Fatalf("received %q %q %v", m.Event, m.Payload, err)
		}
	}
	tap.mu.Lock()
	defer tap.mu.Unlock()
	if !bytes.Contains(tap.buf.Bytes(), []byte(`{"n":1}`)) {
		t.Fatal("the tap did not see the client's EMIT")
	}
}
