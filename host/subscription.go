package host

import (
	"sync"

	"github.com/sidecar-dev/sidecar/adapters"
	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/journal"
	"github.com/sidecar-dev/sidecar/rpc"
)

// The subscription registry: every subscription of a connection, by
// channel URI. The functions of this file add a subscription to a
// connection or remove one; host/resume.go also swaps a lost connection's
// whole map out (retain) to park what a reconnect may take.

// subscription is one client's subscription to one channel, and the
// adapters.Subscriber its channel sees.
type subscription struct {
	c       *conn
	ch      adapters.Channel
	channel string
	// client is the subscribing client's clientId (fixed once it has
	// initialized): the journal's entries for another client only (a
	// rejection's echo: journal.Entry.To) are not sent.
	client string
	// view is the connection's view of a Viewed channel (the root
	// catalogue), nil when it sees the channel as it is: snapshots and
	// actions sent for this subscription pass through it.
	view adapters.View

	// Windowed: out/src send host→client, in receives client→host.
	out *delivery.Stream
	src delivery.Source
	in  *delivery.Inbound

	// Ordinary: actions are held until the subscribe result is queued,
	// then pushed to the connection's ordinary FIFO.
	mu     sync.Mutex
	active bool
	ended  bool
	held   []journal.Entry
	// gapFrom, when gapped, is the snapshot's seq: more than
	// maxHeldActions arrived before activation, the held ones were
	// dropped, and activate sends a channel/gap after it instead.
	gapped  bool
	gapFrom uint64
}

// maxHeldActions bounds actions held between a subscribe's snapshot and
// its result being queued (microseconds in practice; the bound is for
// safety: past it the held actions give way to one channel/gap).
const maxHeldActions = 1024

func (sub *subscription) windowed() bool { return sub.out != nil }

// ClientID implements adapters.Subscriber.
func (sub *subscription) ClientID() string { return sub.c.id() }

// Conn implements adapters.Subscriber.
func (sub *subscription) Conn() adapters.ConnID { return sub.c.connID }

// Identity implements adapters.Subscriber.
func (sub *subscription) Identity() auth.Identity { return sub.c.caller().Identity }

// Stream implements adapters.Subscriber.
func (sub *subscription) Stream() *delivery.Stream { return sub.out }

// Closing implements adapters.Subscriber.
func (sub *subscription) Closing() bool { return sub.c.ctx != nil && sub.c.ctx.Err() != nil }

// CanPush implements adapters.Subscriber.
func (sub *subscription) CanPush(headroom int) bool {
	if sub.windowed() {
		return false
	}
	sub.mu.Lock()
	active := sub.active && !sub.ended
	sub.mu.Unlock()
	if !active {
		return false
	}
	_, _, queued := sub.c.sched.QueueLens()
	return queued < headroom
}

// Push implements adapters.Subscriber.
func (sub *subscription) Push(text []byte, headroom int) bool {
	if sub.windowed() || sub.c.subscription(sub.channel) != sub {
		return false
	}
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if !sub.active || sub.ended {
		return false
	}
	ok, err := sub.c.sched.TryPushOrdinary(sub.channel, 0, text, headroom)
	if err != nil {
		sub.c.failLater(err)
	}
	return ok
}

// PushControl implements adapters.Subscriber.
func (sub *subscription) PushControl(text []byte) {
	if err := sub.c.sched.PushControl(text); err != nil && err != delivery.ErrClosed {
		sub.c.failLater(err)
	}
}

// onEntry is an ordinary subscription's journal listener (under the
// journal lock): it queues the action on the connection's ordinary FIFO.
// A windowed subscription's source reads the journal itself
// (adapters.LogSource).
func (sub *subscription) onEntry(_ string, e journal.Entry) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.ended || sub.gapped {
		return
	}
	text, ok := sub.textOf(e)
	if !ok {
		return
	}
	e.Text = text
	if !sub.active {
		if len(sub.held) >= maxHeldActions {
			sub.gapped, sub.held = true, nil
			return
		}
		sub.held = append(sub.held, e)
		return
	}
	if err := sub.c.sched.PushOrdinary(sub.channel, e.Seq, e.Text); err != nil {
		sub.c.failLater(err)
	}
}

// textOf returns e's text as this subscription is sent it (through its
// view), and false for an entry it is not sent (another client's
// rejection echo: journal.Entry.For).
func (sub *subscription) textOf(e journal.Entry) ([]byte, bool) {
	switch {
	case !e.For(sub.client):
		return nil, false
	case sub.view != nil:
		return sub.view.Action(e.Text), true
	}
	return e.Text, true
}

// activate moves held actions to the FIFO once the result is queued, or
// sends the channel/gap that replaced them.
func (sub *subscription) activate() {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	sub.active = true
	if sub.gapped {
		sub.gapped = false
		if err := sub.c.sched.PushGap(sub.channel, sub.gapFrom); err != nil {
			sub.c.failLater(err)
		}
		return
	}
	for _, e := range sub.held {
		if err := sub.c.sched.PushOrdinary(sub.channel, e.Seq, e.Text); err != nil {
			sub.c.failLater(err)
			break
		}
	}
	sub.held = nil
}

// subscription returns c's subscription to channel, or nil.
func (c *conn) subscription(channel string) *subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[channel]
}

// subscriptionOf is subscription for a channel URI in a byte slice (the
// lookup does not copy it).
func (c *conn) subscriptionOf(channel []byte) *subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[string(channel)]
}

func (c *conn) subCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs)
}

// register makes sub the connection's subscription to its channel.
func (c *conn) register(sub *subscription) {
	c.mu.Lock()
	c.subs[sub.channel] = sub
	c.mu.Unlock()
}

// startOrdinary registers an ordinary subscription to ch. A journaled
// channel's snapshot is taken and the journal listened to atomically
// (under the channel's lock), so no action is missed or seen twice; the
// actions are held until activate. A stateless channel has no snapshot
// (snap is nil) and is subscribed at once by after.
func (c *conn) startOrdinary(ch adapters.Channel) (sub *subscription, snap *rpc.Snapshot, after func()) {
	sub = &subscription{c: c, ch: ch, channel: ch.URI(), view: adapters.ViewOf(ch, c.identity), client: c.id()}
	if ch.Traits().Delivery == adapters.Stateless {
		sub.active = true
		c.register(sub)
		return sub, nil, func() { ch.Subscribe(sub) }
	}
	snap = new(rpc.Snapshot)
	ch.Snapshot(func(s rpc.Snapshot) {
		if sub.view != nil {
			s.State = sub.view.State(s.State)
		}
		*snap = s
		sub.gapFrom = s.FromSeq
		c.sched.StartOrdinary(sub.channel, s.FromSeq)
		c.s.journal.Listen(ch.URI(), sub, sub.onEntry, nil)
	})
	c.register(sub)
	ch.Subscribe(sub)
	return sub, snap, sub.activate
}

// startWindowed registers a windowed subscription to ch with limits. Call
// it once the subscribe result is queued: the result is protected and so
// precedes the stream's first data (channel/snapshot).
func (c *conn) startWindowed(ch adapters.Channel, limits delivery.Limits) {
	c.startStream(ch, limits, ch.Source)
}

// startResumed registers a windowed subscription to ch kept by a
// reconnect: like startWindowed, with the channel's Resume source after
// lastSeq. Call it once the reconnect result is queued.
func (c *conn) startResumed(ch adapters.Channel, limits delivery.Limits, lastSeq uint64) {
	c.startStream(ch, limits, func(sub adapters.Subscriber) delivery.Source { return ch.Resume(sub, lastSeq) })
}

// startStream registers a windowed subscription to ch whose Source
// source gives, with its stream and inbound side.
func (c *conn) startStream(ch adapters.Channel, limits delivery.Limits, source func(adapters.Subscriber) delivery.Source) {
	sub := &subscription{c: c, ch: ch, channel: ch.URI(), view: adapters.ViewOf(ch, c.identity), client: c.id()}
	sub.src = source(sub)
	sub.in = c.sched.NewInbound(sub.channel, limits, int(c.s.cfg.Delivery.MaxMessageBytes))
	sub.out = c.sched.AddStream(sub.channel, limits, sub.src) // a journal's source wakes it itself (delivery.Attacher)
	c.register(sub)
	ch.Subscribe(sub)
}

// startOrdinaryAfter registers an ordinary subscription to a journaled
// ch that resumes after lastSeq (a reconnect's replay): the journal's
// actions after it are read and the journal listened to atomically
// (under the channel's lock), and returned for the reconnect result; the
// later ones are held until activate. ok is false (nothing registered)
// when the journal no longer reaches back to lastSeq.
func (c *conn) startOrdinaryAfter(ch adapters.Channel, lastSeq uint64) (sub *subscription, entries []journal.Entry, ok bool) {
	sub = &subscription{c: c, ch: ch, channel: ch.URI(), view: adapters.ViewOf(ch, c.identity), client: c.id()}
	ch.Snapshot(func(s rpc.Snapshot) {
		var err error
		if entries, err = c.s.journal.Read(sub.channel, lastSeq, 0); err != nil {
			return
		}
		from := lastSeq
		if len(entries) > 0 {
			from = entries[len(entries)-1].Seq
		}
		sent := entries[:0]
		for _, e := range entries {
			if text, yes := sub.textOf(e); yes {
				e.Text = text
				sent = append(sent, e)
			}
		}
		entries = sent
		ok = true
		sub.gapFrom = s.FromSeq
		c.sched.StartOrdinary(sub.channel, from)
		c.s.journal.Listen(sub.channel, sub, sub.onEntry, nil)
	})
	if !ok {
		return nil, nil, false
	}
	c.register(sub)
	ch.Subscribe(sub)
	return sub, entries, true
}

// unsubscribe removes sub, if it is still the connection's subscription
// to its channel, and ends it; keep leaves the ordinary messages it has
// queued to go out (a disposed terminal's terminal/exited).
func (c *conn) unsubscribe(sub *subscription, keep bool) bool {
	c.mu.Lock()
	mine := c.subs[sub.channel] == sub
	if mine {
		delete(c.subs, sub.channel)
	}
	c.mu.Unlock()
	if !mine {
		return false
	}
	c.endSubscription(sub, keep)
	return true
}

// endSubscription ends sub (no longer registered): nothing more is
// queued or sent for it; unless keep, its queued ordinary messages are
// dropped too.
func (c *conn) endSubscription(sub *subscription, keep bool) {
	c.s.journal.Unlisten(sub.channel, sub)
	sub.mu.Lock()
	sub.ended = true
	sub.mu.Unlock()
	if sub.out != nil {
		sub.out.Remove()
	}
	if sub.in != nil {
		sub.in.Discard() // its partial message no longer counts against the connection
	}
	sub.ch.Unsubscribe(sub) // no more pushes after this
	if !keep {
		c.sched.DropOrdinary(sub.channel)
	}
}

// unsubscribeAll removes every subscription of the connection (its end).
func (c *conn) unsubscribeAll() {
	c.mu.Lock()
	subs := c.subs
	c.subs = map[string]*subscription{}
	c.mu.Unlock()
	for _, sub := range subs {
		c.endSubscription(sub, false)
	}
}

var _ adapters.Subscriber = (*subscription)(nil)
