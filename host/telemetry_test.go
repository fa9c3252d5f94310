package host

import (
	"context"
	"encoding/json"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/tidwall/gjson"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// telClock is the injected clock of the telemetry Hub: the test fires the
// ticker by hand and waits for the tick to finish.
type telClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers chan *telTicker
}

type telTicker struct{ c chan time.Time }

func (t *telTicker) C() <-chan time.Time { return t.c }
func (t *telTicker) Stop()               {}

func (c *telClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *telClock) NewTicker(time.Duration) telemetry.Ticker {
	t := &telTicker{c: make(chan time.Time)}
	c.tickers <- t
	return t
}

// checkLeaks verifies, after every other cleanup (the server's shutdown
// included), that the test left no goroutine behind.
func checkLeaks(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// telHarness is a Server whose telemetry Hub ticks only when told.
type telHarness struct {
	t     *testing.T
	s     *Server
	clock *telClock
	done  chan bool
	tk    *telTicker
}

func newTelHarness(t *testing.T) *telHarness {
	t.Helper()
	cfg := config.Default()
	cfg.Terminal.Shell = "/bin/sh"
	cfg.Terminal.Login = false
	// The Scheduler's quantum is maximum_frame_bytes, and it currently
	// stalls an ordinary message larger than two quanta (a batch is about
	// 35 KB as UTF-16) until something else wakes it: reported; until it
	// is fixed the ordinary test runs with a larger quantum.
	cfg.Delivery.MaximumFrameBytes = 128 << 10
	h := &telHarness{t: t, s: mustNew(t, cfg, hclog.New(&hclog.LoggerOptions{Name: "sidecar", Output: io.Discard, Level: hclog.Error})), done: make(chan bool),
		clock: &telClock{now: time.Unix(1736870400, 0), tickers: make(chan *telTicker, 4)}}
	h.s.telemetryChannels().Hub().SetTestHooks(h.clock, h.done)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return h
}

// tick moves the clock one second, fires the Hub's ticker and reports
// whether it sampled.
func (h *telHarness) tick() bool {
	h.t.Helper()
	if h.tk == nil {
		select {
		case h.tk = <-h.clock.tickers:
		case <-time.After(10 * time.Second):
			h.t.Fatal("the Hub did not start")
		}
	}
	h.clock.mu.Lock()
	h.clock.now = h.clock.now.Add(time.Second)
	now := h.clock.now
	h.clock.mu.Unlock()
	select {
	case h.tk.c <- now:
	case <-time.After(10 * time.Second):
		h.t.Fatal("the Hub does not take ticks")
	}
	return <-h.done
}

// rawPeer is a client end speaking raw JSON texts.
type rawPeer struct {
	t  *testing.T
	mc transport.MessageConn
}

func (h *telHarness) dialRaw(ct conntypes.Type) *rawPeer {
	return &rawPeer{t: h.t, mc: h.dial(ct)}
}

// dial connects to h's server over ct (conntypes.Connect); the cleanup
// closes the connection and waits until the host has ended it.
func (h *telHarness) dial(ct conntypes.Type) transport.MessageConn {
	done := make(chan struct{})
	mc := conntypes.Connect(h.t, ct, func(ctx context.Context, mc transport.MessageConn) {
		defer close(done)
		_ = h.s.ServeConn(ctx, mc)
	})
	h.t.Cleanup(func() {
		_ = mc.Close(transport.CloseNormal, "")
		<-done
	})
	return mc
}

func (p *rawPeer) send(text string) {
	p.t.Helper()
	if err := p.mc.WriteMessage(context.Background(), []byte(text)); err != nil {
		p.t.Fatal(err)
	}
}

// next returns the next message, failing after 10 s.
func (p *rawPeer) next() []byte {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := p.mc.ReadMessage(ctx)
	if err != nil {
		p.t.Fatalf("reading: %v", err)
	}
	return b
}

type rawMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
	Params struct {
		Channel  string          `json:"channel"`
		Payload  json.RawMessage `json:"payload"`
		Snapshot *rpc.Snapshot   `json:"snapshot"`
	} `json:"params"`
}

func decodeRaw(t *testing.T, b []byte) rawMsg {
	t.Helper()
	var m rawMsg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func (p *rawPeer) initialize() rawMsg {
	p.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["0.5.0"],"clientId":"tel"}}`)
	return decodeRaw(p.t, p.next())
}

// TestTelemetryAdvertised: initialize names both telemetry channels.
func TestTelemetryAdvertised(t *testing.T) {
	checkLeaks(t)
	h := newTelHarness(t)
	p := h.dialRaw(conntypes.Pipe)
	m := p.initialize()
	var res rpc.InitializeResult
	if err := json.Unmarshal(m.Result, &res); err != nil || res.Telemetry == nil {
		t.Fatalf("initialize result %s", m.Result)
	}
	if res.Telemetry.Metrics != "ahp-otlp://metrics" || res.Telemetry.Logs != "ahp-otlp://logs{?level}" {
		t.Errorf("telemetry = %+v", *res.Telemetry)
	}
	for uri, ok := range map[string]bool{
		"ahp-otlp://metrics": true, "ahp-otlp://metrics?interval=5s": true, "ahp-otlp://logs": true,
		"ahp-otlp://logs?level=debug": true, "ahp-otlp://logs?level=loud": false, "ahp-otlp://traces": false,
		"ahp-otlp://metrics?interval=-1s": false, "ahp-otlp://metrics?color=red": false,
	} {
		if got := h.s.telemetryChannels().Channel(uri) != nil; got != ok {
			t.Errorf("telemetryChannel(%q) = %v, want %v", uri, got, ok)
		}
	}
	if ch := h.s.telemetryChannels().Channel("ahp-otlp://metrics?interval=100ms"); ch.Interval() != time.Second {
		t.Errorf("a faster interval than configured: %v, want clamped to 1s", ch.Interval())
	}
}

// TestTelemetryOrdinary: an ordinary subscription gets {} and then one
// otlp/exportMetrics per tick, whose payload round-trips through protojson
// and whose time stamps increase.
func TestTelemetryOrdinary(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		checkLeaks(t)
		h := newTelHarness(t)
		p := h.dialRaw(ct)
		p.initialize()
		p.send(`{"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel":"ahp-otlp://metrics"}}`)
		if m := decodeRaw(t, p.next()); string(m.ID) != "2" || string(m.Result) != "{}" {
			t.Fatalf("subscribe answered %s %s", m.Result, m.Error)
		}
		var last uint64
		for i := 0; i < 2; i++ {
			if !h.tick() {
				t.Fatal("no sample for an ordinary subscriber")
			}
			m := decodeRaw(t, p.next())
			if m.Method != "otlp/exportMetrics" || m.Params.Channel != "ahp-otlp://metrics" {
				t.Fatalf("got %s on %s", m.Method, m.Params.Channel)
			}
			md, err := telemetry.DecodeMetrics(m.Params.Payload)
			if err != nil {
				t.Fatal(err)
			}
			ts := firstTime(t, md.ResourceMetrics[0].ScopeMetrics[0].Metrics[0])
			if ts <= last {
				t.Errorf("time stamp %d after %d", ts, last)
			}
			last = ts
		}
		if want := uint64(h.clock.Now().UnixNano()); last != want {
			t.Errorf("batch stamped %d, want the tick's %d", last, want)
		}
		// The sidecar's own figures see this client.
		if st := h.s.hostStats(); st.Clients != 1 || st.Subscriptions != 1 {
			t.Errorf("hostStats = %+v", st)
		}
	})
}

// firstTime returns the time stamp of a metric's first data point.
func firstTime(t *testing.T, m *metricspb.Metric) uint64 {
	t.Helper()
	switch d := m.Data.(type) {
	case *metricspb.Metric_Gauge:
		return d.Gauge.DataPoints[0].TimeUnixNano
	case *metricspb.Metric_Sum:
		return d.Sum.DataPoints[0].TimeUnixNano
	}
	t.Fatalf("metric %s has no number points", m.Name)
	return 0
}

// dialClient connects a client.Conn over ct with the given receive
// window and initializes it.
func (h *telHarness) dialClient(ct conntypes.Type, window delivery.Limits) *client.Conn {
	h.t.Helper()
	c := client.NewConn(h.dial(ct), client.Options{ClientID: "tel-client", Receive: window})
	h.t.Cleanup(func() { _ = c.Close() })
	ictx, icancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer icancel()
	if err := c.Call(ictx, rpc.MethodInitialize, rpc.InitializeParams{Channel: rpc.RootChannel,
		ProtocolVersions: []string{"0.5.0"}, ClientID: "tel-client"}, nil); err != nil {
		h.t.Fatal(err)
	}
	return c
}

func nextMsg(t *testing.T, sub *client.Subscription) *client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("%s: %v", sub.Channel, err)
	}
	return m
}

// batchTime decodes an otlp/exportMetrics message and returns its time stamp.
func batchTime(t *testing.T, m *client.Message) uint64 {
	t.Helper()
	if m.Method != rpc.MethodOTLPExportMetrics {
		t.Fatalf("got %s, want %s", m.Method, rpc.MethodOTLPExportMetrics)
	}
	var p struct {
		Channel string          `json:"channel"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil {
		t.Fatal(err)
	}
	md, err := telemetry.DecodeMetrics(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	return firstTime(t, md.ResourceMetrics[0].ScopeMetrics[0].Metrics[0])
}

// TestTelemetryWindowedLive: a windowed subscription starts with
// channel/snapshot (state {}, fromSeq); a subscriber that holds its credit
// for 3 s misses those samples (the Hub does not even sample), and once it
// credits it gets a current sample, not an old one.
func TestTelemetryWindowedLive(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		checkLeaks(t)
		h := newTelHarness(t)
		// A window smaller than a batch (about 35 KB as UTF-16): a batch
		// fits only while nothing is outstanding.
		c := h.dialClient(ct, delivery.Limits{WindowBytes: 8 << 10, MaximumFrameBytes: 4 << 10})
		ctx := context.Background()
		sub, err := c.Subscribe(ctx, "ahp-otlp://metrics")
		if err != nil || !sub.Windowed {
			t.Fatalf("subscribe: %v windowed=%v", err, sub != nil && sub.Windowed)
		}
		m := nextMsg(t, sub)
		var snap rpc.ChannelSnapshotParams
		if err := json.Unmarshal(m.Params, &snap); err != nil || m.Method != rpc.MethodChannelSnapshot ||
			string(snap.Snapshot.State) != "{}" || snap.Snapshot.Resource != "ahp-otlp://metrics" || snap.Snapshot.FromSeq > h.s.journal.Seq() { // the ports poller may append after it
			t.Fatalf("first message %s %s", m.Method, m.Params)
		}
		m.Release()

		// Batch 1 arrives; it is held (not released, so not credited).
		if !h.tick() {
			t.Fatal("no sample")
		}
		held := nextMsg(t, sub)
		batchTime(t, held)
		if skipped := gjson.GetBytes(held.Params, "skipped"); skipped.Exists() {
			t.Errorf("the first batch says skipped %s", skipped.Raw)
		}
		// Batch 1 is held: with it outstanding the window cannot take another
		// whole batch, so the subscriber is not ready.
		msub := subOf(h, "ahp-otlp://metrics")
		// 3 s without credit: no sample at all.
		for i := 0; i < 3; i++ {
			if h.tick() {
				t.Fatal("sampled while the only subscriber had no credit")
			}
		}
		held.Release()
		// The release credits (the client caught up); wait until the host has
		// the credit.
		waitFor(t, func() bool { return h.s.telemetryChannels().Ready(msub) })
		if !h.tick() {
			t.Fatal("no sample after credit")
		}
		after := nextMsg(t, sub)
		if got, want := batchTime(t, after), uint64(h.clock.Now().UnixNano()); got != want {
			t.Errorf("after holding credit: batch of %d, want the current %d", got, want)
		}
		// The 3 samples it did not get are counted: in the batch (issue 16:
		// nothing is dropped without a mark) and in the Hub's stats.
		if skipped := gjson.GetBytes(after.Params, "skipped").Int(); skipped != 3 {
			t.Errorf("the batch after 3 missed intervals says skipped %d, want 3 (%.200s)", skipped, after.Params)
		}
		if n := h.s.TelemetryStats().SkipsReported; n != 3 {
			t.Errorf("SkipsReported = %d, want 3", n)
		}
	})
}

// subOf returns the host-side subscription of channel on the only connection.
func subOf(h *telHarness, channel string) *subscription {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	for c := range h.s.conns {
		if sub := c.subscription(channel); sub != nil {
			return sub
		}
	}
	h.t.Fatalf("no subscription to %s", channel)
	return nil
}

// waitFor polls cond (state another goroutine changes) for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTelemetryBesideFlood: a terminal flooding output on the same
// connection does not delay a batch beyond one interval (1 s).
func TestTelemetryBesideFlood(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		checkLeaks(t)
		h := newTelHarness(t)
		c := h.dialClient(ct, client.DefaultReceive)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		uri := "ahp-terminal:/flood"
		if err := c.Call(ctx, rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri,
			Command: []string{"sh", "-c", "yes 0123456789abcdefghijklmnopqrstuvwxyz"}}, nil); err != nil {
			t.Fatal(err)
		}
		term, err := c.Subscribe(ctx, uri)
		if err != nil {
			t.Fatal(err)
		}
		var flooded sync.WaitGroup
		var floodBytes int64
		var fmu sync.Mutex
		flooded.Add(1)
		go func() { // a fast reader: everything is released at once
			defer flooded.Done()
			for {
				m, err := term.Next(ctx)
				if err != nil {
					return
				}
				fmu.Lock()
				floodBytes += int64(len(m.Raw))
				fmu.Unlock()
				m.Release()
			}
		}()
		defer flooded.Wait()
		defer cancel()
		waitFor(t, func() bool { fmu.Lock(); defer fmu.Unlock(); return floodBytes > 1<<20 })

		tel, err := c.Subscribe(ctx, "ahp-otlp://metrics")
		if err != nil {
			t.Fatal(err)
		}
		nextMsg(t, tel).Release() // channel/snapshot
		for i := 0; i < 3; i++ {
			start := time.Now()
			if !h.tick() {
				t.Fatalf("no sample %d", i)
			}
			m := nextMsg(t, tel)
			if d := time.Since(start); d > time.Second {
				t.Errorf("batch %d took %v behind the flood, more than one interval", i, d)
			}
			batchTime(t, m)
			m.Release()
		}
		fmu.Lock()
		defer fmu.Unlock()
		if floodBytes < 1<<20 {
			t.Errorf("the flood moved only %d bytes", floodBytes)
		}
	})
}

// TestTelemetryLogs: ahp-otlp://logs?level=warn streams the sidecar's own
// records at warn and above as otlp/exportLogs, ordinary and windowed.
func TestTelemetryLogs(t *testing.T) {
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		checkLeaks(t)
		h := newTelHarness(t)
		p := h.dialRaw(ct)
		p.initialize()
		p.send(`{"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel":"ahp-otlp://logs?level=warn"}}`)
		if m := decodeRaw(t, p.next()); string(m.Result) != "{}" {
			t.Fatalf("subscribe answered %s %s", m.Result, m.Error)
		}
		// The channel is live only: a record logged before the
		// subscription is registered (just after its result is queued)
		// is not for it. A ping answered after it is after that.
		p.send(`{"jsonrpc":"2.0","id":3,"method":"ping","params":{}}`)
		if m := decodeRaw(t, p.next()); m.Error != nil {
			t.Fatalf("ping answered %s", m.Error)
		}
		c := h.dialClient(ct, client.DefaultReceive)
		sub, err := c.Subscribe(context.Background(), "ahp-otlp://logs?level=warn")
		if err != nil || !sub.Windowed {
			t.Fatalf("windowed subscribe: %v", err)
		}
		if m := nextMsg(t, sub); m.Method != rpc.MethodChannelSnapshot {
			t.Fatalf("first windowed message %s", m.Method)
		} else {
			m.Release()
		}
		h.s.log.Named("probe").Info("not at warn")
		h.s.log.Named("probe").Warn("disk nearly full", "mount", "/data")
		check := func(raw []byte) {
			t.Helper()
			var m struct {
				Method string
				Params struct {
					Channel string
					Payload json.RawMessage
				}
			}
			if err := json.Unmarshal(raw, &m); err != nil || m.Method != rpc.MethodOTLPExportLogs || m.Params.Channel != "ahp-otlp://logs?level=warn" {
				t.Fatalf("got %.300s", raw)
			}
			ld := &logspb.LogsData{}
			if err := protojson.Unmarshal(m.Params.Payload, ld); err != nil {
				t.Fatal(err)
			}
			recs := ld.ResourceLogs[0].ScopeLogs[0].LogRecords
			if len(recs) != 1 || recs[0].Body.GetStringValue() != "disk nearly full" || ld.ResourceLogs[0].ScopeLogs[0].Scope.Name != "sidecar.probe" {
				t.Errorf("records %v", ld)
			}
		}
		check(p.next())
		m := nextMsg(t, sub)
		check(m.Raw)
		m.Release()
	})
}
