package host

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/sourcegraph/jsonrpc2"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

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

// handleRequest runs one request in the lane and answers it; one that a
// kind serves beside the lane (adapters.Request.Beside: a dial) runs in a
// goroutine of its own, which serve joins, and answers when done. Each
// admitted request is answered exactly once: it leaves inProgress just
// before its answer is queued, and owed just after (the room
// awaitResponseRoom kept for it is taken first).
func (c *conn) handleRequest(ctx context.Context, rc *jsonrpc2.Conn, req *jsonrpc2.Request) {
	id, _ := json.Marshal(req.ID)
	var params json.RawMessage
	if req.Params != nil {
		params = *req.Params
	}
	if kr, ok := c.s.kinds.requests[req.Method]; ok && kr.Beside && c.isInitialized() {
		c.beside.Add(1)
		go func() {
			defer c.beside.Done()
			defer c.owed.Add(-1)
			result, e := c.serveKind(req.Method, kr, params)
			c.inProgress.Add(-1)
			if e != nil { // logged by the kind
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
		c.s.requestHook(req.Method, func() {
			c.writeLost.Store(true)
			c.close(transport.CloseInternalError, "write failed")
		})
	}
	result, after, e := c.request(req.Method, params)
	c.inProgress.Add(-1)
	if e != nil {
		if e.Code != rpc.CodeMethodNotFound && e.Code != rpc.CodeUnsupportedProtocolVersion {
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

// request dispatches one request: the host's own (the control plane,
// subscribe, channel/page), else the kind's that serves the method. after,
// if not nil, runs once the response is queued (subscriptions start their
// data after their result).
func (c *conn) request(method string, params json.RawMessage) (result any, after func(), e *rpc.Error) {
	switch method {
	case rpc.MethodPing:
		return nil, nil, nil
	case rpc.MethodInitialize:
		return c.initialize(params)
	case rpc.MethodReconnect:
		return c.reconnect(params)
	}
	if !c.isInitialized() {
		return nil, nil, rpc.Errorf(rpc.CodeNotInitialized, "%s before initialize: send initialize first", method)
	}
	switch method {
	case rpc.MethodSubscribe:
		return c.subscribe(params)
	case rpc.MethodChannelPage:
		r, e := c.channelPage(params)
		return r, nil, e
	}
	if kr, ok := c.s.kinds.requests[method]; ok {
		r, e := c.serveKind(method, kr, params)
		return r, nil, e
	}
	return nil, nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", method)
}

// serveKind serves a kind's request once the caller's role allows its
// permission (adapters.Request.Permission; none named: owners only),
// else refuses it with -32009 naming the permission (logged by the
// guard).
func (c *conn) serveKind(method string, kr adapters.Request, params json.RawMessage) (any, *rpc.Error) {
	caller := c.caller()
	perm := kr.Permission
	if perm == "" {
		perm = auth.Unlisted
	}
	if e := c.s.guard.CheckOn(caller.Identity, perm, method); e != nil {
		return nil, e
	}
	return kr.Serve(c.ctx, caller, params)
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
	if c.s.retainedFor(p.ClientID) {
		// Its state waits for its own reconnect: an initialize never ends
		// or takes it (another client naming it, say, from the clientIds
		// the root catalogue lists).
		data, _ := json.Marshal(rpc.ResumeErrorData{Kind: "clientIdInUse"})
		return nil, nil, &rpc.Error{Code: rpc.CodeAlreadyExists, Data: data,
			Message: fmt.Sprintf("clientId %s is in use: its state is kept for its reconnect; reconnect, or initialize with another clientId", peerText(p.ClientID))}
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
	// A live connection of another principal holding the clientId keeps
	// it, as its retained state would (checked and taken under s.mu, so
	// two initializes cannot both pass).
	c.s.mu.Lock()
	for o := range c.s.conns {
		if o != c && o.isInitialized() && o.id() == p.ClientID && o.principal != c.principal {
			c.s.mu.Unlock()
			data, _ := json.Marshal(rpc.ResumeErrorData{Kind: "clientIdInUse"})
			return nil, nil, &rpc.Error{Code: rpc.CodeAlreadyExists, Data: data,
				Message: fmt.Sprintf("clientId %s is in use by a connection of another principal; initialize with another clientId", peerText(p.ClientID))}
		}
	}
	c.mu.Lock()
	c.initialized = true
	c.clientID = p.ClientID
	c.capabilities = p.Capabilities
	c.version = version
	c.resumeToken = newResumeToken()
	c.mu.Unlock()
	c.s.mu.Unlock()
	c.s.clientArrived(p.ClientID)
	name := ""
	if p.ClientInfo != nil {
		name = strings.TrimSpace(p.ClientInfo.Name + " " + p.ClientInfo.Version)
	}
	c.log.Info("client initialized", "client", p.ClientID, "version", version, "client_name", peerText(name))

	res := rpc.InitializeResult{
		ProtocolVersion: version,
		ServerSeq:       c.s.journal.Seq(),
		ServerInfo:      &rpc.ServerInfo{Name: "sidecar", Version: Version},
		Snapshots:       []rpc.Snapshot{},
		Resume:          c.s.resumeInfo(c.resumeToken),
		Identity:        c.wireIdentity(),
	}
	c.s.kinds.advertise(&res)
	var after []func()
	for _, uri := range p.InitialSubscriptions {
		ch := c.s.channel(uri, c.caller())
		if ch == nil || c.subscription(uri) != nil || ch.Traits().Delivery == adapters.WindowedOnly {
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
