package telemetry

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// collect runs r until stop, sending each record's body to the returned
// channel (buffered enough for the tests).
func collect(t *testing.T, r hostLogReader) (<-chan LineRecord, <-chan struct{}, func()) {
	t.Helper()
	out := make(chan LineRecord, 4096)
	primed := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(ctx, func(rec LineRecord) bool {
			select {
			case out <- rec:
				return true
			case <-ctx.Done():
				return false
			}
		}, func() { once.Do(func() { close(primed) }) })
	}()
	return out, primed, func() { cancel(); <-done }
}

// expectLines waits for want, in order, from out, and then for nothing
// else until a sentinel line appended to path arrives.
func expectLines(t *testing.T, out <-chan LineRecord, want ...string) {
	t.Helper()
	for i, w := range want {
		select {
		case rec := <-out:
			if rec.Body != w {
				t.Fatalf("line %d = %q, want %q", i, rec.Body, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("line %d (%q) never came", i, w)
		}
	}
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestFileTailerRotateTruncate: appended lines, a rotation (rename, new
// file at the path, the old one written to before the rename was
// noticed) and a truncation: every line once, in order; a line written
// in two parts is one record; the attributes name the file.
func TestFileTailerRotateTruncate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "app.log")
	appendFile(t, path, "old 1\nold 2\n")
	var trunc atomic.Uint64
	tl := &fileTailer{patterns: []string{filepath.Join(dir, "*.log")}, poll: 5 * time.Millisecond, log: hclog.NewNullLogger(), truncated: &trunc}
	out, primed, stop := collect(t, tl)
	defer stop()
	expectLines(t, out, "old 1", "old 2") // the backlog
	<-primed
	appendFile(t, path, "a1\na2 part")
	appendFile(t, path, " two\n")
	expectLines(t, out, "a1", "a2 part two")

	// Rotation: the old file keeps getting lines until renamed; the new
	// file's lines come after the old file's last ones.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, filepath.Join(dir, "app.log.1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("a3 after rename\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	appendFile(t, path, "b1\nb2\n")
	expectLines(t, out, "a3 after rename", "b1", "b2")

	// Truncation (copytruncate): read again from the start.
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	// "c1\n" is shorter than what was read of the file: a truncation.
	appendFile(t, path, "c1\n")
	expectLines(t, out, "c1")
	appendFile(t, path, "c2\n")
	rec := <-out
	if rec.Body != "c2" {
		t.Fatalf("after c1: %q", rec.Body)
	}
	attrs := map[string]string{}
	for _, a := range rec.Attrs {
		attrs[a.Key] = a.Value.GetStringValue()
	}
	if attrs["log.file.path"] != path || attrs["log.file.name"] != "app.log" {
		t.Errorf("attributes %v", attrs)
	}
	if rec.Severity != logspb.SeverityNumber_SEVERITY_NUMBER_UNSPECIFIED || !rec.Time.IsZero() || rec.Observed.IsZero() {
		t.Errorf("record %+v", rec)
	}
}

// TestFileTailerLineBound: a line longer than MaxLineBytes is cut there
// with "…" and counted; the next line is whole; the initial backlog is
// the lines that start in the last 64 KiB.
func TestFileTailerLineBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.log")
	// 100 KiB of 1 KiB lines: the backlog starts at a line in the last 64 KiB.
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "%04d %s\n", i, strings.Repeat("x", 1018))
	}
	appendFile(t, path, b.String())
	var trunc atomic.Uint64
	tl := &fileTailer{patterns: []string{path}, poll: 5 * time.Millisecond, log: hclog.NewNullLogger(), truncated: &trunc}
	out, primed, stop := collect(t, tl)
	defer stop()
	<-primed
	if n := len(out); n != 64 {
		t.Fatalf("backlog of %d lines, want 64", n)
	}
	first := <-out
	if !strings.HasPrefix(first.Body, "0036 ") {
		t.Fatalf("backlog starts at %q", first.Body[:8])
	}
	for range 63 {
		<-out
	}
	long := strings.Repeat("y", MaxLineBytes+5000)
	appendFile(t, path, long+"\nnext\n")
	rec := <-out
	if rec.Body != strings.Repeat("y", MaxLineBytes)+"…" {
		t.Fatalf("cut line is %d bytes", len(rec.Body))
	}
	if trunc.Load() != 1 {
		t.Errorf("truncated = %d", trunc.Load())
	}
	var cut bool
	for _, a := range rec.Attrs {
		cut = cut || (a.Key == "sidecar.log.truncated" && a.Value.GetBoolValue())
	}
	if !cut {
		t.Errorf("no sidecar.log.truncated attribute: %v", rec.Attrs)
	}
	expectLines(t, out, "next")
}

// fakeReader emits n records numbered from 1, counting them.
type fakeReader struct {
	n       int
	emitted atomic.Int64
}

func (f *fakeReader) Run(ctx context.Context, emit func(LineRecord) bool, primed func()) error {
	primed()
	for i := int(f.emitted.Load()) + 1; i <= f.n; i++ {
		if !emit(LineRecord{Body: fmt.Sprint(i)}) {
			return nil
		}
		f.emitted.Add(1)
	}
	<-ctx.Done()
	return nil
}

// ordSub is an ordinary subscriber whose FIFO takes pushes while open.
type ordSub struct {
	id     string
	open   atomic.Bool
	mu     sync.Mutex
	pushed [][]byte
	got    chan struct{}
}

func newOrdSub(id string, open bool) *ordSub {
	s := &ordSub{id: id, got: make(chan struct{}, 1)}
	s.open.Store(open)
	return s
}
func (p *ordSub) ClientID() string         { return p.id }
func (*ordSub) Identity() auth.Identity    { return auth.Anonymous }
func (p *ordSub) Conn() adapters.ConnID    { return 1 }
func (p *ordSub) Stream() *delivery.Stream { return nil }
func (p *ordSub) CanPush(int) bool         { return p.open.Load() }
func (p *ordSub) PushControl([]byte)       {}
func (p *ordSub) Closing() bool            { return false }
func (p *ordSub) Push(text []byte, _ int) bool {
	if !p.open.Load() {
		return false
	}
	p.mu.Lock()
	p.pushed = append(p.pushed, text)
	p.mu.Unlock()
	select {
	case p.got <- struct{}{}:
	default:
	}
	return true
}

// bodies decodes what p got: the bodies and the skipped counts, in order.
func (p *ordSub) bodies(t *testing.T) (bodies []string, skipped uint64) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, text := range p.pushed {
		var m struct {
			Params struct {
				Payload json.RawMessage
				Skipped uint64
			}
		}
		if err := json.Unmarshal(text, &m); err != nil {
			t.Fatal(err)
		}
		skipped += m.Params.Skipped
		var ld logspb.LogsData
		if err := protojson.Unmarshal(m.Params.Payload, &ld); err != nil {
			t.Fatal(err)
		}
		for _, rl := range ld.ResourceLogs {
			for _, sl := range rl.ScopeLogs {
				for _, r := range sl.LogRecords {
					bodies = append(bodies, r.Body.GetStringValue())
				}
			}
		}
	}
	return bodies, skipped
}

func waitFor(t *testing.T, what string, p *ordSub, ok func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !ok() {
		select {
		case <-p.got:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s never happened", what)
		}
	}
}

func testHostLogs(files ...string) *HostLogs {
	return NewHostLogs(HostLogsConfig{Files: files, Resource: func() *resourcepb.Resource { return &resourcepb.Resource{} },
		Seq: func() uint64 { return 7 }})
}

// TestHostLogsPauseAndSkipped: the reader stops once the only
// subscriber is a ring behind (1024 records kept, no more read); with a
// second subscriber reading, the first, when it reads again, gets an
// explicit skipped count for what the ring lost, then every later record.
func TestHostLogsPauseAndSkipped(t *testing.T) {
	hl := testHostLogs("/x")
	defer hl.Close()
	ch, e := hl.Channel(rpc.LogFilesChannel)
	if e != nil {
		t.Fatal(e)
	}
	r := &fakeReader{n: 1500}
	ch.src.reader = r

	slow := newOrdSub("slow", false)
	ch.Subscribe(slow)
	// Bounded: nobody reads, so the reader keeps at most a ring.
	deadline := time.Now().Add(10 * time.Second)
	for !(ch.src.paused.Load() && r.emitted.Load() == HostLogRingRecords) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := r.emitted.Load(); n != HostLogRingRecords || !ch.src.paused.Load() {
		t.Fatalf("the reader read %d records with nobody reading, want it stopped at %d", n, HostLogRingRecords)
	}

	fast := newOrdSub("fast", true)
	ch.Subscribe(fast)
	waitFor(t, "fast gets 1500", fast, func() bool { b, _ := fast.bodies(t); return len(b) == 1500 })
	if b, sk := fast.bodies(t); b[0] != "1" || b[1499] != "1500" || sk != 0 {
		t.Fatalf("fast got %s…%s, skipped %d", b[0], b[1499], sk)
	}
	slow.open.Store(true)
	waitFor(t, "slow catches up", slow, func() bool { b, _ := slow.bodies(t); return len(b) > 0 && b[len(b)-1] == "1500" })
	b, sk := slow.bodies(t)
	if sk != 1500-HostLogRingRecords || b[0] != fmt.Sprint(1500-HostLogRingRecords+1) || len(b) != HostLogRingRecords {
		t.Fatalf("slow got %d records from %s, skipped %d; want %d from %d, skipped %d",
			len(b), b[0], sk, HostLogRingRecords, 1500-HostLogRingRecords+1, 1500-HostLogRingRecords)
	}
	if hl.Skipped() != uint64(sk) {
		t.Errorf("Skipped() = %d", hl.Skipped())
	}
	ch.Unsubscribe(slow)
	ch.Unsubscribe(fast)
}

// TestHostLogsRefusals: a path outside telemetry.log_files is refused
// naming the rule; so are files when none are configured, bad journal
// filters, and a journal where there is none.
func TestHostLogsRefusals(t *testing.T) {
	hl := testHostLogs("/var/log/app/*.log", "/var/log/syslog")
	defer hl.Close()
	for _, ok := range []string{rpc.LogFilesChannel, rpc.LogFilesChannel + "?path=/var/log/app/x.log", rpc.LogFilesChannel + "?path=/var/log/syslog&path=/var/log/app/*.log"} {
		if _, e := hl.Channel(ok); e != nil {
			t.Errorf("%s: %v", ok, e)
		}
	}
	for uri, want := range map[string]string{
		rpc.LogFilesChannel + "?path=/etc/shadow":          "ahp-otlp://logs/files?path=/etc/shadow: /etc/shadow is not in telemetry.log_files (/var/log/app/*.log, /var/log/syslog): only those files may be followed (code -32009)",
		rpc.LogFilesChannel + "?path=/var/log/app/a/b.log": "is not in telemetry.log_files",
		rpc.LogFilesChannel + "?path=/var/log/app/../x":    "must be absolute and clean (code -32602)",
		rpc.LogFilesChannel + "?file=/var/log/syslog":      `unknown parameter "file" (want path)`,
		rpc.JournalChannel: "this host offers no journal channel",
	} {
		_, e := hl.Channel(uri)
		if e == nil || !strings.Contains(e.Error(), want) {
			t.Errorf("%s: %v, want %q", uri, e, want)
		}
	}
	none := testHostLogs()
	if _, e := none.Channel(rpc.LogFilesChannel); e == nil || e.Code != rpc.CodePermissionDenied || !strings.Contains(e.Message, "telemetry.log_files is empty") {
		t.Errorf("no files configured: %v", e)
	}
	none.cfg.Journal = true
	for uri, want := range map[string]string{
		rpc.JournalChannel + "?priority=loud":                                         `priority "loud": want 0-7`,
		rpc.JournalChannel + "?since=yesterday":                                       `since "yesterday": want an RFC 3339 time`,
		rpc.JournalChannel + "?unit=a&unit=b":                                         "unit given 2 times",
		rpc.JournalChannel + "?since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z": "until is before since",
	} {
		if _, e := none.Channel(uri); e == nil || e.Code != rpc.CodeInvalidParams || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %v, want %q", uri, e, want)
		}
	}
	if _, e := none.Channel("ahp-otlp://logs/other"); e != nil {
		t.Errorf("not ours: %v", e)
	}
}

// TestHostLogsSourceBound: at most MaxHostLogSources channels at once;
// one more is refused while each has a subscriber, and replaces an idle
// one otherwise.
func TestHostLogsSourceBound(t *testing.T) {
	hl := testHostLogs("/var/log/*.log")
	defer hl.Close()
	var subs []*ordSub
	for i := range MaxHostLogSources {
		ch, e := hl.Channel(fmt.Sprintf("%s?path=/var/log/%d.log", rpc.LogFilesChannel, i))
		if e != nil {
			t.Fatal(e)
		}
		ch.src.reader = &fakeReader{}
		s := newOrdSub(fmt.Sprint(i), true)
		subs = append(subs, s)
		ch.Subscribe(s)
	}
	_, e := hl.Channel(rpc.LogFilesChannel + "?path=/var/log/x.log")
	if e == nil || e.Code != rpc.CodePermissionDenied || !strings.Contains(e.Message, "at most 8") {
		t.Fatalf("one more: %v", e)
	}
	ch, _ := hl.Channel(rpc.LogFilesChannel + "?path=/var/log/0.log")
	ch.Unsubscribe(subs[0])
	if _, e := hl.Channel(rpc.LogFilesChannel + "?path=/var/log/x.log"); e != nil {
		t.Fatalf("after one unsubscribed: %v", e)
	}
}

// TestFileTailerSymlinks: a symbolic link a pattern matches is followed
// only when its target is listed too; a link planted in a log directory
// to a file outside (app.log -> a secret) is never read, whatever order
// the files come in.
func TestFileTailerSymlinks(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dir, "secret")
	appendFile(t, secret, "SECRET LINE\n")
	appendFile(t, filepath.Join(logs, "real.log"), "real 1\n")
	if err := os.Symlink(secret, filepath.Join(logs, "a-evil.log")); err != nil {
		t.Fatal(err)
	}
	// A link to a listed file is followed (once: it is the same file).
	if err := os.Symlink(filepath.Join(logs, "real.log"), filepath.Join(logs, "b-alias.log")); err != nil {
		t.Fatal(err)
	}
	var trunc atomic.Uint64
	tl := &fileTailer{patterns: []string{filepath.Join(logs, "*.log")}, poll: 5 * time.Millisecond, log: hclog.NewNullLogger(), truncated: &trunc}
	out, primed, stop := collect(t, tl)
	expectLines(t, out, "real 1")
	<-primed
	appendFile(t, secret, "SECRET 2\n")
	appendFile(t, filepath.Join(logs, "real.log"), "real 2\n")
	expectLines(t, out, "real 2")
	select {
	case rec := <-out:
		t.Fatalf("read %q besides the listed file", rec.Body)
	default:
	}
	stop() // the tailer's state is read below
	if !tl.refusedLinks[filepath.Join(logs, "a-evil.log")] || tl.refusedLinks[filepath.Join(logs, "b-alias.log")] {
		t.Errorf("links refused: %v", tl.refusedLinks)
	}
}
