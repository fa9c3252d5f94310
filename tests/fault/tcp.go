package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// tcpBuf bounds what a relayed connection holds per direction, in bytes.
const tcpBuf = 32 << 10

// TCP is a TCP relay: every connection accepted on Addr is relayed to the
// target as raw bytes, with faults switched on demand. Each relayed
// connection holds at most 32 KiB per direction; a half-close (EOF from one
// side) is passed on as CloseWrite, and a reset from one side resets the
// other.
//
// Each connection uses two goroutines, from accept until both directions end
// or the connection is cut; Close waits for all of them.
type TCP struct {
	ln     *net.TCPListener
	ctx    context.Context // cancelled by Close: ends dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup
	notifier

	mu     sync.Mutex
	target string
	closed bool
	refuse bool
	resume chan struct{} // non-nil while stalled; closed when the stall ends
	conns  map[*pair]struct{}
	arm    [2]int64 // bytes left before an armed cut, per direction; -1: none
	firing [2]bool  // an armed cut is being carried out: forward nothing more

	accepted, refused atomic.Int64
	bytes, held       [2]atomic.Int64
}

// pair is one relayed connection.
type pair struct {
	done   chan struct{} // closed by abort
	client *net.TCPConn
	server *net.TCPConn // set under TCP.mu once dialed
}

// NewTCP listens on 127.0.0.1 (an ephemeral port) and relays every accepted
// connection to target (host:port, e.g. the daemon's TCP address).
func NewTCP(target string) (*TCP, error) {
	return newTCPAt(0, target)
}

// NewTCPAt is NewTCP on 127.0.0.1:port: a relay started again where
// one was closed (a tunnel that restarts).
func NewTCPAt(port int, target string) (*TCP, error) {
	return newTCPAt(port, target)
}

func newTCPAt(port int, target string) (*TCP, error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &TCP{target: target, ln: ln, ctx: ctx, cancel: cancel,
		conns: map[*pair]struct{}{}, arm: [2]int64{-1, -1}}
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

// SetTarget relays the connections accepted from now on to target: a
// relay started before its target (whose address is only known then) is
// pointed at it once it listens.
func (t *TCP) SetTarget(target string) {
	t.mu.Lock()
	t.target = target
	t.mu.Unlock()
}

// Addr is the relay's host:port, to give the client instead of the target's.
func (t *TCP) Addr() string { return t.ln.Addr().String() }

// Cut models a dropped connection: it resets (RST, both sides) every
// connection relayed now, including those waiting out a Stall. Bytes the
// relay has read but not forwarded are lost, as in flight. The relay keeps
// listening, so a reconnect gets through. An armed CutAfter stays armed.
func (t *TCP) Cut() {
	t.mu.Lock()
	ps := t.snapshot()
	t.mu.Unlock()
	for _, p := range ps {
		t.abort(p)
	}
}

// CutAfter arms a one-shot Cut for when n more bytes have been relayed in
// direction dir, counted over all connections: the relay forwards exactly n
// more bytes that way, drops the rest of what it has read, then cuts every
// connection. Pick n to cut mid-frame, mid-fragment or between a message and
// its credit. Calling it again replaces the arm for dir; n <= 0 disarms dir
// and cuts now.
//
// The n bytes are handed to the receiver's kernel before the reset; on
// loopback a receiver that keeps reading gets all of them. One whose receive
// window is full loses what did not fit, as on a real network.
func (t *TCP) CutAfter(n int64, dir Direction) {
	t.mu.Lock()
	if n <= 0 {
		t.arm[dir] = -1
		t.mu.Unlock()
		t.Cut()
		return
	}
	t.arm[dir] = n
	t.mu.Unlock()
}

// Armed reports whether a CutAfter in direction dir is still waiting for
// its bytes (a direction whose transfer ended may never relay them).
func (t *TCP) Armed(dir Direction) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.arm[dir] >= 0
}

// Stall models a black hole (a laptop lid closed, a dead route) while on:
// no bytes are relayed either way and new connections are accepted but not
// forwarded to the target, yet every connection stays open, so the peers'
// keepalives time out. Each direction of a connection holds what it has read
// (at most 32 KiB, see Held); the rest waits in the kernel and then the
// sender. Stall(false) resumes everything held, in order, and forwards the
// waiting connections.
func (t *TCP) Stall(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case on && t.resume == nil:
		t.resume = make(chan struct{})
	case !on && t.resume != nil:
		close(t.resume)
		t.resume = nil
	}
}

// Refuse models a daemon that is down while on: each new connection is
// reset (RST) as soon as it is accepted, so the client's dial succeeds and
// its first read or TLS handshake fails. Connections relayed already are
// untouched.
func (t *TCP) Refuse(on bool) {
	t.mu.Lock()
	t.refuse = on
	t.mu.Unlock()
}

// Conns is the number of connections relayed now, counted from accept (so
// including those waiting out a Stall) until both directions end or a cut.
func (t *TCP) Conns() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// Accepted is the total of connections accepted for relaying (refused ones
// not included).
func (t *TCP) Accepted() int64 { return t.accepted.Load() }

// Refused is the total of connections reset by Refuse.
func (t *TCP) Refused() int64 { return t.refused.Load() }

// Bytes is the total of bytes relayed in direction dir (written to the
// receiving side), over all connections. It is counted once each write
// returns, so the receiver may read bytes a moment before they are counted:
// wait for a count with Await.
func (t *TCP) Bytes(dir Direction) int64 { return t.bytes[dir].Load() }

// Held is the number of bytes read from senders in direction dir and not yet
// forwarded: held by a Stall or being written now.
func (t *TCP) Held(dir Direction) int64 { return t.held[dir].Load() }

// Await blocks until cond returns true or ctx is done (then it returns ctx's
// error). cond runs on the caller's goroutine, at once and again after every
// change of a counter or gauge; it should read the relay's counters and
// return quickly.
func (t *TCP) Await(ctx context.Context, cond func() bool) error {
	return t.await(ctx, cond)
}

// Close stops listening, resets every relayed connection and waits for all
// the relay's goroutines. Later calls return nil.
func (t *TCP) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	ps := t.snapshot()
	t.mu.Unlock()
	t.cancel()
	err := t.ln.Close()
	for _, p := range ps {
		t.abort(p)
	}
	t.wg.Wait()
	return err
}

// snapshot lists the relayed connections; t.mu is held.
func (t *TCP) snapshot() []*pair {
	ps := make([]*pair, 0, len(t.conns))
	for p := range t.conns {
		ps = append(ps, p)
	}
	return ps
}

func (t *TCP) serve() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptTCP()
		if err != nil {
			return // closed (or the listener failed: the relay accepts no more)
		}
		t.mu.Lock()
		if t.closed || t.refuse {
			closed := t.closed
			t.mu.Unlock()
			reset(c)
			if closed {
				return
			}
			t.refused.Add(1)
			t.bump()
			continue
		}
		p := &pair{client: c, done: make(chan struct{})}
		t.conns[p] = struct{}{}
		t.wg.Add(1)
		t.mu.Unlock()
		t.accepted.Add(1)
		t.bump()
		go t.handle(p)
	}
}

// handle relays one connection: it waits out a stall, dials the target and
// pumps both directions until both end.
func (t *TCP) handle(p *pair) {
	defer t.wg.Done()
	defer t.forget(p)
	if !t.unstalled(p) {
		return
	}
	var d net.Dialer
	t.mu.Lock()
	target := t.target
	t.mu.Unlock()
	c, err := d.DialContext(t.ctx, "tcp", target)
	if err != nil {
		t.abort(p)
		return
	}
	s := c.(*net.TCPConn)
	t.mu.Lock()
	select {
	case <-p.done:
		t.mu.Unlock()
		reset(s)
		return
	default:
		p.server = s
	}
	t.mu.Unlock()

	down := make(chan struct{})
	go func() {
		defer close(down)
		t.pump(p, Down, s, p.client)
	}()
	t.pump(p, Up, p.client, s)
	<-down
	_ = p.client.Close()
	_ = s.Close()
}

func (t *TCP) forget(p *pair) {
	t.mu.Lock()
	delete(t.conns, p)
	t.mu.Unlock()
	t.bump()
}

// abort resets both sides of p, once.
func (t *TCP) abort(p *pair) {
	t.mu.Lock()
	select {
	case <-p.done:
		t.mu.Unlock()
		return
	default:
	}
	close(p.done)
	s := p.server
	t.mu.Unlock()
	reset(p.client)
	if s != nil {
		reset(s)
	}
}

// reset closes c with an RST instead of a FIN.
func reset(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

// unstalled waits while the relay is stalled; false if p ends meanwhile.
func (t *TCP) unstalled(p *pair) bool {
	t.mu.Lock()
	ch := t.resume
	t.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-p.done:
		return false
	}
}

// pump relays src to dst in direction dir until EOF (passed on as
// CloseWrite) or an error (which resets p).
func (t *TCP) pump(p *pair, dir Direction, src, dst *net.TCPConn) {
	buf := make([]byte, tcpBuf)
	for {
		n, err := src.Read(buf)
		if n > 0 && !t.forward(p, dir, dst, buf[:n]) {
			t.abort(p)
			return
		}
		if errors.Is(err, io.EOF) {
			if dst.CloseWrite() != nil {
				t.abort(p)
			}
			return
		}
		if err != nil {
			t.abort(p)
			return
		}
	}
}

// forward writes data to dst, honouring stalls and armed cuts; false if p
// is to end.
func (t *TCP) forward(p *pair, dir Direction, dst *net.TCPConn, data []byte) bool {
	t.held[dir].Add(int64(len(data)))
	t.bump()
	defer func() { t.held[dir].Add(-int64(len(data))); t.bump() }()
	for len(data) > 0 {
		if !t.unstalled(p) {
			return false
		}
		k, fire := t.reserve(dir, len(data))
		if k == 0 {
			return true // an armed cut is under way: data is lost in flight
		}
		w, err := dst.Write(data[:k])
		t.bytes[dir].Add(int64(w))
		t.held[dir].Add(-int64(k))
		data = data[k:]
		if fire {
			t.cutArmed(dir)
			return false
		}
		if err != nil {
			return false
		}
	}
	return true
}

// reserve returns how many of n bytes may go out in direction dir, and
// whether the armed cut for dir fires after them.
func (t *TCP) reserve(dir Direction, n int) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.firing[dir]:
		return 0, false
	case t.arm[dir] < 0:
		return n, false
	}
	k := min(int64(n), t.arm[dir])
	t.arm[dir] -= k
	if t.arm[dir] > 0 {
		return int(k), false
	}
	t.arm[dir], t.firing[dir] = -1, true
	return int(k), true
}

// cutArmed carries out the armed cut for dir.
func (t *TCP) cutArmed(dir Direction) {
	t.mu.Lock()
	t.firing[dir] = false
	ps := t.snapshot()
	t.mu.Unlock()
	for _, p := range ps {
		t.abort(p)
	}
}
