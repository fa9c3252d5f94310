package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// tally counts what the client end of a pipe wrote and read: exactly what
// the host read and wrote.
type tally struct {
	transport.MessageConn
	sentBytes, sentMsgs, readBytes, readMsgs atomic.Int64
}

func (c *tally) WriteMessage(ctx context.Context, text []byte) error {
	err := c.MessageConn.WriteMessage(ctx, text)
	if err == nil {
		c.sentBytes.Add(int64(len(text)))
		c.sentMsgs.Add(1)
	}
	return err
}

func (c *tally) ReadMessage(ctx context.Context) ([]byte, error) {
	b, err := c.MessageConn.ReadMessage(ctx)
	if err == nil {
		c.readBytes.Add(int64(len(b)))
		c.readMsgs.Add(1)
	}
	return b, err
}

// connectPipe serves one end of a Pipe of capacity messages with srv and
// returns the other, counted; the cleanup closes it (if the test did not)
// and waits for the host to end the connection.
func connectPipe(t *testing.T, srv *host.Server, capacity int) (*hostConn, *tally) {
	t.Helper()
	a, b := transport.Pipe(capacity)
	tl := &tally{MessageConn: a}
	hc := &hostConn{t: t, mc: tl, served: make(chan error, 1), nextID: 1}
	go func() { hc.served <- srv.ServeConn(context.Background(), b) }()
	t.Cleanup(func() {
		_ = a.Close(transport.CloseNormal, "test done")
		select {
		case err := <-hc.served:
			hc.served <- err
		case <-time.After(deadline):
			t.Error("ServeConn did not return after the client closed")
		}
	})
	return hc, tl
}

// end closes hc's transport with code and waits until the host has
// processed the connection's end (counted its disconnect).
func (hc *hostConn) end(code transport.CloseCode) {
	hc.t.Helper()
	_ = hc.mc.Close(code, "done")
	select {
	case err := <-hc.served:
		hc.served <- err // for the cleanup
	case <-time.After(deadline):
		hc.t.Fatal("the host did not end the connection")
	}
}

// scrape is one scrape of a metrics endpoint: series by name, then by
// their labels as `k="v",...` (sorted by name, as the exposition has them).
type scrape map[string]map[string]float64

func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the exposition: %v", err)
	}
	s := scrape{}
	for name, f := range fams {
		s[name] = map[string]float64{}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			s[name][strings.Join(labels, ",")] = value(f.GetType(), m)
		}
	}
	return s
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// check compares the series of s that want names (name{labels} or name)
// with their values.
func (s scrape) check(t *testing.T, step string, want map[string]float64) {
	t.Helper()
	for series, w := range want {
		name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		got, ok := s[name][labels]
		if !ok {
			t.Errorf("%s: no series %s", step, series)
			continue
		}
		if got != w {
			t.Errorf("%s: %s = %v, want %v", step, series, got, w)
		}
	}
}

// TestMetricsScrape scrapes sidecar serve's metrics handler
// (host.MetricsHandler) after real activity on the host and checks the
// exact values: traffic against what the client end counted, an
// Overloaded answer, a windowed subscription whose window filled once (a
// credit wait), an ordinary subscription that did not read while a
// terminal flooded (its backlog collapsed into channel/gap: the gaps and
// the messages dropped against what the client read and the journal
// kept), subscriptions and terminals open, disconnects by reason, and
// the three results of reconnect. Over pipes only: B's FIFO overflows
// behind a pipe of 2 messages (a socket's buffers would take it all);
// the traffic and the transport label over every transport are
// TestTrafficCounted's.
func TestMetricsScrape(t *testing.T) {
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	srv := newServer(t, func(c *config.Config) {
		c.Delivery.MaxConcurrentRequests = 2
		c.Delivery.OrdinaryQueueMessages = 8
	})
	srv.SetRequestHook(func(method string) {
		if method == rpc.MethodPing {
			select {
			case entered <- struct{}{}: // the first ping only
				<-gate
			default:
			}
		}
	})
	ts := httptest.NewServer(host.MetricsHandler(srv))
	defer ts.Close()

	// The host's metrics follow the naming conventions, and each family
	// has its bounded set of series from the start.
	if problems, err := testutil.CollectAndLint(srv.Collector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	for name, n := range map[string]int{
		"sidecar_connections_open": 5, "sidecar_disconnects_total": 10, "sidecar_subscriptions": 22,
		"sidecar_dropped_total": 7, "sidecar_datagrams_dropped_total": 4, "sidecar_resumes_total": 3,
		"sidecar_tcp_channels": 3, "sidecar_gaps_total": 1,
	} {
		if got := testutil.CollectAndCount(srv.Collector(), name); got != n {
			t.Errorf("%s has %d series, want %d", name, got, n)
		}
	}

	// A: requests only, so that what it carried is known exactly. Ping 1
	// is held in the lane, ping 2 waits behind it: ping 3 is Overloaded.
	a, at := connectPipe(t, srv, 4096)
	a.initialize("metrics-a")
	a.send(`{"jsonrpc":"2.0","id":100,"method":"ping","params":{"channel":"ahp-root://"}}`)
	<-entered
	a.send(`{"jsonrpc":"2.0","id":101,"method":"ping","params":{"channel":"ahp-root://"}}`)
	a.send(`{"jsonrpc":"2.0","id":102,"method":"ping","params":{"channel":"ahp-root://"}}`)
	if m, _ := a.until("the answer to ping 102", func(m *msg) bool { return m.isResponse(102) }); m.Error == nil || m.Error.Code != rpc.CodeOverloaded {
		t.Fatalf("ping 102: %s, want -32050 Overloaded", m.Raw)
	}
	close(gate)
	a.until("the answer to ping 100", func(m *msg) bool { return m.isResponse(100) })
	a.until("the answer to ping 101", func(m *msg) bool { return m.isResponse(101) })
	s := scrapeURL(t, ts.URL)
	traffic := map[string]float64{
		"sidecar_received_bytes_total":    float64(at.sentBytes.Load()),
		"sidecar_received_messages_total": 4, // initialize and three pings
		"sidecar_sent_bytes_total":        float64(at.readBytes.Load()),
		"sidecar_sent_messages_total":     4,
	}
	s.check(t, "after A's requests", traffic)
	s.check(t, "after A's requests", map[string]float64{
		`sidecar_connections_open{transport="other"}`:     1,
		`sidecar_connections_total{transport="other"}`:    1,
		`sidecar_connections_open{transport="websocket"}`: 0,
		"sidecar_overloaded_total":                        1,
	})
	a.end(transport.CloseNormal)
	// Its counters moved to the host's totals: neither lost nor counted twice.
	s = scrapeURL(t, ts.URL)
	s.check(t, "after A closed", traffic)
	s.check(t, "after A closed", map[string]float64{
		`sidecar_connections_open{transport="other"}`:      0,
		`sidecar_disconnects_total{reason="client_close"}`: 1,
	})

	// C: a windowed subscription to a flooding terminal it holds (so its
	// window paces it), read up to the window and never credited: the
	// window filled once.
	c, _ := connectPipe(t, srv, 4096)
	c.initialize("metrics-c")
	const flood = "ahp-terminal:/metrics-yes"
	c.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: flood, Command: []string{"yes"}})
	const window = 4096
	c.mustCall(rpc.MethodSubscribe, windowed(flood, window, 1024))
	var received int64
	for received < window {
		c.until("data on "+flood, func(m *msg) bool {
			if m.Method != "" && m.Method != rpc.MethodChannelCredit && m.channel() == flood {
				received += 2 * int64(len(m.Raw)) // ASCII
				return true
			}
			return false
		})
	}

	// B: ordinary subscriptions to the root and to a terminal that writes
	// 100 kB and exits, over a pipe of 2 messages, not read meanwhile: its
	// FIFO (8) collapses into channel/gap.
	b, _ := connectPipe(t, srv, 2)
	bres := b.initialize("metrics-b", rpc.RootChannel)
	rootFrom := bres.Snapshots[0].FromSeq
	const out = "ahp-terminal:/metrics-out"
	exited := make(chan struct{}, 1)
	srv.Journal().Listen(out, t, func(_ string, e journal.Entry) {
		if bytes.Contains(e.Text, []byte(`"`+rpc.ActionTerminalExited+`"`)) {
			select {
			case exited <- struct{}{}:
			default:
			}
		}
	}, nil)
	defer srv.Journal().Unlisten(out, t)
	b.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: out,
		Command: []string{"sh", "-c", "stty raw -echo; head -c 100000 /dev/zero | tr '\\0' y"}})
	r, _ := b.mustCall(rpc.MethodSubscribe, map[string]any{"channel": out})
	var sub rpc.SubscribeResult
	if err := json.Unmarshal(r.Result, &sub); err != nil || sub.Snapshot == nil {
		t.Fatalf("subscribe %s: %s", out, r.Raw)
	}
	select {
	case <-exited: // every action of out is queued (or collapsed) now
	case <-time.After(deadline):
		t.Fatal("the terminal did not exit")
	}
	// The barrier: a root action queued after everything else; every gap
	// queued before it is written before it.
	const last = "ahp-terminal:/metrics-last"
	b.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":500,"method":"createTerminal","params":{"channel":%q,"command":["sleep","100"]}}`, last))
	read := map[string]map[uint64]bool{rpc.RootChannel: {}, out: {}}
	gaps := 0
	answered, barrier := false, uint64(0)
	for !answered || barrier == 0 {
		var m *msg
		if len(b.pending) > 0 { // read while waiting for an answer before
			m, b.pending = b.pending[0], b.pending[1:]
		} else {
			var err error
			if m, err = b.read(); err != nil {
				t.Fatalf("reading B: %v", err)
			}
		}
		switch {
		case m.isResponse(500):
			answered = true
		case m.Method == rpc.MethodChannelGap:
			gaps++
		case m.Method == rpc.MethodAction:
			typ, raw, env := m.action()
			read[env.Channel][env.ServerSeq] = true
			if typ == rpc.ActionRootTerminals && strings.Contains(string(raw), last) {
				barrier = env.ServerSeq
			}
		}
	}
	if gaps == 0 {
		t.Fatal("no channel/gap: the test did not overflow B's FIFO")
	}
	// The actions up to the barrier not read were collapsed: the journal
	// has them all.
	dropped := 0
	for ch, from := range map[string]uint64{rpc.RootChannel: rootFrom, out: sub.Snapshot.FromSeq} {
		es, err := srv.Journal().Read(ch, from, 0)
		if err != nil {
			t.Fatalf("journal of %s: %v", ch, err)
		}
		for _, e := range es {
			if !read[ch][e.Seq] && e.Seq < barrier {
				dropped++
			}
		}
	}
	s = scrapeURL(t, ts.URL)
	s.check(t, "after B's flood", map[string]float64{
		"sidecar_gaps_total": float64(gaps),
		`sidecar_dropped_total{reason="ordinary_backlog"}`:           float64(dropped),
		"sidecar_credit_waits_total":                                 1,
		"sidecar_credit_wait_seconds_total":                          0, // not ended yet
		`sidecar_connections_open{transport="other"}`:                2,
		`sidecar_connections_total{transport="other"}`:               3,
		`sidecar_subscriptions{delivery="ordinary",kind="root"}`:     1,
		`sidecar_subscriptions{delivery="ordinary",kind="terminal"}`: 1,
		`sidecar_subscriptions{delivery="windowed",kind="terminal"}`: 1,
		`sidecar_subscriptions{delivery="windowed",kind="root"}`:     0,
		"sidecar_terminals":                                          3,
		`sidecar_tcp_channels{state="open"}`:                         0,
		"sidecar_overloaded_total":                                   1,
		`sidecar_dropped_total{reason="unknown_event"}`:              0,
		`sidecar_datagrams_dropped_total{reason="overflow"}`:         0,
		`sidecar_disconnects_total{reason="lost"}`:                   0,
	})
	t.Logf("B: %d gaps, %d actions dropped", gaps, dropped)

	// B's transport is lost: its state is kept. D resumes it after two
	// reconnects that fail: one for a client nobody kept, one with
	// another token.
	b.end(transport.CloseInternalError)
	c.end(transport.CloseNormal)
	if n := srv.RetainedClients(); n != 1 {
		t.Fatalf("%d clients retained, want B", n)
	}
	scrapeURL(t, ts.URL).check(t, "after B was lost", map[string]float64{
		"sidecar_retained_clients":                         1,
		`sidecar_disconnects_total{reason="lost"}`:         1,
		`sidecar_disconnects_total{reason="client_close"}`: 2,
	})
	d, _ := connectPipe(t, srv, 4096)
	reconnect := func(clientID, token string) *msg {
		m, _ := d.call(rpc.MethodReconnect, rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: clientID,
			ResumeToken: token, Subscriptions: []string{}})
		return m
	}
	if m := reconnect("metrics-nobody", bres.Resume.Token); m.Error == nil {
		t.Fatalf("reconnect of a client nobody kept: %s", m.Raw)
	}
	if m := reconnect("metrics-b", "not-the-token"); m.Error == nil {
		t.Fatalf("reconnect with another token: %s", m.Raw)
	}
	if m := reconnect("metrics-b", bres.Resume.Token); m.Error != nil {
		t.Fatalf("reconnect: %s", m.Raw)
	}
	scrapeURL(t, ts.URL).check(t, "after the reconnects", map[string]float64{
		`sidecar_resumes_total{result="resumed"}`:                    1,
		`sidecar_resumes_total{result="refused"}`:                    1,
		`sidecar_resumes_total{result="expired"}`:                    1,
		"sidecar_retained_clients":                                   0,
		`sidecar_connections_open{transport="other"}`:                1,
		`sidecar_connections_total{transport="other"}`:               4,
		`sidecar_subscriptions{delivery="ordinary",kind="terminal"}`: 0,
		`sidecar_subscriptions{delivery="windowed",kind="terminal"}`: 0,
	})
}

// TestViolationNotRetained: a connection that ends in a protocol
// violation (a message too big, text that is not UTF-8, a protocol error)
// is counted as protocol_error and its client's state is not kept for a
// reconnect: it was not lost. Over the pipe only: its close codes stand
// for the transport's own verdicts, which a real client cannot send
// (transport-io maps 1007 to a normal close).
func TestViolationNotRetained(t *testing.T) {
	srv := newServer(t, nil)
	ts := httptest.NewServer(host.MetricsHandler(srv))
	defer ts.Close()
	for i, code := range []transport.CloseCode{transport.CloseMessageTooBig, transport.CloseInvalidPayload, transport.CloseProtocolError} {
		hc, _ := connectPipe(t, srv, 64)
		hc.initialize(fmt.Sprintf("violator-%d", i))
		hc.end(code)
	}
	if n := srv.RetainedClients(); n != 0 {
		t.Errorf("%d clients retained after violations, want 0", n)
	}
	scrapeURL(t, ts.URL).check(t, "after the violations", map[string]float64{
		`sidecar_disconnects_total{reason="protocol_error"}`: 3,
		`sidecar_disconnects_total{reason="lost"}`:           0,
		"sidecar_retained_clients":                           0,
	})
}
