package host

import (
	"encoding/json"
	"errors"

	"github.com/tidwall/gjson"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// channelPage answers channel/page (seed 003 "gap, don't drop silently":
// the cursor read after a channel/gap; docs/protocol.md "channel/page"):
// the actions of a channel this connection subscribes to after afterSeq,
// read from the journal, at most limit (clamped to rpc.MaxPageActions)
// and rpc.MaxPageBytes of envelopes. Errors: -32602 for bad params or a
// live-only channel (no journal), -32008 for an unknown channel, -32600
// when this connection does not subscribe to it, -32051 when the journal
// no longer reaches back to afterSeq+1.
func (c *conn) channelPage(params json.RawMessage) (any, *rpc.Error) {
	var p rpc.ChannelPageParams
	if e := rpc.DecodeParams(params, &p); e != nil {
		return nil, e
	}
	if p.Channel == "" {
		return nil, rpc.Missing("channel")
	}
	if p.AfterSeq == nil {
		return nil, rpc.Missing("afterSeq")
	}
	if p.Limit < 0 {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: limit must be 0 (the host's maximum, %d actions) or more, got %d", rpc.MaxPageActions, p.Limit)
	}
	limit := rpc.MaxPageActions
	if p.Limit > 0 && p.Limit < int64(limit) {
		limit = int(p.Limit)
	}
	after := *p.AfterSeq
	ch := c.s.channel(p.Channel, c.caller())
	if ch == nil {
		return nil, rpc.Errorf(rpc.CodeNotFound, "no such channel: %s", p.Channel)
	}
	if ch.Traits().Delivery != adapters.Journaled {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s is live only: it keeps no journal to page", p.Channel)
	}
	sub := c.subscription(p.Channel)
	if sub == nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "not subscribed to %s: subscribe first", p.Channel)
	}
	if seq := c.s.journal.Seq(); after > seq {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: afterSeq %d is beyond the host's serverSeq %d", after, seq)
	}
	entries, head, err := c.s.journal.Page(p.Channel, after, limit, rpc.MaxPageBytes)
	if errors.Is(err, journal.ErrTruncated) {
		return nil, rpc.JournalTruncatedError(p.Channel, after)
	}
	res := rpc.ChannelPageResult{Actions: make([]json.RawMessage, 0, len(entries)), ToSeq: after, HeadSeq: head}
	for _, e := range entries {
		res.ToSeq = e.Seq
		text, ok := sub.textOf(e)
		if !ok {
			continue // another client's rejection echo
		}
		res.Actions = append(res.Actions, json.RawMessage(gjson.GetBytes(text, "params").Raw))
	}
	c.log.Debug("channel page", "channel", peerText(p.Channel), "after", after, "actions", len(res.Actions), "to", res.ToSeq, "head", head)
	return res, nil
}
