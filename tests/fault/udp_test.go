package fault

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func newUDP(t *testing.T, target string) *UDP {
	t.Helper()
	u, err := NewUDP(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Close(); err != nil {
			t.Error(err)
		}
	})
	return u
}

// listenUDP is a target socket the test reads and writes itself.
func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(bound))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func dialUDP(t *testing.T, addr string) *net.UDPConn {
	t.Helper()
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(bound))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func send(t *testing.T, c *net.UDPConn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
}

// next reads c's next datagram and checks it is want; it returns the sender.
func next(t *testing.T, c *net.UDPConn, want string) netip.AddrPort {
	t.Helper()
	buf := make([]byte, maxDatagram)
	n, from, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(buf[:n]); got != want {
		t.Fatalf("got datagram %q, want %q", got, want)
	}
	return from
}

func TestUDPRelay(t *testing.T) {
	srv := listenUDP(t)
	var mu sync.Mutex
	sources := map[netip.AddrPort]bool{}
	done := make(chan struct{})
	go func() { // echo until the socket closes
		defer close(done)
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := srv.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			mu.Lock()
			sources[from] = true
			mu.Unlock()
			_, _ = srv.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	t.Cleanup(func() { _ = srv.Close(); <-done })

	u := newUDP(t, srv.LocalAddr().String())
	clients := []*net.UDPConn{dialUDP(t, u.Addr()), dialUDP(t, u.Addr())}
	rng := rand.New(rand.NewPCG(3, 5))
	buf := make([]byte, maxDatagram)
	const rounds = 300
	for i := range rounds { // in lockstep: no loss to socket buffers
		c := clients[i%2]
		size := 1 + rng.IntN(1400)
		if i == rounds-1 {
			size = 65507 // the largest IPv4 UDP payload
		}
		msg := payload(size, uint64(i))
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(buf)
		if err != nil || !bytes.Equal(buf[:n], msg) {
			t.Fatalf("datagram %d (%d bytes): echo of %d bytes, %v", i, size, n, err)
		}
	}
	await(t, u, "the counts", func() bool {
		return u.Datagrams(Up) == rounds && u.Datagrams(Down) == rounds
	})
	mu.Lock()
	defer mu.Unlock()
	if len(sources) != 2 || u.Peers() != 2 {
		t.Fatalf("target saw %d sources, relay has %d peers; want 2", len(sources), u.Peers())
	}
}

func TestUDPDrop(t *testing.T) {
	srv := listenUDP(t)
	u := newUDP(t, srv.LocalAddr().String())
	c := dialUDP(t, u.Addr())
	send(t, c, "a")
	from := next(t, srv, "a")

	u.Drop(true)
	send(t, c, "lost up")
	await(t, u, "a datagram dropped up", func() bool { return u.Dropped(Up) == 1 })
	if _, err := srv.WriteToUDPAddrPort([]byte("lost down"), from); err != nil {
		t.Fatal(err)
	}
	await(t, u, "a datagram dropped down", func() bool { return u.Dropped(Down) == 1 })

	u.Drop(false)
	send(t, c, "b")
	next(t, srv, "b") // not "lost up"
	if _, err := srv.WriteToUDPAddrPort([]byte("c"), from); err != nil {
		t.Fatal(err)
	}
	next(t, c, "c") // not "lost down"
	await(t, u, "the counts", func() bool { return u.Datagrams(Up) == 2 && u.Datagrams(Down) == 1 })
}

// dropPattern sends n datagrams one at a time through a relay losing them
// with probability p and returns which were relayed.
func dropPattern(t *testing.T, n int, p float64, seed uint64) []bool {
	srv := listenUDP(t)
	u := newUDP(t, srv.LocalAddr().String())
	u.DropRate(p, seed)
	c := dialUDP(t, u.Addr())
	relayed := make([]bool, n)
	for i := range n {
		msg := fmt.Sprint(i)
		before := u.Datagrams(Up)
		send(t, c, msg)
		await(t, u, "the datagram handled", func() bool {
			return u.Datagrams(Up)+u.Dropped(Up) == int64(i+1)
		})
		if relayed[i] = u.Datagrams(Up) > before; relayed[i] {
			next(t, srv, msg)
		}
	}
	return relayed
}

func countTrue(bs []bool) int64 {
	var n int64
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestUDPDropRate(t *testing.T) {
	const n = 200
	a := dropPattern(t, n, 0.3, 42)
	b := dropPattern(t, n, 0.3, 42)
	kept := countTrue(a)
	if kept < n/2 || kept == n {
		t.Fatalf("relayed %d of %d at 30%% loss", kept, n)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("datagram %d: the same seed gave another loss", i)
		}
	}
}

func TestUDPCut(t *testing.T) {
	srv := listenUDP(t)
	u := newUDP(t, srv.LocalAddr().String())
	c := dialUDP(t, u.Addr())
	send(t, c, "1")
	old := next(t, srv, "1")

	u.Cut()
	if u.Peers() != 0 {
		t.Fatalf("%d peers after Cut", u.Peers())
	}
	send(t, c, "2")
	fresh := next(t, srv, "2")
	if fresh.Port() == old.Port() {
		t.Fatalf("after Cut the target sees the same source port %d", old.Port())
	}
	// The old mapping is gone: what the target sends there is lost.
	for _, m := range []struct {
		to  netip.AddrPort
		msg string
	}{{old, "to the old port"}, {fresh, "to the new port"}} {
		if _, err := srv.WriteToUDPAddrPort([]byte(m.msg), m.to); err != nil {
			t.Fatal(err)
		}
	}
	next(t, c, "to the new port")
}

func TestPair(t *testing.T) {
	// A daemon-like target: TCP echo and UDP on one port.
	var srv *target
	var usrv *net.UDPConn
	for range 10 {
		srv = newTarget(t, echo)
		c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(srv.ln.Addr().(*net.TCPAddr).AddrPort()))
		if err == nil {
			usrv = c
			break
		}
	}
	if usrv == nil {
		t.Fatal("no port free for both TCP and UDP")
	}
	t.Cleanup(func() { _ = usrv.Close() })
	_ = usrv.SetDeadline(time.Now().Add(bound))

	r, u, err := NewPair(srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(); _ = u.Close() })
	if r.Addr() != u.Addr() {
		t.Fatalf("TCP on %s, UDP on %s", r.Addr(), u.Addr())
	}
	roundTrip(t, dial(t, r.Addr()), "tcp")
	send(t, dialUDP(t, u.Addr()), "udp")
	next(t, usrv, "udp")
}
