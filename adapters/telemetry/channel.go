package telemetry

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Bounds of the telemetry channels.
const (
	// ordinaryHeadroom: a batch (or log message) is pushed to an ordinary
	// subscriber only while fewer than this many messages wait in its
	// connection's ordinary FIFO. A slow ordinary client thus holds at
	// most a few batches (each about 10 KB), never a FIFO's worth, and a
	// telemetry push never makes the FIFO collapse into gaps.
	ordinaryHeadroom = 4

	// MaxInterval bounds ?interval= (one sample an hour is the slowest
	// anyone needs; it keeps the duration arithmetic sane).
	MaxInterval = time.Hour
)

// ChannelsConfig configures Channels.
type ChannelsConfig struct {
	// Interval is the sampling interval (telemetry.interval); 0 is 1 s.
	Interval time.Duration
	// ServiceVersion and Self feed the sampler's resource and the
	// sidecar.* metrics.
	ServiceVersion string
	Self           func() Self
	// Seq returns the journal's serverSeq, for the snapshot's fromSeq.
	Seq func() uint64
	// Log is the host's logger; Logger returns it teed into the logs
	// channel's ring.
	Log hclog.Logger
}

// Channels is the host's telemetry (DESIGN.md §5): one Hub (the machine's
// sampler) for ahp-otlp://metrics, a Ring of the sidecar's own log
// records for ahp-otlp://logs, and the subscriptions of both. Sampling is
// live only: a batch goes to a subscription that can take it whole now,
// never into a backlog.
type Channels struct {
	cfg     ChannelsConfig
	log     hclog.Logger
	sampler *Sampler
	hub     *Hub
	ring    *Ring

	mu      sync.Mutex
	subs    map[adapters.Subscriber]*sub
	logSubs map[*sub]struct{}

	// The logs pump: a goroutine that runs while there are log
	// subscribers, woken (1-slot) by the ring when a record is kept.
	logWake    chan struct{}
	logRunning bool
	logClosed  bool
	logCtx     context.Context
	logCancel  context.CancelFunc
	logWG      sync.WaitGroup
}

// NewChannels starts the telemetry of one host.
func NewChannels(cfg ChannelsConfig) *Channels {
	ts := &Channels{
		cfg:     cfg,
		subs:    map[adapters.Subscriber]*sub{},
		logSubs: map[*sub]struct{}{},
		logWake: make(chan struct{}, 1),
	}
	ts.logCtx, ts.logCancel = context.WithCancel(context.Background())
	ts.ring = NewRing(LogRingRecords, nil)
	ts.ring.SetNotify(ts.wakeLogs)
	// Every record logged through the host's logger also reaches the
	// ring (which keeps nothing until a log channel has a subscriber).
	ts.log = Tee(cfg.Log, ts.ring)
	ts.sampler = NewSampler(Options{
		ServiceName:    "sidecar",
		ServiceVersion: cfg.ServiceVersion,
		Self:           cfg.Self,
	})
	interval := cfg.Interval
	if interval <= 0 {
		interval = time.Second
	}
	log := ts.log.Named("telemetry")
	ts.hub = NewHub(ts.sampler, nil, interval, func(err error) {
		log.Warn("cannot encode a metrics batch", "error", err)
	})
	return ts
}

// Logger returns the host's logger teed into the logs channel.
func (ts *Channels) Logger() hclog.Logger { return ts.log }

// Hub returns the metrics Hub (tests set its clock).
func (ts *Channels) Hub() *Hub { return ts.hub }

// Stats returns the sampler's counters.
func (ts *Channels) Stats() HubStats { return ts.hub.Stats() }

// LogRecordsMissed returns how many log records the logs channels'
// subscribers missed because they fell more than the ring behind (each
// subscriber's miss counted).
func (ts *Channels) LogRecordsMissed() uint64 { return ts.ring.Dropped() }

// Close stops sampling and the logs pump.
func (ts *Channels) Close() {
	ts.hub.Close()
	ts.mu.Lock()
	ts.logClosed = true
	ts.mu.Unlock()
	ts.logCancel()
	ts.logWG.Wait()
}

// Capability is InitializeResult.telemetry.
func (ts *Channels) Capability() *rpc.TelemetryCapability {
	return &rpc.TelemetryCapability{Metrics: rpc.MetricsChannel, Logs: rpc.LogsPattern}
}

// Channel returns the ahp-otlp: channel named uri, or nil:
//
//	ahp-otlp://metrics[?interval=DURATION]   (our extension: a slower interval)
//	ahp-otlp://logs[?level=LEVEL]            (trace|debug|info|warn|error|fatal; default info)
//
// The value is a light handle; the subscriptions live in Channels, keyed
// by subscription.
func (ts *Channels) Channel(uri string) *Channel {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "ahp-otlp" || u.Path != "" || u.User != nil || u.Fragment != "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil
	}
	ch := &Channel{ts: ts, name: uri}
	switch u.Host {
	case "metrics":
		ch.interval = ts.hub.Interval()
		for k, v := range q {
			if k != "interval" || len(v) != 1 {
				return nil
			}
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 || d > MaxInterval {
				return nil
			}
			// Faster than the configured interval is not offered: clamp.
			ch.interval = max(d, ch.interval)
		}
	case "logs":
		ch.logs = true
		ch.level = hclog.Info
		for k, v := range q {
			if k != "level" || len(v) != 1 {
				return nil
			}
			l, ok := ParseLevel(v[0])
			if !ok {
				return nil
			}
			ch.level = l
		}
	default:
		return nil
	}
	return ch
}

// Channel is one telemetry channel: stateless for ordinary subscribers
// ({} then otlp/* notifications), its own Source for windowed ones
// (channel/snapshot with state {}, then the newest batch).
type Channel struct {
	adapters.Base
	ts       *Channels
	name     string
	logs     bool
	interval time.Duration // metrics
	level    hclog.Level   // logs
}

// URI implements adapters.Channel.
func (ch *Channel) URI() string { return ch.name }

// Interval is a metrics channel's sampling interval.
func (ch *Channel) Interval() time.Duration { return ch.interval }

// Traits implements adapters.Channel: stateless.
func (ch *Channel) Traits() adapters.Traits {
	label := "metrics"
	if ch.logs {
		label = "logs"
	}
	return adapters.Traits{Delivery: adapters.Stateless, Label: label}
}

// Snapshot implements adapters.Channel: the state is {}.
func (ch *Channel) Snapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: ch.name, State: json.RawMessage(`{}`), FromSeq: ch.ts.cfg.Seq()})
}

// Resume implements adapters.Channel: live, never a backlog; no
// channel/snapshot first (every data message after the reconnect result
// is new data, seed 000).
func (ch *Channel) Resume(s adapters.Subscriber, _ uint64) delivery.Source {
	os := ch.ts.subFor(ch, s)
	os.snapDue.Store(false)
	return os
}

// Recover implements adapters.Channel: live.
func (ch *Channel) Recover(uint64) adapters.Recovery { return adapters.RecoverLive }

// Source implements adapters.Channel (windowed subscriptions).
func (ch *Channel) Source(s adapters.Subscriber) delivery.Source { return ch.ts.subFor(ch, s) }

// Subscribe implements adapters.Channel.
func (ch *Channel) Subscribe(s adapters.Subscriber) {
	ts := ch.ts
	os := ts.subFor(ch, s)
	if ch.logs {
		// Live: records from when the subscription was made (subFor),
		// which for a windowed one precedes its channel/snapshot.
		ts.mu.Lock()
		ts.logSubs[os] = struct{}{}
		ts.updateLogLevelLocked()
		ts.startLogsLocked()
		ts.mu.Unlock()
		return
	}
	ts.hub.Add(ch.name, ch.interval, os)
}

// Unsubscribe implements adapters.Channel.
func (ch *Channel) Unsubscribe(s adapters.Subscriber) {
	ts := ch.ts
	ts.mu.Lock()
	os := ts.subs[s]
	delete(ts.subs, s)
	if os != nil {
		os.detached.Store(true)
		if ch.logs {
			delete(ts.logSubs, os)
			ts.updateLogLevelLocked()
		}
	}
	ts.mu.Unlock()
	ts.wakeLogs() // the pump ends with the last log subscriber
	if os != nil && !ch.logs {
		ts.hub.Remove(ch.name, os)
	}
}

// subFor returns the sub of s, creating it.
func (ts *Channels) subFor(ch *Channel, s adapters.Subscriber) *sub {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	os := ts.subs[s]
	if os == nil {
		os = &sub{ch: ch, s: s}
		os.snapDue.Store(true)
		if ch.logs {
			// Live: records from now on. A windowed subscription's
			// Source is made before Subscribe registers it with the
			// pump, and its channel/snapshot may go out in between: a
			// record logged after the snapshot is the subscriber's.
			os.cursor.Store(ts.ring.Head())
		}
		ts.subs[s] = os
	}
	return os
}

// Ready reports whether the subscription s of a telemetry channel would
// take a batch now (tests), false if there is none.
func (ts *Channels) Ready(s adapters.Subscriber) bool {
	ts.mu.Lock()
	os := ts.subs[s]
	ts.mu.Unlock()
	return os != nil && os.Ready()
}

// sub is one subscription to a telemetry channel: a Subscriber for the
// Hub and, when windowed, the delivery.Source of its stream.
type sub struct {
	ch       *Channel
	s        adapters.Subscriber
	detached atomic.Bool

	snapDue atomic.Bool
	latest  atomic.Pointer[Batch] // metrics: newest batch offered
	need    atomic.Int64          // metrics: credit a batch needs (UTF-16 bytes)
	sent    uint64                // metrics: seq of the last batch sent (writer goroutine)
	cursor  atomic.Uint64         // logs: ring seq read up to
	// logMissed is how many records of the ring this logs subscription
	// missed (it fell more than the ring behind) and has not been told of:
	// the next message says so ("skipped").
	logMissed atomic.Uint64

	// tick is the Batch.Tick of the last batch this subscription got
	// (queued on its FIFO, or sent on its stream): the next one reports
	// the ticks between as skipped.
	tick atomic.Uint64
}

// Ready implements Subscriber. A windowed subscription is ready when its
// stream can take a whole batch now (delivery.Stream.Fits with what the
// last batch took, delivery.Stream.Cost: its fragments' envelopes and
// escaping counted by delivery; a batch larger than the window only when
// nothing is outstanding): a batch that started could otherwise stall
// half-sent and arrive old once credit comes. An ordinary one is ready
// with headroom in its connection's FIFO.
func (os *sub) Ready() bool {
	if os.detached.Load() {
		return false
	}
	if st := os.s.Stream(); st != nil {
		return st.Fits(delivery.UTF16Bytes(os.need.Load()))
	}
	return os.s.CanPush(ordinaryHeadroom)
}

// maxSkippedMember is the most UTF-16 bytes WithSkipped adds to a batch
// (`,"skipped":` and a uint64), escaped within a fragment.
const maxSkippedMember int64 = 2 * 2 * (int64(len(`,"skipped":`)) + 20)

// Offer implements Subscriber.
func (os *sub) Offer(b *Batch) {
	if st := os.s.Stream(); st != nil {
		// What it takes from the window, fragments included, with the
		// skipped member it may carry (WithSkipped).
		os.need.Store(int64(st.Cost(b.Text)) + maxSkippedMember)
		os.latest.Store(b)
		st.Wake()
		return
	}
	n := os.skippedBefore(b)
	if os.push(WithSkipped(b.Text, n)) {
		os.got(b, n)
	}
}

// push queues text on the connection's ordinary FIFO while the
// subscription is active and still the connection's one for its channel.
func (os *sub) push(text []byte) bool {
	if os.detached.Load() {
		return false
	}
	return os.s.Push(text, ordinaryHeadroom)
}

// skippedBefore returns how many samples this subscription did not get
// between its last batch and b.
func (os *sub) skippedBefore(b *Batch) uint64 {
	last := os.tick.Load()
	if last == 0 || b.Tick <= last+1 {
		return 0
	}
	return b.Tick - last - 1
}

// got records that b went to this subscription, reporting n skipped.
func (os *sub) got(b *Batch, n uint64) {
	os.tick.Store(b.Tick)
	if n > 0 {
		os.ch.ts.hub.skips.Add(n)
	}
}

// Next implements delivery.Source (the Scheduler's writer goroutine):
// channel/snapshot first, then the newest batch not yet sent (metrics) or
// the records logged since the last message (logs), else nothing.
func (os *sub) Next() delivery.Message {
	ch := os.ch
	if os.snapDue.Swap(false) {
		text, _ := adapters.SnapshotNotification(ch)
		return delivery.Message{Text: text}
	}
	if ch.logs {
		return delivery.Message{Text: os.nextLogs()}
	}
	b := os.latest.Load()
	if b == nil || b.Seq <= os.sent {
		return delivery.Message{}
	}
	os.sent = b.Seq
	n := os.skippedBefore(b)
	os.got(b, n)
	return delivery.Message{Text: WithSkipped(b.Text, n)}
}

// nextLogs encodes the records after the cursor at the channel's level
// (with "skipped": the records it missed, more than the ring behind),
// or returns nil when there are none.
func (os *sub) nextLogs() []byte {
	ts := os.ch.ts
	for {
		recs, cursor, missed := ts.ring.Read(os.cursor.Load(), os.ch.level, maxLogRecordsPerBatch)
		os.cursor.Store(cursor)
		if missed > 0 {
			os.logMissed.Add(missed)
		}
		if len(recs) == 0 {
			return nil
		}
		payload, err := EncodeLogs(ts.sampler.Resource(), recs)
		if err != nil {
			continue // cannot happen with string attributes; skip these records
		}
		return WithSkipped(Notification(rpc.MethodOTLPExportLogs, os.ch.name, payload), os.logMissed.Swap(0))
	}
}

// updateLogLevelLocked keeps the ring at the lowest level any log
// subscriber wants (hclog.Off without subscribers: logging then costs one
// atomic load).
func (ts *Channels) updateLogLevelLocked() {
	lowest := hclog.Off
	for os := range ts.logSubs {
		lowest = min(lowest, os.ch.level)
	}
	ts.ring.SetMinLevel(lowest)
}

func (ts *Channels) wakeLogs() {
	select {
	case ts.logWake <- struct{}{}:
	default:
	}
}

// startLogsLocked starts the logs pump if it is not running.
func (ts *Channels) startLogsLocked() {
	if ts.logRunning || ts.logClosed {
		return
	}
	ts.logRunning = true
	ts.logWG.Add(1)
	go ts.pumpLogs()
}

// pumpLogs hands new records to log subscribers: a windowed one is woken
// (its Source reads the ring), an ordinary one gets otlp/exportLogs pushed
// while its FIFO has headroom (the rest waits in the ring for the next
// record; past the ring's size it is missed). It never logs: its own
// records would wake it again.
func (ts *Channels) pumpLogs() {
	defer ts.logWG.Done()
	for {
		select {
		case <-ts.logCtx.Done():
			return
		case <-ts.logWake:
		}
		ts.mu.Lock()
		if len(ts.logSubs) == 0 {
			ts.logRunning = false
			ts.mu.Unlock()
			return
		}
		subs := make([]*sub, 0, len(ts.logSubs))
		for os := range ts.logSubs {
			subs = append(subs, os)
		}
		ts.mu.Unlock()
		for _, os := range subs {
			if st := os.s.Stream(); st != nil {
				st.Wake()
				continue
			}
			for os.Ready() {
				text := os.nextLogs()
				if text == nil {
					break
				}
				os.push(text)
			}
		}
	}
}

var _ adapters.Channel = (*Channel)(nil)
