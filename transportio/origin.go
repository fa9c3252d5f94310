package transportio

import (
	"fmt"
	"sync"
	"time"
)

// OriginAllocator issues datagram origins for one session host (§7.3):
// ordinal<<22 | counter, never 0, each released value quarantined for
// OriginQuarantine before reuse, and ErrOriginsExhausted rather than a wrap
// when every value is live or quarantined. The time is passed in; not safe
// for concurrent use.
type OriginAllocator struct {
	ordinal uint32
	next    uint32 // next never-issued counter value
	live    map[uint32]bool
	held    []heldOrigin // released, oldest first
	free    []uint32     // out of quarantine
}

type heldOrigin struct {
	v     uint32
	until time.Time
}

// NewOriginAllocator returns an allocator for host ordinal (0 for a single
// host); an ordinal of 1024 or more is a configuration error.
func NewOriginAllocator(ordinal int) (*OriginAllocator, error) {
	if ordinal < 0 || ordinal >= MaxHostOrdinals {
		return nil, fmt.Errorf("transportio: host ordinal %d is outside 0..%d", ordinal, MaxHostOrdinals-1)
	}
	return &OriginAllocator{ordinal: uint32(ordinal), next: 1, live: map[uint32]bool{}}, nil
}

const counterMask = 1<<originCounterBits - 1

// Allocate returns a fresh origin.
func (a *OriginAllocator) Allocate(now time.Time) (uint32, error) {
	for len(a.held) > 0 && !now.Before(a.held[0].until) {
		a.free = append(a.free, a.held[0].v)
		a.held = a.held[1:]
	}
	var v uint32
	switch {
	case len(a.free) > 0:
		v, a.free = a.free[0], a.free[1:]
	case a.next <= counterMask:
		v = a.ordinal<<originCounterBits | a.next
		a.next++
	default:
		return 0, ErrOriginsExhausted
	}
	a.live[v] = true
	return v, nil
}

// Release quarantines v until now+OriginQuarantine.
func (a *OriginAllocator) Release(v uint32, now time.Time) {
	if !a.live[v] {
		return
	}
	delete(a.live, v)
	a.held = append(a.held, heldOrigin{v: v, until: now.Add(OriginQuarantine)})
}

// SharedOrigins is an OriginAllocator safe for concurrent use, on the
// wall clock: the one allocator of a session host, shared by every
// Listener of it (Listener.Origins), so that its WebSocket and its
// WebTransport peers never get the same origin (§7.3).
type SharedOrigins struct {
	mu sync.Mutex
	a  *OriginAllocator
}

// NewSharedOrigins returns the allocator of host ordinal (0..1023; see
// NewOriginAllocator for the error).
func NewSharedOrigins(ordinal int) (*SharedOrigins, error) {
	a, err := NewOriginAllocator(ordinal)
	if err != nil {
		return nil, err
	}
	return &SharedOrigins{a: a}, nil
}

// Ordinal is the host ordinal in the high 10 bits of every origin issued.
func (s *SharedOrigins) Ordinal() int { return int(s.a.ordinal) }

// Allocate returns a fresh origin, or ErrOriginsExhausted.
func (s *SharedOrigins) Allocate() (uint32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a.Allocate(time.Now())
}

// Release quarantines v for OriginQuarantine.
func (s *SharedOrigins) Release(v uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.a.Release(v, time.Now())
}

// OrdinalPool hands out host ordinals for a multi-host deployment, holding
// each departed one for OrdinalQuarantine (§7.3).
type OrdinalPool struct {
	live map[int]bool
	held map[int]time.Time
}

// Acquire returns a free ordinal, or an error when all 1024 are taken.
func (p *OrdinalPool) Acquire(now time.Time) (int, error) {
	if p.live == nil {
		p.live, p.held = map[int]bool{}, map[int]time.Time{}
	}
	for o := 0; o < MaxHostOrdinals; o++ {
		if p.live[o] {
			continue
		}
		if until, ok := p.held[o]; ok && now.Before(until) {
			continue
		}
		delete(p.held, o)
		p.live[o] = true
		return o, nil
	}
	return 0, fmt.Errorf("transportio: all %d host ordinals are live or quarantined", MaxHostOrdinals)
}

// Release marks ordinal o's host departed.
func (p *OrdinalPool) Release(o int, now time.Time) {
	if p.live[o] {
		delete(p.live, o)
		p.held[o] = now.Add(OrdinalQuarantine)
	}
}
