package host

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestHeldOverflowGaps: more than maxHeldActions actions between an
// ordinary subscription's snapshot and its activation are not dropped
// silently (seed 003): the held ones give way to one channel/gap after
// the snapshot's seq, and nothing else of the channel is queued.
func TestHeldOverflowGaps(t *testing.T) {
	s := New(config.Default(), hclog.NewNullLogger())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	a, b := transport.Pipe(4096)
	defer a.Close(transport.CloseNormal, "")
	c := newConn(s, b)
	defer c.sched.Close(nil)
	const ch = "ahp-terminal:/held"
	sub := &subscription{c: c, channel: ch, gapFrom: 41}
	for i := range maxHeldActions + 1 {
		sub.onEntry(ch, journal.Entry{Seq: uint64(42 + i), Text: []byte(`{"jsonrpc":"2.0","method":"action"}`)})
	}
	if len(sub.held) != 0 || !sub.gapped {
		t.Fatalf("after %d actions: %d held, gapped %v; want none held and gapped", maxHeldActions+1, len(sub.held), sub.gapped)
	}
	sub.onEntry(ch, journal.Entry{Seq: 5000, Text: []byte(`{}`)}) // still before activation: covered by the gap
	sub.activate()
	protected, _, ordinary := c.sched.QueueLens()
	if protected != 1 || ordinary != 0 || c.sched.Gaps() != 1 {
		t.Fatalf("queued %d protected, %d ordinary, %d gaps; want the one gap", protected, ordinary, c.sched.Gaps())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = c.sched.Run(ctx, b) }()
	got, err := a.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":%q,"afterSeq":41}}`, ch)
	if string(got) != want {
		t.Errorf("sent %s\nwant %s", got, want)
	}
	// Once active, actions go to the FIFO again, after the gap.
	sub.onEntry(ch, journal.Entry{Seq: 5001, Text: []byte(`{"n":5001}`)})
	if got, err = a.ReadMessage(ctx); err != nil || !strings.Contains(string(got), "5001") {
		t.Errorf("after the gap: %s, %v; want the action queued after activation", got, err)
	}
}
