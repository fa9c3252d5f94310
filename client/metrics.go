package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/sidecar-dev/sidecar/rpc"
)

// ErrBadMetrics is returned by Metrics.Next for a batch that does not
// decode (the host broke the OTLP/JSON encoding).
var ErrBadMetrics = errors.New("client: bad metrics batch")

// Metrics is a subscription to the host's metrics channel
// (ahp-otlp://metrics, ahp.md §6): one batch per sample the host takes for
// it, live. A batch the subscription could not take when it was sampled
// is skipped, never queued: the next one says how many were
// (MetricsBatch.Skipped).
type Metrics struct {
	sub *Subscription
}

// MetricsBatch is one batch of the host's metrics.
type MetricsBatch struct {
	// Payload is the OTLP/JSON ExportMetricsServiceRequest exactly as the
	// host sent it (resourceMetrics, with OpenTelemetry's semantic
	// convention names: system.cpu.utilization, system.memory.usage...).
	Payload json.RawMessage
	// Data is Payload decoded (fields this library does not know are
	// ignored).
	Data *metricspb.MetricsData
	// Skipped is how many samples the host took since the previous batch
	// that this subscription did not get (our extension "skipped").
	Skipped uint64
}

// SubscribeMetrics subscribes to the host's metrics channel, the one its
// initialize result advertises (rpc.MetricsChannel when it says none), a
// batch every interval when interval is positive (our ?interval=
// extension: at least the host's telemetry.interval), else at the host's
// own interval. The subscription's errors are Subscribe's.
func (c *Conn) SubscribeMetrics(ctx context.Context, interval time.Duration) (*Metrics, error) {
	channel := rpc.MetricsChannel
	if tel := c.Initialized().Telemetry; tel != nil && tel.Metrics != "" {
		channel = tel.Metrics
	}
	if interval > 0 {
		channel += "?interval=" + interval.String()
	}
	sub, err := c.Subscribe(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", channel, err)
	}
	return &Metrics{sub: sub}, nil
}

// Channel returns the channel subscribed to.
func (m *Metrics) Channel() string { return m.sub.Channel }

// Next returns the next batch, blocking until one arrives or ctx ends. It
// returns the subscription's error once it ended (the connection closed,
// Close), and ErrBadMetrics for a batch that does not decode.
func (m *Metrics) Next(ctx context.Context) (MetricsBatch, error) {
	for {
		msg, err := m.sub.Next(ctx)
		if err != nil {
			return MetricsBatch{}, err
		}
		if msg.Method != rpc.MethodOTLPExportMetrics {
			msg.Release() // channel/snapshot (state {}): nothing to show
			continue
		}
		b := MetricsBatch{Data: &metricspb.MetricsData{}}
		b.Payload, b.Skipped, err = decodeExport(msg, b.Data, ErrBadMetrics)
		if err != nil {
			return MetricsBatch{}, err
		}
		return b, nil
	}
}

// Close ends the subscription (unsubscribe).
func (m *Metrics) Close() error { return m.sub.Unsubscribe() }

// decodeExport decodes an otlp/export* notification msg of a telemetry
// channel, and releases it: its OTLP/JSON payload (returned as sent) into
// data (fields this library does not know ignored), and its skipped
// count. An error wraps bad (ErrBadMetrics, ErrBadLogs).
func decodeExport(msg *Message, data proto.Message, bad error) (json.RawMessage, uint64, error) {
	var p struct {
		Payload json.RawMessage `json:"payload"`
		Skipped uint64          `json:"skipped"`
	}
	err := json.Unmarshal(msg.Params, &p)
	msg.Release()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s params: %v", bad, msg.Method, err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(p.Payload, data); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", bad, err)
	}
	return p.Payload, p.Skipped, nil
}
