package pipehash

import (
	"bytes"
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestSum: writes of every size, across buffer boundaries, after a
// prefix already in the hash, give sha256's sum of the whole.
func TestSum(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 3*BufSize*Buffers+12345)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	for _, prefix := range []int{0, 1000} {
		h := sha256.New()
		h.Write(data[:prefix])
		p := New(h)
		for rest := data[prefix:]; len(rest) > 0; {
			k := min(len(rest), 1+r.IntN(BufSize+7))
			if n, err := p.Write(rest[:k]); n != k || err != nil {
				t.Fatalf("Write = %d, %v; want %d, nil", n, err, k)
			}
			rest = rest[k:]
		}
		want := sha256.Sum256(data)
		if got := p.Sum(); !bytes.Equal(got, want[:]) {
			t.Fatalf("prefix %d: Sum = %x, want %x", prefix, got, want)
		}
		if got := p.Sum(); !bytes.Equal(got, want[:]) {
			t.Fatalf("second Sum = %x, want %x", got, want)
		}
		p.Close()
	}
}

// TestBounded: however much is written, a Hash makes at most Buffers
// buffers.
func TestBounded(t *testing.T) {
	p := New(sha256.New())
	defer p.Close()
	b := make([]byte, 10*BufSize+1)
	for range 8 {
		p.Write(b)
	}
	p.mu.Lock()
	n := p.n
	p.mu.Unlock()
	if n != Buffers {
		t.Fatalf("buffers made = %d, want %d", n, Buffers)
	}
}

// TestCloseEmpty: Close without a write stops the goroutine (goleak), and
// writes after it are ignored.
func TestCloseEmpty(t *testing.T) {
	p := New(sha256.New())
	p.Close()
	p.Close()
	if n, err := p.Write([]byte("x")); n != 1 || err != nil {
		t.Fatalf("Write after Close = %d, %v", n, err)
	}
	want := sha256.Sum256(nil)
	if got := p.Sum(); !bytes.Equal(got, want[:]) {
		t.Fatalf("Sum = %x, want %x", got, want)
	}
}
