package telemetry

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/rpc"
)

// AuditURI is the audit channel (docs/protocol.md "The audit channel"):
// the host's audit events (audit.Event) as OTLP log records, for the
// owner role only.
const AuditURI = rpc.AuditChannel

// auditBatch is how many events the audit reader takes from the feed at
// once.
const auditBatch = 64

// auditReader reads the host's audit feed into the audit channel: first
// what the feed still holds (the backlog), then each new event. It
// keeps its cursor across runs, so a later subscriber gets what
// happened meanwhile, as far as the feed's ring reaches (the rest is
// counted as missed: audit.Stats.Missed).
type auditReader struct {
	feed    audit.Feed
	cursor  uint64
	started bool
}

// Run implements hostLogReader.
func (r *auditReader) Run(ctx context.Context, emit func(LineRecord) bool, primed func()) error {
	if !r.started {
		r.cursor, r.started = r.feed.Oldest(), true
	}
	isPrimed := false
	for {
		evs, cursor, changed := r.feed.Read(r.cursor, auditBatch)
		first := cursor - uint64(len(evs)) // the seq before evs[0]
		for i, ev := range evs {
			if !emit(auditRecord(ev)) {
				return nil
			}
			r.cursor = first + uint64(i) + 1
		}
		r.cursor = cursor
		if len(evs) > 0 {
			continue
		}
		if !isPrimed {
			primed()
			isPrimed = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// auditRecord is ev as a log record: its body the action, its
// attributes enduser.id (the principal), enduser.role, audit.action and
// the event's own.
func auditRecord(ev audit.Event) LineRecord {
	attrs := []kv{
		attrStr("audit.action", ev.Action),
		attrStr("enduser.id", ev.Principal),
		attrStr("enduser.role", ev.Role),
	}
	for _, k := range sortedAttrKeys(ev.Attrs) {
		attrs = append(attrs, anyAttr(k, ev.Attrs[k]))
	}
	return LineRecord{
		Time: ev.Time, Observed: time.Now(),
		Severity: logspb.SeverityNumber_SEVERITY_NUMBER_INFO, SeverityText: "INFO",
		Body: ev.Action, Attrs: attrs,
	}
}

func sortedAttrKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// anyAttr is v (an audit.Clean value) as an OTLP attribute.
func anyAttr(k string, v any) kv {
	switch v := v.(type) {
	case string:
		return attrStr(k, v)
	case bool:
		return attrBool(k, v)
	case int:
		return attrInt(k, int64(v))
	case int32:
		return attrInt(k, int64(v))
	case int64:
		return attrInt(k, v)
	case uint:
		return attrInt(k, int64(min(uint64(v), math.MaxInt64)))
	case uint32:
		return attrInt(k, int64(v))
	case uint64:
		return attrInt(k, int64(min(v, math.MaxInt64)))
	case float64:
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: v}}}
	}
	return attrStr(k, fmt.Sprint(v))
}
