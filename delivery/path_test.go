package delivery_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
)

// TestStreamMeasuresThePath: a Stream times its own messages (the
// writer's debit, the peer's credit) on the clock, and the path it
// measures caps Room and sizes FrameBytes. In a synctest bubble the
// round trip is exactly the time the test lets pass: 409600 UTF-16 bytes
// credited 1/64 s after they were written is 26214400 B/s over a
// 15.625 ms round trip, a cap of 1.5 × that product (614400: between
// the quarter window and the window) and frames of 4 ms of the path
// (104857). Before any credit there is neither (bdp.go).
func TestStreamMeasuresThePath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window delivery.UTF16Bytes = 1 << 20
		l := delivery.Limits{WindowBytes: window, MaximumFrameBytes: 512 << 10}
		msg := newRepeat("p", 409600).text
		s := delivery.NewScheduler(delivery.SchedulerConfig{})
		st := s.AddStream("p", l, &listSource{msgs: [][]byte{msg}})
		w := newStepWriter()
		run(t, s, w)
		if got := w.take(t); got != string(msg) {
			t.Fatalf("wrote %.80q…", got)
		}
		if room, frame := st.Room(), st.FrameBytes(); room != window-409600 || frame != l.MaximumFrameBytes {
			t.Fatalf("before any credit: Room %d, FrameBytes %d; want %d (the window's) and %d (maximumFrameBytes)", room, frame, window-409600, l.MaximumFrameBytes)
		}
		time.Sleep(time.Second / 64)
		if err := st.Credit(409600); err != nil {
			t.Fatal(err)
		}
		if room, frame := st.Room(), st.FrameBytes(); room != 614400 || frame != 104857 {
			t.Fatalf("after a 15.625 ms round trip at 26214400 B/s: Room %d, FrameBytes %d; want 614400 and 104857", room, frame)
		}
		if got := st.Limits(); got != l {
			t.Fatalf("Limits = %+v, want %+v (the path bounds neither)", got, l)
		}
	})
}
