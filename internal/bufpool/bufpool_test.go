package bufpool

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestPoolBound: the pool keeps at most n buffers, only of capacities in
// [minCap, maxCap], hands a kept buffer back empty, and never returns one
// smaller than asked for.
func TestPoolBound(t *testing.T) {
	p := New(2, 1024, 4096)
	for range 5 {
		p.Put(make([]byte, 10, 2048))
	}
	if p.Len() != 2 {
		t.Fatalf("kept %d buffers, bound 2", p.Len())
	}
	p.Put(make([]byte, 0, 512))  // too small
	p.Put(make([]byte, 0, 8192)) // too large
	if p.Len() != 2 {
		t.Fatalf("kept %d buffers after out-of-range puts, want 2", p.Len())
	}
	b := p.Get(1500)
	if len(b) != 0 || cap(b) != 2048 {
		t.Fatalf("Get(1500) = len %d cap %d, want a kept buffer, empty", len(b), cap(b))
	}
	b = p.Get(3000) // the kept one is too small: a new one
	if cap(b) < 3000 {
		t.Fatalf("Get(3000) cap %d", cap(b))
	}
	if p.Len() != 0 {
		t.Fatalf("%d left, want 0", p.Len())
	}
	p.Put(make([]byte, 0, 2048))
	if b := p.Get(10); cap(b) != 10 || p.Len() != 1 {
		t.Fatalf("Get(10): cap %d, %d kept; want a new buffer of 10, the kept one left", cap(b), p.Len())
	}
	// More than twice the size asked for: GetFit leaves the free buffer
	// pooled (a held short message must not pin it), Get takes it.
	p.Get(2048)
	p.Put(make([]byte, 0, 4096))
	if b := p.GetFit(1500); cap(b) != 1500 || p.Len() != 1 {
		t.Fatalf("GetFit(1500) with a free buffer of 4096: cap %d, %d kept; want a new one of 1500, the 4096 one kept", cap(b), p.Len())
	}
	if b := p.Get(1500); cap(b) != 4096 || p.Len() != 0 {
		t.Fatalf("Get(1500) with a free buffer of 4096: cap %d, %d kept; want the free one", cap(b), p.Len())
	}
}

// TestReadAll: ReadAll appends everything up to EOF into the buffer given,
// growing it only when it is too small, and SizeHint decays slowly.
func TestReadAll(t *testing.T) {
	src := strings.Repeat("0123456789", 1000)
	buf := make([]byte, 0, 20000)
	got, err := ReadAll(iotest.OneByteReader(strings.NewReader(src)), buf)
	if err != nil || string(got) != src || &got[:1][0] != &buf[:1][0] {
		t.Fatalf("ReadAll: %d bytes, %v, same buffer %v", len(got), err, &got[:1][0] == &buf[:1][0])
	}
	got, err = ReadAll(strings.NewReader(src), make([]byte, 0, 16))
	if err != nil || string(got) != src {
		t.Fatalf("ReadAll into a small buffer: %d bytes, %v", len(got), err)
	}
	var h SizeHint
	h.Saw(8000)
	if h.Next(512) != 9000 {
		t.Fatalf("after 8000: %d, want 9000", h.Next(512))
	}
	h.Saw(10)
	if h.Next(512) != 9000-9000/8 {
		t.Fatalf("after a short message: %d, want %d", h.Next(512), 9000-9000/8)
	}
}

// TestReadMessage: a message is read whole into a pool buffer, the next
// one's buffer is sized from it (so a recycled buffer of that size is
// reused as is), and a reader's error is returned.
func TestReadMessage(t *testing.T) {
	p := New(2, 16, 1<<20)
	var h SizeHint
	src := strings.Repeat("x", 4000)
	b, err := p.ReadMessage(strings.NewReader(src), &h)
	if err != nil || string(b) != src || h.Next(512) != 4500 {
		t.Fatalf("ReadMessage: %d bytes, %v, hint %d", len(b), err, h.Next(512))
	}
	b, err = p.ReadMessage(strings.NewReader(src), &h)
	if err != nil || string(b) != src || cap(b) != 4500 {
		t.Fatalf("second ReadMessage: %d bytes, %v, capacity %d, want 4500 (the hint)", len(b), err, cap(b))
	}
	p.Put(b)
	b2, err := p.ReadMessage(strings.NewReader(src[:3000]), &h)
	if err != nil || string(b2) != src[:3000] || &b2[:1][0] != &b[:1][0] {
		t.Fatalf("third ReadMessage: %d bytes, %v, reused %v", len(b2), err, &b2[:1][0] == &b[:1][0])
	}
	// A short message is read into the hinted buffer, then copied into
	// one of its own size: the large buffer goes back to the pool.
	p.Put(b2)
	b3, err := p.ReadMessage(strings.NewReader(src[:100]), &h)
	if err != nil || string(b3) != src[:100] || cap(b3) != 100 || p.Len() != 1 {
		t.Fatalf("short ReadMessage: %q, %v, capacity %d, %d pooled; want capacity 100, the 4500 buffer pooled", b3, err, cap(b3), p.Len())
	}
	if b4 := p.Get(4000); &b4[:1][0] != &b[:1][0] {
		t.Fatal("the buffer the short message was read into did not go back to the pool")
	}
	if _, err := p.ReadMessage(iotest.ErrReader(io.ErrClosedPipe), &h); err != io.ErrClosedPipe {
		t.Fatalf("ReadMessage of a failing reader: %v", err)
	}
}
