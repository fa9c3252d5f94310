package host

import (
	"context"
	"errors"
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
	s := mustNew(t, config.Default(), hclog.NewNullLogger())
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

// TestShouldRetain: what keeps a client's state for a reconnect. A close
// from the client (a detach) keeps nothing whatever the host's writes met
// after it (a detach racing output was kept, and its terminal stayed
// held); a read or write that failed is a loss; a close by the host for
// cause is not.
func TestShouldRetain(t *testing.T) {
	s := mustNew(t, config.Default(), hclog.NewNullLogger())
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	}()
	pipeErr := func(code transport.CloseCode) *error {
		var err error = &transport.PipeCloseError{Code: code}
		return &err
	}
	for _, c := range []struct {
		name      string
		readErr   *error
		closeErr  error
		writeLost bool
		handover  bool
		want      bool
	}{
		{"detach", pipeErr(transport.CloseNormal), nil, false, false, false},
		{"detach, then a write failed", pipeErr(transport.CloseNormal), errors.New("write failed"), true, false, false},
		{"going away", pipeErr(transport.CloseGoingAway), nil, false, false, false},
		{"lost under the reader", pipeErr(transport.CloseInternalError), nil, false, false, true},
		{"lost under the writer", nil, errors.New("write failed"), true, false, true},
		{"closed by the host for cause", pipeErr(transport.CloseInternalError), errors.New("window exceeded"), false, false, false},
		{"handed over", nil, errors.New("resumed on another connection"), false, true, true},
	} {
		_, b := transport.Pipe(1)
		conn := newConn(s, b)
		conn.initialized = true
		if c.readErr != nil {
			conn.readErr.Store(c.readErr)
		}
		conn.closeErr = c.closeErr
		conn.writeLost.Store(c.writeLost)
		conn.handover.Store(c.handover)
		if got := s.shouldRetain(conn); got != c.want {
			t.Errorf("%s: retained %v, want %v", c.name, got, c.want)
		}
		conn.sched.Close(nil)
	}
}
