package transportio

import (
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// TestCloseWait: a dialled connection stays open two probe timeouts after
// its session ended (RFC 9002 §6.2.1), at most CloseCapsuleGrace.
func TestCloseWait(t *testing.T) {
	for _, tc := range []struct {
		srtt, dev, want time.Duration
	}{
		{0, 0, 50 * time.Millisecond}, // no sample yet
		{200 * time.Microsecond, 100 * time.Microsecond, 51200 * time.Microsecond}, // loopback
		{20 * time.Millisecond, 2 * time.Millisecond, 106 * time.Millisecond},
		{50 * time.Millisecond, 10 * time.Millisecond, CloseCapsuleGrace}, // 230 ms, capped
	} {
		if got := closeWait(quic.ConnectionStats{SmoothedRTT: tc.srtt, MeanDeviation: tc.dev}); got != tc.want {
			t.Errorf("closeWait(srtt %v, deviation %v) = %v, want %v", tc.srtt, tc.dev, got, tc.want)
		}
	}
}
