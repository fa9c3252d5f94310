package transportio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestWebSocketEcho(t *testing.T) {
	s, _ := wsPair(t, &Listener{}, Config{}, echo)
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := s.Emit("ahp", []byte(`{"jsonrpc":"2.0","method":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		m, err := s.Receive(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.Event != "ahp" || string(m.Payload) != `{"jsonrpc":"2.0","method":"x"}` {
			t.Fatalf("got %+v", m)
		}
	}
}

func TestRefusalBeforeFrameZero(t *testing.T) {
	l := &Listener{Authorize: func(*http.Request) error { return Refuse("expired") }}
	s, _ := wsPair(t, l, Config{}, func(*Session) { t.Error("refused peer was served") })
	err := s.WaitHandshake(ctxT(t))
	var se *SessionError
	if !errors.As(err, &se) || se.Code != CloseUnauthorized || se.Reason != "expired" || !se.Remote {
		t.Fatalf("got %v", err)
	}
}

// TestRecycledPayloads: payloads given back with RecyclePayload (and the
// WebSocket carrier's message buffers it recycles itself) are reused for
// later frames without corrupting any: both ends recycle every payload
// once done, and every echo matches what was sent, byte for byte, over
// sizes from 1 byte to several carrier messages.
func TestRecycledPayloads(t *testing.T) {
	s, _ := wsPair(t, &Listener{}, Config{}, func(s *Session) {
		for {
			m, err := s.Receive(context.Background())
			if err != nil {
				return
			}
			err = s.EmitWait(context.Background(), m.Event, m.Payload, 64)
			RecyclePayload(m.Payload) // Emit copied it into its frame
			if err != nil {
				return
			}
		}
	})
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	const n = 200
	sizes := func(i int) int { return []int{1, 700, 4 << 10, 33 << 10, 300 << 10}[i%5] + i }
	pattern := func(i, size int) []byte {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(i*131 + j*7 + j>>11)
		}
		return b
	}
	errs := make(chan error, 1)
	go func() {
		for i := range n {
			if err := s.EmitWait(ctxT(t), "blob", pattern(i, sizes(i)), 64); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	for i := range n {
		m, err := s.Receive(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if want := pattern(i, sizes(i)); !bytes.Equal(m.Payload, want) {
			t.Fatalf("echo %d: %d bytes differ from the %d sent", i, len(m.Payload), len(want))
		}
		RecyclePayload(m.Payload)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// TestWaitHandshakeAwaitsFrameZero: WaitHandshake returns once the peer's
// handshake is accepted and this side's frame 0 has been written, not
// before, so the first emit after it leaves in a write of its own (the
// reference server drops an EMIT that it reads in the same turn as the
// HANDSHAKE). The peer here answers at once but reads nothing until the
// test does.
func TestWaitHandshakeAwaitsFrameZero(t *testing.T) {
	fromPeer, peerW := io.Pipe()
	peerR, toPeer := io.Pipe()
	s := Start(NewStreamCarrier(fromPeer, toPeer, "peer"), Config{Contract: testContract, Role: RoleClient, BlockOnFull: true})
	defer func() {
		s.Close(CloseNoError, "")
		_ = peerW.Close()
		_ = peerR.Close()
		s.Wait()
	}()
	go func() { _, _ = peerW.Write(AppendHandshake(nil, Handshake{V: Version, Events: testContract.Table()})) }()

	// Frame 0 sits in a write the peer has not read: not yet.
	short, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer cancel()
	if err := s.WaitHandshake(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitHandshake before frame 0 was written = %v, want deadline exceeded", err)
	}
	waited := make(chan error, 1)
	go func() {
		err := s.WaitHandshake(ctxT(t))
		if err == nil {
			err = s.Emit("ahp", []byte(`{"a":1}`))
		}
		waited <- err
	}()
	dec := NewDecoder(peerR)
	f, err := dec.Next()
	if err != nil || f.Type != FrameHandshake {
		t.Fatalf("first frame %v %v, want HANDSHAKE", f.Type, err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if f, err := dec.Next(); err != nil || f.Type != FrameEmit || string(f.Payload) != `{"a":1}` {
		t.Fatalf("second frame %v %q %v, want the EMIT", f.Type, f.Payload, err)
	}
}
