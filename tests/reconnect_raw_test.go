package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// resumeOffer is the resume extension of an initialize or reconnect
// result (docs/protocol.md "reconnect").
type resumeOffer struct {
	Resume struct {
		Token   string `json:"token"`
		GraceMs int64  `json:"graceMs"`
	} `json:"resume"`
}

// dialRelayed opens a raw /ahp WebSocket to s through relay address addr.
func dialRelayed(t *testing.T, s *server, url, addr string) *rawConn {
	t.Helper()
	return (&server{p: s.p, url: url, host: addr, token: s.token, hash: s.hash}).dialRaw(t)
}

// reconnectParams is a reconnect of clientID with token, keeping the
// windowed subscription ch (if not empty) from serverSeq last.
func reconnectParams(clientID, token, ch string, last uint64) map[string]any {
	p := map[string]any{
		"channel": "ahp-root://", "clientId": clientID, "lastSeenServerSeq": 0,
		"subscriptions": []string{}, "resumeToken": token,
	}
	if ch != "" {
		p["subscriptions"] = []string{ch}
		p["windows"] = map[string]any{"items": []any{map[string]any{
			"channel":              ch,
			"flowControl":          map[string]any{"receive": map[string]any{"windowBytes": 1 << 20, "maximumFrameBytes": 1 << 20}},
			"lastAppliedServerSeq": last,
		}}}
	}
	return p
}

// errorKind is the data.kind of an error response.
func errorKind(m message) string {
	var d struct {
		Kind string `json:"kind"`
	}
	if m.Error != nil {
		_ = json.Unmarshal(m.Error.Data, &d)
	}
	return d.Kind
}

// TestReconnectTokenThroughBinary: through the real daemon, a client cut
// off mid-session keeps its state for a reconnect with its resume token
// only: a wrong token is -32009 "refused" (and logged) and leaves the
// connection uninitialized; a client that detached cleanly has nothing
// kept (-32008 "expired"); the right token resumes. Then its windowed
// telemetry subscription resumes live: the first batch after the
// reconnect was sampled after it, not one held from before the cut.
func TestReconnectTokenThroughBinary(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	const ch = "ahp-otlp://metrics"

	a := dialRelayed(t, s, url, relay.Addr())
	var offer resumeOffer
	if err := json.Unmarshal(a.initialize("lid").Result, &offer); err != nil || offer.Resume.Token == "" || offer.Resume.GraceMs <= 0 {
		t.Fatalf("initialize offered no resume: %+v, %v", offer, err)
	}
	a.mustCall("subscribe", map[string]any{"channel": ch, "flowControl": map[string]any{"receive": map[string]any{"windowBytes": 1 << 20, "maximumFrameBytes": 1 << 20}}})
	a.waitNotification("a first metrics batch", func(m message) bool {
		return m.channelOf() == ch && m.Method != "channel/snapshot"
	})

	// A second client that detaches cleanly keeps nothing.
	d := s.dialRaw(t)
	var dOffer resumeOffer
	_ = json.Unmarshal(d.initialize("detached").Result, &dOffer)
	if err := d.c.Close(websocket.StatusNormalClosure, "detach"); err != nil {
		t.Fatalf("close: %v", err)
	}

	relay.Cut()

	b := dialRelayed(t, s, url, relay.Addr())
	wrong := strings.Repeat("x", len(offer.Resume.Token))
	if m := b.call("reconnect", reconnectParams("lid", wrong, ch, 0)); m.Error == nil || m.Error.Code != -32009 || errorKind(m) != "refused" {
		t.Fatalf("reconnect with a wrong token: %s", m.raw)
	}
	if m := b.call("subscribe", map[string]any{"channel": "ahp-root://"}); m.Error == nil {
		t.Fatalf("a refused reconnect initialized the connection: %s", m.raw)
	}
	s.p.stderr.waitFor(t, "the refusal's log line", 0, `"@message":"reconnect refused"`)
	if m := b.call("reconnect", reconnectParams("detached", dOffer.Resume.Token, "", 0)); m.Error == nil || m.Error.Code != -32008 || errorKind(m) != "expired" {
		t.Fatalf("reconnect of a client that detached: %s", m.raw)
	}

	c := dialRelayed(t, s, url, relay.Addr())
	resumed := time.Now()
	m := c.mustCall("reconnect", reconnectParams("lid", offer.Resume.Token, ch, 0))
	var res struct {
		Windows struct {
			Items []struct {
				Channel  string `json:"channel"`
				Recovery string `json:"recovery"`
			} `json:"items"`
		} `json:"windows"`
	}
	if err := json.Unmarshal(m.Result, &res); err != nil || len(res.Windows.Items) != 1 || res.Windows.Items[0].Recovery != "live" {
		t.Fatalf("reconnect: %s", m.raw)
	}
	first := c.waitNotification("the first metrics batch after the reconnect", func(m message) bool { return m.channelOf() == ch })
	text := string(first.raw)
	if first.Method == "channel/frame" {
		var f struct {
			Data string `json:"data"`
		}
		_ = json.Unmarshal(first.Params, &f)
		text = f.Data
	}
	const stamp = `"timeUnixNano":"`
	i := strings.Index(text, stamp)
	if i < 0 {
		t.Fatalf("no timeUnixNano in the first batch after the reconnect: %.300s", text)
	}
	var ns int64
	if _, err := fmt.Sscanf(text[i+len(stamp):], "%d", &ns); err != nil {
		t.Fatal(err)
	}
	if sampled := time.Unix(0, ns); sampled.Before(resumed.Add(-time.Second)) {
		t.Errorf("first batch after the reconnect sampled at %v, before the reconnect at %v", sampled, resumed)
	}
}
