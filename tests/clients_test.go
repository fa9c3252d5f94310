package tests

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestConnectionBoundsThroughBinary (issue 27 item 11): through the real
// daemon, a token's connections not initialized yet are bounded
// (listener.max_uninitialized), closed after listener.initialize_timeout,
// and the connection past a bound is closed 1013 naming it; a client that
// initializes still gets in once a slot frees.
func TestConnectionBoundsThroughBinary(t *testing.T) {
	t.Parallel()
	s := startServerListener(t, "  max_connections_per_principal = 4\n  max_uninitialized = 2\n  initialize_timeout = \"2s\"\n", "")
	idle := []*rawConn{s.dialRaw(t), s.dialRaw(t)}
	for _, c := range idle {
		if m := c.call("ping", nil); m.Error != nil { // served: admitted before it reads
			t.Fatalf("ping: %s", m.raw)
		}
	}
	third := s.dialRaw(t)
	_, err := third.waitClosed(10 * time.Second)
	if websocket.CloseStatus(err) != 1013 || !strings.Contains(err.Error(), "too many connections not initialized yet for this token (listener.max_uninitialized, 2)") {
		t.Fatalf("a third connection not initialized: %v, want 1013 naming listener.max_uninitialized", err)
	}
	// The idle ones are closed once initialize_timeout passes.
	for _, c := range idle {
		if _, err := c.waitClosed(10 * time.Second); websocket.CloseStatus(err) != websocket.StatusProtocolError || !strings.Contains(err.Error(), "initialize not received in time") {
			t.Fatalf("an idle connection: %v, want 1002 initialize not received in time", err)
		}
	}
	// Room again: initialized clients up to the token's bound, then 1013.
	for i := range 4 {
		s.dialRaw(t).initialize("in-" + string(rune('a'+i)))
	}
	_, err = s.dialRaw(t).waitClosed(10 * time.Second)
	if websocket.CloseStatus(err) != 1013 || !strings.Contains(err.Error(), "too many connections for this token (listener.max_connections_per_principal, 4)") {
		t.Fatalf("a fifth connection of the token: %v, want 1013 naming listener.max_connections_per_principal", err)
	}
	s.p.stderr.waitFor(t, "the refusal's log line", 0, `"@message":"connection refused"`)
}

// TestClientIDsThroughBinary (issue 27 items 12 and 13): through the real
// daemon, a client cut off keeps its state: another client that read its
// clientId from the root catalogue cannot take or end it with initialize
// (-32010 clientIdInUse), and the same token's reconnect without a
// resumeToken (a standard AHP client's) resumes it.
func TestClientIDsThroughBinary(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	relay, url := relayed(t, s)
	a := dialRelayed(t, s, url, relay.Addr())
	var offer resumeOffer
	if err := json.Unmarshal(a.initialize("victim").Result, &offer); err != nil || offer.Resume.Token == "" {
		t.Fatalf("initialize offered no resume: %+v, %v", offer, err)
	}
	relay.Cut()
	b := s.dialRaw(t)
	m := b.call("initialize", map[string]any{"channel": "ahp-root://", "protocolVersions": []string{"0.5.0"}, "clientId": "victim"})
	if m.Error == nil || m.Error.Code != -32010 || errorKind(m) != "clientIdInUse" {
		t.Fatalf("initialize naming the cut client's clientId: %s, want -32010 clientIdInUse", m.raw)
	}
	c := s.dialRaw(t)
	if m := c.call("reconnect", reconnectParams("victim", "", "", 0)); m.Error != nil {
		t.Fatalf("reconnect without a resumeToken, same token: %s", m.raw)
	}
}
