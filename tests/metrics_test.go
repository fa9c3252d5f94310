package tests

import (
	"bufio"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsLine is the log line of the metrics listener (JSON, keys sorted).
var metricsLine = regexp.MustCompile(`"@message":"metrics listening"[^\n]*"address":"([^"]+)"`)

// scrapeMetrics GETs http://addr/metrics and returns each sample's value
// by its series as the exposition writes it: name{label="value",...}.
func scrapeMetrics(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	c := &http.Client{Timeout: waitTimeout}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	got := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad sample line %q: %v", line, err)
		}
		got[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestMetricsEndpoint starts sidecar serve with metrics.listen on port
// 0, does some work over /ahp (a terminal, a subscription, pings, a
// client that leaves) and scrapes /metrics: the series of that work with
// their values, the Go runtime's and the process's. Without a metrics
// block nothing listens for metrics.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	s := startServer(t, "metrics {\n  listen = \"127.0.0.1:0\"\n}\n")
	var m []string
	if _, ok := s.p.stderr.waitMatch(waitTimeout, func(text string) bool {
		m = metricsLine.FindStringSubmatch(text)
		return m != nil
	}); !ok {
		t.Fatalf("no metrics listening line in the log:\n%s", tail(s.p.stderr.String(), 3000))
	}
	addr := m[1]
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("metrics address %q, want 127.0.0.1 and the port picked", addr)
	}

	got := scrapeMetrics(t, addr)
	for series, want := range map[string]float64{
		`sidecar_connections_open{transport="websocket"}`:  0,
		`sidecar_connections_total{transport="websocket"}`: 0,
		"sidecar_terminals":               0,
		"sidecar_received_messages_total": 0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("at start: %s = %v (present %v), want %v", series, v, ok, want)
		}
	}

	rc := s.dialRaw(t)
	var sentBytes int
	send := func(text string) {
		rc.send(text)
		sentBytes += len(text)
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"channel":"ahp-root://","protocolVersions":["0.5.0"],"clientId":"metrics-e2e"}}`)
	rc.response(1, nil)
	const ch = "ahp-terminal:/metrics-e2e"
	send(`{"jsonrpc":"2.0","id":2,"method":"createTerminal","params":{"channel":"` + ch + `","command":["sh","-c","echo metrics-hello; exec sleep 100"]}}`)
	if r := rc.response(2, nil); r.Error != nil {
		t.Fatalf("createTerminal: %s", r.raw)
	}
	send(`{"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel":"` + ch + `"}}`)
	// The terminal reads its output once its holder subscribed: an
	// action after the snapshot.
	hello := func(m message) bool { return strings.Contains(string(m.raw), "metrics-hello") }
	seen := false
	rc.response(3, func(m message) { seen = seen || hello(m) })
	if !seen {
		rc.waitNotification("the terminal's output", hello)
	}
	for i := 4; i < 6; i++ {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"channel":"ahp-root://"}}`, i))
		rc.response(i, nil)
	}

	got = scrapeMetrics(t, addr)
	for series, want := range map[string]float64{
		`sidecar_connections_open{transport="websocket"}`:    1,
		`sidecar_connections_total{transport="websocket"}`:   1,
		`sidecar_connections_open{transport="webtransport"}`: 0,
		"sidecar_terminals": 1,
		`sidecar_subscriptions{delivery="ordinary",kind="terminal"}`: 1,
		`sidecar_subscriptions{delivery="windowed",kind="terminal"}`: 0,
		"sidecar_received_messages_total":                            5,
		"sidecar_received_bytes_total":                               float64(sentBytes),
		"sidecar_overloaded_total":                                   0,
		`sidecar_disconnects_total{reason="client_close"}`:           0,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("after the work: %s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	// Five answers and the terminal's output at least (more may be on its
	// way). A message counts once its write returned, which may be after
	// the client read it and scraped: the last answer can lag.
	for deadline := time.Now().Add(waitTimeout); got["sidecar_sent_messages_total"] < 6; {
		if time.Now().After(deadline) {
			t.Fatalf("sidecar_sent_messages_total = %v after %v, want at least 6", got["sidecar_sent_messages_total"], waitTimeout)
		}
		time.Sleep(20 * time.Millisecond) // polling the endpoint: it has no event to wait on
		got = scrapeMetrics(t, addr)
	}
	for _, series := range []string{"go_goroutines", "process_start_time_seconds", "process_resident_memory_bytes"} {
		if got[series] <= 0 {
			t.Errorf("%s = %v, want a positive value", series, got[series])
		}
	}

	// The client leaves (1000): a disconnect "client_close", nothing open.
	// The disconnect is counted as the connection ends, the open gauge
	// lowered once its teardown is done: wait for both.
	_ = rc.c.Close(1000, "done")
	deadline := time.Now().Add(waitTimeout)
	for {
		got = scrapeMetrics(t, addr)
		if got[`sidecar_disconnects_total{reason="client_close"}`] == 1 && got[`sidecar_connections_open{transport="websocket"}`] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no client_close disconnect with nothing open within %v: disconnects %v, open %v", waitTimeout,
				got[`sidecar_disconnects_total{reason="client_close"}`], got[`sidecar_connections_open{transport="websocket"}`])
		}
		time.Sleep(20 * time.Millisecond) // polling the endpoint: it has no event to wait on
	}
	if got[`sidecar_connections_open{transport="websocket"}`] != 0 || got["sidecar_received_messages_total"] != 5 {
		t.Errorf("after the client left: connections %v, received messages %v; want 0 and 5",
			got[`sidecar_connections_open{transport="websocket"}`], got["sidecar_received_messages_total"])
	}

	// Off unless configured.
	plain := startServer(t, "")
	// "metrics listening" would come before "listening".
	plain.p.stderr.waitFor(t, "the listening line", 0, `"@message":"listening"`)
	if strings.Contains(plain.p.stderr.String(), "metrics listening") {
		t.Errorf("a server without a metrics block opened a metrics listener:\n%s", tail(plain.p.stderr.String(), 2000))
	}
}
