package host

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/lograte"
	"github.com/sidecar-dev/sidecar/rpc"
)

// newTCPTable returns the server's TCP channels (adapters/tcp) with the
// config's policy, dialer and limits.
func (s *Server) newTCPTable() *tcpadapter.Table {
	pol, err := tcpadapter.NewPolicy(s.cfg.TCP.Allow)
	if err != nil { // config.Load validated it; a hand-built config may not be
		s.log.Error("tcp.allow is invalid; every destination is refused", "error", err)
		pol, _ = tcpadapter.NewPolicy(nil)
	}
	pol.SetOwn(s.cfg.Listening)
	return tcpadapter.NewTable(tcpadapter.TableConfig{
		Dialer:          &tcpadapter.Dialer{Policy: pol, Timeout: s.cfg.TCP.DialTimeout},
		MaxTotal:        s.cfg.TCP.MaxTotal,
		MaxPerClient:    s.cfg.TCP.MaxPerClient,
		MaxPerPrincipal: s.cfg.TCP.MaxPerPrincipal,
		MaxPerConn:      s.cfg.TCP.MaxPerConnection,
		Limits:          s.tcpMax,
		Seq:             s.journal.Seq,
		Log:             s.log.Named("tcp"),
	})
}

// budgetWindow lowers the windowBytes of l, negotiated for the TCP
// channel uri, to what the client's budget (tcp.window_bytes_per_client)
// leaves beside the windows of its other TCP channels on this connection
// (a client has one connection at a time) and extra (windows granted in
// the same reconnect, not registered yet). It never lowers below the
// window the channel already has, nor below its first window
// (min(l.WindowBytes, tcpadapter.FirstWindowBytes)): a connection keeps
// what it was given, and only growth is refused. maximumFrameBytes is
// left alone (a reconnect's retained messages were cut to it).
func (c *conn) budgetWindow(uri string, l delivery.Limits, extra delivery.UTF16Bytes) delivery.Limits {
	total := c.s.tcpClientWindow
	if total <= 0 {
		return l
	}
	c.mu.Lock()
	subs := make([]*subscription, 0, len(c.subs))
	for _, sub := range c.subs {
		subs = append(subs, sub)
	}
	c.mu.Unlock()
	var others, cur delivery.UTF16Bytes
	for _, sub := range subs { // outside c.mu: Traits and Limits take locks of their own
		if sub.out == nil || sub.ch.Traits().Limits == nil {
			continue // ordinary, or not a TCP channel
		}
		w := sub.out.Limits().WindowBytes
		if sub.channel == uri {
			cur = w
			continue
		}
		others += w
	}
	floor := max(min(l.WindowBytes, tcpadapter.FirstWindowBytes), min(cur, l.WindowBytes))
	l.WindowBytes = max(min(l.WindowBytes, total-others-extra), floor)
	return l
}

// startPorts publishes the machine's listening ports in the root state
// (root/portsChanged) until Shutdown, the first reading before it
// returns (bounded: tcpadapter.StartPolling).
func (s *Server) startPorts() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPorts = cancel
	tcpadapter.StartPolling(ctx, &s.wg, tcpadapter.PortsInterval, s.root.setPorts, func(err error) {
		s.log.Warn("cannot read the listening ports; RootState.ports stays as it is", "error", err)
	})
}

// tcpCapability is InitializeResult.tcpConnections: {} when TCP channels
// are offered, nil otherwise.
func (s *Server) tcpCapability() *struct{} { return &struct{}{} }

// createTCPConnection is createTcpConnection (adapters/tcp Table.Open). A
// failure is logged here, once: a destination the policy refuses at warn
// (someone tried to reach what they may not: a metadata address, another
// host), any other at info, with the system's own error as "cause".
func (c *conn) createTCPConnection(params json.RawMessage) (any, *rpc.Error) {
	e, dialErr := c.s.tcp.Open(c.ctx, c.connID, c.id(), c.principal, params)
	if e != nil {
		log := c.log.Info
		if dialErr != nil && e.Code == rpc.CodePermissionDenied {
			log = c.log.Warn
		}
		if !c.s.tcpFailLog.first(c.id(), e.Code, log) {
			return nil, e // counted: said once the window ends
		}
		args := []any{"client", c.id(), "code", e.Code, "error", e.Message}
		if cause := errors.Unwrap(dialErr); cause != nil {
			args = append(args, "cause", cause)
		}
		log("createTcpConnection failed", args...)
	}
	return nil, e
}

// openFailLog keeps a client's failed createTcpConnection calls from
// flooding the log (a burst past tcp.max_per_client, a scan of refused
// ports): per client and error code, the first failure is logged with
// its message, the ones in the window after it (lograte.DefaultWindow)
// only counted, and the count logged when the window ends: at most two
// lines a second per client and code.
type openFailLog struct {
	window time.Duration // 0: lograte.DefaultWindow
	l      lograte.Limiter[openFailKey]
}

type openFailKey struct {
	client string
	code   int64
}

// first reports whether a failure of client with code is to be logged in
// full; log gets the count of the others when the window ends.
func (l *openFailLog) first(client string, code int64, log func(string, ...any)) bool {
	return l.l.First(openFailKey{client, code}, l.window, func(n int, window time.Duration) {
		log("createTcpConnection failed more times", "client", client, "code", code, "count", n, "within", window.String())
	})
}

// stop ends the windows at shutdown, logging their counts now.
func (l *openFailLog) stop(log func(string, ...any)) {
	l.l.Stop(func(k openFailKey, n int) {
		log("createTcpConnection failed more times", "client", k.client, "code", k.code, "count", n)
	})
}
