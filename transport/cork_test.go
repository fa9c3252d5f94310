package transport

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
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
