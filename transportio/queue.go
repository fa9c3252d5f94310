package transportio

import "time"

// DatagramRing is the per-peer outbound datagram queue (§9): at most
// DatagramRingSize entries; a push onto a full ring discards the oldest and
// counts it in OverflowDropped; an entry older than DatagramTTL at dequeue
// is discarded and counted in StaleDropped. The two are counted apart so an
// operator can tell a slow network from a slow consumer. No goroutines; the
// time is passed in; not safe for concurrent use.
type DatagramRing struct {
	buf        [DatagramRingSize]ringItem
	head, size int
	// TTL overrides DatagramTTL when non-zero.
	TTL time.Duration

	OverflowDropped uint64
	StaleDropped    uint64
}

type ringItem struct {
	b  []byte
	at time.Time
}

// Push queues b.
func (r *DatagramRing) Push(b []byte, now time.Time) {
	if r.size == DatagramRingSize {
		r.buf[r.head] = ringItem{}
		r.head = (r.head + 1) % DatagramRingSize
		r.size--
		r.OverflowDropped++
	}
	r.buf[(r.head+r.size)%DatagramRingSize] = ringItem{b: b, at: now}
	r.size++
}

// Pop returns the oldest entry that is not stale.
func (r *DatagramRing) Pop(now time.Time) ([]byte, bool) {
	ttl := r.TTL
	if ttl == 0 {
		ttl = DatagramTTL
	}
	for r.size > 0 {
		it := r.buf[r.head]
		r.buf[r.head] = ringItem{}
		r.head = (r.head + 1) % DatagramRingSize
		r.size--
		if now.Sub(it.at) >= ttl {
			r.StaleDropped++
			continue
		}
		return it.b, true
	}
	return nil, false
}

// Len is the number of queued entries.
func (r *DatagramRing) Len() int { return r.size }
