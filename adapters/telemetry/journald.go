package telemetry

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
)

// Bounds of the journal reader.
const (
	// journalBacklog is how many entries a journal channel reads first
	// when it starts for the first time (journalctl --lines).
	journalBacklog = 100

	// maxJournalEntryBytes bounds one line of journalctl's JSON (one
	// entry, every field): a longer entry is skipped (counted with the
	// truncated records) rather than read whole.
	maxJournalEntryBytes = 1 << 20

	// journalFirstTimeout bounds the first, non-following journalctl run
	// (the backlog).
	journalFirstTimeout = 10 * time.Second

	// journalKillGrace is how long journalctl has to exit after SIGTERM
	// before it is killed.
	journalKillGrace = 2 * time.Second
)

// JournalDir is where systemd-journald's sockets live: where it does not
// exist there is no journal to follow (a container), and telemetry.journal
// "auto" offers no journal channel.
const JournalDir = "/run/systemd/journal"

// JournalAvailable reports whether a journal channel is offered under
// mode (telemetry.journal) with program journalctl, and why not.
func JournalAvailable(mode, journalctl string) (bool, string) {
	if mode == "off" {
		return false, "telemetry.journal is off"
	}
	if _, err := exec.LookPath(journalctl); err != nil {
		return false, fmt.Sprintf("%s is not on PATH", journalctl)
	}
	if mode != "on" {
		if _, err := os.Stat(JournalDir); err != nil {
			return false, fmt.Sprintf("no journal (%s does not exist)", JournalDir)
		}
	}
	return true, ""
}

// journalFilter is a journal channel's query.
type journalFilter struct {
	unit         string    // _SYSTEMD_UNIT (or UNIT, …) equals it; "" any
	priority     int       // PRIORITY at most this (0 emerg … 7 debug)
	since, until time.Time // entries in [since, until]; zero: unbounded
}

// journalPriorities are syslog's priority names, by number.
var journalPriorities = [...]string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// parsePriority parses 0-7 or a syslog name (emerg … debug; also error,
// warn, crit, panic as journalctl takes them).
func parsePriority(s string) (int, bool) {
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= 7 {
		return n, true
	}
	switch s {
	case "panic":
		return 0, true
	case "error":
		return 3, true
	case "warn":
		return 4, true
	}
	for i, name := range journalPriorities {
		if s == name {
			return i, true
		}
	}
	return 0, false
}

// journalSeverity maps a syslog priority to OTLP severity as the
// OpenTelemetry collector's journald receiver does; the text is
// syslog's name.
func journalSeverity(p int) (logspb.SeverityNumber, string) {
	nums := [...]logspb.SeverityNumber{
		logspb.SeverityNumber_SEVERITY_NUMBER_FATAL,
		logspb.SeverityNumber_SEVERITY_NUMBER_ERROR3,
		logspb.SeverityNumber_SEVERITY_NUMBER_ERROR2,
		logspb.SeverityNumber_SEVERITY_NUMBER_ERROR,
		logspb.SeverityNumber_SEVERITY_NUMBER_WARN,
		logspb.SeverityNumber_SEVERITY_NUMBER_INFO2,
		logspb.SeverityNumber_SEVERITY_NUMBER_INFO,
		logspb.SeverityNumber_SEVERITY_NUMBER_DEBUG,
	}
	if p < 0 || p > 7 {
		return logspb.SeverityNumber_SEVERITY_NUMBER_UNSPECIFIED, ""
	}
	return nums[p], journalPriorities[p]
}

// journalReader follows the journal with journalctl (-o json), the
// journal's own reader (sd-journal through Go needs cgo): first
// `--lines=100` without following (the backlog, bounded in time), then
// `--follow --after-cursor=C` from the last entry read, or `--since=@T`
// from before the first run when it found none. A run ends by killing
// journalctl's process group; the next run goes on after the cursor.
type journalReader struct {
	prog      string
	filter    journalFilter
	log       hclog.Logger
	truncated *atomic.Uint64

	cursor  string    // __CURSOR of the last entry read
	started bool      // the backlog was read
	t0      time.Time // when the backlog run started
}

// args returns journalctl's arguments for a run.
func (j *journalReader) args(follow bool) []string {
	a := []string{"--output=json", "--no-pager", "--quiet"}
	if j.filter.unit != "" {
		a = append(a, "--unit="+j.filter.unit)
	}
	if j.filter.priority < 7 {
		a = append(a, "--priority="+strconv.Itoa(j.filter.priority))
	}
	switch {
	case !follow:
		a = append(a, "--lines="+strconv.Itoa(journalBacklog))
		if !j.filter.since.IsZero() {
			a = append(a, fmt.Sprintf("--since=@%d", j.filter.since.Unix()))
		}
	case j.cursor != "":
		a = append(a, "--follow", "--after-cursor="+j.cursor)
	default:
		since := j.t0
		if !j.filter.since.IsZero() && j.filter.since.After(since) {
			since = j.filter.since
		}
		a = append(a, "--follow", "--lines=all", fmt.Sprintf("--since=@%d", since.Unix()))
	}
	return a
}

// errJournalDone: an entry past the channel's until was read.
var errJournalDone = errors.New("journal: past the time window")

// Run implements hostLogReader.
func (j *journalReader) Run(ctx context.Context, emit func(LineRecord) bool, primed func()) error {
	if !j.started {
		j.t0 = time.Now()
		first, cancel := context.WithTimeout(ctx, journalFirstTimeout)
		err := j.runOnce(first, false, emit)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		j.started = true
		primed()
		if errors.Is(err, errJournalDone) {
			<-ctx.Done()
			return nil
		}
		if err != nil && first.Err() == nil {
			return err
		}
	}
	primed()
	err := j.runOnce(ctx, true, emit)
	if errors.Is(err, errJournalDone) {
		<-ctx.Done()
		return nil
	}
	if ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("journalctl --follow ended")
	}
	return err
}

// runOnce runs journalctl once, handing each entry that passes the
// filter to emit, until it exits or ctx ends (then it is stopped).
func (j *journalReader) runOnce(ctx context.Context, follow bool, emit func(LineRecord) bool) error {
	cmd := exec.Command(j.prog, j.args(follow)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("journalctl: %w", err)
	}
	stopped := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		// Stop the process group when ctx ends: SIGTERM, then SIGKILL.
		defer close(stopped)
		select {
		case <-ctx.Done():
		case <-exited:
			return
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(journalKillGrace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	readErr := j.read(ctx, out, emit)
	if readErr != nil {
		// Stop reading: end journalctl (its output is not drained).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	waitErr := cmd.Wait()
	close(exited)
	<-stopped
	if ctx.Err() != nil {
		return nil
	}
	if readErr != nil {
		return readErr
	}
	if waitErr != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg != "" {
			return fmt.Errorf("journalctl: %v: %s", waitErr, msg)
		}
		return fmt.Errorf("journalctl: %w", waitErr)
	}
	return nil
}

// read parses journalctl's JSON lines from r.
func (j *journalReader) read(ctx context.Context, r io.Reader, emit func(LineRecord) bool) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	skipping := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 && !skipping {
			line = append(line, chunk...)
			if len(line) > maxJournalEntryBytes {
				skipping, line = true, line[:0]
				j.truncated.Add(1)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			if !skipping && len(bytes.TrimSpace(line)) > 0 {
				rec, ok, done := j.entry(line)
				if done {
					return errJournalDone
				}
				if ok && !emit(rec) {
					return ctx.Err()
				}
			}
			skipping, line = false, line[:0]
		}
		if err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// entry maps one journal entry (journalctl -o json) to a record: ok
// false when the filter leaves it out or it does not parse, done when it
// is past the window's end.
func (j *journalReader) entry(line []byte) (rec LineRecord, ok, done bool) {
	var e map[string]json.RawMessage
	if err := json.Unmarshal(line, &e); err != nil {
		if j.log != nil {
			j.log.Debug("journal entry does not parse", "error", err)
		}
		return rec, false, false
	}
	str := func(k string) string {
		var s string
		if raw, ok := e[k]; ok && json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	if c := str("__CURSOR"); c != "" {
		j.cursor = c
	}
	var ts time.Time
	if us, err := strconv.ParseInt(str("__REALTIME_TIMESTAMP"), 10, 64); err == nil {
		ts = time.UnixMicro(us)
	}
	f := j.filter
	if !ts.IsZero() {
		if !f.until.IsZero() && ts.After(f.until) {
			return rec, false, true
		}
		if !f.since.IsZero() && ts.Before(f.since) {
			return rec, false, false
		}
	}
	prio := 6 // journald's default for an entry without PRIORITY
	if p, err := strconv.Atoi(str("PRIORITY")); err == nil && p >= 0 && p <= 7 {
		prio = p
	}
	if prio > f.priority {
		return rec, false, false
	}
	unit := str("_SYSTEMD_UNIT")
	if f.unit != "" && unit != f.unit && str("UNIT") != f.unit && str("OBJECT_SYSTEMD_UNIT") != f.unit &&
		str("_SYSTEMD_USER_UNIT") != f.unit && str("USER_UNIT") != f.unit && str("COREDUMP_UNIT") != f.unit {
		return rec, false, false
	}
	var msg []byte
	if raw, ok := e["MESSAGE"]; ok {
		var s string
		var bs []byte
		switch {
		case json.Unmarshal(raw, &s) == nil:
			msg = []byte(s)
		case json.Unmarshal(raw, &bs) == nil: // binary: an array of bytes
			msg = bs
		}
	}
	body, cut := cutLine(msg)
	num, text := journalSeverity(prio)
	rec = LineRecord{Time: ts, Observed: time.Now(), Severity: num, SeverityText: text, Body: body}
	if unit != "" {
		rec.Attrs = append(rec.Attrs, attrStr("systemd.unit", unit))
	}
	if id := str("SYSLOG_IDENTIFIER"); id != "" {
		rec.Attrs = append(rec.Attrs, attrStr("syslog.identifier", id))
	}
	if pid, err := strconv.ParseInt(str("_PID"), 10, 64); err == nil {
		rec.Attrs = append(rec.Attrs, attrInt("process.pid", pid))
	}
	if comm := str("_COMM"); comm != "" {
		rec.Attrs = append(rec.Attrs, attrStr("process.executable.name", comm))
	}
	if h := str("_HOSTNAME"); h != "" {
		rec.Attrs = append(rec.Attrs, attrStr("host.name", h))
	}
	if cut {
		j.truncated.Add(1)
		rec.Attrs = append(rec.Attrs, attrBool("sidecar.log.truncated", true))
	}
	return rec, true, false
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		l.n -= k
		_, _ = l.w.Write(p[:k])
	}
	return len(p), nil
}
