package telemetry

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// pushSub is an ordinary adapters.Subscriber whose FIFO takes a push or
// not, as the test says.
type pushSub struct {
	ok     bool
	pushed []string
}

func (p *pushSub) ClientID() string         { return "c" }
func (*pushSub) Identity() auth.Identity    { return auth.Anonymous }
func (p *pushSub) Conn() adapters.ConnID    { return 1 }
func (p *pushSub) Stream() *delivery.Stream { return nil }
func (p *pushSub) CanPush(int) bool         { return p.ok }
func (p *pushSub) PushControl([]byte)       {}
func (p *pushSub) Closing() bool            { return false }
func (p *pushSub) Push(text []byte, _ int) bool {
	if p.ok {
		p.pushed = append(p.pushed, string(text))
	}
	return p.ok
}

// TestOrdinarySkipsReported (issue 16: telemetry is live only, and its
// skips are counted): a batch an ordinary subscription's FIFO had no room
// for, and a tick it was not offered one, are reported in the next batch
// it gets as "skipped" and counted in the Hub's SkipsReported.
func TestOrdinarySkipsReported(t *testing.T) {
	h := &Hub{}
	ps := &pushSub{ok: true}
	os := &sub{ch: &Channel{ts: &Channels{hub: h}, name: rpc.MetricsChannel}, s: ps}
	batch := func(tick uint64) *Batch {
		return &Batch{Seq: tick, Tick: tick, Text: Notification(rpc.MethodOTLPExportMetrics, rpc.MetricsChannel, []byte(`{}`))}
	}
	os.Offer(batch(1))
	ps.ok = false
	os.Offer(batch(2)) // no room in the FIFO
	// tick 3: not ready, not offered
	ps.ok = true
	os.Offer(batch(4))
	os.Offer(batch(5))
	want := []string{
		`{"jsonrpc":"2.0","method":"otlp/exportMetrics","params":{"channel":"ahp-otlp://metrics","payload":{}}}`,
		`{"jsonrpc":"2.0","method":"otlp/exportMetrics","params":{"channel":"ahp-otlp://metrics","payload":{},"skipped":2}}`,
		`{"jsonrpc":"2.0","method":"otlp/exportMetrics","params":{"channel":"ahp-otlp://metrics","payload":{}}}`,
	}
	if len(ps.pushed) != len(want) {
		t.Fatalf("pushed %q, want %q", ps.pushed, want)
	}
	for i := range want {
		if ps.pushed[i] != want[i] {
			t.Errorf("push %d = %s, want %s", i, ps.pushed[i], want[i])
		}
	}
	if n := h.Stats().SkipsReported; n != 2 {
		t.Errorf("SkipsReported = %d, want 2", n)
	}
}

// tickSub is an ordinary adapters.Subscriber pushed to from the Hub's
// goroutine: its FIFO takes a push or not, as the test says.
type tickSub struct {
	pushSub
	open  atomic.Bool
	mu    sync.Mutex
	texts []string
}

func (p *tickSub) CanPush(int) bool { return p.open.Load() }
func (p *tickSub) Push(text []byte, _ int) bool {
	if !p.open.Load() {
		return false
	}
	p.mu.Lock()
	p.texts = append(p.texts, string(text))
	p.mu.Unlock()
	return true
}

// TestHubSkipsReported: on the Hub's own ticks (its system clock, in a
// synctest bubble), an ordinary subscription not ready for two ticks
// gets the next batch with "skipped":2; those ticks sampled nothing
// (nobody was ready) and the Hub counts the 2 reported.
func TestHubSkipsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newTestHub(t, time.Second)
		ps := &tickSub{}
		ps.open.Store(true)
		os := &sub{ch: &Channel{ts: &Channels{hub: h}, name: rpc.MetricsChannel}, s: ps}
		h.Add(rpc.MetricsChannel, 0, os)
		pass(time.Second) // tick 1: pushed
		ps.open.Store(false)
		pass(2 * time.Second) // ticks 2 and 3: not ready
		ps.open.Store(true)
		pass(2 * time.Second) // ticks 4 (2 skipped) and 5
		ps.mu.Lock()
		texts := ps.texts
		ps.mu.Unlock()
		if len(texts) != 3 {
			t.Fatalf("%d batches pushed in 5 ticks, want 3", len(texts))
		}
		for i, want := range []string{"", `,"skipped":2}}`, ""} {
			skipped := strings.Contains(texts[i], `"skipped"`)
			if want == "" && skipped || want != "" && !strings.HasSuffix(texts[i], want) {
				t.Errorf("batch %d ends %q, want %q", i+1, texts[i][max(0, len(texts[i])-40):], want)
			}
		}
		if st := h.Stats(); st.Samples != 3 || st.Skipped != 2 || st.SkipsReported != 2 {
			t.Errorf("stats %+v, want 3 samples, 2 skipped, 2 reported", st)
		}
	})
}

// TestLogsSkipsReported: a subscriber of the daemon's own logs channel
// that fell more than the ring behind is told how many records it missed
// ("skipped" on its next message), once, and the records it gets are the
// ring's newest.
func TestLogsSkipsReported(t *testing.T) {
	ts := &Channels{ring: NewRing(4, func() time.Time { return time.Unix(5, 0) }), sampler: NewSampler(Options{})}
	ts.ring.SetMinLevel(hclog.Info)
	os := &sub{ch: &Channel{ts: ts, name: "ahp-otlp://logs", logs: true, level: hclog.Info}, s: &pushSub{ok: true}}
	for i := range 10 {
		ts.ring.Accept("x", hclog.Info, fmt.Sprintf("r%d", i))
	}
	text := string(os.nextLogs())
	if !strings.HasSuffix(text, `,"skipped":6}}`) || !strings.Contains(text, `"r6"`) || strings.Contains(text, `"r5"`) || !strings.Contains(text, `"r9"`) {
		t.Fatalf("after 10 records into a ring of 4: %s", text)
	}
	ts.ring.Accept("x", hclog.Info, "r10")
	if text := string(os.nextLogs()); strings.Contains(text, `"skipped"`) || !strings.Contains(text, `"r10"`) {
		t.Errorf("the next message: %s, want r10 and no skipped", text)
	}
	if os.nextLogs() != nil {
		t.Error("a message with nothing new")
	}
}
