// Command udpshape is an emulated link for UDP, the counterpart of the shared
// harness's `netprobe shape` (TCP only) for the QUIC rows of bench/: every
// datagram from a client to -listen is relayed to -to through its own
// upstream socket, and the answers back, each direction paced to -rate bytes
// per second and delayed by -delay. A datagram that would wait more than
// -queue bytes' worth of the rate behind the ones queued is dropped
// (drop-tail, as a router's buffer: QUIC's congestion control sees the loss).
//
//	udpshape -listen 127.0.0.1:47301 -to 127.0.0.1:47400 -rate 12500000 -delay 10ms
//
// Both addresses must be loopback. It stops on SIGINT/SIGTERM.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// stamped is a datagram and when it leaves the link.
type stamped struct {
	at time.Time
	b  []byte
}

// link is one direction: pacing and delay, drop-tail beyond its queue.
type link struct {
	rate  float64       // bytes per second
	delay time.Duration // one way
	queue time.Duration // the most a datagram may wait for the rate
	mu    sync.Mutex
	next  time.Time // when the line is free
	line  chan stamped
	drops uint64
}

func newLink(rate float64, delay time.Duration, queueBytes int) *link {
	return &link{rate: rate, delay: delay, queue: time.Duration(float64(queueBytes) / rate * float64(time.Second)),
		line: make(chan stamped, 1<<16)}
}

// datagrams recycles the copies queued on the links (at 1 Gbit/s about
// 90 000 a second each way).
var datagrams = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// push queues b (a copy) unless the link's buffer is full.
func (l *link) push(b []byte) {
	now := time.Now()
	l.mu.Lock()
	start := l.next
	if start.Before(now) {
		start = now
	}
	if start.Sub(now) > l.queue {
		l.drops++
		l.mu.Unlock()
		return
	}
	l.next = start.Add(time.Duration(float64(len(b)) / l.rate * float64(time.Second)))
	at := l.next.Add(l.delay)
	l.mu.Unlock()
	var c []byte
	if len(b) <= 2048 {
		c = append((*datagrams.Get().(*[]byte))[:0], b...)
	} else {
		c = append([]byte(nil), b...)
	}
	select {
	case l.line <- stamped{at, c}:
	default:
		l.mu.Lock()
		l.drops++
		l.mu.Unlock()
	}
}

// sendEarly is how early a datagram may leave: one sleep per datagram (90
// 000 a second at 1 Gbit/s) cost the relay more CPU than the endpoints,
// and that CPU, not the rate, was the link's limit; datagrams due within
// this go at once (at most 0.2 ms early: under a 1 % error on the shortest
// delay used here, 10 ms).
const sendEarly = 200 * time.Microsecond

// dropped returns how many datagrams the link dropped.
func (l *link) dropped() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.drops
}

// run sends each datagram when it is due.
func (l *link) run(send func([]byte) error) {
	for p := range l.line {
		if d := time.Until(p.at); d > sendEarly {
			time.Sleep(d - sendEarly/2)
		}
		err := send(p.b)
		if cap(p.b) == 2048 {
			datagrams.Put(&p.b)
		}
		if err != nil {
			return
		}
	}
}

func main() {
	listen := flag.String("listen", "", "UDP address clients send to")
	to := flag.String("to", "", "UDP address of the server")
	rate := flag.Float64("rate", 12.5e6, "bytes per second, each direction")
	delay := flag.Duration("delay", 0, "one-way delay")
	queue := flag.Int("queue", 0, "buffer of each direction in bytes (default: the bandwidth-delay product of the round trip, at least 64 KiB)")
	flag.Parse()
	for _, a := range []string{*listen, *to} {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil || !ua.IP.IsLoopback() {
			fmt.Fprintf(os.Stderr, "udpshape: %q is not a loopback address\n", a)
			os.Exit(2)
		}
	}
	if *queue == 0 {
		*queue = max(64<<10, int(*rate*2*delay.Seconds()))
	}
	server, _ := net.ResolveUDPAddr("udp", *to)
	ln, err := net.ListenUDP("udp", mustAddr(*listen))
	if err != nil {
		fmt.Fprintln(os.Stderr, "udpshape:", err)
		os.Exit(1)
	}
	_ = ln.SetReadBuffer(8 << 20)
	_ = ln.SetWriteBuffer(8 << 20)
	var mu sync.Mutex
	ups := map[netip.AddrPort]*link{}   // client address -> its upstream direction
	downs := map[netip.AddrPort]*link{} // and its downstream one
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, from, err := ln.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			mu.Lock()
			up := ups[from]
			if up == nil {
				c, err := net.DialUDP("udp", nil, server)
				if err != nil {
					mu.Unlock()
					continue
				}
				_ = c.SetReadBuffer(8 << 20)
				_ = c.SetWriteBuffer(8 << 20)
				up = newLink(*rate, *delay, *queue)
				ups[from] = up
				go up.run(func(b []byte) error { _, err := c.Write(b); return err })
				down := newLink(*rate, *delay, *queue)
				downs[from] = down
				client := from
				go down.run(func(b []byte) error { _, err := ln.WriteToUDPAddrPort(b, client); return err })
				go func() {
					b := make([]byte, 64<<10)
					for {
						n, err := c.Read(b)
						if err != nil {
							return
						}
						down.push(b[:n])
					}
				}()
			}
			mu.Unlock()
			up.push(buf[:n])
		}
	}()
	fmt.Println("listening")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	// What the link dropped, for reading a run (QUIC's own loss counts
	// include packets it only thought lost).
	mu.Lock()
	for from, up := range ups {
		fmt.Fprintf(os.Stderr, "udpshape: %v: dropped %d datagrams towards the server, %d back\n", from, up.dropped(), downs[from].dropped())
	}
	mu.Unlock()
}

func mustAddr(a string) *net.UDPAddr {
	ua, err := net.ResolveUDPAddr("udp", a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "udpshape:", err)
		os.Exit(2)
	}
	return ua
}
