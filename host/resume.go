package host

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tidwall/gjson"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// Reconnection (seed 000 "Reconnection", DESIGN.md §6): a client whose
// transport was lost keeps its state here for journal.reconnect_grace,
// bound to the principal that authenticated it and to the resume token
// its initialize result carried; a reconnect presenting both resumes it.

const (
	// maxRetained bounds the clients whose state is kept at once; past it
	// the one lost longest ago is dropped. Each costs a few hundred bytes
	// plus its parked subscriptions (at most delivery.max_subscriptions),
	// whose data is the journal's and the windows' anyway.
	maxRetained = 256
	// handoverWait bounds how long a reconnect waits for the old
	// connection of its client, still open, to be closed and parked.
	handoverWait = 5 * time.Second
	// resumeTokenBytes is the entropy of a resume token.
	resumeTokenBytes = 32
	// defaultParkedPacing bounds how long a lost claim holder's parked stream
	// keeps pacing its terminal: a blip (a cut, a Wi-Fi change) loses
	// nothing, the program blocking meanwhile; past it the program runs
	// on (a build does not wait for a laptop closed over lunch) and its
	// output goes to the journal and the scrollback, so a later resume is
	// a replay while the journal holds it, else a snapshot.
	defaultParkedPacing = time.Minute
)

// retained is one client's state between the loss of its transport and a
// reconnect (or the end of its grace).
type retained struct {
	clientID  string
	principal string
	identity  auth.Identity // who held it (Server.Revoke)
	token     string
	version   string
	// capabilities are the client's from initialize, which a reconnect
	// does not repeat.
	capabilities json.RawMessage
	lostAt       time.Time
	// parked are its windowed subscriptions to journaled channels (the
	// root, terminals), still registered with their channels: a parked
	// terminal subscription keeps its place and its claim holder's pacing
	// (its window is not credited, so the program blocks once the window
	// or the read-ahead is full), and its cursor says what the client had.
	parked map[string]*subscription
	// streams are its parked byte-stream channels (TCP: the socket stays
	// open, nothing is read beyond the window): each is reclaimed by a
	// reconnect that asks for it with its offsets, or abandoned (reset).
	streams map[string]adapters.Resumable
	timer   *time.Timer
	unpace  *time.Timer // ends the parked streams' pacing (parkedPacing)
}

// retainedState is the server's retained clients.
type retainedState struct {
	mu      sync.Mutex
	clients map[string]*retained
}

// newResumeToken returns an opaque, unguessable token (base64url).
func newResumeToken() string {
	b := make([]byte, resumeTokenBytes)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// resumeInfo is the resume extension of the initialize and reconnect
// results, nil when resuming is off.
func (s *Server) resumeInfo(token string) *rpc.Resume {
	g := s.cfg.Journal.ReconnectGrace
	if g <= 0 {
		return nil
	}
	return &rpc.Resume{Token: token, GraceMs: g.Milliseconds()}
}

// shouldRetain reports whether c's state is kept for a reconnect: it was
// initialized, resuming is on, the host is not shutting down, and its
// transport was lost (a read or write failed, with no close from the
// client and no close by the host for cause) or handed over to a
// reconnect.
func (s *Server) shouldRetain(c *conn) bool {
	if !c.isInitialized() || s.cfg.Journal.ReconnectGrace <= 0 || c.unauthorized.Load() {
		return false
	}
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		return false
	}
	if c.handover.Load() {
		return true
	}
	if p := c.readErr.Load(); p != nil && *p != nil {
		if _, violation := transport.Violation(*p); violation {
			return false // a message too big, not UTF-8, a protocol error: not a loss
		}
		switch transport.CloseStatus(*p) {
		case transport.CloseNormal, transport.CloseGoingAway:
			// The client left (a detach, the end of a run), whatever
			// our writes met after its close.
			return false
		}
		if c.closeErr == nil {
			return true // lost under the reader
		}
	}
	if c.writeLost.Load() {
		return true // lost under the writer
	}
	return false // closed by the host for cause: a violation, too slow, a timeout
}

// retain parks c's subscriptions for a reconnect: windowed ones to
// journaled channels stay registered (their cursors are what the client
// had), the others end now (ordinary ones recover by lastSeenServerSeq,
// telemetry live); TCP channels are parked (adapters.Resumable) and
// resume by byte offsets.
func (s *Server) retain(c *conn) {
	r := &retained{
		clientID: c.id(), principal: c.principal, identity: c.identity, token: c.resumeToken, version: c.version, capabilities: c.capabilities,
		lostAt: time.Now(), parked: map[string]*subscription{}, streams: map[string]adapters.Resumable{},
	}
	c.mu.Lock()
	subs := c.subs
	c.subs = map[string]*subscription{}
	c.mu.Unlock()
	for _, sub := range subs {
		if sub.windowed() && sub.ch.Traits().Delivery == adapters.Journaled {
			r.parked[sub.channel] = sub
			continue
		}
		if rs, ok := sub.ch.(adapters.Resumable); ok && sub.windowed() && rs.Park(sub) {
			r.streams[sub.channel] = rs // its subscription ends; the channel waits
		}
		c.endSubscription(sub, false)
	}
	for _, sub := range r.parked {
		if rf, ok := sub.ch.(adapters.Refresher); ok {
			rf.Refresh() // its subscriber is away now
		}
	}
	s.keep(r)
	s.log.Info("client state kept for reconnect", "client", r.clientID, "grace", s.cfg.Journal.ReconnectGrace.String(), "subscriptions", len(subs), "parked", len(r.parked), "streams", len(r.streams))
}

// keep files r among the retained clients for a full grace from now (an
// older state of the same client gives way to it, and the one lost
// longest ago to it past maxRetained), with its timers: the grace's end,
// and the end of its parked streams' pacing.
func (s *Server) keep(r *retained) {
	grace := s.cfg.Journal.ReconnectGrace
	r.lostAt = time.Now()
	var dropped []*retained
	s.ret.mu.Lock()
	if s.ret.clients == nil {
		s.ret.clients = map[string]*retained{}
	}
	if old := s.ret.clients[r.clientID]; old != nil {
		dropped = append(dropped, old) // two connections of one client: the last one counts
		delete(s.ret.clients, r.clientID)
	}
	for len(s.ret.clients) >= maxRetained {
		var oldest *retained
		for _, x := range s.ret.clients {
			if oldest == nil || x.lostAt.Before(oldest.lostAt) {
				oldest = x
			}
		}
		delete(s.ret.clients, oldest.clientID)
		dropped = append(dropped, oldest)
		s.log.Warn("retained client state dropped: too many clients reconnecting", "client", oldest.clientID, "limit", maxRetained)
	}
	r.timer = time.AfterFunc(grace, func() { s.expire(r, "its grace period ended") })
	parked := make([]*subscription, 0, len(r.parked))
	for _, sub := range r.parked {
		parked = append(parked, sub)
	}
	r.unpace = time.AfterFunc(min(s.parkedPacing, grace), func() {
		// The parked streams stop pacing: a removed stream holds no
		// reader back; the subscriptions, their cursors and claims stay.
		for _, sub := range parked {
			sub.out.Remove()
		}
	})
	s.ret.clients[r.clientID] = r
	s.ret.mu.Unlock()
	for _, x := range dropped {
		s.endRetained(x)
	}
}

// expire drops r, if it is still kept, once its grace has ended.
func (s *Server) expire(r *retained, why string) {
	s.ret.mu.Lock()
	mine := s.ret.clients[r.clientID] == r
	if mine {
		delete(s.ret.clients, r.clientID)
	}
	s.ret.mu.Unlock()
	if !mine {
		return
	}
	s.log.Info("client state dropped", "client", r.clientID, "reason", why, "lost_for", time.Since(r.lostAt).Round(time.Second).String())
	s.endRetained(r)
}

// stopTimers stops r's grace and pacing timers.
func (r *retained) stopTimers() {
	r.timer.Stop()
	r.unpace.Stop()
}

// end stops r's timers, ends its parked subscriptions and resets its
// parked streams.
func (r *retained) end() {
	r.stopTimers()
	for _, sub := range r.parked {
		sub.c.endSubscription(sub, false)
	}
	r.abandonStreams("not resumed within the reconnect grace")
}

// abandonStreams resets the parked streams not reclaimed.
func (r *retained) abandonStreams(why string) {
	for uri, rs := range r.streams {
		rs.Abandon(why)
		delete(r.streams, uri)
	}
}

// endRetained ends r and, when the client has no connection, passes on
// the claims it held, as when a holder leaves.
func (s *Server) endRetained(r *retained) {
	r.end()
	if !s.clientConnected(r.clientID) {
		s.passOnClaims(r.clientID)
	}
}

// retainedFor reports whether clientID's state is kept.
func (s *Server) retainedFor(clientID string) bool {
	s.ret.mu.Lock()
	defer s.ret.mu.Unlock()
	return s.ret.clients[clientID] != nil
}

// dropRetained ends all kept state (shutdown).
func (s *Server) dropRetained() {
	s.ret.mu.Lock()
	all := make([]*retained, 0, len(s.ret.clients))
	for _, r := range s.ret.clients {
		all = append(all, r)
	}
	s.ret.clients = nil
	s.ret.mu.Unlock()
	for _, r := range all {
		r.end()
	}
}

// Errors of reconnect.
func resumeExpired(clientID string) *rpc.Error {
	data, _ := json.Marshal(rpc.ResumeErrorData{Kind: "expired"})
	return &rpc.Error{Code: rpc.CodeNotFound, Message: fmt.Sprintf("nothing to resume for client %s: its grace period ended or the host restarted", clientID), Data: data}
}

func resumeRefused(clientID string) *rpc.Error {
	data, _ := json.Marshal(rpc.ResumeErrorData{Kind: "refused"})
	return &rpc.Error{Code: rpc.CodePermissionDenied, Message: fmt.Sprintf("cannot resume client %s: another principal, or not its resume token", clientID), Data: data}
}

// mayResume is the rule of reconnect (docs/protocol.md "reconnect"): a
// state (or a live connection) initialized by principal ownerPrincipal
// with resume token ownerToken may be resumed by principal with token when
// the principals are the same and the token is the state's, or absent: a
// standard AHP client sends none, and the same principal could attach to
// and kill that client's terminals anyway, so a missing token gives
// nothing away. Another principal never resumes it, and a wrong token
// never does (a guess).
func mayResume(ownerPrincipal, ownerToken, principal, token string) bool {
	return principal == ownerPrincipal && (token == "" || transport.TokenEqual(token, ownerToken))
}

// claimRetained takes clientID's retained state for a reconnect from
// principal with token, or says why not (the state stays kept when the
// reconnect is refused: a wrong guess destroys nothing).
func (s *Server) claimRetained(clientID, principal, token string) (*retained, *rpc.Error) {
	s.ret.mu.Lock()
	defer s.ret.mu.Unlock()
	r := s.ret.clients[clientID]
	if r == nil {
		return nil, resumeExpired(clientID)
	}
	if !mayResume(r.principal, r.token, principal, token) {
		return nil, resumeRefused(clientID)
	}
	delete(s.ret.clients, clientID)
	r.stopTimers()
	return r, nil
}

// handOver closes clientID's connections that the host still thinks open
// (a reconnect can arrive before the old transport's loss is noticed: a
// laptop that slept), once the reconnect proves it is theirs, and waits
// until each is parked. A connection the reconnect may not resume
// (mayResume) is left alone and the reconnect refused.
func (s *Server) handOver(clientID, principal, token string, self *conn) *rpc.Error {
	s.mu.Lock()
	var old []*conn
	for c := range s.conns {
		if c != self && c.isInitialized() && c.id() == clientID {
			old = append(old, c)
		}
	}
	s.mu.Unlock()
	for _, c := range old {
		if !mayResume(c.principal, c.resumeToken, principal, token) {
			return resumeRefused(clientID)
		}
	}
	for _, c := range old {
		c.handover.Store(true)
		c.log.Info("closing connection: its client reconnected on another one", "client", clientID)
		c.close(transport.CloseGoingAway, "resumed on another connection")
		select {
		case <-c.ended:
		case <-time.After(handoverWait):
			s.log.Warn("old connection not parked in time; resuming without it", "client", clientID, "wait", handoverWait.String())
		}
	}
	return nil
}

// reconnect is reconnect (docs/protocol.md): instead of initialize, resume
// the client's retained state on this connection.
func (c *conn) reconnect(params json.RawMessage) (any, func(), *rpc.Error) {
	var p rpc.ReconnectParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, nil, e
	}
	if e := rpc.CheckClientID("clientId", p.ClientID); e != nil {
		return nil, nil, e
	}
	if c.isInitialized() {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidRequest, "already initialized")
	}
	wanted := map[string]bool{}
	for _, uri := range p.Subscriptions {
		wanted[uri] = true
	}
	items := map[string]rpc.ReconnectWindowItem{}
	if p.Windows != nil {
		for _, it := range p.Windows.Items {
			if !wanted[it.Channel] {
				return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: windows.items channel %s is not in subscriptions", it.Channel)
			}
			if _, dup := items[it.Channel]; dup {
				return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: windows.items lists %s twice", it.Channel)
			}
			if it.FlowControl == nil || it.FlowControl.Receive == nil {
				return nil, nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: windows.items %s needs flowControl.receive", it.Channel)
			}
			items[it.Channel] = it
		}
	}
	if n := len(wanted); n > c.s.cfg.Delivery.MaxSubscriptions {
		return nil, nil, rpc.Errorf(rpc.CodeInvalidRequest, "too many subscriptions on this connection (limit %d, delivery.max_subscriptions)", c.s.cfg.Delivery.MaxSubscriptions)
	}
	s := c.s
	if e := s.handOver(p.ClientID, c.principal, p.ResumeToken, c); e != nil {
		s.counts.resumes[resumeWasRefused].Add(1)
		c.log.Warn("reconnect refused", "client", p.ClientID, "reason", e.Message)
		return nil, nil, e
	}
	r, e := s.claimRetained(p.ClientID, c.principal, p.ResumeToken)
	if e != nil {
		if e.Code == rpc.CodePermissionDenied {
			s.counts.resumes[resumeWasRefused].Add(1)
			c.log.Warn("reconnect refused", "client", p.ClientID, "reason", e.Message)
		} else {
			s.counts.resumes[resumeWasExpired].Add(1)
			c.log.Info("reconnect refused", "client", p.ClientID, "reason", e.Message)
		}
		return nil, nil, e
	}
	s.counts.resumes[resumeWasResumed].Add(1)
	c.mu.Lock()
	c.initialized = true
	c.clientID = p.ClientID
	c.version = r.version
	c.capabilities = r.capabilities
	c.resumeToken = r.token
	c.resumedFrom = r // until after has run: connEnded ends it otherwise
	c.mu.Unlock()
	s.clientArrived(p.ClientID)

	res := rpc.ReconnectResult{Missing: []string{}, Resume: s.resumeInfo(r.token), Identity: c.wireIdentity()}
	missing := func(uri, why string) {
		res.Missing = append(res.Missing, uri)
		c.log.Info("subscription not kept on reconnect", "client", p.ClientID, "channel", peerText(uri), "reason", why)
	}
	// Ordinary subscriptions: one lastSeenServerSeq for all (AHP). A
	// replay when the journal holds everything after it on every one.
	var ordinary []string
	for _, uri := range p.Subscriptions {
		if _, w := items[uri]; !w && !slices.Contains(ordinary, uri) {
			ordinary = append(ordinary, uri)
		}
	}
	replay := true
	for _, uri := range ordinary {
		if ch := s.channel(uri, c.caller()); ch != nil && ch.Traits().Delivery == adapters.Journaled {
			if _, _, err := s.journal.Next(uri, p.LastSeenServerSeq); err != nil {
				replay = false
			}
		}
	}
	res.Type = rpc.ReconnectSnapshot
	snapshots := []rpc.Snapshot{}
	type seqAction struct {
		seq    uint64
		action json.RawMessage
	}
	var replayed []seqAction
	if replay {
		res.Type = rpc.ReconnectReplay
	}
	var after []func()
	for _, uri := range ordinary {
		ch := s.channel(uri, c.caller())
		switch {
		case ch == nil:
			missing(uri, "no such channel")
			continue
		case ch.Traits().Delivery == adapters.WindowedOnly:
			missing(uri, "needs windowed delivery")
			continue
		case ch.Traits().Delivery == adapters.Stateless || !replay:
			_, snap, start := c.startOrdinary(ch)
			if snap != nil {
				snapshots = append(snapshots, *snap)
			}
			after = append(after, start)
			continue
		}
		sub, entries, ok := c.startOrdinaryAfter(ch, p.LastSeenServerSeq)
		if !ok {
			missing(uri, "the journal no longer reaches back to lastSeenServerSeq")
			continue
		}
		for _, e := range entries {
			replayed = append(replayed, seqAction{e.Seq, json.RawMessage(gjson.GetBytes(e.Text, "params").Raw)})
		}
		after = append(after, sub.activate)
	}
	if replay {
		slices.SortFunc(replayed, func(a, b seqAction) int { return cmp.Compare(a.seq, b.seq) })
		actions := make([]json.RawMessage, 0, len(replayed))
		for _, a := range replayed {
			actions = append(actions, a.action)
		}
		res.Actions = &actions
	} else {
		res.Snapshots = &snapshots
	}
	// Windowed subscriptions: each recovers through its own data.
	var recovered []string
	if p.Windows != nil {
		res.Windows = &rpc.ReconnectResultWindows{Items: []rpc.ReconnectResultItem{}}
		// Windows granted under each budget so far, not registered yet.
		budgeted := map[*adapters.WindowBudget]delivery.UTF16Bytes{}
		for _, it := range p.Windows.Items {
			uri := it.Channel
			if rs := r.streams[uri]; rs != nil {
				ch := rs.(adapters.Channel)
				item, ok := c.checkStream(ch, rs, it, missing)
				if !ok {
					continue
				}
				if b := ch.Traits().Budget; b != nil { // within the client's budget for such channels
					l := c.budgetWindow(uri, b, item.FlowControl.ClientReceive, budgeted[b])
					item.FlowControl = rpc.NegotiatedFlowControl{ClientReceive: l, HostReceive: l}
					budgeted[b] += l.WindowBytes
				}
				recovered = append(recovered, uri+" "+item.Recovery)
				res.Windows.Items = append(res.Windows.Items, item)
				limits, peer := item.FlowControl.ClientReceive, *it.Offsets
				after = append(after, func() {
					// The result is queued: the stream is this
					// connection's now (until then a lost result
					// leaves it parked for the retry).
					delete(r.streams, uri)
					if _, err := rs.Reclaim(c.connID, peer); err != nil {
						c.log.Info("stream not resumed after all", "client", p.ClientID, "channel", peerText(uri), "reason", err.Error())
					}
					c.startResumed(ch, limits, 0)
				})
				continue
			}
			ch := s.channel(uri, c.caller())
			if ch == nil {
				missing(uri, "no such channel")
				continue
			}
			maxLimits := s.hostMax
			if l := ch.Traits().Limits; l != nil {
				maxLimits = *l
			}
			limits, err := delivery.Negotiate(uri, *it.FlowControl.Receive, maxLimits)
			if err != nil {
				missing(uri, "limits: "+err.Error())
				continue
			}
			rec := ch.Recover(it.LastAppliedServerSeq)
			if rec == adapters.RecoverNone {
				missing(uri, "not resumable")
				continue
			}
			recovered = append(recovered, uri+" "+rec.String())
			res.Windows.Items = append(res.Windows.Items, rpc.ReconnectResultItem{
				Channel:     uri,
				FlowControl: rpc.NegotiatedFlowControl{ClientReceive: limits, HostReceive: limits},
				Recovery:    rec.String(),
				HeadSeq:     s.journal.Head(uri),
			})
			last := it.LastAppliedServerSeq
			after = append(after, func() { c.startResumed(ch, limits, last) })
		}
	}
	res.ServerSeq = s.journal.Seq()
	c.log.Info("client reconnected", "client", p.ClientID, "type", res.Type, "windows", recovered, "missing", len(res.Missing), "lost_for", time.Since(r.lostAt).Round(time.Millisecond).String())
	return res, func() {
		for _, f := range after {
			f()
		}
		// The parked subscriptions give way to the resumed ones (a
		// terminal's pacing moves to the new stream) or end.
		c.mu.Lock()
		c.resumedFrom = nil
		c.mu.Unlock()
		for _, sub := range r.parked {
			sub.c.endSubscription(sub, false)
		}
		r.abandonStreams("not asked for by the reconnect")
	}, nil
}

// checkStream answers a reconnect's window item it for a parked byte
// stream (TCP): limits negotiated again, the client's offsets checked
// against what was sent and the host's returned in the result item
// (recovery "replay"), without taking the stream yet (Reclaim, once the
// result is queued: a result that never goes out leaves it parked). A
// client that gives no offsets (it does not know the extension) or
// offsets that do not match gets the channel reset and reported missing.
func (c *conn) checkStream(ch adapters.Channel, rs adapters.Resumable, it rpc.ReconnectWindowItem, missing func(uri, why string)) (rpc.ReconnectResultItem, bool) {
	uri := it.Channel
	maxLimits := c.s.hostMax
	if l := ch.Traits().Limits; l != nil {
		maxLimits = *l
	}
	limits, err := delivery.Negotiate(uri, *it.FlowControl.Receive, maxLimits)
	if err != nil {
		rs.Abandon("reconnect: limits: " + err.Error())
		missing(uri, "limits: "+err.Error())
		return rpc.ReconnectResultItem{}, false
	}
	if it.Offsets == nil {
		rs.Abandon("reconnect without its offsets")
		missing(uri, "no offsets (windows.items tcp) to resume the stream from")
		return rpc.ReconnectResultItem{}, false
	}
	ours, err := rs.Check(*it.Offsets)
	if err != nil {
		rs.Abandon("resume: " + err.Error())
		missing(uri, "cannot resume the stream: "+err.Error())
		return rpc.ReconnectResultItem{}, false
	}
	return rpc.ReconnectResultItem{
		Channel:     uri,
		FlowControl: rpc.NegotiatedFlowControl{ClientReceive: limits, HostReceive: limits},
		Recovery:    adapters.RecoverReplay.String(),
		Offsets:     &ours,
	}, true
}
