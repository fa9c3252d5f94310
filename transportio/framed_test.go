package transportio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// framedBuf returns payload behind FrameHeaderLen bytes of room that hold
// garbage (the session must write the header there).
func framedBuf(payload []byte) []byte {
	return append(bytes.Repeat([]byte{0xEE}, FrameHeaderLen), payload...)
}

// pattern returns n bytes that differ by position and by seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ byte(i>>8) ^ seed
	}
	return b
}

// TestEmitFramedWire: EmitFramedWaitQueue puts on the emit stream exactly
// the bytes EmitWaitQueue would (AppendFrame of each EMIT, frame 0 first),
// for payloads under FramedMin (queued, copied) and at or above it
// (written from the caller's buffer), interleaved with plain emits, in
// order; and once it returns the session holds no reference to the buffer:
// scribbling over it changes nothing that arrives.
func TestEmitFramedWire(t *testing.T) {
	fromPeer, peerW := io.Pipe()
	peerR, toPeer := io.Pipe()
	s := Start(NewStreamCarrier(fromPeer, toPeer, "peer"), Config{Contract: testContract, Role: RoleClient, BlockOnFull: true})
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peerR)
		got <- b
	}()
	go func() { _, _ = peerW.Write(AppendHandshake(nil, Handshake{V: Version, Events: testContract.Table()})) }()
	ctx := ctxT(t)
	if err := s.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	want := AppendHandshake(nil, Handshake{V: Version, Events: testContract.Table()})
	blob, _ := testContract.Lookup("blob")
	ahp, _ := testContract.Lookup("ahp")
	for i, n := range []int{1, 100, FramedMin - 1, FramedMin, 64 << 10, 200 << 10, 100, MaxPayload, 3} {
		p := pattern(n, byte(i))
		if i%3 == 0 {
			text := []byte(fmt.Sprintf(`{"n":%d}`, i))
			if err := s.Emit("ahp", text); err != nil {
				t.Fatal(err)
			}
			want = AppendFrame(want, Frame{Type: FrameEmit, Codec: CodecJSON, EventID: ahp.ID, Payload: text})
		}
		frame := framedBuf(p)
		if err := s.EmitFramedWaitQueue(ctx, "blob", frame, 32, 256<<10); err != nil {
			t.Fatalf("payload of %d bytes: %v", n, err)
		}
		for j := range frame {
			frame[j] = 0x55 // the session is done with it
		}
		want = AppendFrame(want, Frame{Type: FrameEmit, Codec: CodecBytes, EventID: blob.ID, Payload: p})
	}
	s.Close(CloseNoError, "")
	s.Wait()
	_ = peerW.Close()
	b := <-got
	if !bytes.Equal(b, want) {
		t.Fatalf("the emit stream is %d bytes, want %d; first difference at %d", len(b), len(want), firstDiff(b, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestEmitFramedErrors: the checks EmitWaitQueue makes, and a buffer with
// no payload behind its room; none of them closes the session.
func TestEmitFramedErrors(t *testing.T) {
	s, _ := wsPair(t, &Listener{}, Config{}, echo)
	ctx := ctxT(t)
	if err := s.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		event string
		frame []byte
		is    error
		code  string
	}{
		{"no payload", "blob", make([]byte, FrameHeaderLen), nil, ""},
		{"short", "blob", make([]byte, 3), nil, ""},
		{"unknown event", "nope", framedBuf(pattern(FramedMin, 1)), ErrUnknownEvent, ""},
		{"unreliable event", "cursor", framedBuf(pattern(FramedMin, 1)), ErrWrongShape, ""},
		{"too large", "blob", framedBuf(pattern(MaxPayload+1, 1)), nil, "WT_PAYLOAD_TOO_LARGE"},
	} {
		err := s.EmitFramedWaitQueue(ctx, c.event, c.frame, 32, 0)
		var fe *FrameError
		switch {
		case err == nil:
			t.Errorf("%s: no error", c.name)
		case c.is != nil && !errors.Is(err, c.is):
			t.Errorf("%s: %v, want %v", c.name, err, c.is)
		case c.code != "" && (!errors.As(err, &fe) || fe.Code != c.code):
			t.Errorf("%s: %v, want %s", c.name, err, c.code)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the session ended: %v", err)
	}
}

// TestEmitFramedBound: a frame written from the caller's buffer counts on
// the emit lane while its write is under way (one frame pending, its
// bytes in the bytes bound), so an emit with a mark of 1 waits behind it;
// the writer goroutine writes nothing meanwhile, and what was queued goes
// after it, in order.
func TestEmitFramedBound(t *testing.T) {
	a, b := net.Pipe()
	car := &oneWriter{Carrier: NewStreamCarrier(a, a, "pipe")}
	s := Start(car, Config{Contract: testContract})
	defer func() {
		s.Close(CloseNoError, "")
		b.Close()
		s.Wait()
		if car.overlap.Load() {
			t.Error("two writes to the emit stream at once")
		}
	}()
	dec := NewDecoder(b)
	if f, err := dec.Next(); err != nil || f.Type != FrameHandshake {
		t.Fatalf("frame 0: %v %v", f.Type, err)
	}
	p := pattern(64<<10, 9)
	done := make(chan error, 1)
	go func() { done <- s.EmitFramedWaitQueue(context.Background(), "blob", framedBuf(p), 32, 0) }()
	// One byte of it read: the write is under way and the peer stops.
	var one [1]byte
	if _, err := io.ReadFull(b, one[:]); err != nil {
		t.Fatal(err)
	}
	if n := s.EmitQueueLen(); n != 1 {
		t.Fatalf("EmitQueueLen during the write = %d, want 1", n)
	}
	short, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	defer cancel()
	if err := s.EmitWaitQueue(short, "ahp", []byte(`{"late":1}`), 1, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an emit with mark 1 behind the write = %v, want deadline exceeded", err)
	}
	if err := s.EmitWaitQueue(short, "ahp", []byte(`{"big":1}`), 32, 64<<10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an emit with a 64 KiB bytes bound behind the write = %v, want deadline exceeded", err)
	}
	if err := s.Emit("ahp", []byte(`{"after":1}`)); err != nil {
		t.Fatal(err)
	}
	rest := io.MultiReader(bytes.NewReader(one[:]), b)
	dec = NewDecoder(rest)
	f, err := dec.Next()
	if err != nil || f.Type != FrameEmit || !bytes.Equal(f.Payload, p) {
		t.Fatalf("the framed EMIT: %v %d bytes %v", f.Type, len(f.Payload), err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if f, err := dec.Next(); err != nil || string(f.Payload) != `{"after":1}` {
		t.Fatalf("the EMIT queued during the write: %q %v", f.Payload, err)
	}
}

// TestEmitFramedConcurrent: framed emits on one goroutine and plain ones
// on another over a real WebSocket mapping: every payload arrives whole,
// each goroutine's in its order (the direct write and the writer
// goroutine never write at once).
func TestEmitFramedConcurrent(t *testing.T) {
	const each = 40
	type rx struct {
		event string
		p     []byte
	}
	got := make(chan rx, 2*each)
	s, _ := wsPair(t, &Listener{}, Config{}, func(s *Session) {
		for {
			m, err := s.Receive(context.Background())
			if err != nil {
				return
			}
			got <- rx{m.Event, append([]byte(nil), m.Payload...)}
		}
	})
	ctx := ctxT(t)
	if err := s.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range each {
			if err := s.EmitFramedWaitQueue(ctx, "blob", framedBuf(pattern(FramedMin+i*1000, byte(i))), 32, 256<<10); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range each {
			if err := s.EmitWaitQueue(ctx, "ahp", []byte(fmt.Sprintf(`{"i":%d}`, i)), 32, 256<<10); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	nb, na := 0, 0
	for range 2 * each {
		var m rx
		select {
		case m = <-got:
		case <-ctx.Done():
			t.Fatalf("received %d framed and %d plain emits of %d each", nb, na, each)
		}
		switch m.event {
		case "blob":
			if want := pattern(FramedMin+nb*1000, byte(nb)); !bytes.Equal(m.p, want) {
				t.Fatalf("framed emit %d: %d bytes, want %d, not the bytes sent", nb, len(m.p), len(want))
			}
			nb++
		case "ahp":
			if want := fmt.Sprintf(`{"i":%d}`, na); string(m.p) != want {
				t.Fatalf("plain emit %d is %s, want %s", na, m.p, want)
			}
			na++
		}
	}
}

// oneWriter is a carrier whose emit stream notes two writes at once (the
// carrier under it would serialize them; QUIC streams do not).
type oneWriter struct {
	Carrier
	busy    atomic.Int32
	overlap atomic.Bool
}

func (c *oneWriter) OpenEmit(ctx context.Context) (io.Writer, error) {
	w, err := c.Carrier.OpenEmit(ctx)
	return oneWriterW{c, w}, err
}

type oneWriterW struct {
	c *oneWriter
	w io.Writer
}

func (x oneWriterW) Write(p []byte) (int, error) {
	if x.c.busy.Add(1) > 1 {
		x.c.overlap.Store(true)
	}
	defer x.c.busy.Add(-1)
	return x.w.Write(p)
}

// holdConn is a socket with a Corker as transport.CorkConn is one: while
// corked, writes are kept and go out together at Uncork.
type holdConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func (c *holdConn) Cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

func (c *holdConn) Uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0] // kept for the next, as CorkConn's pool does
	return err
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *holdConn) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// holdDial is a DialContext whose connections are holdConns, each also
// sent on conns (the test's Corker for the socket it dialled).
func holdDial(conns chan<- *holdConn) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		h := &holdConn{Conn: c}
		conns <- h
		return h, nil
	}
}

// heldPair dials a WebSocket mapping whose client socket is a holdConn;
// the server session's emits arrive on the returned channel, and srv
// reports how the server's session ended.
func heldPair(t *testing.T) (s *Session, hc *holdConn, got chan Message, srvErr chan error) {
	got = make(chan Message, 64)
	srvErr = make(chan error, 1)
	l := &Listener{Session: Config{Contract: testContract}}
	srv := httptest.NewServer(l.WebSocketHandler(func(s *Session) {
		for {
			m, err := s.Receive(context.Background())
			if err != nil {
				srvErr <- err
				return
			}
			m.Payload = bytes.Clone(m.Payload)
			got <- m
		}
	}))
	t.Cleanup(srv.Close)
	conns := make(chan *holdConn, 1)
	hcl := &http.Client{Transport: &http.Transport{DialContext: holdDial(conns)}}
	opts := WebSocketOptions{Cork: func(*http.Request) Corker { return <-conns }}
	s, err := DialWebSocket(ctxT(t), "ws"+strings.TrimPrefix(srv.URL, "http")+"/transport-io", &websocket.DialOptions{HTTPClient: hcl}, Config{Contract: testContract, Role: RoleClient}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close(CloseNoError, "")
		s.Wait()
	})
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The Corker is the one socket the dial made.
	return s, s.car.(*wsCarrier).cork.(*holdConn), got, srvErr
}

// receive returns the next emit the server got, or fails after 10 s.
func receive(t *testing.T, got chan Message) Message {
	t.Helper()
	select {
	case m := <-got:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return Message{}
	}
}

// TestEmitFramedHeld: on the WebSocket mapping over a Corker, a framed
// emit stays in the socket's buffer until Flush, a write of the writer
// goroutine, or the close, so a run of them leaves in one system call;
// what is held never exceeds maxWriteBatch (256 KiB) of frames.
func TestEmitFramedHeld(t *testing.T) {
	s, hc, got, srvErr := heldPair(t)
	ctx := ctxT(t)
	p := pattern(64<<10, 1)
	if err := s.EmitFramedWaitQueue(ctx, "blob", framedBuf(p), 32, 0); err != nil {
		t.Fatal(err)
	}
	if hc.held() < len(p) {
		t.Fatalf("%d bytes held after a framed emit of %d, want all of it", hc.held(), len(p))
	}
	select {
	case m := <-got:
		t.Fatalf("received %d bytes before Flush", len(m.Payload))
	case <-time.After(50 * time.Millisecond):
	}
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, got); !bytes.Equal(m.Payload, p) || hc.held() != 0 {
		t.Fatalf("after Flush: received %d bytes, %d held; want the payload, none", len(m.Payload), hc.held())
	}

	// A run: held up to the bound, then a write sends it all.
	var sent [][]byte
	for i := range 6 {
		p := pattern(64<<10+i, byte(i))
		sent = append(sent, p)
		if err := s.EmitFramedWaitQueue(ctx, "blob", framedBuf(p), 32, 0); err != nil {
			t.Fatal(err)
		}
		if h := hc.held(); h > maxWriteBatch+16*(i+1) {
			t.Fatalf("%d bytes held after %d framed emits, bound %d", h, i+1, maxWriteBatch)
		}
	}
	// A plain emit goes through the writer goroutine: its write sends
	// what was held first.
	if err := s.Emit("ahp", []byte(`{"after":1}`)); err != nil {
		t.Fatal(err)
	}
	for i, p := range sent {
		if m := receive(t, got); !bytes.Equal(m.Payload, p) {
			t.Fatalf("framed emit %d of the run: %d bytes, not the payload", i, len(m.Payload))
		}
	}
	if m := receive(t, got); string(m.Payload) != `{"after":1}` {
		t.Fatalf("then %q, want the plain emit", m.Payload)
	}

	// The close sends what is held before its close frame.
	if err := s.EmitFramedWaitQueue(ctx, "blob", framedBuf(p), 32, 0); err != nil {
		t.Fatal(err)
	}
	s.Close(CloseNoError, "done")
	if m := receive(t, got); !bytes.Equal(m.Payload, p) {
		t.Fatalf("the held emit at the close: %d bytes, not the payload", len(m.Payload))
	}
	select {
	case err := <-srvErr:
		var se *SessionError
		if !errors.As(err, &se) || se.Lost || se.Code != CloseNoError || se.Reason != "done" {
			t.Fatalf("the server's session ended with %v, want the client's clean close", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server's session did not end")
	}
}
