package client_test

import (
	"context"
	"crypto/sha256"
	"hash"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
)

// sourceServer accepts one connection and writes n bytes of a fixed
// pattern to it, then closes; it returns the port and the pattern's
// SHA-256.
func sourceServer(t *testing.T, n int) (int, [32]byte) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = byte(i*31 + i>>8)
	}
	h := sha256.New()
	for left := n; left > 0; left -= len(chunk) {
		h.Write(chunk[:min(left, len(chunk))])
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		for left := n; left > 0; left -= len(chunk) {
			if _, err := c.Write(chunk[:min(left, len(chunk))]); err != nil {
				return
			}
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, sum
}

// sinkServer accepts one connection and reads it to its end; it returns
// the port and where the SHA-256 of what it read arrives.
func sinkServer(t *testing.T) (int, <-chan [32]byte) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	sums := make(chan [32]byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		h := sha256.New()
		_, _ = io.Copy(h, c)
		sums <- [32]byte(h.Sum(nil))
	}()
	return l.Addr().(*net.TCPAddr).Port, sums
}

// closeAndCheck half-closes tc and checks that the sink (sinkServer) read
// exactly what want hashed.
func closeAndCheck(ctx context.Context, t *testing.T, tc *client.TCPConn, sums <-chan [32]byte, want hash.Hash) {
	t.Helper()
	if err := tc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-sums:
		if got != [32]byte(want.Sum(nil)) {
			t.Fatal("the sink's SHA-256 differs")
		}
	case <-ctx.Done():
		t.Fatal("the sink did not finish")
	}
}

// TestTCPWindowGrows: a download whose every window is consumed "within
// the round trips" grows its window by re-subscribing, with frames of a
// window/8, until the host's tcp maxima; the bytes arrive exactly.
func TestTCPWindowGrows(t *testing.T) {
	const total = 24 << 20
	port, want := sourceServer(t, total)
	tc, _ := dialTuned(t, func(c *config.Config) {
		c.TCP.WindowBytes = 2 << 20
		c.TCP.MaximumFrameBytes = 128 << 10
	}, port)
	defer tc.Close()
	if in, _ := tc.Limits(); in != client.DefaultTCPReceive {
		t.Fatalf("first limits %+v, want %+v", in, client.DefaultTCPReceive)
	}
	client.SetTuneRTT(tc, time.Hour)
	offers := client.GrowOffers(tc)
	h := sha256.New()
	n, err := io.Copy(h, tc)
	if err != nil || n != total {
		t.Fatalf("copied %d, %v; want %d", n, err, total)
	}
	if [32]byte(h.Sum(nil)) != want {
		t.Fatal("SHA-256 differs")
	}
	in, out := tc.Limits()
	wantLimits := delivery.Limits{WindowBytes: 2 << 20, MaximumFrameBytes: 128 << 10}
	if in != wantLimits || out != wantLimits {
		t.Fatalf("limits after the transfer: clientReceive %+v hostReceive %+v, want both %+v", in, out, wantLimits)
	}
	// Each window went by within a round trip (of an hour): the window
	// alone limited the transfer, so each offer is fourfold, frames a
	// window/8, until the host answers less than the offer (its 2 MiB).
	wantOffers := []delivery.Limits{{WindowBytes: 512 << 10, MaximumFrameBytes: 64 << 10},
		{WindowBytes: 2 << 20, MaximumFrameBytes: 256 << 10}, {WindowBytes: 8 << 20, MaximumFrameBytes: 512 << 10}}
	if got := offers(); !slices.Equal(got, wantOffers) {
		t.Fatalf("offers %+v, want %+v", got, wantOffers)
	}
}

// TestTCPWindowStaysWhenSlow: with no window consumed fast enough (a zero
// round trip), the limits stay at the first offer.
func TestTCPWindowStaysWhenSlow(t *testing.T) {
	const total = 8 << 20
	port, want := sourceServer(t, total)
	tc, _ := dialTuned(t, nil, port)
	defer tc.Close()
	client.SetTuneRTT(tc, 0)
	h := sha256.New()
	if n, err := io.Copy(h, tc); err != nil || n != total || [32]byte(h.Sum(nil)) != want {
		t.Fatalf("copied %d, %v", n, err)
	}
	if in, out := tc.Limits(); in != client.DefaultTCPReceive || out != client.DefaultTCPReceive {
		t.Fatalf("limits %+v / %+v changed, want %+v", in, out, client.DefaultTCPReceive)
	}
}

// TestTCPWindowBacklog: with a backlog function, growth starts from the
// first window (no tuneAfter) while the reader's backlog is small, and
// never happens while it is large (a stalled reader behind a socket
// buffer).
func TestTCPWindowBacklog(t *testing.T) {
	for _, c := range []struct {
		backlog int
		grows   bool
	}{{0, true}, {1 << 30, false}} {
		const total = 6 << 20 // past tuneAfter: only the backlog holds growth back
		port, want := sourceServer(t, total)
		tc, _ := dialTuned(t, func(cfg *config.Config) { cfg.TCP.WindowBytes = 1 << 20 }, port)
		client.SetTuneRTT(tc, time.Hour)
		tc.SetBacklog(func() int { return c.backlog })
		h := sha256.New()
		if n, err := io.Copy(h, tc); err != nil || n != total || [32]byte(h.Sum(nil)) != want {
			t.Fatalf("copied %d, %v", n, err)
		}
		in, _ := tc.Limits()
		if grew := in.WindowBytes > client.DefaultTCPReceive.WindowBytes; grew != c.grows {
			t.Fatalf("backlog %d: window %d, grown %v, want %v", c.backlog, in.WindowBytes, grew, c.grows)
		}
		if c.grows && in.WindowBytes != 1<<20 {
			t.Fatalf("window %d, want the host's 1 MiB", in.WindowBytes)
		}
		_ = tc.Close()
	}
}

// TestDialTCPBurst: more concurrent DialTCP calls than the host takes
// requests at once (max_concurrent_requests 2, below the client's own
// bound of 8) all succeed: Overloaded answers are retried with backoff.
func TestDialTCPBurst(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	p := newPair(t, client.Options{}, func(c *config.Config) { c.Delivery.MaxConcurrentRequests = 2 })
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 24
	errs := make(chan error, n)
	for range n {
		go func() {
			tc, err := p.c.DialTCP(ctx, "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
			if err == nil {
				tc.Reset()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("DialTCP: %v", err)
		}
	}
}

// TestTCPWindowGrowsUploading: an upload whose windows are credited
// "within the round trips" grows the limits too (after tuneAfter), while
// Write keeps cutting messages to the frame size in use; the sink gets
// every byte.
func TestTCPWindowGrowsUploading(t *testing.T) {
	const total = 24 << 20
	port, sums := sinkServer(t)
	tc, ctx := dialTuned(t, func(c *config.Config) { c.TCP.WindowBytes = 2 << 20 }, port)
	defer tc.Close()
	client.SetTuneRTT(tc, time.Hour)
	chunk := make([]byte, 96<<10)
	want := sha256.New()
	for sent := 0; sent < total; sent += len(chunk) {
		for i := range chunk {
			chunk[i] = byte(sent>>10 + i)
		}
		want.Write(chunk)
		if _, err := tc.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	closeAndCheck(ctx, t, tc, sums, want)
	if _, out := tc.Limits(); out.WindowBytes != 2<<20 {
		t.Fatalf("hostReceive after the upload: %+v, want the host's 2 MiB window", out)
	}
}

// dialTuned starts a host (tweak changes its config), initializes a
// client and dials 127.0.0.1:port through it.
func dialTuned(t *testing.T, tweak func(*config.Config), port int) (*client.TCPConn, context.Context) {
	t.Helper()
	p := newPair(t, client.Options{}, tweak)
	ctx := testCtx(t)
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	tc, err := p.c.DialTCP(ctx, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	return tc, ctx
}

// TestTCPReadFromBuffer: ReadFrom's buffer is one message's stream bytes
// at the host's current maximumFrameBytes: about 6 KiB at the first 16 KiB
// frames, and once an upload through ReadFrom grew the limits to the
// host's 512 KiB frames, just under the 192 KiB cap; the sink gets every
// byte.
func TestTCPReadFromBuffer(t *testing.T) {
	const total = 32 << 20
	port, sums := sinkServer(t)
	tc, ctx := dialTuned(t, func(c *config.Config) {
		c.TCP.WindowBytes = 4 << 20
		c.TCP.MaximumFrameBytes = 512 << 10
	}, port)
	defer tc.Close()
	enc := bytestream.NewEncoder(rpc.TCPStream, tc.Channel())
	first := enc.MaxPayload(1<<52, client.DefaultTCPReceive.MaximumFrameBytes)
	if got := client.ReadBufferSize(tc, 1<<20); got != first || first < 6000 || first > 6144 {
		t.Fatalf("buffer at 16 KiB frames: %d, want %d (about 6 KiB)", got, first)
	}
	if got := client.ReadBufferSize(tc, 5000); got != 5000 {
		t.Fatalf("buffer wanted 5000: %d", got)
	}
	client.SetTuneRTT(tc, time.Hour)
	want := sha256.New()
	src := io.TeeReader(io.LimitReader(patternReader{}, total), want)
	if n, err := io.Copy(tc, src); err != nil || n != total {
		t.Fatalf("copied %d, %v; want %d", n, err, total)
	}
	closeAndCheck(ctx, t, tc, sums, want)
	if _, out := tc.Limits(); out.MaximumFrameBytes != 512<<10 {
		t.Fatalf("hostReceive after the upload: %+v, want 512 KiB frames", out)
	}
	if got, per := client.ReadBufferSize(tc, 1<<20), enc.MaxPayload(1<<52, 512<<10); got != per || per > 192<<10 || per < 190<<10 {
		t.Fatalf("buffer at 512 KiB frames: %d, want %d (just under the 192 KiB cap)", got, per)
	}
}

// patternReader fills every read with a byte pattern.
type patternReader struct{}

func (patternReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + i>>9)
	}
	return len(p), nil
}

// TestTCPWriteToBatchBound: while WriteTo's writer is stuck, the whole
// window piles up; the next Write gets at most a quarter of the window's
// stream bytes (batchBytes: the decode buffer a stalled connection keeps),
// not everything queued, and the bytes arrive exactly.
func TestTCPWriteToBatchBound(t *testing.T) {
	const total = 2 << 20
	port, want := sourceServer(t, total)
	tc, ctx := dialTuned(t, nil, port)
	defer tc.Close()
	client.SetTuneRTT(tc, 0) // the window stays at the first offer
	window := client.DefaultTCPReceive.WindowBytes
	w := &stuckWriter{h: sha256.New(), first: make(chan struct{})}
	// The host sends the whole window, or (once the credit for the
	// released channel/snapshot gave it a round-trip sample) up to its
	// path cap, whose floor is 64 KiB (delivery's bdpFloor): waiting for
	// the whole window waited out ctx whenever that credit came first.
	held := min(window, 64<<10) - client.DefaultTCPReceive.MaximumFrameBytes
	go func() {
		// Release the first Write once the host sent all it will.
		defer close(w.first)
		for client.Unreleased(tc) < int64(held) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	n, err := tc.WriteTo(w)
	if err != nil || n != total {
		t.Fatalf("WriteTo: %d, %v; want %d", n, err, total)
	}
	if [32]byte(w.h.Sum(nil)) != want {
		t.Fatal("SHA-256 differs")
	}
	// 128 KiB of UTF-16 is 64 KiB of text, 48 KiB of stream bytes: a
	// quarter is 12 KiB (two 16 KiB-frame messages of about 6 KiB).
	if limit := int(window) * 3 / 32; w.max > limit || w.max < limit/2 {
		t.Fatalf("largest Write after the stall: %d bytes, want at most %d (and at least %d)", w.max, limit, limit/2)
	}
}

// stuckWriter hashes what it is given; its first Write waits for first
// to close, and it records the largest later Write.
type stuckWriter struct {
	h     hash.Hash
	first chan struct{}
	calls int
	max   int
}

func (w *stuckWriter) Write(p []byte) (int, error) {
	if w.calls == 0 {
		<-w.first
	} else {
		w.max = max(w.max, len(p))
	}
	w.calls++
	return w.h.Write(p)
}
