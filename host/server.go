// Package host is the sidecar daemon's AHP host: it serves connections
// (the JSON-RPC control plane on sourcegraph/jsonrpc2, data through the
// delivery Scheduler), keeps one subscription registry
// (host/subscription.go) and the root catalogue, and calls every other
// channel kind through the channel contract (package adapters): the
// terminals (adapters/pty), TCP (adapters/tcp) and telemetry
// (adapters/telemetry).
//
// Locks are taken in one order only: channel (terminal) → root →
// subscription → journal → scheduler/stream. Journal listeners run under
// the journal lock and only push to schedulers.
package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters/pty"
	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/adapters/telemetry"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
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
	// hostMax is the most the host accepts of a windowed-delivery offer
	// (config delivery block); tcpMax replaces it on ahp-tcp: channels
	// (config tcp block). UTF-16 bytes.
	hostMax, tcpMax delivery.Limits
	// tcpClientWindow bounds the windowBytes of one client's TCP channels
	// together (config tcp.window_bytes_per_client; 0: no bound).
	tcpClientWindow delivery.UTF16Bytes

	// counts are the counters of rare events (host/stats.go).
	counts serverCounters

	ret retainedState // host/resume.go
	// parkedPacing is how long a lost holder's parked stream paces its
	// terminal (defaultParkedPacing; tests shorten it).
	parkedPacing time.Duration
	tcp          *tcpadapter.Table
	tcpFailLog   openFailLog
	stopPorts    context.CancelFunc
	telemetry    *telemetry.Channels
	nextConnID   atomic.Uint64
	// requestHook, when set (tests), runs in the lane before each request
	// other than a dial.
	requestHook func(method string)

	mu        sync.Mutex
	terminals map[string]*termEntry
	conns     map[*conn]struct{}
	closing   bool
	wg        sync.WaitGroup // connections and terminal goroutines

	// closed totals the counters of the connections no longer in conns
	// (host/stats.go); guarded by mu.
	closed connTotals

	// live counts the open, initialized connections of each clientId, so
	// a terminal's claim whose holder has gone can be taken over
	// (terminal/claimed). Its own lock: it is read under a terminal's.
	liveMu sync.Mutex
	live   map[string]int
}

// New returns a Server for cfg, logging to log.
func New(cfg *config.Config, log hclog.Logger) *Server {
	j := journal.New(journal.Limits{
		ChannelMaxBytes: channelLogBytes(cfg),
		MaxAge:          cfg.Journal.MaxAge,
	}, nil)
	s := &Server{
		cfg:       cfg,
		log:       log,
		journal:   j,
		terminals: map[string]*termEntry{},
		conns:     map[*conn]struct{}{},
		live:      map[string]int{},
		hostMax: delivery.Limits{
			WindowBytes:       delivery.UTF16Bytes(cfg.Delivery.WindowBytes),
			MaximumFrameBytes: delivery.UTF16Bytes(cfg.Delivery.MaximumFrameBytes),
		},
		tcpMax: delivery.Limits{
			WindowBytes:       delivery.UTF16Bytes(cfg.TCP.WindowBytes),
			MaximumFrameBytes: delivery.UTF16Bytes(cfg.TCP.MaximumFrameBytes),
		},
		tcpClientWindow: delivery.UTF16Bytes(cfg.TCP.WindowBytesPerClient),
	}
	s.root = newRoot(s)
	s.parkedPacing = defaultParkedPacing
	s.telemetry = s.newTelemetry()
	s.tcp = s.newTCPTable()
	s.startPorts()
	return s
}

// channelLogBytes bounds each channel's journal: the configured total
// spread over the terminals allowed, but at least 256 KiB so a viewer one
// window behind is still served from the log.
func channelLogBytes(cfg *config.Config) int {
	per := int(cfg.Journal.MaxBytes) / max(cfg.Terminal.MaxTotal, 1)
	return max(per, 256<<10)
}

// Journal returns the server's journal (for tests).
func (s *Server) Journal() *journal.Journal { return s.journal }

// maxConnections bounds the connections served at once: each costs a few
// goroutines and buffers even before it initializes (which it must within
// initializeTimeout). Beyond it a connection is closed at once with 1013.
const maxConnections = 1024

// ErrTooManyConnections is returned by ServeConn beyond maxConnections.
var ErrTooManyConnections = errors.New("host: too many connections")

// ErrShuttingDown is returned by ServeConn once Shutdown has begun.
var ErrShuttingDown = errors.New("host: shutting down")

// ServeConn serves one client connection until it closes, ctx ends, or
// the server shuts down. It owns mc and closes it before returning.
func (s *Server) ServeConn(ctx context.Context, mc transport.MessageConn) error {
	return s.ServeConnAs(ctx, mc, "")
}

// ServeConnAs is ServeConn for a transport that principal authenticated
// (for example "token:" and a digest of the bearer token, or "stdio"): a
// reconnect resumes a client's state only for the principal that
// initialized it.
func (s *Server) ServeConnAs(ctx context.Context, mc transport.MessageConn, principal string) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.counts.refused[refusedShutdown].Add(1)
		_ = mc.Close(transport.CloseGoingAway, "server shutting down")
		return ErrShuttingDown
	}
	if len(s.conns) >= maxConnections {
		s.mu.Unlock()
		s.counts.refused[refusedLimit].Add(1)
		s.log.Warn("connection refused: too many connections", "peer", mc.Peer(), "limit", maxConnections)
		_ = mc.Close(transport.CloseTryAgainLater, "too many connections")
		return ErrTooManyConnections
	}
	cc := s.countConn(mc)
	c := newConn(s, cc)
	c.traffic, c.transport = cc, transportIndex(mc)
	s.counts.accepted[c.transport].Add(1)
	c.principal = principal
	c.patient = strings.HasPrefix(transport.Describe(mc), "stdio")
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
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
// reconnect (kept) or its subscriptions end; its TCP connections close,
// except those parked for the reconnect (retain).
func (s *Server) connEnded(c *conn) (kept bool) {
	defer close(c.ended)
	c.mu.Lock()
	pending := c.resumedFrom
	c.resumedFrom = nil
	c.mu.Unlock()
	if pending != nil { // a reconnect whose result never went out
		s.endRetained(pending)
	}
	kept = s.shouldRetain(c)
	if kept {
		s.retain(c)
	} else {
		c.unsubscribeAll()
	}
	s.tcp.CloseConn(c.connID, "client connection closed")
	// Parked subscriptions keep c, but not what it had queued.
	c.sched.Discard()
	return kept || s.retainedFor(c.id())
}

// startedOver drops clientID's retained state when the same principal
// initializes it afresh (the client gave up resuming); another
// principal's initialize leaves it be.
func (s *Server) startedOver(clientID, principal string) {
	s.ret.mu.Lock()
	r := s.ret.clients[clientID]
	if r == nil || r.principal != principal {
		s.ret.mu.Unlock()
		return
	}
	delete(s.ret.clients, clientID)
	s.ret.mu.Unlock()
	s.log.Info("client state dropped", "client", clientID, "reason", "the client initialized again")
	r.end()
}

// Shutdown stops accepting connections, closes every connection with
// 1001 "server shutting down", kills every terminal's process group and
// waits (bounded by ctx) for all of it to finish.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	terms := make([]*pty.Terminal, 0, len(s.terminals))
	for _, e := range s.terminals {
		if e.t != nil {
			terms = append(terms, e.t)
		}
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close(transport.CloseGoingAway, "server shutting down")
	}
	s.tcpFailLog.stop(s.log.Info)
	s.dropRetained()
	s.stopPorts()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		s.tcp.Shutdown()
	}()
	go func() {
		defer wg.Done()
		s.telemetry.Close()
	}()
	for _, t := range terms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Kill()
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		s.wg.Wait()
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

func (s *Server) defaultDirectory() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return pty.FileURI(home)
}
