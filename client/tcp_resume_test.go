package client_test

import (
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
)

// pseudoRandom writes n bytes of a ChaCha8 stream (seed) to w and
// returns their SHA-256.
func pseudoRandom(w io.Writer, n int, seed byte) ([32]byte, error) {
	rng := rand.NewChaCha8([32]byte{seed, 15})
	h := sha256.New()
	buf := make([]byte, 32<<10)
	for n > 0 {
		b := buf[:min(len(buf), n)]
		_, _ = rng.Read(b)
		h.Write(b)
		if _, err := w.Write(b); err != nil {
			return [32]byte{}, err
		}
		n -= len(b)
	}
	return [32]byte(h.Sum(nil)), nil
}

// sumOf reads r to its end: the bytes' count, SHA-256 and error.
type sumOf struct {
	n   int64
	sum [32]byte
	err error
}

// duplexDestination accepts one connection that sends n bytes (seed 2)
// while reading what comes, and reports what it read.
func duplexDestination(t *testing.T, n int) (port int, got <-chan sumOf) {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan sumOf, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := l.Accept()
		if err != nil {
			out <- sumOf{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testDeadline))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := pseudoRandom(c, n, 2); err == nil {
				_ = c.(*net.TCPConn).CloseWrite()
			}
		}()
		h := sha256.New()
		k, err := io.Copy(h, c)
		out <- sumOf{n: k, sum: [32]byte(h.Sum(nil)), err: err}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	return l.Addr().(*net.TCPAddr).Port, out
}

// progressWriter counts bytes written and signals each time another
// step of them went through.
type progressWriter struct {
	w     io.Writer
	step  int
	n     int
	ticks chan struct{}
}

func (p *progressWriter) Write(b []byte) (int, error) {
	k, err := p.w.Write(b)
	before := p.n / p.step
	p.n += k
	if p.n/p.step > before {
		select {
		case p.ticks <- struct{}{}:
		default:
		}
	}
	return k, err
}

// TestReconnectRealHostTCP: a TCP channel moving 4 MiB each way at once
// survives six cuts (each once another 512 KiB arrived) against the real
// host, in process under the race detector: both ends get every byte
// once, in order (SHA-256).
func TestReconnectRealHostTCP(t *testing.T) {
	ctx := testCtx(t)
	const n = 4 << 20
	port, dest := duplexDestination(t, n)
	h := newRealHost(t, nil)
	st := newStatuses()
	c := h.connect(ctx, st)
	tc, err := c.DialTCP(ctx, "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	writeErr := make(chan error, 1)
	go func() {
		_, err := pseudoRandom(tc, n, 1)
		if err == nil {
			err = tc.CloseWrite()
		}
		writeErr <- err
	}()
	pw := &progressWriter{w: sha256.New(), step: 512 << 10, ticks: make(chan struct{}, 1)}
	readDone := make(chan error, 1)
	go func() {
		_, err := tc.WriteTo(pw)
		readDone <- err
	}()
	cuts := 0
	var rerr error
loop:
	for {
		select {
		case <-pw.ticks:
			if cuts < 6 {
				h.d.CutLast()
				st.await(t, client.Resumed)
				cuts++
			}
		case rerr = <-readDone:
			break loop
		}
	}
	if rerr != nil {
		t.Fatalf("reading: %v after %d bytes", rerr, pw.n)
	}
	want1, _ := pseudoRandom(io.Discard, n, 1)
	want2, _ := pseudoRandom(io.Discard, n, 2)
	if got := [32]byte(pw.w.(interface{ Sum([]byte) []byte }).Sum(nil)); pw.n != n || got != want2 {
		t.Errorf("client received %d bytes, sum match %v", pw.n, got == want2)
	}
	if err := <-writeErr; err != nil {
		t.Fatalf("writing: %v", err)
	}
	d := <-dest
	if d.err != nil || d.n != n || d.sum != want1 {
		t.Errorf("destination received %d bytes (%v), sum match %v", d.n, d.err, d.sum == want1)
	}
	if cuts < 4 {
		t.Errorf("only %d cuts during the transfer", cuts)
	}

}

// TestTCPCloseNeverTruncates: Write 1 MiB, then Close, to a destination
// that reads slowly (16 KiB every 5 ms): it gets every byte, then its end
// of stream; Close waits for the host to have written them before it
// unsubscribes (a host that had not got tcp/eof would reset instead,
// never a FIN after truncated data).
func TestTCPCloseNeverTruncates(t *testing.T) {
	ctx := testCtx(t)
	const n = 1 << 20
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan sumOf, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- sumOf{err: err}
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(testDeadline))
		h := sha256.New()
		var total int64
		buf := make([]byte, 16<<10)
		tick := time.NewTicker(5 * time.Millisecond) // a slow reader, not a synchronization
		defer tick.Stop()
		for {
			<-tick.C
			k, err := c.Read(buf)
			h.Write(buf[:k])
			total += int64(k)
			if err != nil {
				if err == io.EOF {
					err = nil
				}
				got <- sumOf{n: total, sum: [32]byte(h.Sum(nil)), err: err}
				return
			}
		}
	}()
	h := newRealHost(t, nil)
	c := h.connect(ctx, newStatuses())
	tc, err := c.DialTCP(ctx, "127.0.0.1", l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	want, err := pseudoRandom(tc, n, 3)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = tc.Close()
	t.Logf("Close returned after %v", time.Since(start).Round(time.Millisecond))
	d := <-got
	if d.err != nil || d.n != n || d.sum != want {
		t.Fatalf("the destination got %d bytes (%v), sum match %v; want all %d then EOF", d.n, d.err, d.sum == want, n)
	}
}
