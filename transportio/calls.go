package transportio

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
)

// Calls (§3.2, §6.2–6.6). This version serves no call handlers: every
// inbound call is answered with a CALL_ERROR and FIN, so a peer's call
// fails cleanly instead of hanging; the sidecar's contract declares no call
// event. Calls in the returns and yields shapes with CALL_CREDIT are not
// implemented yet (docs/conformance.md lists the cases).

// callState tracks the call streams a session serves, so that every one is
// aborted when the session ends (§6.6, §11), and bounds them (§10.1).
type callState struct {
	mu     sync.Mutex
	active map[CallStream]struct{}
	closed bool
}

func (c *callState) init() { c.active = map[CallStream]struct{}{} }

func (c *callState) add(st CallStream) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(c.active) >= MaxConcurrentCalls {
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
		go s.refuseCall(st)
	}
}

// refuseCall answers one inbound call stream with CALL_ERROR, then FIN.
func (s *Session) refuseCall(st CallStream) {
	defer s.wg.Done()
	defer s.calls.remove(st)
	code, msg := "WT_PROTOCOL_ERROR", "the first frame on a call stream must be CALL_REQUEST"
	f, err := NewDecoder(st).Next()
	switch {
	case err != nil:
		// A framing error abandons only this stream: STOP_SENDING, then
		// FIN with no frame (reference decision 5).
		st.CancelRead(ResetNoError)
		_ = st.CloseWrite()
		return
	case f.Type == FrameCallRequest:
		ev, ok := s.cfg.Contract.ByID(f.EventID)
		switch {
		case !ok:
			code, msg = "WT_UNKNOWN_EVENT", fmt.Sprintf("event id %d is not in this contract", f.EventID)
		case ev.Lane == LaneUnreliable:
			code, msg = "WT_PROTOCOL_ERROR", fmt.Sprintf("event '%s' is on the unreliable lane and is not callable", ev.Name)
		default:
			code, msg = "WT_UNKNOWN_EVENT", fmt.Sprintf("event '%s' has no handler here", ev.Name)
		}
	}
	p, _ := json.Marshal(CallError{Code: code, Message: TruncateReason(msg, MaxCallErrorMessage)})
	_, _ = st.Write(AppendFrame(nil, Frame{Type: FrameCallError, Codec: CodecJSON, Payload: p}))
	st.CancelRead(ResetNoError)
	_ = st.CloseWrite()
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
