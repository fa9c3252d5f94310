package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	tcpadapter "github.com/sidecar-dev/sidecar/adapters/tcp"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// Message is one data message received on a subscription. The consumer
// calls Release once it has taken the message (written the output,
// applied the action): on a windowed subscription that returns credit.
type Message struct {
	Method string
	Params json.RawMessage
	// Raw is the complete message text (reassembled if it came in fragments).
	Raw     []byte
	release func()
	once    sync.Once
	// whole: Raw is the buffer the transport read the message into (not
	// reassembled), which the consumer may hand back (Conn.recycleRead).
	whole bool
}

// Release releases the message's bytes; calling it more than once is harmless.
func (m *Message) Release() {
	m.once.Do(func() {
		if m.release != nil {
			m.release()
		}
	})
}

// Subscription is a client subscription to one channel.
type Subscription struct {
	c       *Conn
	Channel string
	// Windowed is true when the host accepted windowed delivery; then
	// ClientReceive bounds what the host sends and HostReceive what we send.
	// Grow changes both: read them with Limits once the subscription is in
	// use.
	Windowed      bool
	ClientReceive delivery.Limits
	HostReceive   delivery.Limits
	// Snapshot is the ordinary subscribe result's snapshot (nil when windowed:
	// the snapshot then arrives as the first data message).
	Snapshot *rpc.Snapshot

	q   msgQueue
	src *outQueue

	mu  sync.Mutex
	in  *delivery.Inbound
	out *delivery.Stream
}

func (s *Subscription) parts() (*delivery.Inbound, *delivery.Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.in, s.out
}

// maxOrdinaryQueue bounds messages queued for the consumer on an ordinary
// subscription (a windowed one is bounded by its window). Past it the host
// is flooding an ordinary subscription and the connection is closed.
const maxOrdinaryQueue = 4096

// maxOutQueueBytes bounds data we have accepted to send (UTF-8 bytes) but
// the window has not let out yet: Send blocks beyond it, which is the
// backpressure on the local input.
const maxOutQueueBytes = 128 << 10

// Subscribe subscribes to channel, offering windowed delivery unless
// Options.Ordinary is set.
func (c *Conn) Subscribe(ctx context.Context, channel string) (*Subscription, error) {
	return c.subscribe(ctx, channel, c.opts.Receive)
}

// subscribe is Subscribe offering receive (when windowed).
func (c *Conn) subscribe(ctx context.Context, channel string, receive delivery.Limits) (*Subscription, error) {
	sub := &Subscription{c: c, Channel: channel}
	sub.q.init()
	sub.src = newOutQueue()
	params := rpc.SubscribeParams{Channel: channel}
	if !c.opts.Ordinary {
		offer := receive
		params.FlowControl = &rpc.FlowControlOffer{Receive: &offer}
	}
	// Register before the request, counting with the offered limits, so
	// data that follows the result is counted even before Call returns.
	if !c.opts.Ordinary {
		sub.in = c.sched.NewInbound(channel, receive, c.opts.MaxMessageBytes)
	}
	c.mu.Lock()
	if _, dup := c.subs[channel]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("already subscribed to %s", channel)
	}
	c.subs[channel] = sub
	c.mu.Unlock()
	var res rpc.SubscribeResult
	if err := c.Call(ctx, rpc.MethodSubscribe, params, &res); err != nil {
		c.mu.Lock()
		delete(c.subs, channel)
		c.mu.Unlock()
		return nil, err
	}
	sub.Snapshot = res.Snapshot
	unbounded := delivery.Limits{WindowBytes: 1 << 60, MaximumFrameBytes: 1 << 60}
	sub.mu.Lock()
	if res.FlowControl != nil {
		sub.Windowed = true
		sub.ClientReceive = res.FlowControl.ClientReceive
		sub.HostReceive = res.FlowControl.HostReceive
		sub.in.SetLimits(sub.ClientReceive)
		sub.out = c.sched.AddStream(channel, sub.HostReceive, sub.src)
	} else {
		// Ordinary: nothing is counted; the stream only orders our sends.
		sub.in = nil
		sub.out = c.sched.AddStream(channel, unbounded, sub.src)
	}
	sub.mu.Unlock()
	sub.src.setStream(sub.out)
	return sub, nil
}

// receive handles a notification for this subscription (reader goroutine).
func (s *Subscription) receive(h *rpc.Header, raw []byte) error {
	in, out := s.parts()
	switch h.Method {
	case rpc.MethodChannelCredit:
		var p rpc.ChannelCreditParams
		if json.Unmarshal(h.Params, &p) != nil || out == nil {
			return nil
		}
		return out.Credit(p.ConsumedBytes)
	}
	if delivery.IsControlMethod(h.Method) {
		return s.q.push(&Message{Method: h.Method, Params: h.Params, Raw: raw}, 0)
	}
	if in == nil {
		return s.q.push(&Message{Method: h.Method, Params: h.Params, Raw: raw}, maxOrdinaryQueue)
	}
	size := delivery.UTF16Bytes(2 * len(raw))
	if !h.ASCII {
		size = delivery.Measure(raw)
	}
	if err := in.Receive(size); err != nil {
		return err
	}
	whole := true // raw is the transport's buffer
	if h.Method != rpc.MethodChannelFrame {
		if err := in.CheckWhole(); err != nil {
			return err
		}
	} else {
		var p rpc.ChannelFrameParams
		if json.Unmarshal(h.Params, &p) != nil {
			return &delivery.ViolationError{Kind: delivery.BadFragment, Channel: s.Channel}
		}
		msg, complete, err := in.Frame(p.Data, p.Final, size)
		if err != nil || !complete {
			return err
		}
		inner, perr := rpc.ParseHeader(msg)
		if perr != nil || inner.Channel != s.Channel {
			return &delivery.ViolationError{Kind: delivery.BadFragment, Channel: s.Channel}
		}
		h, raw, whole = inner, msg, false
	}
	return s.q.push(&Message{Method: h.Method, Params: h.Params, Raw: raw, whole: whole, release: func() { in.Release(size) }}, 0)
}

// Next returns the next data message; the consumer must Release it.
func (s *Subscription) Next(ctx context.Context) (*Message, error) {
	return s.q.pop(ctx)
}

// Send queues a data message (its complete JSON-RPC text) for this
// subscription; the delivery engine sends it within hostReceive. It
// blocks while maxOutQueueBytes are already waiting.
func (s *Subscription) Send(ctx context.Context, text []byte) error {
	return s.src.push(ctx, text, delivery.Measure(text), false, s.c.done)
}

// sendSized is Send for a message whose exact size in UTF-16 bytes the
// caller knows (tcp/data from its Encoder), built in a buffer from
// adapters/tcp.Buffer that may be recycled once written.
func (s *Subscription) sendSized(ctx context.Context, text []byte, size delivery.UTF16Bytes) error {
	return s.src.push(ctx, text, size, true, s.c.done)
}

// Dispatch sends dispatchAction with the next clientSeq and returns it.
func (s *Subscription) Dispatch(ctx context.Context, action any) (uint64, error) {
	return s.dispatch(ctx, action, nil)
}

// dispatch is Dispatch; onSeq, when set, learns the clientSeq before the
// action is sent (so an echo cannot arrive before it is known).
func (s *Subscription) dispatch(ctx context.Context, action any, onSeq func(uint64)) (uint64, error) {
	a, err := rpc.Marshal(action)
	if err != nil {
		return 0, err
	}
	seq := s.c.clientSeq.Add(1)
	if onSeq != nil {
		onSeq(seq)
	}
	text, err := rpc.Notification(rpc.MethodDispatchAction, rpc.DispatchActionParams{Channel: s.Channel, ClientSeq: seq, Action: a})
	if err != nil {
		return 0, err
	}
	return seq, s.Send(ctx, text)
}

// Unsubscribe ends the subscription.
func (s *Subscription) Unsubscribe() error {
	s.c.mu.Lock()
	delete(s.c.subs, s.Channel)
	s.c.mu.Unlock()
	if _, out := s.parts(); out != nil {
		out.Remove()
	}
	s.q.close(errUnsubscribed)
	return s.c.notify(rpc.MethodUnsubscribe, rpc.ChannelParams{Channel: s.Channel})
}

var errUnsubscribed = errors.New("client: unsubscribed")

// msgQueue hands received messages to the consumer. A windowed
// subscription's queue is bounded by its window (the host cannot send
// more than windowBytes + maximumFrameBytes unreleased).
type msgQueue struct {
	mu     sync.Mutex
	items  []*Message
	wake   chan struct{}
	closed error
}

func (q *msgQueue) init() { q.wake = make(chan struct{}, 1) }

func (q *msgQueue) push(m *Message, limit int) error {
	q.mu.Lock()
	if limit > 0 && len(q.items) >= limit {
		q.mu.Unlock()
		return fmt.Errorf("client: %d messages queued on an ordinary subscription: consumer too slow", limit)
	}
	q.items = append(q.items, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return nil
}

func (q *msgQueue) pop(ctx context.Context) (*Message, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			m := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.mu.Unlock()
			return m, nil
		}
		if q.closed != nil {
			err := q.closed
			q.mu.Unlock()
			return nil, err
		}
		q.mu.Unlock()
		select {
		case <-q.wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// popIf pops the first message without waiting if there is one and ok
// accepts it.
func (q *msgQueue) popIf(ok func(*Message) bool) *Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || !ok(q.items[0]) {
		return nil
	}
	m := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return m
}

func (q *msgQueue) close(err error) {
	if err == nil {
		err = errors.New("client: connection closed")
	}
	q.mu.Lock()
	if q.closed == nil {
		q.closed = err
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// outQueue is the Source of our outbound data on one subscription.
type outQueue struct {
	mu         sync.Mutex
	recyclable []byte // the message NextSized returned last, if its buffer may be reused
	items      []sizedText
	bytes      int           // UTF-8 bytes queued
	space      chan struct{} // 1-slot: room freed
	stream     *delivery.Stream
}

func newOutQueue() *outQueue { return &outQueue{space: make(chan struct{}, 1)} }

// sizedText is a queued message and its size in UTF-16 bytes.
type sizedText struct {
	text    []byte
	size    delivery.UTF16Bytes
	recycle bool // text's buffer may be reused once written
}

func (q *outQueue) push(ctx context.Context, text []byte, size delivery.UTF16Bytes, recycle bool, done <-chan struct{}) error {
	for {
		q.mu.Lock()
		if q.bytes == 0 || q.bytes+len(text) <= maxOutQueueBytes {
			q.items = append(q.items, sizedText{text, size, recycle})
			q.bytes += len(text)
			st := q.stream
			q.mu.Unlock()
			// Before Subscribe returns, stream is nil; setStream wakes it.
			if st != nil {
				st.Wake()
			}
			return nil
		}
		q.mu.Unlock()
		select {
		case <-q.space:
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return errors.New("client: connection closed")
		}
	}
}

func (q *outQueue) setStream(st *delivery.Stream) {
	q.mu.Lock()
	q.stream = st
	q.mu.Unlock()
	st.Wake()
}

// Next implements delivery.Source.
func (q *outQueue) Next() []byte {
	t, _ := q.NextSized()
	return t
}

// Recycle implements delivery.Recycler: the buffer of a tcp/data message
// TCPConn built (sendSized with recycle) goes back to the pool; other
// messages are left alone (their senders may still hold them).
func (q *outQueue) Recycle(text []byte) {
	q.mu.Lock()
	ok := q.recyclable != nil && unsafe.SliceData(q.recyclable) == unsafe.SliceData(text)
	q.recyclable = nil
	q.mu.Unlock()
	if ok {
		tcpadapter.Recycle(text)
	}
}

// NextSized implements delivery.SizedSource: the sizes were measured (or
// known) when the messages were queued, outside the writer goroutine.
func (q *outQueue) NextSized() ([]byte, delivery.UTF16Bytes) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, 0
	}
	t := q.items[0]
	q.items[0] = sizedText{}
	q.items = q.items[1:]
	q.bytes -= len(t.text)
	q.recyclable = nil
	if t.recycle {
		q.recyclable = t.text
	}
	select {
	case q.space <- struct{}{}:
	default:
	}
	return t.text, t.size
}

// Grow offers larger limits for this windowed subscription by subscribing
// again (seed 000 "Negotiation": the counters continue, only the limits
// change) and applies what the host accepted, which is at most offer and
// at least the limits in use. The receive side counts with offer from
// before the request, so data the host sends under the new limits is
// never taken for a violation. Errors: not windowed, offer smaller than
// the limits in use, or the subscribe call's error.
func (s *Subscription) Grow(ctx context.Context, offer delivery.Limits) error {
	s.mu.Lock()
	in, out, cur := s.in, s.out, s.ClientReceive
	s.mu.Unlock()
	if !s.Windowed || in == nil || out == nil {
		return errors.New("client: only a windowed subscription can grow its limits")
	}
	if offer.WindowBytes < cur.WindowBytes || offer.MaximumFrameBytes < cur.MaximumFrameBytes {
		return fmt.Errorf("client: Grow offer %+v is below the limits in use %+v", offer, cur)
	}
	in.SetLimits(offer)
	var res rpc.SubscribeResult
	err := s.c.Call(ctx, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: s.Channel,
		FlowControl: &rpc.FlowControlOffer{Receive: &offer}}, &res)
	if err == nil && res.FlowControl == nil {
		err = errors.New("client: the host answered a re-subscribe without flowControl")
	}
	if err != nil {
		in.SetLimits(cur)
		return err
	}
	s.mu.Lock()
	s.ClientReceive = res.FlowControl.ClientReceive
	s.HostReceive = res.FlowControl.HostReceive
	s.mu.Unlock()
	in.SetLimits(res.FlowControl.ClientReceive)
	out.SetLimits(res.FlowControl.HostReceive)
	return nil
}

// Limits returns the limits in use: clientReceive and hostReceive.
func (s *Subscription) Limits() (clientReceive, hostReceive delivery.Limits) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ClientReceive, s.HostReceive
}

// Window returns our sending window for this subscription: sent and
// consumed UTF-16 bytes and the limits (hostReceive); zero when ordinary.
func (s *Subscription) Window() (sent, consumed delivery.UTF16Bytes, l delivery.Limits) {
	_, out := s.parts()
	if out == nil {
		return 0, 0, delivery.Limits{}
	}
	return out.Window()
}

// Initialize sends initialize on a Conn made with NewConn (Dial does it
// itself). Its result is available from Initialized.
func (c *Conn) Initialize(ctx context.Context) error { return c.initialize(ctx) }
