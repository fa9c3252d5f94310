package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// Redialling a host whose address refuses connections (newSession):
// 250 ms, doubling to 5 s, each ±20%.
const (
	redialDelay    = 250 * time.Millisecond
	redialMaxDelay = 5 * time.Second
)

// newSession dials url for forward's next session. While the host's
// address refuses connections (its daemon is down: gone says the last
// session ended so, or the first dial finds it so) it dials again until
// it answers, and the forwarded ports reset every connection they accept
// meanwhile, as the daemon's port would refuse it: nothing can serve it,
// and a client told at once can try again. Any other failure, or ctx's
// end, is returned as it is.
func newSession(ctx context.Context, cf *connFlags, url string, handoffs []*handoff, gone bool) (*client.Conn, error) {
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	delay := redialDelay
	for {
		if gone && stop == nil {
			stop = resetMeanwhile(handoffs)
		}
		conn, err := cf.dial(ctx, url)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return conn, err
		}
		gone = true
		t := time.NewTimer(time.Duration(float64(delay) * (0.8 + 0.4*rand.Float64())))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		delay = min(2*delay, redialMaxDelay)
	}
}

// resetMeanwhile accepts on every handoff (a session listener of its
// own) and resets each connection at once, until the returned func is
// called (it waits for the goroutines).
func resetMeanwhile(handoffs []*handoff) (stop func()) {
	var wg sync.WaitGroup
	ls := make([]net.Listener, len(handoffs))
	for i, h := range handoffs {
		ls[i] = h.Listen()
		wg.Add(1)
		go func(l net.Listener) {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil {
					// Out of file descriptors, say: the kernel keeps the
					// connection for later.
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // a reset, not an empty answer
				}
				_ = c.Close()
			}
		}(ls[i])
	}
	return func() {
		for _, l := range ls {
			_ = l.Close()
		}
		wg.Wait()
	}
}
