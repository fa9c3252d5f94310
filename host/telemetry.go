package host

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/transport"
)

// newTelemetry starts the server's telemetry channels (adapters/telemetry)
// and tees the server's logger into the logs channel.
func (s *Server) newTelemetry() *telemetry.Channels {
	ts := telemetry.NewChannels(telemetry.ChannelsConfig{
		Interval:       s.cfg.Telemetry.Interval,
		ServiceVersion: Version,
		Self:           s.selfStats,
		Seq:            s.journal.Seq,
		Log:            s.log,
	})
	s.log = ts.Logger()
	return ts
}

// byteCounts are the sidecar's own byte counters (countConn), for the
// sidecar.io metric.
type byteCounts struct {
	sent, received atomic.Uint64
}

// selfStats is the sidecar's own figures for the sidecar.* metrics.
func (s *Server) selfStats() telemetry.Self {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	st := telemetry.Self{
		Clients:       len(conns),
		BytesSent:     s.bytes.sent.Load(),
		BytesReceived: s.bytes.received.Load(),
	}
	st.Gaps = s.closedGaps.Load()
	wait := time.Duration(s.closedCreditWait.Load())
	for _, c := range conns {
		st.Subscriptions += c.subCount()
		st.Gaps += c.sched.Gaps()
		wait += c.sched.CreditWait()
	}
	st.CreditWait = wait
	return st
}

// TelemetryStats returns the sampler's counters (for tests and the benchmark).
func (s *Server) TelemetryStats() telemetry.HubStats { return s.telemetry.Stats() }

// countConn wraps a connection's transport so that the bytes it carries
// count in sidecar.io (ServeConn wraps every connection).
func (s *Server) countConn(mc transport.MessageConn) transport.MessageConn {
	return &countingConn{MessageConn: mc, b: &s.bytes}
}

type countingConn struct {
	transport.MessageConn
	b *byteCounts
}

func (c *countingConn) ReadMessage(ctx context.Context) ([]byte, error) {
	b, err := c.MessageConn.ReadMessage(ctx)
	c.b.received.Add(uint64(len(b)))
	return b, err
}

// RecycleRead implements transport.ReadRecycler as the wrapped conn does.
func (c *countingConn) RecycleRead(b []byte) { transport.RecycleRead(c.MessageConn, b) }

// WriteReleases implements transport.Releaser as the wrapped conn does.
func (c *countingConn) WriteReleases() bool { return transport.WriteReleases(c.MessageConn) }

func (c *countingConn) WriteMessage(ctx context.Context, text []byte) error {
	err := c.MessageConn.WriteMessage(ctx, text)
	if err == nil {
		c.b.sent.Add(uint64(len(text)))
	}
	return err
}
