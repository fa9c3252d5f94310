package main

import (
	"bytes"
	"sync"
	"testing"
	"time"
)

// TestLinkPacesDelaysDrops: at 100 kB/s with a 100 ms queue, 20 datagrams
// of 1000 bytes (10 ms each on the line) pushed at once: the first 11 (the
// one on the line and 100 ms of queue) are kept, the rest dropped (pushing
// may take up to 10 ms before that changes); each leaves no earlier than its
// slot on the line plus the 20 ms delay, less sendEarly; in order, each
// with its own bytes (the pooled copies are not shared).
func TestLinkPacesDelaysDrops(t *testing.T) {
	const n, size = 20, 1000
	l := newLink(1e5, 20*time.Millisecond, 10_000)
	start := time.Now()
	for i := range n {
		l.push(bytes.Repeat([]byte{byte(i)}, size))
	}
	close(l.line)
	type got struct {
		at time.Time
		b  []byte
	}
	var mu sync.Mutex
	var sent []got
	l.run(func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, got{time.Now(), append([]byte(nil), b...)})
		return nil
	})
	if len(sent) != 11 || l.dropped() != n-11 {
		t.Fatalf("%d sent, %d dropped; want 11 and %d", len(sent), l.dropped(), n-11)
	}
	for i, s := range sent {
		if !bytes.Equal(s.b, bytes.Repeat([]byte{byte(i)}, size)) {
			t.Fatalf("datagram %d: wrong bytes", i)
		}
		due := start.Add(time.Duration(i+1)*10*time.Millisecond + 20*time.Millisecond - sendEarly)
		if s.at.Before(due) {
			t.Errorf("datagram %d left %v after the pushes began, before %v", i, s.at.Sub(start), due.Sub(start))
		}
	}
}
