// Package tunnels is the tunnels channel kind (ahp-tunnels://, upstream
// AHP docs/specification/tunnels-channel.md): the host's authoritative,
// journaled list of port forwards (TunnelsState.ports, keyed by
// ahp-tunnel:/<id>) and each participant's lifecycle, which clients
// change with tunnel/* actions the host validates; and the listeners of
// reverse forwards (clientToHost entries, sidecar forward -R), whose
// accepted connections reach their client as ahp-tcp: channels through
// our extension tunnel/accept (docs/protocol.md "Tunnels").
//
// A clientToHost entry a client sets makes the host listen (loopback
// unless tunnels.allow_non_loopback; no port below 1024 unless
// tunnels.allow_privileged_ports; tunnels.max_listeners_per_principal),
// and report the participant ready with the effective address. Each
// connection the listener accepts waits (at most tunnels.max_waiting per
// listener, each at most tunnels.wait_timeout) until its client asks
// tunnel/accept; the answer names an ahp-tcp: channel whose subscription
// makes the socket a TCP channel exactly as createTcpConnection's
// (adapters/tcp Table.Adopt): windowed, fair, resumable by offsets. While
// the client's link is down, its entries read unavailable, the listener
// stays and accepted connections wait; once the client is gone for good
// (ClientGone) its entries are removed and its listeners closed.
package tunnels

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/auth"

	"github.com/sidecar-dev/sidecar/audit"
	"github.com/sidecar-dev/sidecar/config"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// MaxAcceptsPerConn bounds the tunnel/accept requests one connection may
// have waiting at once (each holds one of delivery.max_concurrent_requests).
const MaxAcceptsPerConn = 4

// OfferLease bounds how long a connection handed out by tunnel/accept
// waits for its client's subscription before it is reset.
const OfferLease = tcp.SubscribeLease

// Kind is the tunnels kind on the host's registry. Register it with NewKind.
type Kind struct {
	log    hclog.Logger
	guard  *adapters.Guard
	j      *journal.Journal
	cfg    config.Tunnels
	grace  time.Duration // journal.reconnect_grace: how long a lost client's listeners stay
	quotas *adapters.Quotas
	// listenQuota counts listeners; connQuota the TCP channels of
	// reverse-forwarded connections (tb).
	listenQuota, connQuota adapters.QuotaLimits
	tb                     *tcp.Table
	ch                     *channel
	// audit records audit events (adapters.Env.Record).
	audit func(c adapters.Caller, action string, attrs map[string]any)
	wg    sync.WaitGroup // accept loops

	mu        sync.Mutex
	ports     []rpc.TunnelPort
	listeners map[string]*listener // by resource
	conns     map[string]adapters.ConnID
	lostAt    map[string]time.Time             // by clientId: when its link was lost (its listeners stay until lostAt+grace)
	lastReady map[string]rpc.TunnelClientState // resource+" "+clientId: restored when the client is back
	wakes     map[string]chan struct{}         // by clientId: closed when a connection waits for it
	accepts   map[adapters.ConnID]int          // tunnel/accept waiting, per connection
	offers    map[string]*offer                // by ahp-tcp: URI
	nextConn  uint64
	closed    bool
}

// listener is a clientToHost entry's socket and the connections it
// accepted that wait for their client.
type listener struct {
	resource, clientID string
	principal          string          // its client's: another client of it may take the listener over
	caller             adapters.Caller // who opened it (its audit events)
	ln                 *net.TCPListener
	res                *adapters.Reservation
	waiting            []*waiter
	// room is closed (and replaced) when a waiting connection is taken
	// or dropped, or the listener closes: its accept loop may go on.
	room chan struct{}
}

// roomLocked wakes l's accept loop, paused at tunnels.max_waiting.
func (l *listener) roomLocked() {
	close(l.room)
	l.room = make(chan struct{})
}

// waiter is one accepted connection waiting for tunnel/accept.
type waiter struct {
	sock  *net.TCPConn
	timer *time.Timer
}

// offer is a connection tunnel/accept handed out, waiting for the
// subscription that adopts it; conn is the connection it went to (0 once
// that one ended: it is handed out again).
type offer struct {
	uri, resource, clientID string
	conn                    adapters.ConnID
	sock                    *net.TCPConn
	timer                   *time.Timer
}

// NewKind is the tunnels kind's adapters.Factory.
func NewKind(env adapters.Env) (adapters.Kind, error) {
	cfg := env.Config.Tunnels
	log := env.Log.Named("tunnels")
	k := &Kind{log: log, guard: env.Guard, j: env.Journal, cfg: cfg, grace: env.Config.Journal.ReconnectGrace, quotas: env.Quotas,
		listenQuota: adapters.QuotaLimits{PerPrincipal: cfg.MaxListenersPerPrincipal,
			Name: "reverse-forward listener", Counted: "listeners", Block: "tunnels", Subject: "listeners", Advice: "remove one first"},
		connQuota: adapters.QuotaLimits{PerPrincipal: cfg.MaxConnectionsPerPrincipal,
			Name: "reverse-forwarded connection", Counted: "open", Block: "tunnels", Subject: "connections", Advice: "close one first"},
		listeners: map[string]*listener{}, conns: map[string]adapters.ConnID{}, lostAt: map[string]time.Time{}, lastReady: map[string]rpc.TunnelClientState{},
		wakes: map[string]chan struct{}{}, accepts: map[adapters.ConnID]int{}, offers: map[string]*offer{},
		ports: []rpc.TunnelPort{},
		audit: env.Record,
	}
	tc := env.Config.TCP
	k.tb = tcp.NewTable(tcp.TableConfig{
		Quotas: env.Quotas,
		Quota:  &k.connQuota,
		Limits: delivery.Limits{WindowBytes: delivery.UTF16Bytes(tc.WindowBytes), MaximumFrameBytes: delivery.UTF16Bytes(tc.MaximumFrameBytes)},
		Budget: adapters.WindowBudget{Total: delivery.UTF16Bytes(tc.WindowBytesPerClient), First: tcp.FirstWindowBytes},
		Seq:    env.Journal.Seq,
		Log:    log,
		Audit:  env.Record,
	})
	k.ch = &channel{k: k}
	return k, nil
}

// Name implements adapters.Kind.
func (k *Kind) Name() string { return "tunnels" }

// Labels implements adapters.Kind (the reverse-forwarded connections'
// channels are labelled tcp, as the tcp kind's).
func (k *Kind) Labels() []string { return []string{"tunnels"} }

// Advertise implements adapters.Kind: tunnels {channel: "ahp-tunnels://"}.
func (k *Kind) Advertise(res *rpc.InitializeResult) {
	res.Tunnels = &rpc.TunnelsCapability{Channel: rpc.TunnelsChannel}
}

// Requests implements adapters.Kind: tunnel/accept, beside the lane (it
// waits for a connection).
func (k *Kind) Requests() []adapters.Request {
	return []adapters.Request{{Method: rpc.MethodTunnelAccept, Beside: true, Permission: auth.TunnelListen, Serve: k.accept}}
}

// Lookup implements adapters.Kind: the tunnels channel for everyone; a
// reverse-forwarded connection's ahp-tcp: channel for its client's
// connection only. The first lookup of a connection tunnel/accept handed
// out (its subscribe) adopts the socket as a TCP channel.
func (k *Kind) Lookup(uri string, caller adapters.Caller) adapters.Channel {
	if uri == rpc.TunnelsChannel {
		return k.ch
	}
	if !strings.HasPrefix(uri, rpc.TCPScheme) {
		return nil
	}
	if tc := k.tb.Channel(uri); tc != nil {
		if tc.OwnedBy(caller.Conn) {
			return tc
		}
		return nil
	}
	k.mu.Lock()
	o := k.offers[uri]
	if o == nil || o.clientID != caller.ClientID {
		k.mu.Unlock()
		return nil
	}
	delete(k.offers, uri)
	k.mu.Unlock()
	o.timer.Stop()
	tc, e := k.tb.Adopt(caller, uri, o.sock)
	if e != nil {
		k.log.Warn("reverse-forwarded connection refused", "client", caller.ClientID, "resource", o.resource, "error", e.Message)
		resetSock(o.sock)
		return nil
	}
	return tc
}

// ConnEnded implements adapters.Kind: the connection's reverse-forwarded
// channels close (unless parked for a reconnect); connections handed out
// to it and not yet subscribed are handed out again; if it was its
// client's, the client's participants read unavailable until it is back.
func (k *Kind) ConnEnded(conn adapters.ConnID) {
	k.tb.CloseConn(conn, "client connection closed")
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.accepts, conn)
	for _, o := range k.offers {
		if o.conn == conn {
			o.conn = 0
			o.timer.Reset(k.cfg.WaitTimeout)
			k.wakeLocked(o.clientID)
		}
	}
	for id, c := range k.conns {
		if c != conn {
			continue
		}
		delete(k.conns, id)
		k.lostAt[id] = time.Now()
		until := k.expiryLocked(id)
		k.setClientStatesLocked(id, func(p *rpc.TunnelPort) *rpc.TunnelClientState {
			why := "the client's connection was lost; its forwards resume if it reconnects by " + until
			if l := k.listeners[p.Resource]; l != nil {
				why = fmt.Sprintf("the client's connection was lost; still listening on %s until %s, connections wait for it (at most %d, each %v: tunnels.max_waiting, tunnels.wait_timeout); a new client of the same token may take it over",
					l.ln.Addr(), until, k.cfg.MaxWaiting, k.cfg.WaitTimeout)
			}
			return &rpc.TunnelClientState{Status: rpc.TunnelUnavailable, Reason: why}
		})
	}
}

// ClientGone implements adapters.Kind: the client's entries are removed
// and its listeners closed, their waiting connections reset.
func (k *Kind) ClientGone(clientID string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.conns, clientID)
	delete(k.lostAt, clientID)
	for _, o := range k.offers {
		if o.clientID == clientID {
			k.dropOfferLocked(o, "its client is gone")
		}
	}
	for _, p := range append([]rpc.TunnelPort(nil), k.ports...) {
		mine := p.RequestedBy.ClientID == clientID || p.Client != nil && p.Client.ClientID == clientID
		if mine {
			k.removeLocked(p.Resource, "its client is gone")
			continue
		}
		for _, c := range p.Clients {
			if c.ClientID == clientID {
				k.hostActionLocked(&rpc.TunnelAction{Type: rpc.ActionTunnelPortClientRemoved, Resource: p.Resource, ClientID: clientID})
			}
		}
	}
	if w := k.wakes[clientID]; w != nil {
		close(w)
		delete(k.wakes, clientID)
	}
}

// Metrics implements adapters.Kind.
func (k *Kind) Metrics() []adapters.Metric {
	k.mu.Lock()
	entries, listeners, waiting := len(k.ports), len(k.listeners), len(k.offers)
	for _, l := range k.listeners {
		waiting += len(l.waiting)
	}
	k.mu.Unlock()
	_, open, _ := k.tb.Counts()
	return []adapters.Metric{
		{Name: "tunnel_entries", Help: "Entries of the tunnels channel (forwards of both directions).", Value: float64(entries)},
		{Name: "tunnel_listeners", Help: "Reverse forwards' listeners open on this machine.", Value: float64(listeners)},
		{Name: "tunnel_connections", Help: "Reverse-forwarded connections, by state: waiting for their client, open.", Label: "state", LabelValue: "waiting", Value: float64(waiting)},
		{Name: "tunnel_connections", Help: "Reverse-forwarded connections, by state: waiting for their client, open.", Label: "state", LabelValue: "open", Value: float64(open)},
	}
}

// Shutdown implements adapters.Kind: listeners close, waiting connections
// are reset, open ones end as every TCP channel does.
func (k *Kind) Shutdown(ctx context.Context) {
	k.mu.Lock()
	k.closed = true
	for _, l := range k.listeners {
		k.closeListenerLocked(l, "server shutting down")
	}
	for _, o := range k.offers {
		k.dropOfferLocked(o, "server shutting down")
	}
	for id, w := range k.wakes {
		close(w)
		delete(k.wakes, id)
	}
	k.mu.Unlock()
	done := make(chan struct{})
	go func() {
		k.tb.Shutdown()
		k.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// hostActionLocked journals a host-originated action and applies it.
func (k *Kind) hostActionLocked(a *rpc.TunnelAction) {
	_, _ = k.j.Append(rpc.TunnelsChannel, adapters.HostAction(rpc.TunnelsChannel, a))
	k.ports = rpc.ReduceTunnels(k.ports, a)
}

// findLocked returns the entry res, or nil.
func (k *Kind) findLocked(res string) *rpc.TunnelPort {
	for i := range k.ports {
		if k.ports[i].Resource == res {
			return &k.ports[i]
		}
	}
	return nil
}

// setClientStatesLocked sets every participant of clientID to the state
// stateOf gives for its entry (the host's own actions: unavailable when
// its link is lost), remembering a ready state to restore when it is
// back.
func (k *Kind) setClientStatesLocked(clientID string, stateOf func(*rpc.TunnelPort) *rpc.TunnelClientState) {
	for _, p := range append([]rpc.TunnelPort(nil), k.ports...) {
		for _, c := range participants(&p) {
			if c.ClientID != clientID {
				continue
			}
			st := stateOf(&p)
			if c.State.Status == st.Status {
				continue
			}
			if c.State.Status == rpc.TunnelReady {
				k.lastReady[p.Resource+" "+clientID] = c.State
			}
			k.hostActionLocked(&rpc.TunnelAction{Type: rpc.ActionTunnelPortClientUpdated, Resource: p.Resource, ClientID: clientID, State: st})
		}
	}
}

// seenLocked records that clientID speaks on conn: if that is a new
// connection, its participants made unavailable by a lost link are ready
// again.
func (k *Kind) seenLocked(c adapters.Caller) {
	if k.conns[c.ClientID] == c.Conn {
		return
	}
	k.conns[c.ClientID] = c.Conn
	delete(k.lostAt, c.ClientID)
	for _, p := range append([]rpc.TunnelPort(nil), k.ports...) {
		for _, pc := range participants(&p) {
			key := p.Resource + " " + c.ClientID
			if pc.ClientID != c.ClientID || pc.State.Status != rpc.TunnelUnavailable {
				continue
			}
			if st, ok := k.lastReady[key]; ok {
				delete(k.lastReady, key)
				k.hostActionLocked(&rpc.TunnelAction{Type: rpc.ActionTunnelPortClientUpdated, Resource: p.Resource, ClientID: c.ClientID, State: &st})
			}
		}
	}
}

// participants returns p's participants.
func participants(p *rpc.TunnelPort) []rpc.TunnelClient {
	if p.Client != nil {
		return []rpc.TunnelClient{*p.Client}
	}
	return p.Clients
}

// removeLocked removes the entry res (tunnel/portRemoved by the host),
// closing its listener.
func (k *Kind) removeLocked(res, why string) {
	if l := k.listeners[res]; l != nil {
		k.closeListenerLocked(l, why)
	}
	for key := range k.lastReady {
		if strings.HasPrefix(key, res+" ") {
			delete(k.lastReady, key)
		}
	}
	k.hostActionLocked(&rpc.TunnelAction{Type: rpc.ActionTunnelPortRemoved, Resource: res})
}

// listen opens the listener of a clientToHost entry for caller.
func (k *Kind) listenLocked(p *rpc.TunnelPort, caller adapters.Caller) (*listener, error) {
	ap, err := bindAddr(p.RequestedLocalAddress, k.cfg.AllowNonLoopback, k.cfg.AllowPrivilegedPorts)
	if err != nil {
		return nil, err
	}
	if old := k.holderLocked(ap); old != nil {
		if !k.takeableLocked(old, caller) {
			return nil, fmt.Errorf("cannot listen on %s: %s holds it", ap, k.describeLocked(old))
		}
		// A client of the same token whose link is lost (killed, say)
		// would keep the port and its quota for the whole grace: its
		// successor takes the listener over.
		k.log.Info("reverse forward taken over", "resource", old.resource, "client", old.clientID, "by", caller.ClientID, "address", ap.String())
		k.removeLocked(old.resource, "taken over by client "+caller.ClientID+" of the same token (its own link was lost)")
	}
	res, e := k.quotas.Reserve(&k.listenQuota, caller)
	if e != nil {
		return nil, fmt.Errorf("%s%s", e.Message, k.lostListenersLocked(caller.Principal))
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	if err != nil {
		res.Release()
		return nil, fmt.Errorf("cannot listen on %s: %v", ap, unwrapSyscall(err))
	}
	l := &listener{resource: p.Resource, clientID: caller.ClientID, principal: caller.Principal, caller: caller, ln: ln, res: res, room: make(chan struct{})}
	k.audit(caller, audit.ActionTunnelListen, map[string]any{"resource": p.Resource, "server.address": ln.Addr().String(),
		"destination": net.JoinHostPort(p.RequestedRemoteAddress.Host, strconv.Itoa(p.RequestedRemoteAddress.Port))})
	k.listeners[p.Resource] = l
	k.wg.Add(1)
	go k.acceptLoop(l)
	k.log.Info("reverse forward listening", "client", caller.ClientID, "resource", p.Resource, "address", ln.Addr().String(),
		"to", net.JoinHostPort(p.RequestedRemoteAddress.Host, strconv.Itoa(p.RequestedRemoteAddress.Port)))
	return l, nil
}

// holderLocked returns the listener of ours whose address ap would
// collide with (same port, same address or either one all interfaces),
// or nil; port 0 collides with none.
func (k *Kind) holderLocked(ap netip.AddrPort) *listener {
	if ap.Port() == 0 {
		return nil
	}
	for _, l := range k.listeners {
		la := l.ln.Addr().(*net.TCPAddr).AddrPort()
		if la.Port() != ap.Port() {
			continue
		}
		a, b := la.Addr().Unmap(), ap.Addr().Unmap()
		if a == b || a.IsUnspecified() || b.IsUnspecified() {
			return l
		}
	}
	return nil
}

// takeableLocked reports whether caller may take l over: l's client is
// another of caller's principal, and its link is lost (its listener is
// kept only for its grace).
func (k *Kind) takeableLocked(l *listener, caller adapters.Caller) bool {
	_, connected := k.conns[l.clientID]
	return !connected && l.clientID != caller.ClientID && l.principal == caller.Principal
}

// expiryLocked says until when a lost client's state is kept: a time
// and the setting, or "the end of its grace" when not known.
func (k *Kind) expiryLocked(clientID string) string {
	at, ok := k.lostAt[clientID]
	if !ok || k.grace <= 0 {
		return "the end of its grace (journal.reconnect_grace)"
	}
	return at.Add(k.grace).UTC().Format(time.DateTime) + " UTC (journal.reconnect_grace " + k.grace.String() + ")"
}

// describeLocked names l's entry and client, and, if its link is lost,
// when it expires.
func (k *Kind) describeLocked(l *listener) string {
	if _, connected := k.conns[l.clientID]; connected {
		return fmt.Sprintf("reverse forward %s of connected client %s", l.resource, l.clientID)
	}
	return fmt.Sprintf("reverse forward %s of client %s, whose link was lost (kept until %s; only a client of the same token may take it over)",
		l.resource, l.clientID, k.expiryLocked(l.clientID))
}

// lostListenersLocked explains a listener quota refusal for principal:
// which of its listeners are kept for clients whose link was lost, and
// until when (at most 3 named); "" if none.
func (k *Kind) lostListenersLocked(principal string) string {
	var kept []string
	n := 0
	for _, l := range k.listeners {
		if _, connected := k.conns[l.clientID]; connected || l.principal != principal {
			continue
		}
		if n++; n <= 3 {
			kept = append(kept, fmt.Sprintf("%s of client %s until %s", l.ln.Addr(), l.clientID, k.expiryLocked(l.clientID)))
		}
	}
	if n == 0 {
		return ""
	}
	more := ""
	if n > len(kept) {
		more = fmt.Sprintf(" and %d more", n-len(kept))
	}
	return fmt.Sprintf(" (%d of them kept for clients whose link was lost: %s%s; asking for the same address takes one over)", n, strings.Join(kept, ", "), more)
}

// unwrapSyscall is err's innermost cause ("address already in use").
func unwrapSyscall(err error) error {
	for {
		switch e := err.(type) {
		case *net.OpError:
			err = e.Err
		case *os.SyscallError:
			err = e.Err // "bind: address already in use" without "bind: "
		default:
			return err
		}
	}
}

// closeListenerLocked closes l and resets the connections waiting on it.
func (k *Kind) closeListenerLocked(l *listener, why string) {
	if k.listeners[l.resource] != l {
		return
	}
	delete(k.listeners, l.resource)
	_ = l.ln.Close()
	l.res.Release()
	for _, w := range l.waiting {
		w.timer.Stop()
		resetSock(w.sock)
	}
	if n := len(l.waiting); n > 0 {
		k.log.Info("reverse-forwarded connections reset", "resource", l.resource, "count", n, "reason", "listener closed: "+why)
	}
	l.waiting = nil
	l.roomLocked()
	for _, o := range k.offers {
		if o.resource == l.resource {
			k.dropOfferLocked(o, "listener closed: "+why)
		}
	}
	k.log.Info("reverse forward closed", "client", l.clientID, "resource", l.resource, "reason", why)
	k.audit(l.caller, audit.ActionTunnelClose, map[string]any{"resource": l.resource, "server.address": l.ln.Addr().String(), "reason": why})
}

// acceptLoop accepts l's connections until it is closed; each waits for
// its client (bounded: tunnels.max_waiting, tunnels.wait_timeout).
func (k *Kind) acceptLoop(l *listener) {
	defer k.wg.Done()
	var delay time.Duration
	for {
		// Past tunnels.max_waiting, accepting pauses: later connections
		// wait in the kernel's listen backlog, none is refused.
		k.mu.Lock()
		for len(l.waiting) >= k.cfg.MaxWaiting && k.listeners[l.resource] == l {
			room := l.room
			k.mu.Unlock()
			<-room
			k.mu.Lock()
		}
		k.mu.Unlock()
		c, err := l.ln.AcceptTCP()
		if err != nil {
			k.mu.Lock()
			open := k.listeners[l.resource] == l
			k.mu.Unlock()
			if !open {
				return
			}
			// Out of descriptors, say: retry after a while.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			k.log.Warn("reverse forward cannot accept; retrying", "resource", l.resource, "error", err, "in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		_ = c.SetLinger(0) // a dying daemon resets rather than ends it
		k.mu.Lock()
		switch {
		case k.listeners[l.resource] != l:
			resetSock(c)
		default:
			w := &waiter{sock: c}
			w.timer = time.AfterFunc(k.cfg.WaitTimeout, func() { k.expire(l, w) })
			l.waiting = append(l.waiting, w)
			k.wakeLocked(l.clientID)
		}
		k.mu.Unlock()
	}
}

// expire resets w, which waited tunnels.wait_timeout for its client.
func (k *Kind) expire(l *listener, w *waiter) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for i, x := range l.waiting {
		if x == w {
			l.waiting = append(l.waiting[:i:i], l.waiting[i+1:]...)
			l.roomLocked()
			resetSock(w.sock)
			k.log.Warn("reverse-forwarded connection reset", "client", l.clientID, "resource", l.resource,
				"reason", "its client did not take it within "+k.cfg.WaitTimeout.String()+" (tunnels.wait_timeout)")
			return
		}
	}
}

// wakeLocked wakes clientID's waiting tunnel/accept requests.
func (k *Kind) wakeLocked(clientID string) {
	if w := k.wakes[clientID]; w != nil {
		close(w)
		delete(k.wakes, clientID)
	}
}

// dropOfferLocked resets o's connection.
func (k *Kind) dropOfferLocked(o *offer, why string) {
	if k.offers[o.uri] != o {
		return
	}
	delete(k.offers, o.uri)
	o.timer.Stop()
	resetSock(o.sock)
	k.log.Info("reverse-forwarded connection reset", "client", o.clientID, "resource", o.resource, "reason", why)
}

// accept is tunnel/accept: the next connection one of the caller's
// listeners (or the one named) accepted, handed out as an ahp-tcp:
// channel; it waits until there is one, the caller's connection ends, or
// the client has no listener left.
func (k *Kind) accept(ctx context.Context, c adapters.Caller, params json.RawMessage) (any, *rpc.Error) {
	var p rpc.TunnelAcceptParams
	if len(params) > 0 && string(params) != "null" {
		if e := rpc.DecodeParams(params, &p); e != nil {
			return nil, e
		}
	}
	k.mu.Lock()
	if k.accepts[c.Conn] >= MaxAcceptsPerConn {
		k.mu.Unlock()
		return nil, rpc.Errorf(rpc.CodePermissionDenied, "at most %d tunnel/accept requests may wait on one connection", MaxAcceptsPerConn)
	}
	k.accepts[c.Conn]++
	defer func() {
		k.mu.Lock()
		if k.accepts[c.Conn]--; k.accepts[c.Conn] <= 0 {
			delete(k.accepts, c.Conn)
		}
		k.mu.Unlock()
	}()
	k.seenLocked(c)
	for {
		if k.closed {
			k.mu.Unlock()
			return nil, rpc.Errorf(rpc.CodeInternalError, "server is shutting down")
		}
		if r, e := k.takeLocked(c, p.Resource); r != nil || e != nil {
			k.mu.Unlock()
			return r, e
		}
		any := false
		for _, l := range k.listeners {
			if l.clientID == c.ClientID && (p.Resource == "" || l.resource == p.Resource) {
				any = true
			}
		}
		if !any {
			k.mu.Unlock()
			if p.Resource != "" {
				return nil, rpc.Errorf(rpc.CodeNotFound, "no listener of this client for %s", p.Resource)
			}
			return nil, rpc.Errorf(rpc.CodeNotFound, "this client has no clientToHost entry listening")
		}
		w := k.wakes[c.ClientID]
		if w == nil {
			w = make(chan struct{})
			k.wakes[c.ClientID] = w
		}
		k.mu.Unlock()
		select {
		case <-w:
		case <-ctx.Done():
			return nil, rpc.Errorf(rpc.CodeInternalError, "connection closed")
		}
		k.mu.Lock()
	}
}

// takeLocked hands out a connection for c: first one handed out before to
// a connection that ended, else the oldest waiting one; or, when c's
// principal has tunnels.max_connections_per_principal open, resets the
// oldest waiting one and returns the refusal naming that rule.
func (k *Kind) takeLocked(c adapters.Caller, resource string) (*rpc.TunnelAcceptResult, *rpc.Error) {
	for _, o := range k.offers {
		if o.clientID == c.ClientID && o.conn == 0 && (resource == "" || o.resource == resource) {
			o.conn = c.Conn
			o.timer.Reset(OfferLease)
			return offerResult(o), nil
		}
	}
	for _, l := range k.listeners {
		if l.clientID != c.ClientID || len(l.waiting) == 0 || resource != "" && l.resource != resource {
			continue
		}
		w := l.waiting[0]
		l.waiting = l.waiting[1:]
		l.roomLocked()
		w.timer.Stop()
		// The quota is taken when the client subscribes (Table.Adopt);
		// asked here too, so that a refusal reaches the client, named.
		r, e := k.quotas.Reserve(&k.connQuota, c)
		if e != nil {
			resetSock(w.sock)
			k.log.Warn("reverse-forwarded connection reset", "client", c.ClientID, "resource", l.resource, "reason", e.Message)
			return nil, e
		}
		r.Release()
		k.nextConn++
		id := strings.TrimPrefix(l.resource, rpc.TunnelScheme+"/")
		o := &offer{uri: rpc.TCPScheme + "/tunnel." + id + "." + strconv.FormatUint(k.nextConn, 10),
			resource: l.resource, clientID: c.ClientID, conn: c.Conn, sock: w.sock}
		o.timer = time.AfterFunc(OfferLease, func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			k.dropOfferLocked(o, "not subscribed within "+OfferLease.String())
		})
		k.offers[o.uri] = o
		return offerResult(o), nil
	}
	return nil, nil
}

func offerResult(o *offer) *rpc.TunnelAcceptResult {
	r := &rpc.TunnelAcceptResult{Resource: o.resource, Channel: o.uri}
	if a, ok := o.sock.RemoteAddr().(*net.TCPAddr); ok {
		r.Peer = rpc.TunnelAddress{Host: a.IP.String(), Port: a.Port}
	}
	return r
}

// resetSock closes c with an RST.
func resetSock(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}

var _ adapters.Kind = (*Kind)(nil)
