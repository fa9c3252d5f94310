package transportio

import (
	"testing"
	"time"
)

// Checklist 66–67.
func TestParseDatagram(t *testing.T) {
	good := unhex(t, goldenDatagram)
	if d, ok := ParseDatagram(good); !ok || d.Origin != 1 || d.Sequence != 1 || string(d.Payload) != `{"x":1}` {
		t.Fatalf("golden: %+v %v", d, ok)
	}
	for i := 0; i <= DatagramHeaderLen; i++ {
		if _, ok := ParseDatagram(good[:i]); ok {
			t.Errorf("%d bytes accepted", i)
		}
	}
	bad := append([]byte(nil), good...)
	bad[0] = 3
	if _, ok := ParseDatagram(bad); ok {
		t.Error("codec 3 accepted")
	}
	zero := AppendDatagram(nil, Datagram{Codec: CodecJSON, Payload: []byte("1")})
	if _, ok := ParseDatagram(zero); ok {
		t.Error("event id 0 accepted")
	}
}

// Checklist 68–69.
func TestSequenceGate(t *testing.T) {
	var g SequenceGate
	t0 := time.Unix(1000, 0)
	steps := []struct {
		origin, seq uint32
		ok          bool
	}{
		{1, 10, true}, {1, 9, false}, {1, 10, false}, {1, 11, true},
		{2, 0xFFFFFFFE, true}, {2, 2, true}, {2, 0xFFFFFFF0, false},
		{3, 3000, true}, {4, 1, true},
	}
	for i, s := range steps {
		if got := g.Accept(s.origin, 7, s.seq, t0); got != s.ok {
			t.Errorf("step %d (origin %d seq %d) = %v", i, s.origin, s.seq, got)
		}
	}
	if g.Discarded != 3 {
		t.Errorf("discarded %d, want 3", g.Discarded)
	}
	if g.Accept(1, 7, 5, t0.Add(SequenceRetention-time.Millisecond)) {
		t.Error("stale pair forgotten too early")
	}
	if !g.Accept(1, 7, 5, t0.Add(2*SequenceRetention)) {
		t.Error("pair idle ≥60 s not forgotten")
	}
	if g.Len() > 2 {
		t.Errorf("sweep kept %d pairs", g.Len())
	}
}

// Checklist 70.
func TestNextSequence(t *testing.T) {
	if NextSequence(0) != 1 || NextSequence(0xFFFFFFFF) != 1 || NextSequence(5) != 6 {
		t.Error("sequence must start at 1 and wrap to 1")
	}
}

// Checklist 71–73.
func TestOriginAllocator(t *testing.T) {
	if _, err := NewOriginAllocator(1024); err == nil {
		t.Error("ordinal 1024 accepted")
	}
	a, _ := NewOriginAllocator(0)
	b, _ := NewOriginAllocator(1)
	t0 := time.Unix(0, 0)
	o1, _ := a.Allocate(t0)
	p1, _ := b.Allocate(t0)
	if o1 == 0 || o1 == p1 || p1>>22 != 1 || o1>>22 != 0 {
		t.Errorf("origins %x %x", o1, p1)
	}
	a.Release(o1, t0)
	// Only o1 is released: before +120 s it is not reissued.
	o2, _ := a.Allocate(t0.Add(OriginQuarantine - time.Millisecond))
	if o2 == o1 {
		t.Error("origin reissued inside its quarantine")
	}
	o3, _ := a.Allocate(t0.Add(OriginQuarantine))
	if o3 != o1 {
		t.Errorf("origin %x not reissued after quarantine (got %x)", o1, o3)
	}
	full := &OriginAllocator{ordinal: 0, next: counterMask + 1, live: map[uint32]bool{}}
	if _, err := full.Allocate(t0); err != ErrOriginsExhausted {
		t.Errorf("exhausted: %v", err)
	}

	var p OrdinalPool
	o, _ := p.Acquire(t0)
	p.Release(o, t0)
	if n, _ := p.Acquire(t0.Add(OrdinalQuarantine - time.Second)); n == o {
		t.Error("ordinal reused inside 300 s")
	}
}

// Checklist 75–76: overflow and staleness are counted apart.
func TestDatagramRing(t *testing.T) {
	var r DatagramRing
	t0 := time.Unix(0, 0)
	for i := 1; i <= 104; i++ {
		r.Push([]byte{byte(i)}, t0)
	}
	if r.OverflowDropped != 40 || r.Len() != 64 {
		t.Fatalf("overflow %d len %d", r.OverflowDropped, r.Len())
	}
	for i := 41; i <= 104; i++ {
		b, ok := r.Pop(t0)
		if !ok || b[0] != byte(i) {
			t.Fatalf("pop %d = %v %v", i, b, ok)
		}
	}
	var s DatagramRing
	for i := 0; i < 5; i++ {
		s.Push([]byte{1}, t0)
	}
	if _, ok := s.Pop(t0.Add(DatagramTTL)); ok || s.StaleDropped != 5 || s.OverflowDropped != 0 {
		t.Fatalf("stale %d overflow %d", s.StaleDropped, s.OverflowDropped)
	}
}

func TestMaxDatagramPayload(t *testing.T) {
	if MaxDatagramPayload(0) != 1011 || MaxDatagramPayload(1200) != 1187 {
		t.Error("§7.4 payload maximum")
	}
}
