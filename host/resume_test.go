package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// connectAs is connect for a transport authenticated as principal, the
// owner (host.Server.ServeConnAs).
func connectAs(t testing.TB, srv *host.Server, principal string) *hostConn {
	t.Helper()
	return connectIdentity(t, srv, auth.Identity{Name: principal, Role: auth.Owner})
}

// cut ends hc's transport as a network loss does (no close from the
// client: conntypes.Lose; on a pipe, which cannot be lost, a close with
// 1011, which the host takes for a loss too) and waits until the host
// has processed its end.
func (hc *hostConn) cut() {
	hc.t.Helper()
	if hc.lose != nil {
		hc.lose()
	} else {
		_ = hc.mc.Close(transport.CloseInternalError, "cut")
	}
	select {
	case err := <-hc.served:
		hc.served <- err // for the cleanup
	case <-time.After(deadline):
		hc.t.Fatal("the host did not end the cut connection")
	}
}

// termData returns a terminal/data action's serverSeq and data.
func termData(m *msg) (uint64, string, bool) {
	typ, raw, env := m.action()
	if typ != rpc.ActionTerminalData {
		return 0, "", false
	}
	var a struct {
		Data string `json:"data"`
	}
	_ = json.Unmarshal(raw, &a)
	return env.ServerSeq, a.Data, true
}

// readOutput collects terminal output of ch until it contains want.
func (hc *hostConn) readOutput(ch, want string) (seqs []uint64, datas []string) {
	hc.t.Helper()
	var all strings.Builder
	for !strings.Contains(all.String(), want) {
		m, _ := hc.until("output "+want, func(m *msg) bool {
			_, _, ok := termData(m)
			return ok && m.channel() == ch
		})
		seq, d, _ := termData(m)
		seqs, datas = append(seqs, seq), append(datas, d)
		all.WriteString(d)
	}
	return seqs, datas
}

func (hc *hostConn) reconnect(p rpc.ReconnectParams) (*msg, rpc.ReconnectResult) {
	hc.t.Helper()
	m, _ := hc.call(rpc.MethodReconnect, p)
	var res rpc.ReconnectResult
	if m.Error == nil {
		if err := json.Unmarshal(m.Result, &res); err != nil {
			hc.t.Fatal(err)
		}
	}
	return m, res
}

// resumeParams is a reconnect of clientID with token, keeping the
// ordinary subscriptions and the windowed ones of items (each also in
// subscriptions, as seed 000 asks).
func resumeParams(clientID, token string, ordinary []string, items ...rpc.ReconnectWindowItem) rpc.ReconnectParams {
	p := rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: clientID, ResumeToken: token, Subscriptions: append([]string{}, ordinary...)}
	if len(items) > 0 {
		p.Windows = &rpc.ReconnectWindows{Items: items}
		for _, it := range items {
			p.Subscriptions = append(p.Subscriptions, it.Channel)
		}
	}
	return p
}

func window(ch string, last uint64) rpc.ReconnectWindowItem {
	return rpc.ReconnectWindowItem{Channel: ch, LastAppliedServerSeq: last,
		FlowControl: &rpc.FlowControlOffer{Receive: &delivery.Limits{WindowBytes: 64 << 10, MaximumFrameBytes: 16 << 10}}}
}

// TestReconnectReplay: a client whose transport is lost reconnects with
// its resume token; its windowed terminal subscription is replayed from
// its lastAppliedServerSeq (every later action once, in order), its
// ordinary root subscription by lastSeenServerSeq, and its terminal is
// its own again: input typed after the resume reaches the program.
func TestReconnectReplay(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		const ch = "ahp-terminal:/resume-1"
		a := connectAsOver(t, srv, ct, "p1")
		init := a.initialize("a", rpc.RootChannel)
		if init.Resume == nil || len(init.Resume.Token) < 40 || init.Resume.GraceMs != (2*time.Hour).Milliseconds() {
			t.Fatalf("initialize resume %+v, want a token and the 2 h grace", init.Resume)
		}
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch,
			"command": []string{"sh", "-c", "echo L1; echo L2; echo L3; read x; echo L4-$x"}})
		a.watch(ch)
		seqs, datas := a.readOutput(ch, "L3")
		a.cut()

		// Applied: the first output action only; the rest must come again
		// (or, when the output came in one action, none of it).
		last, want := seqs[0], strings.Join(datas[1:], "")
		if len(seqs) == 1 {
			last, want = seqs[0]-1, datas[0]
		}
		b := connectAsOver(t, srv, ct, "p1")
		m, res := b.reconnect(rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "a", ResumeToken: init.Resume.Token,
			LastSeenServerSeq: init.ServerSeq, Subscriptions: []string{rpc.RootChannel, ch},
			Windows: &rpc.ReconnectWindows{Items: []rpc.ReconnectWindowItem{window(ch, last)}}})
		if m.Error != nil {
			t.Fatalf("reconnect: %d %s", m.Error.Code, m.Error.Message)
		}
		if res.Type != rpc.ReconnectReplay || res.Actions == nil || len(res.Missing) != 0 || res.Windows == nil || len(res.Windows.Items) != 1 {
			t.Fatalf("reconnect result %s", m.Raw)
		}
		it := res.Windows.Items[0]
		if it.Channel != ch || it.Recovery != rpc.RecoveryReplay || it.HeadSeq < seqs[len(seqs)-1] || res.Resume == nil || res.Resume.Token != init.Resume.Token {
			t.Fatalf("window item %+v, resume %+v", it, res.Resume)
		}
		// The root's actions since initialize (the terminal listed) are in
		// the result, in serverSeq order.
		var prev uint64
		listed := false
		for _, raw := range *res.Actions {
			var env rpc.ActionEnvelope
			if err := json.Unmarshal(raw, &env); err != nil || env.Channel != rpc.RootChannel || env.ServerSeq <= prev {
				t.Fatalf("replayed action %s out of order or not the root's", raw)
			}
			prev = env.ServerSeq
			listed = listed || strings.Contains(string(raw), ch)
		}
		if !listed {
			t.Errorf("replayed root actions %v do not list %s", *res.Actions, ch)
		}
		_, got := b.readOutput(ch, "L3")
		if strings.Join(got, "") != want {
			t.Fatalf("replayed %q, want exactly %q", strings.Join(got, ""), want)
		}
		b.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":7,"action":{"type":"terminal/input","data":"ok\n"}}}`)
		b.readOutput(ch, "L4-ok")
	})
}

// TestReconnectRefused: nothing of a client's state goes to another
// principal, to a wrong resume token, or to a clientId with no state
// (each an error, with the kind); a refused attempt destroys nothing.
func TestReconnectRefused(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		a := connectAsOver(t, srv, ct, "p1")
		init := a.initialize("a")
		a.cut()
		params := func(id, token string) rpc.ReconnectParams {
			return resumeParams(id, token, nil)
		}
		kind := func(e *rpc.Error) string {
			var d rpc.ResumeErrorData
			_ = json.Unmarshal(e.Data, &d)
			return d.Kind
		}
		other := connectAsOver(t, srv, ct, "p2")
		if e := other.callErr(rpc.MethodReconnect, params("a", init.Resume.Token), rpc.CodePermissionDenied); kind(e) != "refused" {
			t.Errorf("another principal: %+v, want kind refused", e)
		}
		wrong := connectAsOver(t, srv, ct, "p1")
		if e := wrong.callErr(rpc.MethodReconnect, params("a", strings.Repeat("x", len(init.Resume.Token))), rpc.CodePermissionDenied); kind(e) != "refused" {
			t.Errorf("wrong token: %+v, want kind refused", e)
		}
		if e := wrong.callErr(rpc.MethodSubscribe, map[string]any{"channel": rpc.RootChannel}, rpc.CodeNotInitialized); e == nil {
			t.Error("a refused reconnect initialized the connection")
		}
		none := connectAsOver(t, srv, ct, "p1")
		if e := none.callErr(rpc.MethodReconnect, params("nobody", init.Resume.Token), rpc.CodeNotFound); kind(e) != "expired" {
			t.Errorf("unknown client: %+v, want kind expired", e)
		}
		right := connectAsOver(t, srv, ct, "p1")
		if m, _ := right.reconnect(params("a", init.Resume.Token)); m.Error != nil {
			t.Fatalf("the right reconnect after refused ones: %s", m.Raw)
		}
	})
}

// TestInitializeLeavesRetainedState (issue 27 item 12): an initialize
// naming a clientId whose state is kept for a reconnect (another client
// read it in the root catalogue, or the same one lost its token) is
// refused as in use (-32010, kind clientIdInUse) and ends nothing: the
// owner's reconnect with its token still resumes the state.
func TestInitializeLeavesRetainedState(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a := connectAs(t, srv, "p1")
	init := a.initialize("victim")
	a.cut()
	for _, principal := range []string{"p1", "p2"} {
		b := connectAs(t, srv, principal)
		e := b.callErr(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.5.0"}, "clientId": "victim"}, rpc.CodeAlreadyExists)
		var d rpc.ResumeErrorData
		if e == nil || json.Unmarshal(e.Data, &d) != nil || d.Kind != "clientIdInUse" {
			t.Fatalf("initialize of a kept clientId by %s: %+v, want -32010 kind clientIdInUse", principal, e)
		}
	}
	c := connectAs(t, srv, "p1")
	if m, _ := c.reconnect(resumeParams("victim", init.Resume.Token, nil)); m.Error != nil {
		t.Fatalf("the owner's reconnect after the refused initializes: %s", m.Raw)
	}
}

// TestInitializeLeavesLiveClientID: a clientId a live connection holds
// (read from the root catalogue) is refused to another principal's
// initialize (-32010, kind clientIdInUse) and reconnect (-32009), which
// end nothing: the holder's connection keeps working. The same
// principal may still initialize it.
func TestInitializeLeavesLiveClientID(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a := connectAs(t, srv, "p1")
	a.initialize("live")
	b := connectAs(t, srv, "p2")
	e := b.callErr(rpc.MethodInitialize, map[string]any{"channel": rpc.RootChannel, "protocolVersions": []string{"0.5.0"}, "clientId": "live"}, rpc.CodeAlreadyExists)
	var d rpc.ResumeErrorData
	if e == nil || json.Unmarshal(e.Data, &d) != nil || d.Kind != "clientIdInUse" {
		t.Fatalf("initialize of a live clientId by another principal: %+v, want -32010 kind clientIdInUse", e)
	}
	if e := b.callErr(rpc.MethodReconnect, resumeParams("live", "", nil), rpc.CodePermissionDenied); e == nil {
		t.Fatal("another principal resumed a live clientId")
	}
	b.initialize("p2-own") // the refused connection may still initialize as itself
	a.mustCall(rpc.MethodPing, struct{}{})
	c := connectAs(t, srv, "p1")
	c.initialize("live")
}

// TestReconnectWithoutToken (issue 27 item 13): a standard AHP client
// reconnects without a resumeToken (our extension): the principal that
// created the state resumes it; another principal never does.
func TestReconnectWithoutToken(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a := connectAs(t, srv, "p1")
	a.initialize("sdk")
	a.cut()
	other := connectAs(t, srv, "p2")
	if e := other.callErr(rpc.MethodReconnect, resumeParams("sdk", "", nil), rpc.CodePermissionDenied); e == nil {
		t.Fatal("another principal resumed without a token")
	}
	b := connectAs(t, srv, "p1")
	m, res := b.reconnect(resumeParams("sdk", "", nil))
	if m.Error != nil || res.Resume == nil || res.Resume.Token == "" {
		t.Fatalf("the same principal without a token: %s", m.Raw)
	}
}

// TestDetachEndsState: a client that closes its connection (a detach)
// keeps nothing: a reconnect finds its state expired, and its claim
// passes on at once to a client still watching.
func TestDetachEndsState(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		const ch = "ahp-terminal:/detach-1"
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
		a.watch(ch)
		c := connectOver(t, srv, ct)
		c.initialize("c", rpc.RootChannel)
		c.watch(ch)
		a.leave()
		c.listedHolder("c")
		b := connectOver(t, srv, ct)
		b.callErr(rpc.MethodReconnect, resumeParams("a", init.Resume.Token, nil), rpc.CodeNotFound)
	})
}

// TestGraceKeepsClaim: within the grace a lost holder keeps its claim
// (another client watching does not get it, and the holder resumes as
// holder: its new stream paces the PTY); when the grace ends, the claim
// passes on.
func TestGraceKeepsClaim(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, func(c *config.Config) { c.Journal.ReconnectGrace = time.Hour })
		const ch = "ahp-terminal:/grace-1"
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
		a.watch(ch)
		c := connectOver(t, srv, ct)
		c.initialize("c")
		c.watch(ch)
		a.cut()
		if got := srv.PacerClient(ch); got != "a" {
			t.Fatalf("pacer within the grace: %q, want a (its parked stream)", got)
		}
		// A root snapshot now lists the claim as a's.
		r := connectOver(t, srv, ct)
		r.initialize("r")
		m, _ := r.mustCall(rpc.MethodSubscribe, map[string]any{"channel": rpc.RootChannel})
		if !strings.Contains(m.Raw, `"claim":{"kind":"client","clientId":"a"}`) {
			t.Fatalf("root within the grace: %s, want the claim still a's", m.Raw)
		}
		b := connectOver(t, srv, ct)
		if m, _ := b.reconnect(resumeParams("a", init.Resume.Token, nil, window(ch, 0))); m.Error != nil {
			t.Fatalf("reconnect: %s", m.Raw)
		}
		waitUntil(t, "the resumed stream paces the PTY", func() bool { return srv.PacerClient(ch) == "a" && srv.RetainedClients() == 0 })
		b.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":1,"action":{"type":"terminal/input","data":"hi\n"}}}`)
		b.readOutput(ch, "hi")
	})
}

// TestGraceEnds: past the grace the state is dropped (a reconnect finds
// it expired) and the lost holder's claim passes on.
func TestGraceEnds(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, func(c *config.Config) { c.Journal.ReconnectGrace = 50 * time.Millisecond })
		const ch = "ahp-terminal:/grace-2"
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
		a.watch(ch)
		c := connectOver(t, srv, ct)
		c.initialize("c", rpc.RootChannel)
		c.watch(ch)
		a.cut()
		c.listedHolder("c")
		b := connectOver(t, srv, ct)
		b.callErr(rpc.MethodReconnect, resumeParams("a", init.Resume.Token, nil), rpc.CodeNotFound)
	})
}

// TestReconnectHandsOver: a reconnect that arrives while the old
// transport still looks alive (a laptop that slept) closes it first, with
// 1001, and resumes its state.
func TestReconnectHandsOver(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		const ch = "ahp-terminal:/handover-1"
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "echo HELLO; cat"}})
		a.watch(ch)
		a.readOutput(ch, "HELLO")
		// a reads nothing more, as a laptop that slept does.
		b := connectOver(t, srv, ct)
		start := time.Now()
		m, res := b.reconnect(resumeParams("a", init.Resume.Token, nil, window(ch, 0)))
		took := time.Since(start)
		if m.Error != nil || res.Windows == nil || len(res.Windows.Items) != 1 {
			t.Fatalf("reconnect beside a live connection: %s", m.Raw)
		}
		// transport-io has no 1001 but for "server shutting down": its
		// clients see WT_NO_ERROR (1000) with the reason.
		wantCode, wantReason := closeSeen(ct, transport.CloseGoingAway, "resumed on another connection")
		code, reason, _ := a.closed()
		if code != wantCode || reason != wantReason {
			t.Errorf("old connection closed with %d %q, want %d %q", code, reason, wantCode, wantReason)
		}
		b.readOutput(ch, "HELLO")
		// The old connection is closed, not waited for: the reconnect is
		// answered within the close's bound (over /ahp the host waits at
		// most a second for the close frame of a client that slept,
		// coder/websocket's own wait being 5 s).
		if took > 3*time.Second {
			t.Errorf("the reconnect took %v", took)
		}
	})
}

// TestReconnectSnapshotWhenJournalGone: a viewer (not the claim holder,
// so nothing waits for it) away while the terminal's output outgrows the
// journal resumes with a snapshot: a channel/snapshot is its first data
// message; a disposed terminal and a TCP-like unknown channel are missing.
func TestReconnectSnapshotWhenJournalGone(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		const ch = "ahp-terminal:/snap-1"
		h := connectOver(t, srv, ct)
		h.initialize("holder")
		h.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "read x; seq 1 80000; echo END; cat"}})
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.watch(ch)
		a.cut()
		h.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch}) // ordinary: it takes everything
		h.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":1,"action":{"type":"terminal/input","data":"go\n"}}}`)
		h.readOutput(ch, "END")
		b := connectOver(t, srv, ct)
		m, res := b.reconnect(rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "a", ResumeToken: init.Resume.Token,
			Subscriptions: []string{ch, "ahp-terminal:/gone"}, Windows: &rpc.ReconnectWindows{Items: []rpc.ReconnectWindowItem{window(ch, 1), window("ahp-terminal:/gone", 0)}}})
		if m.Error != nil || res.Windows == nil || len(res.Windows.Items) != 1 || res.Windows.Items[0].Recovery != rpc.RecoverySnapshot {
			t.Fatalf("reconnect: %s", m.Raw)
		}
		if len(res.Missing) != 1 || res.Missing[0] != "ahp-terminal:/gone" {
			t.Errorf("missing %v, want the unknown terminal", res.Missing)
		}
		first, _ := b.until("first data message", func(m *msg) bool { return m.channel() == ch })
		// The snapshot (the scrollback: about 500 KiB, twice the journal's
		// 256 KiB) comes in fragments: the first one starts it.
		if (first.Method != rpc.MethodChannelSnapshot && first.Method != rpc.MethodChannelFrame) || !strings.Contains(first.Raw, `channel/snapshot`) {
			t.Fatalf("first data message after snapshot recovery: %.300s", first.Raw)
		}
	})
}

// waitUntil polls cond (state the host changes on its own goroutines)
// for up to deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	stop := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(stop) {
			t.Fatalf("not %s within %v", what, deadline)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReconnectTelemetryLive: a windowed metrics subscription resumes
// live: no channel/snapshot, and the first batch after the result was
// sampled after the reconnect (nothing old is sent again). Over the pipe
// only: it waits for the hub's real one-second samples (2 s), and what
// it proves is the channel's recovery; a loss and resume over every
// transport are TestReconnectReplay's, telemetry over every transport
// TestTelemetryWindowedLive's.
func TestReconnectTelemetryLive(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-otlp://metrics"
	a := connect(t, srv)
	init := a.initialize("a")
	a.mustCall(rpc.MethodSubscribe, windowed(ch, 1<<20, 64<<10))
	a.until("a first batch", func(m *msg) bool { return m.channel() == ch && m.Method != rpc.MethodChannelSnapshot })
	a.cut()
	b := connect(t, srv)
	resumed := time.Now()
	m, res := b.reconnect(resumeParams("a", init.Resume.Token, nil, window(ch, 0)))
	if m.Error != nil || res.Windows == nil || len(res.Windows.Items) != 1 || res.Windows.Items[0].Recovery != rpc.RecoveryLive {
		t.Fatalf("reconnect: %s", m.Raw)
	}
	// The first data message is a batch, whole or its first fragment
	// (a batch is larger than the host's 16 KiB frames).
	first, _ := b.until("first data message", func(m *msg) bool { return m.channel() == ch })
	text := first.Raw
	if first.Method == rpc.MethodChannelFrame {
		var f rpc.ChannelFrameParams
		_ = json.Unmarshal(first.Params, &f)
		text = f.Data
	}
	if !strings.Contains(text, `"method":"otlp/exportMetrics"`) {
		t.Fatalf("first data message after live recovery: %.200s", first.Raw)
	}
	const stamp = `"timeUnixNano":"`
	i := strings.Index(text, stamp)
	if i < 0 {
		t.Fatalf("no timeUnixNano in %.300s", text)
	}
	var ns int64
	if _, err := fmt.Sscanf(text[i+len(stamp):], "%d", &ns); err != nil {
		t.Fatal(err)
	}
	if sampled := time.Unix(0, ns); sampled.Before(resumed.Add(-time.Second)) {
		t.Errorf("first batch sampled at %v, before the reconnect at %v", sampled, resumed)
	}
}

// failingWrites is a transport whose writes fail once armed, as a socket
// whose peer vanished does, while reads wait for the close.
type failingWrites struct {
	transport.MessageConn
	fail chan struct{}
}

func (f *failingWrites) WriteMessage(ctx context.Context, text []byte) error {
	select {
	case <-f.fail:
		return errors.New("write: broken pipe")
	default:
		return f.MessageConn.WriteMessage(ctx, text)
	}
}

// TestReconnectAfterWriteFailure: a link that dies under the host's
// writer first (the write fails before any read does) is a loss: the
// client's state is kept and a reconnect resumes it. Over the pipe only:
// the host's end must fail its writes on demand, which only a wrapper
// gives; around a real transport it would hide its binary form and kind.
func TestReconnectAfterWriteFailure(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a, z := transport.Pipe(64)
	hc := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
	fw := &failingWrites{MessageConn: z, fail: make(chan struct{})}
	go func() { hc.served <- srv.ServeConn(context.Background(), fw) }()
	t.Cleanup(func() { _ = a.Close(transport.CloseNormal, "") })
	init := hc.initialize("w")
	close(fw.fail)
	hc.send(`{"jsonrpc":"2.0","id":9,"method":"ping","params":{"channel":"ahp-root://"}}`) // its answer fails to write
	select {
	case <-hc.served:
	case <-time.After(deadline):
		t.Fatal("the host did not end the connection whose write failed")
	}
	b := connect(t, srv)
	if m, _ := b.reconnect(resumeParams("w", init.Resume.Token, nil)); m.Error != nil {
		t.Fatalf("reconnect after a write failure: %s", m.Raw)
	}
}

// TestParkedPacingEnds: a lost holder's parked stream paces its terminal
// for a while only (parkedPacing): then the program runs on, its output
// kept for a replay or a snapshot, and the claim stays the lost
// holder's, never passed to another lost client. Over the pipe only: its
// subject is the parked stream's timer, once the connection is gone; a
// loss and a resume over every transport are TestReconnectReplay's.
func TestParkedPacingEnds(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	srv.SetParkedPacing(100 * time.Millisecond)
	const ch = "ahp-terminal:/unpace-1"
	a := connect(t, srv)
	init := a.initialize("a")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "read x; seq 1 100000; echo DONE; cat"}})
	a.watch(ch)
	a.cut()
	// Someone watching sees the program finish though nobody credits
	// the holder's window: its pacing ended.
	w := connect(t, srv)
	w.initialize("w")
	w.mustCall(rpc.MethodSubscribe, map[string]any{"channel": ch})
	w.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":1,"action":{"type":"terminal/input","data":"go\n"}}}`)
	w.readOutput(ch, "DONE")
	b := connect(t, srv)
	m, res := b.reconnect(resumeParams("a", init.Resume.Token, nil, window(ch, 0)))
	if m.Error != nil || res.Windows == nil || len(res.Windows.Items) != 1 {
		t.Fatalf("reconnect after the pacing ended: %s", m.Raw)
	}
	waitUntil(t, "a paces its terminal again", func() bool { return srv.PacerClient(ch) == "a" })
}

// TestAwayListed: a subscriber whose connection was lost is listed as
// away (our extension), not attached, for its grace; once it reconnects
// it is attached again.
func TestAwayListed(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		const ch = "ahp-terminal:/away-1"
		r := connectOver(t, srv, ct)
		r.initialize("r", rpc.RootChannel)
		listed := func(attached, away []string) {
			t.Helper()
			r.until(fmt.Sprintf("root/terminalsChanged with attached %v, away %v", attached, away), func(m *msg) bool {
				typ, raw, _ := m.action()
				if typ != rpc.ActionRootTerminals {
					return false
				}
				ts := rootTerminals(t, raw)
				return len(ts) == 1 && slices.Equal(ts[0].Attached, attached) && slices.Equal(ts[0].Away, away)
			})
		}
		a := connectOver(t, srv, ct)
		init := a.initialize("a")
		a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"cat"}})
		a.watch(ch)
		listed([]string{"a"}, nil)
		a.cut()
		listed(nil, []string{"a"})
		b := connectOver(t, srv, ct)
		if m, _ := b.reconnect(resumeParams("a", init.Resume.Token, nil, window(ch, 0))); m.Error != nil {
			t.Fatalf("reconnect: %s", m.Raw)
		}
		listed([]string{"a"}, nil)
	})
}

// TestRetainedBound: at most maxRetained (256) lost clients are kept;
// past that the one lost longest ago is dropped (its reconnect finds
// nothing), the newest kept. Over the pipe only: 260 connections, a
// bound of the host's table whatever carried them.
func TestRetainedBound(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const n = 260
	tokens := make([]string, n)
	for i := range n {
		a, z := transport.Pipe(64)
		c := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
		go func() { c.served <- srv.ServeConn(context.Background(), z) }()
		tokens[i] = c.initialize(fmt.Sprintf("lost-%d", i)).Resume.Token
		c.cut()
	}
	if got := srv.RetainedClients(); got != 256 {
		t.Fatalf("%d clients kept, want 256", got)
	}
	b := connect(t, srv)
	b.callErr(rpc.MethodReconnect, resumeParams("lost-0", tokens[0], nil), rpc.CodeNotFound)
	if m, _ := b.reconnect(resumeParams(fmt.Sprintf("lost-%d", n-1), tokens[n-1], nil)); m.Error != nil {
		t.Fatalf("the newest lost client: %s", m.Raw)
	}
}
