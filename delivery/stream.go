package delivery

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stream is the sending side of one windowed subscription on a Scheduler
// (seed 000 "Window and Credit"): its window, the message in progress, and
// the Source it pulls from.
type Stream struct {
	sched   *Scheduler
	channel string
	src     Source
	removed atomic.Bool
	changed chan struct{} // 1-slot: window or pull state may have changed

	mu        sync.Mutex
	win       *SendWindow
	bdp       bdpEstimator
	blockedAt time.Time // when the window last filled; zero while open

	// Owned by the Scheduler's writer goroutine.
	frag    *Fragmenter
	pending Message // built, debited, not yet handed to the transport
	whole   bool    // pending is a message from src, not a fragment
	deficit UTF16Bytes
}

// AddStream registers a windowed subscription to channel sending within
// limits (the negotiated clientReceive on the host, hostReceive on the
// client). Call it only after the subscribe result has been queued: the
// result is protected and so always precedes the stream's first data.
func (s *Scheduler) AddStream(channel string, limits Limits, src Source) *Stream {
	st := &Stream{sched: s, channel: channel, src: src, win: NewSendWindow(limits), changed: make(chan struct{}, 1)}
	if a, ok := src.(Attacher); ok {
		a.Attach(st)
	}
	s.mu.Lock()
	s.streams = append(s.streams, st)
	s.mu.Unlock()
	s.signal()
	return st
}

// Channel returns the subscription's channel URI.
func (st *Stream) Channel() string { return st.channel }

// Remove takes the stream off the scheduler (unsubscribe, dispose). A
// message in progress is abandoned; an Attacher source is detached.
func (st *Stream) Remove() {
	if st.removed.Swap(true) {
		return
	}
	if a, ok := st.src.(Attacher); ok {
		a.Detach()
	}
	s := st.sched
	s.mu.Lock()
	for i, x := range s.streams {
		if x == st {
			s.streams = append(s.streams[:i], s.streams[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	st.notify()
}

// Removed reports whether Remove was called.
func (st *Stream) Removed() bool { return st.removed.Load() }

func (st *Stream) notify() {
	select {
	case st.changed <- struct{}{}:
	default:
	}
}

// Changed returns a channel that receives (coalesced) when the stream's
// ability to start a message may have changed: credit arrived, or the
// Scheduler pulled from the Source. Adapters that pace their source (the
// PTY reader) wait on it.
func (st *Stream) Changed() <-chan struct{} { return st.changed }

// Wake tells the Scheduler that the Source has data again.
func (st *Stream) Wake() { st.sched.signal() }

// CanStart reports whether a data message could start now:
// outstanding < windowBytes, and below the path's cap (bdp.go).
func (st *Stream) CanStart() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.canStartLocked()
}

func (st *Stream) canStartLocked() bool {
	if !st.win.CanStart() {
		return false
	}
	if c := st.pathCapLocked(); c > 0 && st.win.Outstanding() >= c {
		return false
	}
	return true
}

// Room is the pacing rule every producer asks (DESIGN.md §5, seed 000
// "Window and Credit"): the UTF-16 bytes a data message may still take
// now, windowBytes − outstanding, capped by the path's BDP estimate
// (pathCapLocked). Zero means no message may start; a positive value
// means one may start and may overshoot it by at most one frame.
// Producers that read ahead subtract what they hold unpulled themselves.
func (st *Stream) Room() UTF16Bytes {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.roomLocked()
}

func (st *Stream) roomLocked() UTF16Bytes {
	if !st.canStartLocked() {
		return 0
	}
	room := st.win.Remaining()
	if c := st.pathCapLocked(); c > 0 {
		room = min(room, c-st.win.Outstanding())
	}
	return room
}

// WaitRoom is the pacing question a producer that reads a source asks
// (DESIGN.md §5, seed 000 "When the Window Is Full"): it blocks until the
// producer may read more, that is until Room exceeds what it holds read
// ahead and not yet pulled (held(), UTF-16 bytes of the messages it built
// or will build from it) and that hold is below maxHeld; it returns the
// room beyond the hold, which the producer may fill (a message may still
// overshoot it by one frame). It returns 0 when wake or done fires first
// (the producer checks its own state and asks again), and removed true,
// at once, for a stream taken off its scheduler (nothing paces it any
// more). The PTY reader and the TCP socket reader ask it; neither reads
// while it waits, so the program or the peer is held back by its own
// kernel buffers (derp's rate limit: pacing reads is the backpressure).
func (st *Stream) WaitRoom(held func() UTF16Bytes, maxHeld UTF16Bytes, wake, done <-chan struct{}) (room UTF16Bytes, removed bool) {
	for {
		if st.removed.Load() {
			return 0, true
		}
		if h := held(); h < maxHeld {
			if r := st.Room() - h; r > 0 {
				return r, false
			}
		}
		select {
		case <-st.changed:
		case <-wake:
			return 0, false
		case <-done:
			return 0, false
		}
	}
}

// Fits reports whether a message that takes need UTF-16 bytes of the
// window (Cost: its size, or its fragments' when it is larger than a
// frame) would go out whole within the window now, for a producer whose
// messages must never stall half-sent (telemetry: a batch arrives whole
// or not at all, never late): need fits in what is left, and a message
// may start. One larger than the whole window fits only when nothing is
// outstanding. The window, not Room's path cap, is the test: a message the
// window holds is never left half-sent waiting for the client to read,
// while the path cap delays its tail by a round trip at most.
func (st *Stream) Fits(need UTF16Bytes) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.removed.Load() {
		return false
	}
	if need > st.win.Limits().WindowBytes {
		return st.win.Outstanding() == 0
	}
	return st.canStartLocked() && need <= st.win.Remaining()
}

// Cost returns the UTF-16 bytes the data message text takes from the
// window when it is sent (seed 000 "Message Size", "Fragments"): its size
// when it fits maximumFrameBytes whole, else what its channel/frame
// fragments take: the text escaped as JSON string pieces and an envelope
// each, fragments as large as the frame limit allows (a message that
// starts within the window is cut to the frame limit, not the credit). A
// fragment never splits an escape or a surrogate pair, so it may fall
// short of the limit by up to fragmentSlack: the cost counts that too,
// never less than the fragments take (TestCost).
func (st *Stream) Cost(text []byte) UTF16Bytes {
	size := Measure(text)
	maxFrame := st.Limits().MaximumFrameBytes
	if size <= maxFrame {
		return size
	}
	return fragmentedCost(st.channel, text, maxFrame)
}

// fragmentSlack is the most a fragment falls short of its budget: an
// escape (\u00XX, 6 code units) or a surrogate pair not divided.
const fragmentSlack UTF16Bytes = 2 * 6

// fragmentedCost is Cost for a message larger than maxFrame.
func fragmentedCost(channel string, text []byte, maxFrame UTF16Bytes) UTF16Bytes {
	escaped := jsonStringSize(text) - 4 // the pieces' quotes are in the overhead
	overhead := FrameOverhead(channel, true)
	per := maxFrame - overhead - fragmentSlack
	if per <= 0 {
		return escaped + overhead
	}
	frames := (escaped + per - 1) / per
	return escaped + frames*overhead
}

// Limits returns the stream's limits (the peer's receive limits).
func (st *Stream) Limits() Limits {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.win.Limits()
}

// FrameBytes is the size of the frames a source should build for this
// stream (UTF-16 bytes): the peer's maximumFrameBytes, lowered on a slow
// path so that one frame holds the path for at most bdpFrameTime and
// another stream's message never waits long behind it. It changes with
// the path's measured rate; a larger message is still valid (Limits).
func (st *Stream) FrameBytes() UTF16Bytes {
	st.mu.Lock()
	defer st.mu.Unlock()
	m := st.win.Limits().MaximumFrameBytes
	if f := st.bdp.frameLimit(); f > 0 && f < m {
		return f
	}
	return m
}

// Idle reports whether everything sent has been credited by the peer.
func (st *Stream) Idle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.win.Outstanding() == 0
}

// pathCapLocked is the BDP cap, but never below a quarter of the window:
// a receiver that is not caught up credits every sixteenth of a window
// (creditDivisor), so the cap keeps several credits in flight and a short
// round trip never turns into stop-and-wait. A higher floor (it was half)
// lets one busy stream keep more queued in the receiver's socket buffer
// where the receiver, not the link, is the bottleneck (loopback), which
// delays every other stream's messages; a lower one (an eighth) cost a
// fifth of loopback throughput for a few tenths of a millisecond.
func (st *Stream) pathCapLocked() UTF16Bytes {
	c := st.bdp.limit()
	if c == 0 {
		return 0
	}
	return max(c, st.win.Limits().WindowBytes/4)
}

// Window returns a copy of the window counters: sent, consumed and limits.
func (st *Stream) Window() (sent, consumed UTF16Bytes, l Limits) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.win.Sent(), st.win.Consumed(), st.win.Limits()
}

// SetLimits changes the limits and keeps the counters (a re-subscribe).
func (st *Stream) SetLimits(l Limits) {
	st.mu.Lock()
	st.win.SetLimits(l)
	st.mu.Unlock()
	st.sched.signal()
	st.notify()
}

// Credit applies a channel/credit consumedBytes received from the peer.
// Stale values are ignored; a value beyond what was sent is a
// *ViolationError, which must close the connection.
func (st *Stream) Credit(consumed UTF16Bytes) error {
	st.mu.Lock()
	advanced, err := st.win.Credit(consumed)
	if advanced {
		st.bdp.credited(consumed, time.Now())
	}
	if advanced && !st.blockedAt.IsZero() && st.win.CanStart() {
		st.sched.creditWait.Add(int64(time.Since(st.blockedAt)))
		st.blockedAt = time.Time{}
	}
	st.mu.Unlock()
	if err != nil {
		if v, ok := err.(*ViolationError); ok && v.Channel == "" {
			v.Channel = st.channel
		}
		return err
	}
	if advanced {
		st.sched.signal()
		st.notify()
	}
	return nil
}

// ready returns the stream's next frame size, building (and debiting) it if
// needed; ok is false if it cannot send now. Writer goroutine only.
func (st *Stream) ready() (size UTF16Bytes, ok bool) {
	if st.removed.Load() {
		return 0, false
	}
	if !st.pending.IsZero() {
		return st.pending.Size, true
	}
	st.mu.Lock()
	remaining := st.roomLocked()
	limits := st.win.Limits()
	st.mu.Unlock()
	if remaining <= 0 {
		return 0, false
	}
	if st.frag == nil {
		m := st.src.Next()
		st.notify()
		if m.IsZero() {
			return 0, false
		}
		m = m.sized()
		if m.Size <= limits.MaximumFrameBytes {
			ok := st.debit(m)
			st.whole = ok
			return m.Size, ok
		}
		// Fragments split the text (seed 000 "Fragments"): a message
		// that came in binary form alone is built as text first.
		st.frag = NewFragmenter(st.channel, m.text(nil))
	}
	// Size the fragment to the remaining credit when that is below the
	// frame limit (seed 000 "Fragments"), but never so small that the
	// envelope dominates.
	budget := limits.MaximumFrameBytes
	if floor := FrameOverhead(st.channel, true) + minFragmentPayload; remaining < budget {
		budget = max(remaining, floor)
		budget = min(budget, limits.MaximumFrameBytes)
	}
	frame, size, final, err := st.frag.Next(nil, budget)
	if err != nil {
		// Negotiation guarantees one character fits in MaximumFrameBytes;
		// a smaller floor budget cannot fail either. Abandon the message
		// rather than loop.
		st.frag = nil
		return 0, false
	}
	if final {
		st.frag = nil
	}
	return size, st.debit(Message{Text: frame, Size: size})
}

// minFragmentPayload is the least UTF-16 bytes of data a fragment carries
// when the remaining credit is smaller: below it the envelope would be most
// of what is sent.
const minFragmentPayload UTF16Bytes = 256

// debit debits m's size and makes m the pending frame; false if the
// window refused it.
func (st *Stream) debit(m Message) bool {
	st.mu.Lock()
	err := st.win.Debit(m.Size)
	now := time.Now()
	if err == nil {
		st.bdp.sent(st.win.Sent(), st.win.Consumed(), now)
	}
	if err == nil && !st.win.CanStart() {
		if st.blockedAt.IsZero() {
			st.sched.creditWaits.Add(1)
		}
		st.blockedAt = now
	}
	st.mu.Unlock()
	if err != nil {
		return false // cannot happen: CanStart was checked by this goroutine
	}
	st.pending = m
	return true
}

func (st *Stream) take() Message {
	m := st.pending
	st.pending = Message{}
	if st.whole {
		st.whole = false
		if r, ok := st.src.(Recycler); ok {
			st.sched.recycle = r
		}
	}
	return m
}

// Binary reports whether the connection carries data messages in their
// binary form (SchedulerConfig.Binary): a Source then builds only that
// form (Message.Binary); otherwise it builds the text, which is what will
// be written.
func (st *Stream) Binary() bool { return st.sched.cfg.Binary }

// Inbound is the receiving side of one windowed subscription: it counts
// what arrives, reassembles channel/frame fragments, and returns credit as
// the consumer releases bytes (seed 000 "Window and Credit").
type Inbound struct {
	sched   *Scheduler
	channel string

	mu        sync.Mutex
	win       *RecvWindow
	re        *Reassembler
	discarded bool
}

// NewInbound returns the receiver for channel with the limits this side
// announced (hostReceive on the host, clientReceive on the client);
// maxMessage bounds a reassembled message in UTF-16 bytes, the unit of every
// delivery size (config delivery.max_message_bytes as it is), not the UTF-8
// bytes it takes in memory (see Reassembler). Its partial message counts
// against the scheduler's SchedulerConfig.PartialBytes, if set.
func (s *Scheduler) NewInbound(channel string, limits Limits, maxMessage int) *Inbound {
	return &Inbound{sched: s, channel: channel, win: NewRecvWindow(limits), re: NewReassemblerIn(UTF16Bytes(maxMessage), s.partial)}
}

// Discard drops the partial message, if any, giving its bytes back to the
// connection's budget: the subscription has ended. Fragments that still
// arrive for it are released and not kept.
func (in *Inbound) Discard() {
	in.mu.Lock()
	in.discarded = true
	in.re.Reset()
	in.mu.Unlock()
}

// SetLimits changes the limits, keeping the counters.
func (in *Inbound) SetLimits(l Limits) {
	in.mu.Lock()
	in.win.SetLimits(l)
	in.mu.Unlock()
}

// Receive counts one data message or fragment of size bytes as received.
// A *ViolationError (frame over the limit, data on a full window) must close
// the connection.
func (in *Inbound) Receive(size UTF16Bytes) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	err := in.win.Receive(size)
	if v, ok := err.(*ViolationError); ok && v.Channel == "" {
		v.Channel = in.channel
	}
	return err
}

// Frame adds the data of a received channel/frame (already counted with
// Receive). A fragment that does not complete the message is released at
// once (the reassembly buffer is bounded by maxMessage, not the window), so
// a message larger than the window can complete. When complete is true the
// caller processes message and then releases the final fragment's size.
func (in *Inbound) Frame(data string, final bool, size UTF16Bytes) (message []byte, complete bool, err error) {
	in.mu.Lock()
	if in.discarded {
		in.mu.Unlock()
		in.Release(size)
		return nil, false, nil
	}
	message, complete, err = in.re.Add(data, final)
	in.mu.Unlock()
	if err != nil {
		if v, ok := err.(*ViolationError); ok && v.Channel == "" {
			v.Channel = in.channel
		}
		return nil, false, err
	}
	if !complete {
		in.Release(size)
	}
	return message, complete, nil
}

// Release records that the consumer released size bytes and queues a
// coalesced channel/credit when one is due.
func (in *Inbound) Release(size UTF16Bytes) {
	if size <= 0 {
		return
	}
	in.mu.Lock()
	in.win.Release(size)
	v, due := in.win.CreditDue()
	if due {
		in.win.MarkCredited(v)
	}
	in.mu.Unlock()
	if due {
		in.sched.PushCredit(in.channel, v)
	}
}

// Fragment is the params of a received channel/frame (seed 000
// "Fragments"): a piece of its message's text, and whether it is the last.
type Fragment struct {
	Data  string `json:"data"`
	Final bool   `json:"final"`
}

// Accept is the one receiving path of a data message of in's
// subscription, shared by the host and the client (seed 000 "Window and
// Credit", "Fragments"). It counts the message's size (UTF-16 bytes, as
// received) against the window, and:
//
//   - a whole message (frame nil) must not interleave a fragmented one;
//     complete is true and the caller hands the message on as it came (h
//     and text are zero);
//   - a fragment (frame: its params) adds its piece to the message being
//     reassembled; one that does not end it is released at once (complete
//     false);
//   - the final fragment completes the message: its text is parsed with
//     parse, which must find a notification (ok) of in's channel, and its
//     header and text are returned.
//
// The caller releases size once the consumer has the message (the whole
// one, or the final fragment's). An error is a *ViolationError (over the
// window, interleaved, a bad fragment, another channel's message inside):
// the connection must be closed.
func Accept[H any](in *Inbound, size UTF16Bytes, frame *Fragment, parse func(text []byte) (h H, channel string, ok bool)) (h H, text []byte, complete bool, err error) {
	if err = in.Receive(size); err != nil {
		return h, nil, false, err
	}
	if frame == nil {
		return h, nil, true, in.CheckWhole()
	}
	msg, complete, err := in.Frame(frame.Data, frame.Final, size)
	if err != nil || !complete {
		return h, nil, false, err
	}
	h, channel, ok := parse(msg)
	switch {
	case !ok:
		return h, nil, false, &ViolationError{Kind: BadFragment, Channel: in.channel}
	case channel != in.channel:
		return h, nil, false, &ViolationError{Kind: ChannelMismatch, Channel: in.channel}
	}
	return h, msg, true, nil
}

// CheckWhole reports a *ViolationError when a whole (unfragmented) data
// message arrives while a fragmented one is in progress: seed 000 allows one
// fragmented message per subscription and direction, finished first.
func (in *Inbound) CheckWhole() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.re.InProgress() {
		return &ViolationError{Kind: FragmentInterleaved, Channel: in.channel}
	}
	return nil
}

// Counters returns received and released bytes.
func (in *Inbound) Counters() (received, released UTF16Bytes) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.win.Received(), in.win.Released()
}
