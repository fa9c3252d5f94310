// Package bufpool keeps a bounded number of free byte buffers for reuse.
//
// The bulk paths (tcp/data messages, WebSocket reads, corked writes,
// transport-io frames) reuse their large buffers instead of allocating,
// clearing and faulting in a fresh one per message. Unlike a sync.Pool,
// whose contents survive until two garbage collections find them unused
// (and a quiet process collects rarely), a Pool here holds at most Max
// buffers of at most MaxCap bytes: what it keeps resident is bounded, so
// a burst of many connections does not leave its peak behind.
package bufpool

import "io"

// Pool is a bounded free list of byte buffers, safe for concurrent use.
type Pool struct {
	free   chan []byte
	minCap int
	maxCap int
}

// New returns a pool keeping at most n buffers whose capacity is between
// minCap and maxCap bytes; Put drops any other.
func New(n, minCap, maxCap int) *Pool {
	return &Pool{free: make(chan []byte, n), minCap: minCap, maxCap: maxCap}
}

// Get returns an empty buffer with capacity for at least size bytes: a
// free one when the first free buffer is big enough, else a new one (a
// free one too small is dropped). A size under minCap gets a new buffer
// of exactly that size, which Put will not keep: small messages neither
// take large buffers nor cost more than they need. For buffers that are
// given back soon (written, then recycled): see GetFit for those a caller
// may hold.
func (p *Pool) Get(size int) []byte { return p.get(size, false) }

// GetFit is Get for buffers a caller may hold for long (a stalled
// reader's messages): the buffer's capacity is also at most twice size,
// so a short message never pins a buffer sized for long ones. A free
// buffer more than twice too large stays in the pool.
func (p *Pool) GetFit(size int) []byte { return p.get(size, true) }

func (p *Pool) get(size int, fit bool) []byte {
	if size < p.minCap {
		return make([]byte, 0, size)
	}
	select {
	case b := <-p.free:
		switch c := cap(b); {
		case c >= size && (!fit || c/2 <= size):
			return b[:0]
		case c > size:
			p.Put(b)
		}
	default:
	}
	return make([]byte, 0, size)
}

// Put gives b back for reuse; the caller must not use it afterwards.
func (p *Pool) Put(b []byte) {
	if c := cap(b); c < p.minCap || c > p.maxCap {
		return
	}
	select {
	case p.free <- b[:0]:
	default: // full: left to the collector
	}
}

// Len returns how many free buffers the pool holds.
func (p *Pool) Len() int { return len(p.free) }

// ReadAll reads r to its end into buf (appending, growing it as needed)
// and returns the extended buffer; unlike io.ReadAll it starts from the
// capacity the caller chose, so a buffer sized from the previous message
// is filled without regrowing. Errors other than io.EOF are returned with
// what was read.
func ReadAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// SizeHint is a decaying maximum of recent message sizes, for sizing the
// next read buffer: one short message between full frames does not shrink
// the next buffer at once. Not safe for concurrent use.
type SizeHint int

// Next returns the capacity to give the next buffer (at least min).
func (h SizeHint) Next(min int) int { return max(int(h), min) }

// Saw records a message of n bytes.
func (h *SizeHint) Saw(n int) { *h = SizeHint(max(n+n/8, int(*h)-int(*h)/8)) }

// ReadMessage reads r (one message) to its end into a buffer from p sized
// by hint (a recycled one when the first free one is big enough), and
// records the message's size in hint: message readers size each buffer
// from the previous messages instead of growing from small (io.ReadAll
// starts at 512 bytes, doubles and clears each step). A message that
// fills less than half of its buffer is copied into one of its own size
// and the buffer goes back to p: a receiver may hold messages for long (a
// stalled reader's window), and a short message must not pin a buffer
// sized for the long ones around it.
func (p *Pool) ReadMessage(r io.Reader, hint *SizeHint) ([]byte, error) {
	buf, err := ReadAll(r, p.Get(hint.Next(512)))
	if err != nil {
		return nil, err
	}
	hint.Saw(len(buf))
	if n := len(buf); cap(buf)-n > n && cap(buf) >= p.minCap {
		fit := make([]byte, n)
		copy(fit, buf)
		p.Put(buf)
		return fit, nil
	}
	return buf, nil
}
