package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
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
	// binary is set on a data message that came in its binary form
	// (bytestream.ParseBinary) to a subscription that takes it
	// (Subscription.stream): Params is nil and Raw the buffer
	// binary.Data is a view of (whole).
	binary *rpc.BinaryData
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

	q     msgQueue
	src   *outQueue
	offer delivery.Limits // the windowed offer, made again on reconnect

	mu   sync.Mutex
	link *link // the link in and out belong to; nil while reconnecting
	in   *delivery.Inbound
	out  *delivery.Stream
	live bool // subscribed: a reconnect asks to keep it
	// lastApplied is the serverSeq of the last action (or snapshot) this
	// subscription received and kept: a reconnect's lastAppliedServerSeq.
	lastApplied uint64
	// awaitHead, while awaiting, is the reconnect result's headSeq: once
	// an action this far has arrived, the dispatchActions whose echoes
	// did not are sent again (write-ahead reconciliation).
	awaitHead uint64
	awaiting  bool

	// Gap recovery of an ordinary subscription (gap.go), under mu:
	// sync is its state; started once the subscribe result is applied;
	// gapEpoch counts the gaps; paging while a pager runs; held keeps
	// the live actions that arrive while not Current (heldBytes of their
	// text), overflow when they went past the bounds (subscribe again).
	// syncMu orders the state changes told to Options.OnSync (taken
	// before mu).
	syncMu    sync.Mutex
	sync      SyncState
	started   bool
	gapEpoch  uint64
	paging    bool
	overflow  bool
	held      []*Message
	heldBytes int

	// stream: the subscription is a byte stream's (a TCPConn's): its
	// consumer reads data messages that came in binary form (any other
	// gets their text, Conn.handleData), its sent messages are retained
	// until credited (outQueue.ret), and a reconnect resumes it by
	// offsets (rpc.StreamOffsets): streamRecv, the bytes its consumer has
	// taken of the host's direction, and streamEOF, whether it took the
	// end of stream.
	stream     bool
	streamRecv atomic.Uint64
	streamEOF  atomic.Bool
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
	return c.subscribe(ctx, channel, c.opts.Receive, false)
}

// subscribe is Subscribe offering receive (when windowed); stream says
// the subscription is a byte stream's (Subscription.stream).
func (c *Conn) subscribe(ctx context.Context, channel string, receive delivery.Limits, stream bool) (*Subscription, error) {
	l, err := c.currentLink(ctx)
	if err != nil {
		return nil, err
	}
	sub := &Subscription{c: c, Channel: channel, offer: receive, stream: stream}
	sub.q.init()
	sub.src = newOutQueue()
	if stream && !c.opts.Ordinary {
		sub.src.ret = &bytestream.Retained{}
	}
	params := rpc.SubscribeParams{Channel: channel}
	if !c.opts.Ordinary {
		offer := receive
		params.FlowControl = &rpc.FlowControlOffer{Receive: &offer}
	}
	// Register before the request, counting with the offered limits, so
	// data that follows the result is counted even before Call returns.
	sub.link = l
	if !c.opts.Ordinary {
		sub.in = l.sched.NewInbound(channel, receive, c.opts.MaxMessageBytes)
	}
	c.mu.Lock()
	if _, dup := c.subs[channel]; dup {
		c.mu.Unlock()
		return nil, fmt.Errorf("already subscribed to %s", channel)
	}
	c.subs[channel] = sub
	c.mu.Unlock()
	var res rpc.SubscribeResult
	if err := c.callOn(ctx, l, rpc.MethodSubscribe, params, &res, nil); err != nil {
		c.mu.Lock()
		delete(c.subs, channel)
		c.mu.Unlock()
		return nil, err
	}
	unbounded := delivery.Limits{WindowBytes: 1 << 60, MaximumFrameBytes: 1 << 60}
	c.mu.Lock()
	if c.link != l {
		// Lost between the result and now, before a reconnect could
		// ask for it: the host may hold it, we cannot resume it.
		delete(c.subs, channel)
		c.mu.Unlock()
		return nil, &lostCallError{method: rpc.MethodSubscribe, cause: errors.New("the transport ended")}
	}
	sub.mu.Lock()
	sub.Snapshot = res.Snapshot
	if res.FlowControl != nil {
		sub.Windowed = true
		sub.ClientReceive = res.FlowControl.ClientReceive
		sub.HostReceive = res.FlowControl.HostReceive
		sub.in.SetLimits(sub.ClientReceive)
		sub.out = l.sched.AddStream(channel, sub.HostReceive, sub.src)
	} else {
		// Ordinary: nothing is counted; the stream only orders our sends.
		sub.in = nil
		sub.out = l.sched.AddStream(channel, unbounded, sub.src)
		if res.Snapshot != nil && res.Snapshot.FromSeq > sub.lastApplied {
			sub.lastApplied = res.Snapshot.FromSeq
		}
	}
	sub.live = true
	sub.started = true
	out := sub.out
	sub.mu.Unlock()
	c.mu.Unlock()
	sub.src.setStream(out)
	sub.startRecovery() // a gap that came with the result
	return sub, nil
}

// receive handles a notification for this subscription (reader goroutine).
func (s *Subscription) receive(l *link, h *rpc.Header, raw []byte) error {
	s.mu.Lock()
	cur, in, out := s.link, s.in, s.out
	s.mu.Unlock()
	if cur != l {
		return nil // not (yet) resumed on this link
	}
	switch h.Method {
	case rpc.MethodChannelCredit:
		var p rpc.ChannelCreditParams
		if json.Unmarshal(h.Params, &p) != nil || out == nil {
			return nil
		}
		return out.Credit(p.ConsumedBytes)
	case rpc.MethodChannelEnded:
		s.ended(h.Params)
		return nil
	}
	if rpc.IsControlMethod(h.Method) {
		return s.q.push(&Message{Method: h.Method, Params: h.Params, Raw: raw}, 0)
	}
	if in == nil {
		if h.Method == rpc.MethodChannelGap {
			return s.onGap(h.Params, raw)
		}
		m := &Message{Method: h.Method, Params: h.Params, Raw: raw}
		if h.Method == rpc.MethodAction && s.hold(m) {
			return nil // stale: delivered once the gap is filled
		}
		s.note(h.Method, h.Params, true)
		return s.q.push(m, maxOrdinaryQueue)
	}
	size := h.Size(raw)
	frame, err := rpc.Fragment(h, s.Channel)
	if err != nil {
		return err
	}
	inner, msg, complete, err := delivery.Accept(in, size, frame, rpc.ParseNotification)
	if err != nil || !complete {
		return err
	}
	whole := frame == nil // raw is the transport's buffer
	if !whole {
		h, raw = inner, msg
	}
	s.note(h.Method, h.Params, false)
	release := func() {
		// Only data of the link in use returns credit: what the old
		// connection delivered is kept, never credited on the new one.
		if cur, _ := s.parts(); cur == in {
			in.Release(size)
		}
	}
	return s.q.push(&Message{Method: h.Method, Params: h.Params, Raw: raw, whole: whole, binary: h.Binary, release: release}, 0)
}

// Next returns the next data message; the consumer must Release it.
func (s *Subscription) Next(ctx context.Context) (*Message, error) {
	return s.q.pop(ctx)
}

// Send queues a data message (its complete JSON-RPC text) for this
// subscription; the delivery engine sends it within hostReceive. It
// blocks while maxOutQueueBytes are already waiting.
func (s *Subscription) Send(ctx context.Context, text []byte) error {
	return s.src.push(ctx, text, delivery.Measure(text), false, s.c.done, 0)
}

// sendStream queues a byte stream's data message m (its text or binary
// form, its Size set: bytestream.Encoder.Data) or, with eof, its end of
// stream, whose bytes end at end; recycle: built in a buffer from
// bytestream.Buffer that may go back once released.
func (s *Subscription) sendStream(ctx context.Context, m delivery.Message, end bytestream.DecodedOffset, eof, recycle bool) error {
	return s.src.pushItem(ctx, sizedText{m: m, recycle: recycle, end: end, eof: eof, stream: true}, s.c.done)
}

// Binary reports whether the link in use carries data messages in their
// binary form (delivery.Stream.Binary): a sender then builds that form.
func (s *Subscription) Binary() bool {
	_, out := s.parts()
	return out != nil && out.Binary()
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
	// Remembered until its echo arrives (write-ahead reconciliation).
	return seq, s.src.push(ctx, text, delivery.Measure(text), false, s.c.done, seq)
}

// Unsubscribe ends the subscription. While the Conn reconnects, the
// channel is simply not asked for again.
func (s *Subscription) Unsubscribe() error {
	s.c.mu.Lock()
	if s.c.subs[s.Channel] == s {
		delete(s.c.subs, s.Channel)
	}
	s.c.mu.Unlock()
	s.end(errUnsubscribed)
	err := s.c.notify(rpc.MethodUnsubscribe, rpc.ChannelParams{Channel: s.Channel})
	if errors.Is(err, ErrConnectionLost) {
		return nil
	}
	return err
}

// end ends the subscription with err: Next and Send return it.
func (s *Subscription) end(err error) {
	if err == nil {
		err = errors.New("client: connection closed")
	}
	s.mu.Lock()
	out := s.out
	s.live = false
	s.mu.Unlock()
	if out != nil {
		out.Remove()
	}
	s.q.close(err)
	s.src.close(err)
}

var errUnsubscribed = errors.New("client: unsubscribed")

// ended handles channel/ended (docs/protocol.md): the host ended the
// subscription (a revoked terminal share). What was received before it
// is still read; then Next returns the host's reason as an *rpc.Error
// (-32009 for a revoked share), and the channel is not asked for again
// on a reconnect.
func (s *Subscription) ended(params json.RawMessage) {
	var p rpc.ChannelEndedParams
	e := &rpc.Error{Code: rpc.CodeInternalError, Message: "the host ended the subscription to " + s.Channel}
	if json.Unmarshal(params, &p) == nil && p.Error.Code != 0 {
		e = &p.Error
	}
	s.c.mu.Lock()
	if s.c.subs[s.Channel] == s {
		delete(s.c.subs, s.Channel)
	}
	s.c.mu.Unlock()
	s.end(e)
}

// msgQueue hands received messages to the consumer. A windowed
// subscription's queue is bounded by its window (the host cannot send
// more than windowBytes + maximumFrameBytes unreleased).
type msgQueue struct {
	mu     sync.Mutex
	items  []*Message
	wake   chan struct{}
	room   chan struct{} // 1-slot: a message was taken (pushWait)
	closed error
}

func (q *msgQueue) init() { q.wake, q.room = make(chan struct{}, 1), make(chan struct{}, 1) }

// taken tells pushWait that room was made.
func (q *msgQueue) taken() {
	select {
	case q.room <- struct{}{}:
	default:
	}
}

func (q *msgQueue) push(m *Message, limit int) error {
	q.mu.Lock()
	if limit > 0 && len(q.items) >= limit {
		q.mu.Unlock()
		return fmt.Errorf("client: %d messages queued on an ordinary subscription: consumer too slow", limit)
	}
	q.appendUnlock(m)
	return nil
}

// appendUnlock appends m, unlocks q (held by the caller) and wakes pop.
func (q *msgQueue) appendUnlock(m *Message) {
	q.items = append(q.items, m)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *msgQueue) pop(ctx context.Context) (*Message, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			m := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.mu.Unlock()
			q.taken()
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
	q.taken()
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
	q.taken()
}

// outQueue is the Source of our outbound data on one subscription. It
// also remembers each dispatchAction (seq > 0) from its push until its
// echo arrives (the write-ahead log, wal): after a reconnect those that
// were handed to the writer and saw no echo are sent again (replay) or
// counted as of unknown fate (snapshot recovery).
type outQueue struct {
	mu         sync.Mutex
	recyclable []byte // the message NextSized returned last, if its buffer may be reused
	items      []sizedText
	bytes      int           // UTF-8 bytes queued
	space      chan struct{} // 1-slot: room freed
	stream     *delivery.Stream
	held       bool  // reconnecting: NextSized hands out nothing
	closed     error // the subscription ended: push fails with it
	// ret, on a byte stream's queue, keeps the data and end-of-stream
	// messages sent and not yet credited, to send again after a
	// reconnect (at most the window plus one message).
	ret *bytestream.Retained

	wal       []walEntry // seq order
	walBytes  int        // UTF-8 bytes in wal
	forgotten int        // sent entries dropped by the bound, echo unseen
}

// walEntry is a dispatchAction waiting for its echo.
type walEntry struct {
	seq  uint64
	text []byte
	size delivery.UTF16Bytes
	sent bool // handed to the writer (its fate is unknown until the echo)
}

// Bounds of the write-ahead log of one subscription. A windowed
// terminal's unechoed input is at most its window plus maxOutQueueBytes
// (the host echoes input before it credits it); these bound an ordinary
// subscription, which no window bounds. Past them the oldest sent entries
// are forgotten: after a reconnect they count as of unknown fate.
const (
	maxRememberedBytes   = 1 << 20
	maxRememberedActions = 4096
)

func newOutQueue() *outQueue { return &outQueue{space: make(chan struct{}, 1)} }

// sizedText is a queued message: its text (or binary form) and its size
// in UTF-16 bytes.
type sizedText struct {
	m       delivery.Message
	recycle bool   // the message's buffer may be reused once written
	seq     uint64 // the clientSeq of a dispatchAction, else 0
	// stream: a byte stream's data message (or, eof, its end of stream)
	// whose bytes end at end.
	stream bool
	eof    bool
	end    bytestream.DecodedOffset
}

// bytes is what the queued message holds in memory (UTF-8 bytes of its
// text, or of its binary form): maxOutQueueBytes counts it.
func (it *sizedText) bytes() int { return len(it.m.Text) + len(it.m.Binary) }

func (q *outQueue) push(ctx context.Context, text []byte, size delivery.UTF16Bytes, recycle bool, done <-chan struct{}, seq uint64) error {
	return q.pushItem(ctx, sizedText{m: delivery.Message{Text: text, Size: size}, recycle: recycle, seq: seq}, done)
}

func (q *outQueue) pushItem(ctx context.Context, it sizedText, done <-chan struct{}) error {
	n, seq := it.bytes(), it.seq
	for {
		q.mu.Lock()
		if q.closed != nil {
			err := q.closed
			q.mu.Unlock()
			return err
		}
		if q.bytes == 0 || q.bytes+n <= maxOutQueueBytes {
			q.items = append(q.items, it)
			q.bytes += n
			if seq > 0 {
				q.remember(walEntry{seq: seq, text: it.m.Text, size: it.m.Size})
			}
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

// remember appends e to the wal within its bounds. Call with mu held.
func (q *outQueue) remember(e walEntry) {
	q.wal = append(q.wal, e)
	q.walBytes += len(e.text)
	for len(q.wal) > 1 && q.wal[0].sent && (len(q.wal) > maxRememberedActions || q.walBytes > maxRememberedBytes) {
		q.walBytes -= len(q.wal[0].text)
		q.wal[0] = walEntry{}
		q.wal = q.wal[1:]
		q.forgotten++
	}
}

// echo forgets the dispatchActions up to seq: the host has seen them (it
// echoes in order; one it dropped as malformed has no echo to wait for).
func (q *outQueue) echo(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.wal) > 0 && q.wal[0].seq <= seq && q.wal[0].sent {
		q.walBytes -= len(q.wal[0].text)
		q.wal[0] = walEntry{}
		q.wal = q.wal[1:]
	}
}

// hold stops handing out messages (the link is gone) and drops the stream.
func (q *outQueue) hold() {
	q.mu.Lock()
	q.held = true
	q.stream = nil
	q.mu.Unlock()
}

// takeForgotten returns and resets the forgotten count.
func (q *outQueue) takeForgotten() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.forgotten
	q.forgotten = 0
	return n
}

// reconcile ends a hold after a reconnect. With resend, the remembered
// dispatchActions that were sent and saw no echo go out again first, in
// order, and 0 is returned; without (snapshot recovery), they are
// forgotten and their number returned (of unknown fate), with those the
// bound forgot.
func (q *outQueue) reconcile(resend bool) (unknown int) {
	q.mu.Lock()
	var again []sizedText
	keep := q.wal[:0]
	for _, e := range q.wal {
		switch {
		case !e.sent:
			keep = append(keep, e)
		case resend:
			again = append(again, sizedText{m: delivery.Message{Text: e.text, Size: e.size}, seq: e.seq})
			q.bytes += len(e.text)
			e.sent = false
			keep = append(keep, e)
		default:
			unknown++
			q.walBytes -= len(e.text)
		}
	}
	clear(q.wal[len(keep):])
	q.wal = keep
	if !resend {
		unknown += q.forgotten
		q.forgotten = 0
	}
	q.items = append(again, q.items...)
	q.held = false
	st := q.stream
	q.mu.Unlock()
	if st != nil {
		st.Wake()
	}
	return unknown
}

// close makes push fail with err and drops what waits.
func (q *outQueue) close(err error) {
	q.mu.Lock()
	if q.closed == nil {
		q.closed = err
	}
	q.items, q.bytes, q.wal, q.walBytes = nil, 0, nil, 0
	if q.ret != nil {
		q.ret.Drop()
	}
	q.mu.Unlock()
	select {
	case q.space <- struct{}{}:
	default:
	}
}

func (q *outQueue) setStream(st *delivery.Stream) {
	q.mu.Lock()
	q.stream = st
	q.mu.Unlock()
	st.Wake()
}

// Recycle implements delivery.Recycler: the buffer of a data message a
// byte stream built (sendStream with recycle) goes back to the pool; other
// messages are left alone (their senders may still hold them).
func (q *outQueue) Recycle(m delivery.Message) {
	q.mu.Lock()
	b := m.Binary
	if b == nil {
		b = m.Text
	}
	ok := q.recyclable != nil && unsafe.SliceData(q.recyclable) == unsafe.SliceData(b)
	q.recyclable = nil
	q.mu.Unlock()
	if ok && m.Framed != nil {
		b = m.Framed // the buffer starts at the frame room
	}
	if ok {
		bytestream.Recycle(b)
	}
}

// Next implements delivery.Source: the sizes were measured (or known)
// when the messages were queued, outside the writer goroutine.
func (q *outQueue) Next() delivery.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || q.held {
		return delivery.Message{}
	}
	t := q.items[0]
	q.items[0] = sizedText{}
	q.items = q.items[1:]
	q.bytes -= t.bytes()
	if t.seq > 0 {
		// Handed to the writer: its fate is unknown until its echo.
		for i := range q.wal {
			if q.wal[i].seq == t.seq {
				q.wal[i].sent = true
				break
			}
		}
	}
	q.recyclable = nil
	switch {
	case q.ret != nil && t.stream:
		// Retained until credited (its buffer goes back then).
		if q.stream != nil {
			sent, consumed, _ := q.stream.Window()
			q.ret.Credit(consumed)
			q.ret.Sent(t.m, sent, t.end, t.eof, t.recycle)
		}
	case t.recycle:
		q.recyclable = t.m.Binary
		if q.recyclable == nil {
			q.recyclable = t.m.Text
		}
	}
	select {
	case q.space <- struct{}{}:
	default:
	}
	return t.m
}

// Grow offers larger limits for this windowed subscription by subscribing
// again (seed 000 "Negotiation": the counters continue, only the limits
// change) and applies what the host accepted, which is at most offer and
// at least the limits in use. The receive side counts with offer from
// before the request, so data the host sends under the new limits is
// never taken for a violation. Errors: not windowed, offer smaller than
// the limits in use, or the subscribe call's error.
//
// The re-subscribe goes on the link in use when Grow is called and fails
// if that link is lost: a reconnect negotiates the limits afresh (counting
// with offer on a new link's receive side would be too late).
func (s *Subscription) Grow(ctx context.Context, offer delivery.Limits) error {
	s.mu.Lock()
	l, in, out, cur := s.link, s.in, s.out, s.ClientReceive
	s.mu.Unlock()
	if !s.Windowed || l == nil || in == nil || out == nil {
		return errors.New("client: only a windowed subscription can grow its limits")
	}
	if offer.WindowBytes < cur.WindowBytes || offer.MaximumFrameBytes < cur.MaximumFrameBytes {
		return fmt.Errorf("client: Grow offer %+v is below the limits in use %+v", offer, cur)
	}
	in.SetLimits(offer)
	var res rpc.SubscribeResult
	err := s.c.callOn(ctx, l, rpc.MethodSubscribe, rpc.SubscribeParams{Channel: s.Channel,
		FlowControl: &rpc.FlowControlOffer{Receive: &offer}}, &res, nil)
	if err == nil && res.FlowControl == nil {
		err = errors.New("client: the host answered a re-subscribe without flowControl")
	}
	if err != nil {
		in.SetLimits(cur)
		return err
	}
	s.mu.Lock()
	if s.link != l {
		s.mu.Unlock()
		return &lostCallError{method: rpc.MethodSubscribe, cause: errors.New("the transport ended")}
	}
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

// FrameBytes is the size of the data messages to build (UTF-16
// bytes): hostReceive's maximumFrameBytes, lowered on a slow path
// (delivery.Stream.FrameBytes).
func (s *Subscription) FrameBytes() delivery.UTF16Bytes {
	_, out := s.parts()
	if out == nil {
		_, host := s.Limits()
		return host.MaximumFrameBytes
	}
	return out.FrameBytes()
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
