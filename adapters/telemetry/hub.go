package telemetry

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/rpc"
)

// Subscriber is one subscription to a metrics channel, implemented by the
// host. Both methods are called from the Hub's goroutine and must not block.
type Subscriber interface {
	// Ready reports whether the subscription can start a message now: a
	// windowed one has credit, an ordinary one room in its connection's
	// FIFO. Only ready subscribers are offered a batch; the others miss it.
	Ready() bool
	// Offer hands the newest batch of the subscriber's channel.
	Offer(b *Batch)
}

// Batch is one sample as the complete notification of one channel.
type Batch struct {
	Seq uint64 // per channel, from 1
	// Tick counts the channel's due intervals, from 1, sampled or not
	// (no subscriber could take one): a subscriber that got the batch
	// of tick t and then this one skipped Tick - t - 1 samples.
	Tick uint64
	Time time.Time // when it was sampled
	Text []byte    // {"jsonrpc":"2.0","method":"otlp/exportMetrics","params":{"channel":C,"payload":P}}
}

// HubStats are the Hub's counters.
type HubStats struct {
	Samples    uint64        // samples taken
	Skipped    uint64        // ticks without a sample: no subscriber could take one
	Missed     uint64        // batches not offered to a subscriber that was not ready
	LastSample time.Duration // time the last sample took (read and encode)

	// SkipsReported is the sum of the skipped counts sent to subscribers
	// (otlp/exportMetrics "skipped"): samples they did not get, for
	// whatever reason (not ready, no room, superseded before sent).
	SkipsReported uint64
}

// Hub is the machine's one sampler loop. Its goroutine runs only while some
// channel has subscribers and ticks every Interval; on a tick it samples
// once if some channel that is due has a ready subscriber, encodes the
// batch once, wraps it in each due channel's notification and offers it to
// that channel's ready subscribers. Subscribers that are not ready miss the
// sample: nothing is kept for them (live recovery).
type Hub struct {
	sampler  *Sampler
	clock    Clock
	interval time.Duration
	onError  func(error)
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	wake chan struct{} // 1-slot: the set of channels changed

	mu      sync.Mutex
	groups  map[string]*group
	running bool
	closed  bool

	samples, skipped, missed atomic.Uint64
	lastSample               atomic.Int64
	skips                    atomic.Uint64 // sum of the skipped counts reported (SkipsReported)

	tickDone chan<- bool // tests: receives whether each tick sampled
}

type group struct {
	uri      string
	interval time.Duration
	subs     map[Subscriber]struct{}
	last     time.Time // last batch published
	seq      uint64
	// tick counts due intervals (Batch.Tick); lastTick is when it last
	// moved.
	tick     uint64
	lastTick time.Time
}

// NewHub returns a Hub sampling with s every interval (the configured
// telemetry.interval, the fastest any channel gets) on clock (nil: the
// system clock). onError, if set, is told about encoding failures.
func NewHub(s *Sampler, clock Clock, interval time.Duration, onError func(error)) *Hub {
	if clock == nil {
		clock = SystemClock{}
	}
	if interval <= 0 {
		interval = time.Second
	}
	h := &Hub{sampler: s, clock: clock, interval: interval, onError: onError,
		wake: make(chan struct{}, 1), groups: map[string]*group{}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// SetTestHooks replaces the clock and sets a channel told after every tick
// whether it sampled. For tests; call before the first Add.
func (h *Hub) SetTestHooks(clock Clock, tickDone chan<- bool) {
	h.clock, h.tickDone = clock, tickDone
}

// Interval returns the base interval.
func (h *Hub) Interval() time.Duration { return h.interval }

// Add subscribes s to the channel uri, published every interval (at least
// the Hub's). The sampling goroutine starts if it was idle.
func (h *Hub) Add(uri string, interval time.Duration, s Subscriber) {
	h.mu.Lock()
	g := h.groups[uri]
	if g == nil {
		g = &group{uri: uri, interval: max(interval, h.interval), subs: map[Subscriber]struct{}{}}
		h.groups[uri] = g
	}
	g.subs[s] = struct{}{}
	if !h.running && !h.closed {
		h.running = true
		h.wg.Add(1)
		go h.run()
	}
	h.mu.Unlock()
	h.signal()
}

// Remove unsubscribes s from uri; a channel without subscribers is dropped,
// and with the last one the goroutine ends.
func (h *Hub) Remove(uri string, s Subscriber) {
	h.mu.Lock()
	if g := h.groups[uri]; g != nil {
		delete(g.subs, s)
		if len(g.subs) == 0 {
			delete(h.groups, uri)
		}
	}
	h.mu.Unlock()
	h.signal()
}

// Close stops the goroutine and waits for it; later Adds do nothing.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

func (h *Hub) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// Stats returns the counters.
func (h *Hub) Stats() HubStats {
	return HubStats{Samples: h.samples.Load(), Skipped: h.skipped.Load(), Missed: h.missed.Load(), SkipsReported: h.skips.Load(),
		LastSample: time.Duration(h.lastSample.Load())}
}

// run is the sampling loop: from the first subscriber to the last.
func (h *Hub) run() {
	defer h.wg.Done()
	// Read the CPU times now so the first batch's utilization covers one
	// interval, not the time since boot or since the last idle period.
	h.sampler.Prime()
	tk := h.clock.NewTicker(h.interval)
	defer tk.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.wake:
			h.mu.Lock()
			if len(h.groups) == 0 {
				h.running = false
				h.mu.Unlock()
				return
			}
			h.mu.Unlock()
		case <-tk.C():
			sampled := h.tick()
			if h.tickDone != nil {
				h.tickDone <- sampled
			}
		}
	}
}

type handoff struct {
	g    *group
	subs []Subscriber
}

// tick samples once if a due channel has a ready subscriber.
func (h *Hub) tick() bool {
	now := h.clock.Now()
	var due []handoff
	h.mu.Lock()
	for _, g := range h.groups {
		// Half an interval of slack: ticks are not exact.
		if !g.last.IsZero() && now.Sub(g.last) < g.interval-h.interval/2 {
			continue
		}
		if g.lastTick.IsZero() || now.Sub(g.lastTick) >= g.interval-h.interval/2 {
			g.tick++
			g.lastTick = now
		}
		var ready []Subscriber
		for s := range g.subs {
			if s.Ready() {
				ready = append(ready, s)
			} else {
				h.missed.Add(1)
			}
		}
		if len(ready) > 0 {
			due = append(due, handoff{g: g, subs: ready})
		}
	}
	h.mu.Unlock()
	if len(due) == 0 {
		h.skipped.Add(1)
		return false
	}
	t0 := time.Now()
	payload, err := h.sampler.CollectAt(now)
	h.lastSample.Store(int64(time.Since(t0)))
	if err != nil {
		if h.onError != nil {
			h.onError(err)
		}
		return false
	}
	h.samples.Add(1)
	for _, d := range due {
		h.mu.Lock()
		d.g.seq++
		d.g.last = now
		b := &Batch{Seq: d.g.seq, Tick: d.g.tick, Time: now, Text: Notification(rpc.MethodOTLPExportMetrics, d.g.uri, payload)}
		h.mu.Unlock()
		for _, s := range d.subs {
			s.Offer(b)
		}
	}
	return true
}

// Notification wraps an OTLP/JSON payload in the otlp/* notification of
// channel: {"jsonrpc":"2.0","method":M,"params":{"channel":C,"payload":P}}.
func Notification(method, channel string, payload []byte) []byte {
	ch, _ := json.Marshal(channel)
	out := make([]byte, 0, len(payload)+len(channel)+64)
	out = append(out, `{"jsonrpc":"2.0","method":"`...)
	out = append(out, method...)
	out = append(out, `","params":{"channel":`...)
	out = append(out, ch...)
	out = append(out, `,"payload":`...)
	out = append(out, payload...)
	out = append(out, `}}`...)
	return out
}

// WithSkipped returns text, a batch's notification, with "skipped":n
// added to its params (n > 0): the samples of the channel this
// subscription did not get since the previous batch it got
// (docs/protocol.md "otlp/exportMetrics").
func WithSkipped(text []byte, n uint64) []byte {
	if n == 0 || len(text) < 2 {
		return text
	}
	out := make([]byte, 0, len(text)+32)
	out = append(out, text[:len(text)-2]...) // up to the end of payload
	out = append(out, `,"skipped":`...)
	out = strconv.AppendUint(out, n, 10)
	return append(out, "}}"...)
}
