package host

import (
	"context"
	"encoding/json"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// Telemetry channel URIs (ahp.md §6). Each expansion of the logs template
// and each metrics interval is its own channel.
const (
	telemetryMetricsURI  = "ahp-otlp://metrics"
	telemetryLogsURI     = "ahp-otlp://logs"
	telemetryLogsPattern = "ahp-otlp://logs{?level}"
)

// Bounds of the telemetry channels.
const (
	// ordinaryTelemetryHeadroom: a batch (or log message) is pushed to an
	// ordinary subscriber only while fewer than this many messages wait in
	// its connection's ordinary FIFO. A slow ordinary client thus holds at
	// most a few batches (each about 10 KB), never a FIFO's worth, and a
	// telemetry push never makes the FIFO collapse into gaps.
	ordinaryTelemetryHeadroom = 4

	// maxTelemetryInterval bounds ?interval= (one sample an hour is the
	// slowest anyone needs; it keeps the duration arithmetic sane).
	maxTelemetryInterval = time.Hour
)

// telemetryState is the server's telemetry: one Hub (the machine's sampler)
// for ahp-otlp://metrics, a Ring of the sidecar's own log records for
// ahp-otlp://logs, and the subscriptions of both.
type telemetryState struct {
	sampler *telemetry.Sampler
	hub     *telemetry.Hub
	ring    *telemetry.Ring

	mu      sync.Mutex
	subs    map[*subscription]*otlpSub
	logSubs map[*otlpSub]struct{}

	// The logs pump: a goroutine that runs while there are log
	// subscribers, woken (1-slot) by the ring when a record is kept.
	logWake    chan struct{}
	logRunning bool
	logClosed  bool
	logCtx     context.Context
	logCancel  context.CancelFunc
	logWG      sync.WaitGroup

	// The sidecar's own byte counters (countConn).
	bytesSent, bytesReceived atomic.Uint64
}

func (s *Server) initTelemetry() {
	ts := &s.telemetry
	ts.subs = map[*subscription]*otlpSub{}
	ts.logSubs = map[*otlpSub]struct{}{}
	ts.logWake = make(chan struct{}, 1)
	ts.logCtx, ts.logCancel = context.WithCancel(context.Background())
	ts.ring = telemetry.NewRing(telemetry.LogRingRecords, nil)
	ts.ring.SetNotify(ts.wakeLogs)
	// Every record logged through the server's logger also reaches the
	// ring (which keeps nothing until a log channel has a subscriber).
	s.log = telemetry.Tee(s.log, ts.ring)
	ts.sampler = telemetry.NewSampler(telemetry.Options{
		ServiceName:    "sidecar",
		ServiceVersion: Version,
		Self:           s.selfStats,
	})
	interval := s.cfg.Telemetry.Interval
	if interval <= 0 {
		interval = time.Second
	}
	log := s.log.Named("telemetry")
	ts.hub = telemetry.NewHub(ts.sampler, nil, interval, func(err error) {
		log.Warn("cannot encode a metrics batch", "error", err)
	})
}

func (s *Server) shutdownTelemetry() {
	ts := &s.telemetry
	ts.hub.Close()
	ts.mu.Lock()
	ts.logClosed = true
	ts.mu.Unlock()
	ts.logCancel()
	ts.logWG.Wait()
}

// telemetryCapability is InitializeResult.telemetry.
func (s *Server) telemetryCapability() *rpc.TelemetryCapability {
	return &rpc.TelemetryCapability{Metrics: telemetryMetricsURI, Logs: telemetryLogsPattern}
}

// telemetryChannel returns the ahp-otlp: channel named uri, or nil:
//
//	ahp-otlp://metrics[?interval=DURATION]   (our extension: a slower interval)
//	ahp-otlp://logs[?level=LEVEL]            (trace|debug|info|warn|error|fatal; default info)
//
// The value is a light handle; the subscriptions live in telemetryState,
// keyed by the exact URI the client subscribed with.
func (s *Server) telemetryChannel(uri string) channel {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "ahp-otlp" || u.Path != "" || u.User != nil || u.Fragment != "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil
	}
	ch := &otlpChannel{s: s, name: uri}
	switch u.Host {
	case "metrics":
		ch.interval = s.telemetry.hub.Interval()
		for k, v := range q {
			if k != "interval" || len(v) != 1 {
				return nil
			}
			d, err := time.ParseDuration(v[0])
			if err != nil || d <= 0 || d > maxTelemetryInterval {
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
			l, ok := telemetry.ParseLevel(v[0])
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

// otlpChannel is one telemetry channel: stateless for ordinary
// subscribers ({} then otlp/* notifications), its own Source for windowed
// ones (channel/snapshot with state {}, then the newest batch), attachable
// so that the Hub knows who can take a batch.
type otlpChannel struct {
	s        *Server
	name     string
	logs     bool
	interval time.Duration // metrics
	level    hclog.Level   // logs
}

func (ch *otlpChannel) uri() string { return ch.name }

func (ch *otlpChannel) lockedSnapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: ch.name, State: json.RawMessage(`{}`), FromSeq: ch.s.journal.Seq()})
}

func (ch *otlpChannel) stateless() {}

// newSource implements sourceChannel (windowed subscriptions).
func (ch *otlpChannel) newSource(sub *subscription) delivery.Source {
	return ch.s.telemetry.subFor(ch, sub)
}

// attach implements attachable.
func (ch *otlpChannel) attach(sub *subscription) {
	ts := &ch.s.telemetry
	os := ts.subFor(ch, sub)
	if ch.logs {
		os.cursor.Store(ts.ring.Head()) // live: records from now on
		ts.mu.Lock()
		ts.logSubs[os] = struct{}{}
		ts.updateLogLevelLocked()
		ts.startLogsLocked()
		ts.mu.Unlock()
		return
	}
	ts.hub.Add(ch.name, ch.interval, os)
}

// detach implements attachable.
func (ch *otlpChannel) detach(sub *subscription) {
	ts := &ch.s.telemetry
	ts.mu.Lock()
	os := ts.subs[sub]
	delete(ts.subs, sub)
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

// subFor returns the otlpSub of sub, creating it.
func (ts *telemetryState) subFor(ch *otlpChannel, sub *subscription) *otlpSub {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	os := ts.subs[sub]
	if os == nil {
		os = &otlpSub{ch: ch, sub: sub}
		os.snapDue.Store(true)
		ts.subs[sub] = os
	}
	return os
}

// otlpSub is one subscription to a telemetry channel: a telemetry.Subscriber
// for the Hub and, when windowed, the delivery.Source of its stream.
type otlpSub struct {
	ch       *otlpChannel
	sub      *subscription
	detached atomic.Bool

	snapDue atomic.Bool
	latest  atomic.Pointer[telemetry.Batch] // metrics: newest batch offered
	need    atomic.Int64                    // metrics: credit a batch needs (UTF-16 bytes)
	sent    uint64                          // metrics: seq of the last batch sent (writer goroutine)
	cursor  atomic.Uint64                   // logs: ring seq read up to
}

// Ready implements telemetry.Subscriber. A windowed subscription is ready
// when its credit covers a whole batch (the last one's size with room for
// the fragments' envelopes and escaping), or, with a window smaller than
// that, when nothing is outstanding: a batch that started could otherwise
// stall half-sent and arrive old once credit comes. An ordinary one is
// ready with headroom in its connection's FIFO.
func (os *otlpSub) Ready() bool {
	if os.detached.Load() {
		return false
	}
	if st := os.sub.out; st != nil {
		if st.Removed() || !st.CanStart() {
			return false
		}
		sent, consumed, l := st.Window()
		outstanding := sent - consumed
		need := delivery.UTF16Bytes(os.need.Load())
		if need > l.WindowBytes {
			return outstanding == 0
		}
		return outstanding+need <= l.WindowBytes
	}
	os.sub.mu.Lock()
	active := os.sub.active
	os.sub.mu.Unlock()
	if !active {
		return false
	}
	_, _, queued := os.sub.c.sched.QueueLens()
	return queued < ordinaryTelemetryHeadroom
}

// Offer implements telemetry.Subscriber.
func (os *otlpSub) Offer(b *telemetry.Batch) {
	if st := os.sub.out; st != nil {
		// Fragments escape the message into a JSON string and add an
		// envelope each: budget half as much again.
		os.need.Store(int64(delivery.Measure(b.Text)) * 3 / 2)
		os.latest.Store(b)
		st.Wake()
		return
	}
	os.pushOrdinary(b.Text)
}

// pushOrdinary queues text on the connection's ordinary FIFO while the
// subscription is active and still the connection's one for its channel.
func (os *otlpSub) pushOrdinary(text []byte) {
	sub := os.sub
	if os.detached.Load() || sub.c.subscription(sub.channel) != sub {
		return
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.active {
		return
	}
	if _, err := sub.c.sched.TryPushOrdinary(sub.channel, 0, text, ordinaryTelemetryHeadroom); err != nil {
		go sub.c.fail(err)
	}
}

// Next implements delivery.Source (the Scheduler's writer goroutine):
// channel/snapshot first, then the newest batch not yet sent (metrics) or
// the records logged since the last message (logs), else nil.
func (os *otlpSub) Next() []byte {
	ch := os.ch
	if os.snapDue.Swap(false) {
		text, _ := rpc.Notification(rpc.MethodChannelSnapshot, rpc.ChannelSnapshotParams{
			Channel:  ch.name,
			Snapshot: rpc.Snapshot{Resource: ch.name, State: json.RawMessage(`{}`), FromSeq: ch.s.journal.Seq()},
		})
		return text
	}
	if ch.logs {
		return os.nextLogs()
	}
	b := os.latest.Load()
	if b == nil || b.Seq <= os.sent {
		return nil
	}
	os.sent = b.Seq
	return b.Text
}

// nextLogs encodes the records after the cursor at the channel's level,
// or returns nil when there are none.
func (os *otlpSub) nextLogs() []byte {
	ts := &os.ch.s.telemetry
	for {
		recs, cursor, _ := ts.ring.Read(os.cursor.Load(), os.ch.level, 128)
		os.cursor.Store(cursor)
		if len(recs) == 0 {
			return nil
		}
		payload, err := telemetry.EncodeLogs(ts.sampler.Resource(), recs)
		if err != nil {
			continue // cannot happen with string attributes; skip these records
		}
		return telemetry.Notification(telemetry.MethodExportLogs, os.ch.name, payload)
	}
}

// updateLogLevelLocked keeps the ring at the lowest level any log
// subscriber wants (hclog.Off without subscribers: logging then costs one
// atomic load).
func (ts *telemetryState) updateLogLevelLocked() {
	lowest := hclog.Off
	for os := range ts.logSubs {
		lowest = min(lowest, os.ch.level)
	}
	ts.ring.SetMinLevel(lowest)
}

func (ts *telemetryState) wakeLogs() {
	select {
	case ts.logWake <- struct{}{}:
	default:
	}
}

// startLogsLocked starts the logs pump if it is not running.
func (ts *telemetryState) startLogsLocked() {
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
func (ts *telemetryState) pumpLogs() {
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
		subs := make([]*otlpSub, 0, len(ts.logSubs))
		for os := range ts.logSubs {
			subs = append(subs, os)
		}
		ts.mu.Unlock()
		for _, os := range subs {
			if st := os.sub.out; st != nil {
				st.Wake()
				continue
			}
			for os.Ready() {
				text := os.nextLogs()
				if text == nil {
					break
				}
				os.pushOrdinary(text)
			}
		}
	}
}

// selfStats is the sidecar's own figures for the sidecar.* metrics.
func (s *Server) selfStats() telemetry.Self {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	st := telemetry.Self{
		Clients:       len(conns),
		BytesSent:     s.telemetry.bytesSent.Load(),
		BytesReceived: s.telemetry.bytesReceived.Load(),
	}
	st.Gaps = s.closedGaps.Load()
	wait := time.Duration(s.closedCreditWait.Load())
	for _, c := range conns {
		st.Subscriptions += c.subCount()
		st.Gaps += c.sched.Gaps()
		wait += c.sched.CreditWait()
	}
	st.CreditWait = wait
	return st
}

// TelemetryStats returns the sampler's counters (for tests and the benchmark).
func (s *Server) TelemetryStats() telemetry.HubStats { return s.telemetry.hub.Stats() }

// countConn wraps a connection's transport so that the bytes it carries
// count in sidecar.io (ServeConn wraps every connection).
func (s *Server) countConn(mc transport.MessageConn) transport.MessageConn {
	return &countingConn{MessageConn: mc, ts: &s.telemetry}
}

type countingConn struct {
	transport.MessageConn
	ts *telemetryState
}

func (c *countingConn) ReadMessage(ctx context.Context) ([]byte, error) {
	b, err := c.MessageConn.ReadMessage(ctx)
	c.ts.bytesReceived.Add(uint64(len(b)))
	return b, err
}

// RecycleRead implements transport.ReadRecycler as the wrapped conn does.
func (c *countingConn) RecycleRead(b []byte) { transport.RecycleRead(c.MessageConn, b) }

// WriteReleases implements transport.Releaser as the wrapped conn does.
func (c *countingConn) WriteReleases() bool { return transport.WriteReleases(c.MessageConn) }

func (c *countingConn) WriteMessage(ctx context.Context, text []byte) error {
	err := c.MessageConn.WriteMessage(ctx, text)
	if err == nil {
		c.ts.bytesSent.Add(uint64(len(text)))
	}
	return err
}
