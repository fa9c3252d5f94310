package transportio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

var callContract = MustContract(
	Event{Name: "chat"},
	Event{Name: "echo", Shape: ShapeReturns},
	Event{Name: "blobs", Shape: ShapeReturns, Payload: CodecBytes, Result: CodecBytes},
	Event{Name: "count", Shape: ShapeYields},
	Event{Name: "cursor", Lane: LaneUnreliable, Fallback: FallbackNewest},
)

func request(event string, codec Codec, payload string) []byte {
	return AppendFrame(nil, Frame{Type: FrameCallRequest, Codec: codec, EventID: EventID(event), Payload: []byte(payload)})
}

func creditFrame(payload string) []byte {
	return AppendFrame(nil, Frame{Type: FrameCallCredit, Codec: CodecJSON, Payload: []byte(payload)})
}

// readAll reads a call stream to its end: the frames, then how it ended
// (nil for FIN).
func readAll(t *testing.T, st io.Reader) ([]Frame, error) {
	t.Helper()
	d := NewDecoder(st)
	var fs []Frame
	for {
		f, err := d.Next()
		if err == io.EOF {
			return fs, nil
		}
		if err != nil {
			return fs, err
		}
		fs = append(fs, f)
	}
}

func readN(t *testing.T, d *Decoder, n int) []Frame {
	t.Helper()
	fs := make([]Frame, 0, n)
	for len(fs) < n {
		f, err := d.Next()
		if err != nil {
			t.Fatalf("after %d frames: %v", len(fs), err)
		}
		fs = append(fs, f)
	}
	return fs
}

func callErrorOf(t *testing.T, f Frame) CallError {
	t.Helper()
	if f.Type != FrameCallError || f.Codec != CodecJSON || f.EventID != 0 {
		t.Fatalf("not a CALL_ERROR: %+v", f)
	}
	var ce CallError
	if err := json.Unmarshal(f.Payload, &ce); err != nil {
		t.Fatal(err)
	}
	return ce
}

func echoHandlers() *Handlers {
	h := &Handlers{}
	h.Returns("echo", func(_ context.Context, r CallRequest) ([]byte, error) { return r.Payload, nil })
	h.Returns("blobs", func(_ context.Context, r CallRequest) ([]byte, error) { return append([]byte{0}, r.Payload...), nil })
	return h
}

// Checklist 46: CALL_REQUEST then FIN → exactly one CALL_RESPONSE (event id
// 0, the codec of the returns slot), then FIN; and Call returns it.
func TestCall46Returns(t *testing.T) {
	p := newRawCallPeer(t, Config{Handlers: echoHandlers()}, true)
	for _, c := range []struct {
		ev    string
		codec Codec
		in    string
		out   string
	}{{"echo", CodecJSON, `{"a":1}`, `{"a":1}`}, {"blobs", CodecBytes, "\xff\x01", "\x00\xff\x01"}} {
		st := p.open()
		st.Write(request(c.ev, c.codec, c.in))
		st.CloseWrite()
		fs, err := readAll(t, st)
		if err != nil || len(fs) != 1 {
			t.Fatalf("%s: %d frames, %v", c.ev, len(fs), err)
		}
		if f := fs[0]; f.Type != FrameCallResponse || f.EventID != 0 || f.Codec != c.codec || string(f.Payload) != c.out {
			t.Fatalf("%s: %+v", c.ev, f)
		}
	}
	// The same through the client API, Go to Go.
	srv, cli := callPair(t, callContract, Config{Handlers: echoHandlers()})
	_ = srv
	res, err := cli.Call(ctxT(t), "echo", []byte(`"hi"`))
	if err != nil || string(res) != `"hi"` {
		t.Fatalf("%q %v", res, err)
	}
	res, err = cli.Call(ctxT(t), "blobs", []byte{7})
	if err != nil || !bytes.Equal(res, []byte{0, 7}) {
		t.Fatalf("%q %v", res, err)
	}
	if p.s.Err() != nil {
		t.Fatal(p.s.Err())
	}
}

// Checklist 47: a failing handler → one CALL_ERROR {"code","message"}
// (codec JSON, id 0), then FIN; the code is opaque.
func TestCall47HandlerError(t *testing.T) {
	h := &Handlers{}
	h.Returns("echo", func(_ context.Context, r CallRequest) ([]byte, error) {
		if string(r.Payload) == `"plain"` {
			return nil, errors.New("disk full")
		}
		return nil, &CallError{Code: "WT_VALIDATION_FAILED", Message: "field 'body' must be a string"}
	})
	p := newRawCallPeer(t, Config{Handlers: h}, true)
	st := p.open()
	st.Write(request("echo", CodecJSON, `{}`))
	st.CloseWrite()
	fs, err := readAll(t, st)
	if err != nil || len(fs) != 1 {
		t.Fatalf("%d frames, %v", len(fs), err)
	}
	if string(fs[0].Payload) != `{"code":"WT_VALIDATION_FAILED","message":"field 'body' must be a string"}` {
		t.Fatalf("payload %s", fs[0].Payload)
	}
	callErrorOf(t, fs[0])

	_, cli := callPair(t, callContract, Config{Handlers: h})
	_, err = cli.Call(ctxT(t), "echo", []byte(`{}`))
	var ce *CallError
	if !errors.As(err, &ce) || ce.Code != "WT_VALIDATION_FAILED" {
		t.Fatalf("got %v", err)
	}
	_, err = cli.Call(ctxT(t), "echo", []byte(`"plain"`))
	if !errors.As(err, &ce) || ce.Code != "WT_HANDLER_FAILED" || ce.Message != "disk full" {
		t.Fatalf("got %v", err)
	}
}

// Checklist 51: a request whose codec is not the payload slot's →
// CALL_ERROR WT_PROTOCOL_ERROR naming the event and the slot; the session
// stays up. Also (48–50 on the served path): unknown id, no handler,
// unreliable event, first frame not CALL_REQUEST.
func TestCall51CodecMismatch(t *testing.T) {
	p := newRawCallPeer(t, Config{Handlers: echoHandlers()}, true)
	for _, c := range []struct {
		name, frame, code, msg string
	}{
		{"codec", string(request("echo", CodecBytes, "x")), "WT_PROTOCOL_ERROR", "event 'echo' declares JSON for its payload and the frame carries bytes"},
		{"codec bytes slot", string(request("blobs", CodecJSON, "1")), "WT_PROTOCOL_ERROR", "event 'blobs' declares bytes for its payload and the frame carries JSON"},
		{"invalid JSON", string(request("echo", CodecJSON, "{")), "WT_PROTOCOL_ERROR", "event 'echo': the payload is not valid JSON"},
		{"unknown id", string(request("nope", CodecJSON, "1")), "WT_UNKNOWN_EVENT", fmt.Sprintf("event id %d is not in this contract", EventID("nope"))},
		{"no handler", string(request("count", CodecJSON, "1")), "WT_UNKNOWN_EVENT", "event 'count' has no handler here"},
		{"unreliable", string(request("cursor", CodecJSON, "1")), "WT_PROTOCOL_ERROR", "event 'cursor' is on the unreliable lane and is not callable"},
		{"emit event", string(request("chat", CodecJSON, "1")), "WT_UNKNOWN_EVENT", "event 'chat' is an emit event and has no handler here"},
		{"first not request", string(creditFrame(`{"credit":16}`)), "WT_PROTOCOL_ERROR", "the first frame on a call stream must be CALL_REQUEST, not CALL_CREDIT"},
	} {
		st := p.open()
		st.Write([]byte(c.frame))
		st.CloseWrite()
		fs, err := readAll(t, st)
		if err != nil || len(fs) != 1 {
			t.Fatalf("%s: %d frames, %v", c.name, len(fs), err)
		}
		if ce := callErrorOf(t, fs[0]); ce.Code != c.code || ce.Message != c.msg {
			t.Fatalf("%s: %+v", c.name, ce)
		}
	}
	if p.s.Err() != nil {
		t.Fatal(p.s.Err())
	}
}

// Checklist 52: a call that arrives before the peer's handshake is held
// until the handshake completes (decision 4), not refused; if the handshake
// never comes, the deadline closes the session and the call is reset.
func TestCall52BeforeHandshake(t *testing.T) {
	h := &Handlers{}
	var p *rawCallPeer
	h.Returns("echo", func(_ context.Context, r CallRequest) ([]byte, error) {
		select {
		case <-p.s.hsDone:
		default:
			return nil, errors.New("served before the handshake")
		}
		return r.Payload, nil
	})
	p = newRawCallPeer(t, Config{Handlers: h}, false)
	st := p.open()
	st.Write(request("echo", CodecJSON, `1`))
	st.CloseWrite()
	p.handshake()
	fs, err := readAll(t, st)
	if err != nil || len(fs) != 1 || fs[0].Type != FrameCallResponse || string(fs[0].Payload) != "1" {
		t.Fatalf("%+v %v", fs, err)
	}

	q := newRawCallPeer(t, Config{Handlers: h, HandshakeTimeout: 50e6}, false)
	st = q.open()
	st.Write(request("echo", CodecJSON, `1`))
	st.CloseWrite()
	fs, err = readAll(t, st)
	var re *StreamResetError
	if len(fs) != 0 || !errors.As(err, &re) || re.Code != ResetAborted {
		t.Fatalf("%+v %v", fs, err)
	}
	var se *SessionError
	if !errors.As(q.s.Err(), &se) || se.Code != CloseHandshakeTimeout {
		t.Fatalf("session %v", q.s.Err())
	}
}

// Checklist 53 (and 33): a framing error on a call stream abandons only that
// stream (STOP_SENDING, FIN with no frame, decision 5); the session stays
// up and the initiator's Call sees WT_PROTOCOL_ERROR.
func TestCall53FramingErrorAbandonsStream(t *testing.T) {
	p := newRawCallPeer(t, Config{Handlers: echoHandlers()}, true)
	bad := request("echo", CodecJSON, "1")
	bad[6] = 1 // reserved ≠ 0
	for name, b := range map[string][]byte{
		"reserved":  bad,
		"oversized": header(MaxCallPayload+9, byte(FrameCallRequest), 1, 0, EventID("echo")),
		"truncated": request("echo", CodecJSON, "1")[:10],
	} {
		st := p.open()
		st.Write(b)
		st.CloseWrite()
		fs, err := readAll(t, st)
		if len(fs) != 0 || err != nil {
			t.Fatalf("%s: %+v %v", name, fs, err)
		}
		if code, ok := st.stopCode(); !ok || code != ResetNoError {
			t.Fatalf("%s: no STOP_SENDING", name)
		}
	}
	st := p.open() // the session and other calls are unaffected
	st.Write(request("echo", CodecJSON, "2"))
	st.CloseWrite()
	if fs, err := readAll(t, st); err != nil || len(fs) != 1 || string(fs[0].Payload) != "2" {
		t.Fatalf("%+v %v", fs, err)
	}

	// The initiator's side: a responder that closes with no frame.
	errc := make(chan error, 1)
	go func() {
		_, err := p.s.Call(context.Background(), "echo", []byte("1"))
		errc <- err
	}()
	in := p.accept()
	readAll(t, in)
	in.CloseWrite()
	var ce *CallError
	if err := <-errc; !errors.As(err, &ce) || ce.Code != "WT_PROTOCOL_ERROR" || !strings.Contains(ce.Message, "without a response frame") {
		t.Fatalf("got %v", err)
	}
	// A response frame with the wrong codec, then a second with the right one.
	go func() {
		_, err := p.s.Call(context.Background(), "echo", []byte("1"))
		errc <- err
	}()
	in = p.accept()
	in.Write(AppendFrame(nil, Frame{Type: FrameCallResponse, Codec: CodecBytes, Payload: []byte("x")}))
	if err := <-errc; !errors.As(err, &ce) || ce.Code != "WT_PROTOCOL_ERROR" || !strings.Contains(ce.Message, "declares JSON for its returns") {
		t.Fatalf("got %v", err)
	}
	if p.s.Err() != nil {
		t.Fatal(p.s.Err())
	}
}

// Checklist 54: with 256 calls in flight the 257th stream is reset with
// code 9 (RESET_STREAM and STOP_SENDING) unread; the others and the session
// are unaffected.
func TestCall54TooManyStreams(t *testing.T) {
	entered := make(chan struct{}, MaxConcurrentCalls)
	release := make(chan struct{})
	h := &Handlers{}
	h.Returns("echo", func(ctx context.Context, r CallRequest) ([]byte, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return r.Payload, nil
	})
	p := newRawCallPeer(t, Config{Handlers: h}, true)
	var sts []*memStream
	for i := 0; i < MaxConcurrentCalls; i++ {
		st := p.open()
		st.Write(request("echo", CodecJSON, fmt.Sprint(i)))
		st.CloseWrite()
		sts = append(sts, st)
	}
	for i := 0; i < MaxConcurrentCalls; i++ {
		<-entered
	}
	extra := p.open()
	extra.Write(request("echo", CodecJSON, "257"))
	extra.CloseWrite()
	fs, err := readAll(t, extra)
	var re *StreamResetError
	if len(fs) != 0 || !errors.As(err, &re) || re.Code != ResetTooManyStreams || !re.Remote {
		t.Fatalf("257th: %+v %v", fs, err)
	}
	if code, ok := extra.stopCode(); !ok || code != ResetTooManyStreams {
		t.Fatal("257th: no STOP_SENDING 9")
	}
	if re.Error() != "WT_TOO_MANY_STREAMS: over 256 concurrent call streams on this session; reduce concurrency and retry" {
		t.Fatal(re.Error())
	}
	close(release)
	for i, st := range sts {
		if fs, err := readAll(t, st); err != nil || len(fs) != 1 || string(fs[0].Payload) != fmt.Sprint(i) {
			t.Fatalf("call %d: %+v %v", i, fs, err)
		}
	}
	if p.s.Err() != nil {
		t.Fatal(p.s.Err())
	}
}

// Checklist 55: the initiator's reset or STOP_SENDING (code 1, or 0 from a
// browser) aborts the handler, and nothing more is written; Call with a
// cancelled context resets with WT_ABORTED.
func TestCall55InitiatorCancels(t *testing.T) {
	entered := make(chan struct{}, 4)
	aborted := make(chan error, 4)
	h := &Handlers{}
	h.Returns("echo", func(ctx context.Context, r CallRequest) ([]byte, error) {
		entered <- struct{}{}
		<-ctx.Done()
		aborted <- context.Cause(ctx)
		return []byte("1"), nil
	})
	p := newRawCallPeer(t, Config{Handlers: h}, true)
	for name, cancel := range map[string]func(*memStream){
		"reset 1":         func(st *memStream) { st.CancelWrite(ResetAborted); st.CancelRead(ResetAborted) },
		"stop_sending 0":  func(st *memStream) { st.CancelRead(ResetNoError) },
		"browser reset 0": func(st *memStream) { st.CancelWrite(ResetNoError) },
	} {
		st := p.open()
		st.Write(request("echo", CodecJSON, "1"))
		<-entered
		cancel(st)
		if err := <-aborted; err == nil {
			t.Fatalf("%s: handler not aborted", name)
		}
		// Nothing more is written: the responder resets its send side.
		if buf, fin, reset := waitEnd(st); len(buf) != 0 || fin || reset == nil || *reset != ResetAborted {
			t.Fatalf("%s: after cancel %q fin=%v reset=%v", name, buf, fin, reset)
		}
	}
	// Call with a cancelled context.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	_, cli := callPair(t, callContract, Config{Handlers: h})
	go func() {
		_, err := cli.Call(ctx, "echo", []byte("1"))
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if err := <-aborted; err == nil {
		t.Fatal("handler not aborted")
	}
}

// waitEnd waits until the responder has ended its send side and returns
// what it had written and unread, and how it ended.
func waitEnd(st *memStream) (buf []byte, fin bool, reset *ResetCode) {
	p := st.in
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.fin && p.reset == nil {
		sig := p.sig
		p.mu.Unlock()
		<-sig
		p.mu.Lock()
	}
	return append([]byte(nil), p.buf...), p.fin, p.reset
}
