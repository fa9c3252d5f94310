package adapters

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// countingChannel is a journaled channel whose snapshot says how many
// were built, and can hold a build until released or make it take time.
type countingChannel struct {
	fakeChannel
	builds atomic.Int64
	hold   chan struct{} // if not nil, each build waits for a value
	took   time.Duration // each build sleeps this long (synctest: fake time)

	mu           sync.Mutex
	starts, ends []time.Time // of each build
}

func (c *countingChannel) Snapshot(fn func(rpc.Snapshot)) {
	if c.hold != nil {
		<-c.hold
	}
	c.mu.Lock()
	c.starts = append(c.starts, time.Now())
	c.mu.Unlock()
	time.Sleep(c.took)
	defer func() {
		c.mu.Lock()
		c.ends = append(c.ends, time.Now())
		c.mu.Unlock()
	}()
	n := c.builds.Add(1)
	fn(rpc.Snapshot{Resource: c.uri, State: json.RawMessage(fmt.Sprintf(`{"build":%d}`, n)), FromSeq: c.j.Seq()})
}

func waitReady(t *testing.T, ready <-chan struct{}) {
	t.Helper()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot built within 10 s")
	}
}

// TestSnapshotsShared: windowed sources of one channel take their
// snapshots from one build made off their Next (which returns nil
// meanwhile), the same text for each; a later source reuses it while it
// is younger than MaxSnapshotAge and the journal holds what follows, and
// gets a new build once it is that old, or once the journal dropped past
// it. It runs in a synctest bubble: the build's age is exactly the time
// the test lets pass.
func TestSnapshotsShared(t *testing.T) {
	synctest.Test(t, testSnapshotsShared)
}

func testSnapshotsShared(t *testing.T) {
	j := journal.New(journal.Limits{ChannelMaxBytes: 64})
	// Each build waits for the test's word (hold): the build runs beside
	// the subscribers, and one that finished before the next Next would
	// be taken there, so that "nothing yet" could not be checked.
	ch := &countingChannel{fakeChannel: fakeChannel{uri: "ahp-terminal:/shared", j: j}, hold: make(chan struct{})}
	appendText(t, j, ch.uri, `{"a":1}`)
	ready := make(chan struct{}, 8)
	snaps := NewSnapshots(ch, j, func() { ready <- struct{}{} })
	defer snaps.Close()

	a := NewLogSource(ch, j).Shared(snaps)
	b := NewLogSource(ch, j).Shared(snaps)
	if m := a.Next(); !m.IsZero() {
		t.Fatalf("Next built on the writer: %s", m.Text)
	}
	if m := b.Next(); !m.IsZero() {
		t.Fatalf("Next built on the writer: %s", m.Text)
	}
	if a.LagBelow(1 << 20) {
		t.Error("a snapshot being built is not a lag")
	}
	ch.hold <- struct{}{}
	waitReady(t, ready)
	want := `{"jsonrpc":"2.0","method":"channel/snapshot","params":{"channel":"ahp-terminal:/shared","snapshot":{"resource":"ahp-terminal:/shared","state":{"build":1},"fromSeq":1}}}`
	for name, ls := range map[string]*LogSource{"a": a, "b": b} {
		if got := string(ls.Next().Text); got != want {
			t.Fatalf("%s: %s\nwant %s", name, got, want)
		}
	}
	if n := ch.builds.Load(); n != 1 {
		t.Fatalf("%d builds for two subscribers, want 1", n)
	}
	// A later subscriber, the build just under MaxSnapshotAge old: the
	// journal holds everything after seq 1.
	appendText(t, j, ch.uri, `{"a":2}`)
	time.Sleep(MaxSnapshotAge - time.Nanosecond)
	c := NewLogSource(ch, j).Shared(snaps)
	if got := string(c.Next().Text); got != want {
		t.Fatalf("late subscriber: %s, want the shared build", got)
	}
	if got := string(c.Next().Text); got != `{"a":2}` {
		t.Fatalf("after the shared snapshot: %s, want the action after it", got)
	}
	// MaxSnapshotAge old: a new build.
	time.Sleep(time.Nanosecond)
	e := NewLogSource(ch, j).Shared(snaps)
	if m := e.Next(); !m.IsZero() {
		t.Fatalf("a snapshot MaxSnapshotAge old was reused: %s", m.Text)
	}
	ch.hold <- struct{}{}
	waitReady(t, ready)
	if got := string(e.Next().Text); !strings.Contains(got, `"build":2`) || !strings.Contains(got, `"fromSeq":2`) {
		t.Fatalf("got %s, want build 2 at seq 2", got)
	}
	// The 64-byte journal drops past seq 2: a new build, young as the
	// one before is.
	for range 10 {
		appendText(t, j, ch.uri, `{"fill":"0123456789"}`)
	}
	d := NewLogSource(ch, j).Shared(snaps)
	if m := d.Next(); !m.IsZero() {
		t.Fatalf("a snapshot the journal no longer follows was reused: %s", m.Text)
	}
	ch.hold <- struct{}{}
	waitReady(t, ready)
	if got := string(d.Next().Text); !strings.Contains(got, `"build":3`) || !strings.Contains(got, `"fromSeq":12`) {
		t.Fatalf("got %s, want build 3 at seq 12", got)
	}
	// c fell behind the journal too: a resync takes build 3, counted once.
	if got := string(c.Next().Text); !strings.Contains(got, `"build":3`) || c.Resyncs() != 1 {
		t.Fatalf("resync: %s (resyncs %d), want build 3 once", got, c.Resyncs())
	}
}

// TestSnapshotsPaced: a build starts no sooner than the previous one's
// duration after it ended, so the builds take at most half of a core
// whatever the subscribers do; a build asked for later than that starts
// at once. Each build takes 40 ms of the bubble's clock.
func TestSnapshotsPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const took = 40 * time.Millisecond
		j := journal.New(journal.Limits{ChannelMaxBytes: 64})
		ch := &countingChannel{fakeChannel: fakeChannel{uri: "ahp-terminal:/paced", j: j}, took: took}
		ready := make(chan struct{}, 8)
		snaps := NewSnapshots(ch, j, func() { ready <- struct{}{} })
		defer snaps.Close()
		t0 := time.Now()
		// stale makes the newest build useless to a new subscriber: the
		// 64-byte journal drops past it.
		stale := func() {
			for range 4 {
				appendText(t, j, ch.uri, `{"fill":"0123456789"}`)
			}
		}
		build := func(n int) {
			t.Helper()
			ls := NewLogSource(ch, j).Shared(snaps)
			if m := ls.Next(); !m.IsZero() {
				t.Fatalf("build %d: a stale snapshot was reused: %s", n, m.Text)
			}
			waitReady(t, ready)
			if got := string(ls.Next().Text); !strings.Contains(got, fmt.Sprintf(`"build":%d`, n)) {
				t.Fatalf("got %s, want build %d", got, n)
			}
		}
		build(1) // at once: t0 to t0+40ms
		stale()
		build(2) // asked at t0+40ms: starts at t0+80ms
		stale()
		time.Sleep(time.Second)
		build(3) // asked at t0+1.12s, long after t0+120ms+40ms: at once
		ch.mu.Lock()
		defer ch.mu.Unlock()
		want := []time.Duration{0, 2 * took, 3*took + time.Second}
		for i, w := range want {
			if got := ch.starts[i].Sub(t0); got != w {
				t.Errorf("build %d started at t0+%v, want t0+%v", i+1, got, w)
			}
			if got := ch.ends[i].Sub(ch.starts[i]); got != took {
				t.Errorf("build %d took %v, want %v", i+1, got, took)
			}
		}
	})
}

// TestSnapshotsWaitedBuildTaken: a source that waited for a build takes
// it even when the journal moved past it while it was built (a flood
// that outruns the builds never starves a subscriber).
func TestSnapshotsWaitedBuildTaken(t *testing.T) {
	j := journal.New(journal.Limits{ChannelMaxBytes: 64})
	ch := &countingChannel{fakeChannel: fakeChannel{uri: "ahp-terminal:/flood", j: j}, hold: make(chan struct{})}
	ready := make(chan struct{}, 8)
	snaps := NewSnapshots(ch, j, func() { ready <- struct{}{} })
	defer snaps.Close()
	ls := NewLogSource(ch, j).Shared(snaps)
	woke := make(chan struct{}, 4)
	ls.setWake(func() { woke <- struct{}{} })
	<-woke // it wakes once at once (a build may have ended before it)
	if !ls.Next().IsZero() {
		t.Fatal("built on the writer")
	}
	ch.hold <- struct{}{} // the build takes its snapshot at seq 0 ...
	waitReady(t, ready)
	select { // the build woke the waiting source's stream (ready runs after)
	case <-woke:
	default:
		t.Fatal("the build did not wake the source that waited for it")
	}
	for range 10 { // ... and the journal drops past it before Next
		appendText(t, j, ch.uri, `{"fill":"0123456789"}`)
	}
	if got := string(ls.Next().Text); !strings.Contains(got, `"build":1`) {
		t.Fatalf("got %q, want the build waited for", got)
	}
	// The cursor (0) is behind the journal now: a resync waits for the
	// next build.
	if m := ls.Next(); !m.IsZero() {
		t.Fatalf("got %s, want a wait for build 2", m.Text)
	}
	ch.hold <- struct{}{}
	waitReady(t, ready)
	if got := string(ls.Next().Text); !strings.Contains(got, `"build":2`) || ls.Resyncs() != 1 {
		t.Fatalf("got %s (resyncs %d), want build 2", got, ls.Resyncs())
	}
}

// TestSnapshotsClosed: once closed, a source builds its snapshot itself
// (a channel going away leaves no goroutine behind).
func TestSnapshotsClosed(t *testing.T) {
	j := journal.New(journal.Limits{ChannelMaxBytes: 64})
	ch := &countingChannel{fakeChannel: fakeChannel{uri: "ahp-terminal:/closed", j: j}}
	snaps := NewSnapshots(ch, j, nil)
	snaps.Close()
	ls := NewLogSource(ch, j).Shared(snaps)
	if got := string(ls.Next().Text); !strings.Contains(got, `"build":1`) {
		t.Fatalf("got %q, want a snapshot built at once", got)
	}
}
