package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"

	"github.com/sidecar-dev/sidecar/internal/redact"
)

// LevelFatal is the {level} value "fatal": above every hclog level, so a
// subscription at fatal receives nothing (the sidecar logs no fatal records).
const LevelFatal = hclog.Off

// ParseLevel parses the {level} of ahp-otlp://logs{?level}: trace, debug,
// info, warn, error or fatal.
func ParseLevel(s string) (hclog.Level, bool) {
	switch s {
	case "trace":
		return hclog.Trace, true
	case "debug":
		return hclog.Debug, true
	case "info":
		return hclog.Info, true
	case "warn":
		return hclog.Warn, true
	case "error":
		return hclog.Error, true
	case "fatal":
		return LevelFatal, true
	}
	return hclog.NoLevel, false
}

// Record is one log record, its arguments already formatted (so it holds
// no reference to the caller's values).
type Record struct {
	Seq   uint64
	Time  time.Time
	Level hclog.Level
	Name  string
	Msg   string
	Attrs []kv
}

// Ring is a bounded ring of the sidecar's log records for the log channels,
// and an hclog.SinkAdapter. It keeps only records at or above MinLevel
// (the lowest level any subscriber asked for; hclog.Off when there is
// none, so logging costs one atomic load). A reader that falls more than
// the ring's size behind misses the oldest records; nothing waits for it.
type Ring struct {
	now      func() time.Time
	minLevel atomic.Int32

	mu      sync.Mutex
	buf     []Record
	next    uint64 // seq of the next record; the first is 1
	notify  func()
	dropped atomic.Uint64
}

// NewRing returns a ring of size records (LogRingRecords when <= 0) that
// keeps nothing until SetMinLevel.
func NewRing(size int, now func() time.Time) *Ring {
	if size <= 0 {
		size = LogRingRecords
	}
	if now == nil {
		now = time.Now
	}
	r := &Ring{now: now, buf: make([]Record, size), next: 1}
	r.minLevel.Store(int32(hclog.Off))
	return r
}

// SetMinLevel sets the lowest level kept.
func (r *Ring) SetMinLevel(l hclog.Level) { r.minLevel.Store(int32(l)) }

// SetNotify sets the function called after each record is kept (outside
// the ring's lock; it must not block or log).
func (r *Ring) SetNotify(f func()) {
	r.mu.Lock()
	r.notify = f
	r.mu.Unlock()
}

// Accept implements hclog.SinkAdapter.
func (r *Ring) Accept(name string, level hclog.Level, msg string, args ...any) {
	if int32(level) < r.minLevel.Load() || level == hclog.Off || level == hclog.NoLevel {
		return
	}
	rec := Record{Time: r.now(), Level: level, Name: name, Msg: truncate(msg), Attrs: formatArgs(args)}
	r.mu.Lock()
	rec.Seq = r.next
	r.next++
	r.buf[rec.Seq%uint64(len(r.buf))] = rec
	notify := r.notify
	r.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// Head returns the seq of the newest record (0 when none yet).
func (r *Ring) Head() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next - 1
}

// Read returns up to limit records after seq after at level min or above,
// the seq to read after next time, and how many records after `after` were
// already overwritten (missed).
func (r *Ring) Read(after uint64, min hclog.Level, limit int) (recs []Record, cursor uint64, missed uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	size := uint64(len(r.buf))
	head := r.next - 1
	oldest := uint64(1)
	if head > size {
		oldest = head - size + 1
	}
	if after+1 < oldest {
		missed = oldest - after - 1
		r.dropped.Add(missed)
		after = oldest - 1
	}
	cursor = after
	for seq := after + 1; seq <= head && len(recs) < limit; seq++ {
		rec := r.buf[seq%size]
		cursor = seq
		if rec.Level >= min {
			recs = append(recs, rec)
		}
	}
	return recs, cursor, missed
}

// Dropped returns how many records readers missed because they fell behind.
func (r *Ring) Dropped() uint64 { return r.dropped.Load() }

// truncate cuts s to maxLogValueBytes, after taking the values of token=
// and ticket= parameters out of it (internal/redact): the ring is read by
// clients of the logs channel, and a credential never leaves in a record,
// as it never reaches the log output.
func truncate(s string) string {
	s = redact.Text(s)
	if len(s) > maxLogValueBytes {
		return s[:maxLogValueBytes] + "…"
	}
	return s
}

// formatArgs turns hclog's key, value pairs into OTLP attributes.
func formatArgs(args []any) []kv {
	var out []kv
	for i := 0; i < len(args); i += 2 {
		key := fmt.Sprint(args[i])
		if i+1 >= len(args) {
			out = append(out, attrStr("EXTRA_VALUE_AT_END", key))
			break
		}
		switch v := args[i+1].(type) {
		case string:
			out = append(out, attrStr(key, truncate(v)))
		case bool:
			out = append(out, &commonpb.KeyValue{Key: key, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: v}}})
		case int:
			out = append(out, attrInt(key, int64(v)))
		case int64:
			out = append(out, attrInt(key, v))
		case int32:
			out = append(out, attrInt(key, int64(v)))
		case uint32:
			out = append(out, attrInt(key, int64(v)))
		case float64:
			out = append(out, &commonpb.KeyValue{Key: key, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}})
		case error:
			out = append(out, attrStr(key, truncate(v.Error())))
		case hclog.Format:
			if len(v) > 0 {
				out = append(out, attrStr(key, truncate(fmt.Sprintf(fmt.Sprint(v[0]), v[1:]...))))
			}
		default:
			out = append(out, attrStr(key, truncate(fmt.Sprint(v))))
		}
	}
	return out
}

// severity maps hclog levels to OTLP severity numbers and texts.
func severity(l hclog.Level) (logspb.SeverityNumber, string) {
	switch l {
	case hclog.Trace:
		return logspb.SeverityNumber_SEVERITY_NUMBER_TRACE, "TRACE"
	case hclog.Debug:
		return logspb.SeverityNumber_SEVERITY_NUMBER_DEBUG, "DEBUG"
	case hclog.Info:
		return logspb.SeverityNumber_SEVERITY_NUMBER_INFO, "INFO"
	case hclog.Warn:
		return logspb.SeverityNumber_SEVERITY_NUMBER_WARN, "WARN"
	case hclog.Error:
		return logspb.SeverityNumber_SEVERITY_NUMBER_ERROR, "ERROR"
	}
	return logspb.SeverityNumber_SEVERITY_NUMBER_UNSPECIFIED, ""
}

// EncodeLogs encodes recs as compact OTLP/JSON LogsData (the same JSON as
// an ExportLogsServiceRequest) under res. Each logger name is an
// instrumentation scope, in the order records arrived. No trace or span
// ids are set (protojson would write them as base64, not OTLP's hex).
func EncodeLogs(res *resourcepb.Resource, recs []Record) ([]byte, error) {
	var scopes []*logspb.ScopeLogs
	for _, rec := range recs {
		if len(scopes) == 0 || scopes[len(scopes)-1].Scope.Name != rec.Name {
			scopes = append(scopes, &logspb.ScopeLogs{Scope: &commonpb.InstrumentationScope{Name: rec.Name}})
		}
		num, text := severity(rec.Level)
		sl := scopes[len(scopes)-1]
		sl.LogRecords = append(sl.LogRecords, &logspb.LogRecord{
			TimeUnixNano:         nanos(rec.Time),
			ObservedTimeUnixNano: nanos(rec.Time),
			SeverityNumber:       num,
			SeverityText:         text,
			Body:                 &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: rec.Msg}},
			Attributes:           rec.Attrs,
		})
	}
	ld := &logspb.LogsData{ResourceLogs: []*logspb.ResourceLogs{{Resource: res, ScopeLogs: scopes}}}
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

// Tee returns a logger that logs through base and also hands every record
// (at any level, with base's implied arguments) to sink: the
// InterceptLogger behaviour for a logger that was not built as one.
// Records written through StandardLogger/StandardWriter reach base only.
func Tee(base hclog.Logger, sink hclog.SinkAdapter) hclog.Logger {
	if il, ok := base.(hclog.InterceptLogger); ok {
		il.RegisterSink(sink)
		return il
	}
	return &teeLogger{Logger: base, sink: sink}
}

type teeLogger struct {
	hclog.Logger
	sink hclog.SinkAdapter
}

func (t *teeLogger) accept(level hclog.Level, msg string, args []any) {
	implied := t.Logger.ImpliedArgs()
	all := args
	if len(implied) > 0 {
		all = make([]any, 0, len(implied)+len(args))
		all = append(append(all, implied...), args...)
	}
	t.sink.Accept(t.Logger.Name(), level, msg, all...)
}

func (t *teeLogger) Log(level hclog.Level, msg string, args ...any) {
	t.Logger.Log(level, msg, args...)
	t.accept(level, msg, args)
}
func (t *teeLogger) Trace(msg string, args ...any) { t.Log(hclog.Trace, msg, args...) }
func (t *teeLogger) Debug(msg string, args ...any) { t.Log(hclog.Debug, msg, args...) }
func (t *teeLogger) Info(msg string, args ...any)  { t.Log(hclog.Info, msg, args...) }
func (t *teeLogger) Warn(msg string, args ...any)  { t.Log(hclog.Warn, msg, args...) }
func (t *teeLogger) Error(msg string, args ...any) { t.Log(hclog.Error, msg, args...) }

func (t *teeLogger) With(args ...any) hclog.Logger {
	return &teeLogger{Logger: t.Logger.With(args...), sink: t.sink}
}
func (t *teeLogger) Named(name string) hclog.Logger {
	return &teeLogger{Logger: t.Logger.Named(name), sink: t.sink}
}
func (t *teeLogger) ResetNamed(name string) hclog.Logger {
	return &teeLogger{Logger: t.Logger.ResetNamed(name), sink: t.sink}
}

// StandardLogger and StandardWriter go to base only (hclog's adapter that
// parses levels is not exported).
func (t *teeLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return t.Logger.StandardLogger(opts)
}
func (t *teeLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return t.Logger.StandardWriter(opts)
}
