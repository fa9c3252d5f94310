package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/sidecar-dev/sidecar/delivery"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLimit = 5 * time.Second

// stepWriter is a MessageWriter the test drives one message at a time:
// WriteMessage hands the text to the test and then waits until the test
// lets it return, so the Scheduler never runs ahead of the assertions.
type stepWriter struct {
	got     chan []byte
	release chan struct{}
}

func newStepWriter() *stepWriter {
	return &stepWriter{got: make(chan []byte), release: make(chan struct{})}
}

func (w *stepWriter) WriteMessage(ctx context.Context, text []byte) error {
	select {
	case w.got <- append([]byte(nil), text...):
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// hold waits for the next message; the writer stays inside WriteMessage
// with it until resume.
func (w *stepWriter) hold(t *testing.T) string {
	t.Helper()
	select {
	case b := <-w.got:
		return string(b)
	case <-time.After(waitLimit):
		t.Fatal("no message written within the deadline")
		return ""
	}
}

func (w *stepWriter) resume(t *testing.T) {
	t.Helper()
	select {
	case w.release <- struct{}{}:
	case <-time.After(waitLimit):
		t.Fatal("writer not waiting to be released")
	}
}

// take returns the next message and lets the writer go on.
func (w *stepWriter) take(t *testing.T) string {
	t.Helper()
	s := w.hold(t)
	w.resume(t)
	return s
}

// run starts s.Run with w and returns a stop function that cancels it and
// waits for Run to return, giving Run's error.
func run(t *testing.T, s *delivery.Scheduler, w delivery.MessageWriter) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, w) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitLimit):
				t.Fatal("Run did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// repeatSource always has a message: body repeated, labelled by name.
type repeatSource struct {
	text  []byte
	calls atomic.Int64
}

// newRepeat returns a source whose every message measures exactly size
// UTF-16 bytes (ASCII text, 2 bytes per character).
func newRepeat(name string, size int) *repeatSource {
	head := `{"jsonrpc":"2.0","method":"action","params":{"channel":"` + name + `","d":"`
	tail := `"}}`
	n := size/2 - len(head) - len(tail)
	if n < 0 || size%2 != 0 {
		panic("size too small")
	}
	return &repeatSource{text: []byte(head + strings.Repeat("x", n) + tail)}
}

func (s *repeatSource) Next() delivery.Message { s.calls.Add(1); return delivery.Message{Text: s.text} }

// listSource hands out a fixed list of messages, then nil.
type listSource struct {
	mu   sync.Mutex
	msgs [][]byte
}

func (s *listSource) Next() delivery.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.msgs) == 0 {
		return delivery.Message{}
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return delivery.Message{Text: m}
}

func (s *listSource) add(m []byte) {
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.mu.Unlock()
}

var big = delivery.Limits{WindowBytes: 1 << 40, MaximumFrameBytes: 1 << 20}

func gapText(ch string, after uint64) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":%q,"afterSeq":%d}}`, ch, after)
}

func creditText(ch string, v int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":%q,"consumedBytes":%d}}`, ch, v)
}

func TestPriorityProtectedCreditControlData(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	data := &listSource{msgs: [][]byte{[]byte(`{"windowed":1}`)}}
	if err := s.PushOrdinary("o", 1, []byte(`{"ordinary":1}`)); err != nil {
		t.Fatal(err)
	}
	s.AddStream("w", big, data)
	if err := s.PushControl([]byte(`{"control":1}`)); err != nil {
		t.Fatal(err)
	}
	s.PushCredit("a", 10)
	if err := s.PushControl([]byte(`{"control":2}`)); err != nil {
		t.Fatal(err)
	}
	s.PushCredit("b", 20)
	for _, p := range []string{`{"protected":1}`, `{"protected":2}`} {
		if err := s.PushProtected([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	if p, c, o := s.QueueLens(); p != 2 || c != 4 || o != 1 {
		t.Fatalf("QueueLens = %d %d %d, want 2 4 1", p, c, o)
	}
	w := newStepWriter()
	run(t, s, w)
	want := []string{
		`{"protected":1}`, `{"protected":2}`,
		creditText("a", 10), creditText("b", 20),
		`{"control":1}`, `{"control":2}`,
		`{"ordinary":1}`, `{"windowed":1}`,
	}
	for i, wt := range want[:len(want)-1] {
		if got := w.take(t); got != wt {
			t.Fatalf("message %d = %s, want %s", i, got, wt)
		}
	}
	// Hold the last data message in the writer while more of every kind
	// arrives: the protected one still goes first, then credit, then data
	// (the stream keeps its turn while its deficit lasts, then the FIFO).
	if got := w.hold(t); got != want[len(want)-1] {
		t.Fatalf("last message = %s, want %s", got, want[len(want)-1])
	}
	data.add([]byte(`{"windowed":2}`))
	if err := s.PushOrdinary("o", 2, []byte(`{"ordinary":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.PushProtected([]byte(`{"protected":3}`)); err != nil {
		t.Fatal(err)
	}
	s.PushCredit("a", 11)
	w.resume(t)
	for i, wt := range []string{`{"protected":3}`, creditText("a", 11), `{"windowed":2}`, `{"ordinary":2}`} {
		if got := w.take(t); got != wt {
			t.Fatalf("second round message %d = %s, want %s", i, got, wt)
		}
	}
}

func TestPushCreditCoalesces(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	s.PushCredit("c", 100)
	s.PushCredit("d", 5)
	s.PushCredit("c", 300) // replaces 100
	s.PushCredit("c", 200) // lower than pending: ignored
	s.PushCredit("c", 300) // equal: ignored
	if _, c, _ := s.QueueLens(); c != 2 {
		t.Fatalf("control+credit queued = %d, want 2 (one per channel)", c)
	}
	if err := s.PushProtected([]byte(`{"end":1}`)); err != nil {
		t.Fatal(err)
	}
	w := newStepWriter()
	run(t, s, w)
	if got := w.take(t); got != `{"end":1}` {
		t.Fatalf("first = %s", got)
	}
	for _, want := range []string{creditText("c", 300), creditText("d", 5)} {
		if got := w.take(t); got != want {
			t.Fatalf("got %s, want %s (order of first push, highest value)", got, want)
		}
	}
	// Once sent, a new credit for the channel queues again.
	s.PushCredit("c", 400)
	if got := w.take(t); got != creditText("c", 400) {
		t.Fatalf("got %s", got)
	}
}

func TestProtectedBound(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{ProtectedMessages: 4})
	for i := 0; i < 4; i++ {
		if err := s.PushProtected([]byte(fmt.Sprintf(`{"p":%d}`, i))); err != nil {
			t.Fatalf("push %d of 4: %v", i+1, err)
		}
	}
	err := s.PushProtected([]byte(`{"p":4}`))
	if !errors.Is(err, delivery.ErrProtectedFull) {
		t.Fatalf("fifth PushProtected = %v, want ErrProtectedFull", err)
	}
	if want := "delivery: protected queue full (peer too slow): 4 queued"; err.Error() != want {
		t.Fatalf("error text %q, want %q", err, want)
	}
	if p, _, _ := s.QueueLens(); p != 4 {
		t.Fatalf("protected queued = %d, want 4", p)
	}
	// Draining one makes room for exactly one.
	w := newStepWriter()
	run(t, s, w)
	if got := w.hold(t); got != `{"p":0}` {
		t.Fatalf("first = %s", got)
	}
	if err := s.PushProtected([]byte(`{"p":4}`)); err != nil {
		t.Fatalf("push after one drained: %v", err)
	}
	if err := s.PushProtected([]byte(`{"p":5}`)); !errors.Is(err, delivery.ErrProtectedFull) {
		t.Fatalf("push beyond bound again = %v, want ErrProtectedFull", err)
	}
	w.resume(t)
	for i := 1; i <= 4; i++ {
		if got, want := w.take(t), fmt.Sprintf(`{"p":%d}`, i); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
}

// TestProtectedRoom: ProtectedRoom counts down to 0 with each push, and
// the writer taking a message signals ProtectedTaken with one more room.
func TestProtectedRoom(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{ProtectedMessages: 3})
	for i := range 3 {
		if got := s.ProtectedRoom(); got != 3-i {
			t.Fatalf("room %d after %d pushes, want %d", got, i, 3-i)
		}
		if err := s.PushProtected([]byte(fmt.Sprintf(`{"p":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.ProtectedRoom(); got != 0 {
		t.Fatalf("room %d when full, want 0", got)
	}
	select {
	case <-s.ProtectedTaken():
		t.Fatal("ProtectedTaken signalled before anything was taken")
	default:
	}
	w := newStepWriter()
	run(t, s, w)
	if got := w.hold(t); got != `{"p":0}` {
		t.Fatalf("first = %s", got)
	}
	select {
	case <-s.ProtectedTaken():
	case <-time.After(waitLimit):
		t.Fatal("no ProtectedTaken signal after the writer took a message")
	}
	if got := s.ProtectedRoom(); got != 1 {
		t.Fatalf("room %d after one taken, want 1", got)
	}
	w.resume(t)
	w.take(t)
	w.take(t)
}

func TestControlBound(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{ControlMessages: 3})
	for i := 0; i < 3; i++ {
		if err := s.PushControl([]byte(`{"c":1}`)); err != nil {
			t.Fatalf("push %d of 3: %v", i+1, err)
		}
	}
	err := s.PushControl([]byte(`{"c":1}`))
	if !errors.Is(err, delivery.ErrControlFull) || err.Error() != "delivery: control queue full: 3 queued" {
		t.Fatalf("fourth PushControl = %v, want ErrControlFull with 3 queued", err)
	}
	// Credit is coalesced outside that bound.
	s.PushCredit("x", 1)
	if _, c, _ := s.QueueLens(); c != 4 {
		t.Fatalf("control+credit = %d, want 4", c)
	}
}

func TestDefaultSchedulerConfig(t *testing.T) {
	d := delivery.DefaultSchedulerConfig()
	if d.ProtectedMessages != 256 || d.ControlMessages != 256 || d.OrdinaryMessages != 1024 || d.Quantum != 16384 {
		t.Fatalf("DefaultSchedulerConfig = %+v", d)
	}
	// Zero fields take the defaults: 256 protected fit, the 257th fails.
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	for i := 0; i < 256; i++ {
		if err := s.PushProtected([]byte("{}")); err != nil {
			t.Fatalf("push %d: %v", i+1, err)
		}
	}
	if err := s.PushProtected([]byte("{}")); !errors.Is(err, delivery.ErrProtectedFull) {
		t.Fatalf("257th push = %v", err)
	}
}

func TestOrdinaryOverflowCollapsesToGaps(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{OrdinaryMessages: 3})
	w := newStepWriter()
	run(t, s, w)
	msg := func(ch string, seq uint64) string { return fmt.Sprintf(`{"ch":%q,"seq":%d}`, ch, seq) }
	push := func(ch string, seq uint64) {
		t.Helper()
		if err := s.PushOrdinary(ch, seq, []byte(msg(ch, seq))); err != nil {
			t.Fatalf("PushOrdinary(%s, %d): %v", ch, seq, err)
		}
	}
	// Written so far: d up to 2, c up to 3 (held in the writer).
	push("d", 2)
	if got := w.take(t); got != msg("d", 2) {
		t.Fatalf("got %s", got)
	}
	push("c", 3)
	if got := w.hold(t); got != msg("c", 3) {
		t.Fatalf("got %s", got)
	}
	// Fill the FIFO exactly to its bound: no gap yet.
	push("c", 4)
	push("d", 5)
	push("c", 6)
	if p, _, o := s.QueueLens(); p != 0 || o != 3 || s.Gaps() != 0 {
		t.Fatalf("at the bound: protected %d ordinary %d gaps %d, want 0 3 0", p, o, s.Gaps())
	}
	// One more: the backlog collapses into one gap per channel, in order of
	// first appearance, each after the last seq written on that channel.
	push("e", 7)
	if p, _, o := s.QueueLens(); p != 2 || o != 1 || s.Gaps() != 1 {
		t.Fatalf("after overflow: protected %d ordinary %d gaps %d, want 2 1 1", p, o, s.Gaps())
	}
	if c := s.Counters(); c.Collapsed != 3 || c.GapsSent != 0 {
		t.Fatalf("after overflow: %d collapsed, %d gaps sent; want 3 and 0 (not written yet)", c.Collapsed, c.GapsSent)
	}
	w.resume(t)
	want := []string{gapText("c", 3), gapText("d", 2), msg("e", 7)}
	for i, wt := range want {
		if got := w.take(t); got != wt {
			t.Fatalf("after collapse message %d = %s, want %s", i, got, wt)
		}
	}
	// The exact text for a channel with nothing written yet: afterSeq 0.
	push("n", 8)
	if got := w.hold(t); got != msg("n", 8) {
		t.Fatalf("got %s", got)
	}
	push("z", 9)
	push("z", 10)
	push("z", 11)
	push("y", 12)
	w.resume(t)
	if got, want := w.take(t), `{"jsonrpc":"2.0","method":"channel/gap","params":{"channel":"z","afterSeq":0}}`; got != want {
		t.Fatalf("gap = %s, want %s", got, want)
	}
	if got := w.take(t); got != msg("y", 12) {
		t.Fatalf("got %s", got)
	}
	// Two collapses of 3 messages each; 3 gap notices written.
	if c := s.Counters(); c.Collapsed != 6 || c.GapsSent != 3 {
		t.Fatalf("counters: %d collapsed, %d gaps sent; want 6 and 3", c.Collapsed, c.GapsSent)
	}
}

// TestOrdinaryGapsCoalesce: a client that never reads gets at most one
// waiting channel/gap per channel, however often its backlog collapses,
// so gaps never fill the protected queue (seed 003: only undeliverable
// protected frames close a connection).
func TestOrdinaryGapsCoalesce(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{OrdinaryMessages: 2, ProtectedMessages: 2})
	if err := s.PushProtected([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		ch := []string{"a", "b"}[i%2]
		if err := s.PushOrdinary(ch, uint64(i+1), []byte("{}")); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	if s.Gaps() != 49 {
		t.Fatalf("collapses = %d, want 49", s.Gaps())
	}
	if p, _, o := s.QueueLens(); p != 1+2 || o != 2 {
		t.Fatalf("protected %d (with gaps) ordinary %d, want 3 2", p, o)
	}
	// Responses still fit beside the gaps.
	if err := s.PushProtected([]byte("{}")); err != nil {
		t.Fatalf("PushProtected after gaps: %v", err)
	}
}

func TestDropOrdinary(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	for i, ch := range []string{"a", "b", "a", "b"} {
		if err := s.PushOrdinary(ch, uint64(i+1), []byte(fmt.Sprintf(`{"%s":%d}`, ch, i+1))); err != nil {
			t.Fatal(err)
		}
	}
	s.DropOrdinary("a")
	if _, _, o := s.QueueLens(); o != 2 {
		t.Fatalf("ordinary after drop = %d, want 2", o)
	}
	w := newStepWriter()
	run(t, s, w)
	for _, want := range []string{`{"b":2}`, `{"b":4}`} {
		if got := w.take(t); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
}

// TestFairness: two busy windowed streams and one with a single tiny
// message, windows large enough not to matter. Deficit round-robin with
// Quantum Q gives each busy stream Q/1000 frames per turn in ring order,
// and the quiet stream's message goes out within the first round.
func TestFairness(t *testing.T) {
	for _, tc := range []struct {
		quantum delivery.UTF16Bytes
		want    string
	}{
		{1000, "ABCABABABAB"},
		{2000, "AABBCAABBAABB"},
		{3000, "AAABBBCAAABBB"},
	} {
		t.Run(fmt.Sprint("quantum ", tc.quantum), func(t *testing.T) {
			s := delivery.NewScheduler(delivery.SchedulerConfig{Quantum: tc.quantum})
			a, b := newRepeat("A", 1000), newRepeat("B", 1000)
			quiet := &listSource{msgs: [][]byte{[]byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"C"}}`)}}
			s.AddStream("A", big, a)
			s.AddStream("B", big, b)
			s.AddStream("C", big, quiet)
			w := newStepWriter()
			run(t, s, w)
			var got strings.Builder
			for range len(tc.want) {
				m := w.take(t)
				switch {
				case strings.Contains(m, `"channel":"A"`):
					got.WriteByte('A')
				case strings.Contains(m, `"channel":"B"`):
					got.WriteByte('B')
				case strings.Contains(m, `"channel":"C"`):
					got.WriteByte('C')
				default:
					t.Fatalf("unexpected message %s", m)
				}
			}
			if got.String() != tc.want {
				t.Fatalf("pick order %s, want %s", got.String(), tc.want)
			}
		})
	}
}

// TestOrdinaryFIFOIsNotStarvedByABusyStream: the ordinary FIFO is a
// participant of the same ring (index 0); its message goes out within one
// round even while a windowed stream always has data.
func TestOrdinaryFIFOIsNotStarvedByABusyStream(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{Quantum: 1000})
	s.AddStream("A", big, newRepeat("A", 1000))
	w := newStepWriter()
	run(t, s, w)
	if got := w.hold(t); !strings.Contains(got, `"channel":"A"`) {
		t.Fatalf("first %s", got)
	}
	if err := s.PushOrdinary("o", 1, []byte(`{"ordinary":1}`)); err != nil {
		t.Fatal(err)
	}
	w.resume(t)
	for i := 0; i < 3; i++ {
		if w.take(t) == `{"ordinary":1}` {
			return
		}
	}
	t.Fatal("ordinary message not sent within 3 frames while stream A is busy")
}

// TestBusyStreamMonopolisesScheduler demonstrates the fairness bug on the
// current code without relying on a chosen expected order: with two
// always-busy streams, B never gets a frame.
func TestBusyStreamMonopolisesScheduler(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{Quantum: 16384})
	s.AddStream("A", big, newRepeat("A", 1000))
	s.AddStream("B", big, newRepeat("B", 1000))
	w := newStepWriter()
	run(t, s, w)
	for i := 0; i < 200; i++ {
		if strings.Contains(w.take(t), `"channel":"B"`) {
			return
		}
	}
	t.Fatal("stream B sent nothing in 200 frames while A was busy (quantum 16384, frames 1000)")
}

// TestStreamStopsAtWindowUntilCredit runs in a synctest bubble: the
// waits for credit are counted to the nanosecond (CreditWait), which a
// real clock would only bound.
func TestStreamStopsAtWindowUntilCredit(t *testing.T) {
	synctest.Test(t, testStreamStopsAtWindowUntilCredit)
}

func testStreamStopsAtWindowUntilCredit(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	src := newRepeat("w", 300)
	st := s.AddStream("w", delivery.Limits{WindowBytes: 1024, MaximumFrameBytes: 1024}, src)
	w := newStepWriter()
	run(t, s, w)
	// 300, 600, 900 are below the window; the fourth starts at 900 < 1024
	// and goes past it (soft target): 1200.
	for i := 0; i < 4; i++ {
		if got := w.take(t); got != string(src.text) {
			t.Fatalf("message %d = %q", i, got)
		}
	}
	// Nothing more until credit: a protected message goes through, no data.
	if err := s.PushProtected([]byte(`{"p":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := w.take(t); got != `{"p":1}` {
		t.Fatalf("after window full got %s, want the protected message", got)
	}
	st.Wake()
	if err := s.PushProtected([]byte(`{"p":2}`)); err != nil {
		t.Fatal(err)
	}
	if got := w.take(t); got != `{"p":2}` {
		t.Fatalf("after window full got %s, want the protected message", got)
	}
	sent, consumed, l := st.Window()
	if sent != 1200 || consumed != 0 || l.WindowBytes != 1024 || st.CanStart() {
		t.Fatalf("window sent %d consumed %d limit %d canStart %v; want 1200 0 1024 false", sent, consumed, l.WindowBytes, st.CanStart())
	}
	if n := src.calls.Load(); n != 4 {
		t.Fatalf("Source.Next called %d times, want 4 (pulled only when a message can start)", n)
	}
	if c := s.Counters(); c.CreditWaits != 1 || c.CreditWait != 0 {
		t.Fatalf("window full: %d credit waits of %v, want 1 of 0 (not ended yet)", c.CreditWaits, c.CreditWait)
	}
	// The window stays full for 3 s (the bubble's clock: exactly).
	time.Sleep(3 * time.Second)
	if c := s.Counters(); c.CreditWait != 0 {
		t.Fatalf("window full for 3 s: credit wait %v, want 0 (counted when credit ends it)", c.CreditWait)
	}
	// Credit 300: outstanding 900 < 1024, so exactly one more message.
	select {
	case <-st.Changed(): // drain any earlier notification
	default:
	}
	if err := st.Credit(300); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.Changed():
	default:
		t.Fatal("Credit that advances did not signal Changed")
	}
	if got := w.take(t); got != string(src.text) {
		t.Fatalf("after credit got %q", got)
	}
	if err := s.PushProtected([]byte(`{"p":3}`)); err != nil {
		t.Fatal(err)
	}
	if got := w.take(t); got != `{"p":3}` {
		t.Fatalf("got %s, want only one data message after credit 300", got)
	}
	if sent, _, _ := st.Window(); sent != 1500 {
		t.Fatalf("sent = %d, want 1500", sent)
	}
	// The credit ended the first wait (its 3 s counted); the fifth
	// message filled the window again: a second wait, which credit ends
	// 2 s later.
	if c := s.Counters(); c.CreditWaits != 2 || c.CreditWait != 3*time.Second {
		t.Fatalf("after credit: %d credit waits of %v, want 2 of 3s", c.CreditWaits, c.CreditWait)
	}
	time.Sleep(2 * time.Second)
	if err := st.Credit(400); err != nil { // outstanding 1100: still full
		t.Fatal(err)
	}
	if c := s.Counters(); c.CreditWait != 3*time.Second {
		t.Fatalf("credit that leaves the window full: credit wait %v, want still 3s", c.CreditWait)
	}
	if err := st.Credit(1000); err != nil { // outstanding 500: open
		t.Fatal(err)
	}
	if c := s.Counters(); c.CreditWaits != 2 || s.CreditWait() != 5*time.Second || c.CreditWait != 5*time.Second {
		t.Fatalf("after the second wait: %d credit waits of %v (CreditWait %v), want 2 of 5s", c.CreditWaits, c.CreditWait, s.CreditWait())
	}
	// The open window lets the writer debit the next message: hold it,
	// so that the counts below see no more writes.
	if got := w.hold(t); got != string(src.text) {
		t.Fatalf("after the window opened got %q", got)
	}
	// A stale credit changes nothing and is not an error.
	if err := st.Credit(200); err != nil {
		t.Fatalf("stale credit: %v", err)
	}
	if _, consumed, _ := st.Window(); consumed != 1000 {
		t.Fatalf("consumed = %d after stale credit, want 1000", consumed)
	}
}

// frameParams decodes a channel/frame notification.
type frameMsg struct {
	Method string `json:"method"`
	Params struct {
		Channel string `json:"channel"`
		Data    string `json:"data"`
		Final   bool   `json:"final"`
	} `json:"params"`
}

func TestLargeMessageIsFragmentedAndReassembles(t *testing.T) {
	const ch = "ahp-terminal:/t1"
	// Escapes, non-BMP characters (surrogate pairs) and plain runs.
	var body strings.Builder
	for i := 0; body.Len() < 20000; i++ {
		fmt.Fprintf(&body, "line %d: \"quoted\" \\ tab\t <&> é 😀 \u2028\r\n", i)
	}
	msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "action", "params": map[string]any{"channel": ch, "data": body.String()}})
	if err != nil {
		t.Fatal(err)
	}
	limits := delivery.Limits{WindowBytes: 1 << 30, MaximumFrameBytes: 1024}
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	src := &listSource{msgs: [][]byte{msg}}
	st := s.AddStream(ch, limits, src)
	w := newStepWriter()
	run(t, s, w)
	r := delivery.NewReassembler(1 << 20)
	var total delivery.UTF16Bytes
	for frames := 0; ; frames++ {
		if frames > 1000 {
			t.Fatal("too many frames")
		}
		text := w.take(t)
		size := delivery.MeasureString(text)
		if size > limits.MaximumFrameBytes {
			t.Fatalf("frame %d is %d UTF-16 bytes, above maximumFrameBytes %d", frames, size, limits.MaximumFrameBytes)
		}
		total += size
		var f frameMsg
		if err := json.Unmarshal([]byte(text), &f); err != nil {
			t.Fatalf("frame %d not JSON: %v", frames, err)
		}
		if f.Method != "channel/frame" || f.Params.Channel != ch {
			t.Fatalf("frame %d: method %q channel %q", frames, f.Method, f.Params.Channel)
		}
		joined, complete, err := r.Add(f.Params.Data, f.Params.Final)
		if err != nil {
			t.Fatalf("frame %d: %v", frames, err)
		}
		if complete {
			if string(joined) != string(msg) {
				t.Fatalf("reassembled message differs from the original (%d vs %d bytes)", len(joined), len(msg))
			}
			if frames < 2 {
				t.Fatalf("only %d frames for a %d-byte message", frames+1, delivery.Measure(msg))
			}
			break
		}
	}
	if sent, _, _ := st.Window(); sent != total {
		t.Fatalf("window sent %d, frames total %d", sent, total)
	}
}

func TestFragmentsSizedToRemainingCredit(t *testing.T) {
	const ch = "c"
	msg := []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"c","d":"` + strings.Repeat("y", 10000) + `"}}`)
	limits := delivery.Limits{WindowBytes: 1500, MaximumFrameBytes: 1024}
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	st := s.AddStream(ch, limits, &listSource{msgs: [][]byte{msg}})
	w := newStepWriter()
	run(t, s, w)
	// The first fragment fills maximumFrameBytes exactly (plain ASCII).
	first := delivery.MeasureString(w.take(t))
	if first != 1024 {
		t.Fatalf("first fragment %d, want 1024", first)
	}
	// Remaining credit 476 < 1024: the next fragment is sized to it.
	remaining := limits.WindowBytes - first
	if floor := delivery.FrameOverhead(ch, true) + 256; remaining < floor {
		t.Fatalf("test setup: remaining %d below the product's floor %d", remaining, floor)
	}
	second := delivery.MeasureString(w.take(t))
	if second != remaining {
		t.Fatalf("second fragment %d, want the remaining credit %d", second, remaining)
	}
	if st.CanStart() {
		t.Fatal("window should be full")
	}
	// Credit 1000: remaining 1000 → a 1000-byte fragment.
	if err := st.Credit(1000); err != nil {
		t.Fatal(err)
	}
	if got := delivery.MeasureString(w.take(t)); got != 1000 {
		t.Fatalf("third fragment %d, want 1000", got)
	}
	// Credit leaving 1400: more than the frame limit, so a full frame.
	if err := st.Credit(1500 + 1000 - 100); err != nil { // outstanding 100
		t.Fatal(err)
	}
	if got := delivery.MeasureString(w.take(t)); got != 1024 {
		t.Fatalf("with 1400 credit left, fragment %d, want 1024", got)
	}
	// Outstanding 1124, remaining 376: below the product's floor (final
	// envelope + 256 = 436), so the fragment is the floor and goes past the
	// window, as the seed allows for the last one.
	if got := delivery.MeasureString(w.take(t)); got != delivery.FrameOverhead(ch, true)+256 {
		t.Fatalf("with 376 credit left, fragment %d, want %d", got, delivery.FrameOverhead(ch, true)+256)
	}
	if st.CanStart() {
		t.Fatal("window should be full again")
	}
}

func TestStreamRemoveStopsSending(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	src := newRepeat("A", 500)
	st := s.AddStream("A", big, src)
	w := newStepWriter()
	run(t, s, w)
	if got := w.take(t); got != string(src.text) {
		t.Fatalf("got %q", got)
	}
	if got := w.hold(t); got != string(src.text) {
		t.Fatalf("got %q", got)
	}
	st.Remove()
	st.Remove() // idempotent
	if !st.Removed() {
		t.Fatal("Removed() false after Remove")
	}
	calls := src.calls.Load()
	if err := s.PushOrdinary("o", 1, []byte(`{"o":1}`)); err != nil {
		t.Fatal(err)
	}
	w.resume(t)
	if got := w.take(t); got != `{"o":1}` {
		t.Fatalf("after Remove got %s, want the ordinary message (no more data from the removed stream)", got)
	}
	if err := s.PushProtected([]byte(`{"p":1}`)); err != nil {
		t.Fatal(err)
	}
	if got := w.take(t); got != `{"p":1}` {
		t.Fatalf("got %s", got)
	}
	if n := src.calls.Load(); n != calls {
		t.Fatalf("Source.Next called %d more times after Remove", n-calls)
	}
}

func TestCreditBeyondSentIsViolation(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	// One message only, so the writer cannot debit another before Credit.
	st := s.AddStream("ahp-terminal:/x", delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, &listSource{msgs: [][]byte{newRepeat("x", 200).text}})
	w := newStepWriter()
	run(t, s, w)
	w.take(t) // 200 sent
	err := st.Credit(201)
	var v *delivery.ViolationError
	if !errors.As(err, &v) {
		t.Fatalf("Credit(201) = %v, want *ViolationError", err)
	}
	if v.Kind != delivery.CreditBeyondSent || v.Channel != "ahp-terminal:/x" || v.Got != 201 || v.Limit != 200 {
		t.Fatalf("violation = %+v, want CreditBeyondSent on ahp-terminal:/x Got 201 Limit 200", *v)
	}
	if want := "delivery: credit beyond sent on ahp-terminal:/x: consumedBytes 201 > sent 200"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	if _, consumed, _ := st.Window(); consumed != 0 {
		t.Fatalf("consumed %d after violation, want 0", consumed)
	}
	if err := st.Credit(200); err != nil {
		t.Fatalf("Credit(200) = %v", err)
	}
}

func TestCloseWhenFlushed(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	errVersion := errors.New("version mismatch")
	for _, p := range []string{`{"p":1}`, `{"p":2}`} {
		if err := s.PushProtected([]byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	s.PushCredit("c", 1)
	if err := s.PushOrdinary("o", 1, []byte(`{"o":1}`)); err != nil {
		t.Fatal(err)
	}
	s.CloseWhenFlushed(errVersion)
	w := newStepWriter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, w) }()
	for _, want := range []string{`{"p":1}`, `{"p":2}`} {
		if got := w.take(t); got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, errVersion) {
			t.Fatalf("Run = %v, want the flush error", err)
		}
	case <-w.got:
		t.Fatal("a non-protected message was written after the protected queue drained")
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after the protected queue drained")
	}
	if err := s.PushProtected([]byte(`{}`)); !errors.Is(err, errVersion) {
		t.Fatalf("push after close = %v, want the flush error", err)
	}
}

func TestCloseStopsRunAndFailsPushes(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	w := newStepWriter()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, w) }()
	s.Close(nil)
	select {
	case err := <-done:
		if !errors.Is(err, delivery.ErrClosed) {
			t.Fatalf("Run = %v, want ErrClosed", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("Run did not return after Close")
	}
	for name, err := range map[string]error{
		"protected": s.PushProtected([]byte("{}")),
		"control":   s.PushControl([]byte("{}")),
		"ordinary":  s.PushOrdinary("o", 1, []byte("{}")),
	} {
		if !errors.Is(err, delivery.ErrClosed) {
			t.Errorf("Push%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestWriteErrorEndsRun(t *testing.T) {
	boom := errors.New("socket gone")
	var sent []string
	s2 := delivery.NewScheduler(delivery.SchedulerConfig{OnSent: func(m delivery.Message) { sent = append(sent, string(m.Text)) }})
	if err := s2.PushProtected([]byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s2.PushProtected([]byte(`{"b":1}`)); err != nil {
		t.Fatal(err)
	}
	calls := 0
	err := s2.Run(context.Background(), writerFunc(func(ctx context.Context, b []byte) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	}))
	if !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the write error", err)
	}
	if len(sent) != 1 || sent[0] != `{"a":1}` {
		t.Fatalf("OnSent saw %q, want only the first message", sent)
	}
	if err := s2.PushProtected([]byte("{}")); !errors.Is(err, boom) {
		t.Fatalf("push after write error = %v, want it", err)
	}
}

type writerFunc func(ctx context.Context, b []byte) error

func (f writerFunc) WriteMessage(ctx context.Context, b []byte) error { return f(ctx, b) }

func TestInboundReceiveOverWindowIsViolation(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	in := s.NewInbound("c", delivery.Limits{WindowBytes: 2048, MaximumFrameBytes: 1024}, 1<<20)
	if err := in.Receive(1024); err != nil {
		t.Fatal(err)
	}
	if err := in.Receive(1024); err != nil { // starts at 1024 < 2048, ends at 2048
		t.Fatal(err)
	}
	err := in.Receive(1)
	var v *delivery.ViolationError
	if !errors.As(err, &v) || v.Kind != delivery.WindowExceeded || v.Channel != "c" || v.Got != 2048 || v.Limit != 2048 {
		t.Fatalf("Receive on a full window = %v, want WindowExceeded on c 2048/2048", err)
	}
	err = in.Receive(1025)
	if !errors.As(err, &v) || v.Kind != delivery.FrameTooLarge || v.Got != 1025 || v.Limit != 1024 {
		t.Fatalf("Receive(1025) = %v, want FrameTooLarge 1025/1024", err)
	}
	if rcv, rel := in.Counters(); rcv != 2048 || rel != 0 {
		t.Fatalf("counters %d %d, want 2048 0", rcv, rel)
	}
}

func TestInboundFrameReleasesNonFinalAndCreditsFlow(t *testing.T) {
	const ch = "ahp-terminal:/t"
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	in := s.NewInbound(ch, delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, 1<<20)
	msg := []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"ahp-terminal:/t","d":"` + strings.Repeat("z", 1500) + `"}}`)
	f := delivery.NewFragmenter(ch, msg)
	var sizes []delivery.UTF16Bytes
	var got []byte
	for !f.Done() {
		frame, size, final, err := f.Next(nil, 1024)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, size)
		var fm frameMsg
		if err := json.Unmarshal(frame, &fm); err != nil {
			t.Fatal(err)
		}
		if err := in.Receive(size); err != nil {
			t.Fatal(err)
		}
		m, complete, err := in.Frame(fm.Params.Data, final, size)
		if err != nil {
			t.Fatal(err)
		}
		if complete != final {
			t.Fatalf("complete %v on final %v", complete, final)
		}
		if complete {
			got = m
		}
	}
	if len(sizes) < 3 {
		t.Fatalf("only %d fragments", len(sizes))
	}
	if string(got) != string(msg) {
		t.Fatal("reassembled message differs")
	}
	var nonFinal delivery.UTF16Bytes
	for _, sz := range sizes[:len(sizes)-1] {
		nonFinal += sz
	}
	rcv, rel := in.Counters()
	if rel != nonFinal || rcv != nonFinal+sizes[len(sizes)-1] {
		t.Fatalf("counters received %d released %d; want %d and %d (non-final fragments released at once, final held)", rcv, rel, nonFinal+sizes[len(sizes)-1], nonFinal)
	}
	// The consumer processed the message: release the final fragment.
	in.Release(sizes[len(sizes)-1])
	if _, c, _ := s.QueueLens(); c != 1 {
		t.Fatalf("credits queued = %d, want 1 (coalesced)", c)
	}
	w := newStepWriter()
	run(t, s, w)
	if got, want := w.take(t), creditText(ch, int(rcv)); got != want {
		t.Fatalf("credit %s, want %s", got, want)
	}
}

func TestInboundReleaseCoalescesCredit(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	in := s.NewInbound("c", delivery.Limits{WindowBytes: 16000, MaximumFrameBytes: 1024}, 1<<20)
	for i := 0; i < 3; i++ {
		if err := in.Receive(100); err != nil {
			t.Fatal(err)
		}
	}
	// 100 and 200 released: not caught up, below windowBytes/16 = 1000.
	in.Release(100)
	in.Release(100)
	if _, c, _ := s.QueueLens(); c != 0 {
		t.Fatalf("credit queued after partial release: %d", c)
	}
	in.Release(100) // caught up: due
	in.Release(0)   // ignored
	for i := 0; i < 10; i++ {
		if err := in.Receive(1000); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		in.Release(1000) // each time caught up: credit due, coalesced while unsent
	}
	if _, c, _ := s.QueueLens(); c != 1 {
		t.Fatalf("credits queued = %d, want 1", c)
	}
	w := newStepWriter()
	run(t, s, w)
	if got, want := w.take(t), creditText("c", 10300); got != want {
		t.Fatalf("credit %s, want %s", got, want)
	}
	// Releasing more than received is clamped; nothing new is due.
	in.Release(5)
	if _, c, _ := s.QueueLens(); c != 0 {
		t.Fatalf("credit queued for nothing new: %d", c)
	}
	// Without being caught up, a sixteenth of the window releases credit.
	for i := 0; i < 2; i++ {
		if err := in.Receive(1000); err != nil {
			t.Fatal(err)
		}
	}
	in.Release(999)
	if _, c, _ := s.QueueLens(); c != 0 {
		t.Fatal("credit at 999 < 1000 released")
	}
	in.Release(1)
	if got, want := w.take(t), creditText("c", 11300); got != want {
		t.Fatalf("credit %s, want %s", got, want)
	}
}

func BenchmarkSchedulerFrames(b *testing.B) {
	for _, streams := range []int{1, 8} {
		b.Run(fmt.Sprint(streams, " streams"), func(b *testing.B) {
			s := delivery.NewScheduler(delivery.SchedulerConfig{Quantum: 16384})
			msg := []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"c","d":"` + strings.Repeat("x", 4000) + `"}}`)
			for i := 0; i < streams; i++ {
				s.AddStream(fmt.Sprint("c", i), delivery.Limits{WindowBytes: 1 << 60, MaximumFrameBytes: 16384}, constSource(msg))
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := 0
			var bytes int64
			b.ReportAllocs()
			b.ResetTimer()
			err := s.Run(ctx, writerFunc(func(ctx context.Context, t []byte) error {
				if n >= b.N {
					// Run does not check ctx while data is ready; a real
					// transport returns ctx.Err() from WriteMessage.
					cancel()
					return ctx.Err()
				}
				bytes += int64(len(t))
				n++
				return nil
			}))
			b.StopTimer()
			if !errors.Is(err, context.Canceled) {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(msg)))
		})
	}
}

type constSource []byte

func (c constSource) Next() delivery.Message { return delivery.Message{Text: c} }

// TestRunStopsOnCancelWhileDataReady: Run's doc says it writes "until ctx
// ends". With a stream that always has data, next() never reaches its
// select on ctx.Done, so Run only stops if the writer itself fails.
func TestRunStopsOnCancelWhileDataReady(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	s.AddStream("A", big, newRepeat("A", 200))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errStillWriting := errors.New("still writing 1000 messages after cancel")
	n, after := 0, 0
	err := s.Run(ctx, writerFunc(func(context.Context, []byte) error {
		n++
		if n == 10 {
			cancel()
		}
		if ctx.Err() != nil {
			after++
			if after > 1000 {
				return errStillWriting
			}
		}
		return nil
	}))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v after cancel, want context.Canceled", err)
	}
}

// sizedSource is a listSource that states each message's size.
type sizedSource struct {
	listSource
	size delivery.UTF16Bytes
}

func (s *sizedSource) Next() delivery.Message {
	m := s.listSource.Next()
	if m.IsZero() {
		return m
	}
	m.Size = s.size
	return m
}

// TestSizedSource: the Scheduler debits the size a Source states
// instead of measuring the text (here a size that measuring would not
// give, to tell them apart).
func TestSizedSource(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{})
	msg := []byte(`{"jsonrpc":"2.0","method":"action","params":{"channel":"C"}}`)
	src := &sizedSource{listSource: listSource{msgs: [][]byte{msg}}, size: 1000}
	st := s.AddStream("C", delivery.Limits{WindowBytes: 4096, MaximumFrameBytes: 1024}, src)
	w := newStepWriter()
	run(t, s, w)
	if got := w.take(t); got != string(msg) {
		t.Fatalf("wrote %s", got)
	}
	if sent, _, _ := st.Window(); sent != 1000 {
		t.Fatalf("sent %d UTF-16 bytes, want the stated 1000 (measured: %d)", sent, delivery.Measure(msg))
	}
}

// recycleSource is a listSource that records what it gets back.
type recycleSource struct {
	listSource
	mu   sync.Mutex
	back []string
}

func (s *recycleSource) Recycle(m delivery.Message) {
	s.mu.Lock()
	s.back = append(s.back, string(m.Text))
	s.mu.Unlock()
}

func (s *recycleSource) recycled() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.back...)
}

// TestRecycle: with WriterReleases, a Recycler gets each whole message
// back once it was written, and never a message that went out in
// fragments; without it, nothing comes back.
func TestRecycle(t *testing.T) {
	whole := `{"jsonrpc":"2.0","method":"action","params":{"channel":"C","n":1}}`
	big := newRepeat("y", 1500).text // over the 1024-byte frame: fragments
	for _, releases := range []bool{true, false} {
		s := delivery.NewScheduler(delivery.SchedulerConfig{WriterReleases: releases})
		src := &recycleSource{listSource: listSource{msgs: [][]byte{[]byte(whole), big}}}
		s.AddStream("C", delivery.Limits{WindowBytes: 1 << 20, MaximumFrameBytes: 1024}, src)
		w := newStepWriter()
		stop := run(t, s, w)
		if got := w.take(t); got != whole {
			t.Fatalf("first write %s", got)
		}
		for i := 0; ; i++ { // the fragments of big, up to the final one
			if i > 10 {
				t.Fatal("no final fragment")
			}
			if strings.Contains(w.take(t), `"final":true`) {
				break
			}
		}
		_ = stop()
		want := []string(nil)
		if releases {
			want = []string{whole}
		}
		if got := src.recycled(); !slices.Equal(got, want) {
			t.Fatalf("WriterReleases %v: recycled %q, want %q", releases, got, want)
		}
	}
}

// retainWriter keeps the very slices it was given (no copy) and a copy
// taken at write time: a slice the Scheduler reused afterwards no longer
// reads as its copy.
type retainWriter struct {
	mu     sync.Mutex
	kept   [][]byte
	copies []string
	wrote  chan struct{}
}

func (w *retainWriter) WriteMessage(_ context.Context, text []byte) error {
	w.mu.Lock()
	w.kept = append(w.kept, text)
	w.copies = append(w.copies, string(text))
	w.mu.Unlock()
	w.wrote <- struct{}{}
	return nil
}

// TestOwnMessagesBuffer: credits (the Scheduler's own messages) are built
// in one reused buffer only when the writer releases what it wrote; a
// writer that may keep them (no WriterReleases) gets a buffer per message,
// which stays intact. Either way each message is exactly AppendCredit's.
func TestOwnMessagesBuffer(t *testing.T) {
	for _, releases := range []bool{true, false} {
		s := delivery.NewScheduler(delivery.SchedulerConfig{WriterReleases: releases})
		w := &retainWriter{wrote: make(chan struct{})}
		run(t, s, w)
		var want []string
		for i := range 5 {
			ch := fmt.Sprintf("ahp-terminal:/t%d", i)
			s.PushCredit(ch, delivery.UTF16Bytes(100*(i+1)))
			want = append(want, string(delivery.AppendCredit(nil, ch, delivery.UTF16Bytes(100*(i+1)))))
			select {
			case <-w.wrote:
			case <-time.After(waitLimit):
				t.Fatal("credit not written")
			}
		}
		w.mu.Lock()
		if !slices.Equal(w.copies, want) {
			t.Fatalf("WriterReleases %v: wrote %q, want %q", releases, w.copies, want)
		}
		for i, k := range w.kept {
			if releases && &k[:1][0] != &w.kept[0][:1][0] {
				t.Errorf("credit %d in a buffer of its own: the buffer was not reused", i)
			}
			if !releases && string(k) != want[i] {
				t.Errorf("credit %d changed after it was written: %q, want %q", i, k, want[i])
			}
		}
		w.mu.Unlock()
	}
}

// TestOwnMessagesBufferBound: the buffer the Scheduler keeps for its own
// messages is bounded (4 KiB): one that grew past it for a credit with a
// very long channel URI is dropped, not kept, and the next small one is
// reused again.
func TestOwnMessagesBufferBound(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{WriterReleases: true})
	w := &retainWriter{wrote: make(chan struct{})}
	run(t, s, w)
	for _, ch := range []string{"ahp-terminal:/" + strings.Repeat("x", 5000), "ahp-terminal:/a", "ahp-terminal:/b"} {
		s.PushCredit(ch, 100)
		select {
		case <-w.wrote:
		case <-time.After(waitLimit):
			t.Fatal("credit not written")
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.kept) != 3 {
		t.Fatalf("%d credits written, want 3", len(w.kept))
	}
	if &w.kept[1][:1][0] == &w.kept[0][:1][0] {
		t.Error("the 5 KB buffer of the long credit was kept and reused")
	}
	if &w.kept[2][:1][0] != &w.kept[1][:1][0] {
		t.Error("a small buffer was not reused")
	}
}

// TestNoActionBeforeItsGap (issue 27 item 1): while the writer interleaves
// a busy windowed stream with a small ordinary FIFO that keeps
// collapsing, every action written is either the one after the previous
// action of its channel or comes after a channel/gap whose afterSeq is
// that previous action: nothing is ever dropped without a gap marking the
// hole (seed 003), and a gap never claims actions the client lacks.
func TestNoActionBeforeItsGap(t *testing.T) {
	s := delivery.NewScheduler(delivery.SchedulerConfig{OrdinaryMessages: 4, Quantum: 1024})
	s.AddStream("busy", delivery.Limits{WindowBytes: 1 << 40, MaximumFrameBytes: 1024}, newRepeat("busy", 1000))
	type written struct {
		gap bool
		seq uint64
	}
	var mu sync.Mutex
	var got []written
	done := make(chan struct{})
	w := writerFunc(func(_ context.Context, b []byte) error {
		var m struct {
			Method string
			Params struct {
				Channel   string
				AfterSeq  uint64
				ServerSeq uint64
			}
		}
		if err := json.Unmarshal(b, &m); err != nil || m.Params.Channel != "ord" {
			return nil // the busy stream's
		}
		mu.Lock()
		defer mu.Unlock()
		if m.Method == "channel/gap" {
			got = append(got, written{gap: true, seq: m.Params.AfterSeq})
		} else {
			got = append(got, written{seq: m.Params.ServerSeq})
		}
		return nil
	})
	stop := run(t, s, w)
	const n = 20000
	go func() {
		defer close(done)
		for seq := uint64(1); seq <= n; seq++ {
			text := fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"action","params":{"channel":"ord","serverSeq":%d}}`, seq)
			if err := s.PushOrdinary("ord", seq, text); err != nil {
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(waitLimit):
		t.Fatal("pushing did not end")
	}
	_ = stop()
	mu.Lock()
	defer mu.Unlock()
	var last uint64
	gapAt := false
	for i, x := range got {
		switch {
		case x.gap:
			if x.seq != last {
				t.Fatalf("write %d: channel/gap afterSeq %d, but the last action written was %d", i, x.seq, last)
			}
			gapAt = true
		case x.seq != last+1 && !gapAt:
			t.Fatalf("write %d: action %d right after %d with no gap between", i, x.seq, last)
		default:
			last, gapAt = x.seq, false
		}
	}
}
