package telemetry

import (
	"bytes"
	"encoding/json"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// Scope names of the two instrumentation scopes in every batch.
const (
	ScopeSystem = "sidecar.system" // the machine and the container
	ScopeSelf   = "sidecar"        // the sidecar's own figures
)

// otlpJSON is protojson set up for OTLP/JSON (golibs.md §8): enums as
// integers; int64 come out as decimal strings and keys in lowerCamelCase
// by default.
var otlpJSON = protojson.MarshalOptions{UseEnumNumbers: true}

// EncodeMetrics encodes md as compact OTLP/JSON (an
// ExportMetricsServiceRequest: MetricsData has the same field 1).
// protojson inserts random spaces, so the output is compacted so its bytes
// (and size) do not depend on the build.
func EncodeMetrics(md *metricspb.MetricsData) ([]byte, error) {
	raw, err := otlpJSON.Marshal(md)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(len(raw))
	if err := json.Compact(&out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// DecodeMetrics parses an OTLP/JSON metrics payload.
func DecodeMetrics(payload []byte) (*metricspb.MetricsData, error) {
	md := &metricspb.MetricsData{}
	return md, protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(payload, md)
}

func (s *Sampler) metricsData(system, own []*metricspb.Metric) *metricspb.MetricsData {
	scopes := []*metricspb.ScopeMetrics{{
		Scope:   &commonpb.InstrumentationScope{Name: ScopeSystem, Version: s.opts.ServiceVersion},
		Metrics: system,
	}}
	if len(own) > 0 {
		scopes = append(scopes, &metricspb.ScopeMetrics{
			Scope:   &commonpb.InstrumentationScope{Name: ScopeSelf, Version: s.opts.ServiceVersion},
			Metrics: own,
		})
	}
	return &metricspb.MetricsData{ResourceMetrics: []*metricspb.ResourceMetrics{{
		Resource:     s.resourcePB(),
		ScopeMetrics: scopes,
	}}}
}

func (s *Sampler) resourcePB() *resourcepb.Resource {
	r := s.resource
	attrs := []kv{attrStr("service.name", s.opts.ServiceName)}
	if s.opts.ServiceVersion != "" {
		attrs = append(attrs, attrStr("service.version", s.opts.ServiceVersion))
	}
	attrs = append(attrs, attrStr("host.name", r.hostName), attrStr("host.arch", r.hostArch), attrStr("os.type", r.osType))
	if r.containerID != "" {
		attrs = append(attrs, attrStr("container.id", r.containerID))
	}
	return &resourcepb.Resource{Attributes: attrs}
}

type kv = *commonpb.KeyValue

func attrStr(k, v string) kv {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

func attrInt(k string, v int64) kv {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: v}}}
}

func nanos(t time.Time) uint64 {
	if t.IsZero() {
		return 0
	}
	return uint64(t.UnixNano())
}

// builder collects the metrics of one batch, all stamped with one time.
type builder struct {
	now     uint64
	metrics []*metricspb.Metric
}

func newBuilder(now time.Time) *builder { return &builder{now: nanos(now)} }

// take returns the metrics collected so far and starts a new list.
func (b *builder) take() []*metricspb.Metric {
	m := b.metrics
	b.metrics = nil
	return m
}

func (b *builder) stamp(pts []*metricspb.NumberDataPoint, start uint64) {
	for _, p := range pts {
		p.TimeUnixNano = b.now
		p.StartTimeUnixNano = start
	}
}

// gauge adds a Gauge (an instantaneous value).
func (b *builder) gauge(name, unit string, pts ...*metricspb.NumberDataPoint) {
	b.stamp(pts, 0)
	b.metrics = append(b.metrics, &metricspb.Metric{Name: name, Unit: unit,
		Data: &metricspb.Metric_Gauge{Gauge: &metricspb.Gauge{DataPoints: pts}}})
}

// sum adds a cumulative Sum: a Counter when monotonic (start is when it
// began counting), else an UpDownCounter.
func (b *builder) sum(name, unit string, monotonic bool, start uint64, pts ...*metricspb.NumberDataPoint) {
	b.stamp(pts, start)
	b.metrics = append(b.metrics, &metricspb.Metric{Name: name, Unit: unit,
		Data: &metricspb.Metric_Sum{Sum: &metricspb.Sum{
			DataPoints:             pts,
			AggregationTemporality: metricspb.AggregationTemporality_AGGREGATION_TEMPORALITY_CUMULATIVE,
			IsMonotonic:            monotonic,
		}}})
}

func dbl(v float64, attrs ...kv) *metricspb.NumberDataPoint {
	return &metricspb.NumberDataPoint{Attributes: attrs, Value: &metricspb.NumberDataPoint_AsDouble{AsDouble: v}}
}

func integer(v int64, attrs ...kv) *metricspb.NumberDataPoint {
	return &metricspb.NumberDataPoint{Attributes: attrs, Value: &metricspb.NumberDataPoint_AsInt{AsInt: v}}
}

// Resource returns the resource of every batch (service, host, container):
// the log channels use it too. Safe for concurrent use.
func (s *Sampler) Resource() *resourcepb.Resource { return s.resourcePB() }
