package host_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// frameMsg is a channel/frame notification carrying data, not final.
func frameMsg(channel, data string) string {
	return `{"jsonrpc":"2.0","method":"channel/frame","params":{"channel":"` + channel + `","data":"` + data + `"}}`
}

// creditOf returns a channel/credit's channel and consumedBytes.
func creditOf(m *msg) (string, int64, bool) {
	if m.Method != rpc.MethodChannelCredit {
		return "", 0, false
	}
	var p struct {
		Channel       string `json:"channel"`
		ConsumedBytes int64  `json:"consumedBytes"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.Channel, p.ConsumedBytes, true
}

// TestPartialMessagesBounded (issue 16 case 2): unfinished channel/frame
// messages are bounded per connection across subscriptions
// (delivery.max_partial_bytes). Fragments up to the bound are credited
// as they arrive; the one beyond it closes the connection with 1002 and
// a reason, is logged, and is not credited. Before the bound each
// subscription could hold max_message_bytes (16 MiB), all of them
// credited, and the connection stayed open.
func TestPartialMessagesBounded(t *testing.T) {
	t.Parallel()
	const bound = 64 << 10
	srv, logs := newLoggingServer(t, hclog.Info, func(c *config.Config) {
		c.Delivery.MaxMessageBytes = bound
		c.Delivery.MaxPartialBytes = bound
	})
	hc := connect(t, srv)
	hc.initialize("fragments")
	chans := []string{"ahp-terminal:/frag-a", "ahp-terminal:/frag-b"}
	for _, ch := range chans {
		hc.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: ch, Command: []string{"sleep", "300"}})
		hc.mustCall(rpc.MethodSubscribe, windowed(ch, 1<<20, 16384))
	}
	data := strings.Repeat("x", 7000) // 14000 UTF-16 bytes held per fragment
	// a, a, b, b: 56000 of 65536 held; each fragment credited at once.
	credited := map[string]int64{}
	for _, ch := range []string{chans[0], chans[0], chans[1], chans[1]} {
		f := frameMsg(ch, data)
		hc.send(f)
		credited[ch] += int64(2 * len(f))
	}
	for _, ch := range chans {
		want := credited[ch]
		hc.until(fmt.Sprintf("credit %d for %s", want, ch), func(m *msg) bool {
			c, n, ok := creditOf(m)
			return ok && c == ch && n == want
		})
	}
	// A fifth fragment would hold 70000 > 65536.
	hc.send(frameMsg(chans[0], data))
	code, reason, seen := hc.closed()
	wantReason := fmt.Sprintf("delivery: partial messages over the connection's bound on %s: partial messages would hold 70000 > maximum 65536", chans[0])
	if code != transport.CloseProtocolError || reason != wantReason {
		t.Fatalf("closed with %d %q, want 1002 %q", code, reason, wantReason)
	}
	for _, m := range seen {
		if c, n, ok := creditOf(m); ok && n > credited[c] {
			t.Errorf("credit for the fragment beyond the bound: %s", m.Raw)
		}
	}
	if !strings.Contains(logs.String(), "[WARN]  conn: closing connection: peer=pipe-b client=fragments error=\""+wantReason+"\"\n") {
		t.Errorf("no log line for the violation:\n%s", logs.String())
	}
}
