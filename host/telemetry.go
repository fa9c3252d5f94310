package host

import "github.com/sidecar-dev/sidecar/rpc"

// telemetryState is the server's telemetry channel state (issue 6).
type telemetryState struct{}

func (s *Server) initTelemetry()     {}
func (s *Server) shutdownTelemetry() {}

// telemetryCapability is InitializeResult.telemetry, or nil.
func (s *Server) telemetryCapability() *rpc.TelemetryCapability { return nil }

// telemetryChannel returns the ahp-otlp: channel named uri, or nil.
func (s *Server) telemetryChannel(uri string) channel { return nil }
