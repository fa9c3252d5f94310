package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/internal/lograte"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// conn is one client connection: a reader that classifies every message
// (credit inline; requests, admitted or answered Overloaded by jsonrpc2's
// handler on the reader, run in the lane; data inline, or in the lane
// after the requests before it), the lane (host/lane.go), and the
// delivery Scheduler as its only writer.
type conn struct {
	s      *Server
	connID adapters.ConnID
	mc     transport.MessageConn
	log    hclog.Logger
	sched  *delivery.Scheduler
	ctx    context.Context
	stop   context.CancelFunc

	closeOnce sync.Once
	closeErr  error
	closeCode transport.CloseCode // what close was first called with (metrics)
	// traffic counts what the transport carried; transport is its index
	// in transportKinds (host/stats.go).
	traffic   *countingConn
	transport int
	readErr   atomic.Pointer[error] // the first ReadMessage error: how the client's side ended

	// lane runs the connection's requests one at a time in arrival order,
	// and the data notifications that arrive while requests are queued
	// or running (after them, in order); credit and tcp/reset never wait
	// for it (host/lane.go).
	lane chan laneItem
	// laneNotes holds a place for each notification in the lane.
	laneNotes chan struct{}
	// laneLen counts items sent to lane and not yet done; only the reader
	// adds to it, so once it reads 0 the lane stays idle until it sends.
	laneLen atomic.Int64
	// inProgress counts requests admitted and not yet done: queued or
	// running in the lane, or dialling beside it. At most maxInProgress;
	// beyond it a request is answered Overloaded at once. A request
	// leaves it just before its answer is queued, so a client that waits
	// for each answer before its next request never meets the bound.
	inProgress    atomic.Int64
	maxInProgress int64
	// owed counts the answers admitted requests still owe: they leave it
	// once queued. awaitResponseRoom keeps room for them.
	owed     atomic.Int64
	laneDone chan struct{}
	// bad rate-limits the log lines of refused input (logBad).
	bad lograte.Limiter[badKind]

	// principal is who authenticated the transport (ServeConnAs), which a
	// reconnect must match.
	principal string
	// handover is set when a reconnect of the same client on another
	// connection closes this one: its state is retained for it.
	handover atomic.Bool
	// patient is set on stdio: a full protected queue blocks the reader
	// and never closes the connection (seed 003: stdio never closes).
	patient bool
	// writeLost is set when a write to the transport failed: the link
	// died under the host (a loss, as a read error is), not a close for
	// cause.
	writeLost atomic.Bool
	// ended is closed once the connection's end is processed (its state
	// retained or dropped).
	ended chan struct{}

	mu          sync.Mutex
	initialized bool
	clientID    string
	version     string // the negotiated protocol version
	resumeToken string // what a reconnect of this client must present
	// resumedFrom is the retained state a reconnect took, until its
	// subscriptions are resumed (the result queued).
	resumedFrom *retained
	subs        map[string]*subscription
}

func newConn(s *Server, mc transport.MessageConn) *conn {
	n := max(s.cfg.Delivery.MaxConcurrentRequests, 1)
	c := &conn{s: s, connID: adapters.ConnID(s.nextConnID.Add(1)), ended: make(chan struct{}), mc: mc, log: s.log.Named("conn").With("peer", mc.Peer()), subs: map[string]*subscription{},
		lane: make(chan laneItem, n+laneNotifications), laneNotes: make(chan struct{}, laneNotifications), maxInProgress: int64(n), laneDone: make(chan struct{})}
	c.sched = delivery.NewScheduler(delivery.SchedulerConfig{
		ProtectedMessages: s.cfg.Delivery.ProtectedQueueMessages,
		OrdinaryMessages:  s.cfg.Delivery.OrdinaryQueueMessages,
		Quantum:           delivery.UTF16Bytes(s.cfg.Delivery.MaximumFrameBytes),
		WriterReleases:    transport.WriteReleases(mc),
		Binary:            transport.CarriesBinary(mc),
		PartialBytes:      delivery.UTF16Bytes(s.cfg.Delivery.MaxPartialBytes),
	})
	return c
}

// serve runs the connection until it ends.
func (c *conn) serve(parent context.Context) error {
	c.ctx, c.stop = context.WithCancel(parent)
	defer c.stop()
	c.log.Debug("connection open")
	// A connection must initialize in time, or it only holds resources.
	initTimer := time.AfterFunc(initializeTimeout, func() {
		if !c.isInitialized() {
			c.log.Warn("closing connection: no initialize", "timeout", initializeTimeout)
			c.close(transport.CloseProtocolError, initTimeoutReason)
		}
	})
	defer initTimer.Stop()

	writerDone := make(chan error, 1)
	go func() {
		err := c.sched.Run(c.ctx, c.mc)
		switch {
		case errors.Is(err, errVersionMismatch):
			c.close(transport.CloseVersionMismatch, "no common protocol version")
		case !errors.Is(err, delivery.ErrClosed) && !errors.Is(err, context.Canceled):
			c.writeLost.Store(true) // the transport failed under us: a loss, not a close for cause
			c.close(transport.CloseInternalError, "write failed")
		}
		writerDone <- err
	}()

	go c.runLane()
	rc := jsonrpc2.NewConn(c.ctx, &objectStream{c: c}, c, jsonrpc2.SetLogger(c.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug})))
	select {
	case <-rc.DisconnectNotify():
	case <-c.ctx.Done():
	}
	c.close(transport.CloseNormal, "")
	_ = rc.Close()
	// The reader's end says how the client's side ended (readErr), which
	// decides whether its state is kept: wait for it, briefly. A write
	// that failed first may be a close the reader was about to return (a
	// detach whose close frame the transport answered and shut the socket
	// under our writer), not a loss.
	select {
	case <-rc.DisconnectNotify():
	case <-time.After(readerEndWait):
	}
	<-c.laneDone // its request in progress, if any, done before the connection's end is processed
	werr := <-writerDone
	c.flushBadLog()
	args := []any{"reason", endReason(c.closeErr, c.readErr.Load())}
	if werr != nil && !errors.Is(werr, delivery.ErrClosed) && !errors.Is(werr, context.Canceled) {
		args = append(args, "writer", werr)
	}
	if c.isInitialized() {
		c.log.Info("client disconnected", append([]any{"client", c.id()}, args...)...)
	} else {
		c.log.Debug("connection closed", args...)
	}
	return c.closeErr
}

// endReason says why a connection ended, for its log line: the reason we
// closed it with (closeErr), else how the client's side ended (readErr:
// a close, with its code and reason when not a normal one, or the
// transport's error, such as a connection lost without a close).
func endReason(closeErr error, readErr *error) string {
	if closeErr != nil {
		return "closed by the host: " + closeErr.Error()
	}
	if readErr == nil || *readErr == nil {
		return "closed by the host"
	}
	err := *readErr
	var ve *transport.ViolationError
	if errors.As(err, &ve) {
		return fmt.Sprintf("closed by the host with code %d: %v", ve.Code, err)
	}
	switch code := transport.CloseStatus(err); {
	case code == transport.CloseNormal || code == transport.CloseGoingAway:
		return "closed by the client"
	case code >= 0:
		if r := transport.CloseReason(err); r != "" {
			return fmt.Sprintf("closed by the client with code %d: %s", code, r)
		}
		return fmt.Sprintf("closed by the client with code %d", code)
	}
	return err.Error()
}

var errVersionMismatch = errors.New("host: no common protocol version")

// initTimeoutReason is the close reason of a connection that did not
// initialize within initializeTimeout.
const initTimeoutReason = "initialize not received in time"

// initializeTimeout is how long a connection may stay open without
// initialize (ping alone does not count).
const initializeTimeout = 30 * time.Second

// readerEndWait bounds the wait for the reader to return once the
// connection is closed (its transport is closed by then: it returns at
// once unless blocked elsewhere).
const readerEndWait = time.Second

// close ends the connection once, with a close code and reason for the peer.
func (c *conn) close(code transport.CloseCode, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode = code
		if reason != "" {
			c.closeErr = errors.New(reason)
		}
		c.sched.Close(nil)
		_ = c.mc.Close(code, reason)
		if c.stop != nil {
			c.stop()
		}
	})
}

// fail closes the connection because of err, choosing the code from it.
func (c *conn) fail(err error) {
	code := transport.CloseInternalError
	var v *delivery.ViolationError
	switch {
	case errors.As(err, &v):
		code = transport.CloseProtocolError
	case errors.Is(err, delivery.ErrProtectedFull):
		code = transport.ClosePeerTooSlow
	case errors.Is(err, delivery.ErrClosed):
		return
	}
	c.log.Warn("closing connection", "client", c.id(), "error", err)
	c.close(code, err.Error())
}

func (c *conn) id() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientID
}

// reply queues the error response e to the request id (a request refused
// or failed, or a message that could not be parsed, id null then) on the
// protected queue; a full queue closes the connection (c.fail).
func (c *conn) reply(id json.RawMessage, e *rpc.Error) {
	if err := c.sched.PushProtected(rpc.ErrorResponse(id, e)); err != nil {
		c.fail(err)
	}
}

// The write timeout (delivery.write_timeout, 30 s) bounds how long the
// protected queue may stay too full for one more response (seed 003
// egress): a client that reads, however it pipelines, drains it well
// within it; one that stopped reading for this long is closed with 4008.

// awaitResponseRoom waits, before a request is admitted or a bad message
// or Overloaded answered, until the protected queue has room for its
// response beyond those the requests in progress still owe, so that a
// response never finds it full (a client that kept reading but pipelined
// pings was closed with 4008). The reader waiting is the backpressure: the transport stops the
// client's writes. False (the connection closed) when it stays full past
// the write timeout or the connection ends.
func (c *conn) awaitResponseRoom() bool {
	var timer *time.Timer
	var expired <-chan time.Time
	for int64(c.sched.ProtectedRoom()) <= c.owed.Load() {
		if timer == nil && !c.patient {
			timer = time.NewTimer(c.s.cfg.Delivery.WriteTimeout)
			defer timer.Stop()
			expired = timer.C
		}
		select {
		case <-c.sched.ProtectedTaken():
		case <-expired:
			wait := c.s.cfg.Delivery.WriteTimeout.String()
			c.log.Warn("closing connection: responses not read", "client", c.id(), "waited", wait)
			c.close(transport.ClosePeerTooSlow, "responses not read within "+wait)
			return false
		case <-c.ctx.Done():
			return false
		}
	}
	return true
}

// objectStream is the jsonrpc2.ObjectStream of a connection (golibs.md §3):
// ReadObject reads raw messages from the transport, measures and classifies
// them, handles notifications (data, credit, unsubscribe) in arrival order
// (inline, or in the lane behind requests still in progress; credit and
// tcp/reset always inline), answers malformed input itself, and returns
// only requests to jsonrpc2. WriteObject queues responses on the
// protected queue.
type objectStream struct{ c *conn }

func (o *objectStream) ReadObject(v any) error {
	c := o.c
	for {
		raw, binary, err := transport.ReadMessageOrBinary(c.ctx, c.mc)
		if err == nil && binary {
			// A data message in its binary form (delivery/bytestream):
			// a notification parsed already, its text never built.
			h, perr := bytestream.ParseBinary(raw, transport.ReadLimit(c.mc))
			if perr != nil {
				transport.RecycleRead(c.mc, raw)
				err = transport.Violate(c.mc, perr)
			} else {
				if err := c.takeNotification(h, raw); err != nil {
					return err
				}
				continue
			}
		}
		if err != nil {
			first := err // a variable of its own: &err would move err to the heap on every read
			c.readErr.CompareAndSwap(nil, &first)
			violation, _ := transport.Violation(err)
			var ve *transport.ViolationError
			switch code := transport.CloseStatus(err); {
			case violation == transport.CloseMessageTooBig:
				c.log.Warn("message too big, closing", "client", c.id(), "limit_utf8_bytes", c.s.cfg.AHPReadLimit())
			case errors.As(err, &ve):
				c.log.Warn("bad message, closing", "client", c.id(), "code", int(ve.Code), "error", ve.Err.Error())
			case code == transport.CloseNormal || code == transport.CloseGoingAway || errors.Is(err, context.Canceled):
				// A clean end (the client closed, or we are closing): io.EOF
				// keeps jsonrpc2 from logging it as a protocol error. How
				// it ended is in readErr, for "client disconnected".
				return io.EOF
			}
			return err
		}
		// channel/credit, every few data messages the client reads, in
		// its usual form: read in place, no header, no allocation.
		if ch, consumed, ok := rpc.ParseCredit(raw); ok {
			if !c.isInitialized() {
				c.logBad(hclog.Warn, "notification before initialize ignored", "method", rpc.MethodChannelCredit)
				continue
			}
			if err := credit(c, c.subscriptionOf(ch), consumed, ch); err != nil {
				c.fail(err)
				return err
			}
			continue
		}
		h, perr := rpc.ParseHeader(raw)
		if perr != nil {
			c.logBad(hclog.Warn, "bad message", "code", perr.Code, "error", peerText(perr.Message))
			if !c.awaitResponseRoom() {
				return io.EOF
			}
			c.reply(h.ID, perr)
			continue
		}
		switch {
		case h.IsResponse():
			c.log.Debug("ignoring unexpected response", "client", c.id())
			continue
		case h.IsNotification():
			if err := c.takeNotification(h, raw); err != nil {
				return err
			}
			continue
		}
		return json.Unmarshal(raw, v)
	}
}

func (o *objectStream) WriteObject(obj any) error {
	text, err := rpc.Marshal(obj)
	if err != nil {
		return err
	}
	if err := o.c.sched.PushProtected(text); err != nil {
		go o.c.fail(err)
		return err
	}
	return nil
}

func (o *objectStream) Close() error {
	o.c.close(transport.CloseNormal, "")
	return nil
}

// takeNotification handles a client notification read by ReadObject, or
// queues it in the lane behind the requests still in progress there (a
// dispatchAction after the createTerminal it needs) without holding up the
// reader; channel/credit and tcp/reset never wait. A returned error (a
// violation) has closed the connection.
func (c *conn) takeNotification(h *rpc.Header, raw []byte) error {
	if c.laneLen.Load() > 0 && h.Method != rpc.MethodChannelCredit && h.Method != rpc.MethodTCPReset {
		c.enqueue(laneItem{h: h, raw: raw})
		return nil
	}
	return c.handleNotification(h, raw)
}

// handleNotification handles a client notification and recycles its
// text; a returned error (a violation) has closed the connection.
func (c *conn) handleNotification(h *rpc.Header, raw []byte) error {
	if err := c.notification(h, raw); err != nil {
		c.fail(err)
		return err
	}
	if h.Method == rpc.BinaryDataMethod {
		// Byte-stream data: the channel decoded it into a buffer of its
		// own (delivery/bytestream copies, whichever form came) or
		// dropped it: nothing refers to the message any more.
		transport.RecycleRead(c.mc, raw)
	}
	return nil
}

// notification handles a client notification. A returned error is a
// violation that closes the connection.
func (c *conn) notification(h *rpc.Header, raw []byte) error {
	if !c.isInitialized() {
		c.logBad(hclog.Warn, "notification before initialize ignored", "method", peerText(h.Method))
		return nil
	}
	sub := c.subscription(h.Channel)
	switch h.Method {
	case rpc.MethodChannelCredit: // in a form other than ReadObject's fast path's
		var p rpc.ChannelCreditParams
		if e := rpc.DecodeParams(h.Params, &p); e != nil {
			c.logBad(hclog.Warn, "bad channel/credit", "error", peerText(e.Message))
			return nil
		}
		return credit(c, sub, p.ConsumedBytes, h.Channel)
	case rpc.MethodUnsubscribe:
		if sub != nil {
			c.unsubscribe(sub, false)
		} else if ch := c.s.channel(h.Channel); ch != nil {
			ch.Release(c.connID) // e.g. a TCP connection never subscribed
		}
		return nil
	}
	if rpc.IsControlMethod(h.Method) {
		if sub != nil {
			sub.ch.Control(sub, h)
			return nil
		}
		c.log.Debug("control message without a subscription", "method", peerText(h.Method), "channel", peerText(h.Channel))
		return nil
	}
	// A data message. On a windowed subscription it counts (seed 000).
	var size delivery.UTF16Bytes
	if sub != nil && sub.windowed() {
		size = h.Size(raw)
		if err := sub.in.Receive(size); err != nil {
			return err
		}
		if h.Method != rpc.MethodChannelFrame {
			if err := sub.in.CheckWhole(); err != nil {
				return err
			}
		} else {
			var p rpc.ChannelFrameParams
			if e := rpc.DecodeParams(h.Params, &p); e != nil {
				return &delivery.ViolationError{Kind: delivery.BadFragment, Channel: sub.channel}
			}
			msg, complete, err := sub.in.Frame(p.Data, p.Final, size)
			if err != nil || !complete {
				return err
			}
			inner, perr := rpc.ParseHeader(msg)
			if perr != nil || !inner.IsNotification() {
				return &delivery.ViolationError{Kind: delivery.BadFragment, Channel: sub.channel}
			}
			if inner.Channel != sub.channel {
				return &delivery.ViolationError{Kind: delivery.ChannelMismatch, Channel: sub.channel}
			}
			h = inner
		}
	}
	release := func() {
		if sub != nil && sub.in != nil {
			sub.in.Release(size)
		}
	}
	m := adapters.Message{ClientID: c.id(), Conn: c.connID, Header: h, Release: release}
	var ch adapters.Channel
	if sub != nil {
		m.Sub, ch = sub, sub.ch
	} else if h.Method == rpc.MethodDispatchAction {
		ch = c.s.channel(h.Channel) // an action needs no subscription
	}
	if ch == nil {
		// Usually input racing a disposeTerminal: harmless.
		c.log.Debug("data message for a channel without a subscription ignored", "method", peerText(h.Method), "channel", peerText(h.Channel))
		release()
		return nil
	}
	ch.Receive(m)
	return nil
}

// credit applies a channel/credit to sub, the subscription of channel
// (nil if there is none); channel is the URI as a header holds it or a
// view of the message (rpc.ParseCredit), copied only to be logged. A
// returned error is a violation that closes the connection.
func credit[T ~string | ~[]byte](c *conn, sub *subscription, consumed delivery.UTF16Bytes, channel T) error {
	if sub == nil || !sub.windowed() {
		c.log.Debug("credit for a channel without a windowed subscription", "channel", peerText(string(channel)))
		return nil
	}
	return sub.out.Credit(consumed)
}

func (c *conn) isInitialized() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.initialized
}

// Handle implements jsonrpc2.Handler, on the reader: a request is
// admitted to the lane when fewer than maxInProgress are in progress, else
// answered at once with -32050 Overloaded (seed 003 ingress: reject,
// don't buffer), so the reader never waits for a request to run.
func (c *conn) Handle(ctx context.Context, rc *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if !c.awaitResponseRoom() {
		return
	}
	if n := c.inProgress.Load(); n >= c.maxInProgress {
		id, _ := json.Marshal(req.ID)
		c.logBad(hclog.Debug, "request refused: overloaded", "code", rpc.CodeOverloaded, "method", peerText(req.Method), "bound", c.maxInProgress)
		c.s.counts.overloaded.Add(1)
		c.reply(id, rpc.OverloadedError(c.maxInProgress))
		return
	}
	c.inProgress.Add(1)
	c.owed.Add(1)
	c.enqueue(laneItem{req: req, rc: rc, ctx: ctx})
}

// handleRequest runs one request in the lane and answers it; a dial runs
// beside the lane and answers when done. Each admitted request is
// answered exactly once: it leaves inProgress just before its answer is
// queued, and owed just after (the room awaitResponseRoom kept for it is
// taken first).
func (c *conn) handleRequest(ctx context.Context, rc *jsonrpc2.Conn, req *jsonrpc2.Request) {
	id, _ := json.Marshal(req.ID)
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	if req.Method == rpc.MethodCreateTCPConnection && c.isInitialized() {
		// A dial can take up to tcp.dial_timeout: run it beside the lane
		// so the requests after it do not wait for it.
		go func() {
			defer c.owed.Add(-1)
			result, e := c.createTCPConnection(params)
			c.inProgress.Add(-1)
			if e != nil { // logged by createTcpConnection
				c.reply(id, e)
				return
			}
			if err := rc.Reply(ctx, req.ID, result); err != nil {
				c.fail(err)
			}
		}()
		return
	}
	defer c.owed.Add(-1)
	if c.s.requestHook != nil {
		c.s.requestHook(req.Method)
	}
	result, after, e := c.request(req.Method, params)
	c.inProgress.Add(-1)
	if e != nil {
		if e.Code != rpc.CodeMethodNotFound && e.Code != rpc.CodeUnsupportedProtocolVersion && req.Method != rpc.MethodCreateTCPConnection {
			c.logBad(hclog.Info, "request failed", "method", peerText(req.Method), "code", e.Code, "error", peerText(e.Message))
		}
		c.reply(id, e)
	} else if err := rc.Reply(ctx, req.ID, result); err != nil {
		c.fail(err)
		return
	}
	if after != nil {
		after()
	}
}

// request dispatches one request. after, if not nil, runs once the
// response is queued (subscriptions start their data after their result).
func (c *conn) request(method string, params json.RawMessage) (result any, after func(), e *rpc.Error) {
	if method == rpc.MethodPing {
		return nil, nil, nil
	}
	if method == rpc.MethodInitialize {
		return c.initialize(params)
	}
	if method == rpc.MethodReconnect {
		return c.reconnect(params)
	}
	if !c.isInitialized() {
		return nil, nil, rpc.Errorf(rpc.CodeNotInitialized, "%s before initialize: send initialize first", method)
	}
	switch method {
	case rpc.MethodSubscribe:
		return c.subscribe(params)
	case rpc.MethodCreateTerminal:
		r, e := c.createTerminal(params)
		return r, nil, e
	case rpc.MethodDisposeTerminal:
		r, e := c.disposeTerminal(params)
		return r, nil, e
	case rpc.MethodCreateTCPConnection:
		r, e := c.createTCPConnection(params)
		return r, nil, e
	case rpc.MethodChannelPage:
		r, e := c.channelPage(params)
		return r, nil, e
	}
	return nil, nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", method)
}

func (c *conn) initialize(params json.RawMessage) (any, func(), *rpc.Error) {
	var p rpc.InitializeParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, nil, e
	}
	if len(p.ProtocolVersions) == 0 {
		return nil, nil, rpc.Missing("protocolVersions")
	}
	if e := rpc.CheckClientID("clientId", p.ClientID); e != nil {
		return nil, nil, e
	}
	if c.isInitialized() {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidRequest, "already initialized")
	}
	version := pickVersion(p.ProtocolVersions)
	if version == "" {
		data, _ := json.Marshal(rpc.UnsupportedVersionData{SupportedVersions: SupportedVersions})
		offered := strings.Join(p.ProtocolVersions, ", ")
		e := &rpc.Error{Code: rpc.CodeUnsupportedProtocolVersion,
			Message: fmt.Sprintf("unsupported protocol version: offered %s, host supports %s", peerText(offered), strings.Join(SupportedVersions, ", ")),
			Data:    data}
		c.log.Warn("no common protocol version, closing", "offered", peerText(offered))
		return nil, func() { c.sched.CloseWhenFlushed(errVersionMismatch) }, e
	}
	c.mu.Lock()
	c.initialized = true
	c.clientID = p.ClientID
	c.version = version
	c.resumeToken = newResumeToken()
	c.mu.Unlock()
	c.s.clientArrived(p.ClientID)
	c.s.startedOver(p.ClientID, c.principal)
	name := ""
	if p.ClientInfo != nil {
		name = strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
	}
	c.log.Info("client initialized", "client", p.ClientID, "version", version, "client_name", peerText(name))

	res := rpc.InitializeResult{
		ProtocolVersion:  version,
		ServerSeq:        c.s.journal.Seq(),
		ServerInfo:       &rpc.ServerInfo{Name: "sidecar", Version: Version},
		Snapshots:        []rpc.Snapshot{},
		DefaultDirectory: c.s.defaultDirectory(),
		Telemetry:        c.s.telemetry.Capability(),
		TCPConnections:   c.s.tcpCapability(),
		Resume:           c.s.resumeInfo(c.resumeToken),
	}
	var after []func()
	for _, uri := range p.InitialSubscriptions {
		ch := c.s.channel(uri)
		if ch == nil || c.subscription(uri) != nil || !c.mayUse(ch) || ch.Traits().Delivery == adapters.WindowedOnly {
			continue
		}
		_, snap, start := c.startOrdinary(ch)
		if snap != nil { // the array holds state-bearing channels only
			res.Snapshots = append(res.Snapshots, *snap)
		}
		after = append(after, start)
	}
	return res, func() {
		for _, f := range after {
			f()
		}
	}, nil
}

// pickVersion returns the client's first offered version within
// SupportedVersions (^0.5.0: 0.5.x).
func pickVersion(offered []string) string {
	for _, v := range offered {
		if strings.HasPrefix(v, "0.5.") {
			return v
		}
	}
	return ""
}

// channel returns the channel named uri, or nil.
func (s *Server) channel(uri string) adapters.Channel {
	if uri == rpc.RootChannel {
		return s.root
	}
	if t := s.terminal(uri); t != nil {
		return t
	}
	switch {
	case strings.HasPrefix(uri, rpc.TCPScheme):
		if tc := s.tcp.Channel(uri); tc != nil {
			return tc
		}
	case strings.HasPrefix(uri, rpc.TelemetryScheme):
		if ch := s.telemetry.Channel(uri); ch != nil {
			return ch
		}
	}
	return nil
}

// mayUse reports whether c may subscribe to ch: to any other connection
// a channel owned by one (TCP) does not exist.
func (c *conn) mayUse(ch adapters.Channel) bool {
	owner := ch.Traits().Owner
	return owner == 0 || owner == c.connID
}

func (c *conn) subscribe(params json.RawMessage) (any, func(), *rpc.Error) {
	var p rpc.SubscribeParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, nil, e
	}
	if p.Channel == "" {
		return nil, nil, rpc.Missing("channel")
	}
	ch := c.s.channel(p.Channel)
	if ch == nil || !c.mayUse(ch) {
		return nil, nil, rpc.Errorf(rpc.CodeNotFound, "no such channel: %s", p.Channel)
	}
	traits := ch.Traits()
	maxLimits := c.s.hostMax
	if traits.Limits != nil {
		maxLimits = *traits.Limits
	}
	var limits delivery.Limits
	windowed := false
	if p.FlowControl != nil && p.FlowControl.Receive != nil {
		l, err := delivery.Negotiate(p.Channel, *p.FlowControl.Receive, maxLimits)
		var lerr *delivery.LimitsError
		switch {
		case err == nil:
			limits, windowed = l, true
			if traits.Limits != nil { // a TCP channel: within the client's budget
				limits = c.budgetWindow(p.Channel, limits, 0)
			}
		case errors.As(err, &lerr) && p.FlowControl.Receive.Validate() != nil:
			// The offer itself breaks seed 000 (maximumFrameBytes >= 1024,
			// positive values): a client error, not a decline.
			return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: flowControl.receive: %v", p.FlowControl.Receive.Validate())
		case errors.Is(err, delivery.ErrDecline):
			c.log.Info("windowed delivery declined, using ordinary delivery", "channel", peerText(p.Channel), "reason", peerText(err.Error()))
		default:
			return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: flowControl.receive: %v", err)
		}
	}
	if traits.Delivery == adapters.WindowedOnly && !windowed {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s requires windowed delivery: offer flowControl.receive", p.Channel)
	}
	old := c.subscription(p.Channel)
	if old != nil && old.windowed() && windowed {
		// Re-subscribe: counters continue, only the limits change.
		old.out.SetLimits(limits)
		old.in.SetLimits(limits)
		return rpc.SubscribeResult{FlowControl: &rpc.NegotiatedFlowControl{ClientReceive: limits, HostReceive: limits}}, nil, nil
	}
	if old != nil {
		c.unsubscribe(old, false)
	}
	if n := c.subCount(); n >= c.s.cfg.Delivery.MaxSubscriptions {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidRequest, "too many subscriptions on this connection (limit %d)", c.s.cfg.Delivery.MaxSubscriptions)
	}
	if !windowed {
		_, snap, start := c.startOrdinary(ch)
		return rpc.SubscribeResult{Snapshot: snap}, start, nil
	}
	res := rpc.SubscribeResult{FlowControl: &rpc.NegotiatedFlowControl{ClientReceive: limits, HostReceive: limits}}
	return res, func() { c.startWindowed(ch, limits) }, nil
}
