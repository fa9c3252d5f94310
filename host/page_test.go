package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/internal/conntypes"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// appendRootActions logs n actions of type test/n on the root channel
// (pushed to its subscribers as any root action), each padded with pad
// bytes, and returns their entries.
func appendRootActions(srv *host.Server, n, pad int) []journal.Entry {
	var out []journal.Entry
	for i := range n {
		head := rpc.AppendActionOpen(nil, rpc.RootChannel)
		head = fmt.Appendf(head, `{"type":"test/n","n":%d,"pad":%q}`, i, strings.Repeat("x", pad))
		head = append(head, rpc.ActionSeqMember...)
		out = append(out, srv.Journal().AppendSeq(rpc.RootChannel, head, rpc.ActionEnvelopeEnd))
	}
	return out
}

// params returns an entry's action envelope, as a page carries it.
func params(t *testing.T, e journal.Entry) string {
	t.Helper()
	var m struct {
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(e.Text, &m); err != nil {
		t.Fatal(err)
	}
	return string(m.Params)
}

func (hc *hostConn) page(channel string, after uint64, limit int) rpc.ChannelPageResult {
	hc.t.Helper()
	p := map[string]any{"channel": channel, "afterSeq": after}
	if limit != 0 {
		p["limit"] = limit
	}
	r, _ := hc.mustCall(rpc.MethodChannelPage, p)
	var res rpc.ChannelPageResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		hc.t.Fatal(err)
	}
	if res.Actions == nil {
		hc.t.Fatalf("page result %s: actions is null", r.Raw)
	}
	return res
}

// rootAfter returns the root channel's journal entries after after (other
// root actions, the listening ports, may come between the test's own).
func rootAfter(t *testing.T, srv *host.Server, after uint64) []journal.Entry {
	t.Helper()
	es, err := srv.Journal().Read(rpc.RootChannel, after, 0)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// checkPage compares a page with the journal's entries want.
func checkPage(t *testing.T, what string, res rpc.ChannelPageResult, want []journal.Entry, toSeq uint64, srv *host.Server) {
	t.Helper()
	if len(res.Actions) != len(want) || res.ToSeq != toSeq || res.HeadSeq < toSeq || res.HeadSeq > srv.Journal().Head(rpc.RootChannel) {
		t.Fatalf("%s: %d actions to %d (head %d), want %d to %d", what, len(res.Actions), res.ToSeq, res.HeadSeq, len(want), toSeq)
	}
	for i, e := range want {
		if got := string(res.Actions[i]); got != params(t, e) {
			t.Fatalf("%s: action %d = %s, want %s", what, i, got, params(t, e))
		}
	}
}

// checkPrefix checks a page read after after: its actions are the
// journal's first ones after after, exactly (other root actions, the
// listening ports, may be appended at any time: the journal read now may
// hold more), n of them when n > 0, reaching at least reach.
func checkPrefix(t *testing.T, what string, srv *host.Server, res rpc.ChannelPageResult, after uint64, n int, reach uint64) {
	t.Helper()
	all := rootAfter(t, srv, after)
	if len(res.Actions) > len(all) || n > 0 && len(res.Actions) != n {
		t.Fatalf("%s: %d actions, journal has %d after %d, want %d", what, len(res.Actions), len(all), after, n)
	}
	checkPage(t, what, res, all[:len(res.Actions)], max(after, res.ToSeq), srv)
	if len(res.Actions) > 0 && res.ToSeq != all[len(res.Actions)-1].Seq || len(res.Actions) == 0 && res.ToSeq != after || res.ToSeq < reach {
		t.Fatalf("%s: toSeq %d, want the last action's, at least %d", what, res.ToSeq, reach)
	}
}

// TestChannelPage (issue 16, seed 003 cursor reads): channel/page returns
// the journal's actions after afterSeq exactly (the envelopes as pushed),
// at most limit, with the seq they reach and the channel's head.
func TestChannelPage(t *testing.T) {
	t.Parallel()
	conntypes.Run(t, func(t *testing.T, ct conntypes.Type) {
		srv := newServer(t, nil)
		hc := connectOver(t, srv, ct)
		init := hc.initialize("pager", rpc.RootChannel)
		from := init.Snapshots[0].FromSeq
		es := appendRootActions(srv, 5, 0)

		res := hc.page(rpc.RootChannel, from, 2)
		checkPrefix(t, "limit 2", srv, res, from, 2, 0)
		checkPrefix(t, "the rest", srv, hc.page(rpc.RootChannel, res.ToSeq, 0), res.ToSeq, 0, es[4].Seq)
		checkPrefix(t, "past the head", srv, hc.page(rpc.RootChannel, es[4].Seq, 0), es[4].Seq, 0, es[4].Seq)
		checkPrefix(t, "limit beyond the maximum", srv, hc.page(rpc.RootChannel, from, rpc.MaxPageActions*10), from, 0, es[4].Seq)

		// The live pushes carry the same envelopes.
		for i, e := range es {
			m, _ := hc.until(fmt.Sprintf("action %d", e.Seq), func(m *msg) bool { _, _, env := m.action(); return env.ServerSeq == e.Seq })
			if got := string(m.Params); got != params(t, e) {
				t.Fatalf("pushed action %d = %s, want %s", i, got, params(t, e))
			}
		}
	})
}

// TestChannelPageBounds: a page holds at most rpc.MaxPageActions actions
// and rpc.MaxPageBytes of envelopes (at least one action).
func TestChannelPageBounds(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(c *config.Config) { c.Journal.MaxBytes = 64 << 20; c.Terminal.MaxTotal = 4 })
	hc := connect(t, srv)
	from := hc.initialize("pager", rpc.RootChannel).Snapshots[0].FromSeq
	small := appendRootActions(srv, rpc.MaxPageActions+10, 0)
	checkPrefix(t, "small actions", srv, hc.page(rpc.RootChannel, from, 0), from, rpc.MaxPageActions, 0)

	after := small[len(small)-1].Seq
	appendRootActions(srv, 8, 100<<10) // 100 KiB each
	all := rootAfter(t, srv, after)
	n, bytes := 0, 0
	for ; n < len(all) && bytes+len(all[n].Text) <= rpc.MaxPageBytes; n++ {
		bytes += len(all[n].Text)
	}
	if n < 2 || n > 2+(len(all)-8) { // two of them fit, a third not
		t.Fatalf("%d entries fit in %d bytes", n, rpc.MaxPageBytes)
	}
	checkPage(t, "100 KiB actions", hc.page(rpc.RootChannel, after, 0), all[:n], all[n-1].Seq, srv)

	after = all[len(all)-1].Seq
	appendRootActions(srv, 1, rpc.MaxPageBytes+1)
	all = rootAfter(t, srv, after)
	for len(all[0].Text) <= rpc.MaxPageBytes { // a ports action came first
		after, all = all[0].Seq, all[1:]
	}
	checkPage(t, "one action over MaxPageBytes", hc.page(rpc.RootChannel, after, 0), all[:1], all[0].Seq, srv)
}

// TestChannelPageErrors: bad params are -32602; an unknown channel -32008;
// a channel this connection does not subscribe to -32600; a live-only
// channel -32602; afterSeq older than the journal reaches back -32051
// (kind "truncated": subscribe again).
func TestChannelPageErrors(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	hc := connect(t, srv)
	hc.callErr(rpc.MethodChannelPage, map[string]any{"channel": rpc.RootChannel, "afterSeq": 0}, rpc.CodeNotInitialized)
	from := hc.initialize("pager", rpc.RootChannel).Snapshots[0].FromSeq
	for _, tc := range []struct {
		params any
		want   string
	}{
		{map[string]any{"afterSeq": 0}, `invalid params: "channel" is required`},
		{map[string]any{"channel": rpc.RootChannel}, `invalid params: "afterSeq" is required`},
		{map[string]any{"channel": rpc.RootChannel, "afterSeq": "1"}, `invalid params: "afterSeq" must be`},
		{map[string]any{"channel": rpc.RootChannel, "afterSeq": -1}, `invalid params`},
		{map[string]any{"channel": rpc.RootChannel, "afterSeq": 0, "limit": -1}, `invalid params: limit must be 0 (the host's maximum, 1024 actions) or more, got -1`},
		{map[string]any{"channel": rpc.RootChannel, "afterSeq": 0, "limit": "2"}, `invalid params: "limit" must be`},
		{map[string]any{"channel": rpc.RootChannel, "afterSeq": from + 1000}, fmt.Sprintf("invalid params: afterSeq %d is beyond the host's serverSeq ", from+1000)},
		{[]int{1}, `invalid params`},
		{map[string]any{"channel": "ahp-otlp://metrics", "afterSeq": 0}, "invalid params: ahp-otlp://metrics is live only"},
	} {
		if e := hc.callErr(rpc.MethodChannelPage, tc.params, rpc.CodeInvalidParams); !strings.HasPrefix(e.Message, tc.want) {
			t.Errorf("channel/page %v: %q, want %q", tc.params, e.Message, tc.want)
		}
	}
	hc.callErr(rpc.MethodChannelPage, map[string]any{"channel": "ahp-terminal:/nope", "afterSeq": 0}, rpc.CodeNotFound)
	other := connect(t, srv)
	other.initialize("other")
	if e := other.callErr(rpc.MethodChannelPage, map[string]any{"channel": rpc.RootChannel, "afterSeq": from}, rpc.CodeInvalidRequest); e.Message != "not subscribed to ahp-root://: subscribe first" {
		t.Errorf("not subscribed: %q", e.Message)
	}

	// Past the journal's bound (256 KiB per channel here) the oldest
	// entries are gone: a page after them is -32051, one after the
	// oldest retained seq still works.
	es := appendRootActions(srv, 300, 1<<10)
	e := hc.callErr(rpc.MethodChannelPage, map[string]any{"channel": rpc.RootChannel, "afterSeq": from}, rpc.CodeJournalTruncated)
	var data rpc.JournalTruncatedData
	if err := json.Unmarshal(e.Data, &data); err != nil || data.Kind != "truncated" ||
		e.Message != fmt.Sprintf("journal truncated: ahp-root:// no longer holds the actions after serverSeq %d; subscribe again for a fresh snapshot", from) {
		t.Errorf("truncated: %q, data %s", e.Message, e.Data)
	}
	after := es[len(es)-3].Seq
	checkPrefix(t, "after the journal's end", srv, hc.page(rpc.RootChannel, after, 0), after, 0, es[len(es)-1].Seq)
}

// TestGapThenPage (seed 003): a client that does not read while actions
// flood its ordinary subscription gets one channel/gap; what it received
// before the gap and a cursor read from the gap's afterSeq are together
// every action, each once, in order. Over the pipe only: a pipe of 4
// messages makes the FIFO overflow; a socket's buffers would take the
// whole flood.
func TestGapThenPage(t *testing.T) {
	t.Parallel()
	srv := newServer(t, func(c *config.Config) { c.Delivery.OrdinaryQueueMessages = 8; c.Delivery.TransportQueueFrames = 2 })
	appendRootActions(srv, 3, 0) // the subscription starts after serverSeq 3
	a, z := transport.Pipe(4)
	hc := &hostConn{t: t, mc: a, served: make(chan error, 1), nextID: 1}
	go func() { hc.served <- srv.ServeConn(context.Background(), z) }()
	t.Cleanup(func() {
		_ = a.Close(transport.CloseNormal, "")
		<-hc.served
	})
	from := hc.initialize("slow", rpc.RootChannel).Snapshots[0].FromSeq
	appendRootActions(srv, 200, 0) // the client reads nothing meanwhile
	es := rootAfter(t, srv, from)
	var got []uint64
	var gap rpc.ChannelGapParams
	stop := time.Now().Add(deadline)
	for gap.Channel == "" && time.Now().Before(stop) {
		m, err := hc.read()
		if err != nil {
			t.Fatal(err)
		}
		switch m.Method {
		case rpc.MethodAction:
			_, _, env := m.action()
			got = append(got, env.ServerSeq)
		case rpc.MethodChannelGap:
			_ = json.Unmarshal(m.Params, &gap)
		}
	}
	if gap.Channel != rpc.RootChannel || len(got) >= len(es) {
		t.Fatalf("gap %+v after %d of %d actions", gap, len(got), len(es))
	}
	if last := from; len(got) > 0 && got[len(got)-1] != gap.AfterSeq || len(got) == 0 && gap.AfterSeq != last {
		t.Fatalf("actions before the gap %v, gap afterSeq %d (subscribed at %d)", got, gap.AfterSeq, last)
	}
	for after := gap.AfterSeq; after < es[len(es)-1].Seq; {
		res := hc.page(rpc.RootChannel, after, 64)
		for _, raw := range res.Actions {
			var env rpc.ActionEnvelope
			_ = json.Unmarshal(raw, &env)
			got = append(got, env.ServerSeq)
		}
		after = res.ToSeq
	}
	es = rootAfter(t, srv, from)[:min(len(got), len(rootAfter(t, srv, from)))] // a ports action may have come after the test's
	if len(got) != len(es) {
		t.Fatalf("%d actions before the gap and paged (%v), want %d", len(got), got, len(es))
	}
	for i, e := range es {
		if got[i] != e.Seq {
			t.Fatalf("action %d has seq %d, want %d", i, got[i], e.Seq)
		}
	}
	t.Logf("%d actions: the gap after serverSeq %d, the rest paged", len(es), gap.AfterSeq)
}
