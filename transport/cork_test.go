package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// countConn records every Write that reaches the socket.
type countConn struct {
	net.Conn
	mu     sync.Mutex
	writes []int
	buf    bytes.Buffer
}

func (c *countConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, len(p))
	c.buf.Write(p)
	return len(p), nil
}

// TestCorkConn: corked writes leave in one write at Uncork, in order;
// uncorked ones go straight through; what is held back never exceeds
// corkMaxBytes (a larger total is sent in pieces of at most that), and
// the buffer is given back on Uncork.
func TestCorkConn(t *testing.T) {
	under := &countConn{}
	c := &CorkConn{Conn: under}
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	c.Cork()
	for _, s := range []string{"bb", "ccc", "dddd"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if len(under.writes) != 1 {
		t.Fatalf("writes while corked reached the socket: %v", under.writes)
	}
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}
	if got := under.buf.String(); got != "abbcccdddd" || len(under.writes) != 2 || under.writes[1] != 9 {
		t.Fatalf("socket got %q in writes %v, want abbcccdddd in [1 9]", got, under.writes)
	}
	if c.buf != nil {
		t.Fatal("buffer kept after Uncork")
	}

	under.writes, c.corked = nil, false
	under.buf.Reset()
	c.Cork()
	piece := bytes.Repeat([]byte("x"), 100<<10)
	for range 12 { // 1.2 MiB
		if _, err := c.Write(piece); err != nil {
			t.Fatal(err)
		}
		if len(c.buf) > corkMaxBytes {
			t.Fatalf("holding %d bytes, bound %d", len(c.buf), corkMaxBytes)
		}
	}
	if err := c.Uncork(); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range under.writes {
		if n > corkMaxBytes {
			t.Fatalf("a write of %d bytes, bound %d", n, corkMaxBytes)
		}
		total += n
	}
	if total != 12*len(piece) || len(under.writes) != 3 {
		t.Fatalf("writes %v (total %d), want 3 writes of 1228800 bytes in all", under.writes, total)
	}
}

// TestDescribe: an in-memory pipe is not described; the names of the
// real transports are tested end to end (tests/ TestForwardCtrlC).
func TestDescribe(t *testing.T) {
	a, b := Pipe(1)
	defer a.Close(CloseNormal, "")
	defer b.Close(CloseNormal, "")
	if d := Describe(a); d != "" {
		t.Fatalf("Describe(pipe) = %q", d)
	}
}

// TestCorkConnReadAhead: reads smaller than readAheadBytes are served
// from one socket read ahead, in order; a large read goes to the socket;
// the end of the stream comes after every byte.
func TestCorkConnReadAhead(t *testing.T) {
	a, b := net.Pipe()
	src := make([]byte, 300<<10)
	for i := range src {
		src[i] = byte(i * 7)
	}
	go func() {
		for off := 0; off < len(src); off += 100 << 10 {
			_, _ = a.Write(src[off : off+100<<10])
		}
		_ = a.Close()
	}()
	c := NewCorkConn(b)
	var got []byte
	sizes := []int{1, 100, 5000, 16 << 10, readAheadBytes, 3}
	for i := 0; ; i++ {
		p := make([]byte, sizes[i%len(sizes)])
		n, err := c.Read(p)
		got = append(got, p[:n]...)
		if err != nil {
			if err != io.EOF {
				t.Fatal(err)
			}
			break
		}
		if i > 10000 {
			t.Fatal("no end of stream")
		}
	}
	if !bytes.Equal(got, src) {
		t.Fatalf("read %d bytes, not the %d written in order", len(got), len(src))
	}
	if len(c.rbuf) != readAheadBytes || cap(c.rbuf) != readAheadBytes {
		t.Fatalf("read-ahead buffer %d/%d bytes, bound %d", len(c.rbuf), cap(c.rbuf), readAheadBytes)
	}
}

// deadlineConn signals each SetWriteDeadline.
type deadlineConn struct {
	net.Conn
	set chan struct{}
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	select {
	case c.set <- struct{}{}:
	default:
	}
	return c.Conn.SetWriteDeadline(t)
}

// TestCorkConnCloseSendsHeld: Close sends what was held back before it
// closes the socket, also what another goroutine was adding as it began;
// later writes fail; with no reader it gives up after its write deadline;
// a socket write in progress is not waited for (closing the socket ends
// it).
func TestCorkConnCloseSendsHeld(t *testing.T) {
	a, b := net.Pipe()
	c := NewCorkConn(b)
	c.Cork()
	for _, s := range []string{"close ", "frame"} {
		if _, err := c.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan []byte, 1)
	go func() {
		all, _ := io.ReadAll(a)
		got <- all
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case all := <-got:
		if string(all) != "close frame" {
			t.Fatalf("the peer read %q before the end, want the held %q", all, "close frame")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the peer saw no end")
	}
	c.Cork() // as a message write starts with
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("a write after Close: %v, want net.ErrClosed", err)
	}

	// Another goroutine adding to the held bytes (it holds the lock, no
	// socket write under way): Close waits for it, then sends it all.
	a, b = net.Pipe()
	dc := &deadlineConn{Conn: b, set: make(chan struct{}, 4)}
	c = NewCorkConn(dc)
	c.Cork()
	if _, err := c.Write([]byte("held")); err != nil {
		t.Fatal(err)
	}
	go func() {
		all, _ := io.ReadAll(a)
		got <- all
	}()
	c.mu.Lock() // the other goroutine's append begins
	closing := make(chan error, 1)
	go func() { closing <- c.Close() }()
	select {
	case <-dc.set: // Close bounded its wait, and waits for the lock
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not wait for the append under way")
	}
	c.buf = append(c.buf, "+more"...)
	c.mu.Unlock()
	select {
	case all := <-got:
		if string(all) != "held+more" {
			t.Fatalf("the peer read %q, want %q", all, "held+more")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the peer saw no end")
	}
	if err := <-closing; err != nil {
		t.Fatal(err)
	}

	// Nobody reads: the held bytes cannot go; Close still returns.
	_, b = net.Pipe()
	c = NewCorkConn(b)
	c.Cork()
	if _, err := c.Write([]byte("stuck")); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close with an unread peer did not return")
	}

	// A write blocked on the socket holds the lock: Close does not wait
	// for it, and the write ends with an error.
	_, b = net.Pipe()
	c = NewCorkConn(b)
	wrote := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("blocked"))
		wrote <- err
	}()
	for i := 0; c.mu.TryLock(); i++ { // until the write holds it
		c.mu.Unlock()
		if i > 10_000_000 {
			t.Fatal("the write never took the lock")
		}
		runtime.Gosched()
	}
	go func() { closed <- c.Close() }()
	for _, ch := range []chan error{closed, wrote} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("Close during a blocked write: Close or the write did not return")
		}
	}
}

// TestWebSocketPeerCloseWhileCorked: a peer's close frame that arrives
// while the host holds frames back (a run of messages not yet flushed) is
// answered: the held frames and coder/websocket's close reply leave before
// the library closes the socket, so the peer's Close gets its answer
// (without it, the peer saw the TCP connection end: 1006 in a browser).
func TestWebSocketPeerCloseWhileCorked(t *testing.T) {
	held := make(chan struct{})
	ended := make(chan error, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			ended <- err
			return
		}
		defer c.CloseNow()
		ck := corkFrom(r.Context())
		if ck == nil {
			ended <- errors.New("no CorkConn under the request")
			return
		}
		ck.Cork()
		if err := c.Write(r.Context(), websocket.MessageBinary, bytes.Repeat([]byte("h"), 1000)); err != nil {
			ended <- err
			return
		}
		close(held)
		_, _, err = c.Read(context.Background()) // until the peer's close, answered
		ended <- err
	}))
	srv.Listener = CorkListener(srv.Listener)
	srv.Config.ConnContext = CorkContext
	srv.Start()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	select {
	case <-held:
	case err := <-ended:
		t.Fatal(err)
	case <-ctx.Done():
		t.Fatal("the host held nothing")
	}
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		t.Fatalf("the client's close was not answered: %v", err)
	}
	select {
	case err := <-ended:
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
			t.Fatalf("the host's read ended with %v, want the client's close", err)
		}
	case <-ctx.Done():
		t.Fatal("the host's read did not end")
	}
}
