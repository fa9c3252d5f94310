package host

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters/pty"
	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/config"
)

// PacerClient returns the clientId whose subscription paces terminal uri's
// PTY, "" when none does (or there is no such terminal).
func (s *Server) PacerClient(uri string) string {
	t := s.terminal(uri)
	if t == nil {
		return ""
	}
	return t.Pacer()
}

// FirstSubscribed reports whether terminal uri stopped waiting for its
// claim holder's first subscription (pty.FirstSubscribeLease).
func (s *Server) FirstSubscribed(uri string) bool {
	t := s.terminal(uri)
	return t != nil && t.FirstSubscribed()
}

// LiveClients returns how many clientIds have an open connection (the
// entries of Server.live).
func (s *Server) LiveClients() int {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return len(s.live)
}

// RetainedClients returns how many clients' state is kept for a reconnect.
func (s *Server) RetainedClients() int {
	s.ret.mu.Lock()
	defer s.ret.mu.Unlock()
	return len(s.ret.clients)
}

// SetParkedPacing sets how long a lost holder's parked stream paces its
// terminal; call it before any connection.
func (s *Server) SetParkedPacing(d time.Duration) { s.parkedPacing = d }

// SetRequestHook makes hook run in each connection's lane before every
// request other than a dial (a slow request, for tests); call it before
// any connection.
func (s *Server) SetRequestHook(hook func(method string)) {
	s.requestHook = func(method string, _ func()) { hook(method) }
}

// SetRequestLoser makes the first request of method on any connection
// lose its connection (as a failed write does) just before it is handled;
// call it before any connection.
func (s *Server) SetRequestLoser(method string) {
	var once sync.Once
	s.requestHook = func(m string, lose func()) {
		if m == method {
			once.Do(lose)
		}
	}
}

// terminal returns the terminal uri of the server's terminal kind, or nil.
func (s *Server) terminal(uri string) *pty.Terminal { return kind[*pty.Kind](s.kinds).Terminal(uri) }

// tcpTable returns the server's TCP connections.
func (s *Server) tcpTable() *tcp.Table { return kind[*tcp.Kind](s.kinds).Table() }

// telemetry returns the server's telemetry channels.
func (s *Server) telemetryChannels() *telemetry.Channels {
	return kind[*telemetry.Kind](s.kinds).Channels()
}

// TelemetryStats returns the sampler's counters.
func (s *Server) TelemetryStats() telemetry.HubStats { return s.telemetryChannels().Stats() }

// mustNew is New for tests: a failure fails t.
func mustNew(t testing.TB, cfg *config.Config, log hclog.Logger) *Server {
	t.Helper()
	s, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// MustNew is New for the external tests: a failure fails t.
func MustNew(t testing.TB, cfg *config.Config, log hclog.Logger) *Server { return mustNew(t, cfg, log) }

// TerminalForTest returns the terminal uri, or nil.
func (s *Server) TerminalForTest(uri string) *pty.Terminal { return s.terminal(uri) }
