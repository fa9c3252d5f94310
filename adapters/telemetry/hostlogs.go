package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Bounds of the machine's log channels (ahp-otlp://logs/files and
// ahp-otlp://logs/journal, docs/protocol.md "The machine's logs").
const (
	// HostLogRingRecords bounds the records one log channel keeps for its
	// subscribers: the backlog a new subscriber gets first, and how far
	// a subscriber may fall behind the fastest one before it misses
	// records (reported as "skipped"). The reader stops reading while the
	// fastest subscriber is this many records behind.
	HostLogRingRecords = 1024

	// MaxLineBytes bounds one record's body (a line of a file, a journal
	// MESSAGE): a longer one is cut there, "…" appended, and counted.
	MaxLineBytes = 16 << 10

	// MaxHostLogSources bounds the log channels (distinct URIs) the host
	// keeps at once, each with its ring and, while subscribed, its reader
	// (a journalctl process, a file tailer). A new one past it replaces
	// one nobody subscribes to, else the subscribe is refused (-32009, a limit).
	MaxHostLogSources = 8

	// maxBatchBodyBytes caps the body bytes of one otlp/exportLogs
	// message of these channels (besides maxLogRecordsPerBatch).
	maxBatchBodyBytes = 64 << 10

	// ordinaryRetry is how often a log channel retries pushing to an
	// ordinary subscriber whose connection's FIFO had no room (it has no
	// signal that the FIFO drained).
	ordinaryRetry = 100 * time.Millisecond
)

// LineRecord is one record of the machine's logs: a line of a file or a
// journal entry, its attributes named per OpenTelemetry's semantic
// conventions.
type LineRecord struct {
	Time         time.Time // when it happened; zero when unknown (a file's line)
	Observed     time.Time // when the sidecar read it
	Severity     logspb.SeverityNumber
	SeverityText string
	Body         string
	Attrs        []kv
}

// cutLine returns b as a valid UTF-8 body of at most MaxLineBytes (then
// with "…" appended) and whether it was cut.
func cutLine(b []byte) (string, bool) {
	cut := len(b) > MaxLineBytes
	if cut {
		b = b[:MaxLineBytes]
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if cut {
		// A rune split at the cut became U+FFFD; drop it.
		s = strings.TrimSuffix(s, "\uFFFD") + "…"
	}
	return s, cut
}

// hostLogReader reads one log channel's records.
type hostLogReader interface {
	// Run reads records until ctx ends or the source fails, handing each
	// to emit, which blocks while no subscriber has room and returns
	// false once ctx ended. primed is called once the initial backlog is
	// in (the last lines of the files, the journal's last entries). A
	// reader keeps its position (file offsets, the journal's cursor)
	// across runs: the next Run goes on from there.
	Run(ctx context.Context, emit func(LineRecord) bool, primed func()) error
}

// HostLogsConfig configures HostLogs.
type HostLogsConfig struct {
	// Files are telemetry.log_files: the paths and globs a files channel
	// may name.
	Files []string
	// Journal offers ahp-otlp://logs/journal; Journalctl is the program
	// run for it ("journalctl", found on PATH).
	Journal    bool
	Journalctl string
	// Poll is how often files are checked for new lines, rotation and
	// truncation (0: 250 ms).
	Poll time.Duration
	// Resource is the resource of every batch; Seq the journal's
	// serverSeq (a snapshot's fromSeq).
	Resource func() *resourcepb.Resource
	Seq      func() uint64
	Log      hclog.Logger
	// Audit, when set, offers the audit channel (AuditURI) with its
	// events.
	Audit audit.Feed
}

// HostLogs serves the machine's logs as OTLP logs channels: a source
// (ring and reader) per channel URI, at most MaxHostLogSources.
type HostLogs struct {
	cfg HostLogsConfig
	log hclog.Logger

	mu      sync.Mutex
	sources map[string]*logSource
	pending map[adapters.Subscriber]*lsub // windowed subscriptions between Source and Subscribe
	closed  bool
	wg      sync.WaitGroup

	audit *auditReader // the audit channel's one reader (nil: no channel)

	skipped   atomic.Uint64 // records subscribers missed (reported as skipped)
	truncated atomic.Uint64 // records cut at MaxLineBytes
}

// NewHostLogs returns the machine's log channels.
func NewHostLogs(cfg HostLogsConfig) *HostLogs {
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Journalctl == "" {
		cfg.Journalctl = "journalctl"
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	hl := &HostLogs{cfg: cfg, log: cfg.Log.Named("logs"), sources: map[string]*logSource{}, pending: map[adapters.Subscriber]*lsub{}}
	if cfg.Audit != nil {
		hl.audit = &auditReader{feed: cfg.Audit}
	}
	return hl
}

// Skipped returns how many records subscribers missed, each
// subscriber's miss counted.
func (hl *HostLogs) Skipped() uint64 { return hl.skipped.Load() }

// Truncated returns how many records were cut at MaxLineBytes.
func (hl *HostLogs) Truncated() uint64 { return hl.truncated.Load() }

// Close stops every reader and waits for them.
func (hl *HostLogs) Close() {
	hl.mu.Lock()
	hl.closed = true
	for _, src := range hl.sources {
		src.mu.Lock()
		src.stopLocked()
		src.mu.Unlock()
	}
	hl.mu.Unlock()
	hl.wg.Wait()
}

// Channel returns the channel uri, or why it is refused: nil, nil when
// uri is not one of these channels.
func (hl *HostLogs) Channel(uri string) (*HostLogChannel, *rpc.Error) {
	spec, e := hl.parse(uri)
	if spec == nil || e != nil {
		return nil, e
	}
	ch := &HostLogChannel{hl: hl, uri: uri, spec: spec}
	src, e := hl.source(ch)
	if e != nil {
		return nil, e
	}
	ch.src = src
	return ch, nil
}

// source returns the source of ch, creating it (nil, error when the host
// keeps MaxHostLogSources sources already, all subscribed).
func (hl *HostLogs) source(ch *HostLogChannel) (*logSource, *rpc.Error) {
	hl.mu.Lock()
	defer hl.mu.Unlock()
	if src := hl.sources[ch.uri]; src != nil {
		return src, nil
	}
	if len(hl.sources) >= MaxHostLogSources {
		for uri, src := range hl.sources {
			if src.idle() {
				delete(hl.sources, uri)
				break
			}
		}
		if len(hl.sources) >= MaxHostLogSources {
			// A limit, not a passing overload: -32050 would be retried
			// for as long as the link lasts (seed 003 ingress).
			return nil, rpc.Errorf(rpc.CodePermissionDenied, "%s: log channel limit reached: the host follows %d log channels already (at most %d), each subscribed; unsubscribe one first", ch.uri, len(hl.sources), MaxHostLogSources)
		}
	}
	src := &logSource{
		hl: hl, uri: ch.uri, scope: ch.spec.scope, reader: ch.spec.reader(hl),
		buf: make([]LineRecord, HostLogRingRecords), next: 1,
		subs: map[adapters.Subscriber]*lsub{}, parked: map[string]uint64{},
		room: make(chan struct{}, 1), wake: make(chan struct{}, 1),
	}
	hl.sources[ch.uri] = src
	return src, nil
}

// logSource is one log channel's ring of records, its reader and its
// subscriptions. The reader runs while the channel has subscribers.
type logSource struct {
	hl     *HostLogs
	uri    string
	scope  string
	reader hostLogReader

	mu      sync.Mutex
	buf     []LineRecord // ring: seq s at buf[s%len]
	next    uint64       // seq of the next record; the first is 1
	subs    map[adapters.Subscriber]*lsub
	parked  map[string]uint64 // clientID → cursor of a subscription whose connection was lost
	primed  bool              // the initial backlog is in (or there is none)
	running bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the last run ended

	paused atomic.Bool // the reader waits for a subscriber to have room

	room chan struct{} // 1-slot: a cursor moved, or the subscribers changed
	wake chan struct{} // 1-slot: a record was kept (the pump)
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// idle reports whether nobody subscribes (the caller holds hl.mu).
func (src *logSource) idle() bool {
	src.mu.Lock()
	defer src.mu.Unlock()
	return len(src.subs) == 0 && !src.running
}

// add registers os and starts the reader if it is not running.
func (src *logSource) add(os *lsub) {
	src.hl.mu.Lock()
	defer src.hl.mu.Unlock()
	if src.hl.sources[src.uri] != src {
		// Replaced while idle since it was looked up: it is the
		// channel's source again.
		src.hl.sources[src.uri] = src
	}
	src.mu.Lock()
	src.subs[os.s] = os
	start := !src.running && !src.hl.closed
	var prev chan struct{}
	if start {
		src.running = true
		prev = src.done
		ctx, cancel := context.WithCancel(context.Background())
		src.cancel = cancel
		done := make(chan struct{})
		src.done = done
		src.hl.wg.Add(1)
		go src.run(ctx, prev, done)
	}
	src.mu.Unlock()
	signal(src.room)
	signal(src.wake)
}

// remove ends os; the reader stops with the last subscriber. A
// subscription whose connection is ending leaves its cursor for a
// reconnect of its client (Resume).
func (src *logSource) remove(s adapters.Subscriber) {
	src.mu.Lock()
	os := src.subs[s]
	if os == nil {
		src.mu.Unlock()
		return
	}
	os.detached.Store(true)
	delete(src.subs, s)
	if s.Closing() {
		if len(src.parked) >= maxParkedCursors {
			clear(src.parked)
		}
		src.parked[s.ClientID()] = os.cursor
	}
	if len(src.subs) == 0 {
		src.stopLocked()
	}
	src.mu.Unlock()
	signal(src.room)
}

// maxParkedCursors bounds the cursors a source keeps for reconnects.
const maxParkedCursors = 64

// stopLocked cancels the reader (the caller holds src.mu or hl.mu while
// nothing else runs).
func (src *logSource) stopLocked() {
	if src.cancel != nil {
		src.cancel()
		src.cancel = nil
	}
	src.running = false
}

// run is one run of the reader and of the pump, after the previous run
// (prev, nil for the first) ended.
func (src *logSource) run(ctx context.Context, prev, done chan struct{}) {
	defer src.hl.wg.Done()
	defer close(done)
	if prev != nil {
		<-prev
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		src.pump(ctx)
	}()
	backoff := time.Second
	for ctx.Err() == nil {
		err := src.reader.Run(ctx, func(r LineRecord) bool { return src.emit(ctx, r) }, src.setPrimed)
		src.setPrimed()
		if ctx.Err() != nil {
			break
		}
		if err != nil {
			// The reader failed (journalctl exited): say so in the
			// channel, and start it again (from its position).
			src.hl.log.Warn("log reader failed", "channel", src.uri, "error", err)
			src.emit(ctx, LineRecord{Observed: time.Now(), Severity: logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, SeverityText: "ERROR",
				Body: "sidecar: " + err.Error(), Attrs: []kv{attrStr("sidecar.log.reader_error", "true")}})
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 30*time.Second)
	}
	wg.Wait()
}

// setPrimed marks the initial backlog in, waking windowed subscribers
// that wait for it to send their snapshot.
func (src *logSource) setPrimed() {
	src.mu.Lock()
	was := src.primed
	src.primed = true
	src.mu.Unlock()
	if !was {
		signal(src.wake)
	}
}

// roomLocked reports whether a record may be kept: some subscriber is
// less than the ring behind (so keeping one more overwrites nothing the
// fastest has not read). No subscriber: no room.
func (src *logSource) roomLocked() bool {
	head := src.next - 1
	for _, os := range src.subs {
		if head-os.cursor < uint64(len(src.buf)) {
			return true
		}
	}
	return false
}

// emit keeps r in the ring once some subscriber has room, waiting until
// then (the reader stops reading: seed 001's "adapters pause" rule); false
// when ctx ended first.
func (src *logSource) emit(ctx context.Context, r LineRecord) bool {
	for {
		src.mu.Lock()
		if src.roomLocked() {
			seq := src.next
			src.next++
			src.buf[seq%uint64(len(src.buf))] = r
			src.mu.Unlock()
			signal(src.wake)
			return true
		}
		src.mu.Unlock()
		src.paused.Store(true)
		select {
		case <-ctx.Done():
			src.paused.Store(false)
			return false
		case <-src.room:
			src.paused.Store(false)
		}
	}
}

// takeLocked returns the records after cursor (at most a batch), the
// cursor after them, and how many after cursor the ring no longer holds.
func (src *logSource) takeLocked(cursor uint64) (recs []LineRecord, next, skipped uint64) {
	head := src.next - 1
	size := uint64(len(src.buf))
	oldest := uint64(1)
	if head > size {
		oldest = head - size + 1
	}
	if cursor+1 < oldest {
		skipped = oldest - cursor - 1
		cursor = oldest - 1
	}
	body := 0
	for cursor < head && len(recs) < maxLogRecordsPerBatch && body < maxBatchBodyBytes {
		cursor++
		rec := src.buf[cursor%size]
		recs = append(recs, rec)
		body += len(rec.Body)
	}
	return recs, cursor, skipped
}

// oldestLocked returns the seq before the oldest record the ring holds.
func (src *logSource) oldestLocked() uint64 {
	head := src.next - 1
	if size := uint64(len(src.buf)); head > size {
		return head - size
	}
	return 0
}

// pump hands records to ordinary subscribers (pushed while their FIFO
// has headroom; retried every ordinaryRetry while one lags) and wakes
// windowed ones (their Source reads the ring).
func (src *logSource) pump(ctx context.Context) {
	t := time.NewTicker(ordinaryRetry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-src.wake:
		case <-t.C:
		}
		src.mu.Lock()
		subs := make([]*lsub, 0, len(src.subs))
		for _, os := range src.subs {
			subs = append(subs, os)
		}
		src.mu.Unlock()
		for _, os := range subs {
			if st := os.s.Stream(); st != nil {
				st.Wake()
				continue
			}
			for os.s.CanPush(ordinaryHeadroom) && !os.detached.Load() {
				text, commit := os.next()
				if text == nil {
					break
				}
				if !os.s.Push(text, ordinaryHeadroom) {
					break
				}
				commit()
			}
		}
	}
}

// HostLogChannel is one of the machine's log channels as the host sees
// it: stateless and live like ahp-otlp://logs, its subscriptions in its
// source.
type HostLogChannel struct {
	adapters.Base
	hl   *HostLogs
	uri  string
	spec *logSpec
	src  *logSource
}

// URI implements adapters.Channel.
func (ch *HostLogChannel) URI() string { return ch.uri }

// Traits implements adapters.Channel: stateless.
func (ch *HostLogChannel) Traits() adapters.Traits {
	return adapters.Traits{Delivery: adapters.Stateless, Label: ch.spec.label}
}

// Snapshot implements adapters.Channel: the state is {} (a windowed
// subscription's own snapshot says its backlog: lsub.Next).
func (ch *HostLogChannel) Snapshot(fn func(rpc.Snapshot)) {
	fn(rpc.Snapshot{Resource: ch.uri, State: json.RawMessage(`{}`), FromSeq: ch.hl.cfg.Seq()})
}

// Recover implements adapters.Channel: live (a client that reconnects
// goes on from its cursor when the ring still holds it, else the next
// message says what it skipped).
func (ch *HostLogChannel) Recover(uint64) adapters.Recovery { return adapters.RecoverLive }

// Source implements adapters.Channel.
func (ch *HostLogChannel) Source(s adapters.Subscriber) delivery.Source {
	return ch.sub(s, false)
}

// Resume implements adapters.Channel: no snapshot; from the cursor the
// client's lost subscription left, else from now.
func (ch *HostLogChannel) Resume(s adapters.Subscriber, _ uint64) delivery.Source {
	return ch.sub(s, true)
}

// Subscribe implements adapters.Channel.
func (ch *HostLogChannel) Subscribe(s adapters.Subscriber) {
	os := ch.sub(s, false)
	ch.hl.mu.Lock()
	delete(ch.hl.pending, s)
	ch.hl.mu.Unlock()
	ch.src.add(os)
}

// Unsubscribe implements adapters.Channel.
func (ch *HostLogChannel) Unsubscribe(s adapters.Subscriber) {
	ch.hl.mu.Lock()
	delete(ch.hl.pending, s)
	ch.hl.mu.Unlock()
	ch.src.remove(s)
}

// sub returns the subscription of s, creating it: its cursor before the
// ring's oldest record (the backlog first), or for a resumed one where
// its client's lost subscription was (else the ring's head: live). A
// windowed one's Source is made before Subscribe registers it: it waits
// in hl.pending meanwhile.
func (ch *HostLogChannel) sub(s adapters.Subscriber, resumed bool) *lsub {
	src := ch.src
	ch.hl.mu.Lock()
	defer ch.hl.mu.Unlock()
	if os := ch.hl.pending[s]; os != nil {
		return os
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if os := src.subs[s]; os != nil {
		return os
	}
	os := &lsub{ch: ch, src: src, s: s}
	os.cursor = src.oldestLocked()
	if c, ok := src.parked[s.ClientID()]; ok && resumed {
		os.cursor = c // the next message says what the ring lost since
		delete(src.parked, s.ClientID())
	} else if resumed {
		os.cursor = src.next - 1
	} else {
		os.snapDue.Store(true)
	}
	ch.hl.pending[s] = os
	return os
}

// lsub is one subscription to a machine log channel: the delivery.Source
// of a windowed one.
type lsub struct {
	ch       *HostLogChannel
	src      *logSource
	s        adapters.Subscriber
	cursor   uint64 // guarded by src.mu: the seq read up to
	snapDue  atomic.Bool
	detached atomic.Bool
}

// next encodes the records after the cursor, with the count skipped,
// and the function that moves the cursor past them; nil text when there
// are none.
func (os *lsub) next() (text []byte, commit func()) {
	src := os.src
	src.mu.Lock()
	recs, cursor, skipped := src.takeLocked(os.cursor)
	src.mu.Unlock()
	if len(recs) == 0 && skipped == 0 {
		return nil, nil
	}
	payload, err := encodeLines(src.hl.cfg.Resource(), src.scope, recs)
	if err != nil {
		payload = []byte(`{}`)
	}
	text = WithSkipped(Notification(rpc.MethodOTLPExportLogs, os.ch.uri, payload), skipped)
	return text, func() {
		src.mu.Lock()
		if cursor > os.cursor {
			os.cursor = cursor
		}
		src.mu.Unlock()
		if skipped > 0 {
			src.hl.skipped.Add(skipped)
		}
		signal(src.room)
	}
}

// Next implements delivery.Source: channel/snapshot first, once the
// initial backlog is in, its state {"backlog":N}: the records already
// in the ring that follow it (a client that wants only them, `sidecar
// logs` without -f, stops after N records and skipped); then the
// records after the cursor, a batch a message.
func (os *lsub) Next() delivery.Message {
	src := os.src
	if os.snapDue.Load() {
		src.mu.Lock()
		if !src.primed {
			src.mu.Unlock()
			return delivery.Message{}
		}
		os.cursor = src.oldestLocked()
		backlog := src.next - 1 - os.cursor
		src.mu.Unlock()
		os.snapDue.Store(false)
		state, _ := json.Marshal(map[string]uint64{"backlog": backlog})
		text, _ := rpc.Notification(rpc.MethodChannelSnapshot, rpc.ChannelSnapshotParams{Channel: os.ch.uri,
			Snapshot: rpc.Snapshot{Resource: os.ch.uri, State: state, FromSeq: os.ch.hl.cfg.Seq()}})
		return delivery.Message{Text: text}
	}
	if os.detached.Load() {
		return delivery.Message{}
	}
	text, commit := os.next()
	if text == nil {
		return delivery.Message{}
	}
	commit()
	return delivery.Message{Text: text}
}

// encodeLines encodes recs as compact OTLP/JSON LogsData under res, in
// one scope.
func encodeLines(res *resourcepb.Resource, scope string, recs []LineRecord) ([]byte, error) {
	sl := &logspb.ScopeLogs{Scope: &commonpb.InstrumentationScope{Name: scope}}
	for _, r := range recs {
		sl.LogRecords = append(sl.LogRecords, &logspb.LogRecord{
			TimeUnixNano:         nanos(r.Time),
			ObservedTimeUnixNano: nanos(r.Observed),
			SeverityNumber:       r.Severity,
			SeverityText:         r.SeverityText,
			Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: r.Body}},
			Attributes:           r.Attrs,
		})
	}
	ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: []*logspb.ScopeLogs{sl}}}}
	raw, err := otlpJSON.Marshal(ld)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

var _ adapters.Channel = (*HostLogChannel)(nil)

func attrBool(k string, v bool) kv {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}}
}

// logSpec is what a machine log channel's URI says.
type logSpec struct {
	label, scope string
	reader       func(hl *HostLogs) hostLogReader
}

// parse reads uri: nil, nil when it is not a machine log channel;
// an error naming the rule when it is one the host refuses.
//
//	ahp-otlp://logs/files[?path=P…]            (P: a telemetry.log_files entry, or a file one matches)
//	ahp-otlp://logs/journal[?unit=U][&priority=P][&since=T][&until=T]
func (hl *HostLogs) parse(uri string) (*logSpec, *rpc.Error) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "ahp-otlp" || u.Host != "logs" || u.User != nil || u.Fragment != "" ||
		(u.Path != "/files" && u.Path != "/journal" && u.Path != "/audit") {
		return nil, nil
	}
	if u.Path == "/audit" {
		return hl.parseAudit(uri)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: bad query: %v", uri, err)
	}
	if u.Path == "/files" {
		return hl.parseFiles(uri, q)
	}
	return hl.parseJournal(uri, q)
}

// parseAudit reads the audit channel's uri: AuditURI exactly, so that
// its one reader serves one source.
func (hl *HostLogs) parseAudit(uri string) (*logSpec, *rpc.Error) {
	if hl.audit == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "%s: this host keeps no audit events", uri)
	}
	if uri != AuditURI {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: the audit channel takes no parameters: subscribe to %s", uri, AuditURI)
	}
	return &logSpec{label: "audit", scope: "sidecar.audit", reader: func(hl *HostLogs) hostLogReader { return hl.audit }}, nil
}

func (hl *HostLogs) parseFiles(uri string, q url.Values) (*logSpec, *rpc.Error) {
	if len(hl.cfg.Files) == 0 {
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "%s: no log files may be followed on this host (telemetry.log_files is empty)", uri)
	}
	patterns := slices.Clone(hl.cfg.Files)
	for k, vs := range q {
		if k != "path" {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: unknown parameter %q (want path)", uri, k)
		}
		patterns = patterns[:0:0]
		for _, p := range vs {
			if !filepath.IsAbs(p) || filepath.Clean(p) != p {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: path %q must be absolute and clean", uri, p)
			}
			if !hl.fileAllowed(p) {
				return nil, rpc.Errorf(rpc.CodePermissionDenied, "%s: %s is not in telemetry.log_files (%s): only those files may be followed",
					uri, p, strings.Join(hl.cfg.Files, ", "))
			}
			patterns = append(patterns, p)
		}
	}
	return &logSpec{label: "log_files", scope: "sidecar.logs.files", reader: func(hl *HostLogs) hostLogReader {
		return &fileTailer{patterns: patterns, poll: hl.cfg.Poll, log: hl.log, truncated: &hl.truncated}
	}}, nil
}

// fileAllowed reports whether p is a telemetry.log_files entry or a path
// one of them matches.
func (hl *HostLogs) fileAllowed(p string) bool {
	for _, pat := range hl.cfg.Files {
		if p == pat {
			return true
		}
		if ok, _ := filepath.Match(pat, p); ok {
			return true
		}
	}
	return false
}

func (hl *HostLogs) parseJournal(uri string, q url.Values) (*logSpec, *rpc.Error) {
	if !hl.cfg.Journal {
		return nil, rpc.Errorf(rpc.CodeNotFound, "%s: this host offers no journal channel (telemetry.journal, or no systemd journal here)", uri)
	}
	f := journalFilter{priority: 7}
	for k, vs := range q {
		if len(vs) != 1 {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: %s given %d times", uri, k, len(vs))
		}
		v := vs[0]
		switch k {
		case "unit":
			if v == "" || strings.ContainsAny(v, "/\x00") {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: bad unit %q", uri, v)
			}
			if !strings.Contains(v, ".") {
				v += ".service" // as journalctl --unit does
			}
			f.unit = v
		case "priority":
			p, ok := parsePriority(v)
			if !ok {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: priority %q: want 0-7 or emerg, alert, crit, err, warning, notice, info, debug", uri, v)
			}
			f.priority = p
		case "since", "until":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: %s %q: want an RFC 3339 time (2006-01-02T15:04:05Z)", uri, k, v)
			}
			if k == "since" {
				f.since = t
			} else {
				f.until = t
			}
		default:
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: unknown parameter %q (want unit, priority, since, until)", uri, k)
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && f.until.Before(f.since) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "%s: until is before since", uri)
	}
	return &logSpec{label: "journal", scope: "sidecar.logs.journal", reader: func(hl *HostLogs) hostLogReader {
		return &journalReader{prog: hl.cfg.Journalctl, filter: f, log: hl.log, truncated: &hl.truncated}
	}}, nil
}
