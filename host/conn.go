package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/lograte"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// conn is one client connection: a reader that classifies every message
// (reader.go: credit inline; requests, admitted or answered Overloaded by
// jsonrpc2's handler on the reader, run in the lane; data inline, or in
// the lane after the requests before it), the lane (lane.go), and the
// delivery Scheduler as its only writer. serve owns its life: it starts
// and joins every goroutine of the connection (the writer, the lane, the
// requests that run beside the lane) and is the one that closes it when
// something else failed (failLater).
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
	// beside tracks the requests that run beside the lane (a dial): serve
	// waits for them before the connection's end is processed.
	beside sync.WaitGroup
	// failed (1-slot) wakes serve to close the connection for failErr,
	// which code that must not close it itself (under a lock, on the
	// journal's listener) set with failLater.
	failed  chan struct{}
	failErr atomic.Pointer[error]
	// bad rate-limits the log lines of refused input (logBad).
	bad lograte.Limiter[badKind]

	// principal is who authenticated the transport (ServeConnAs), which a
	// reconnect must match: identity.Name.
	principal string
	// identity is who authenticated the transport and its role, which
	// every request is checked against.
	identity auth.Identity
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
	// unauthorized is set when the host closed the connection because
	// its credential was revoked or expired: nothing is retained.
	unauthorized atomic.Bool
	// ended is closed once the connection's end is processed (its state
	// retained or dropped).
	ended chan struct{}

	mu          sync.Mutex
	initialized bool
	clientID    string
	version     string // the negotiated protocol version
	resumeToken string // what a reconnect of this client must present
	// capabilities are the client's ClientCapabilities from initialize
	// (raw JSON; a reconnect keeps them), given to kinds in Caller.
	capabilities json.RawMessage
	// resumedFrom is the retained state a reconnect took, until its
	// subscriptions are resumed (the result queued).
	resumedFrom *retained
	subs        map[string]*subscription
}

func newConn(s *Server, mc transport.MessageConn) *conn {
	n := max(s.cfg.Delivery.MaxConcurrentRequests, 1)
	c := &conn{s: s, connID: adapters.ConnID(s.nextConnID.Add(1)), ended: make(chan struct{}), mc: mc, log: s.log.Named("conn").With("peer", mc.Peer()), subs: map[string]*subscription{},
		lane: make(chan laneItem, n+laneNotifications), laneNotes: make(chan struct{}, laneNotifications), maxInProgress: int64(n), laneDone: make(chan struct{}),
		failed: make(chan struct{}, 1)}
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
	timeout := c.s.cfg.Listener.InitializeTimeout
	if timeout <= 0 {
		timeout = defaultInitializeTimeout
	}
	initTimer := time.AfterFunc(timeout, func() {
		if !c.isInitialized() {
			c.log.Warn("closing connection: no initialize", "timeout", timeout)
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
	case <-c.failed:
		c.fail(*c.failErr.Load())
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
	<-c.laneDone    // its request in progress, if any, done before the connection's end is processed
	c.beside.Wait() // and those beside the lane (a dial ends with c.ctx)
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
// initialize within listener.initialize_timeout.
const initTimeoutReason = "initialize not received in time"

// defaultInitializeTimeout is how long a connection may stay open
// without initialize (ping alone does not count) when the config says
// nothing (listener.initialize_timeout).
const defaultInitializeTimeout = 10 * time.Second

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

// failLater closes the connection because of err (as fail), from serve:
// for code that must not close it itself (it holds a lock the close would
// take, or runs as the journal's listener). The first error wins.
func (c *conn) failLater(err error) {
	if errors.Is(err, delivery.ErrClosed) || !c.failErr.CompareAndSwap(nil, &err) {
		return
	}
	c.failed <- struct{}{} // the first and only send: never blocks
}

// caller is what kinds see of the connection (adapters.Caller).
func (c *conn) caller() adapters.Caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return adapters.Caller{ClientID: c.clientID, Principal: c.principal, Identity: c.identity, Conn: c.connID, Capabilities: c.capabilities}
}

// wireIdentity is the identity extension of the initialize and
// reconnect results: the connection's principal and role.
func (c *conn) wireIdentity() *rpc.Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &rpc.Identity{Principal: c.identity.Name, Role: string(c.identity.Role)}
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

func (c *conn) isInitialized() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.initialized
}
