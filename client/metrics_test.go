package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/client"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TestSubscribeMetrics: the metrics API subscribes to the channel the host
// advertises, at the interval asked, and hands each batch decoded (the
// OTLP resource and the semantic-convention names the host samples) with
// its payload exactly as sent; Close unsubscribes.
func TestSubscribeMetrics(t *testing.T) {
	p := newPair(t, client.Options{ClientID: "metrics"}, func(c *config.Config) { c.Telemetry.Interval = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	m, err := p.c.SubscribeMetrics(ctx, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if want := rpc.MetricsChannel + "?interval=200ms"; m.Channel() != want {
		t.Fatalf("channel %q, want %q", m.Channel(), want)
	}
	b, err := m.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b.Payload) || len(b.Data.GetResourceMetrics()) != 1 {
		t.Fatalf("batch: %d resources, payload %.100s", len(b.Data.GetResourceMetrics()), b.Payload)
	}
	names := map[string]bool{}
	for _, sm := range b.Data.ResourceMetrics[0].ScopeMetrics {
		for _, metric := range sm.Metrics {
			names[metric.Name] = true
		}
	}
	for _, n := range []string{"system.cpu.utilization", "system.memory.usage"} {
		if !names[n] {
			t.Errorf("no %s in the batch (%d metrics)", n, len(names))
		}
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Next(ctx); err == nil {
		t.Fatal("Next after Close returned a batch")
	}
}
