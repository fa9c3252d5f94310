package transportio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sidecar-dev/sidecar/internal/bufpool"
)

// Role is the side a session plays.
type Role uint8

// Roles.
const (
	RoleServer Role = iota
	RoleClient
)

// DefaultClientOrigin is the datagram origin a client stamps when none is
// configured (the reference client's value); servers accept any origin
// inbound (checklist item 78).
const DefaultClientOrigin uint32 = 0x80000001

// Config configures a session. Zero values take the defaults.
type Config struct {
	// Contract is this side's event table; required.
	Contract *Contract
	Role     Role
	// Feat are the feature tokens this side supports (none in version 0).
	Feat []string
	// HandshakeTimeout defaults to HandshakeTimeout (5000 ms).
	HandshakeTimeout time.Duration
	// Origin is stamped on outbound datagrams: a server allocates it
	// (OriginAllocator); a client defaults to DefaultClientOrigin.
	Origin uint32
	// BlockOnFull makes an emit wait at MaxEmitQueue instead of closing the
	// session as WT_PEER_TOO_SLOW: stdio, where a slow reader blocks and is
	// never disconnected.
	BlockOnFull bool
	// InboundQueue bounds received emits not yet taken by Receive; the
	// reader stops reading the stream while it is full, which is the
	// backpressure. Default 64.
	InboundQueue int
	// DatagramTTL overrides DatagramTTL (tests).
	DatagramTTL time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Handlers serve inbound calls (shared by a listener's sessions);
	// Session.HandleCall and HandleStream add per-session ones, which win.
	Handlers *Handlers
	// PayloadsChecked says the consumer parses and validates every JSON
	// EMIT payload itself (AHP does: rpc.ParseHeader, and the TCP
	// adapter for tcp/data), so the session checks only that they are
	// UTF-8, not JSON again (a slow pass over bulk data). Call payloads
	// are always checked in full.
	PayloadsChecked bool
}

// Message is one received EMIT or datagram.
type Message struct {
	Event   string
	Codec   Codec
	Payload []byte
	// Origin and Sequence are set for datagrams.
	Origin, Sequence uint32
}

// Stats are a session's counters.
type Stats struct {
	// UnknownDropped: inbound EMITs and datagrams for events not in our
	// contract (WT_UNKNOWN_EVENT, per message, the session stays up).
	UnknownDropped uint64
	// OverflowDropped and StaleDropped: outbound datagrams discarded from
	// the ring (§9), counted apart.
	OverflowDropped, StaleDropped uint64
	// SequenceDropped: inbound datagrams not newer than their pair's last.
	SequenceDropped uint64
	// ReceiveDropped: inbound datagrams discarded because the application
	// had not taken the previous ones.
	ReceiveDropped uint64
	// EmitsSent, EmitsReceived count EMIT frames.
	EmitsSent, EmitsReceived uint64
}

// Session is one transport-io session over a Carrier. Its methods are safe
// for concurrent use.
type Session struct {
	cfg Config
	car Carrier

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	errOnce sync.Once
	err     atomic.Pointer[SessionError]

	hsDone chan struct{} // the peer's handshake was accepted
	hsSent chan struct{} // this side's frame 0 was written
	neg    Negotiation

	mu       sync.Mutex // emit lane, ring, sequences
	q        [][]byte
	inflight int
	// pendingBytes is the bytes of the frames in q and in flight.
	pendingBytes int
	space        chan struct{} // closed and replaced whenever pending shrinks
	wake         chan struct{} // 1-slot: the writer has work
	// emitW is the emit stream once the writer opened it; direct says a
	// caller of EmitFramedWaitQueue is writing to it (the writer waits).
	emitW  io.Writer
	direct bool
	// held counts the bytes of frames written with heldWriter.WriteHeld
	// and not flushed yet (at most maxWriteBatch).
	held int
	ring DatagramRing
	seq  map[uint32]uint32

	gateMu sync.Mutex
	gate   SequenceGate

	inbound    chan Message
	readerDone chan struct{} // the reader has stopped: nothing more arrives
	dgrams     chan Message
	dgWake     chan struct{}

	rooms sync.Map // client role: rooms the server says we are in

	calls    callState // inbound call streams, bounded (§10.1)
	outCalls callState // calls this side made

	handlersMu sync.Mutex
	handlers   map[string]any

	unknownDropped, seqDropped, recvDropped, emitsSent, emitsReceived atomic.Uint64
}

// Start runs a session over car: it queues this side's handshake as frame 0
// without waiting for the peer's (§4.1), reads the peer's emit stream, and
// closes as WT_HANDSHAKE_TIMEOUT when no valid handshake arrives in time.
// On a reliable-only mapping, a contract with an unreliable event that
// declares no fallback is refused with WT_RELIABILITY_REFUSED before frame 0.
func Start(car Carrier, cfg Config) *Session {
	if cfg.Contract == nil {
		panic("transportio: Start without a contract")
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = HandshakeTimeout
	}
	if cfg.InboundQueue <= 0 {
		cfg.InboundQueue = 64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Origin == 0 && cfg.Role == RoleClient {
		cfg.Origin = DefaultClientOrigin
	}
	s := &Session{
		cfg: cfg, car: car,
		hsDone:     make(chan struct{}),
		hsSent:     make(chan struct{}),
		space:      make(chan struct{}),
		wake:       make(chan struct{}, 1),
		dgWake:     make(chan struct{}, 1),
		seq:        map[uint32]uint32{},
		inbound:    make(chan Message, cfg.InboundQueue),
		readerDone: make(chan struct{}),
		dgrams:     make(chan Message, DatagramRingSize),
	}
	s.ring.TTL = cfg.DatagramTTL
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.calls.init(MaxConcurrentCalls)
	s.outCalls.init(0)

	s.wg.Add(1)
	go s.watch()
	if car.Kind().ReliableOnly() {
		if names := cfg.Contract.undeclaredUnreliable(); len(names) > 0 {
			s.Close(CloseReliabilityRefused, "undeclared unreliable event on a fallback transport")
			close(s.readerDone)
			return s
		}
	}
	s.q = append(s.q, AppendHandshake(nil, Handshake{V: Version, Feat: cfg.Feat, Events: cfg.Contract.Table()}))
	s.pendingBytes = len(s.q[0])
	s.wg.Add(2)
	go s.writer()
	go s.reader()
	if dc, ok := car.(DatagramCarrier); ok {
		s.wg.Add(2)
		go s.datagramReader(dc)
		go s.datagramWriter(dc)
	}
	if cc, ok := car.(CallCarrier); ok {
		s.wg.Add(1)
		go s.acceptCalls(cc)
	}
	t := time.AfterFunc(cfg.HandshakeTimeout, func() {
		select {
		case <-s.hsDone:
		default:
			s.Close(CloseHandshakeTimeout, fmt.Sprintf("no handshake from the peer within %d ms", cfg.HandshakeTimeout.Milliseconds()))
		}
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-s.hsDone:
		case <-s.ctx.Done():
		}
		t.Stop()
	}()
	return s
}

// Kind is the mapping under the session.
func (s *Session) Kind() Kind { return s.car.Kind() }

// RemoteAddr describes the peer.
func (s *Session) RemoteAddr() string { return s.car.RemoteAddr() }

// Contract is this side's contract.
func (s *Session) Contract() *Contract { return s.cfg.Contract }

// Origin is the datagram origin this side stamps.
func (s *Session) Origin() uint32 { return s.cfg.Origin }

// Done is closed when the session has ended.
func (s *Session) Done() <-chan struct{} { return s.ctx.Done() }

// Err is how the session ended (a *SessionError), nil while open.
func (s *Session) Err() error {
	if e := s.err.Load(); e != nil {
		return e
	}
	return nil
}

// Wait blocks until every goroutine of the session and its carrier has
// returned; call it after Close or Done.
func (s *Session) Wait() {
	s.wg.Wait()
	s.car.Wait()
}

// Close ends the session with code and reason (cut to 1024 bytes on a
// character boundary, and further by the mapping). Idempotent: the first
// close wins, and a session closed by the peer stays closed with its code.
func (s *Session) Close(code CloseCode, reason string) error {
	reason = TruncateReason(reason, MaxCloseReason)
	s.finish(&SessionError{Code: code, Reason: reason})
	return nil
}

// finish records how the session ended and tears it down, once.
func (s *Session) finish(e *SessionError) {
	s.errOnce.Do(func() {
		s.err.Store(e)
		if !e.Remote && !e.Lost {
			if e.Code == CloseNoError {
				s.flush()
			}
			_ = s.car.Close(e.Code, e.Reason)
		}
		s.cancel()
		s.calls.abortAll()
		s.outCalls.abortAll()
	})
}

// CloseFlushTimeout bounds how long a normal close (WT_NO_ERROR) waits for
// emits already queued to be written; a close for a fault is immediate.
const CloseFlushTimeout = time.Second

// flush waits until the emit lane is empty, the carrier ends or
// CloseFlushTimeout passes. New emits are refused already.
func (s *Session) flush() {
	t := time.NewTimer(CloseFlushTimeout)
	defer t.Stop()
	for {
		s.mu.Lock()
		if len(s.q)+s.inflight == 0 {
			s.mu.Unlock()
			return
		}
		sp := s.space
		s.mu.Unlock()
		select {
		case <-sp:
		case <-t.C:
			return
		case <-s.car.Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// watch ends the session when the carrier ends.
func (s *Session) watch() {
	defer s.wg.Done()
	select {
	case <-s.car.Done():
		e := s.car.Err()
		if e == nil {
			e = &SessionError{Lost: true}
		}
		s.finish(e)
	case <-s.ctx.Done():
	}
}

// failRead ends the session after a read error on the carrier.
func (s *Session) failRead(err error) {
	var fe *FrameError
	var se *SessionError
	switch {
	case errors.As(err, &fe):
		s.Close(CloseProtocolError, protocolReason(err))
	case s.car.Err() != nil:
		s.finish(s.car.Err())
	case errors.As(err, &se):
		s.finish(se)
	default:
		// The stream failed before the carrier reported why; give the
		// close a moment to arrive so a refusal is not reported as a
		// lost session (§4).
		t := time.NewTimer(250 * time.Millisecond)
		defer t.Stop()
		select {
		case <-s.car.Done():
			if e := s.car.Err(); e != nil {
				s.finish(e)
				return
			}
		case <-s.ctx.Done():
			return
		case <-t.C:
		}
		s.finish(&SessionError{Lost: true, Reason: err.Error()})
	}
}

// WaitHandshake blocks until the peer's handshake has been accepted and
// this side's frame 0 has been written to the carrier, the session ends (its
// error) or ctx ends. Like the reference's connect(), it waits for both: an
// emit queued after it never shares a carrier write with frame 0, which the
// reference server (transport-io 0.8.0) would read in the same turn as the
// handshake, before its session handlers exist, and drop.
func (s *Session) WaitHandshake(ctx context.Context) error {
	for _, ch := range [...]<-chan struct{}{s.hsDone, s.hsSent} {
		select {
		case <-ch:
		case <-s.ctx.Done():
			return s.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Negotiation is the handshake's outcome (valid after WaitHandshake).
func (s *Session) Negotiation() Negotiation {
	<-s.hsDone
	return s.neg
}

// Rooms returns the rooms the server has told this client it is in.
func (s *Session) Rooms() []string {
	var r []string
	s.rooms.Range(func(k, _ any) bool { r = append(r, k.(string)); return true })
	return r
}

// Stats returns the session's counters.
func (s *Session) Stats() Stats {
	s.mu.Lock()
	over, stale := s.ring.OverflowDropped, s.ring.StaleDropped
	s.mu.Unlock()
	return Stats{
		UnknownDropped: s.unknownDropped.Load(), OverflowDropped: over, StaleDropped: stale,
		SequenceDropped: s.seqDropped.Load(), ReceiveDropped: s.recvDropped.Load(),
		EmitsSent: s.emitsSent.Load(), EmitsReceived: s.emitsReceived.Load(),
	}
}

// EmitQueueLen is the number of frames pending on the emit lane (queued or
// being written).
func (s *Session) EmitQueueLen() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.q) + s.inflight
}

// ----- emit lane -----

// emitCheck returns the EMIT frame of event carrying payload, checked.
func (s *Session) emitCheck(event string, payload []byte) (Frame, error) {
	ev, ok := s.cfg.Contract.Lookup(event)
	if !ok {
		return Frame{}, fmt.Errorf("%w: '%s'", ErrUnknownEvent, event)
	}
	if ev.Lane != LaneReliable || ev.Shape != ShapeEmit {
		return Frame{}, fmt.Errorf("%w: '%s' is not a reliable emit event", ErrWrongShape, event)
	}
	f := Frame{Type: FrameEmit, Codec: ev.Payload, EventID: ev.ID, Payload: payload}
	if err := f.Check(); err != nil {
		return Frame{}, err
	}
	return f, nil
}

func (s *Session) emitFrame(event string, payload []byte) ([]byte, error) {
	f, err := s.emitCheck(event, payload)
	if err != nil {
		return nil, err
	}
	return AppendFrame(getFrame(f.Len()), f), nil
}

// frames recycles EMIT frame buffers: the writer copies queued frames
// into its batch, after which they are free (a bulk emit lane otherwise
// allocates and clears one buffer of up to 1 MiB per message). At most 8
// are kept (bufpool: bounded).
var frames = bufpool.New(8, 4<<10, FrameHeaderLen+MaxPayload)

func getFrame(n int) []byte { return frames.Get(n) }

func putFrame(b []byte) { frames.Put(b) }

// Emit queues one EMIT without waiting. The emit lane never discards: a
// peer MaxEmitQueue frames behind is disconnected as WT_PEER_TOO_SLOW (§9)
// and Emit returns the session's error (BlockOnFull waits instead).
func (s *Session) Emit(event string, payload []byte) error {
	b, err := s.emitFrame(event, payload)
	if err != nil {
		return err
	}
	if s.cfg.BlockOnFull {
		return s.enqueue(s.ctx, b, MaxEmitQueue, 0)
	}
	return s.enqueue(s.ctx, b, 0, 0)
}

// EmitWait queues one EMIT, first waiting while mark or more frames are
// pending, or until ctx ends. With a mark far under MaxEmitQueue (the
// sidecar uses 32) the lane is a bounded transport queue that never reaches
// WT_PEER_TOO_SLOW.
func (s *Session) EmitWait(ctx context.Context, event string, payload []byte, mark int) error {
	return s.EmitWaitQueue(ctx, event, payload, mark, 0)
}

// EmitWaitQueue is EmitWait that also waits while bytes or more bytes of
// frames are pending (frame headers included; bytes <= 0: no such bound),
// though never with nothing pending, so one frame larger than bytes still
// goes. A bound in bytes keeps the time a frame queued now waits behind
// the others short on a slow path too (frames may be large), which is what
// a message of a quiet channel waits (the sidecar: transport.EmitQueueBytes).
func (s *Session) EmitWaitQueue(ctx context.Context, event string, payload []byte, mark, bytes int) error {
	b, err := s.emitFrame(event, payload)
	if err != nil {
		return err
	}
	if mark <= 0 || mark > MaxEmitQueue {
		mark = MaxEmitQueue
	}
	return s.enqueue(ctx, b, mark, bytes)
}

// FramedMin is the smallest payload EmitFramedWaitQueue writes from the
// caller's buffer. A smaller one is copied onto the emit lane, where the
// writer coalesces it with the frames queued beside it into one carrier
// write (a copy costs little there, and a write per small frame much).
const FramedMin = 16 << 10

// EmitFramedWaitQueue is EmitWaitQueue for a payload built behind
// FrameHeaderLen bytes of room in its buffer: frame[FrameHeaderLen:] is
// the payload, and the session writes the EMIT's header into
// frame[:FrameHeaderLen], so the frame on the wire is the one
// EmitWaitQueue sends. A payload of FramedMin bytes or more is written
// from frame itself, on the calling goroutine, once every frame queued
// before it has been written (no payload byte is copied, frames keep
// their order, and nothing else is pending meanwhile: the bounds mark and
// bytes hold); a smaller one is queued as EmitWaitQueue queues it. Either
// way the session keeps no reference to frame once it returns, and the
// caller must not touch frame until then. Errors are EmitWaitQueue's (the
// session's error once it ended, ctx's while waiting), or a frame of no
// payload.
func (s *Session) EmitFramedWaitQueue(ctx context.Context, event string, frame []byte, mark, bytes int) error {
	if len(frame) <= FrameHeaderLen {
		return fmt.Errorf("transportio: a framed emit of %d bytes carries no payload", len(frame))
	}
	payload := frame[FrameHeaderLen:]
	if len(payload) < FramedMin {
		return s.EmitWaitQueue(ctx, event, payload, mark, bytes)
	}
	f, err := s.emitCheck(event, payload)
	if err != nil {
		return err
	}
	appendHeader(frame[:0], f)
	return s.writeDirect(ctx, frame)
}

// writeDirect writes frame, an encoded frame, to the emit stream from
// the calling goroutine once this side's frame 0 was written and nothing
// else is pending; the writer goroutine waits meanwhile (direct).
func (s *Session) writeDirect(ctx context.Context, frame []byte) error {
	select {
	case <-s.hsSent:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return s.Err()
	}
	s.mu.Lock()
	for {
		if err := s.Err(); err != nil {
			s.mu.Unlock()
			return err
		}
		if len(s.q)+s.inflight == 0 {
			break
		}
		if err := s.awaitSpace(ctx); err != nil {
			return err
		}
	}
	w := s.emitW // set before frame 0 was written
	hw, hold := w.(heldWriter)
	hold = hold && s.held+len(frame) < maxWriteBatch
	s.inflight = 1
	s.direct = true
	s.pendingBytes += len(frame)
	s.mu.Unlock()
	s.emitsSent.Add(1)

	var err error
	if hold {
		_, err = hw.WriteHeld(frame)
	} else {
		_, err = w.Write(frame) // sends what was held too
	}

	s.mu.Lock()
	if hold && err == nil {
		s.held += len(frame)
	} else {
		s.held = 0
	}
	s.pendingBytes -= len(frame)
	return s.endDirectLocked(err)
}

// endDirectLocked ends a write made outside the writer goroutine
// (writeDirect, Flush; s.mu held, released on return): the writer
// goroutine and those waiting for room go on, and the session fails on
// the write's error, which it returns (the session's own if it ended).
func (s *Session) endDirectLocked(err error) error {
	s.inflight = 0
	s.direct = false
	close(s.space)
	s.space = make(chan struct{})
	more := len(s.q) > 0
	s.mu.Unlock()
	if more {
		notify(s.wake) // what was queued meanwhile
	}
	if err != nil {
		s.failRead(err)
		if e := s.Err(); e != nil {
			return e
		}
	}
	return err
}

// heldWriter is an emit stream that can hold frames back to send them
// together (the WebSocket mapping over a Corker): WriteHeld writes p as
// Write does (p is free on return) but may keep the bytes until Flush or
// the next Write.
type heldWriter interface {
	WriteHeld(p []byte) (int, error)
	Flush() error
}

// Flush sends what EmitFramedWaitQueue left held: on the WebSocket
// mapping over a Corker, frames it writes stay in the Corker's buffer
// (up to 256 KiB) so that a run of them leaves in one system call, until
// Flush, the next frame the writer goroutine writes, or the session's
// close. Call it when nothing more is about to be emitted (delivery's
// Scheduler does, before it waits). It returns the write's error.
func (s *Session) Flush() error {
	s.mu.Lock()
	for {
		if s.held == 0 || s.Err() != nil {
			s.mu.Unlock()
			return nil
		}
		if s.inflight == 0 {
			break
		}
		// A direct write on another goroutine (the writer goroutine
		// clears held when it takes frames: its write sends them).
		if s.awaitSpace(context.Background()) != nil {
			return nil // the session ended: its close sends what is held
		}
	}
	// Hold the writer goroutine off as a direct write does.
	hw := s.emitW.(heldWriter)
	s.held = 0
	s.inflight = 1
	s.direct = true
	s.mu.Unlock()

	err := hw.Flush()

	s.mu.Lock()
	return s.endDirectLocked(err)
}

// enqueue appends frame b to the emit lane. With mark 0 it never waits and
// closes the session at MaxEmitQueue; otherwise it waits while mark or more
// frames, or bytes or more bytes (when bytes > 0), are pending, or until
// ctx ends.
func (s *Session) enqueue(ctx context.Context, b []byte, mark, bytes int) error {
	s.mu.Lock()
	for {
		if err := s.Err(); err != nil {
			s.mu.Unlock()
			return err
		}
		pending := len(s.q) + s.inflight
		if mark == 0 {
			if pending >= MaxEmitQueue {
				s.mu.Unlock()
				s.Close(ClosePeerTooSlow, fmt.Sprintf("emit queue exceeded %d frames", MaxEmitQueue))
				return s.Err()
			}
			break
		}
		if pending < mark && (bytes <= 0 || pending == 0 || s.pendingBytes < bytes) {
			break
		}
		if err := s.awaitSpace(ctx); err != nil {
			return err
		}
	}
	s.q = append(s.q, b)
	s.pendingBytes += len(b)
	s.mu.Unlock()
	s.emitsSent.Add(1)
	notify(s.wake)
	return nil
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// maxWriteBatch bounds the bytes the writer hands the carrier in one write;
// frames are coalesced up to it (write boundaries carry no meaning, §5).
const maxWriteBatch = 256 << 10

// writer owns this side's emit stream: frame 0 is the handshake, queued
// first by Start.
func (s *Session) writer() {
	defer s.wg.Done()
	w, err := s.car.OpenEmit(s.ctx)
	if err != nil {
		s.failRead(err)
		return
	}
	ws := s.car.Kind() == KindWebSocket
	var buf []byte
	sent := false
	s.mu.Lock()
	s.emitW = w
	s.mu.Unlock()
	for {
		s.mu.Lock()
		if ws {
			s.moveDatagramsLocked()
		}
		for len(s.q) == 0 || s.direct {
			s.mu.Unlock()
			select {
			case <-s.wake:
			case <-s.ctx.Done():
				return
			}
			s.mu.Lock()
			if ws {
				s.moveDatagramsLocked()
			}
		}
		// Frames that fit together go in one write; a frame alone (a
		// large one, or nothing behind it) is written from its own buffer.
		n := 0
		out := s.q[0]
		single := len(s.q) == 1 || len(out)+len(s.q[1]) > maxWriteBatch
		if !single {
			buf = buf[:0]
			for n < len(s.q) && (n == 0 || len(buf)+len(s.q[n]) <= maxWriteBatch) {
				buf = append(buf, s.q[n]...)
				putFrame(s.q[n])
				s.q[n] = nil
				n++
			}
			out = buf
		} else {
			s.q[0] = nil
			n = 1
		}
		s.q = s.q[n:]
		s.inflight = n
		s.held = 0 // this write sends it
		s.mu.Unlock()

		_, err := w.Write(out)
		if single {
			putFrame(out) // Write does not keep it (io.Writer)
		}
		if !sent && err == nil {
			sent = true
			close(s.hsSent) // frame 0 was in this write
		}

		s.mu.Lock()
		s.inflight = 0
		s.pendingBytes -= len(out)
		close(s.space)
		s.space = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			s.failRead(err)
			return
		}
		if cap(buf) > 2*maxWriteBatch {
			buf = nil
		}
	}
}

// ----- reading the peer's emit stream -----

func (s *Session) reader() {
	defer s.wg.Done()
	defer close(s.readerDone)
	r, err := s.car.AcceptEmit(s.ctx)
	if err != nil {
		s.failRead(err)
		return
	}
	dec := NewDecoder(r)
	first := true
	for {
		f, err := dec.Next()
		if err != nil {
			if s.ctx.Err() != nil {
				return
			}
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				err = fmt.Errorf("the peer ended its emit stream: %w", err)
			}
			s.failRead(err)
			return
		}
		if first {
			first = false
			if err := s.handshake(f); err != nil {
				return
			}
			continue
		}
		if err := s.frame(f); err != nil {
			var se *SessionError
			if errors.As(err, &se) {
				s.Close(se.Code, se.Reason)
			} else {
				s.Close(CloseProtocolError, err.Error())
			}
			return
		}
	}
}

// protocolReason is the close reason of err under CloseProtocolError:
// without a FrameError's code when that is the close code's own name
// (which would read "WT_PROTOCOL_ERROR: WT_PROTOCOL_ERROR: ...").
func protocolReason(err error) string {
	var fe *FrameError
	if errors.As(err, &fe) && fe.Code == CloseProtocolError.String() {
		return fe.Reason
	}
	return err.Error()
}

func protoErr(format string, a ...any) error {
	return &SessionError{Code: CloseProtocolError, Reason: fmt.Sprintf(format, a...)} // the code names it
}

func (s *Session) handshake(f Frame) error {
	fail := func(err error) error {
		var se *SessionError
		if errors.As(err, &se) {
			s.Close(se.Code, se.Reason)
		} else {
			s.Close(CloseProtocolError, protocolReason(err))
		}
		return err
	}
	if f.Type != FrameHandshake {
		return fail(protoErr("the first frame on the emit stream is %s, not HANDSHAKE", f.Type))
	}
	if f.Codec != CodecJSON || f.EventID != 0 {
		return fail(protoErr("a HANDSHAKE frame must carry codec JSON and event id 0"))
	}
	h, err := ParseHandshake(f.Payload)
	if err != nil {
		return fail(err)
	}
	neg, err := Negotiate(s.cfg.Contract, s.cfg.Feat, h)
	if err != nil {
		return fail(err)
	}
	s.neg = neg
	close(s.hsDone)
	return nil
}

func (s *Session) frame(f Frame) error {
	switch f.Type {
	case FrameHandshake:
		return protoErr("a second HANDSHAKE frame (frame 0 only)")
	case FrameEmit:
		return s.receiveEmit(f)
	case FrameJoin, FrameLeave:
		if s.cfg.Role == RoleServer {
			return protoErr("a client sent %s; rooms are server-authoritative", f.Type)
		}
		var p struct {
			Room *string `json:"room"`
		}
		if f.Codec != CodecJSON || json.Unmarshal(f.Payload, &p) != nil || p.Room == nil {
			return protoErr("a malformed %s frame", f.Type)
		}
		if f.Type == FrameJoin {
			s.rooms.Store(*p.Room, true)
		} else {
			s.rooms.Delete(*p.Room)
		}
		return nil
	case FrameDatagram:
		if s.car.Kind() != KindWebSocket {
			return protoErr("a DATAGRAM frame on a %s session (WebSocket mapping only)", s.car.Kind())
		}
		if f.Codec != CodecJSON || f.EventID != 0 {
			return protoErr("a DATAGRAM frame header must carry codec JSON and event id 0")
		}
		s.receiveDatagram(f.Payload)
		return nil
	default:
		return protoErr("a %s frame on the emit stream", f.Type)
	}
}

func (s *Session) receiveEmit(f Frame) error {
	ev, ok := s.cfg.Contract.ByID(f.EventID)
	if !ok || ev.Lane != LaneReliable || ev.Shape != ShapeEmit {
		s.unknownDropped.Add(1) // WT_UNKNOWN_EVENT: nothing to answer on; the session stays up
		return nil
	}
	if f.Codec != ev.Payload {
		return protoErr("event '%s' declares %s for its payload and the frame carries %s", ev.Name, ev.Payload, f.Codec)
	}
	if f.Codec == CodecJSON && (!utf8.Valid(f.Payload) || !s.cfg.PayloadsChecked && !json.Valid(f.Payload)) {
		return protoErr("event '%s': the payload is not valid JSON", ev.Name)
	}
	s.emitsReceived.Add(1)
	m := Message{Event: ev.Name, Codec: f.Codec, Payload: f.Payload}
	select {
	case s.inbound <- m:
		return nil
	default:
	}
	select {
	case s.inbound <- m:
		return nil
	case <-s.ctx.Done():
		return s.Err()
	}
}

// Receive returns the next received EMIT. Messages received before the
// session ended are returned first; then the session's error.
func (s *Session) Receive(ctx context.Context) (Message, error) {
	select {
	case m := <-s.inbound:
		return m, nil
	default:
	}
	select {
	case m := <-s.inbound:
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-s.ctx.Done():
		// What arrived before the end is delivered first: give the reader
		// a moment to hand over what the carrier still holds.
		t := time.NewTimer(250 * time.Millisecond)
		defer t.Stop()
		select {
		case m := <-s.inbound:
			return m, nil
		case <-s.readerDone:
		case <-t.C:
		case <-ctx.Done():
			return Message{}, ctx.Err()
		}
		select {
		case m := <-s.inbound:
			return m, nil
		default:
		}
		return Message{}, s.Err()
	}
}

// awaitSpace releases s.mu (held by the caller), waits for the emit
// queue's next change (s.space), ctx's end or the session's, and takes
// s.mu again when it returns nil; with an error s.mu is not held.
func (s *Session) awaitSpace(ctx context.Context) error {
	sp := s.space
	s.mu.Unlock()
	select {
	case <-sp:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.ctx.Done():
		return s.Err()
	}
	s.mu.Lock()
	return nil
}
