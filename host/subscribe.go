package host

import (
	"encoding/json"
	"errors"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

func (c *conn) subscribe(params json.RawMessage) (any, func(), *rpc.Error) {
	var p rpc.SubscribeParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, nil, e
	}
	if p.Channel == "" {
		return nil, nil, rpc.Missing("channel")
	}
	if p.Channel == rpc.RootChannel {
		if e := c.s.guard.CheckOn(c.caller().Identity, auth.RootList, rpc.RootChannel); e != nil {
			return nil, nil, e
		}
	}
	ch := c.s.channel(p.Channel, c.caller())
	if ch == nil {
		if e := c.s.kinds.refusal(p.Channel, c.caller()); e != nil {
			return nil, nil, e
		}
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
			if traits.Budget != nil { // within the client's budget for such channels
				limits = c.budgetWindow(p.Channel, traits.Budget, limits, 0)
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
		return nil, nil, rpc.Errorf(rpc.CodeInvalidRequest, "too many subscriptions on this connection (limit %d, delivery.max_subscriptions)", c.s.cfg.Delivery.MaxSubscriptions)
	}
	if a, ok := ch.(adapters.Attachable); ok {
		a.Attached(c.caller(), windowed)
	}
	if !windowed {
		_, snap, start := c.startOrdinary(ch)
		return rpc.SubscribeResult{Snapshot: snap}, start, nil
	}
	res := rpc.SubscribeResult{FlowControl: &rpc.NegotiatedFlowControl{ClientReceive: limits, HostReceive: limits}}
	return res, func() { c.startWindowed(ch, limits) }, nil
}

// budgetWindow lowers the windowBytes of l, negotiated for channel uri,
// to what budget leaves beside the windows of the client's other
// subscriptions under the same budget on this connection (a client has
// one connection at a time) and extra (windows granted in the same
// reconnect, not registered yet). It never lowers below the window the
// subscription already has, nor below its first window
// (min(l.WindowBytes, budget.First)): a connection keeps what it was
// given, and only growth is refused. maximumFrameBytes is left alone (a
// reconnect's retained messages were cut to it). adapters.WindowBudget.
func (c *conn) budgetWindow(uri string, budget *adapters.WindowBudget, l delivery.Limits, extra delivery.UTF16Bytes) delivery.Limits {
	total := budget.Total
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
		if sub.out == nil || sub.ch.Traits().Budget != budget {
			continue // ordinary, or under another budget
		}
		w := sub.out.Limits().WindowBytes
		if sub.channel == uri {
			cur = w
			continue
		}
		others += w
	}
	floor := max(min(l.WindowBytes, budget.First), min(cur, l.WindowBytes))
	l.WindowBytes = max(min(l.WindowBytes, total-others-extra), floor)
	return l
}
