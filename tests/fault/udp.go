package fault

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
)

// maxDatagram is the largest UDP payload, in bytes.
const maxDatagram = 64 << 10

// UDP is a UDP relay for QUIC (WebTransport): datagrams from each client
// address go to the target from an upstream socket of their own, so the
// target sees each client as a distinct peer, and the target's replies on
// that socket go back to that client. Datagrams are relayed whole and in the
// order read; faults drop them or change the client's apparent address.
//
// The relay uses one goroutine, plus one per client mapping until Cut or
// Close; Close waits for all of them.
type UDP struct {
	conn *net.UDPConn // the clients' side
	wg   sync.WaitGroup
	notifier

	mu     sync.Mutex
	target *net.UDPAddr
	closed bool
	drop   bool
	rate   float64
	rng    *rand.Rand
	peers  map[netip.AddrPort]*net.UDPConn // client → its upstream socket
	ports  map[netip.AddrPort]uint16       // client → upstream port before a Cut

	datagrams, dropped [2]atomic.Int64
}

// NewUDP listens on 127.0.0.1 (an ephemeral UDP port) and relays datagrams
// between the clients that send to it and target (host:port, e.g. the
// daemon's UDP address, the same port as its TCP one).
func NewUDP(target string) (*UDP, error) {
	return newUDPAt(0, target)
}

func newUDPAt(port int, target string) (*UDP, error) {
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		return nil, err
	}
	u := &UDP{target: raddr, conn: conn,
		peers: map[netip.AddrPort]*net.UDPConn{}, ports: map[netip.AddrPort]uint16{}}
	u.wg.Add(1)
	go u.serve()
	return u, nil
}

// SetTarget relays to target the clients that get an upstream socket from
// now on (as TCP.SetTarget).
func (u *UDP) SetTarget(target string) error {
	raddr, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return err
	}
	u.mu.Lock()
	u.target = raddr
	u.mu.Unlock()
	return nil
}

// Addr is the relay's host:port, to give the client instead of the target's.
func (u *UDP) Addr() string { return u.conn.LocalAddr().String() }

// Drop models a black hole while on: every datagram is dropped, both ways.
// QUIC's idle timeout then ends the connection unless Drop(false) comes in
// time.
func (u *UDP) Drop(on bool) {
	u.mu.Lock()
	u.drop = on
	u.mu.Unlock()
}

// DropRate models a lossy path: from now on each datagram, either way, is
// dropped with probability p (0 <= p <= 1; p <= 0 turns loss off), drawn
// from a PCG generator seeded with seed. The draws follow the order the
// relay handles datagrams in, so they repeat for a given seed only as far as
// that order does (e.g. traffic one way at a time).
func (u *UDP) DropRate(p float64, seed uint64) {
	u.mu.Lock()
	u.rate, u.rng = p, rand.New(rand.NewPCG(seed, seed))
	u.mu.Unlock()
}

// Cut models a NAT rebinding or a dropped path: it forgets every client
// mapping and closes its upstream socket, so what the target sends to the
// old port is lost. The client's next datagram gets a new upstream socket,
// with a source port different from the one before, which a QUIC server
// sees as a path change (or, for a packet it cannot match, an unknown
// connection).
func (u *UDP) Cut() {
	u.mu.Lock()
	for client, up := range u.peers {
		u.ports[client] = port(up)
		_ = up.Close()
	}
	clear(u.peers)
	u.mu.Unlock()
	u.bump()
}

// Peers is the number of client mappings (upstream sockets) now.
func (u *UDP) Peers() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.peers)
}

// Datagrams is the total of datagrams relayed in direction dir.
func (u *UDP) Datagrams(dir Direction) int64 { return u.datagrams[dir].Load() }

// Dropped is the total of datagrams dropped in direction dir, by Drop or
// DropRate (or because sending them on failed).
func (u *UDP) Dropped(dir Direction) int64 { return u.dropped[dir].Load() }

// Await blocks until cond returns true or ctx is done (then it returns ctx's
// error). cond runs on the caller's goroutine, at once and again after every
// change of a counter or of Peers; it should read the relay's counters and
// return quickly.
func (u *UDP) Await(ctx context.Context, cond func() bool) error {
	return u.await(ctx, cond)
}

// Close stops relaying, closes every socket and waits for all the relay's
// goroutines. Later calls return nil.
func (u *UDP) Close() error {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return nil
	}
	u.closed = true
	for _, up := range u.peers {
		_ = up.Close()
	}
	clear(u.peers)
	u.mu.Unlock()
	err := u.conn.Close()
	u.wg.Wait()
	return err
}

// serve relays client → target.
func (u *UDP) serve() {
	defer u.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return // closed
		}
		up := u.upstream(client)
		if up == nil {
			u.count(Up, false)
			continue
		}
		_, err = up.Write(buf[:n])
		u.count(Up, err == nil)
	}
}

// upstream returns client's upstream socket, making one if need be, or nil
// if the datagram is to be dropped.
func (u *UDP) upstream(client netip.AddrPort) *net.UDPConn {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed || u.lose() {
		return nil
	}
	if up := u.peers[client]; up != nil {
		return up
	}
	up, err := net.DialUDP("udp", nil, u.target)
	if err != nil {
		return nil
	}
	if old, ok := u.ports[client]; ok && port(up) == old {
		// The kernel gave back the port of before the Cut: take another,
		// necessarily different while this one is open.
		again, err := net.DialUDP("udp", nil, u.target)
		_ = up.Close()
		if err != nil {
			return nil
		}
		up = again
	}
	delete(u.ports, client)
	u.peers[client] = up
	u.wg.Add(1)
	go u.back(client, up)
	return up
}

// back relays target → client on up until up is closed.
func (u *UDP) back(client netip.AddrPort, up *net.UDPConn) {
	defer u.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := up.Read(buf)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue // an ICMP error for an earlier datagram: the target is not listening
		}
		if err != nil {
			return // closed
		}
		u.mu.Lock()
		lost := u.closed || u.lose()
		u.mu.Unlock()
		if !lost {
			_, err = u.conn.WriteToUDPAddrPort(buf[:n], client)
		}
		u.count(Down, !lost && err == nil)
	}
}

// lose draws whether to drop a datagram; u.mu is held.
func (u *UDP) lose() bool {
	return u.drop || u.rate > 0 && u.rng.Float64() < u.rate
}

func (u *UDP) count(dir Direction, relayed bool) {
	if relayed {
		u.datagrams[dir].Add(1)
	} else {
		u.dropped[dir].Add(1)
	}
	u.bump()
}

func port(c *net.UDPConn) uint16 {
	return uint16(c.LocalAddr().(*net.UDPAddr).Port)
}
