package journal

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// text returns an encoder producing exactly n bytes that start with the seq.
func text(n int) func(seq uint64) ([]byte, error) {
	return func(seq uint64) ([]byte, error) {
		s := fmt.Sprintf("%d:", seq)
		if len(s) > n {
			panic("entry too small for its seq")
		}
		return []byte(s + strings.Repeat("x", n-len(s))), nil
	}
}

func mustAppend(t testing.TB, j *Journal, ch string, enc func(uint64) ([]byte, error)) Entry {
	t.Helper()
	e, err := j.Append(ch, enc)
	if err != nil {
		t.Fatalf("Append(%q): %v", ch, err)
	}
	return e
}

func seqs(es []Entry) []uint64 {
	out := make([]uint64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

func equalSeqs(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSeqIsGlobalAndMonotonicAcrossChannels(t *testing.T) {
	j := New(Limits{})
	if got := j.Seq(); got != 0 {
		t.Fatalf("Seq of empty journal = %d, want 0", got)
	}
	order := []string{"a", "b", "a", "c", "b", "a"}
	for i, ch := range order {
		e := mustAppend(t, j, ch, text(8))
		if e.Seq != uint64(i+1) {
			t.Fatalf("append %d on %q: seq %d, want %d", i, ch, e.Seq, i+1)
		}
	}
	if got := j.Seq(); got != 6 {
		t.Fatalf("Seq = %d, want 6", got)
	}
	for ch, want := range map[string]uint64{"a": 6, "b": 5, "c": 4, "none": 0} {
		if got := j.Head(ch); got != want {
			t.Errorf("Head(%q) = %d, want %d", ch, got, want)
		}
	}
	es, err := j.Read("a", 0, 0)
	if err != nil || !equalSeqs(seqs(es), []uint64{1, 3, 6}) {
		t.Fatalf("Read(a, 0) = %v, %v; want [1 3 6]", seqs(es), err)
	}
}

func TestEncodeErrorAssignsNoSeq(t *testing.T) {
	j := New(Limits{})
	mustAppend(t, j, "a", text(4))
	boom := errors.New("boom")
	var offered uint64
	_, err := j.Append("a", func(seq uint64) ([]byte, error) { offered = seq; return nil, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Append error = %v, want boom", err)
	}
	if offered != 2 {
		t.Fatalf("encode saw seq %d, want 2", offered)
	}
	if j.Seq() != 1 || j.Bytes("a") != 4 {
		t.Fatalf("after failed encode: Seq %d Bytes %d, want 1 and 4", j.Seq(), j.Bytes("a"))
	}
	if e := mustAppend(t, j, "a", text(4)); e.Seq != 2 {
		t.Fatalf("next append got seq %d, want 2 (the failed one must not burn a seq)", e.Seq)
	}
}

func TestReadAndNextByCursor(t *testing.T) {
	j := New(Limits{})
	// Channel a gets seqs 1, 3, 5, 7; b gets 2, 4, 6.
	for i := 0; i < 7; i++ {
		ch := "a"
		if i%2 == 1 {
			ch = "b"
		}
		mustAppend(t, j, ch, text(6))
	}
	tests := []struct {
		name  string
		after uint64
		max   int
		want  []uint64
	}{
		{"from start", 0, 0, []uint64{1, 3, 5, 7}},
		{"after an entry", 3, 0, []uint64{5, 7}},
		{"after a seq of another channel", 4, 0, []uint64{5, 7}},
		{"max limits", 0, 2, []uint64{1, 3}},
		{"negative max is unlimited", 1, -1, []uint64{3, 5, 7}},
		{"at head", 7, 0, []uint64{}},
		{"beyond head", 100, 0, []uint64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			es, err := j.Read("a", tc.after, tc.max)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if !equalSeqs(seqs(es), tc.want) {
				t.Fatalf("Read(a, %d, %d) = %v, want %v", tc.after, tc.max, seqs(es), tc.want)
			}
		})
	}
	t.Run("Next", func(t *testing.T) {
		e, ok, err := j.Next("a", 3)
		if err != nil || !ok || e.Seq != 5 || string(e.Text) != "5:xxxx" {
			t.Fatalf("Next(a, 3) = %d %q %v %v, want 5 \"5:xxxx\" true nil", e.Seq, e.Text, ok, err)
		}
		_, ok, err = j.Next("a", 7)
		if ok || err != nil {
			t.Fatalf("Next(a, 7) = ok %v err %v, want false nil", ok, err)
		}
		_, ok, err = j.Next("unknown", 0)
		if ok || err != nil {
			t.Fatalf("Next(unknown, 0) = ok %v err %v, want false nil", ok, err)
		}
	})
	t.Run("returned slice is a copy", func(t *testing.T) {
		es, _ := j.Read("a", 0, 0)
		es[0] = Entry{Seq: 99}
		again, _ := j.Read("a", 0, 1)
		if again[0].Seq != 1 {
			t.Fatalf("mutating a Read result changed the journal: first seq now %d", again[0].Seq)
		}
	})
}

func TestByteBoundPerChannel(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: 30})
	// Fill exactly to the bound: 3 × 10 bytes = 30 is kept whole.
	for i := 0; i < 3; i++ {
		mustAppend(t, j, "a", text(10))
	}
	// Another channel's bytes do not count against a.
	mustAppend(t, j, "b", text(25))
	if got := j.Bytes("a"); got != 30 {
		t.Fatalf("Bytes(a) at the bound = %d, want 30", got)
	}
	if es, err := j.Read("a", 0, 0); err != nil || !equalSeqs(seqs(es), []uint64{1, 2, 3}) {
		t.Fatalf("at the bound Read(a, 0) = %v, %v; want [1 2 3] nil", seqs(es), err)
	}
	// One more evicts exactly the oldest.
	mustAppend(t, j, "a", text(10)) // seq 5
	if got := j.Bytes("a"); got != 30 {
		t.Fatalf("Bytes(a) after one more = %d, want 30", got)
	}
	if _, err := j.Read("a", 0, 0); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read(a, 0) after eviction err = %v, want ErrTruncated", err)
	}
	if es, err := j.Read("a", 1, 0); err != nil || !equalSeqs(seqs(es), []uint64{2, 3, 5}) {
		t.Fatalf("Read(a, 1) = %v, %v; want [2 3 5] nil", seqs(es), err)
	}
	if got := j.Bytes("b"); got != 25 {
		t.Fatalf("Bytes(b) = %d, want 25 (untouched)", got)
	}
	// The newest is kept even if alone larger than the bound.
	mustAppend(t, j, "a", text(50)) // seq 6
	if got := j.Bytes("a"); got != 50 {
		t.Fatalf("Bytes(a) after oversized entry = %d, want 50", got)
	}
	if es, err := j.Read("a", 5, 0); err != nil || !equalSeqs(seqs(es), []uint64{6}) {
		t.Fatalf("Read(a, 5) = %v, %v; want [6] nil", seqs(es), err)
	}
	if _, err := j.Read("a", 4, 0); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read(a, 4) err = %v, want ErrTruncated (seq 5 was dropped)", err)
	}
	// And it is dropped as soon as something else arrives.
	mustAppend(t, j, "a", text(10)) // seq 7
	if got := j.Bytes("a"); got != 10 {
		t.Fatalf("Bytes(a) = %d, want 10", got)
	}
	if es, err := j.Read("a", 6, 0); err != nil || !equalSeqs(seqs(es), []uint64{7}) {
		t.Fatalf("Read(a, 6) = %v, %v; want [7] nil", seqs(es), err)
	}
}

// TestAgeBound runs in a synctest bubble on the journal's own clock
// (New with nil: time.Now, as the host uses it), which the bubble fakes:
// entries are exactly as old as the test lets them get.
func TestAgeBound(t *testing.T) {
	synctest.Test(t, testAgeBound)
}

func testAgeBound(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: 1 << 20, MaxAge: time.Minute})
	mustAppend(t, j, "a", text(10)) // seq 1 at t0
	time.Sleep(30 * time.Second)
	mustAppend(t, j, "a", text(10)) // seq 2 at t0+30s
	time.Sleep(30 * time.Second)
	// Exactly MaxAge old is still kept (the bound is "older than").
	mustAppend(t, j, "a", text(10)) // seq 3 at t0+60s
	if es, err := j.Read("a", 0, 0); err != nil || !equalSeqs(seqs(es), []uint64{1, 2, 3}) {
		t.Fatalf("at exactly MaxAge Read(a, 0) = %v, %v; want [1 2 3] nil", seqs(es), err)
	}
	time.Sleep(time.Nanosecond)
	mustAppend(t, j, "a", text(10)) // seq 4 at t0+60s+1ns: seq 1 is now too old
	if _, err := j.Read("a", 0, 0); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read(a, 0) err = %v, want ErrTruncated", err)
	}
	if es, err := j.Read("a", 1, 0); err != nil || !equalSeqs(seqs(es), []uint64{2, 3, 4}) {
		t.Fatalf("Read(a, 1) = %v, %v; want [2 3 4]", seqs(es), err)
	}
	if got := j.Bytes("a"); got != 30 {
		t.Fatalf("Bytes(a) = %d, want 30", got)
	}
	// Much later, everything but the newest is too old; the newest stays.
	time.Sleep(time.Hour)
	mustAppend(t, j, "a", text(10)) // seq 5
	if es, err := j.Read("a", 4, 0); err != nil || !equalSeqs(seqs(es), []uint64{5}) {
		t.Fatalf("Read(a, 4) = %v, %v; want [5]", seqs(es), err)
	}
	if _, err := j.Read("a", 3, 0); !errors.Is(err, ErrTruncated) {
		t.Fatalf("Read(a, 3) err = %v, want ErrTruncated", err)
	}
	if got := j.Bytes("a"); got != 10 {
		t.Fatalf("Bytes(a) = %d, want 10", got)
	}
}

// TestDefaultAgeBound: DefaultLimits keeps an entry for reconnect replay
// for exactly 10 minutes (the bubble's clock makes them pass at once):
// then the next append drops it.
func TestDefaultAgeBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := New(DefaultLimits)
		mustAppend(t, j, "a", text(10)) // seq 1 at t0
		time.Sleep(10 * time.Minute)
		mustAppend(t, j, "a", text(10)) // seq 2 at t0+10m: seq 1 is exactly MaxAge old
		if es, err := j.Read("a", 0, 0); err != nil || !equalSeqs(seqs(es), []uint64{1, 2}) {
			t.Fatalf("after 10 minutes Read(a, 0) = %v, %v; want [1 2] nil", seqs(es), err)
		}
		time.Sleep(time.Nanosecond)
		mustAppend(t, j, "a", text(10)) // seq 3
		if _, err := j.Read("a", 0, 0); !errors.Is(err, ErrTruncated) {
			t.Fatalf("after 10 minutes and 1 ns Read(a, 0) err = %v, want ErrTruncated", err)
		}
		if es, err := j.Read("a", 1, 0); err != nil || !equalSeqs(seqs(es), []uint64{2, 3}) {
			t.Fatalf("Read(a, 1) = %v, %v; want [2 3]", seqs(es), err)
		}
	})
}

func TestTruncatedCursor(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: 20})
	for i := 0; i < 5; i++ {
		mustAppend(t, j, "a", text(10))
	}
	// Retained: 4, 5. Dropped up to 3.
	for _, after := range []uint64{0, 1, 2} {
		if _, err := j.Read("a", after, 0); !errors.Is(err, ErrTruncated) {
			t.Errorf("Read(a, %d) err = %v, want ErrTruncated", after, err)
		}
		if _, ok, err := j.Next("a", after); ok || !errors.Is(err, ErrTruncated) {
			t.Errorf("Next(a, %d) = ok %v err %v, want false ErrTruncated", after, ok, err)
		}
	}
	if es, err := j.Read("a", 3, 0); err != nil || !equalSeqs(seqs(es), []uint64{4, 5}) {
		t.Fatalf("Read(a, 3) = %v, %v; want [4 5] nil", seqs(es), err)
	}
	if !strings.Contains(ErrTruncated.Error(), "no longer retained") {
		t.Fatalf("ErrTruncated text %q", ErrTruncated)
	}
}

func TestDropForgetsLog(t *testing.T) {
	j := New(Limits{})
	mustAppend(t, j, "a", text(10))
	j.Drop("a")
	if j.Bytes("a") != 0 || j.Head("a") != 0 {
		t.Fatalf("after Drop: Bytes %d Head %d, want 0 0", j.Bytes("a"), j.Head("a"))
	}
	if es, err := j.Read("a", 0, 0); es != nil || err != nil {
		t.Fatalf("Read after Drop = %v, %v; want nil nil", es, err)
	}
	if j.Seq() != 1 {
		t.Fatalf("Seq after Drop = %d, want 1 (serverSeq never goes back)", j.Seq())
	}
}

func TestListenersInSeqOrderAndUnlisten(t *testing.T) {
	j := New(Limits{})
	var got []string
	j.Listen("a", "k1", func(ch string, e Entry) {
		got = append(got, fmt.Sprintf("k1 %s %d %s", ch, e.Seq, e.Text))
	}, nil)
	mustAppend(t, j, "a", text(4)) // 1
	mustAppend(t, j, "b", text(4)) // 2: not a's listener
	mustAppend(t, j, "a", text(4)) // 3
	j.Unlisten("a", "k1")
	mustAppend(t, j, "a", text(4)) // 4: nobody listens
	j.Unlisten("a", "k1")          // twice is harmless
	j.Unlisten("zzz", "nobody")    // unknown is harmless
	want := []string{"k1 a 1 1:xx", "k1 a 3 3:xx"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("listener saw %q, want %q", got, want)
	}
	// Re-registering under the same key replaces, never duplicates.
	var n int
	j.Listen("a", "k", func(string, Entry) { n += 1 }, nil)
	j.Listen("a", "k", func(string, Entry) { n += 10 }, nil)
	mustAppend(t, j, "a", text(4))
	if n != 10 {
		t.Fatalf("after re-Listen under the same key, calls added %d, want 10", n)
	}
}

func TestListenersSeeSeqOrderUnderConcurrentAppends(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: 1 << 10})
	const writers, per = 8, 200
	var mu sync.Mutex // the listener runs under the journal lock; mu is for the test's read
	var seen []uint64
	j.Listen("a", 1, func(_ string, e Entry) {
		mu.Lock()
		seen = append(seen, e.Seq)
		mu.Unlock()
	}, nil)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := j.Append("a", text(12)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != writers*per {
		t.Fatalf("listener called %d times, want %d", len(seen), writers*per)
	}
	for i, s := range seen {
		if s != uint64(i+1) {
			t.Fatalf("listener call %d saw seq %d, want %d (seq order under Append)", i, s, i+1)
		}
	}
}

func TestListenSnapSeesSeqAndEveryLaterEntryOnce(t *testing.T) {
	j := New(Limits{})
	mustAppend(t, j, "a", text(4))
	mustAppend(t, j, "b", text(4))
	var snapSeq uint64
	var got []uint64
	ret := j.Listen("a", "k", func(_ string, e Entry) { got = append(got, e.Seq) }, func(seq uint64) { snapSeq = seq })
	if snapSeq != 2 || ret != 2 {
		t.Fatalf("snap saw %d, Listen returned %d; want 2 and 2", snapSeq, ret)
	}
	mustAppend(t, j, "a", text(4))
	if !equalSeqs(got, []uint64{3}) {
		t.Fatalf("listener after snap saw %v, want [3]", got)
	}

	// Under concurrent appends, snap + listener together cover every entry
	// of the channel exactly once: those ≤ snapSeq via Read, the rest pushed.
	// The writer appends 100 entries, then goes on while the test listens,
	// until the listener has had 100 pushed (or a bound far past that).
	j2 := New(Limits{ChannelMaxBytes: 1 << 30})
	const maxAppends = 1_000_000
	warm := make(chan struct{})
	done := make(chan struct{})
	var npushed atomic.Int64
	go func() {
		defer close(done)
		for n := 1; n <= maxAppends && npushed.Load() < 100; n++ {
			if _, err := j2.Append("a", text(8)); err != nil {
				t.Error(err)
				return
			}
			if n == 100 {
				close(warm)
			}
		}
	}()
	select {
	case <-warm:
	case <-done:
		t.Fatal("the writer ended before its 100th append")
	}
	var mu sync.Mutex
	var pushed []uint64
	var before []Entry
	j2.Listen("a", "k", func(_ string, e Entry) {
		mu.Lock()
		pushed = append(pushed, e.Seq)
		mu.Unlock()
		npushed.Add(1)
	}, func(seq uint64) {
		snapSeq = seq
		// Called under the journal lock: read the log directly, as a
		// snapshot taker would read its state.
		l := j2.logs["a"]
		before = append(before, l.entries[l.head:]...)
	})
	<-done
	mu.Lock()
	defer mu.Unlock()
	all := append(seqs(before), pushed...)
	if uint64(len(all)) != j2.Seq() {
		t.Fatalf("snapshot (%d) + pushed (%d) = %d entries, want %d", len(before), len(pushed), len(all), j2.Seq())
	}
	for i, s := range all {
		if s != uint64(i+1) {
			t.Fatalf("entry %d has seq %d, want %d (snap at %d)", i, s, i+1, snapSeq)
		}
	}
}

func TestMemoryStaysProportionalToRetained(t *testing.T) {
	const entryBytes, retained = 16, 8
	j := New(Limits{ChannelMaxBytes: entryBytes * retained})
	for i := 0; i < 100_000; i++ {
		mustAppend(t, j, "a", text(entryBytes))
		l := j.logs["a"]
		if live := len(l.entries) - l.head; live != min(i+1, retained) {
			t.Fatalf("after %d appends: %d live entries, want %d", i+1, live, min(i+1, retained))
		}
		if len(l.entries) > 2*retained {
			t.Fatalf("after %d appends: len(entries) = %d, want <= %d (2 × retained)", i+1, len(l.entries), 2*retained)
		}
	}
	l := j.logs["a"]
	if cap(l.entries) > 4*retained {
		t.Fatalf("cap(entries) = %d after 100000 appends, want <= %d", cap(l.entries), 4*retained)
	}
	// Dropped slots release their text.
	for i := 0; i < l.head; i++ {
		if l.entries[i].Text != nil {
			t.Fatalf("dead slot %d still holds text", i)
		}
	}
	if got := j.Bytes("a"); got != entryBytes*retained {
		t.Fatalf("Bytes = %d, want %d", got, entryBytes*retained)
	}
}

func TestLockedSeesSeq(t *testing.T) {
	j := New(Limits{})
	mustAppend(t, j, "a", text(4))
	var got uint64
	j.Locked(func(seq uint64) { got = seq })
	if got != 1 {
		t.Fatalf("Locked saw seq %d, want 1", got)
	}
}

func TestDefaults(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: -5})
	if j.limits.ChannelMaxBytes != DefaultLimits.ChannelMaxBytes {
		t.Fatalf("ChannelMaxBytes <= 0 gave %d, want the default %d", j.limits.ChannelMaxBytes, DefaultLimits.ChannelMaxBytes)
	}
	if DefaultLimits.ChannelMaxBytes != 1<<20 || DefaultLimits.MaxAge != 10*time.Minute {
		t.Fatalf("DefaultLimits = %+v", DefaultLimits)
	}
}

func BenchmarkAppend(b *testing.B) {
	j := New(Limits{ChannelMaxBytes: 64 << 10})
	payload := []byte(strings.Repeat("x", 256))
	enc := func(uint64) ([]byte, error) { return payload, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := j.Append("a", enc); err != nil {
			b.Fatal(err)
		}
	}
}

// AppendSeq copies head: the caller reuses its buffer for the next entry,
// and no entry (nor what a listener was handed) changes.
func TestAppendSeqCopiesHead(t *testing.T) {
	j := New(Limits{})
	mustAppend(t, j, "b", text(4)) // seq 1 on another channel
	var heard []Entry
	j.Listen("a", "k", func(_ string, e Entry) { heard = append(heard, e) }, nil)
	head := make([]byte, 0, 64)
	var got []Entry
	for _, s := range []string{`{"x":"first","serverSeq":`, `{"x":"second","serverSeq":`} {
		head = append(head[:0], s...)
		got = append(got, j.AppendSeq("a", head, "}"))
		for i := range head {
			head[i] = '!' // the caller reusing its buffer
		}
	}
	want := []string{`{"x":"first","serverSeq":2}`, `{"x":"second","serverSeq":3}`}
	es, _ := j.Read("a", 0, 0)
	for i, w := range want {
		if string(got[i].Text) != w || string(es[i].Text) != w || string(heard[i].Text) != w {
			t.Fatalf("entry %d: returned %s, read %s, heard %s; want %s", i, got[i].Text, es[i].Text, heard[i].Text, w)
		}
		if cap(got[i].Text) != len(w) {
			t.Errorf("entry %d: capacity %d for %d bytes", i, cap(got[i].Text), len(w))
		}
	}
	if got[1].Seq != 3 || j.Seq() != 3 || j.Bytes("a") != len(want[0])+len(want[1]) {
		t.Fatalf("seq %d, journal seq %d, bytes %d", got[1].Seq, j.Seq(), j.Bytes("a"))
	}
}

// Next is on every windowed subscriber's path: it must not allocate.
func TestNextDoesNotAllocate(t *testing.T) {
	j := New(Limits{})
	for range 10 {
		mustAppend(t, j, "a", text(8))
	}
	if n := testing.AllocsPerRun(100, func() {
		if e, ok, err := j.Next("a", 4); !ok || err != nil || e.Seq != 5 {
			t.Fatalf("Next(a, 4) = %d %v %v", e.Seq, ok, err)
		}
	}); n != 0 {
		t.Fatalf("Next: %v allocations, want 0", n)
	}
}

// TestPage: Page returns the entries after the cursor up to maxEntries
// and maxBytes (the first whatever its size), the channel's head, and
// ErrTruncated once the cursor's next entry is gone.
func TestPage(t *testing.T) {
	j := New(Limits{ChannelMaxBytes: 100})
	var seqs []uint64
	for i := range 6 {
		e, _ := j.Append("a", func(uint64) ([]byte, error) { return []byte(fmt.Sprintf("%020d", i)), nil }) // 20 bytes each
		seqs = append(seqs, e.Seq)
		_, _ = j.Append("b", func(uint64) ([]byte, error) { return []byte("x"), nil })
	}
	// 6 × 20 bytes > 100: the oldest of "a" is gone.
	if _, _, err := j.Page("a", 0, 0, 1000); err != ErrTruncated {
		t.Fatalf("Page after 0: %v, want ErrTruncated", err)
	}
	got := func(es []Entry) []uint64 {
		var out []uint64
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	for _, tc := range []struct {
		after         uint64
		entries, size int
		want          []uint64
	}{
		{seqs[0], 0, 1000, seqs[1:]},
		{seqs[0], 2, 1000, seqs[1:3]},
		{seqs[0], 0, 45, seqs[1:3]},       // 2 × 20 ≤ 45 < 3 × 20
		{seqs[0], 0, 5, seqs[1:2]},        // the first whatever its size
		{seqs[5], 0, 1000, nil},           // at the head
		{seqs[2] + 1, 1, 1000, seqs[3:4]}, // a cursor between entries (another channel's seq)
	} {
		es, head, err := j.Page("a", tc.after, tc.entries, tc.size)
		if err != nil || head != seqs[5] || fmt.Sprint(got(es)) != fmt.Sprint(tc.want) {
			t.Errorf("Page(a, %d, %d, %d) = %v, head %d, %v; want %v, head %d", tc.after, tc.entries, tc.size, got(es), head, err, tc.want, seqs[5])
		}
	}
	if es, head, err := j.Page("none", 0, 0, 100); len(es) != 0 || head != 0 || err != nil {
		t.Errorf("Page of a channel without entries: %v, %d, %v", es, head, err)
	}
}

// TestListeners: Listeners counts a channel's listeners by key, one per
// key, and none once each is removed.
func TestListeners(t *testing.T) {
	j := New(Limits{})
	for _, k := range []string{"a", "b", "a"} {
		j.Listen("c", k, func(string, Entry) {}, nil)
	}
	if n := j.Listeners("c"); n != 2 {
		t.Fatalf("Listeners = %d, want 2", n)
	}
	j.Unlisten("c", "a")
	j.Unlisten("c", "b")
	if n := j.Listeners("c"); n != 0 {
		t.Fatalf("Listeners = %d after Unlisten, want 0", n)
	}
}

// TestAppendTo: an entry for one client takes the next serverSeq like any
// other, is read and listened to with its addressee, and is for that
// client only (For); an entry for everyone is for every client.
func TestAppendTo(t *testing.T) {
	j := New(DefaultLimits)
	var heard []Entry
	j.Listen("c", "k", func(_ string, e Entry) { heard = append(heard, e) }, nil)
	all := mustAppend(t, j, "c", text(8))
	one, err := j.AppendTo("c", "v1", text(8))
	if err != nil {
		t.Fatal(err)
	}
	if all.To != "" || one.To != "v1" || one.Seq != all.Seq+1 {
		t.Fatalf("entries %+v %+v: want To \"\" then v1, consecutive seqs", all, one)
	}
	got, err := j.Read("c", 0, 0)
	if err != nil || len(got) != 2 || got[1].To != "v1" || len(heard) != 2 || heard[1].To != "v1" {
		t.Fatalf("read %+v (%v), heard %+v: want the addressee kept", got, err, heard)
	}
	if !all.For("v1") || !all.For("o1") || !all.For("") || !one.For("v1") || one.For("o1") || one.For("") {
		t.Fatal("For: an entry for everyone is every client's; one for v1 is v1's only")
	}
}
