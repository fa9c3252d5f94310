package transportio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Calls (§3.2, §6.2–6.6, §8, §10.1). Each call owns one bidirectional
// stream. The contract decides the shape of an event (Event.Shape): a
// returns event is answered by one CALL_RESPONSE or one CALL_ERROR, a yields
// event by a sequence of CALL_RESPONSE frames under CALL_CREDIT flow control
// (InitialCallCredit, refills of CallCreditBatch), optionally ended by one
// CALL_ERROR. Either side of a session on a mapping with bidirectional
// streams (WebTransport) may serve calls (HandleCall, HandleStream,
// Config.Handlers) and make them (Call, CallStream). A responder never drops
// an element and imposes no deadline of its own; every call a session is
// serving is aborted when the session ends.

// CallRequest is one inbound call as a handler sees it.
type CallRequest struct {
	Event   string
	Codec   Codec
	Payload []byte
}

// ReturnsHandler serves a returns event: the result is sent as the one
// CALL_RESPONSE (in the codec of the event's Result slot), an error as the
// CALL_ERROR. A *CallError keeps its code; any other error is sent as
// WT_HANDLER_FAILED with its text. ctx ends when the initiator cancels
// (reset or STOP_SENDING) or the session ends; nothing is written then.
type ReturnsHandler func(ctx context.Context, req CallRequest) ([]byte, error)

// YieldsHandler serves a yields event by calling y.Yield once per element;
// returning nil ends the sequence (FIN), an error sends the CALL_ERROR after
// the elements already yielded. Yield blocks while the consumer has granted
// no credit and fails once the call is cancelled (a reset, the initiator's
// FIN, or the session ending); the handler should then return.
type YieldsHandler func(ctx context.Context, req CallRequest, y *Yielder) error

// Handlers is a set of call handlers shared by the sessions of a listener
// (Config.Handlers). Register before sessions start; not safe for
// registration concurrent with use.
type Handlers struct {
	m map[string]any
}

// Returns registers fn for the returns event.
func (h *Handlers) Returns(event string, fn ReturnsHandler) {
	if h.m == nil {
		h.m = map[string]any{}
	}
	h.m[event] = fn
}

// Yields registers fn for the yields event.
func (h *Handlers) Yields(event string, fn YieldsHandler) {
	if h.m == nil {
		h.m = map[string]any{}
	}
	h.m[event] = fn
}

func (h *Handlers) lookup(event string) any {
	if h == nil {
		return nil
	}
	return h.m[event]
}

// HandleCall registers fn for the returns event on this session. It fails
// when the event is not in the contract or does not declare returns.
func (s *Session) HandleCall(event string, fn ReturnsHandler) error {
	return s.handle(event, ShapeReturns, fn)
}

// HandleStream registers fn for the yields event on this session. It fails
// when the event is not in the contract or does not declare yields.
func (s *Session) HandleStream(event string, fn YieldsHandler) error {
	return s.handle(event, ShapeYields, fn)
}

func (s *Session) handle(event string, shape Shape, fn any) error {
	ev, ok := s.cfg.Contract.Lookup(event)
	if !ok {
		return fmt.Errorf("%w: '%s'", ErrUnknownEvent, event)
	}
	if ev.Shape != shape {
		return fmt.Errorf("%w: '%s' does not declare %s", ErrWrongShape, event, shapeName(shape))
	}
	s.handlersMu.Lock()
	if s.handlers == nil {
		s.handlers = map[string]any{}
	}
	s.handlers[event] = fn
	s.handlersMu.Unlock()
	return nil
}

func shapeName(sh Shape) string {
	switch sh {
	case ShapeReturns:
		return "returns"
	case ShapeYields:
		return "yields"
	}
	return "emit"
}

func (s *Session) handlerFor(event string) any {
	s.handlersMu.Lock()
	fn := s.handlers[event]
	s.handlersMu.Unlock()
	if fn == nil {
		fn = s.cfg.Handlers.lookup(event)
	}
	return fn
}

// StreamResetError is a call stream reset or stopped by the peer (§10.1):
// WT_ABORTED (1), WT_TOO_MANY_STREAMS (9), or a code from a browser (0).
type StreamResetError struct {
	Code   ResetCode
	Remote bool
}

func (e *StreamResetError) Error() string {
	switch e.Code {
	case ResetTooManyStreams:
		return "WT_TOO_MANY_STREAMS: over 256 concurrent call streams on this session; reduce concurrency and retry"
	case ResetAborted:
		return "WT_ABORTED: the call stream was cancelled"
	}
	return fmt.Sprintf("transportio: call stream reset with code %d", e.Code)
}

// callState tracks call streams so that every one is aborted when the
// session ends (§6.6, §11); limit bounds them (§10.1), 0 for none.
type callState struct {
	mu     sync.Mutex
	active map[CallStream]struct{}
	closed bool
	limit  int
}

func (c *callState) init(limit int) {
	c.active = map[CallStream]struct{}{}
	c.limit = limit
}

func (c *callState) add(st CallStream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || (c.limit > 0 && len(c.active) >= c.limit) {
		return false
	}
	c.active[st] = struct{}{}
	return true
}

func (c *callState) remove(st CallStream) {
	c.mu.Lock()
	delete(c.active, st)
	c.mu.Unlock()
}

// len is the number of call streams tracked (open, not yet removed).
func (c *callState) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.active)
}

func (c *callState) abortAll() {
	c.mu.Lock()
	c.closed = true
	act := c.active
	c.active = map[CallStream]struct{}{}
	c.mu.Unlock()
	for st := range act {
		st.CancelRead(ResetAborted)
		st.CancelWrite(ResetAborted)
	}
}

// ActiveCalls is the number of inbound calls this session is serving.
func (s *Session) ActiveCalls() int { return s.calls.len() }

func (s *Session) acceptCalls(cc CallCarrier) {
	defer s.wg.Done()
	for {
		st, err := cc.AcceptCall(s.ctx)
		if err != nil {
			return
		}
		if !s.calls.add(st) {
			// Over MaxConcurrentCalls (or closing): reset unread (§10.1).
			st.CancelRead(ResetTooManyStreams)
			st.CancelWrite(ResetTooManyStreams)
			continue
		}
		s.wg.Add(1)
		go s.serveCall(st)
	}
}

// sendCallError writes one CALL_ERROR and FIN.
func sendCallError(st CallStream, code, msg string) {
	p, _ := json.Marshal(CallError{Code: code, Message: TruncateReason(msg, MaxCallErrorMessage)})
	_, _ = st.Write(AppendFrame(nil, Frame{Type: FrameCallError, Codec: CodecJSON, Payload: p}))
	_ = st.CloseWrite()
}

// abandon gives up a call stream after a framing error: STOP_SENDING, then
// FIN with nothing more (reference decision 5), so the initiator sees the
// stream end without a response frame.
func abandon(st CallStream) {
	st.CancelRead(ResetNoError)
	_ = st.CloseWrite()
}

// checkPayload validates a payload against a codec slot.
func checkPayload(ev Event, slot string, want Codec, f Frame) error {
	if f.Codec != want {
		return fmt.Errorf("event '%s' declares %s for its %s and the frame carries %s", ev.Name, want, slot, f.Codec)
	}
	if f.Codec == CodecJSON && (!utf8.Valid(f.Payload) || !json.Valid(f.Payload)) {
		return fmt.Errorf("event '%s': the %s is not valid JSON", ev.Name, slot)
	}
	return nil
}

// serveCall answers one inbound call stream.
func (s *Session) serveCall(st CallStream) {
	defer s.wg.Done()
	defer s.calls.remove(st)
	dec := NewDecoder(st)
	f, err := dec.Next()
	if err != nil {
		if s.ctx.Err() == nil {
			abandon(st) // checklist 53: only this stream
		}
		return
	}
	if f.Type != FrameCallRequest {
		st.CancelRead(ResetNoError)
		sendCallError(st, "WT_PROTOCOL_ERROR", "the first frame on a call stream must be CALL_REQUEST, not "+f.Type.String())
		return
	}
	// Streams are not ordered against the emit stream, so a call may
	// arrive before the peer's handshake was read: hold it (decision 4).
	// The handshake deadline closes the session, which aborts the call.
	select {
	case <-s.hsDone:
	case <-s.ctx.Done():
		return
	}
	ev, ok := s.cfg.Contract.ByID(f.EventID)
	var fn any
	code, msg := "", ""
	switch {
	case !ok:
		code, msg = "WT_UNKNOWN_EVENT", fmt.Sprintf("event id %d is not in this contract", f.EventID)
	case ev.Lane == LaneUnreliable:
		code, msg = "WT_PROTOCOL_ERROR", fmt.Sprintf("event '%s' is on the unreliable lane and is not callable", ev.Name)
	case ev.Shape == ShapeEmit:
		code, msg = "WT_UNKNOWN_EVENT", fmt.Sprintf("event '%s' is an emit event and has no handler here", ev.Name)
	default:
		if err := checkPayload(ev, "payload", ev.Payload, f); err != nil {
			code, msg = "WT_PROTOCOL_ERROR", err.Error()
			break
		}
		if fn = s.handlerFor(ev.Name); fn == nil {
			code, msg = "WT_UNKNOWN_EVENT", fmt.Sprintf("event '%s' has no handler here", ev.Name)
		}
	}
	if code != "" {
		st.CancelRead(ResetNoError)
		sendCallError(st, code, msg)
		return
	}
	req := CallRequest{Event: ev.Name, Codec: f.Codec, Payload: f.Payload}
	switch h := fn.(type) {
	case ReturnsHandler:
		s.serveReturns(st, dec, ev, req, h)
	case YieldsHandler:
		s.serveYields(st, dec, ev, req, h)
	}
}

// handlerError is the CALL_ERROR a handler's error becomes.
func handlerError(err error) (code, msg string) {
	var ce *CallError
	if errors.As(err, &ce) && len(ce.Code) > 3 && ce.Code[:3] == "WT_" {
		return ce.Code, ce.Message
	}
	return "WT_HANDLER_FAILED", err.Error()
}

// callCtx is the context a handler runs under: it ends with the session,
// when the initiator stops reading (the send side's context, where the
// stream has one) or by cancel.
func (s *Session) callCtx(st CallStream) (context.Context, context.CancelCauseFunc, func() bool) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	stop := func() bool { return false }
	if sc, ok := st.(interface{ Context() context.Context }); ok {
		stop = context.AfterFunc(sc.Context(), func() { cancel(errStopped) })
	}
	return ctx, cancel, stop
}

var (
	errStopped   = errors.New("WT_ABORTED: the initiator cancelled the call")
	errFinished  = errors.New("transportio: the initiator ended the stream: no further credit is coming")
	errAbandoned = errors.New("WT_PROTOCOL_ERROR: a framing error on the call stream")
)

func (s *Session) serveReturns(st CallStream, dec *Decoder, ev Event, req CallRequest, h ReturnsHandler) {
	ctx, cancel, stop := s.callCtx(st)
	defer cancel(nil)
	defer stop()
	// The initiator's send side should end with FIN; a reset cancels the
	// call (checklist 55), anything else after the request is ignored.
	readDone := make(chan struct{})
	defer func() {
		st.CancelRead(ResetNoError) // unblocks the reader; the request is complete
		<-readDone
	}()
	go func() {
		defer close(readDone)
		for {
			if _, err := dec.Next(); err != nil {
				if err != io.EOF {
					cancel(errStopped)
				}
				return
			}
		}
	}()
	res, err := h(ctx, req)
	if ctx.Err() != nil {
		if s.ctx.Err() == nil {
			st.CancelWrite(ResetAborted)
		}
		return
	}
	if err != nil {
		code, msg := handlerError(err)
		sendCallError(st, code, msg)
		return
	}
	f := Frame{Type: FrameCallResponse, Codec: ev.Result, Payload: res}
	if err := f.Check(); err != nil {
		sendCallError(st, "WT_HANDLER_FAILED", fmt.Sprintf("event '%s': the handler's result cannot be sent: %v", ev.Name, err))
		return
	}
	if err := checkPayload(ev, "result", ev.Result, f); err != nil {
		sendCallError(st, "WT_HANDLER_FAILED", err.Error())
		return
	}
	_, _ = st.Write(AppendFrame(make([]byte, 0, f.Len()), f))
	_ = st.CloseWrite()
}

// Yielder sends the elements of a yields call within the credit the
// consumer granted (§6.6): it starts at InitialCallCredit, spends one per
// element, and waits at zero, for as long as it takes.
type Yielder struct {
	ev  Event
	st  CallStream
	ctx context.Context

	mu     sync.Mutex
	credit int64
	more   chan struct{} // closed and replaced when credit arrives
	done   bool
	sent   int
	// parked, when set (tests), receives Sent each time Yield waits at zero.
	parked chan<- int
}

func (y *Yielder) grant(n int64) {
	y.mu.Lock()
	if y.credit < 1<<40 {
		y.credit += n
	}
	close(y.more)
	y.more = make(chan struct{})
	y.mu.Unlock()
}

// Credit is the credit left.
func (y *Yielder) Credit() int {
	y.mu.Lock()
	defer y.mu.Unlock()
	return int(y.credit)
}

// Sent is the number of elements written.
func (y *Yielder) Sent() int {
	y.mu.Lock()
	defer y.mu.Unlock()
	return y.sent
}

// Yield sends one element as exactly one CALL_RESPONSE, in the codec of the
// event's result slot, waiting while the credit is zero. It fails when the
// call was cancelled or the payload cannot be sent; the element is then not
// sent.
func (y *Yielder) Yield(payload []byte) error {
	f := Frame{Type: FrameCallResponse, Codec: y.ev.Result, Payload: payload}
	if err := f.Check(); err != nil {
		return err
	}
	if err := checkPayload(y.ev, "yields", y.ev.Result, f); err != nil {
		return err
	}
	y.mu.Lock()
	for y.credit == 0 && !y.done {
		more, sent := y.more, y.sent
		y.mu.Unlock()
		if y.parked != nil {
			select {
			case y.parked <- sent:
			case <-y.ctx.Done():
			}
		}
		select {
		case <-more:
		case <-y.ctx.Done():
			return context.Cause(y.ctx)
		}
		y.mu.Lock()
	}
	if y.done {
		y.mu.Unlock()
		return errors.New("transportio: Yield after the handler returned")
	}
	if err := context.Cause(y.ctx); err != nil {
		y.mu.Unlock()
		return err
	}
	y.credit--
	y.sent++
	y.mu.Unlock()
	if _, err := y.st.Write(AppendFrame(make([]byte, 0, f.Len()), f)); err != nil {
		return err
	}
	return nil
}

// parseCredit returns the credit of a CALL_CREDIT payload; ok is false for
// anything that is not an integer ≥ 1 (ignored, decision 13).
func parseCredit(f Frame) (int64, bool) {
	if f.Type != FrameCallCredit || f.Codec != CodecJSON {
		return 0, false
	}
	d := json.NewDecoder(bytes.NewReader(f.Payload))
	d.UseNumber()
	var p map[string]any
	if d.Decode(&p) != nil {
		return 0, false
	}
	n, ok := p["credit"].(json.Number)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil || v < 1 {
		return 0, false
	}
	return v, true
}

func (s *Session) serveYields(st CallStream, dec *Decoder, ev Event, req CallRequest, h YieldsHandler) {
	ctx, cancel, stop := s.callCtx(st)
	defer cancel(nil)
	defer stop()
	y := &Yielder{ev: ev, st: st, ctx: ctx, credit: InitialCallCredit, more: make(chan struct{})}
	// The initiator's send side carries CALL_CREDIT; its FIN means no more
	// credit is coming and is treated as cancellation (§6.2).
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		for {
			f, err := dec.Next()
			switch {
			case err == io.EOF:
				cancel(errFinished)
				return
			case err != nil:
				var fe *FrameError
				if errors.As(err, &fe) {
					cancel(errAbandoned)
				} else {
					cancel(errStopped)
				}
				return
			}
			if n, ok := parseCredit(f); ok {
				y.grant(n)
			}
		}
	}()
	err := h(ctx, req, y)
	y.mu.Lock()
	y.done = true
	y.mu.Unlock()
	cause := context.Cause(ctx)
	switch {
	case s.ctx.Err() != nil:
		// abortAll has reset the stream.
	case cause == errFinished:
		_ = st.CloseWrite()
	case cause == errAbandoned:
		abandon(st)
	case cause != nil:
		st.CancelWrite(ResetAborted)
		st.CancelRead(ResetAborted)
	case err != nil:
		code, msg := handlerError(err)
		st.CancelRead(ResetNoError)
		sendCallError(st, code, msg)
	default:
		st.CancelRead(ResetNoError)
		_ = st.CloseWrite()
	}
	cancel(nil)
	st.CancelRead(ResetNoError)
	<-readDone
}

// ----- the initiator -----

func (s *Session) openCall(ctx context.Context, event string, shape Shape, payload []byte) (Event, CallStream, error) {
	ev, ok := s.cfg.Contract.Lookup(event)
	if !ok {
		return ev, nil, fmt.Errorf("%w: '%s'", ErrUnknownEvent, event)
	}
	if ev.Lane != LaneReliable || ev.Shape != shape {
		return ev, nil, fmt.Errorf("%w: '%s' does not declare %s", ErrWrongShape, event, shapeName(shape))
	}
	f := Frame{Type: FrameCallRequest, Codec: ev.Payload, EventID: ev.ID, Payload: payload}
	if err := f.Check(); err != nil {
		return ev, nil, err
	}
	cc, ok := s.car.(CallCarrier)
	if !ok {
		return ev, nil, ErrLaneUnavailable
	}
	if err := s.Err(); err != nil {
		return ev, nil, err
	}
	st, err := cc.OpenCall(ctx)
	if err != nil {
		if e := s.Err(); e != nil {
			return ev, nil, e
		}
		return ev, nil, err
	}
	if !s.outCalls.add(st) {
		st.CancelRead(ResetAborted)
		st.CancelWrite(ResetAborted)
		return ev, nil, s.Err()
	}
	if _, err := st.Write(AppendFrame(make([]byte, 0, f.Len()), f)); err != nil {
		s.outCalls.remove(st)
		st.CancelRead(ResetAborted)
		st.CancelWrite(ResetAborted)
		return ev, nil, s.callErr(ctx, err)
	}
	return ev, st, nil
}

// callErr says why a call stream failed: the session's end, the caller's
// context, a reset from the peer, or the error itself.
func (s *Session) callErr(ctx context.Context, err error) error {
	if e := s.Err(); e != nil {
		return e
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var re *StreamResetError
	if errors.As(err, &re) && re.Remote && re.Code == ResetAborted {
		// A responder resets with WT_ABORTED when its session ends, and
		// the reset may overtake the session's close: give the close a
		// moment so a pending call rejects as WT_SESSION_CLOSED (§11).
		t := time.NewTimer(250 * time.Millisecond)
		defer t.Stop()
		select {
		case <-s.ctx.Done():
			return s.Err()
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return err
}

// readResponse reads one response frame and checks it; done is true at the
// end of the stream.
func readResponse(dec *Decoder, ev Event) (f Frame, done bool, err error) {
	f, err = dec.Next()
	if err == io.EOF {
		return f, true, nil
	}
	if err != nil {
		var fe *FrameError
		if errors.As(err, &fe) {
			return f, true, &CallError{Code: "WT_PROTOCOL_ERROR", Message: fe.Error()}
		}
		return f, true, err
	}
	switch f.Type {
	case FrameCallResponse:
		if err := checkPayload(ev, shapeName(ev.Shape), ev.Result, f); err != nil {
			return f, true, &CallError{Code: "WT_PROTOCOL_ERROR", Message: err.Error()}
		}
		return f, false, nil
	case FrameCallError:
		var ce CallError
		if f.Codec != CodecJSON || json.Unmarshal(f.Payload, &ce) != nil || ce.Code == "" {
			return f, true, &CallError{Code: "WT_PROTOCOL_ERROR", Message: "a malformed CALL_ERROR"}
		}
		return f, true, &ce
	}
	return f, true, &CallError{Code: "WT_PROTOCOL_ERROR", Message: "a " + f.Type.String() + " frame from the responder"}
}

// Call makes a call to a returns event and waits for its one result. A
// CALL_ERROR is returned as a *CallError; a stream that ends with no
// response frame as a *CallError WT_PROTOCOL_ERROR; a reset by the peer as
// a *StreamResetError (WT_TOO_MANY_STREAMS over the peer's bound); the
// session's end as its *SessionError (ErrSessionClosed). Cancelling ctx
// resets the stream with WT_ABORTED (§8). On a mapping without
// bidirectional streams it fails with ErrLaneUnavailable.
func (s *Session) Call(ctx context.Context, event string, payload []byte) ([]byte, error) {
	ev, st, err := s.openCall(ctx, event, ShapeReturns, payload)
	if err != nil {
		return nil, err
	}
	defer s.outCalls.remove(st)
	_ = st.CloseWrite()
	stop := context.AfterFunc(ctx, func() {
		st.CancelRead(ResetAborted)
		st.CancelWrite(ResetAborted)
	})
	defer stop()
	dec := NewDecoder(st)
	var res []byte
	got := false
	for {
		f, done, err := readResponse(dec, ev)
		if err != nil {
			var ce *CallError
			if errors.As(err, &ce) {
				if ce.Code == "WT_PROTOCOL_ERROR" && f.Type != FrameCallError {
					st.CancelRead(ResetNoError)
				}
				return nil, err
			}
			return nil, s.callErr(ctx, err)
		}
		if done {
			break
		}
		// Any number of responses is accepted (§3.2); the first is the result.
		if !got {
			res, got = f.Payload, true
		}
	}
	if !got {
		return nil, &CallError{Code: "WT_PROTOCOL_ERROR", Message: fmt.Sprintf("event '%s': the responder closed the stream without a response frame", ev.Name)}
	}
	return res, nil
}

// ResponseStream is the consumer's side of a yields call.
type ResponseStream struct {
	s   *Session
	ev  Event
	st  CallStream
	dec *Decoder
	ctx context.Context

	stop     func() bool
	mu       sync.Mutex
	consumed int
	err      error // terminal
	closed   bool
}

// CallStream makes a call to a yields event. Read the elements with Next;
// Close the stream when done (it cancels an unfinished call). Cancelling
// ctx resets the stream with WT_ABORTED: ctx is the call's deadline, the
// responder imposes none.
func (s *Session) CallStream(ctx context.Context, event string, payload []byte) (*ResponseStream, error) {
	ev, st, err := s.openCall(ctx, event, ShapeYields, payload)
	if err != nil {
		return nil, err
	}
	r := &ResponseStream{s: s, ev: ev, st: st, dec: NewDecoder(st), ctx: ctx}
	r.stop = context.AfterFunc(ctx, func() {
		st.CancelRead(ResetAborted)
		st.CancelWrite(ResetAborted)
	})
	return r, nil
}

// Next returns the next element. After the last it returns io.EOF; after
// elements followed by a CALL_ERROR it returns the *CallError. Each element
// taken counts towards the next CALL_CREDIT (batches of CallCreditBatch).
// Not safe for concurrent use.
func (r *ResponseStream) Next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	f, done, err := readResponse(r.dec, r.ev)
	if err != nil {
		var ce *CallError
		if !errors.As(err, &ce) {
			err = r.s.callErr(r.ctx, err)
		} else if f.Type != FrameCallError {
			r.st.CancelRead(ResetNoError)
		}
		r.finish(err)
		return nil, err
	}
	if done {
		r.finish(io.EOF)
		return nil, io.EOF
	}
	r.consumed++
	if r.consumed%CallCreditBatch == 0 {
		c := AppendFrame(nil, Frame{Type: FrameCallCredit, Codec: CodecJSON, Payload: []byte(`{"credit":` + strconv.Itoa(CallCreditBatch) + `}`)})
		// A responder that has finished stops reading (STOP_SENDING), so a
		// failed credit write is not an error: the elements and the end it
		// already sent are still read, and a real reset shows on the read.
		_, _ = r.st.Write(c)
	}
	return f.Payload, nil
}

// finish records the terminal state and closes our send side.
func (r *ResponseStream) finish(err error) {
	r.err = err
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		r.stop()
		_ = r.st.CloseWrite()
		r.s.outCalls.remove(r.st)
	}
}

// Close ends the stream; an unfinished call is cancelled with WT_ABORTED.
// Idempotent.
func (r *ResponseStream) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	r.stop()
	r.st.CancelRead(ResetAborted)
	r.st.CancelWrite(ResetAborted)
	r.s.outCalls.remove(r.st)
	return nil
}

// OpenCallForTest opens a raw call stream on a WebTransport session (tests
// that drive call frames by hand).
func OpenCallForTest(ctx context.Context, s *Session) (CallStream, error) {
	cc, ok := s.car.(CallCarrier)
	if !ok {
		return nil, ErrLaneUnavailable
	}
	return cc.OpenCall(ctx)
}
