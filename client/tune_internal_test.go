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
// began does not grow; nor does any while an offer is under way.
func TestTuneOfferTimesWindowInForce(t *testing.T) {
	const rtt = 50 * time.Millisecond
	t0 := time.Unix(1_000_000, 0)
	first := delivery.Limits{WindowBytes: 128 << 10, MaximumFrameBytes: 16 << 10}
	var tu tcpTuner
	tu.init(rtt, first, delivery.Limits{WindowBytes: 32 << 20, MaximumFrameBytes: 512 << 10})
	tu.in = tuneEpoch{start: t0, inForce: t0}
	tu.backlog = func() int { return 0 } // a download: the reader keeps up

	consumed := delivery.UTF16Bytes(0)
	// offerAt counts add more bytes consumed at t0+ms and checks the offer:
	// want, or none when want is zero.
	offerAt := func(add delivery.UTF16Bytes, ms int, want delivery.Limits, why string) delivery.Limits {
		t.Helper()
		consumed += add
		next, ok := tu.offer(&tu.in, consumed, t0.Add(time.Duration(ms)*time.Millisecond))
		if ok != (want != delivery.Limits{}) || ok && next != want {
			t.Fatalf("at %d ms: offer %+v %v, want %+v (%s)", ms, next, ok, want, why)
		}
		return next
	}
	next := offerAt(128<<10, 40, delivery.Limits{WindowBytes: 512 << 10, MaximumFrameBytes: 64 << 10}, "fourfold: 40 ms")
	tu.growing = true
	offerAt(128<<10, 60, delivery.Limits{}, "a window went by, but an offer is under way")
	tu.granted(next, next, next, rtt, nil, t0.Add(90*time.Millisecond))
	if tu.growing || tu.cur != next {
		t.Fatalf("after the grant: growing %v, limits %+v", tu.growing, tu.cur)
	}
	next = offerAt(512<<10, 150, delivery.Limits{WindowBytes: 2 << 20, MaximumFrameBytes: 256 << 10}, "fourfold: 60 ms in force")
	tu.growing = true
	tu.granted(next, next, next, rtt, nil, t0.Add(200*time.Millisecond))
	next = offerAt(2<<20, 325, delivery.Limits{WindowBytes: 4 << 20, MaximumFrameBytes: 512 << 10}, "twofold: 125 ms in force")
	// Refused (a transport error): the limits and the timing stay.
	tu.growing = true
	tu.granted(next, tu.cur, tu.cur, rtt, errLinkDropped, t0.Add(375*time.Millisecond))
	offerAt(2<<20, 526, delivery.Limits{}, "201 ms for the window, over 4 round trips")
}
