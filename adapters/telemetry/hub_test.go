package telemetry

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
)

// fakeClock drives the Hub: each NewTicker is handed to the test, which
// fires it by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers chan *fakeTicker
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1736870400, 0), tickers: make(chan *fakeTicker, 4)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func (c *fakeClock) NewTicker(d time.Duration) Ticker {
	t := &fakeTicker{c: make(chan time.Time)}
	c.tickers <- t
	return t
}

type fakeTicker struct {
	c       chan time.Time
	stopped atomic.Bool
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }
func (t *fakeTicker) Stop()               { t.stopped.Store(true) }

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

// hubHarness ticks a Hub with a fake clock and waits for each tick.
type hubHarness struct {
	t     *testing.T
	clock *fakeClock
	hub   *Hub
	done  chan bool
	tk    *fakeTicker
}

func newHubHarness(t *testing.T, interval time.Duration) *hubHarness {
	h := &hubHarness{t: t, clock: newFakeClock(), done: make(chan bool)}
	h.hub = NewHub(NewSampler(Options{}), nil, interval, func(err error) { t.Error(err) })
	h.hub.SetTestHooks(h.clock, h.done)
	t.Cleanup(h.hub.Close)
	return h
}

// tick advances the clock by d, fires the ticker and returns whether the
// Hub sampled.
func (h *hubHarness) tick(d time.Duration) bool {
	h.t.Helper()
	if h.tk == nil {
		select {
		case h.tk = <-h.clock.tickers:
		case <-time.After(10 * time.Second):
			h.t.Fatal("the Hub did not start its ticker")
		}
	}
	now := h.clock.advance(d)
	h.tk.c <- now
	return <-h.done
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
// ready the Hub does not sample at all; a subscriber that was not ready
// gets the next, current batch and never the ones it missed.
func TestHubLive(t *testing.T) {
	h := newHubHarness(t, time.Second)
	a, b := newFakeSub(true), newFakeSub(false)
	h.hub.Add("ahp-otlp://metrics", 0, a)
	h.hub.Add("ahp-otlp://metrics", 0, b)

	if !h.tick(time.Second) {
		t.Fatal("no sample with a ready subscriber")
	}
	b1 := <-a.offered
	noOffer(t, b, "not ready")
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
	for i := 0; i < 3; i++ { // 3 s without credit anywhere
		if h.tick(time.Second) {
			t.Fatal("sampled with nobody ready")
		}
	}
	if st := h.hub.Stats(); st.Samples != 1 || st.Skipped != 3 {
		t.Errorf("stats %+v, want 1 sample, 3 skipped", st)
	}
	b.ready.Store(true)
	if !h.tick(time.Second) {
		t.Fatal("no sample once b is ready")
	}
	got := <-b.offered
	if got.Seq != 2 || !got.Time.Equal(h.clock.Now()) {
		t.Errorf("b got batch %d of %v, want the current one (2, %v)", got.Seq, got.Time, h.clock.Now())
	}
	noOffer(t, a, "a not ready")
}

// TestHubIntervals: a channel asking for 3 s gets every third tick of a
// 1 s Hub; each channel has its own notification text.
func TestHubIntervals(t *testing.T) {
	h := newHubHarness(t, time.Second)
	fast, slow := newFakeSub(true), newFakeSub(true)
	h.hub.Add("ahp-otlp://metrics", 0, fast)
	h.hub.Add("ahp-otlp://metrics?interval=3s", 3*time.Second, slow)
	var slowSeqs []uint64
	for i := 0; i < 7; i++ {
		h.tick(time.Second)
		<-fast.offered
		select {
		case b := <-slow.offered:
			slowSeqs = append(slowSeqs, b.Seq)
			var msg struct{ Params struct{ Channel string } }
			_ = json.Unmarshal(b.Text, &msg)
			if msg.Params.Channel != "ahp-otlp://metrics?interval=3s" {
				t.Errorf("slow channel's batch names %q", msg.Params.Channel)
			}
		default:
		}
	}
	if len(slowSeqs) != 3 { // ticks 1, 4, 7
		t.Errorf("slow channel got %v in 7 s, want 3 batches", slowSeqs)
	}
}

// TestHubIdle: the goroutine ends with the last subscriber and starts
// again with the next one.
func TestHubIdle(t *testing.T) {
	h := newHubHarness(t, time.Second)
	s := newFakeSub(true)
	h.hub.Add("ahp-otlp://metrics", 0, s)
	h.tick(time.Second)
	<-s.offered
	first := h.tk
	h.hub.Remove("ahp-otlp://metrics", s)
	h.hub.wg.Wait() // returns only once the goroutine ended
	if !first.stopped.Load() {
		t.Error("ticker not stopped when idle")
	}
	h.tk = nil
	h.hub.Add("ahp-otlp://metrics", 0, s)
	h.tick(time.Second)
	if b := <-s.offered; b.Seq != 1 {
		t.Errorf("after idling: batch %d, want a new channel's first", b.Seq)
	}
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
