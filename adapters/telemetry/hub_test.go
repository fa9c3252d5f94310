package telemetry

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
)

// fakeSub is a Subscriber whose readiness the test sets.
type fakeSub struct {
	ready   atomic.Bool
	offered chan *Batch
}

func newFakeSub(ready bool) *fakeSub {
	s := &fakeSub{offered: make(chan *Batch, 16)}
	s.ready.Store(ready)
	return s
}

func (s *fakeSub) Ready() bool    { return s.ready.Load() }
func (s *fakeSub) Offer(b *Batch) { s.offered <- b }

// The Hub tests run in synctest bubbles, on the Hub's own clock
// (SystemClock: time.Now and a time.Ticker), which the bubble fakes: the
// ticks come exactly every interval from the goroutine's start, and
// after each the test waits for the Hub to be idle again.

// newTestHub returns a Hub sampling every interval, closed at t's
// cleanup (inside the bubble).
func newTestHub(t *testing.T, interval time.Duration) *Hub {
	h := NewHub(NewSampler(Options{}), nil, interval, func(err error) { t.Error(err) })
	t.Cleanup(h.Close)
	return h
}

// pass lets d go by and waits until the Hub has handled the ticks due.
func pass(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// offered returns the batch offered to s, or fails.
func offered(t *testing.T, s *fakeSub, what string) *Batch {
	t.Helper()
	select {
	case b := <-s.offered:
		return b
	default:
		t.Fatalf("%s: no batch offered", what)
		return nil
	}
}

func noOffer(t *testing.T, s *fakeSub, what string) {
	t.Helper()
	select {
	case b := <-s.offered:
		t.Errorf("%s: offered batch %d", what, b.Seq)
	default:
	}
}

// TestHubLive: a batch is offered only to ready subscribers; with nobody
// ready the Hub does not sample at all (skipped ticks, counted); a
// subscriber that was not ready gets the next, current batch and never
// the ones it missed, its Tick telling how many it skipped.
func TestHubLive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, time.Second)
		a, b := newFakeSub(true), newFakeSub(false)
		h.Add("ahp-otlp://metrics", 0, a)
		h.Add("ahp-otlp://metrics", 0, b)
		t0 := time.Now()

		pass(time.Second - time.Nanosecond)
		noOffer(t, a, "before the first interval")
		pass(time.Nanosecond)
		b1 := offered(t, a, "ready, first tick")
		noOffer(t, b, "not ready")
		if st := h.Stats(); st.Samples != 1 || st.Skipped != 0 {
			t.Errorf("stats %+v, want 1 sample", st)
		}
		if b1.Seq != 1 || b1.Tick != 1 || !b1.Time.Equal(t0.Add(time.Second)) {
			t.Errorf("first batch %d, tick %d at t0+%v; want 1, 1 at t0+1s", b1.Seq, b1.Tick, b1.Time.Sub(t0))
		}
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Channel string          `json:"channel"`
				Payload json.RawMessage `json:"payload"`
			} `json:"params"`
		}
		if err := json.Unmarshal(b1.Text, &msg); err != nil || msg.Method != rpc.MethodOTLPExportMetrics || msg.Params.Channel != "ahp-otlp://metrics" {
			t.Fatalf("batch text %.200s: %v", b1.Text, err)
		}
		if _, err := DecodeMetrics(msg.Params.Payload); err != nil {
			t.Fatalf("payload: %v", err)
		}

		a.ready.Store(false)
		pass(3 * time.Second) // 3 ticks without credit anywhere
		noOffer(t, a, "a not ready")
		noOffer(t, b, "b not ready")
		if st := h.Stats(); st.Samples != 1 || st.Skipped != 3 {
			t.Errorf("stats %+v, want 1 sample, 3 skipped", st)
		}
		b.ready.Store(true)
		pass(time.Second)
		got := offered(t, b, "b ready")
		// Tick 5: b skipped ticks 1 to 4, a's last batch was tick 1.
		if got.Seq != 2 || got.Tick != 5 || !got.Time.Equal(time.Now()) {
			t.Errorf("b got batch %d, tick %d of %v; want the current one (2, 5, %v)", got.Seq, got.Tick, got.Time, time.Now())
		}
		noOffer(t, a, "a not ready")
		// Not ready when offered: b at ticks 1-4, a at ticks 2-5.
		if st := h.Stats(); st.Samples != 2 || st.Skipped != 3 || st.Missed != 8 {
			t.Errorf("stats %+v, want 2 samples, 3 skipped, 8 missed", st)
		}
	})
}

// TestHubIntervals: a channel asking for 3 s gets every third tick of a
// 1 s Hub; each channel has its own notification text.
func TestHubIntervals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, time.Second)
		fast, slow := newFakeSub(true), newFakeSub(true)
		h.Add("ahp-otlp://metrics", 0, fast)
		h.Add("ahp-otlp://metrics?interval=3s", 3*time.Second, slow)
		var slowTicks []int
		for i := 1; i <= 7; i++ {
			pass(time.Second)
			if b := offered(t, fast, fmt.Sprint("tick ", i)); b.Seq != uint64(i) || b.Tick != uint64(i) {
				t.Errorf("tick %d: fast channel's batch %d, tick %d", i, b.Seq, b.Tick)
			}
			select {
			case b := <-slow.offered:
				slowTicks = append(slowTicks, i)
				if b.Seq != uint64(len(slowTicks)) || b.Tick != b.Seq {
					t.Errorf("tick %d: slow channel's batch %d, tick %d; want %d twice", i, b.Seq, b.Tick, len(slowTicks))
				}
				var msg struct{ Params struct{ Channel string } }
				_ = json.Unmarshal(b.Text, &msg)
				if msg.Params.Channel != "ahp-otlp://metrics?interval=3s" {
					t.Errorf("slow channel's batch names %q", msg.Params.Channel)
				}
			default:
			}
		}
		if !slices.Equal(slowTicks, []int{1, 4, 7}) {
			t.Errorf("slow channel got batches at ticks %v in 7 s, want [1 4 7]", slowTicks)
		}
		if st := h.Stats(); st.Samples != 7 {
			t.Errorf("stats %+v, want 7 samples (one per tick, shared)", st)
		}
	})
}

// TestHubIdle: the goroutine ends with the last subscriber (no tick
// counts anything while idle) and starts again with the next one,
// ticking from then.
func TestHubIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, time.Second)
		s := newFakeSub(true)
		h.Add("ahp-otlp://metrics", 0, s)
		pass(time.Second)
		offered(t, s, "first tick")
		h.Remove("ahp-otlp://metrics", s)
		synctest.Wait()
		h.mu.Lock()
		running := h.running
		h.mu.Unlock()
		if running {
			t.Fatal("the goroutine still runs without subscribers")
		}
		pass(10 * time.Second)
		if st := h.Stats(); st.Samples != 1 || st.Skipped != 0 {
			t.Errorf("stats %+v after 10 s idle, want 1 sample, nothing skipped", st)
		}
		pass(time.Second / 2) // off the old ticks' phase
		h.Add("ahp-otlp://metrics", 0, s)
		pass(time.Second - time.Nanosecond)
		noOffer(t, s, "restarted, before its first interval")
		pass(time.Nanosecond)
		if b := offered(t, s, "restarted, first interval"); b.Seq != 1 {
			t.Errorf("after idling: batch %d, want a new channel's first", b.Seq)
		}
	})
}

// BenchmarkSample is one full sample (read everything, encode it) on a
// simulated 1 Hz schedule: the sampler's clock advances 1 s per sample, so
// the cached reads (mounts every 30 s, the process scan every 10 s) happen
// as often as they do in production. It reports the CPU time (user +
// system, GC included) per sample as a share of one core at 1 Hz.
func BenchmarkSample(b *testing.B) {
	var now time.Time = time.Unix(1736870400, 0)
	s := NewSampler(Options{Now: func() time.Time { now = now.Add(time.Second); return now },
		Self: func() Self { return Self{Clients: 1} }})
	s.Prime()
	var size int
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for i := 0; i < b.N; i++ {
		p, err := s.Collect()
		if err != nil {
			b.Fatal(err)
		}
		size = len(p)
	}
	cpu := processCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Second)*100, "%core@1Hz")
	b.ReportMetric(float64(size), "payload-bytes")
}

// processCPU is the process's CPU time (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
