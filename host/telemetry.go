package host

import (
	"github.com/sidecar-dev/sidecar/adapters/telemetry"
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

// TelemetryStats returns the sampler's counters (for tests and the benchmark).
func (s *Server) TelemetryStats() telemetry.HubStats { return s.telemetry.Stats() }
