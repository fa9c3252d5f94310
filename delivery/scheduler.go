package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// MessageWriter is the transport under a Scheduler: it writes one complete
// JSON-RPC message text (one WebSocket text frame, one transport-io EMIT).
// It may block; the Scheduler calls it from one goroutine only.
type MessageWriter interface {
	WriteMessage(ctx context.Context, text []byte) error
}

// BinaryWriter is a MessageWriter that can also carry a data message in
// its binary form (Message.Binary: the transport-io event or WebSocket
// subprotocol rpc.EventBinaryData, docs/protocol.md), without knowing what
// the bytes are. SchedulerConfig.Binary says whether the connection
// negotiated it.
type BinaryWriter interface {
	MessageWriter
	WriteBinary(ctx context.Context, payload []byte) error
}

// Flusher is a MessageWriter that may hold back what it wrote, to send a
// run of messages in fewer system calls, until Flush: the Scheduler calls
// Flush each time it has written and finds nothing more to write.
type Flusher interface {
	Flush() error
}

// FramedWriter is a BinaryWriter that writes a binary form from the buffer
// it was built in (Message.Framed): framed[FrameRoom:] is the binary form,
// and the writer may write its frame header into framed[:FrameRoom]. Like
// WriteBinary it keeps no reference to framed once it returns.
type FramedWriter interface {
	BinaryWriter
	WriteFramed(ctx context.Context, framed []byte) error
}

// SchedulerConfig bounds one connection's outbound queues.
type SchedulerConfig struct {
	// ProtectedMessages bounds what PushProtected queues (responses and
	// errors on the host, requests on the client): seed 003's protected
	// set, with channel/gap and channel/credit, which are queued apart (at
	// most one waiting per channel) and do not count. They are never
	// dropped: a push beyond the bound fails with ErrProtectedFull and the
	// connection must be closed.
	ProtectedMessages int
	// ControlMessages bounds control messages other than credit (which
	// coalesce to one per subscription): tcp/reset, unsubscribe. Beyond it
	// PushControl fails with ErrControlFull.
	ControlMessages int
	// OrdinaryMessages bounds the FIFO of ordinary-subscription messages.
	// On overflow the backlog collapses into one channel/gap per channel
	// (at most one waiting per channel; gaps do not count against
	// ProtectedMessages).
	OrdinaryMessages int
	// Quantum is the deficit round-robin quantum in UTF-16 bytes; at least
	// the largest frame, so every busy participant sends each round.
	Quantum UTF16Bytes
	// OnSent, if set, is called from the writer goroutine after each message
	// is written (for metrics and tests). The message is valid only during
	// the call: with WriterReleases its buffers are reused afterwards.
	OnSent func(m Message)
	// WriterReleases says the MessageWriter keeps no reference to a
	// message once WriteMessage returns (it wrote or copied it), so
	// Recycler sources may reuse their buffers.
	WriterReleases bool
	// Binary says the MessageWriter is a BinaryWriter whose peer takes
	// data messages in their binary form: a Message with Binary set is
	// written with WriteBinary, and Stream.Binary tells sources so that
	// they build that form alone. Otherwise such a message's text is
	// built (Message.Form) when it is written.
	Binary bool
	// PartialBytes bounds the partial (unfinished) fragmented messages
	// the connection's Inbounds hold together, in UTF-16 bytes (see
	// PartialBudget); beyond it a fragment is a PartialBytesExceeded
	// violation. 0: no bound but each message's maximum.
	PartialBytes UTF16Bytes
}

// DefaultSchedulerConfig returns the bounds used when a field is zero.
func DefaultSchedulerConfig() SchedulerConfig {
	return SchedulerConfig{ProtectedMessages: 256, ControlMessages: 256, OrdinaryMessages: 1024, Quantum: 16384}
}

// Errors of the Scheduler. Each one ends the connection.
var (
	ErrProtectedFull = errors.New("delivery: protected queue full (peer too slow)")
	ErrControlFull   = errors.New("delivery: control queue full")
	ErrClosed        = errors.New("delivery: scheduler closed")
)

// Scheduler is the outbound side of one connection (DESIGN.md §4): a
// protected queue first, then control messages (coalesced credit first),
// then data by deficit round-robin over the ordinary FIFO and the windowed
// subscriptions that can send, one frame per pick. It keeps no transport
// queue of its own: the writer writes one message at a time, so at most one
// frame waits below it.
//
// All methods are safe for concurrent use; Run must be called once.
type Scheduler struct {
	cfg  SchedulerConfig
	wake chan struct{}
	// taken is signalled (1 slot, never blocking) each time the writer
	// takes a protected message: room was made (ProtectedTaken).
	taken chan struct{}
	// partial is the Inbounds' shared bound on partial messages (nil: none).
	partial *PartialBudget

	mu        sync.Mutex
	closed    error
	protected fifo
	control   fifo
	credits   map[string]UTF16Bytes // coalesced channel/credit per channel
	creditQ   []string              // channels with a pending credit, in order
	ordinary  ordinaryQueue
	streams   []*Stream
	gaps      uint64 // number of gap collapses, for metrics and tests
	// gapsSent counts channel/gap notices written, collapsed the
	// ordinary messages discarded by collapses (Counters).
	gapsSent, collapsed uint64
	// gapQ holds the channels owed a channel/gap, sent with the protected
	// messages; gapPending marks them (one gap per channel at a time).
	gapQ       []string
	gapPending map[string]bool
	// creditWait accumulates nanoseconds streams spent with a full window;
	// creditWaits counts the times a stream's window filled (Stream.debit).
	creditWait  atomic.Int64
	creditWaits atomic.Uint64
	// flushErr, when set, closes the scheduler with it once the protected
	// queue is empty (an error response that ends the connection).
	flushErr error

	// Owned by the writer goroutine.
	recycle Recycler // the source of the message next returned, if it recycles
	// built is the buffer texts are built in from binary forms (a writer
	// without them), kept while the writer releases what it wrote;
	// textOut marks the message being written as built there.
	built   []byte
	textOut bool
	picking []*Stream // next's copy of streams, reused
	// own is the buffer the Scheduler builds its own messages in (credit,
	// gap) when the writer releases what it wrote (WriterReleases): next
	// takes it (ownBuf), Run gives it back once WriteMessage returned.
	// One message is in flight at a time, so one buffer is enough; without
	// WriterReleases each message gets a new one.
	own    []byte
	ownOut bool // the message being written is in own
	// flusher is Run's writer when it is a Flusher; unflushed says a
	// message was written since its last Flush.
	flusher    Flusher
	unflushed  bool
	rr         int  // index into the participant ring
	fresh      bool // the participant at rr has not had its quantum yet
	ordDeficit UTF16Bytes
}

// NewScheduler returns a Scheduler with cfg (zero fields take defaults).
func NewScheduler(cfg SchedulerConfig) *Scheduler {
	d := DefaultSchedulerConfig()
	if cfg.ProtectedMessages <= 0 {
		cfg.ProtectedMessages = d.ProtectedMessages
	}
	if cfg.ControlMessages <= 0 {
		cfg.ControlMessages = d.ControlMessages
	}
	if cfg.OrdinaryMessages <= 0 {
		cfg.OrdinaryMessages = d.OrdinaryMessages
	}
	if cfg.Quantum <= 0 {
		cfg.Quantum = d.Quantum
	}
	var partial *PartialBudget
	if cfg.PartialBytes > 0 {
		partial = NewPartialBudget(cfg.PartialBytes)
	}
	return &Scheduler{
		partial:    partial,
		cfg:        cfg,
		wake:       make(chan struct{}, 1),
		taken:      make(chan struct{}, 1),
		credits:    map[string]UTF16Bytes{},
		gapPending: map[string]bool{},
		fresh:      true,
		ordinary:   ordinaryQueue{lastSeq: map[string]uint64{}},
	}
}

// PartialBytes returns the UTF-16 bytes of partial fragmented messages
// the connection's Inbounds hold now (0 without SchedulerConfig.PartialBytes).
func (s *Scheduler) PartialBytes() UTF16Bytes {
	if s.partial == nil {
		return 0
	}
	return s.partial.Used()
}

func (s *Scheduler) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// PushProtected queues a response, error or gap. It fails with
// ErrProtectedFull beyond SchedulerConfig.ProtectedMessages.
func (s *Scheduler) PushProtected(text []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	if s.protected.len() >= s.cfg.ProtectedMessages {
		return fmt.Errorf("%w: %d queued", ErrProtectedFull, s.protected.len())
	}
	s.protected.push(text)
	s.signal()
	return nil
}

// ProtectedRoom returns how many more messages PushProtected would take
// now: SchedulerConfig.ProtectedMessages minus those queued. A producer
// that must never see ErrProtectedFull (the host's request handling, which
// counts the responses it still owes against it) waits on ProtectedTaken
// while it is too small.
func (s *Scheduler) ProtectedRoom() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg.ProtectedMessages - s.protected.len()
}

// ProtectedTaken is signalled each time the writer takes a protected
// message from the queue. Signals merge (one slot), so check
// ProtectedRoom again after each.
func (s *Scheduler) ProtectedTaken() <-chan struct{} { return s.taken }

// PushControl queues a control message other than credit.
func (s *Scheduler) PushControl(text []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	if s.control.len() >= s.cfg.ControlMessages {
		return fmt.Errorf("%w: %d queued", ErrControlFull, s.control.len())
	}
	s.control.push(text)
	s.signal()
	return nil
}

// PushCredit queues channel/credit for channel with the cumulative
// consumedBytes, replacing any credit for it not yet sent (coalescing keeps
// the control queue bounded by the number of subscriptions).
func (s *Scheduler) PushCredit(channel string, consumed UTF16Bytes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return
	}
	prev, pending := s.credits[channel]
	if pending && prev >= consumed {
		return
	}
	if !pending {
		s.creditQ = append(s.creditQ, channel)
	}
	s.credits[channel] = consumed
	s.signal()
}

// PushOrdinary queues an action of an ordinary subscription to channel with
// its serverSeq. When the FIFO is full, the whole backlog collapses into one
// protected channel/gap per channel it held (seed 003 "gap, don't drop
// silently"), then text is queued. Gaps do not count against
// ProtectedMessages, so it fails only once the scheduler is closed.
func (s *Scheduler) PushOrdinary(channel string, seq uint64, text []byte) error {
	sz := Measure(text) // outside the lock
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	if s.ordinary.len() >= s.cfg.OrdinaryMessages {
		if err := s.collapseLocked(); err != nil {
			return err
		}
	}
	s.ordinary.push(ordinaryItem{channel: channel, seq: seq, text: text, sz: sz})
	s.signal()
	return nil
}

// collapseLocked turns the ordinary backlog into channel/gap notices. A
// channel with a gap already waiting gets no second one (its afterSeq is
// read when the gap is written), so gaps are bounded by the number of
// channels and never crowd out responses.
func (s *Scheduler) collapseLocked() error {
	s.collapsed += uint64(s.ordinary.len())
	for _, ch := range s.ordinary.collapse() {
		if !s.gapPending[ch] {
			s.gapPending[ch] = true
			s.gapQ = append(s.gapQ, ch)
		}
	}
	s.gaps++
	return nil
}

// PushGap queues a protected channel/gap for channel: the actions after
// afterSeq may be missing (seed 003: nothing is dropped without a gap).
// The gap written carries the later of afterSeq and the channel's last
// action written; a gap already waiting for the channel covers this one.
// It fails only once the scheduler is closed.
func (s *Scheduler) PushGap(channel string, afterSeq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return s.closed
	}
	if afterSeq > s.ordinary.lastSeq[channel] {
		s.ordinary.lastSeq[channel] = afterSeq
	}
	if !s.gapPending[channel] {
		s.gapPending[channel] = true
		s.gapQ = append(s.gapQ, channel)
	}
	s.gaps++
	s.signal()
	return nil
}

// StartOrdinary sets where channel's ordinary actions start: fromSeq is
// the serverSeq the subscriber's state is at (its snapshot's, or the last
// action a reconnect replayed), so that a gap before the first action
// written says afterSeq fromSeq, not 0.
func (s *Scheduler) StartOrdinary(channel string, fromSeq uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fromSeq > s.ordinary.lastSeq[channel] {
		s.ordinary.lastSeq[channel] = fromSeq
	}
}

// TryPushOrdinary queues text like PushOrdinary, but only while fewer than
// maxQueued ordinary messages wait; otherwise it returns false and queues
// nothing (a live channel's subscriber simply misses this batch, and never
// causes a gap collapse).
func (s *Scheduler) TryPushOrdinary(channel string, seq uint64, text []byte, maxQueued int) (bool, error) {
	sz := Measure(text)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed != nil {
		return false, s.closed
	}
	if s.ordinary.len() >= min(maxQueued, s.cfg.OrdinaryMessages) {
		return false, nil
	}
	s.ordinary.push(ordinaryItem{channel: channel, seq: seq, text: text, sz: sz})
	s.signal()
	return true, nil
}

// CreditWait returns the total time the windowed streams of this scheduler
// have spent unable to start a message for lack of credit.
func (s *Scheduler) CreditWait() time.Duration {
	return time.Duration(s.creditWait.Load())
}

// Counters are a Scheduler's cumulative counts, for metrics.
type Counters struct {
	// GapsSent counts channel/gap notices handed to the writer (one per
	// channel and collapse at most: a gap waiting covers later ones).
	GapsSent uint64
	// Collapsed counts ordinary messages discarded when the FIFO was full
	// and collapsed into gaps (SchedulerConfig.OrdinaryMessages).
	Collapsed uint64
	// CreditWaits counts the times a windowed stream's window filled, so
	// that it had to wait for channel/credit before its next message;
	// CreditWait is the time they waited, counted when credit ends a wait
	// (CreditWait).
	CreditWaits uint64
	CreditWait  time.Duration
}

// Counters returns the Scheduler's counters.
func (s *Scheduler) Counters() Counters {
	s.mu.Lock()
	c := Counters{GapsSent: s.gapsSent, Collapsed: s.collapsed}
	s.mu.Unlock()
	c.CreditWaits = s.creditWaits.Load()
	c.CreditWait = time.Duration(s.creditWait.Load())
	return c
}

// DropOrdinary removes queued ordinary messages of channel (unsubscribe).
func (s *Scheduler) DropOrdinary(channel string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ordinary.drop(channel)
	if s.gapPending[channel] {
		delete(s.gapPending, channel)
		s.gapQ = slices.DeleteFunc(s.gapQ, func(c string) bool { return c == channel })
	}
}

// Gaps returns how many times the ordinary backlog collapsed into gaps.
func (s *Scheduler) Gaps() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gaps
}

// QueueLens reports the current queue lengths (protected including gaps,
// control + credit, ordinary), for tests and metrics.
func (s *Scheduler) QueueLens() (protected, control, ordinary int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.protected.len() + len(s.gapQ), s.control.len() + len(s.creditQ), s.ordinary.len()
}

// Close stops Run with err (ErrClosed if nil) and fails later pushes.
func (s *Scheduler) Close(err error) {
	if err == nil {
		err = ErrClosed
	}
	s.mu.Lock()
	if s.closed == nil {
		s.closed = err
	}
	s.mu.Unlock()
	s.signal()
}

// Discard closes the scheduler and drops everything queued: the
// connection is gone and nothing more will be written (a connection whose
// state is kept for a reconnect must not pin what it had queued). Streams
// stay registered until removed; their pending frames go with them.
func (s *Scheduler) Discard() {
	s.mu.Lock()
	if s.closed == nil {
		s.closed = ErrClosed
	}
	s.protected = fifo{}
	s.control = fifo{}
	s.credits = map[string]UTF16Bytes{}
	s.creditQ = nil
	s.ordinary = ordinaryQueue{lastSeq: map[string]uint64{}}
	s.gapQ = nil
	s.gapPending = map[string]bool{}
	s.own = nil
	s.mu.Unlock()
	s.signal()
}

// CloseWhenFlushed closes the scheduler with err once every protected
// message queued so far has been written (e.g. after -32005).
func (s *Scheduler) CloseWhenFlushed(err error) {
	s.mu.Lock()
	s.flushErr = err
	s.mu.Unlock()
	s.signal()
}

// Run writes messages to w until ctx ends, Close is called, or a write
// fails; it returns the reason. Call it once, from the connection's writer
// goroutine. A message with a binary form goes out in that form when
// SchedulerConfig.Binary is set and w is a BinaryWriter (written from its
// Framed buffer when it has one and w is a FramedWriter); otherwise its
// text is written (built from the binary form where the source built only
// that). A writer that is a Flusher is flushed whenever Run has written
// and finds nothing more to write.
func (s *Scheduler) Run(ctx context.Context, w MessageWriter) error {
	bw, _ := w.(BinaryWriter)
	if !s.cfg.Binary {
		bw = nil
	}
	fw, _ := bw.(FramedWriter)
	s.flusher, _ = w.(Flusher)
	for {
		m, err := s.next(ctx)
		if err != nil {
			return err
		}
		rec := s.recycle
		s.recycle = nil
		if m.Framed != nil && fw != nil {
			err = fw.WriteFramed(ctx, m.Framed)
		} else if m.Binary != nil && bw != nil {
			err = bw.WriteBinary(ctx, m.Binary)
		} else {
			if m.Text == nil {
				m.Text = m.text(s.textBuf())
				s.textOut = true
			}
			err = w.WriteMessage(ctx, m.Text)
		}
		if err != nil {
			s.Close(err)
			return err
		}
		s.unflushed = s.flusher != nil
		if s.cfg.OnSent != nil {
			s.cfg.OnSent(m)
		}
		if s.textOut {
			s.textOut = false
			if s.cfg.WriterReleases && cap(m.Text) <= maxTextBuf {
				s.built = m.Text[:0]
			}
			m.Text = nil // the source built none: it gets back what it did build
		}
		if rec != nil && s.cfg.WriterReleases {
			rec.Recycle(m)
		}
		if s.ownOut {
			s.ownOut = false
			if cap(m.Text) <= maxOwnBuf {
				s.own = m.Text[:0]
			}
		}
	}
}

// maxTextBuf bounds the buffer kept for texts built from binary forms
// (a message of the largest maximumFrameBytes, 512 KiB UTF-16 bytes, is at
// most that many UTF-8 bytes): larger ones are left to the collector.
const maxTextBuf = 512 << 10

// textBuf returns the buffer to build a text from a binary form in: the
// one kept from the last when the writer releases messages, else nil (a
// new one). Writer goroutine only.
func (s *Scheduler) textBuf() []byte {
	b := s.built
	s.built = nil
	return b
}

// maxOwnBuf bounds the buffer kept for the Scheduler's own messages: a
// credit or gap is its channel URI plus about 80 bytes.
const maxOwnBuf = 4096

// ownBuf returns the buffer for a message the Scheduler builds itself:
// its reusable one when the writer releases messages, else nil (a new
// one). Writer goroutine only.
func (s *Scheduler) ownBuf() []byte {
	if !s.cfg.WriterReleases {
		return nil
	}
	b := s.own
	s.own = nil // taken until Run gives it back
	s.ownOut = true
	return b[:0]
}

// next blocks until a message can be sent and returns it.
func (s *Scheduler) next(ctx context.Context) (Message, error) {
	for {
		if err := ctx.Err(); err != nil {
			s.Close(err)
			return Message{}, err
		}
		s.mu.Lock()
		if s.closed != nil {
			err := s.closed
			s.mu.Unlock()
			return Message{}, err
		}
		if t, ok := s.protected.pop(); ok {
			s.mu.Unlock()
			select {
			case s.taken <- struct{}{}:
			default:
			}
			return Message{Text: t}, nil
		}
		if len(s.gapQ) > 0 {
			ch := s.gapQ[0]
			s.gapQ[0] = ""
			s.gapQ = s.gapQ[1:]
			delete(s.gapPending, ch)
			s.gapsSent++
			t := appendGap(s.ownBuf(), ch, s.ordinary.lastSeq[ch])
			s.mu.Unlock()
			return Message{Text: t}, nil
		}
		if s.flushErr != nil {
			s.closed = s.flushErr
			s.mu.Unlock()
			return Message{}, s.flushErr
		}
		if len(s.creditQ) > 0 {
			ch := s.creditQ[0]
			s.creditQ[0] = ""
			s.creditQ = s.creditQ[1:]
			v := s.credits[ch]
			delete(s.credits, ch)
			s.mu.Unlock()
			return Message{Text: AppendCredit(s.ownBuf(), ch, v)}, nil
		}
		if t, ok := s.control.pop(); ok {
			s.mu.Unlock()
			return Message{Text: t}, nil
		}
		// A copy, as Remove edits s.streams in place; the writer's own
		// slice, cleared after use so it pins no removed stream.
		s.picking = append(s.picking[:0], s.streams...)
		s.mu.Unlock()

		m := s.pickData(s.picking)
		clear(s.picking)
		if !m.IsZero() {
			return m, nil
		}
		if s.unflushed {
			// Nothing more to write now: what the writer held goes.
			s.unflushed = false
			if err := s.flusher.Flush(); err != nil {
				s.Close(err)
				return Message{}, err
			}
			continue // more may have come meanwhile
		}
		select {
		case <-s.wake:
		case <-ctx.Done():
			s.Close(ctx.Err())
			return Message{}, ctx.Err()
		}
	}
}

// pickData runs deficit round-robin over the participants: index 0 is the
// ordinary FIFO, 1..n the windowed streams. When a participant's turn
// begins it gets one quantum; it then sends frames, one per call, while its
// deficit covers the next one, and the turn passes on when it does not (the
// deficit carries over, so a frame larger than a quantum goes out after
// enough turns). Idle participants lose their deficit. The position is kept
// across calls. It returns the zero Message once a whole round finds
// nothing to send.
func (s *Scheduler) pickData(streams []*Stream) Message {
	n := len(streams) + 1
	if s.rr >= n {
		s.rr, s.fresh = 0, true
	}
	next := func() {
		s.rr = (s.rr + 1) % n
		s.fresh = true
	}
	withData := 0
	for visited := 0; ; visited++ {
		if visited > 0 && visited%n == 0 {
			if withData == 0 {
				return Message{}
			}
			withData = 0
		}
		i := s.rr
		var size UTF16Bytes
		var deficit *UTF16Bytes
		if i == 0 {
			s.mu.Lock()
			if len(s.gapQ) > 0 {
				// The FIFO collapsed since next looked: its gaps go first
				// (an action after the collapse must not precede them).
				s.mu.Unlock()
				return Message{}
			}
			it, ok := s.ordinary.peek()
			if ok {
				size = it.size() // read under the lock: push may move the slice
			}
			s.mu.Unlock()
			if !ok {
				s.ordDeficit = 0
				next()
				continue
			}
			deficit = &s.ordDeficit
		} else {
			st := streams[i-1]
			sz, ok := st.ready()
			if !ok {
				st.deficit = 0
				next()
				continue
			}
			size, deficit = sz, &st.deficit
		}
		withData++
		if s.fresh {
			*deficit += s.cfg.Quantum
			s.fresh = false
		}
		if *deficit < size {
			next()
			continue
		}
		*deficit -= size
		if i == 0 {
			s.mu.Lock()
			if len(s.gapQ) > 0 { // collapsed since the peek: as above
				s.mu.Unlock()
				return Message{}
			}
			it, ok := s.ordinary.pop()
			s.mu.Unlock()
			if ok {
				return Message{Text: it.text, Size: it.sz}
			}
			continue
		}
		return streams[i-1].take()
	}
}
