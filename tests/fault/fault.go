// Package fault injects network faults between a sidecar client and daemon,
// for end-to-end tests of automatic reconnection ("a dropped connection
// resumes with no byte lost or duplicated").
//
// [TCP] relays the daemon's TCP port (WebSocket over TLS: /ahp and
// /transport-io); [UDP] relays its UDP port (WebTransport over QUIC). Both
// listen on 127.0.0.1 with an ephemeral port: give the client Addr() instead
// of the daemon's address. They pass bytes and datagrams through untouched,
// so TLS and QUIC run end to end and the relays need no certificates (a
// client that checks the server name or pins a certificate still sees the
// daemon's). Faults are switched from the test goroutine while traffic flows:
// cuts (resets), stalls (a black hole that keeps connections open), refused
// connections, dropped datagrams.
//
// Lifecycle: a constructor starts the relay's goroutines; Close ends every
// connection, stops every goroutine and waits for them, so call it (e.g. in
// t.Cleanup) before goleak looks. All methods are safe for concurrent use.
// A fault switched on applies to what the relay reads after the call returns;
// bytes or a datagram already on their way out may still be delivered.
//
// Counters only grow, except the gauges Conns, Held and Peers. To wait for
// the relay to reach a state without sleeping, use Await with a condition
// over the counters, e.g. r.Await(ctx, func() bool { return r.Accepted() >= 2 }).
package fault

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
)

// Direction is the way bytes or datagrams travel through a relay: Up or
// Down (the methods taking one panic on any other value).
type Direction int

const (
	// Up is client → server (target).
	Up Direction = iota
	// Down is server (target) → client.
	Down
)

// String returns "up" or "down".
func (d Direction) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// notifier wakes Await callers after any counter changes.
type notifier struct {
	mu sync.Mutex
	ch chan struct{} // closed at the next change; nil when no one waits
}

func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	return n.ch
}

func (n *notifier) bump() {
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}

// await returns nil once cond holds, re-checking it after every change, or
// ctx's error once ctx is done.
func (n *notifier) await(ctx context.Context, cond func() bool) error {
	for {
		ch := n.changed() // before cond: a change after cond is not missed
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// NewPair starts a TCP and a UDP relay to target on one port of 127.0.0.1,
// as the daemon serves WebSocket and WebTransport on one port: a client with
// --transport auto tries both at the address it is given. Close both.
func NewPair(target string) (*TCP, *UDP, error) {
	var last error
	for range 10 { // another socket may hold the UDP port of a fresh TCP one
		t, err := NewTCP(target)
		if err != nil {
			return nil, nil, err
		}
		_, p, _ := net.SplitHostPort(t.Addr())
		port, _ := strconv.Atoi(p)
		u, err := newUDPAt(port, target)
		if err == nil {
			return t, u, nil
		}
		last = err
		_ = t.Close()
	}
	return nil, nil, fmt.Errorf("fault: no port free for both TCP and UDP: %w", last)
}
