package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/internal/redact"
)

// Bounds of the host's audit log (docs/operations.md "Audit").
const (
	// QueueEvents bounds the events waiting to be written as log lines
	// (the daemon's log, the audit file): one more is dropped and
	// counted (Stats.Dropped), so that a slow log (journald throttling
	// stderr) never holds a request up.
	QueueEvents = 1024
	// RingEvents bounds the events kept for the audit channel
	// (ahp-otlp://logs/audit): its backlog, and how far its reader may
	// fall behind before it misses events (Stats.Missed).
	RingEvents = 1024
	// MaxValueBytes bounds one string attribute (a path, a command): a
	// longer one is cut there and "…" appended.
	MaxValueBytes = 1024
	// MaxAttrs bounds the attributes of one event: the others are left
	// out.
	MaxAttrs = 32
)

// Options configures a Log.
type Options struct {
	// Out receives one JSON line per event (the daemon's log: its
	// stderr, which journald reads); nil for none.
	Out io.Writer
	// File, when set, is a file each line is appended to as well
	// (created 0600).
	File string
	// Queue bounds the events waiting to be written (QueueEvents when
	// <= 0); Ring the events kept for readers (RingEvents when <= 0).
	Queue, Ring int
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Log is the host's audit sink: each event is kept in a bounded ring
// for the audit channel's reader (Read) and queued, bounded, for a
// writer goroutine that writes it as one JSON line to Options.Out and
// Options.File. Record never blocks: an event the queue has no room
// for is not written, and counted. Its methods are safe for concurrent
// use.
type Log struct {
	now   func() time.Time
	queue chan Event
	outs  []io.Writer
	file  *os.File
	done  chan struct{}

	mu      sync.Mutex
	ring    []Event
	next    uint64        // seq of the next event; the first is 1
	changed chan struct{} // closed at the next event
	closed  bool

	recorded, dropped, missed, failed atomic.Uint64
}

// Stats are a Log's counters, cumulative.
type Stats struct {
	Recorded uint64 // events recorded
	Dropped  uint64 // events not written: the queue was full
	Missed   uint64 // events the channel's reader missed: the ring had moved on
	Failed   uint64 // lines a writer failed to take
}

// New returns a Log writing to opts' outputs; Close stops it. An error
// is an audit file that cannot be opened.
func New(opts Options) (*Log, error) {
	if opts.Queue <= 0 {
		opts.Queue = QueueEvents
	}
	if opts.Ring <= 0 {
		opts.Ring = RingEvents
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Log{
		now: opts.Now, queue: make(chan Event, opts.Queue), done: make(chan struct{}),
		ring: make([]Event, opts.Ring), next: 1, changed: make(chan struct{}),
	}
	if opts.Out != nil {
		l.outs = append(l.outs, opts.Out)
	}
	if opts.File != "" {
		f, err := os.OpenFile(opts.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("audit: cannot open audit.file: %w", err)
		}
		l.file = f
		l.outs = append(l.outs, f)
	}
	if len(l.outs) == 0 {
		close(l.queue) // nothing to write: no writer, nothing queued
		close(l.done)
		l.queue = nil
		return l, nil
	}
	go l.write()
	return l, nil
}

// Record implements Sink: ev (its Time set when zero, its attributes
// cleaned: Clean) is kept for the channel and queued for the log.
func (l *Log) Record(ev Event) {
	if ev.Time.IsZero() {
		ev.Time = l.now()
	}
	ev = Clean(ev)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.ring[l.next%uint64(len(l.ring))] = ev
	l.next++
	close(l.changed)
	l.changed = make(chan struct{})
	l.recorded.Add(1)
	if l.queue != nil {
		select {
		case l.queue <- ev:
		default:
			l.dropped.Add(1)
		}
	}
	l.mu.Unlock()
}

// Read returns up to limit events after seq after, the seq to read
// after next time, and a channel closed at the next event. Events the
// ring no longer holds are skipped and counted (Stats.Missed).
func (l *Log) Read(after uint64, limit int) (evs []Event, cursor uint64, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	size := uint64(len(l.ring))
	head := l.next - 1
	if head > size && after < head-size {
		l.missed.Add(head - size - after)
		after = head - size
	}
	for after < head && len(evs) < limit {
		after++
		evs = append(evs, l.ring[after%size])
	}
	return evs, after, l.changed
}

// Oldest returns the seq before the oldest event the ring holds.
func (l *Log) Oldest() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if head, size := l.next-1, uint64(len(l.ring)); head > size {
		return head - size
	}
	return 0
}

// Stats returns the Log's counters.
func (l *Log) Stats() Stats {
	return Stats{Recorded: l.recorded.Load(), Dropped: l.dropped.Load(), Missed: l.missed.Load(), Failed: l.failed.Load()}
}

// Close writes what is queued, stops the writer, and closes the audit
// file. Events recorded after it are ignored.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		<-l.done
		return nil
	}
	l.closed = true
	if l.queue != nil {
		close(l.queue)
	}
	l.mu.Unlock()
	<-l.done
	if l.file != nil {
		return l.file.Close()
	}
	return nil
}

// write writes each queued event as a line, until Close.
func (l *Log) write() {
	defer close(l.done)
	var buf bytes.Buffer
	for ev := range l.queue {
		buf.Reset()
		AppendLine(&buf, ev)
		for _, w := range l.outs {
			if _, err := w.Write(buf.Bytes()); err != nil {
				l.failed.Add(1)
			}
		}
	}
}

// AppendLine appends ev as one JSON line (its newline included), in the
// shape of the daemon's JSON log records (hclog's) so that journald and
// log shippers take it alike:
//
//	{"@timestamp":"2026-12-07T15:48:19.123456Z","@level":"info","@module":"sidecar.audit",
//	 "@message":"terminal.create","action":"terminal.create","principal":"alice","role":"user",
//	 "terminal":"ahp-terminal:/t1"}
//
// The attributes follow in the order of their names; one named like a
// fixed key is left out.
func AppendLine(buf *bytes.Buffer, ev Event) {
	buf.WriteString(`{"@timestamp":`)
	writeJSON(buf, ev.Time.UTC().Format("2006-01-02T15:04:05.000000Z07:00"))
	buf.WriteString(`,"@level":"info","@module":"sidecar.audit","@message":`)
	writeJSON(buf, ev.Action)
	buf.WriteString(`,"action":`)
	writeJSON(buf, ev.Action)
	buf.WriteString(`,"principal":`)
	writeJSON(buf, ev.Principal)
	buf.WriteString(`,"role":`)
	writeJSON(buf, ev.Role)
	for _, k := range sortedKeys(ev.Attrs) {
		switch k {
		case "action", "principal", "role":
			continue
		}
		if len(k) > 0 && k[0] == '@' {
			continue
		}
		buf.WriteByte(',')
		writeJSON(buf, k)
		buf.WriteByte(':')
		writeJSON(buf, ev.Attrs[k])
	}
	buf.WriteString("}\n")
}

func writeJSON(buf *bytes.Buffer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprint(v))
	}
	buf.Write(b)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Clean returns ev with a copy of its attributes that an audit line may
// carry: at most MaxAttrs (by name), strings cut at MaxValueBytes with
// the values of token= and ticket= parameters taken out
// (internal/redact), durations as seconds, integers, floats and
// booleans as they are, anything else as its text.
func Clean(ev Event) Event {
	if len(ev.Attrs) == 0 {
		ev.Attrs = nil
		return ev
	}
	keys := sortedKeys(ev.Attrs)
	if len(keys) > MaxAttrs {
		keys = keys[:MaxAttrs]
	}
	out := make(map[string]any, len(keys))
	for _, k := range keys {
		switch v := ev.Attrs[k].(type) {
		case string:
			out[k] = cleanString(v)
		case time.Duration:
			out[k] = v.Seconds()
		case bool, int, int32, int64, uint, uint32, uint64, float64:
			out[k] = v
		case error:
			out[k] = cleanString(v.Error())
		case nil:
			out[k] = nil
		default:
			out[k] = cleanString(fmt.Sprint(v))
		}
	}
	ev.Attrs = out
	ev.Principal = cleanString(ev.Principal)
	return ev
}

func cleanString(s string) string {
	s = redact.Text(s)
	if len(s) > MaxValueBytes {
		s = s[:MaxValueBytes] + "…"
	}
	return s
}

var _ Feed = (*Log)(nil)
