package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// gateResolver is the dialer's resolver in TestTCPDialBound: every lookup
// reports its name on entered, then waits for release (or its context),
// so dials hang for exactly as long as the test wants. Names starting
// with "nx" then do not exist; every other name is 127.0.0.1.
type gateResolver struct {
	entered chan string
	release chan struct{}
}

func (r *gateResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	r.entered <- host
	select {
	case <-r.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if strings.HasPrefix(host, "nx") {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// TestTCPDialBound fills delivery.max_concurrent_requests with dials that
// hang in name resolution: one createTcpConnection more is answered
// Overloaded (-32050) at once while the connection keeps serving other
// requests and other connections keep dialing; once released, the held
// dials complete (one opened, one "no such host") and the bound is free
// again.
func TestTCPDialBound(t *testing.T) {
	const bound = 2
	h := newTCPHarness(t, func(cfg *config.Config) {
		cfg.Delivery.MaxConcurrentRequests = bound
		cfg.TCP.DialTimeout = time.Minute // never the reason a dial ends here
	})
	gate := &gateResolver{entered: make(chan string, 8), release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	t.Cleanup(release) // a failed test must not leave dials hanging
	// Set before any connection is served: ServeConn's goroutines start after.
	h.s.tcpTable().Dialer().Resolver = gate
	port, accepted := tcpDest(t)

	p := h.peer("bound-a")
	// Responses come out of order here: collect them by id.
	responses := map[string]tcpMsg{}
	await := func(id int) tcpMsg {
		t.Helper()
		key := fmt.Sprint(id)
		for {
			if m, ok := responses[key]; ok {
				delete(responses, key)
				return m
			}
			m := p.nextMsg(func(m tcpMsg) bool { return m.Method == "" && len(m.ID) > 0 })
			responses[string(m.ID)] = m
		}
	}
	send := func(method string, params any) int {
		t.Helper()
		p.id++
		b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": p.id, "method": method, "params": params})
		if err != nil {
			t.Fatal(err)
		}
		p.send(string(b))
		return p.id
	}
	create := func(uri, host string, port int) int {
		return send("createTcpConnection", map[string]any{"channel": uri, "host": host, "port": port})
	}
	// waitEntered waits until the resolver was entered for each name, in
	// any order (each dial runs in its own goroutine).
	waitEntered := func(want ...string) {
		t.Helper()
		missing := map[string]bool{}
		for _, w := range want {
			missing[w] = true
		}
		for len(missing) > 0 {
			select {
			case got := <-gate.entered:
				if !missing[got] {
					t.Fatalf("resolver entered for %q, want one of %v", got, missing)
				}
				delete(missing, got)
			case <-time.After(10 * time.Second):
				t.Fatalf("no lookup of %v within 10 s", missing)
			}
		}
	}

	// Fill the bound: both dials are in the resolver, holding their slots.
	held := []int{create("ahp-tcp:/held-ok", "ok.test", port), create("ahp-tcp:/held-nx", "nx.test", port)}
	waitEntered("ok.test", "nx.test")

	// One more is Overloaded at once, whatever its destination (an IP
	// literal would not even resolve), and frees nothing.
	extra := create("ahp-tcp:/extra", "127.0.0.1", port)
	m := await(extra)
	if m.Error == nil || m.Error.Code != rpc.CodeOverloaded {
		t.Fatalf("createTcpConnection past the bound: %s, want error %d", m.raw, rpc.CodeOverloaded)
	}
	if msg := m.Error.Message; !strings.Contains(msg, "overloaded") || !strings.Contains(msg, fmt.Sprintf("%d requests already in progress", bound)) || !strings.Contains(msg, "retry") {
		t.Errorf("Overloaded message %q: want the bound (%d) and advice to retry", msg, bound)
	}
	var data struct {
		Kind      string `json:"kind"`
		Retryable bool   `json:"retryable"`
	}
	if err := json.Unmarshal(m.Error.Data, &data); err != nil || data.Kind != "overloaded" || !data.Retryable {
		t.Errorf("Overloaded data %s: want {kind: overloaded, retryable: true}", m.Error.Data)
	}
	// The refused request did not reserve its URI.
	if h.s.tcpTable().Channel("ahp-tcp:/extra") != nil {
		t.Error("the Overloaded request left a channel behind")
	}
	// The reader is not blocked by the dials: another request is answered
	// at once, Overloaded too (the dials are the requests in progress).
	if m := await(send("ping", map[string]any{})); m.Error == nil || m.Error.Code != rpc.CodeOverloaded ||
		string(m.Error.Data) != fmt.Sprintf(`{"kind":"overloaded","retryable":true,"capacity":%d}`, bound) {
		t.Errorf("ping while the dials hang: %s, want Overloaded with capacity %d", m.raw, bound)
	}
	// The bound is per connection: another client dials meanwhile.
	q := h.peer("bound-b")
	if m := q.call("createTcpConnection", map[string]any{"channel": "ahp-tcp:/other", "host": "127.0.0.1", "port": port}); m.Error != nil {
		t.Errorf("createTcpConnection on another connection: %s", m.raw)
	} else {
		(<-accepted).Close()
	}
	// No held request was answered yet.
	for _, id := range held {
		if m, ok := responses[fmt.Sprint(id)]; ok {
			t.Fatalf("request %d answered before its dial was released: %s", id, m.raw)
		}
	}

	// Release: the held dials complete, one opened, one unresolvable.
	release()
	if m := await(held[0]); m.Error != nil || string(m.raw) == "" || !strings.Contains(string(m.raw), `"result":null`) {
		t.Errorf("held dial to ok.test: %s, want result null", m.raw)
	} else {
		(<-accepted).Close()
	}
	if m := await(held[1]); m.Error == nil || m.Error.Code != rpc.CodeTCPConnectionOpenFailed || !strings.Contains(m.Error.Message, "no such host") {
		t.Errorf("held dial to nx.test: %s, want %d no such host", m.raw, rpc.CodeTCPConnectionOpenFailed)
	}
	// The slots are free again: a new dial (through the resolver, which
	// now answers at once) succeeds.
	next := create("ahp-tcp:/after", "ok.test", port)
	waitEntered("ok.test")
	if m := await(next); m.Error != nil {
		t.Errorf("createTcpConnection after the dials completed: %s", m.raw)
	} else {
		(<-accepted).Close()
	}
	if len(responses) != 0 {
		t.Errorf("unexpected responses: %v", responses)
	}
}

// TestTCPDialSlotFreedBeforeAnswer: a client that waits for each answer
// before its next createTcpConnection never meets the bound, even at a
// bound of 1 (the slot is freed before the answer is sent).
func TestTCPDialSlotFreedBeforeAnswer(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
	cfg := config.Default()
	cfg.Delivery.MaxConcurrentRequests = 1
	h := &tcpHarness{t: t, s: mustNew(t, cfg, hclog.NewNullLogger())}
	t.Cleanup(func() { _ = h.s.Shutdown(context.Background()) })
	port, accepted := tcpDest(t)
	go func() {
		for c := range accepted {
			_ = c.Close()
		}
	}()
	p := h.peer("sequential")
	for i := range 200 {
		ch := fmt.Sprintf("ahp-tcp:/s%d", i)
		m := p.call("createTcpConnection", map[string]any{"channel": ch, "host": "127.0.0.1", "port": port})
		if m.Error != nil {
			t.Fatalf("dial %d: %+v", i, m.Error)
		}
		p.notify("unsubscribe", map[string]any{"channel": ch})
	}
}
