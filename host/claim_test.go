package host_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// claim dispatches terminal/claimed for clientID on ch and returns the
// host's rejectionReason ("" when accepted).
func (hc *hostConn) claim(ch, clientID string, seq uint64) string {
	hc.t.Helper()
	return hc.act(ch, `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"`+clientID+`"}}`, seq)
}

// act dispatches action on ch as clientSeq seq and returns the host's
// rejectionReason from its echo ("" when accepted). Every subscriber
// gets every echo: seq must be one no other client used on ch.
func (hc *hostConn) act(ch, action string, seq uint64) string {
	hc.t.Helper()
	hc.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":` + utoa(seq) + `,"action":` + action + `}}`)
	m, _ := hc.until("echo of "+action, func(m *msg) bool {
		_, _, env := m.action()
		return env.Channel == ch && env.Origin != nil && env.Origin.ClientSeq == seq
	})
	_, _, env := m.action()
	return env.RejectionReason
}

// resize dispatches terminal/resized and returns the rejectionReason.
func (hc *hostConn) resize(ch string, cols, rows int, seq uint64) string {
	hc.t.Helper()
	return hc.act(ch, fmt.Sprintf(`{"type":"terminal/resized","cols":%d,"rows":%d}`, cols, rows), seq)
}

// size subscribes (ordinary) to ch and returns the cols and rows of its
// snapshot; it then unsubscribes (from every subscription to ch).
func (hc *hostConn) size(ch string) (cols, rows int) {
	hc.t.Helper()
	r, _ := hc.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
	var res struct {
		Snapshot struct {
			State rpc.TerminalState `json:"state"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(r.Result, &res); err != nil {
		hc.t.Fatal(err)
	}
	hc.send(`{"jsonrpc":"2.0","method":"unsubscribe","params":{"channel":"` + ch + `"}}`)
	return res.Snapshot.State.Cols, res.Snapshot.State.Rows
}

// TestResizeOnlyByHolder: a client that shares a terminal (another holds
// its claim) cannot resize it: its terminal/resized is rejected and the
// size stays the holder's; the holder's is applied. (The page used to
// resize a terminal a CLI attach held, under the attach.)
func TestResizeOnlyByHolder(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/resize-1"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}, "cols": 120, "rows": 40})
	a.watch(ch)
	b := connect(t, srv)
	b.initialize("b")
	b.watch(ch)
	if r := b.resize(ch, 75, 26, 1); r != "not claim holder" {
		t.Fatalf("a sharer's resize: rejection %q, want \"not claim holder\"", r)
	}
	if c, r := b.size(ch); c != 120 || r != 40 {
		t.Fatalf("size %dx%d after a sharer's resize, want the holder's 120x40", c, r)
	}
	if r := a.resize(ch, 100, 30, 2); r != "" {
		t.Fatalf("the holder's resize rejected: %q", r)
	}
	if c, r := b.size(ch); c != 100 || r != 30 {
		t.Fatalf("size %dx%d after the holder's resize, want 100x30", c, r)
	}
}

// listedHolder waits for root/terminalsChanged listing one terminal,
// claimed by clientID.
func (hc *hostConn) listedHolder(clientID string) {
	hc.t.Helper()
	hc.until("root/terminalsChanged with claim "+clientID, func(m *msg) bool {
		typ, raw, _ := m.action()
		if typ != rpc.ActionRootTerminals {
			return false
		}
		ts := rootTerminals(hc.t, raw)
		return len(ts) == 1 && ts[0].Claim.ClientID == clientID
	})
}

// watch subscribes to ch with windowed delivery and waits for its
// channel/snapshot: the host takes it at its first send, and an action
// (a claim, its echo) applied before that is in the snapshot, not sent.
func (hc *hostConn) watch(ch string) {
	hc.t.Helper()
	hc.mustCall(rpc.MethodSubscribe, windowed(ch, 64<<10, 16<<10))
	hc.until(ch+" channel/snapshot", func(m *msg) bool { return m.Method == rpc.MethodChannelSnapshot && m.channel() == ch })
}

// leave closes hc's connection and waits until the host has ended it.
func (hc *hostConn) leave() {
	hc.t.Helper()
	_ = hc.mc.Close(transport.CloseNormal, "bye")
	err := <-hc.served
	hc.served <- err // for connect's cleanup
}

// TestClaimTakeover: a terminal's claim can be taken over, pacing
// included, only once its holder has no open connection (a reattach after
// a detach); while the holder is connected, and for another client than
// the dispatcher, terminal/claimed is rejected as AHP says.
func TestClaimTakeover(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/claim-1"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
	a.watch(ch)
	if got := srv.PacerClient(ch); got != "a" {
		t.Fatalf("pacer %q, want the creator a", got)
	}

	b := connect(t, srv)
	b.initialize("b", rpc.RootChannel)
	b.watch(ch)
	if r := b.claim(ch, "b", 1); r != "not claim holder" {
		t.Fatalf("claim while the holder is connected: rejection %q, want \"not claim holder\"", r)
	}
	if got := srv.PacerClient(ch); got != "a" {
		t.Fatalf("pacer %q after a rejected claim, want a", got)
	}

	// b watches no longer when a leaves, so the claim is not passed on
	// (TestClaimPassedOn): b takes it over when it comes back.
	b.send(`{"jsonrpc":"2.0","method":"unsubscribe","params":{"channel":"` + ch + `"}}`)
	b.mustCall(rpc.MethodPing, map[string]any{}) // the unsubscribe is done
	a.leave()
	if got := srv.PacerClient(ch); got != "" {
		t.Fatalf("pacer %q after the holder left, want none", got)
	}
	b.watch(ch)
	if r := b.claim(ch, "someone-else", 2); r != "not claim holder" {
		t.Fatalf("claim for another client: rejection %q, want \"not claim holder\"", r)
	}
	if r := b.claim(ch, "b", 3); r != "" {
		t.Fatalf("claim after the holder left: rejected %q", r)
	}
	if got := srv.PacerClient(ch); got != "b" {
		t.Fatalf("pacer %q after the takeover, want b", got)
	}
	b.listedHolder("b")

	// The old holder comes back: b holds the claim and is connected.
	a2 := connect(t, srv)
	a2.initialize("a")
	a2.watch(ch)
	if r := a2.claim(ch, "a", 1); r != "not claim holder" {
		t.Fatalf("old holder's claim while b is connected: rejection %q, want \"not claim holder\"", r)
	}
	if got := srv.PacerClient(ch); got != "b" {
		t.Fatalf("pacer %q, want b", got)
	}
}

// takeOver dispatches terminal/claimed with our takeOver extension for
// clientID and returns the rejectionReason.
func (hc *hostConn) takeOver(ch, clientID string, seq uint64) string {
	hc.t.Helper()
	return hc.act(ch, `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"`+clientID+`"},"takeOver":true}`, seq)
}

// TestClaimTakeOverConnected: with takeOver, a client takes a terminal
// over for itself from a holder that is still connected (the page's Take
// over): it paces the PTY and resizes it, the old holder shares it and
// its resizes are rejected, and the old holder takes it back the same
// way. takeOver for another client is still rejected.
func TestClaimTakeOverConnected(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/claim-4"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}, "cols": 120, "rows": 40})
	a.watch(ch)
	b := connect(t, srv)
	b.initialize("b", rpc.RootChannel)
	b.watch(ch)
	if r := b.takeOver(ch, "someone-else", 1); r != "not claim holder" {
		t.Fatalf("takeOver for another client: rejection %q, want \"not claim holder\"", r)
	}
	if r := b.takeOver(ch, "b", 2); r != "" {
		t.Fatalf("takeOver from a connected holder rejected: %q", r)
	}
	if got := srv.PacerClient(ch); got != "b" {
		t.Fatalf("pacer %q after the takeOver, want b", got)
	}
	b.listedHolder("b")
	if r := a.resize(ch, 75, 26, 1); r != "not claim holder" {
		t.Fatalf("the old holder's resize: rejection %q, want \"not claim holder\"", r)
	}
	if r := b.resize(ch, 90, 30, 3); r != "" {
		t.Fatalf("the new holder's resize rejected: %q", r)
	}
	v := connect(t, srv)
	v.initialize("v")
	if c, r := v.size(ch); c != 90 || r != 30 {
		t.Fatalf("size %dx%d, want the new holder's 90x30", c, r)
	}
	if r := a.takeOver(ch, "a", 4); r != "" {
		t.Fatalf("the old holder taking it back: rejected %q", r)
	}
	if got := srv.PacerClient(ch); got != "a" {
		t.Fatalf("pacer %q after taking it back, want a", got)
	}
	if r := b.resize(ch, 60, 20, 5); r != "not claim holder" {
		t.Fatalf("b's resize after a took it back: rejection %q, want \"not claim holder\"", r)
	}
}

// TestClaimTakeoverBeforeFirstSubscription: a terminal whose creator left
// before subscribing waits for its holder (firstSubscribeLease); a
// takeover by a subscribed client ends the wait at once.
func TestClaimTakeoverBeforeFirstSubscription(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/claim-2"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
	a.leave()
	if srv.FirstSubscribed(ch) {
		t.Fatal("the terminal stopped waiting for its holder with nobody subscribed")
	}
	b := connect(t, srv)
	b.initialize("b")
	b.watch(ch)
	if srv.FirstSubscribed(ch) {
		t.Fatal("a viewer's subscription ended the wait for the holder")
	}
	if r := b.claim(ch, "b", 1); r != "" {
		t.Fatalf("takeover rejected: %q", r)
	}
	if !srv.FirstSubscribed(ch) || srv.PacerClient(ch) != "b" {
		t.Fatalf("after the takeover: first subscribed %v, pacer %q; want true, b", srv.FirstSubscribed(ch), srv.PacerClient(ch))
	}
}

// TestClaimPassedOn: when the holder's last connection ends, a client
// still subscribed (windowed) becomes the holder, told by a
// host-originated terminal/claimed, and paces the PTY; an ordinary
// subscriber cannot pace and is not chosen.
func TestClaimPassedOn(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/claim-3"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
	a.watch(ch)
	ord := connect(t, srv)
	ord.initialize("0-ordinary") // sorts first: chosen if ordinary counted
	ord.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
	b := connect(t, srv)
	b.initialize("b", rpc.RootChannel)
	b.watch(ch)
	// a second connection of a: a keeps the claim while one is open
	a2 := connect(t, srv)
	a2.initialize("a")
	a2.leave()
	if got := srv.PacerClient(ch); got != "a" {
		t.Fatalf("pacer %q while a still has a connection, want a", got)
	}

	if n := srv.LiveClients(); n != 3 { // a, 0-ordinary, b
		t.Fatalf("%d live clientIds, want 3", n)
	}
	a.leave()
	if n := srv.LiveClients(); n != 2 { // bounded by the open connections
		t.Fatalf("%d live clientIds after a left, want 2", n)
	}
	m, _ := b.until("host-originated terminal/claimed", func(m *msg) bool {
		typ, _, env := m.action()
		return typ == rpc.ActionTerminalClaimed && env.Channel == ch
	})
	_, raw, env := m.action()
	if env.Origin != nil || string(raw) != `{"type":"terminal/claimed","claim":{"kind":"client","clientId":"b"}}` {
		t.Fatalf("claimed action %s, want the host's, for b", m.Raw)
	}
	if got := srv.PacerClient(ch); got != "b" {
		t.Fatalf("pacer %q after the holder left, want b", got)
	}
	b.listedHolder("b")
}

// TestDisposeTellsSubscribers: a terminal disposed by another client
// (sidecar kill) sends its terminal/exited to every subscriber, windowed
// or ordinary, before their subscriptions end; they used to end silently,
// and an attached client waited for output forever.
func TestDisposeTellsSubscribers(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/disposed-1"
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
	a.watch(ch)
	b := connect(t, srv)
	b.initialize("b")
	b.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
	k := connect(t, srv)
	k.initialize("k")
	k.mustCall(rpc.MethodDisposeTerminal, map[string]any{"channel": ch})
	for i, hc := range []*hostConn{a, b} {
		m, _ := hc.until("terminal/exited after dispose on "+[]string{"a (windowed)", "b (ordinary)"}[i], func(m *msg) bool {
			typ, _, env := m.action()
			return typ == rpc.ActionTerminalExited && env.Channel == ch
		})
		if !strings.Contains(m.Raw, `"signal":"SIGHUP"`) && !strings.Contains(m.Raw, `"signal":"SIGTERM"`) {
			t.Errorf("exited action %s, want the signal that ended it", m.Raw)
		}
		if !strings.Contains(m.Raw, `"disposedBy":"k"`) {
			t.Errorf("exited action %s, want disposedBy k", m.Raw)
		}
	}
}

// TestAttachedListed: the root catalogue lists the clientIds subscribed
// to a terminal (our attached extension), in order, and lists it again
// as they come and go; a terminal that exits by itself has no disposedBy.
func TestAttachedListed(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/attached-1"
	r := connect(t, srv)
	r.initialize("r", rpc.RootChannel)
	attached := func(want ...string) {
		t.Helper()
		r.until(fmt.Sprintf("root/terminalsChanged with attached %v", want), func(m *msg) bool {
			typ, raw, _ := m.action()
			if typ != rpc.ActionRootTerminals {
				return false
			}
			ts := rootTerminals(t, raw)
			return len(ts) == 1 && slices.Equal(ts[0].Attached, want)
		})
	}
	b := connect(t, srv)
	b.initialize("b")
	b.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "read x; exit 3"}})
	a := connect(t, srv)
	a.initialize("a")
	a.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
	attached("a")
	b.watch(ch)
	attached("a", "b")
	a.leave()
	attached("b")
	b.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":1,"action":{"type":"terminal/input","data":"\n"}}}`)
	m, _ := b.until("terminal/exited", func(m *msg) bool { typ, _, _ := m.action(); return typ == rpc.ActionTerminalExited })
	if !strings.Contains(m.Raw, `"exitCode":3`) || strings.Contains(m.Raw, "disposedBy") {
		t.Errorf("exited action %s, want exitCode 3 and no disposedBy", m.Raw)
	}
}
