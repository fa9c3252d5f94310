package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync/atomic"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

// ReconnectState is a step of a reconnection (ReconnectStatus.State).
type ReconnectState int

// The steps of a reconnection, in the order OnReconnect is told them:
// Lost once; for each attempt Retrying (the wait before it), then
// Connecting (it dials and sends reconnect); then Resumed or GaveUp once.
const (
	Lost       ReconnectState = iota + 1 // the transport was lost; Err says how
	Retrying                             // attempt Attempt starts after Next; Err is the previous attempt's error
	Resumed                              // resumed after Took; the same Conn carries on
	GaveUp                               // not resumed: Err is a *ReconnectError; Done closes
	Connecting                           // attempt Attempt is under way (a dial may take up to Options.ReconnectAttemptTimeout)
)

func (s ReconnectState) String() string {
	switch s {
	case Lost:
		return "lost"
	case Retrying:
		return "retrying"
	case Resumed:
		return "resumed"
	case GaveUp:
		return "gave up"
	case Connecting:
		return "connecting"
	}
	return fmt.Sprintf("ReconnectState(%d)", int(s))
}

// ReconnectStatus is one step of a reconnection, given to
// Options.OnReconnect.
type ReconnectStatus struct {
	State ReconnectState
	// Err: for Lost, why the transport was lost (matches
	// ErrConnectionLost); for Retrying, what the previous attempt failed
	// with (the loss itself before the first); for GaveUp, the
	// *ReconnectError that Conn.Err returns.
	Err error
	// Attempt is, for Retrying and Connecting, the attempt about to be
	// made or under way (from 1); for Resumed and GaveUp, the attempts
	// made.
	Attempt int
	// Next is, for Retrying, the wait before the attempt (backoff with
	// jitter).
	Next time.Duration
	// Took is, for Resumed, the time from the loss to the resumption.
	Took time.Duration
	// UnknownFate is, for Resumed, how many of our dispatchActions (on
	// every subscription) were sent before the loss, saw no echo, and
	// will not be sent again: after snapshot recovery (their fate is
	// unknown: typed input that may be lost), or forgotten past the
	// write-ahead bound. Those replay recovery sends again are not
	// counted.
	UnknownFate int
	// Missing is, for Resumed, the channels the host did not keep; their
	// subscriptions ended with an error matching ErrNotKept.
	Missing []string
}

// canReconnectLocked reports whether a lost transport may be resumed:
// reconnection is on, there is a Dialer, and the host offered a resume.
// Call with c.mu held.
func (c *Conn) canReconnectLocked() bool {
	return !c.opts.NoReconnect && c.opts.Dialer != nil && c.resume != nil && c.resume.GraceMs > 0 && c.resume.Token != ""
}

// status tells OnReconnect about st.
func (c *Conn) status(st ReconnectStatus) {
	if c.opts.OnReconnect != nil {
		c.opts.OnReconnect(st)
	}
}

// jitter returns d ±20%.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// reconnectLoop redials until the Conn resumes, the grace (counted from
// lostAt) ends, or the host refuses; cause is why the transport was lost.
//
// Backoff doubles from Options.ReconnectDelay to ReconnectMaxDelay (±20%
// jitter), but one attempt always falls graceMargin before the grace's
// end, where the host surely still holds our state (it counts its grace
// from when it noticed the loss: no earlier than we did, unless we were
// frozen), and a last one at the end itself.
func (c *Conn) reconnectLoop(lostAt time.Time, cause error) {
	defer c.wg.Done()
	c.status(ReconnectStatus{State: Lost, Err: &lostCallError{method: "connection", cause: cause}})
	c.mu.Lock()
	grace := time.Duration(c.resume.GraceMs) * time.Millisecond
	c.mu.Unlock()
	deadline := lostAt.Add(grace)
	beforeEnd := deadline.Add(-graceMargin(grace))
	delay := c.opts.ReconnectDelay
	last := cause
	var refusedSince time.Time // the first of the refusals in a row (Options.RefusedRetry)
	for attempt := 1; ; attempt++ {
		wait := jitter(delay)
		now := time.Now()
		if now.Before(beforeEnd) {
			wait = min(wait, beforeEnd.Sub(now))
		} else {
			wait = min(wait, deadline.Sub(now))
		}
		if !refusedSince.IsZero() {
			// The last try falls at the window's end.
			wait = min(wait, refusedSince.Add(c.opts.RefusedRetry).Sub(now))
		}
		wait = max(wait, 0)
		c.status(ReconnectStatus{State: Retrying, Attempt: attempt, Next: wait, Err: last})
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-c.ctx.Done():
			t.Stop()
			return
		}
		// The attempt announced is made, the last one at the grace's
		// end too.
		delay = min(2*delay, c.opts.ReconnectMaxDelay)
		c.mu.Lock()
		c.resuming = resumingAttempt{attempt: attempt, lostAt: lostAt}
		c.mu.Unlock()
		c.status(ReconnectStatus{State: Connecting, Attempt: attempt, Err: last})
		err, fatal := c.attempt(deadline)
		if c.ctx.Err() != nil {
			return // closed meanwhile
		}
		if err == nil {
			return // applyReconnect told OnReconnect
		}
		last = err
		if fatal == ErrHostGone && c.opts.RefusedRetry > 0 {
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) < c.opts.RefusedRetry {
				fatal = nil // refused for a moment: a relay restarting, say
			}
		} else {
			refusedSince = time.Time{}
		}
		if fatal != nil {
			c.giveUp(fatal, err, attempt)
			return
		}
		if !time.Now().Before(deadline) {
			c.giveUp(ErrGraceEnded, last, attempt)
			return
		}
	}
}

// graceMargin is how long before the grace's end the attempt that must
// not miss it is made: a tenth of the grace, at most 5 s.
func graceMargin(grace time.Duration) time.Duration {
	return min(grace/10, 5*time.Second)
}

// resumingAttempt is the reconnection attempt under way, for the Resumed
// status applyReconnect gives.
type resumingAttempt struct {
	attempt int
	lostAt  time.Time
}

// giveUp ends the Conn with a *ReconnectError.
func (c *Conn) giveUp(reason, cause error, attempts int) {
	err := &ReconnectError{Reason: reason, Cause: cause, Attempts: attempts}
	c.status(ReconnectStatus{State: GaveUp, Err: err, Attempt: attempts})
	c.fail(err, transport.CloseNormal, "")
}

// isRefusal reports whether a dial error says our credentials were
// refused: never worth retrying.
func isRefusal(err error) bool {
	var he *transport.HTTPError
	return errors.Is(err, ErrUnauthorized) || transport.IsUnauthorized(err) ||
		errors.As(err, &he) && he.StatusCode == http.StatusUnauthorized
}

// attempt dials once and sends reconnect, within the attempt timeout and
// the grace. It returns the error (nil: resumed, and applyReconnect told
// OnReconnect), and for an error never worth retrying, the reason to give
// up.
func (c *Conn) attempt(deadline time.Time) (err, fatal error) {
	now := time.Now()
	dl := now.Add(c.opts.ReconnectAttemptTimeout)
	if deadline.Before(dl) {
		// Within the grace, but the last one gets a moment still: the
		// host, which noticed the loss later, may keep the state longer.
		dl = deadline
		if least := now.Add(min(2*time.Second, c.opts.ReconnectAttemptTimeout)); dl.Before(least) {
			dl = least
		}
	}
	ctx, cancel := context.WithDeadline(c.ctx, dl)
	defer cancel()
	mc, err := c.opts.Dialer(ctx)
	if err != nil {
		switch {
		case isRefusal(err):
			return err, ErrUnauthorized
		case errors.Is(err, ErrCertificateMismatch):
			// A renewed or replaced certificate stays so: say so now
			// rather than retry until the grace ends.
			return err, ErrCertificateMismatch
		case c.opts.GiveUpWhenRefused && dialRefused(err):
			return err, ErrHostGone
		}
		return err, nil
	}
	if c.ctx.Err() != nil {
		_ = mc.Close(transport.CloseNormal, "")
		return c.ctx.Err(), nil
	}
	l := c.startLink(mc)
	err = c.sendReconnect(ctx, l)
	if err == nil {
		return nil, nil
	}
	c.mu.Lock()
	if c.link == l {
		c.mu.Unlock()
		return nil, nil // applied even so (the caller's ctx ended at the same time)
	}
	if l.dead == nil {
		l.dead = err // applyReconnect must not install it now
	}
	c.mu.Unlock()
	c.endLink(l, err)
	var re *rpc.Error
	if errors.As(err, &re) {
		var d rpc.ResumeErrorData
		_ = json.Unmarshal(re.Data, &d)
		switch {
		case re.Code == rpc.CodeNotFound || d.Kind == "expired":
			return err, ErrResumeExpired
		case re.Code == rpc.CodePermissionDenied || d.Kind == "refused":
			return err, ErrResumeRefused
		case re.Code == rpc.CodeMethodNotFound:
			return err, errors.New("the host does not support reconnect")
		case re.Code == rpc.CodeOverloaded:
			return err, nil
		}
		return err, fmt.Errorf("the host refused the reconnect: %w", re)
	}
	return err, nil
}

// sendReconnect sends reconnect on l for every subscription to keep; the
// result is applied on l's reader before anything after it is read.
func (c *Conn) sendReconnect(ctx context.Context, l *link) error {
	name := c.opts.ClientName
	if name == "" {
		name = "sidecar"
	}
	c.mu.Lock()
	params := rpc.ReconnectParams{Channel: rpc.RootChannel, ClientID: c.clientID, LastSeenServerSeq: c.lastSeen,
		ResumeToken: c.resume.Token, Subscriptions: []string{}, ClientInfo: &rpc.ClientInfo{Name: name}}
	subs := make([]*Subscription, 0, len(c.subs))
	for _, s := range c.subs {
		subs = append(subs, s)
	}
	c.mu.Unlock()
	sort.Slice(subs, func(i, j int) bool { return subs[i].Channel < subs[j].Channel })
	prepared := map[string]*delivery.Inbound{}
	var items []rpc.ReconnectWindowItem
	kept := subs[:0]
	for _, s := range subs {
		s.mu.Lock()
		live, last := s.live, s.lastApplied
		s.mu.Unlock()
		if !live {
			continue
		}
		kept = append(kept, s)
		params.Subscriptions = append(params.Subscriptions, s.Channel)
		if s.Windowed {
			offer := s.offer
			var offsets *rpc.StreamOffsets
			if s.stream {
				// The limits it grew to (a smaller frame would split the
				// messages retained), and what it has of the host's bytes.
				offer, _ = s.Limits()
				offsets = &rpc.StreamOffsets{Received: s.streamRecv.Load(), EOF: s.streamEOF.Load()}
			}
			// Registered before the request, as subscribe does: the
			// host may send data right after the result.
			prepared[s.Channel] = l.sched.NewInbound(s.Channel, offer, c.opts.MaxMessageBytes)
			items = append(items, rpc.ReconnectWindowItem{Channel: s.Channel,
				FlowControl: &rpc.FlowControlOffer{Receive: &offer}, LastAppliedServerSeq: last, Offsets: offsets})
		}
	}
	if len(items) > 0 {
		params.Windows = &rpc.ReconnectWindows{Items: items}
	}
	var bad error
	err := c.callOn(ctx, l, rpc.MethodReconnect, params, nil, func(r response) {
		if r.err != nil || r.lost != nil {
			return
		}
		var res rpc.ReconnectResult
		if err := json.Unmarshal(r.result, &res); err != nil {
			bad = fmt.Errorf("bad reconnect result: %w", err)
			return
		}
		bad = c.applyReconnect(l, kept, prepared, &res)
	})
	if err == nil {
		err = bad
	}
	return err
}

// applyReconnect installs l as the link in use with what res kept (on l's
// reader goroutine, before the next message is read), and tells
// OnReconnect Resumed.
func (c *Conn) applyReconnect(l *link, subs []*Subscription, prepared map[string]*delivery.Inbound, res *rpc.ReconnectResult) error {
	var unknown int      // our sends of unknown fate now
	var notKept []string // the channels the host did not keep
	missing := map[string]bool{}
	for _, ch := range res.Missing {
		missing[ch] = true
	}
	windows := map[string]rpc.ReconnectResultItem{}
	if res.Windows != nil {
		for _, it := range res.Windows.Items {
			windows[it.Channel] = it
		}
	}
	c.mu.Lock()
	if l.dead != nil || c.ended {
		c.mu.Unlock()
		return errors.New("the attempt ended before its result")
	}
	var ended []*Subscription
	var ordinary []*Subscription
	for _, s := range subs {
		if c.subs[s.Channel] != s {
			continue // unsubscribed meanwhile
		}
		if missing[s.Channel] {
			ended = append(ended, s)
			continue
		}
		if s.Windowed {
			it, ok := windows[s.Channel]
			if !ok {
				ended = append(ended, s)
				continue
			}
			if s.stream && (it.Offsets == nil || s.src.resendStream(*it.Offsets) != nil) {
				ended = append(ended, s) // the host reset its side
				continue
			}
			unknown += s.resumeWindowed(l, prepared[s.Channel], it)
			continue
		}
		s.resumeOrdinary(l)
		ordinary = append(ordinary, s)
	}
	for _, s := range ended {
		delete(c.subs, s.Channel)
		notKept = append(notKept, s.Channel)
	}
	if res.Resume != nil && res.Resume.Token != "" {
		c.resume = res.Resume
	}
	if res.Identity != nil {
		c.identity = res.Identity
	}
	c.mu.Unlock()
	for _, s := range ended {
		s.end(fmt.Errorf("%w: %s", ErrNotKept, s.Channel))
	}
	// Ordinary subscriptions recover through the result itself.
	replay := res.Type == rpc.ReconnectReplay
	if replay && res.Actions != nil {
		for _, a := range *res.Actions {
			var env struct {
				Channel string `json:"channel"`
			}
			if json.Unmarshal(a, &env) != nil {
				continue
			}
			c.mu.Lock()
			s := c.subs[env.Channel]
			c.mu.Unlock()
			if s == nil || s.Windowed {
				continue
			}
			raw := append(append([]byte(`{"jsonrpc":"2.0","method":"action","params":`), a...), '}')
			m := &Message{Method: rpc.MethodAction, Params: a, Raw: raw}
			if s.hold(m) {
				continue // recovering from a gap: delivered in order after it
			}
			s.note(rpc.MethodAction, a, true)
			if err := s.q.push(m, maxOrdinaryQueue); err != nil {
				return err
			}
		}
	}
	if !replay && res.Snapshots != nil {
		for _, snap := range *res.Snapshots {
			c.mu.Lock()
			s := c.subs[snap.Resource]
			c.mu.Unlock()
			if s == nil || s.Windowed {
				continue
			}
			if s.restaleOnSnapshot() {
				continue // recovering from a gap: it subscribes again for its own snapshot
			}
			p, err := json.Marshal(rpc.ChannelSnapshotParams{Channel: snap.Resource, Snapshot: snap})
			if err != nil {
				continue
			}
			s.note(rpc.MethodChannelSnapshot, p, true)
			raw := append(append([]byte(`{"jsonrpc":"2.0","method":"channel/snapshot","params":`), p...), '}')
			if err := s.q.push(&Message{Method: rpc.MethodChannelSnapshot, Params: p, Raw: raw}, maxOrdinaryQueue); err != nil {
				return err
			}
		}
	}
	for _, s := range ordinary {
		unknown += s.src.reconcile(replay)
	}
	// Resumed is told here, on l's reader before the next message is
	// read, so that it comes before whatever the resumed subscriptions
	// deliver (a replay, a fresh snapshot), and before l is installed
	// (nothing on l can be lost, so no new reconnection starts, until
	// then).
	c.mu.Lock()
	ra := c.resuming
	c.mu.Unlock()
	c.status(ReconnectStatus{State: Resumed, Attempt: ra.attempt, Took: time.Since(ra.lostAt),
		UnknownFate: unknown, Missing: notKept})
	c.mu.Lock()
	if res.ServerSeq > c.lastSeen {
		c.lastSeen = res.ServerSeq
	}
	c.link = l
	c.mc.set(l.mc)
	close(c.ready)
	c.mu.Unlock()
	return nil
}

// detach parts s from the link that was lost: its stream goes, its queue
// of received messages stays, its sends wait (held); a byte stream's
// sent messages not yet credited stay retained.
func (s *Subscription) detach(why error) {
	s.src.hold()
	s.mu.Lock()
	out := s.out
	s.link, s.in, s.out = nil, nil, nil
	s.awaiting = false
	s.mu.Unlock()
	if out != nil {
		out.Remove()
	}
}

// resumeWindowed installs s on l with in (counting with the offer) and
// the limits and recovery of it; it returns how many of our sends are of
// unknown fate now. Call with c.mu held.
func (s *Subscription) resumeWindowed(l *link, in *delivery.Inbound, it rpc.ReconnectResultItem) (unknown int) {
	in.SetLimits(it.FlowControl.ClientReceive)
	out := l.sched.AddStream(s.Channel, it.FlowControl.HostReceive, s.src)
	s.mu.Lock()
	s.link, s.in, s.out = l, in, out
	s.ClientReceive, s.HostReceive = it.FlowControl.ClientReceive, it.FlowControl.HostReceive
	wait := it.Recovery == rpc.RecoveryReplay && it.HeadSeq > s.lastApplied
	s.awaiting, s.awaitHead = wait, it.HeadSeq
	s.mu.Unlock()
	s.src.setStreamHeld(out)
	switch {
	case wait:
		// The replay carries the echoes: resend once it reached headSeq.
		return s.src.takeForgotten()
	case it.Recovery == rpc.RecoveryReplay:
		return s.src.takeForgotten() + s.src.reconcile(true)
	}
	return s.src.reconcile(false)
}

// resendStream puts back, at the head of the queue, the retained data
// and end-of-stream messages the host lacks (it has received every byte
// below host.Received), for a byte stream kept by a reconnect. An error
// (the offsets do not match what was sent) ends the channel.
func (q *outQueue) resendStream(host rpc.StreamOffsets) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ret == nil {
		return errors.New("client: not a byte stream")
	}
	again, err := q.ret.Resend(bytestream.DecodedOffset(host.Received), host.EOF)
	if err != nil {
		return err
	}
	if len(again) == 0 {
		return nil
	}
	items := make([]sizedText, 0, len(again)+len(q.items))
	for _, m := range again {
		// Not recycled: the lost link's writer may still be reading it.
		it := sizedText{m: m.Msg, stream: true, eof: m.EOF, end: m.End}
		items = append(items, it)
		q.bytes += it.bytes()
	}
	q.items = append(items, q.items...)
	return nil
}

// resumeOrdinary installs s on l. Call with c.mu held.
func (s *Subscription) resumeOrdinary(l *link) {
	unbounded := delivery.Limits{WindowBytes: 1 << 60, MaximumFrameBytes: 1 << 60}
	out := l.sched.AddStream(s.Channel, unbounded, s.src)
	s.mu.Lock()
	s.link, s.out = l, out
	s.mu.Unlock()
	s.src.setStreamHeld(out)
}

// setStreamHeld sets the stream without ending a hold (reconcile does).
func (q *outQueue) setStreamHeld(st *delivery.Stream) {
	q.mu.Lock()
	q.stream = st
	q.mu.Unlock()
}

// seqOf is the part of an action envelope or channel/snapshot's params
// that reconnection needs.
type seqOf struct {
	ServerSeq uint64      `json:"serverSeq"`
	Origin    *rpc.Origin `json:"origin"`
	Snapshot  *struct {
		FromSeq uint64 `json:"fromSeq"`
	} `json:"snapshot"`
}

// decodeSeq decodes an action envelope's serverSeq and origin, or a
// snapshot's fromSeq.
func decodeSeq(method string, params json.RawMessage) (seq uint64, origin *rpc.Origin, ok bool) {
	var p seqOf
	if json.Unmarshal(params, &p) != nil {
		return 0, nil, false
	}
	if method == rpc.MethodChannelSnapshot {
		if p.Snapshot == nil {
			return 0, nil, false
		}
		return p.Snapshot.FromSeq, nil, true
	}
	return p.ServerSeq, p.Origin, true
}

// note records a message s received and keeps: an action's serverSeq (and
// for an ordinary subscription the Conn's lastSeen), a snapshot's fromSeq,
// the echo of one of our dispatchActions; once a replay has reached the
// reconnect's headSeq, the dispatchActions whose echoes did not come are
// sent again.
func (s *Subscription) note(method string, params json.RawMessage, ordinary bool) {
	if method != rpc.MethodAction && method != rpc.MethodChannelSnapshot {
		return
	}
	seq, ok := trailingServerSeq(params)
	var origin *rpc.Origin
	if !ok || method != rpc.MethodAction {
		// Anything but the host's usual envelope (serverSeq last, no
		// origin: terminal/data, read in place above, as it is for
		// every message): decoded, off the hot path.
		if seq, origin, ok = decodeSeq(method, params); !ok {
			return
		}
	}
	if o := origin; o != nil && o.ClientID == s.c.clientID && o.ClientSeq > 0 {
		s.src.echo(o.ClientSeq)
	}
	s.mu.Lock()
	if method == rpc.MethodChannelSnapshot || seq > s.lastApplied {
		s.lastApplied = seq
	}
	// A snapshot where a replay was announced (the host's journal was
	// trimmed between its decision and the resume) replaces the state:
	// nothing proves our unechoed input unapplied, so it is not sent
	// again (seed 001: uncertain input must not be blindly retried).
	replaced := s.awaiting && method == rpc.MethodChannelSnapshot
	resend := s.awaiting && !replaced && seq >= s.awaitHead
	if resend || replaced {
		s.awaiting = false
	}
	s.mu.Unlock()
	switch {
	case resend:
		s.src.reconcile(true)
	case replaced:
		s.src.reconcile(false)
	}
	if ordinary && method == rpc.MethodAction {
		s.c.mu.Lock()
		if seq > s.c.lastSeen {
			s.c.lastSeen = seq
		}
		s.c.mu.Unlock()
	}
}

// switchConn is the Conn's transport as code outside the link machinery
// sees it (TCPConn recycles read buffers into it): the current link's.
type switchConn struct {
	cur atomic.Pointer[mcBox]
}

type mcBox struct{ mc transport.MessageConn }

func (s *switchConn) set(mc transport.MessageConn) { s.cur.Store(&mcBox{mc}) }

func (s *switchConn) get() transport.MessageConn {
	if b := s.cur.Load(); b != nil {
		return b.mc
	}
	return nil
}

func (s *switchConn) ReadMessage(ctx context.Context) ([]byte, error) {
	return s.get().ReadMessage(ctx)
}

func (s *switchConn) WriteMessage(ctx context.Context, text []byte) error {
	return s.get().WriteMessage(ctx, text)
}

func (s *switchConn) Close(code transport.CloseCode, reason string) error {
	return s.get().Close(code, reason)
}

func (s *switchConn) Peer() string { return s.get().Peer() }

// RecycleRead hands b to the current transport (read buffers come from a
// shared pool).
func (s *switchConn) RecycleRead(b []byte) { transport.RecycleRead(s.get(), b) }

// trailingServerSeq reads an action envelope's serverSeq when it is the
// last member, `…,"serverSeq":N}` (how the host encodes a host-originated
// action such as terminal/data; an echo's origin comes after it), without
// decoding the rest. ok is false for any other form.
func trailingServerSeq(params []byte) (seq uint64, ok bool) {
	const member = `,"serverSeq":`
	n := len(params)
	if n < len(member)+2 || params[n-1] != '}' {
		return 0, false
	}
	i := n - 2
	for i >= 0 && params[i] >= '0' && params[i] <= '9' {
		i--
	}
	digits := params[i+1 : n-1]
	if len(digits) == 0 || len(digits) > 20 || i+1 < len(member) || string(params[i+1-len(member):i+1]) != member {
		return 0, false
	}
	for _, d := range digits {
		next := seq*10 + uint64(d-'0')
		if next/10 != seq {
			return 0, false // beyond uint64
		}
		seq = next
	}
	return seq, true
}
