package host

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/hashicorp/go-hclog"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transport"
)

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
		o.c.failLater(err) // jsonrpc2 calls this from the goroutine it is closing from
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
// dispatchAction after the createTerminal it needs, an unsubscribe, a
// channel's reset) without holding up the reader; channel/credit alone
// never waits. A reset must not pass the lane: a subscribe's result can
// reach the client before the lane has registered the subscription with
// its channel (its data starts after its result), and a reset sent at once
// would find no subscription and be dropped. A returned error (a violation)
// has closed the connection.
func (c *conn) takeNotification(h *rpc.Header, raw []byte) error {
	if c.laneLen.Load() > 0 && h.Method != rpc.MethodChannelCredit {
		c.enqueue(laneItem{h: h, raw: raw})
		return nil
	}
	return c.handleNotification(h, raw)
}

// handleNotification handles a client notification and recycles its
// text; a returned error (a violation) has closed the connection.
func (c *conn) handleNotification(h *rpc.Header, raw []byte) error {
	kept, err := c.notification(h, raw)
	if err != nil {
		c.fail(err)
		return err
	}
	if h.Method == rpc.BinaryDataMethod && !kept {
		// Byte-stream data: the channel decoded it into a buffer of its
		// own (delivery/bytestream copies, whichever form came) or
		// dropped it: nothing refers to the message any more.
		transport.RecycleRead(c.mc, raw)
	}
	return nil
}

// notification handles a client notification. kept reports that the
// channel took raw's buffer (adapters.Message.Keep): it recycles it. A
// returned error is a violation that closes the connection.
func (c *conn) notification(h *rpc.Header, raw []byte) (kept bool, err error) {
	if !c.isInitialized() {
		c.logBad(hclog.Warn, "notification before initialize ignored", "method", peerText(h.Method))
		return false, nil
	}
	sub := c.subscription(h.Channel)
	switch h.Method {
	case rpc.MethodChannelCredit: // in a form other than ReadObject's fast path's
		var p rpc.ChannelCreditParams
		if e := rpc.DecodeParams(h.Params, &p); e != nil {
			c.logBad(hclog.Warn, "bad channel/credit", "error", peerText(e.Message))
			return false, nil
		}
		return false, credit(c, sub, p.ConsumedBytes, h.Channel)
	case rpc.MethodUnsubscribe:
		if sub != nil {
			c.unsubscribe(sub, false)
		} else if ch := c.s.channel(h.Channel, c.caller()); ch != nil {
			ch.Release(c.connID) // e.g. a TCP connection never subscribed
		}
		return false, nil
	}
	if rpc.IsControlMethod(h.Method) {
		if sub != nil {
			sub.ch.Control(sub, h)
			return false, nil
		}
		c.log.Debug("control message without a subscription", "method", peerText(h.Method), "channel", peerText(h.Channel))
		return false, nil
	}
	// A data message. On a windowed subscription it counts (seed 000), and
	// a fragment is reassembled (delivery.Accept).
	var size delivery.UTF16Bytes
	whole := true // h is raw's message, not one reassembled from fragments
	if sub != nil && sub.windowed() {
		size = h.Size(raw)
		frame, err := rpc.Fragment(h, sub.channel)
		if err != nil {
			return false, err
		}
		inner, _, complete, err := delivery.Accept(sub.in, size, frame, rpc.ParseNotification)
		if err != nil || !complete {
			return false, err
		}
		if frame != nil {
			h, whole = inner, false
		}
	}
	release := func() {
		if sub != nil && sub.in != nil {
			sub.in.Release(size)
		}
	}
	caller := c.caller()
	m := adapters.Message{ClientID: caller.ClientID, Principal: caller.Principal, Identity: caller.Identity, Conn: caller.Conn, Capabilities: caller.Capabilities, Header: h, Release: release}
	var ch adapters.Channel
	if sub != nil {
		m.Sub, ch = sub, sub.ch
	} else if h.Method == rpc.MethodDispatchAction {
		ch = c.s.channel(h.Channel, c.caller()) // an action needs no subscription
	}
	if ch == nil {
		// Usually input racing a disposeTerminal: harmless.
		c.log.Debug("data message for a channel without a subscription ignored", "method", peerText(h.Method), "channel", peerText(h.Channel))
		release()
		return false, nil
	}
	if whole && keepable(h, raw) {
		m.Keep = func() func() {
			kept = true
			return func() { transport.RecycleRead(c.mc, raw) }
		}
	}
	ch.Receive(m)
	return kept, nil
}

// keepable reports whether a channel may keep raw's buffer to queue the
// bytes of data message h (adapters.Message.Keep): h came in binary form,
// so its data is a view of raw, and raw's buffer is at most twice raw's
// length, so a channel holding messages up to its receive window holds at
// most twice that in buffers (a short message read into a buffer sized
// for bulk ones is copied instead).
func keepable(h *rpc.Header, raw []byte) bool {
	return h.Binary != nil && cap(raw) <= 2*len(raw)
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
