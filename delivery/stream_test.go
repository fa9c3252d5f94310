package delivery

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// emptySource is a Source with nothing to send: these tests debit the
// window themselves, without a Scheduler's writer.
type emptySource struct{}

func (emptySource) Next() Message { return Message{} }

func newTestStream(l Limits) *Stream {
	return NewScheduler(SchedulerConfig{}).AddStream("c", l, emptySource{})
}

// debitStream debits n as the writer does (under the stream's lock), but
// without a BDP send mark: the path cap stays what the test set.
func debitStream(t *testing.T, st *Stream, n UTF16Bytes) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	if err := st.win.Debit(n); err != nil {
		t.Fatalf("Debit(%d): %v", n, err)
	}
}

type roomWant struct {
	room     UTF16Bytes
	canStart bool
	idle     bool
}

func checkRoom(t *testing.T, st *Stream, what string, want roomWant) {
	t.Helper()
	if got := st.Room(); got != want.room {
		t.Errorf("%s: Room = %d, want %d", what, got, want.room)
	}
	if got := st.CanStart(); got != want.canStart {
		t.Errorf("%s: CanStart = %v, want %v", what, got, want.canStart)
	}
	if got := st.Idle(); got != want.idle {
		t.Errorf("%s: Idle = %v, want %v", what, got, want.idle)
	}
}

func checkFits(t *testing.T, st *Stream, what string, want map[UTF16Bytes]bool) {
	t.Helper()
	for need, ok := range want {
		if got := st.Fits(need); got != ok {
			t.Errorf("%s: Fits(%d) = %v, want %v", what, need, got, ok)
		}
	}
}

// TestStreamRoomFitsIdle: without a path estimate, Room is windowBytes −
// outstanding, zero (never negative) once the window is full or
// overshot; Fits(need) is need ≤ Room, except that a message larger than
// the whole window fits exactly when nothing is outstanding; Idle is
// "everything sent was credited".
func TestStreamRoomFitsIdle(t *testing.T) {
	l := Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}
	st := newTestStream(l)
	if got := st.Limits(); got != l {
		t.Fatalf("Limits = %+v, want %+v", got, l)
	}
	checkRoom(t, st, "fresh", roomWant{room: 4096, canStart: true, idle: true})
	checkFits(t, st, "fresh", map[UTF16Bytes]bool{1: true, 4096: true, 4097: true, 1 << 20: true})

	debitStream(t, st, 1000)
	checkRoom(t, st, "1000 outstanding", roomWant{room: 3096, canStart: true})
	checkFits(t, st, "1000 outstanding", map[UTF16Bytes]bool{1: true, 3096: true, 3097: false, 4096: false, 4097: false})

	for range 3 {
		debitStream(t, st, 1024)
	}
	checkRoom(t, st, "4072 outstanding", roomWant{room: 24, canStart: true})
	checkFits(t, st, "4072 outstanding", map[UTF16Bytes]bool{24: true, 25: false})

	debitStream(t, st, 1024) // started below the window: overshoots it to 5096
	checkRoom(t, st, "5096 outstanding", roomWant{room: 0})
	checkFits(t, st, "5096 outstanding", map[UTF16Bytes]bool{1: false, 5000: false})

	if err := st.Credit(1096); err != nil {
		t.Fatal(err)
	}
	checkRoom(t, st, "4000 outstanding", roomWant{room: 96, canStart: true})
	if err := st.Credit(5095); err != nil {
		t.Fatal(err)
	}
	checkRoom(t, st, "1 outstanding", roomWant{room: 4095, canStart: true})
	checkFits(t, st, "1 outstanding", map[UTF16Bytes]bool{4095: true, 4096: false, 4097: false})
	if err := st.Credit(5096); err != nil {
		t.Fatal(err)
	}
	checkRoom(t, st, "all credited", roomWant{room: 4096, canStart: true, idle: true})
	checkFits(t, st, "all credited", map[UTF16Bytes]bool{4096: true, 4097: true})

	// New limits apply to the same counters.
	l2 := Limits{WindowBytes: 8192, MaximumFrameBytes: 2048}
	st.SetLimits(l2)
	if got := st.Limits(); got != l2 {
		t.Fatalf("Limits after SetLimits = %+v, want %+v", got, l2)
	}
	debitStream(t, st, 2048)
	checkRoom(t, st, "new limits, 2048 outstanding", roomWant{room: 6144, canStart: true})
	checkFits(t, st, "new limits, 2048 outstanding", map[UTF16Bytes]bool{6144: true, 6145: false, 8193: false})

	st.Remove()
	checkFits(t, st, "removed", map[UTF16Bytes]bool{1: false, 8193: false})
}

// TestStreamRoomPathCap: with a BDP estimate, Room is capped at the path's
// cap minus outstanding, the cap being gain × rate × minRTT but never below
// bdpFloor nor a quarter of the window; at the cap no message may start
// although the window has room.
func TestStreamRoomPathCap(t *testing.T) {
	const window UTF16Bytes = 1 << 20
	l := Limits{WindowBytes: window, MaximumFrameBytes: 16384}
	t0 := time.Unix(1000, 0)

	// A path estimate below the window's quarter: 1000 bytes credited
	// 10 ms after they were sent is 100 kB/s, a product of 1000 (1500
	// with the gain), under bdpFloor; the quarter window (262144) is the
	// cap.
	st := newTestStream(l)
	st.mu.Lock()
	st.bdp.sent(1000, 0, t0)
	st.bdp.credited(1000, t0.Add(10*time.Millisecond))
	st.mu.Unlock()
	checkRoom(t, st, "quarter-window cap", roomWant{room: window / 4, canStart: true, idle: true})
	// Fits is the window's test, not the cap's: the cap delays a tail
	// by a round trip, the window could stall it for good.
	checkFits(t, st, "quarter-window cap", map[UTF16Bytes]bool{window / 4: true, window/4 + 1: true, window: true, window + 1: true})
	for range 10 {
		debitStream(t, st, 16384)
	}
	checkRoom(t, st, "quarter-window cap, 163840 outstanding", roomWant{room: window/4 - 163840, canStart: true})
	checkFits(t, st, "quarter-window cap, 163840 outstanding", map[UTF16Bytes]bool{98305: true, window - 163840: true, window - 163839: false, window + 1: false})
	for range 6 {
		debitStream(t, st, 16384)
	}
	checkRoom(t, st, "at the quarter-window cap", roomWant{room: 0})
	checkFits(t, st, "at the quarter-window cap", map[UTF16Bytes]bool{1: false})

	// A larger estimate: 409600 bytes credited 1/64 s after they were
	// sent is 26214400 B/s; × 1/64 s × 1.5 = 614400, between the quarter
	// window and the window (the numbers are exact in floating point).
	st = newTestStream(l)
	st.mu.Lock()
	st.bdp.sent(409600, 0, t0)
	st.bdp.credited(409600, t0.Add(time.Second/64))
	st.mu.Unlock()
	const pathCap UTF16Bytes = 614400
	checkRoom(t, st, "estimated cap", roomWant{room: pathCap, canStart: true, idle: true})
	checkFits(t, st, "estimated cap", map[UTF16Bytes]bool{pathCap: true, pathCap + 1: true, window: true, window + 1: true})
	debitStream(t, st, 16384)
	checkRoom(t, st, "estimated cap, 16384 outstanding", roomWant{room: pathCap - 16384, canStart: true})
	if got := st.Limits(); got != l {
		t.Fatalf("Limits = %+v, want %+v (the cap is not a limit)", got, l)
	}
}

// TestStreamFrameBytes: a source builds frames of the peer's
// maximumFrameBytes until the path is measured, and on a slow path with a
// long round trip frames that hold it for at most bdpFrameTime (4 ms),
// never below bdpMinFrame; on a fast path, or a short round trip, the
// maximum stays.
func TestStreamFrameBytes(t *testing.T) {
	l := Limits{WindowBytes: 4 << 20, MaximumFrameBytes: 512 << 10}
	t0 := time.Unix(1000, 0)
	st := newTestStream(l)
	if got := st.FrameBytes(); got != l.MaximumFrameBytes {
		t.Fatalf("FrameBytes before any sample = %d, want maximumFrameBytes %d", got, l.MaximumFrameBytes)
	}
	// 500000 bytes credited 20 ms after they were sent: 25 MB/s (100
	// Mbit/s of base64 counted in UTF-16 bytes), 100000 in 4 ms.
	st.mu.Lock()
	st.bdp.sent(500_000, 0, t0)
	st.bdp.credited(500_000, t0.Add(20*time.Millisecond))
	st.mu.Unlock()
	if got := st.FrameBytes(); got != 100_000 {
		t.Fatalf("FrameBytes at 25 MB/s = %d, want 100000 (4 ms of the path)", got)
	}
	if got := st.Limits(); got != l {
		t.Fatalf("Limits = %+v, want %+v (the frame size is not a limit)", got, l)
	}
	// A short round trip: 50000 bytes in 2 ms (25 MB/s) keeps the maximum.
	st = newTestStream(l)
	st.mu.Lock()
	st.bdp.sent(50_000, 0, t0)
	st.bdp.credited(50_000, t0.Add(2*time.Millisecond))
	st.mu.Unlock()
	if got := st.FrameBytes(); got != l.MaximumFrameBytes {
		t.Fatalf("FrameBytes at 25 MB/s over 2 ms = %d, want maximumFrameBytes %d", got, l.MaximumFrameBytes)
	}
	// A fast path: 40 MB in 40 ms (1 GB/s) allows more than the maximum.
	st = newTestStream(l)
	st.mu.Lock()
	st.bdp.sent(40_000_000, 0, t0)
	st.bdp.credited(40_000_000, t0.Add(40*time.Millisecond))
	st.mu.Unlock()
	if got := st.FrameBytes(); got != l.MaximumFrameBytes {
		t.Fatalf("FrameBytes at 1 GB/s = %d, want maximumFrameBytes %d", got, l.MaximumFrameBytes)
	}
}

// TestCost: what a message takes from the window is its size when it goes
// whole, and never less than its fragments take when it does not (nor
// more than a few envelopes more): for texts full of escapes, non-ASCII
// and surrogate pairs, against the fragments the Fragmenter builds at the
// frame limit.
func TestCost(t *testing.T) {
	const channel = "ahp-otlp://metrics"
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", `"`, `\`, "\n", "\x01", "é", "😀", `{"k":"v"}`, "xxxxxxxxxxxxxxxx"}
	for _, maxFrame := range []UTF16Bytes{1024, 4096, 16384} {
		for range 200 {
			var b strings.Builder
			for n := rng.IntN(3000); n > 0; n-- {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			text := []byte(`{"jsonrpc":"2.0","method":"otlp/exportMetrics","params":{"channel":"` + channel + `","payload":"` + b.String() + `"}}`)
			st := NewScheduler(SchedulerConfig{}).AddStream(channel, Limits{WindowBytes: 1 << 30, MaximumFrameBytes: maxFrame}, emptySource{})
			cost := st.Cost(text)
			if size := Measure(text); size <= maxFrame {
				if cost != size {
					t.Fatalf("frame %d: a whole message costs %d, want its size %d", maxFrame, cost, size)
				}
				continue
			}
			f := NewFragmenter(channel, text)
			var frames, sum UTF16Bytes
			for !f.Done() {
				_, size, _, err := f.Next(nil, maxFrame)
				if err != nil {
					t.Fatal(err)
				}
				sum += size
				frames++
			}
			if cost < sum || cost > sum+frames*FrameOverhead(channel, true)/4+2*FrameOverhead(channel, true) {
				t.Fatalf("frame %d: cost %d for %d fragments of %d UTF-16 bytes in all", maxFrame, cost, frames, sum)
			}
		}
	}
}

// TestWaitRoom: the pacing question returns the room beyond what the
// producer holds, at once when there is some; it waits while the hold
// covers the room or reaches maxHeld, and returns when credit comes (the
// stream's Changed); a wake or done returns 0 without room; a removed
// stream returns removed at once.
func TestWaitRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}
		st := newTestStream(l)
		var held atomic.Int64
		h := func() UTF16Bytes { return UTF16Bytes(held.Load()) }
		never := make(chan struct{})
		if room, removed := st.WaitRoom(h, 8192, never, never); room != 4096 || removed {
			t.Fatalf("fresh: WaitRoom = %d %v, want 4096", room, removed)
		}
		held.Store(1000)
		if room, _ := st.WaitRoom(h, 8192, never, never); room != 3096 {
			t.Fatalf("holding 1000: WaitRoom = %d, want 3096", room)
		}
		// The window full: it waits until credit comes.
		for range 4 {
			debitStream(t, st, 1024)
		}
		held.Store(0)
		got := make(chan UTF16Bytes, 1)
		go func() {
			room, _ := st.WaitRoom(h, 8192, never, never)
			got <- room
		}()
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("WaitRoom returned %d on a full window", r)
		default:
		}
		if err := st.Credit(1024); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r != 1024 {
			t.Fatalf("after 1024 of credit: WaitRoom = %d, want 1024", r)
		}
		// At its hold's bound it waits too, whatever the room; wake ends that.
		held.Store(100)
		wake := make(chan struct{}, 1)
		wake <- struct{}{}
		if room, removed := st.WaitRoom(h, 100, wake, never); room != 0 || removed {
			t.Fatalf("at maxHeld, woken: WaitRoom = %d %v, want 0", room, removed)
		}
		done := make(chan struct{})
		close(done)
		if room, removed := st.WaitRoom(h, 100, never, done); room != 0 || removed {
			t.Fatalf("at maxHeld, done: WaitRoom = %d %v, want 0", room, removed)
		}
		st.Remove()
		if room, removed := st.WaitRoom(h, 100, never, never); room != 0 || !removed {
			t.Fatalf("removed: WaitRoom = %d %v, want removed", room, removed)
		}
	})
}
