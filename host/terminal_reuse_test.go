package host_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestTerminalOutputBuffersNotAliased: the PTY reader decodes each read
// into the decoder's reused buffer and encodes its envelope into the
// terminal's reused buffer (terminal.output); the journal must keep copies.
// Many reads of distinct numbered lines go to an ordinary subscriber
// (whose queued messages share the journal's texts) and a windowed one
// (which pulls the journal's texts after later output was encoded); both
// must read the output exactly, in order, with no chunk overwritten by a
// later one (the viewer: its snapshot's content, then its actions).
func TestTerminalOutputBuffersNotAliased(t *testing.T) {
	// The viewer never credits: its window (the host's maximum raised to
	// match) holds the whole output however many reads it comes in (3000
	// lines can be 3000 messages of ~300 UTF-16 bytes each).
	const window = 8 << 20
	srv := newServer(t, func(c *config.Config) {
		c.Delivery.OrdinaryQueueMessages = 1 << 16
		c.Delivery.WindowBytes = window
		// Frames large enough for a late snapshot (the whole output)
		// to come whole: this test reads messages, not fragments.
		c.Delivery.MaximumFrameBytes = 1 << 20
	})
	holder, viewer := connect(t, srv), connect(t, srv)
	holder.initialize("holder")
	viewer.initialize("viewer")
	const uri = "ahp-terminal:/reuse"
	const lines = 3000
	var want strings.Builder
	for i := range lines {
		fmt.Fprintf(&want, "line %05d\n", i)
	}
	script := fmt.Sprintf(`stty raw -echo; i=0; while [ $i -lt %d ]; do printf 'line %%05d\n' $i; i=$((i+1)); done`, lines)
	holder.mustCall(rpc.MethodCreateTerminal, rpc.CreateTerminalParams{Channel: uri, Command: []string{"sh", "-c", script}})
	// The reader waits for the claim holder: the viewer's windowed
	// subscription starts before any output, then the holder's ordinary
	// one lets it read.
	viewer.mustCall(rpc.MethodSubscribe, windowed(uri, window, 1<<20))
	holder.mustCall(rpc.MethodSubscribe, rpc.SubscribeParams{Channel: uri})

	for _, c := range []struct {
		name string
		hc   *hostConn
	}{{"ordinary", holder}, {"windowed", viewer}} {
		var got strings.Builder
		chunks := 0
		for done := false; !done; {
			m, _ := c.hc.until("an action or a snapshot", func(m *msg) bool {
				return m.Method == rpc.MethodAction || m.Method == rpc.MethodChannelSnapshot
			})
			if m.Method == rpc.MethodChannelSnapshot {
				// The windowed viewer's snapshot is taken when the host
				// first sends to it, which may be after the first reads:
				// their text is its content (the scrollback).
				var p struct {
					Snapshot struct {
						State struct{ Content []struct{ Value string } }
					}
				}
				if err := json.Unmarshal(m.Params, &p); err != nil {
					t.Fatalf("%s: %s: %v", c.name, m.Raw, err)
				}
				got.Reset()
				for _, part := range p.Snapshot.State.Content {
					got.WriteString(part.Value)
				}
				continue
			}
			typ, raw, env := m.action()
			if env.Channel != uri {
				continue
			}
			switch typ {
			case rpc.ActionTerminalData:
				var a struct{ Data string }
				if err := json.Unmarshal(raw, &a); err != nil {
					t.Fatalf("%s: %s: %v", c.name, raw, err)
				}
				got.WriteString(a.Data)
				chunks++
			case rpc.ActionTerminalExited:
				done = true
			}
		}
		if got.String() != want.String() {
			g, w := got.String(), want.String()
			i := 0
			for i < min(len(g), len(w)) && g[i] == w[i] {
				i++
			}
			t.Fatalf("%s: %d bytes in %d chunks differ from the %d bytes written at byte %d: got %q, want %q",
				c.name, len(g), chunks, len(w), i, g[i:min(i+40, len(g))], w[i:min(i+40, len(w))])
		}
		if c.hc == holder && chunks < 2 { // the viewer's may all be in its snapshot
			t.Fatalf("%s: the output came in %d chunk(s): nothing was reused", c.name, chunks)
		}
		t.Logf("%s: %d bytes in %d chunks", c.name, got.Len(), chunks)
	}
}
