package client

import (
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
)

// TestTuneOfferTimesWindowInForce: a window is timed from when it came
// into force (the grant), not from the offer, whose own round trip went
// by at the old window: a 512 KiB window consumed 60 ms after its grant,
// on 50 ms round trips, is window-limited (fourfold: 2 MiB) although 110
// ms passed since the offer; one taken 2.5 round trips after its grant
// grows twofold; one taken over tuneRTTs round trips since its epoch
// began does not grow.
func TestTuneOfferTimesWindowInForce(t *testing.T) {
	const rtt = 50 * time.Millisecond
	t0 := time.Unix(1_000_000, 0)
	first := delivery.Limits{WindowBytes: 128 << 10, MaximumFrameBytes: 16 << 10}
	var tu tcpTuner
	tu.init(rtt, first, delivery.Limits{WindowBytes: 32 << 20, MaximumFrameBytes: 512 << 10})
	tu.in = tuneEpoch{start: t0, inForce: t0}
	tu.backlog = func() int { return 0 } // a download: the reader keeps up

	consumed := delivery.UTF16Bytes(128 << 10)
	next, ok := tu.offer(&tu.in, consumed, t0.Add(40*time.Millisecond))
	want := delivery.Limits{WindowBytes: 512 << 10, MaximumFrameBytes: 64 << 10}
	if !ok || next != want {
		t.Fatalf("first offer %+v %v, want %+v", next, ok, want)
	}
	tu.growing = true
	if _, ok := tu.offer(&tu.in, consumed+64<<10, t0.Add(60*time.Millisecond)); ok {
		t.Fatal("an offer while one is under way")
	}
	tu.granted(next, next, next, rtt, nil, t0.Add(90*time.Millisecond))
	if tu.growing || tu.cur != next {
		t.Fatalf("after the grant: growing %v, limits %+v", tu.growing, tu.cur)
	}

	consumed += 512 << 10
	next, ok = tu.offer(&tu.in, consumed, t0.Add(150*time.Millisecond))
	want = delivery.Limits{WindowBytes: 2 << 20, MaximumFrameBytes: 256 << 10}
	if !ok || next != want {
		t.Fatalf("second offer %+v %v, want %+v (fourfold: 60 ms in force)", next, ok, want)
	}
	tu.growing = true
	tu.granted(next, next, next, rtt, nil, t0.Add(200*time.Millisecond))

	consumed += 2 << 20
	next, ok = tu.offer(&tu.in, consumed, t0.Add(325*time.Millisecond))
	want = delivery.Limits{WindowBytes: 4 << 20, MaximumFrameBytes: 512 << 10}
	if !ok || next != want {
		t.Fatalf("third offer %+v %v, want %+v (twofold: 125 ms in force)", next, ok, want)
	}
	// Refused (a transport error): the limits and the timing stay.
	tu.growing = true
	tu.granted(next, tu.cur, tu.cur, rtt, errLinkDropped, t0.Add(375*time.Millisecond))

	consumed += 2 << 20
	if next, ok := tu.offer(&tu.in, consumed, t0.Add(526*time.Millisecond)); ok {
		t.Fatalf("an offer %+v for a window that took 201 ms, over 4 round trips", next)
	}
}
