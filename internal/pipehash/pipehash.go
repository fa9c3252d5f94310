// Package pipehash computes a hash on a goroutine of its own, pipelined
// with the I/O that produces the bytes (a file channel's reads and
// writes, issue 30): Write copies the bytes into one of Buffers buffers
// of BufSize bytes and returns at once while an earlier buffer is being
// hashed, so that the copy loop's goroutine spends its time on system
// calls and the hash runs beside it on another core. Memory is bounded:
// Buffers × BufSize bytes a Hash, and a Write waits for a free buffer
// when the hashing goroutine is behind.
package pipehash

import (
	"hash"
	"sync"
)

const (
	// BufSize is the size of one buffer: large enough that the hashing
	// goroutine wakes once per 256 KiB, not per message.
	BufSize = 256 << 10
	// Buffers is how many buffers a Hash holds at most (1 MiB).
	Buffers = 4
)

// Hash feeds h on its own goroutine. Write and Sum may be called from
// one goroutine at a time (the copy loop's); Close from any, at any time.
// Every Hash must end with Sum or Close, which stop its goroutine.
type Hash struct {
	h    hash.Hash
	mu   sync.Mutex
	cur  []byte        // being filled, nil when none
	full chan []byte   // to the hashing goroutine, in order
	free chan []byte   // back from it
	done chan struct{} // closed once the goroutine returned
	n    int           // buffers made so far (≤ Buffers)
	end  bool          // full is closed
	sum  []byte
}

// New starts hashing on its own goroutine what is written to the
// returned Hash, after what h already holds (a resumed prefix).
func New(h hash.Hash) *Hash {
	p := &Hash{h: h, full: make(chan []byte, Buffers), free: make(chan []byte, Buffers), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for b := range p.full {
			p.h.Write(b)
			p.free <- b[:0]
		}
	}()
	return p
}

// Write copies b for the hashing goroutine; it never fails (after Sum or
// Close the bytes are ignored).
func (p *Hash) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 && !p.end {
		if p.cur == nil {
			if p.n < Buffers {
				p.n++
				p.cur = make([]byte, 0, BufSize)
			} else {
				p.cur = <-p.free
			}
		}
		k := copy(p.cur[len(p.cur):cap(p.cur)], b)
		p.cur = p.cur[:len(p.cur)+k]
		b = b[k:]
		if len(p.cur) == cap(p.cur) {
			p.full <- p.cur
			p.cur = nil
		}
	}
	return n, nil
}

// Sum waits until every byte written is hashed and returns the sum; the
// Hash takes no more bytes.
func (p *Hash) Sum() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.end {
		if len(p.cur) > 0 {
			p.full <- p.cur
		}
		p.cur = nil
		p.end = true
		close(p.full)
		<-p.done
		p.sum = p.h.Sum(nil)
	}
	return p.sum
}

// Close stops the hashing goroutine (waiting for it); a Sum after it
// returns the sum of the buffers that were full.
func (p *Hash) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.end {
		p.cur = nil
		p.end = true
		close(p.full)
		<-p.done
		p.sum = p.h.Sum(nil)
	}
}
