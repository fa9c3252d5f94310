package fault

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// recv returns the sink's next report, within bound.
func recv(t *testing.T, out <-chan received) received {
	t.Helper()
	select {
	case r := <-out:
		return r
	case <-time.After(bound):
		t.Fatal("the target reported nothing")
		return received{}
	}
}

func TestTCPIntact(t *testing.T) {
	srv := newTarget(t, echo)
	r := newTCP(t, srv.addr())
	c := dial(t, r.Addr())
	const size = 8 << 20
	data := payload(size, 1)
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.CloseWrite()
		}
		werr <- err
	}()
	h := sha256.New()
	n, err := io.Copy(h, c) // until the echo passes the EOF back
	if err != nil || n != size {
		t.Fatalf("read %d bytes, %v; want %d, EOF", n, err, size)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if got, want := [32]byte(h.Sum(nil)), sha256.Sum256(data); got != want {
		t.Fatal("the echo differs from what was sent")
	}
	await(t, r, "8 MiB each way and no connection", func() bool {
		return r.Bytes(Up) == size && r.Bytes(Down) == size && r.Conns() == 0
	})
}

func TestTCPHalfCloseAndReset(t *testing.T) {
	srv := newTarget(t, func(c *net.TCPConn) {
		n, err := io.Copy(io.Discard, c)
		fmt.Fprintf(c, "read %d, %v", n, err)
	})
	r := newTCP(t, srv.addr())
	c := dial(t, r.Addr())
	if _, err := c.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // the target's FIN comes through too
	if err != nil || string(got) != "read 1000, <nil>" {
		t.Fatalf("got %q, %v", got, err)
	}

	// A reset from the client resets the target's side.
	out := make(chan received, 1)
	srv2 := newTarget(t, sink(out))
	r2 := newTCP(t, srv2.addr())
	c2 := dial(t, r2.Addr())
	if _, err := c2.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	await(t, r2, "the byte relayed", func() bool { return r2.Bytes(Up) == 1 })
	reset(c2)
	if got := recv(t, out); got.n != 1 || got.err == nil {
		t.Fatalf("target read %d bytes, %v; want 1, a reset", got.n, got.err)
	}
}

func TestTCPCutAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	ns := []int64{1, tcpBuf - 1, tcpBuf, tcpBuf + 1}
	for range 4 {
		ns = append(ns, 1+rng.Int64N(200_000))
	}
	const extra = 100_000 // sent beyond the cut

	t.Run("up", func(t *testing.T) {
		out := make(chan received, 1)
		srv := newTarget(t, sink(out))
		r := newTCP(t, srv.addr())
		for i, n := range ns {
			data := payload(int(n)+extra, uint64(i))
			before := r.Bytes(Up)
			r.CutAfter(n, Up)
			c := dial(t, r.Addr())
			_, _ = c.Write(data) // fails once the cut comes
			got := recv(t, out)
			if got.n != n || got.sum != sha256.Sum256(data[:n]) || got.err == nil {
				t.Fatalf("cut after %d: target read %d bytes (intact: %v), %v; want a reset",
					n, got.n, got.sum == sha256.Sum256(data[:n]), got.err)
			}
			if m, _ := readErr(t, c); m != 0 {
				t.Fatalf("client read %d bytes", m)
			}
			await(t, r, "no connection", func() bool { return r.Conns() == 0 })
			if d := r.Bytes(Up) - before; d != n {
				t.Fatalf("cut after %d: relayed %d", n, d)
			}
		}
	})

	t.Run("down", func(t *testing.T) {
		data := payload(200_000+extra, 3)
		srv := newTarget(t, func(c *net.TCPConn) {
			// Wait for the client's byte: its dial has returned, so a quick
			// cut cannot fail the dial instead of the read.
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				return
			}
			_, _ = c.Write(data)
			_, _ = io.Copy(io.Discard, c)
		})
		r := newTCP(t, srv.addr())
		for _, n := range ns {
			before := r.Bytes(Down)
			r.CutAfter(n, Down)
			c := dial(t, r.Addr())
			if _, err := c.Write([]byte("g")); err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			m, err := io.Copy(h, c)
			if m != n || [32]byte(h.Sum(nil)) != sha256.Sum256(data[:n]) || err == nil {
				t.Fatalf("cut after %d: client read %d bytes, %v; want a reset", n, m, err)
			}
			await(t, r, "no connection", func() bool { return r.Conns() == 0 })
			if d := r.Bytes(Down) - before; d != n {
				t.Fatalf("cut after %d: relayed %d", n, d)
			}
		}
	})
}

func TestTCPCut(t *testing.T) {
	srv := newTarget(t, echo)
	r := newTCP(t, srv.addr())
	c1, c2 := dial(t, r.Addr()), dial(t, r.Addr())
	roundTrip(t, c1, "one")
	roundTrip(t, c2, "two")
	r.Cut()
	for _, c := range []net.Conn{c1, c2} {
		if n, err := readErr(t, c); n != 0 || err == nil {
			t.Fatalf("after Cut: read %d bytes, %v; want a reset", n, err)
		}
	}
	await(t, r, "no connection", func() bool { return r.Conns() == 0 })
	roundTrip(t, dial(t, r.Addr()), "again")
	if r.Accepted() != 3 || srv.accepted.Load() != 3 {
		t.Fatalf("accepted %d, target %d; want 3", r.Accepted(), srv.accepted.Load())
	}
}

func TestTCPStall(t *testing.T) {
	srv := newTarget(t, echo)
	r := newTCP(t, srv.addr())
	c1 := dial(t, r.Addr())
	roundTrip(t, c1, "open")
	// The counters follow the writes: the echo may come back first.
	await(t, r, "the round trip counted", func() bool { return r.Bytes(Up) == 4 && r.Bytes(Down) == 4 })
	up := r.Bytes(Up)

	r.Stall(true)
	if _, err := c1.Write([]byte("first-")); err != nil {
		t.Fatal(err)
	}
	// The relay has read the bytes: from here, only the stall keeps them.
	await(t, r, "6 bytes held", func() bool { return r.Held(Up) == 6 })
	if _, err := c1.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, r.Addr())
	await(t, r, "the second accept", func() bool { return r.Accepted() == 2 })
	if r.Bytes(Up) != up || srv.accepted.Load() != 1 || r.Conns() != 2 {
		t.Fatalf("stalled: relayed %d bytes (want %d), target accepted %d (want 1), %d conns (want 2)",
			r.Bytes(Up), up, srv.accepted.Load(), r.Conns())
	}

	r.Stall(false)
	got := make([]byte, 12)
	if _, err := io.ReadFull(c1, got); err != nil || string(got) != "first-second" {
		t.Fatalf("after the stall: %q, %v", got, err)
	}
	roundTrip(t, c2, "late")
	if srv.accepted.Load() != 2 {
		t.Fatalf("target accepted %d, want 2", srv.accepted.Load())
	}
}

func TestTCPRefuse(t *testing.T) {
	srv := newTarget(t, echo)
	r := newTCP(t, srv.addr())
	c1 := dial(t, r.Addr())
	roundTrip(t, c1, "open")

	r.Refuse(true)
	// The reset comes right after the handshake: the dial itself may see it.
	if c, err := net.Dial("tcp", r.Addr()); err == nil {
		_ = c.SetDeadline(time.Now().Add(bound))
		n, err := readErr(t, c)
		_ = c.Close()
		if n != 0 || err == nil {
			t.Fatalf("refused: read %d bytes, %v; want a reset", n, err)
		}
	}
	await(t, r, "a refusal", func() bool { return r.Refused() == 1 })
	if r.Accepted() != 1 || srv.accepted.Load() != 1 {
		t.Fatalf("accepted %d, target %d; want 1", r.Accepted(), srv.accepted.Load())
	}
	roundTrip(t, c1, "still open")

	r.Refuse(false)
	roundTrip(t, dial(t, r.Addr()), "back")
}

func TestTCPClose(t *testing.T) {
	srv := newTarget(t, echo)
	r := newTCP(t, srv.addr())
	c1 := dial(t, r.Addr())
	roundTrip(t, c1, "open")
	r.Stall(true)
	c2 := dial(t, r.Addr())
	await(t, r, "two connections", func() bool { return r.Conns() == 2 })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{c1, c2} {
		if _, err := readErr(t, c); err == nil {
			t.Fatal("a connection outlived Close")
		}
	}
}
