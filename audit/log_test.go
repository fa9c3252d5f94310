package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// lockedBuffer is a bytes.Buffer safe for the writer goroutine and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

var t0 = time.Date(2026, 12, 7, 15, 48, 19, 123456000, time.UTC)

func TestLogLineShape(t *testing.T) {
	var out lockedBuffer
	file := filepath.Join(t.TempDir(), "audit.log")
	l, err := New(Options{Out: &out, File: file})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Time: t0, Action: "terminal.create", Principal: "alice", Role: "user",
		Attrs: map[string]any{"terminal": "ahp-terminal:/t1", "duration": 1500 * time.Millisecond, "bytes": uint64(7), "role": "spoofed", "@level": "x"}})
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := `{"@timestamp":"2026-12-07T15:48:19.123456Z","@level":"info","@module":"sidecar.audit","@message":"terminal.create",` +
		`"action":"terminal.create","principal":"alice","role":"user","bytes":7,"duration":1.5,"terminal":"ahp-terminal:/t1"}` + "\n"
	if got := out.String(); got != want {
		t.Fatalf("line:\n got %s\nwant %s", got, want)
	}
	b, err := os.ReadFile(file)
	if err != nil || string(b) != want {
		t.Fatalf("file: %q, %v", b, err)
	}
	fi, _ := os.Stat(file)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode %v, want 0600", fi.Mode().Perm())
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
}

func TestCleanRedactsAndCuts(t *testing.T) {
	ev := Clean(Event{Action: "preview.request", Attrs: map[string]any{
		"url.path": "/x?token=s3cr3t-value&a=1",
		"long":     strings.Repeat("a", MaxValueBytes+10),
	}})
	if p := ev.Attrs["url.path"].(string); strings.Contains(p, "s3cr3t") {
		t.Fatalf("token kept: %q", p)
	}
	if l := ev.Attrs["long"].(string); len(l) != MaxValueBytes+len("…") {
		t.Fatalf("long value not cut: %d bytes", len(l))
	}
	many := map[string]any{}
	for i := range MaxAttrs + 5 {
		many[strings.Repeat("k", i+1)] = i
	}
	if n := len(Clean(Event{Attrs: many}).Attrs); n != MaxAttrs {
		t.Fatalf("%d attributes kept, want %d", n, MaxAttrs)
	}
}

// blockedWriter blocks every Write until release is closed.
type blockedWriter struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	n       int
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.entered) })
	<-w.release
	w.n++
	return len(p), nil
}

// TestLogQueueBound: a log output that does not take lines holds one
// event in the writer and Queue in the queue; every later event is
// dropped and counted, and Record never blocks.
func TestLogQueueBound(t *testing.T) {
	w := &blockedWriter{entered: make(chan struct{}), release: make(chan struct{})}
	const queue = 4
	l, err := New(Options{Out: w, Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Event{Action: "a"})
	<-w.entered // the writer holds the first one
	for range queue + 10 {
		l.Record(Event{Action: "b"})
	}
	st := l.Stats()
	if st.Recorded != queue+11 || st.Dropped != 10 {
		t.Fatalf("stats %+v, want recorded %d, dropped 10", st, queue+11)
	}
	close(w.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if w.n != queue+1 {
		t.Fatalf("%d lines written, want %d", w.n, queue+1)
	}
}

// TestLogRingBound: a reader that falls more than Ring events behind
// skips the oldest ones, counted as missed.
func TestLogRingBound(t *testing.T) {
	l, err := New(Options{Ring: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs, cursor, changed := l.Read(0, 100)
	if len(evs) != 0 || cursor != 0 {
		t.Fatalf("empty log read %d events, cursor %d", len(evs), cursor)
	}
	for i := range 20 {
		l.Record(Event{Action: "a", Attrs: map[string]any{"i": i}})
	}
	select {
	case <-changed:
	default:
		t.Fatal("changed not closed by an event")
	}
	evs, cursor, _ = l.Read(0, 100)
	if len(evs) != 8 || cursor != 20 || evs[0].Attrs["i"] != 12 || l.Stats().Missed != 12 {
		t.Fatalf("read %d events (first %v), cursor %d, missed %d; want 8 from 12, 20, 12", len(evs), evs[0].Attrs["i"], cursor, l.Stats().Missed)
	}
	if o := l.Oldest(); o != 12 {
		t.Fatalf("oldest %d, want 12", o)
	}
	evs, cursor, _ = l.Read(18, 1)
	if len(evs) != 1 || cursor != 19 {
		t.Fatalf("limit: %d events, cursor %d", len(evs), cursor)
	}
}

func TestLogClosedIgnores(t *testing.T) {
	var out lockedBuffer
	l, _ := New(Options{Out: &out})
	_ = l.Close()
	l.Record(Event{Action: "late"})
	_ = l.Close()
	if out.String() != "" || l.Stats().Recorded != 0 {
		t.Fatalf("recorded after Close: %q", out.String())
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
