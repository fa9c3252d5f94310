package host_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// The rules of reconnect that seed 000 states and nothing else tested
// (issue 27 item 10).

// TestReconnectWindowItemsValidated: a window item for a channel not in
// subscriptions, one listed twice, and one without flowControl.receive
// are each -32602 naming the fault, and take nothing: the right reconnect
// still resumes afterwards.
func TestReconnectWindowItemsValidated(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	a := connectAs(t, srv, "p1")
	init := a.initialize("items")
	a.cut()
	const ch = "ahp-otlp://metrics"
	b := connectAs(t, srv, "p1")
	for _, c := range []struct {
		name string
		p    rpc.ReconnectParams
		want string
	}{
		{"not in subscriptions", rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "items", ResumeToken: init.Resume.Token,
			Subscriptions: []string{}, Windows: &rpc.ReconnectWindows{Items: []rpc.ReconnectWindowItem{window(ch, 0)}}},
			"windows.items channel ahp-otlp://metrics is not in subscriptions"},
		{"twice", rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "items", ResumeToken: init.Resume.Token,
			Subscriptions: []string{ch}, Windows: &rpc.ReconnectWindows{Items: []rpc.ReconnectWindowItem{window(ch, 0), window(ch, 0)}}},
			"windows.items lists ahp-otlp://metrics twice"},
		{"no flowControl", rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: "items", ResumeToken: init.Resume.Token,
			Subscriptions: []string{ch}, Windows: &rpc.ReconnectWindows{Items: []rpc.ReconnectWindowItem{{Channel: ch}}}},
			"windows.items ahp-otlp://metrics needs flowControl.receive"},
	} {
		e := b.callErr(rpc.MethodReconnect, c.p, rpc.CodeInvalidParams)
		if e == nil || !strings.Contains(e.Message, c.want) {
			t.Errorf("%s: %+v, want -32602 saying %q", c.name, e, c.want)
		}
	}
	if m, _ := b.reconnect(resumeParams("items", init.Resume.Token, nil, window(ch, 0))); m.Error != nil {
		t.Fatalf("the right reconnect after the refused ones: %s", m.Raw)
	}
}

// TestReconnectFreshCounters: a windowed subscription kept by a
// reconnect starts the new connection's counters at zero with the limits
// of the reconnect's offer (seed 000 "Reconnection"): nothing of it comes
// before the reconnect's result; with an 8 KiB window the host sends at
// most the window plus one frame until credit, and a credit counted from
// zero on the new connection (far below what the old one had credited)
// lets it go on.
func TestReconnectFreshCounters(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/fresh-counters"
	a := connectAs(t, srv, "p1")
	init := a.initialize("counters")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch,
		"command": []string{"sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; read x"}})
	a.watch(ch)
	seqs, _ := a.readOutput(ch, "line-10-")
	a.cut()

	b := connectAs(t, srv, "p1")
	const win, frame = 8 << 10, 1024
	item := rpc.ReconnectWindowItem{Channel: ch, LastAppliedServerSeq: seqs[len(seqs)-1],
		FlowControl: &rpc.FlowControlOffer{Receive: &delivery.Limits{WindowBytes: win, MaximumFrameBytes: frame}}}
	p := resumeParams("counters", init.Resume.Token, nil, item)
	b.send(string(mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": rpc.MethodReconnect, "params": p})))
	first, err := b.read()
	if err != nil {
		t.Fatal(err)
	}
	if string(first.ID) != "1" || first.Error != nil {
		t.Fatalf("first message after reconnect: %s, want its result (nothing of a kept subscription before it)", first.Raw)
	}
	var res rpc.ReconnectResult
	if err := json.Unmarshal(first.Result, &res); err != nil || res.Windows == nil || len(res.Windows.Items) != 1 {
		t.Fatalf("reconnect result %s", first.Raw)
	}
	if got := res.Windows.Items[0].FlowControl.ClientReceive; got.WindowBytes != win || got.MaximumFrameBytes != frame {
		t.Fatalf("limits after the reconnect %+v, want the offer's %d/%d", got, win, frame)
	}
	// Without credit the host stops at the window plus one frame, counted
	// from zero on this connection: what it has sent by the time it
	// answers a ping that follows a full window is no more than that.
	var sent int
	isData := func(m *msg) bool {
		if m.Method != "" && m.Method != rpc.MethodChannelCredit && m.channel() == ch {
			sent += 2 * len(m.Raw) // ASCII: the whole message counts, 2 UTF-16 bytes a byte
			return true
		}
		return false
	}
	for sent < win {
		b.until("data on "+ch, isData)
	}
	b.send(`{"jsonrpc":"2.0","id":50,"method":"ping","params":{"channel":"ahp-root://"}}`)
	b.until("the answer to the ping", func(m *msg) bool { isData(m); return m.isResponse(50) })
	if sent > win+frame {
		t.Fatalf("%d UTF-16 bytes sent on an %d window before any credit", sent, win)
	}
	b.send(`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":"` + ch + `","consumedBytes":` + itoa(int64(sent)) + `}}`)
	b.until("more output after the credit", func(m *msg) bool { return m.channel() == ch })
}

// TestReconnectIgnoresOldConnection: a reconnect that hands the client
// over from a connection the host still thinks open closes that one; what
// the old connection sends afterwards reaches nothing (input typed there
// is not applied), while the new one's does.
func TestReconnectIgnoresOldConnection(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	const ch = "ahp-terminal:/old-conn"
	a := connectAs(t, srv, "p1")
	init := a.initialize("handed")
	a.mustCall(rpc.MethodCreateTerminal, map[string]any{"channel": ch, "command": []string{"sh", "-c", "stty -echo; echo ready; while read l; do echo got-$l; done"}})
	a.watch(ch)
	a.readOutput(ch, "ready")
	b := connectAs(t, srv, "p1")
	if m, _ := b.reconnect(resumeParams("handed", init.Resume.Token, nil, window(ch, 0))); m.Error != nil {
		t.Fatalf("reconnect: %s", m.Raw)
	}
	// The old connection is closed by now; a write on it goes nowhere.
	_ = a.mc.WriteMessage(t.Context(), []byte(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"`+ch+`","clientSeq":9,"action":{"type":"terminal/input","data":"OLD\n"}}}`))
	b.send(`{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"` + ch + `","clientSeq":1,"action":{"type":"terminal/input","data":"NEW\n"}}}`)
	_, datas := b.readOutput(ch, "got-NEW")
	if out := strings.Join(datas, ""); strings.Contains(out, "got-OLD") {
		t.Fatalf("input sent on the old connection after the hand-over was applied: %q", out)
	}
}
