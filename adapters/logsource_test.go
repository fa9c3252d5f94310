package adapters

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// fakeChannel is a journaled channel with an empty state.
type fakeChannel struct {
	Base
	uri string
	j   *journal.Journal
}

func (f *fakeChannel) URI() string            { return f.uri }
func (f *fakeChannel) Traits() Traits         { return Traits{} }
func (f *fakeChannel) Subscribe(Subscriber)   {}
func (f *fakeChannel) Unsubscribe(Subscriber) {}
func (f *fakeChannel) Resume(_ Subscriber, lastSeq uint64) delivery.Source {
	return ResumeLog(f, f.j, lastSeq)
}
func (f *fakeChannel) Recover(lastSeq uint64) Recovery   { return RecoverLog(f, f.j, lastSeq) }
func (f *fakeChannel) Source(Subscriber) delivery.Source { return NewLogSource(f, f.j) }
func (f *fakeChannel) Snapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: f.uri, State: json.RawMessage(`{}`), FromSeq: f.j.Seq()})
}

func appendText(t *testing.T, j *journal.Journal, ch, text string) uint64 {
	t.Helper()
	e, err := j.Append(ch, func(uint64) ([]byte, error) { return []byte(text), nil })
	if err != nil {
		t.Fatal(err)
	}
	return e.Seq
}

// TestLogSource: the snapshot first (fromSeq the journal's seq), then each
// action after it once, in order; a cursor the journal no longer reaches
// gets a fresh snapshot; WaitPulled returns once everything is pulled.
//
// It runs in a synctest bubble, so that WaitPulled is known to be
// waiting (synctest.Wait) before the pulls it waits for: blocking, not
// an early return, is what is tested.
func TestLogSource(t *testing.T) {
	synctest.Test(t, testLogSource)
}

func testLogSource(t *testing.T) {
	j := journal.New(journal.Limits{ChannelMaxBytes: 64})
	ch := &fakeChannel{uri: "ahp-terminal:/ls", j: j}
	appendText(t, j, ch.uri, `{"old":1}`)
	ls := NewLogSource(ch, j)
	if ls.LagBelow(1 << 20) {
		t.Error("a pending snapshot is not a lag")
	}
	snap := string(ls.Next().Text)
	want := `{"jsonrpc":"2.0","method":"channel/snapshot","params":{"channel":"ahp-terminal:/ls","snapshot":{"resource":"ahp-terminal:/ls","state":{},"fromSeq":1}}}`
	if snap != want {
		t.Fatalf("first message %s\nwant %s", snap, want)
	}
	if !ls.Next().IsZero() {
		t.Fatal("an action before the snapshot's seq was sent")
	}
	appendText(t, j, ch.uri, `{"a":2}`)
	appendText(t, j, ch.uri, `{"a":3}`)
	if ls.LagBelow(2) {
		t.Error("two actions unpulled: lag not below 2 bytes")
	}
	for _, w := range []string{`{"a":2}`, `{"a":3}`} {
		if got := string(ls.Next().Text); got != w {
			t.Fatalf("got %s, want %s", got, w)
		}
	}
	done := make(chan struct{})
	defer close(done) // ends a WaitPulled left waiting by a failure
	if !ls.Next().IsZero() || !ls.WaitPulled(done) {
		t.Fatal("caught up, but WaitPulled did not say so")
	}
	// Fill the 64-byte journal past the cursor: a resync snapshot.
	for range 10 {
		appendText(t, j, ch.uri, `{"fill":"0123456789"}`)
	}
	if got := string(ls.Next().Text); !strings.Contains(got, "channel/snapshot") || ls.Resyncs() != 1 {
		t.Fatalf("after truncation: %s (resyncs %d), want a fresh snapshot", got, ls.Resyncs())
	}
	// WaitPulled waits for the writer (here the test) to pull.
	appendText(t, j, ch.uri, `{"late":1}`)
	pulled := make(chan bool, 1)
	go func() { pulled <- ls.WaitPulled(done) }()
	synctest.Wait()
	select {
	case ok := <-pulled:
		t.Fatalf("WaitPulled returned %v with an action not pulled", ok)
	default:
	}
	if got := string(ls.Next().Text); got != `{"late":1}` {
		t.Fatalf("got %s", got)
	}
	_ = ls.Next() // finds nothing: signals
	select {
	case ok := <-pulled:
		if !ok {
			t.Error("WaitPulled reported not pulled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitPulled did not return once everything was pulled")
	}
	// Stop ends a wait that could not finish.
	appendText(t, j, ch.uri, `{"never":1}`)
	go func() { pulled <- ls.WaitPulled(done) }()
	synctest.Wait() // waiting: Stop ends the wait, not a check before it
	ls.Stop()
	if ok := <-pulled; ok {
		t.Error("WaitPulled after Stop reported everything pulled")
	}
}

func TestRecoveryString(t *testing.T) {
	for r, want := range map[Recovery]string{RecoverNone: "none", RecoverReplay: "replay", RecoverSnapshot: "snapshot", RecoverLive: "live", 9: "unknown"} {
		if got := r.String(); got != want {
			t.Errorf("%d: %q, want %q", r, got, want)
		}
	}
}

// chanWriter hands every message written to the test.
type chanWriter chan string

func (w chanWriter) WriteMessage(ctx context.Context, text []byte) error {
	select {
	case w <- string(text):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestLogSourceWakesItsStream: attached to a stream (delivery.Attacher),
// the source's journal listener wakes the scheduler for each action
// appended later, with nothing else on the path; detached (the stream
// removed), it no longer listens.
func TestLogSourceWakesItsStream(t *testing.T) {
	j := journal.New(journal.Limits{ChannelMaxBytes: 1 << 20})
	ch := &fakeChannel{uri: "ahp-terminal:/wake", j: j}
	sched := delivery.NewScheduler(delivery.SchedulerConfig{})
	ls := NewLogSource(ch, j)
	st := sched.AddStream(ch.uri, delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 16 << 10}, ls)
	w := make(chanWriter)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sched.Run(ctx, w) }()
	defer func() {
		cancel()
		<-done
	}()
	next := func() string {
		t.Helper()
		select {
		case m := <-w:
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("nothing written within 5 s")
			return ""
		}
	}
	if m := next(); !strings.Contains(m, "channel/snapshot") {
		t.Fatalf("first %s, want the snapshot", m)
	}
	for _, a := range []string{`{"a":1}`, `{"a":2}`} {
		appendText(t, j, ch.uri, a)
		if m := next(); m != a {
			t.Fatalf("wrote %s, want %s", m, a)
		}
	}
	st.Remove()
	if n := j.Listeners(ch.uri); n != 0 {
		t.Fatalf("%d journal listeners after the stream was removed, want 0", n)
	}
}
