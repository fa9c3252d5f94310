package delivery

import (
	"testing"
	"time"
)

// TestBDPEstimatorConverges: a path that delivers 1 MB/s (UTF-16 bytes)
// with a 20 ms round trip gets a cap of gain × 20 KB, above the floor
// only when the product is; without samples there is no cap.
func TestBDPEstimatorConverges(t *testing.T) {
	var e bdpEstimator
	if got := e.limit(); got != 0 {
		t.Fatalf("limit before any sample = %d, want 0 (no cap)", got)
	}
	t0 := time.Unix(1000, 0)
	const msg UTF16Bytes = 10_000
	// Send one message every 10 ms; each is credited 20 ms after it was
	// sent: 1 MB/s through a 20 ms round trip.
	var sent UTF16Bytes
	for i := range 200 {
		now := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		if i >= 2 {
			e.credited(UTF16Bytes(i-1)*msg, now) // the message sent 20 ms ago
		}
		sent += msg
		e.sent(sent, max(UTF16Bytes(i-1)*msg, 0), now)
	}
	if e.minRTT != 20*time.Millisecond {
		t.Fatalf("minRTT = %v, want 20ms", e.minRTT)
	}
	// Rate sample: credited − consumed at send, over the round trip:
	// 2 messages (20 KB) in 20 ms = 1 MB/s.
	if e.maxRate < 0.99e6 || e.maxRate > 1.01e6 {
		t.Fatalf("maxRate = %.0f B/s, want 1e6", e.maxRate)
	}
	if got := e.limit(); got != bdpFloor {
		t.Fatalf("limit = %d, want the floor %d (1.5 × 20 KB is below it)", got, bdpFloor)
	}
	// A faster path: 10 MB/s at 20 ms gives 1.5 × 200 KB.
	e.maxRate = 10e6
	if got, want := e.limit(), UTF16Bytes(300_000); got != want {
		t.Fatalf("limit = %d, want %d", got, want)
	}
}

// TestBDPEstimatorMarksBounded: marks never exceed their bound, and a
// credit covering dropped marks still samples from the ones kept.
func TestBDPEstimatorMarksBounded(t *testing.T) {
	var e bdpEstimator
	t0 := time.Unix(0, 0)
	for i := range 10 * bdpMarks {
		e.sent(UTF16Bytes(i+1), 0, t0.Add(time.Duration(i)*time.Millisecond))
		if e.n > bdpMarks {
			t.Fatalf("%d marks kept, bound %d", e.n, bdpMarks)
		}
	}
	e.credited(UTF16Bytes(10*bdpMarks), t0.Add(time.Hour))
	if e.n != 0 || e.minRTT == 0 {
		t.Fatalf("after a covering credit: %d marks, minRTT %v", e.n, e.minRTT)
	}
}

// TestBDPFrameLimit: the path's frame size is bdpFrameTime at the
// measured rate, never below bdpMinFrame; without a rate, or under a
// round trip of bdpLongRTT, there is none.
func TestBDPFrameLimit(t *testing.T) {
	var e bdpEstimator
	if got := e.frameLimit(); got != 0 {
		t.Fatalf("frameLimit before any sample = %d, want 0", got)
	}
	e.maxRate, e.minRTT = 1e6, bdpLongRTT-time.Microsecond
	if got := e.frameLimit(); got != 0 {
		t.Fatalf("frameLimit at 1 MB/s with a %v round trip = %d, want 0 (no link to wait for)", e.minRTT, got)
	}
	e.minRTT = bdpLongRTT
	for _, c := range []struct {
		rate float64 // UTF-16 bytes per second
		want UTF16Bytes
	}{
		{1e6, bdpMinFrame},           // 4 KB in 4 ms: the floor
		{3e6, bdpMinFrame},           // 12 KB in 4 ms: the floor
		{4.096e6, bdpMinFrame},       // exactly the floor
		{5.12e6, bdpMinFrame + 4096}, // above it
		{25e6, 100_000},              // 100 Mbit/s of base64
		{500e6, 2_000_000},           // loopback: above any maximumFrameBytes
	} {
		e.maxRate = c.rate
		if got := e.frameLimit(); got != c.want {
			t.Errorf("rate %.0f B/s: frameLimit = %d, want %d", c.rate, got, c.want)
		}
	}
}
