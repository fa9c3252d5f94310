package transportio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
)

// countHandler yields n elements "0", "1", … (n < 0: for ever), reporting
// each park at zero credit on parked and its end on done.
func countHandler(n int, parked chan<- int, done chan<- error) YieldsHandler {
	return func(ctx context.Context, _ CallRequest, y *Yielder) (err error) {
		y.parked = parked
		defer func() {
			if done != nil {
				done <- err
			}
		}()
		for i := 0; n < 0 || i < n; i++ {
			if err := y.Yield([]byte(strconv.Itoa(i))); err != nil {
				return err
			}
		}
		return nil
	}
}

func yieldsPeer(t *testing.T, fn YieldsHandler) *rawCallPeer {
	h := &Handlers{}
	h.Yields("count", fn)
	h.Returns("echo", func(_ context.Context, r CallRequest) ([]byte, error) { return r.Payload, nil })
	return newRawCallPeer(t, Config{Handlers: h}, true)
}

func checkElements(t *testing.T, fs []Frame, from int) {
	t.Helper()
	for i, f := range fs {
		if f.Type != FrameCallResponse || f.EventID != 0 || f.Codec != CodecJSON || string(f.Payload) != strconv.Itoa(from+i) {
			t.Fatalf("element %d: %+v", from+i, f)
		}
	}
}

// Checklist 57, 58, 59, 61: a yields request without FIN starts the
// responder; with no credit frame it sends exactly 32 CALL_RESPONSE frames
// (one per element) and waits, dropping nothing; CALL_CREDIT {"credit":16}
// allows exactly 16 more.
func TestYields57to59Credit(t *testing.T) {
	parked := make(chan int, 1)
	p := yieldsPeer(t, countHandler(-1, parked, nil))
	st := p.open()
	st.Write(request("count", CodecJSON, "{}")) // no FIN
	if n := <-parked; n != InitialCallCredit {
		t.Fatalf("parked after %d", n)
	}
	d := NewDecoder(st)
	checkElements(t, readN(t, d, 32), 0)
	if buf, fin, reset := peekIn(st); len(buf) != 0 || fin || reset != nil {
		t.Fatalf("beyond the window: %d bytes", len(buf))
	}
	credit := append(goldenBytes(goldenCreditHdr), `{"credit":16}`...)
	st.Write(credit)
	if n := <-parked; n != 48 {
		t.Fatalf("parked after %d", n)
	}
	checkElements(t, readN(t, d, 16), 32)
	st.CancelWrite(ResetAborted)
	st.CancelRead(ResetAborted)
}

// peekIn returns what the responder has written and not been read yet.
func peekIn(st *memStream) (buf []byte, fin bool, reset *ResetCode) {
	st.in.mu.Lock()
	defer st.in.mu.Unlock()
	return append([]byte(nil), st.in.buf...), st.in.fin, st.in.reset
}

// Checklist 60: credit of 0, −5, "16", missing, 1.5, non-JSON or in the
// bytes codec, and frames other than CALL_CREDIT, are ignored, not a
// protocol error.
func TestYields60BadCreditIgnored(t *testing.T) {
	parked := make(chan int, 1)
	p := yieldsPeer(t, countHandler(-1, parked, nil))
	st := p.open()
	st.Write(request("count", CodecJSON, "{}"))
	<-parked
	for _, c := range []string{`{"credit":0}`, `{"credit":-5}`, `{"credit":"16"}`, `{}`, `{"credit":1.5}`, `{"credit":1e1}`, `[16]`, `x`} {
		st.Write(creditFrame(c))
	}
	st.Write(AppendFrame(nil, Frame{Type: FrameCallCredit, Codec: CodecBytes, Payload: []byte(`{"credit":16}`)}))
	st.Write(AppendFrame(nil, Frame{Type: FrameEmit, Codec: CodecJSON, EventID: EventID("chat"), Payload: []byte(`1`)}))
	st.Write(creditFrame(`{"credit":1}`))
	if n := <-parked; n != 33 {
		t.Fatalf("parked after %d: a bad credit counted", n)
	}
	checkElements(t, readN(t, NewDecoder(st), 33), 0)
	if p.s.Err() != nil {
		t.Fatal(p.s.Err())
	}
	st.CancelWrite(ResetAborted)
}

// Checklist 61–63 through the client API: each element is one frame and
// arrives whole (sizes 1 B to 64 KiB), an empty sequence is zero frames then
// FIN, and a failure after N elements delivers the N, then the error.
func TestYields61to63Sequences(t *testing.T) {
	h := &Handlers{}
	h.Yields("count", func(_ context.Context, r CallRequest, y *Yielder) error {
		var n int
		fmt.Sscan(string(r.Payload), &n)
		for i := 0; i < n; i++ {
			if err := y.Yield([]byte(`"` + string(bytes.Repeat([]byte{'a' + byte(i%26)}, 1+i*613)) + `"`)); err != nil {
				return err
			}
		}
		if n == 3 {
			return &CallError{Code: "WT_DISK", Message: "failed after 3"}
		}
		return nil
	})
	p := newRawCallPeer(t, Config{Handlers: h}, true)
	// Raw bytes: empty → FIN with no frame; 3 then error.
	st := p.open()
	st.Write(request("count", CodecJSON, "0"))
	if fs, err := readAll(t, st); len(fs) != 0 || err != nil {
		t.Fatalf("empty: %+v %v", fs, err)
	}
	st.CloseWrite()
	st = p.open()
	st.Write(request("count", CodecJSON, "3"))
	fs, err := readAll(t, st)
	if err != nil || len(fs) != 4 || fs[2].Type != FrameCallResponse || callErrorOf(t, fs[3]).Code != "WT_DISK" {
		t.Fatalf("3+error: %d frames %v", len(fs), err)
	}
	st.CloseWrite()

	_, cli := callPair(t, callContract, Config{Handlers: h})
	for _, n := range []int{0, 3, 100} {
		rs, err := cli.CallStream(ctxT(t), "count", []byte(strconv.Itoa(n)))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for {
			el, err := rs.Next()
			if err == io.EOF {
				break
			}
			var ce *CallError
			if n == 3 && errors.As(err, &ce) && ce.Code == "WT_DISK" && got == 3 {
				break
			}
			if err != nil {
				t.Fatalf("n=%d after %d: %v", n, got, err)
			}
			if len(el) != 3+got*613 || el[1] != 'a'+byte(got%26) {
				t.Fatalf("n=%d element %d: %d bytes", n, got, len(el))
			}
			got++
		}
		if n != 3 && got != n {
			t.Fatalf("n=%d: got %d", n, got)
		}
		rs.Close()
	}
}

// The initiator grants credit in batches of 16 for consumed elements: after
// 16 Next calls the responder reads exactly the golden CALL_CREDIT bytes.
func TestYieldsInitiatorGrants16(t *testing.T) {
	p := newRawCallPeer(t, Config{}, true)
	type res struct {
		rs  *ResponseStream
		err error
	}
	rc := make(chan res, 1)
	go func() {
		rs, err := p.s.CallStream(context.Background(), "count", []byte("{}"))
		rc <- res{rs, err}
	}()
	in := p.accept()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	d := NewDecoder(in)
	if f, err := d.Next(); err != nil || f.Type != FrameCallRequest || f.EventID != EventID("count") {
		t.Fatalf("%+v %v", f, err)
	}
	for i := 0; i < 32; i++ {
		in.Write(AppendFrame(nil, Frame{Type: FrameCallResponse, Codec: CodecJSON, Payload: []byte(strconv.Itoa(i))}))
	}
	for i := 0; i < 15; i++ {
		r.rs.Next()
	}
	if buf, _, _ := peekIn(in); len(buf) != 0 {
		t.Fatalf("credit before 16 consumed: % x", buf)
	}
	r.rs.Next()
	want := append(goldenBytes(goldenCreditHdr), `{"credit":16}`...)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(in, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("% x %v", got, err)
	}
	in.CloseWrite()
	for i := 16; i < 32; i++ {
		if el, err := r.rs.Next(); err != nil || string(el) != strconv.Itoa(i) {
			t.Fatalf("%d: %q %v", i, el, err)
		}
	}
	if _, err := r.rs.Next(); err != io.EOF {
		t.Fatal(err)
	}
	// The initiator closed its send side after the end.
	if _, err := readAll(t, in); err != nil {
		t.Fatal(err)
	}
}

// Checklist 64: the initiator's FIN on a yields stream is cancellation: the
// responder stops producing (≤ 32 sent without credit) and closes.
func TestYields64InitiatorFIN(t *testing.T) {
	done := make(chan error, 1)
	parked := make(chan int, 1)
	p := yieldsPeer(t, countHandler(-1, parked, done))
	st := p.open()
	st.Write(request("count", CodecJSON, "{}"))
	<-parked
	st.CloseWrite()
	if err := <-done; !errors.Is(err, errFinished) {
		t.Fatalf("handler ended with %v", err)
	}
	fs, err := readAll(t, st)
	if err != nil || len(fs) != 32 {
		t.Fatalf("%d frames %v", len(fs), err)
	}
}

// Checklist 65: a reset mid-production stops the producer and its cleanup
// runs; a stream stalled at zero credit never blocks other calls.
func TestYields65ResetMidProduction(t *testing.T) {
	done := make(chan error, 2)
	parked := make(chan int, 2)
	p := yieldsPeer(t, countHandler(-1, parked, done))
	stalled := p.open()
	stalled.Write(request("count", CodecJSON, "{}"))
	<-parked
	// Another call, while one is stalled.
	st := p.open()
	st.Write(request("echo", CodecJSON, `"x"`))
	st.CloseWrite()
	if fs, err := readAll(t, st); err != nil || len(fs) != 1 || string(fs[0].Payload) != `"x"` {
		t.Fatalf("%+v %v", fs, err)
	}
	readN(t, NewDecoder(stalled), 5)
	stalled.CancelWrite(ResetAborted)
	stalled.CancelRead(ResetAborted)
	if err := <-done; err == nil {
		t.Fatal("producer not stopped")
	}
	if _, _, reset := waitEnd(stalled); reset == nil || *reset != ResetAborted {
		t.Fatal("responder did not reset")
	}
}

// Checklist 56: the session's end aborts every handler it serves (a parked
// producer included) and every pending call rejects with the session's
// error (WT_SESSION_CLOSED).
func TestCall56SessionEndAborts(t *testing.T) {
	done := make(chan error, 2)
	parked := make(chan int, 1)
	entered := make(chan struct{}, 1)
	h := &Handlers{}
	h.Yields("count", countHandler(-1, parked, done))
	h.Returns("echo", func(ctx context.Context, _ CallRequest) ([]byte, error) {
		entered <- struct{}{}
		<-ctx.Done()
		done <- ctx.Err()
		return nil, ctx.Err()
	})
	srv, cli := callPair(t, callContract, Config{Handlers: h})
	rs, err := cli.CallStream(ctxT(t), "count", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	<-parked
	errc := make(chan error, 1)
	go func() {
		_, err := cli.Call(context.Background(), "echo", []byte("1"))
		errc <- err
	}()
	<-entered
	srv.Close(CloseNoError, "bye")
	for i := 0; i < 2; i++ {
		if err := <-done; err == nil {
			t.Fatal("a handler outlived its session")
		}
	}
	if err := <-errc; !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("pending call: %v", err)
	}
	n := 0
	for {
		if _, err := rs.Next(); err != nil {
			if !errors.Is(err, ErrSessionClosed) {
				t.Fatalf("stream after %d: %v", n, err)
			}
			break
		}
		n++
	}
	if _, err := cli.Call(ctxT(t), "echo", []byte("1")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

// Registration and the local errors of the client API.
func TestCallAPI(t *testing.T) {
	srv, cli := callPair(t, callContract, Config{})
	if err := srv.HandleCall("nope", nil); !errors.Is(err, ErrUnknownEvent) {
		t.Fatal(err)
	}
	if err := srv.HandleCall("count", nil); !errors.Is(err, ErrWrongShape) {
		t.Fatal(err)
	}
	if err := srv.HandleStream("echo", nil); !errors.Is(err, ErrWrongShape) {
		t.Fatal(err)
	}
	if err := srv.HandleCall("echo", func(context.Context, CallRequest) ([]byte, error) { return []byte(`"s"`), nil }); err != nil {
		t.Fatal(err)
	}
	if res, err := cli.Call(ctxT(t), "echo", []byte("1")); err != nil || string(res) != `"s"` {
		t.Fatalf("%q %v", res, err)
	}
	if _, err := cli.Call(ctxT(t), "chat", []byte("1")); !errors.Is(err, ErrWrongShape) {
		t.Fatal(err)
	}
	if _, err := cli.CallStream(ctxT(t), "echo", []byte("1")); !errors.Is(err, ErrWrongShape) {
		t.Fatal(err)
	}
	if _, err := cli.Call(ctxT(t), "echo", nil); err == nil {
		t.Fatal("empty payload sent")
	}
	ws, _ := wsPair(t, &Listener{Session: Config{Contract: callContract}}, Config{Contract: callContract}, echo)
	if _, err := ws.Call(ctxT(t), "echo", []byte("1")); !errors.Is(err, ErrLaneUnavailable) {
		t.Fatal(err)
	}
}
