// Package host is the sidecar daemon's AHP host: it serves connections
// (the JSON-RPC control plane on sourcegraph/jsonrpc2, data through the
// delivery Scheduler), keeps one subscription registry
// (host/subscription.go) and the root catalogue, and reaches every other
// channel kind through the registry of kinds (host/kinds.go, the
// contracts of package adapters): it knows no kind by name.
//
// The files by job: server.go the Server and connections' admission and
// end; conn.go one connection's lifecycle; reader.go its reader (data,
// credit, notifications); requests.go its requests (admission, dispatch,
// initialize); subscribe.go subscribe; subscription.go the subscription
// registry; resume.go reconnect; lane.go the request lane; page.go
// channel/page; root.go the root channel; stats.go and metrics.go the
// counters.
//
// Locks are taken in one order only: channel (terminal) → root →
// subscription → journal → scheduler/stream. Journal listeners run under
// the journal lock and only push to schedulers.
package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// SupportedVersions is the AHP version range the host speaks: it answers
// initialize with the client's first offered version that matches.
var SupportedVersions = []string{"^0.5.0"}

// Version is the sidecar's version, reported in serverInfo.
var Version = "dev"

// Server is the AHP host of one machine. Create it with New, serve
// connections with ServeConn, stop it with Shutdown.
type Server struct {
	cfg     *config.Config
	log     hclog.Logger
	journal *journal.Journal
	root    *root
	kinds   *registry
	quotas  *adapters.Quotas
	// guard checks roles and logs refusals (adapters.Guard), for the
	// host's requests and every kind's.
	guard *adapters.Guard
	// hostMax is the most the host accepts of a windowed-delivery offer
	// (config delivery block), unless a channel's Traits.Limits says
	// otherwise. UTF-16 bytes.
	hostMax delivery.Limits

	// counts are the counters of rare events (host/stats.go).
	counts serverCounters

	ret retainedState // host/resume.go
	// parkedPacing is how long a lost holder's parked stream paces its
	// terminal (defaultParkedPacing; tests shorten it).
	parkedPacing time.Duration
	nextConnID   atomic.Uint64
	// requestHook, when set (tests), runs in the lane before each request
	// other than one that runs beside it; lose makes the request's
	// connection lost, as a failed write does.
	requestHook func(method string, lose func())

	mu      sync.Mutex
	conns   map[*conn]struct{}
	closing bool
	wg      sync.WaitGroup // connections

	// closed totals the counters of the connections no longer in conns
	// (host/stats.go); guarded by mu.
	closed connTotals

	// audit is where the host and its kinds record audit events;
	// ownAudit is set when New made it (Shutdown closes it).
	audit    audit.Sink
	ownAudit *audit.Log

	// live counts the open, initialized connections of each clientId, so
	// a terminal's claim whose holder has gone can be taken over
	// (terminal/claimed). Its own lock: it is read under a terminal's.
	liveMu sync.Mutex
	live   map[string]int
}

// New returns a Server for cfg, logging to log, with the channel kinds of
// kinds created in order (Kinds when none is given: host/kinds.go). An
// error is a kind that could not be created.
func New(cfg *config.Config, log hclog.Logger, kinds ...adapters.Factory) (*Server, error) {
	return NewWithOptions(cfg, log, Options{Kinds: kinds})
}

// Options are what NewWithOptions takes besides the configuration and
// the log.
type Options struct {
	// Audit receives the audit events of the host and its kinds
	// (docs/operations.md "Audit"); an audit.Feed also feeds the audit
	// channel (ahp-otlp://logs/audit). Nil: an audit.Log of the
	// server's own that writes nowhere (the channel only).
	Audit audit.Sink
	// Kinds are the channel kinds, created in order (Kinds when none).
	Kinds []adapters.Factory
}

// NewWithOptions is New with opts.
func NewWithOptions(cfg *config.Config, log hclog.Logger, opts Options) (*Server, error) {
	kinds := opts.Kinds
	if len(kinds) == 0 {
		kinds = Kinds
	}
	j := journal.New(journal.Limits{
		ChannelMaxBytes: cfg.JournalChannelBytes(),
		MaxAge:          cfg.Journal.MaxAge,
	})
	s := &Server{
		cfg:     cfg,
		log:     log,
		journal: j,
		quotas:  adapters.NewQuotas(),
		conns:   map[*conn]struct{}{},
		live:    map[string]int{},
		hostMax: delivery.Limits{
			WindowBytes:       delivery.UTF16Bytes(cfg.Delivery.WindowBytes),
			MaximumFrameBytes: delivery.UTF16Bytes(cfg.Delivery.MaximumFrameBytes),
		},
		parkedPacing: defaultParkedPacing,
		audit:        opts.Audit,
	}
	if s.audit == nil {
		s.ownAudit, _ = audit.New(audit.Options{}) // no file: no error
		s.audit = s.ownAudit
	}
	s.root = newRoot(s)
	s.guard = adapters.NewGuard(log)
	s.guard.SetAudit(s.audit)
	reg, err := newRegistry(s, kinds, adapters.Env{
		Config:     cfg,
		Journal:    j,
		Log:        log,
		Quotas:     s.quotas,
		Version:    Version,
		Root:       s.root,
		Connected:  s.clientConnected,
		EndChannel: s.endChannel,
		Host:       s.hostStats,
		Guard:      s.guard,
		Audit:      s.audit,
		EndSubscription: func(sub adapters.Subscriber) {
			if sub, ok := sub.(*subscription); ok {
				sub.c.unsubscribe(sub, true)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.kinds = reg
	return s, nil
}

// Audit returns where the server records audit events (Options.Audit,
// or its own log): the transports record authentications there.
func (s *Server) Audit() audit.Sink { return s.audit }

// Journal returns the server's journal (for tests).
func (s *Server) Journal() *journal.Journal { return s.journal }

// ErrTooManyConnections is returned by ServeConn beyond a bound of the
// listener block: listener.max_connections on the host,
// max_connections_per_principal for one principal (so that the others
// keep room), max_uninitialized of one principal's connections not
// initialized yet (which initialize_timeout closes).
var ErrTooManyConnections = errors.New("host: too many connections")

// admitLocked returns why principal's new connection is refused (the
// bound it would pass, and its refusal counter), or "" to serve it. Call
// with s.mu held.
func (s *Server) admitLocked(principal string) (why string, r refusal) {
	l := s.cfg.Listener
	total, mine, uninit := len(s.conns), 0, 0
	for c := range s.conns {
		if c.principal == principal {
			mine++
			if !c.isInitialized() {
				uninit++
			}
		}
	}
	switch {
	case l.MaxConnections > 0 && total >= l.MaxConnections:
		return fmt.Sprintf("too many connections on this host (listener.max_connections, %d)", l.MaxConnections), refusedLimit
	case l.MaxConnectionsPerPrincipal > 0 && mine >= l.MaxConnectionsPerPrincipal:
		return fmt.Sprintf("too many connections for this token (listener.max_connections_per_principal, %d)", l.MaxConnectionsPerPrincipal), refusedPrincipalLimit
	case l.MaxUninitialized > 0 && uninit >= l.MaxUninitialized:
		return fmt.Sprintf("too many connections not initialized yet for this token (listener.max_uninitialized, %d)", l.MaxUninitialized), refusedUninitializedLimit
	}
	return "", 0
}

// ErrShuttingDown is returned by ServeConn once Shutdown has begun.
var ErrShuttingDown = errors.New("host: shutting down")

// ServeConn serves one client connection until it closes, ctx ends, or
// the server shuts down. It owns mc and closes it before returning.
func (s *Server) ServeConn(ctx context.Context, mc transport.MessageConn) error {
	return s.ServeConnIdentity(ctx, mc, auth.Anonymous)
}

// ServeConnAs is ServeConn for a transport that principal authenticated
// (for example "token", or "stdio") with the owner role: a reconnect
// resumes a client's state only for the principal that initialized it.
func (s *Server) ServeConnAs(ctx context.Context, mc transport.MessageConn, principal string) error {
	return s.ServeConnIdentity(ctx, mc, auth.Identity{Name: principal, Role: auth.Owner})
}

// ServeConnIdentity is ServeConn for a transport that id authenticated:
// a reconnect resumes a client's state only for id.Name, and every
// request is checked against id.Role. At id.Expiry (when set) the
// connection is closed as transport.CloseUnauthorized "expired";
// Revoke closes it as "revoked".
func (s *Server) ServeConnIdentity(ctx context.Context, mc transport.MessageConn, id auth.Identity) error {
	principal := id.Name
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.counts.refused[refusedShutdown].Add(1)
		_ = mc.Close(transport.CloseGoingAway, "server shutting down")
		return ErrShuttingDown
	}
	if why, r := s.admitLocked(principal); why != "" {
		s.mu.Unlock()
		s.counts.refused[r].Add(1)
		s.log.Warn("connection refused", "peer", mc.Peer(), "reason", why)
		_ = mc.Close(transport.CloseTryAgainLater, why)
		return ErrTooManyConnections
	}
	cc := s.countConn(mc)
	c := newConn(s, cc)
	c.traffic, c.transport = cc, transportIndex(mc)
	s.counts.accepted[c.transport].Add(1)
	c.principal, c.identity = principal, id
	if id.Name != "" {
		c.log = c.log.With("principal", id.Name, "role", string(id.Role))
	}
	c.patient = strings.HasPrefix(transport.Describe(mc), "stdio")
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	defer c.closeAtExpiry()()
	defer func() {
		kept := s.connEnded(c)
		s.counts.disconnects[endReasonOf(c)].Add(1)
		t := c.totals()
		s.mu.Lock()
		delete(s.conns, c)
		s.closed.add(t)
		s.mu.Unlock()
		if id := c.id(); id != "" {
			if s.clientGone(id) && !kept {
				s.passOnClaims(id)
			}
		}
		s.wg.Done()
	}()
	return c.serve(ctx)
}

// connEnded processes the end of c: its state is retained for a
// reconnect (kept) or its subscriptions end; the kinds free what they
// held for it (TCP connections close, except those parked for the
// reconnect).
func (s *Server) connEnded(c *conn) (kept bool) {
	defer close(c.ended)
	c.mu.Lock()
	pending := c.resumedFrom
	c.resumedFrom = nil
	c.mu.Unlock()
	switch {
	case pending != nil && !s.isClosing():
		// A reconnect whose result never went out: the client sends it
		// again (seed 000), so its state is kept as it was, for a new
		// grace; what this connection registered meanwhile ends.
		c.unsubscribeAll()
		s.keep(pending)
		s.log.Info("client state kept again: the reconnect's result did not go out", "client", pending.clientID)
		kept = true
	case pending != nil:
		c.unsubscribeAll()
		s.endRetained(pending)
	case s.shouldRetain(c):
		s.retain(c)
		kept = true
	default:
		c.unsubscribeAll()
	}
	s.kinds.connEnded(c.connID)
	// Parked subscriptions keep c, but not what it had queued.
	c.sched.Discard()
	return kept || s.retainedFor(c.id())
}

// Shutdown stops accepting connections, closes every connection with
// 1001 "server shutting down", shuts every kind down (terminals' process
// groups killed, TCP connections closed, sampling stopped) and waits
// (bounded by ctx) for all of it to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(transport.CloseGoingAway, "server shutting down")
	}
	s.dropRetained()
	done := make(chan struct{})
	go func() {
		s.kinds.shutdown(ctx)
		s.guard.Stop()
		s.wg.Wait()
		if s.ownAudit != nil {
			_ = s.ownAudit.Close()
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("host: shutdown: %w", ctx.Err())
	}
}

// clientArrived records an initialized connection of clientID.
func (s *Server) clientArrived(clientID string) {
	s.liveMu.Lock()
	s.live[clientID]++
	s.liveMu.Unlock()
}

// clientGone records the end of a connection clientArrived counted, and
// reports whether it was clientID's last one.
func (s *Server) clientGone(clientID string) (last bool) {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	if s.live[clientID]--; s.live[clientID] > 0 {
		return false
	}
	delete(s.live, clientID)
	return true
}

// clientConnected reports whether clientID has an open connection.
func (s *Server) clientConnected(clientID string) bool {
	s.liveMu.Lock()
	defer s.liveMu.Unlock()
	return s.live[clientID] > 0
}

// isClosing reports whether Shutdown has begun.
func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// passOnClaims tells every kind that clientID is gone for good (a
// terminal's claim it held passes on).
func (s *Server) passOnClaims(clientID string) { s.kinds.clientGone(clientID) }

// channel returns the channel uri as caller may see it, or nil: the root,
// else the first kind's that has it (host/kinds.go).
func (s *Server) channel(uri string, caller adapters.Caller) adapters.Channel {
	if uri == rpc.RootChannel {
		return s.root
	}
	return s.kinds.lookup(uri, caller)
}

// endChannel ends every connection's subscription to uri (a disposed
// terminal), keeping what each has queued (adapters.Env.EndChannel).
func (s *Server) endChannel(uri string) {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		if sub := c.subscription(uri); sub != nil {
			c.unsubscribe(sub, true)
		}
	}
}
