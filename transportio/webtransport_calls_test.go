package transportio

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/transport/tlscert"
)

// Calls over real WebTransport: HTTP/3 on QUIC over 127.0.0.1 UDP with a
// self-signed certificate pinned by the client, instead of the in-memory
// streams of memcall_test.go. Every frame, FIN, reset, STOP_SENDING and
// CALL_CREDIT below crosses quic-go and webtransport-go. Every wait is
// bounded by wtWait; nothing synchronises by sleeping.

// wtWait bounds every wait in this file.
const wtWait = 10 * time.Second

// recvWithin takes one value from ch or fails the test after wtWait.
func recvWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	tm := time.NewTimer(wtWait)
	defer tm.Stop()
	select {
	case v := <-ch:
		return v
	case <-tm.C:
		t.Fatalf("timed out after %v waiting for %s", wtWait, what)
		panic("unreachable")
	}
}

// doneWithin runs fn in a goroutine and reports whether it returned
// within wtWait.
func doneWithin(fn func()) bool {
	c := make(chan struct{})
	go func() {
		defer close(c)
		fn()
	}()
	tm := time.NewTimer(wtWait)
	defer tm.Stop()
	select {
	case <-c:
		return true
	case <-tm.C:
		return false
	}
}

// wtCallPair serves callContract with h on a loopback WebTransport
// listener and dials it; it returns both sessions after both handshakes.
// At cleanup the client is closed and joined, the server session's handler
// is joined, then the listener and its socket are closed.
func wtCallPair(t *testing.T, h *Handlers) (srv, cli *Session) {
	t.Helper()
	cert, err := tlscert.LoadOrCreateDev(t.TempDir(), []string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pin, err := tlscert.ParsePin(tlscert.Pin(cert))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	wts := NewWebTransportServer(&tls.Config{Certificates: []tls.Certificate{cert}}, mux, nil)
	l := &Listener{Session: Config{Contract: callContract, Handlers: h}}
	srvc := make(chan *Session, 1)
	exited := make(chan struct{}, 1)
	inner := l.WebTransportHandler(wts, func(s *Session) {
		srvc <- s
		<-s.Done() // the test owns the session until it ends
	})
	mux.Handle("/tio", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			select {
			case exited <- struct{}{}:
			default:
			}
		}()
		inner.ServeHTTP(w, r)
	}))
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- wts.Serve(udp) }()
	t.Cleanup(func() {
		// webtransport.Server.Close waits for every handler to return.
		if !doneWithin(func() { _ = wts.Close() }) {
			t.Error("the WebTransport server did not close: a handler is stuck")
		}
		_ = udp.Close()
		if !doneWithin(func() { <-served }) {
			t.Error("the WebTransport server did not stop")
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), wtWait)
	defer cancel()
	conf := &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: tlscert.VerifyPin(pin)}
	cli, err = DialWebTransport(ctx, "https://"+udp.LocalAddr().String()+"/tio", nil, conf, Config{Contract: callContract})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.Close(CloseNoError, "")
		if !doneWithin(cli.Wait) {
			t.Error("the client session's goroutines did not end")
		}
		// The server session ends with the client's close; its handler
		// then closes and joins it.
		if !doneWithin(func() { <-exited }) {
			t.Error("the server session's handler did not return")
		}
	})
	srv = recvWithin(t, srvc, "the server session")
	if srv.Kind() != KindWebTransport || cli.Kind() != KindWebTransport {
		t.Fatalf("kinds %v %v", srv.Kind(), cli.Kind())
	}
	if err := cli.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitHandshake(ctx); err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// (1) A returns call gets its exact result bytes, JSON and bytes codecs,
// small and large (a 3 MiB result spans many QUIC packets and flow-control
// updates); a handler error comes back as a *CallError with its code, a
// plain error as WT_HANDLER_FAILED; the session stays up throughout.
func TestWebTransportCallReturns(t *testing.T) {
	h := &Handlers{}
	h.Returns("echo", func(_ context.Context, r CallRequest) ([]byte, error) {
		switch string(r.Payload) {
		case `"invalid"`:
			return nil, &CallError{Code: "WT_VALIDATION_FAILED", Message: "field 'body' must be a string"}
		case `"plain"`:
			return nil, errors.New("disk full")
		}
		return r.Payload, nil
	})
	h.Returns("blobs", func(_ context.Context, r CallRequest) ([]byte, error) {
		return append([]byte{0}, r.Payload...), nil
	})
	srv, cli := wtCallPair(t, h)
	ctx := ctxT(t)

	res, err := cli.Call(ctx, "echo", []byte(`{"a":[1,"☃"]}`))
	if err != nil || string(res) != `{"a":[1,"☃"]}` {
		t.Fatalf("echo: %q %v", res, err)
	}
	res, err = cli.Call(ctx, "blobs", []byte{0xff, 0x00, 0x01})
	if err != nil || !bytes.Equal(res, []byte{0x00, 0xff, 0x00, 0x01}) {
		t.Fatalf("blobs: % x %v", res, err)
	}
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	res, err = cli.Call(ctx, "blobs", big)
	if err != nil || len(res) != len(big)+1 || res[0] != 0 || !bytes.Equal(res[1:], big) {
		t.Fatalf("big blobs: %d bytes %v", len(res), err)
	}

	var ce *CallError
	_, err = cli.Call(ctx, "echo", []byte(`"invalid"`))
	if !errors.As(err, &ce) || ce.Code != "WT_VALIDATION_FAILED" || ce.Message != "field 'body' must be a string" {
		t.Fatalf("handler's CallError: %v", err)
	}
	_, err = cli.Call(ctx, "echo", []byte(`"plain"`))
	if !errors.As(err, &ce) || ce.Code != "WT_HANDLER_FAILED" || ce.Message != "disk full" {
		t.Fatalf("plain handler error: %v", err)
	}
	// Still up, and still serving, after the errors.
	if res, err := cli.Call(ctx, "echo", []byte(`"again"`)); err != nil || string(res) != `"again"` {
		t.Fatalf("after errors: %q %v", res, err)
	}
	if cli.Err() != nil || srv.Err() != nil {
		t.Fatalf("session ended: %v / %v", cli.Err(), srv.Err())
	}
}

// (2) A yields call of 100 elements: more than the 32 initial credits, so
// the producer can only finish if the consumer's CALL_CREDIT refills of 16
// cross QUIC. All 100 arrive in order, then io.EOF (and io.EOF again).
func TestWebTransportYields100(t *testing.T) {
	done := make(chan error, 1)
	h := &Handlers{}
	h.Yields("count", func(_ context.Context, r CallRequest, y *Yielder) error {
		n, err := strconv.Atoi(string(r.Payload))
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if err := y.Yield([]byte(strconv.Itoa(i))); err != nil {
				done <- err
				return err
			}
		}
		done <- nil
		return nil
	})
	srv, cli := wtCallPair(t, h)
	rs, err := cli.CallStream(ctxT(t), "count", []byte("100"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for i := 0; i < 100; i++ {
		el, err := rs.Next()
		if err != nil || string(el) != strconv.Itoa(i) {
			t.Fatalf("element %d: %q %v", i, el, err)
		}
	}
	if _, err := rs.Next(); err != io.EOF {
		t.Fatalf("after 100: %v, want io.EOF", err)
	}
	if _, err := rs.Next(); err != io.EOF {
		t.Fatalf("after the end: %v, want io.EOF again", err)
	}
	if err := recvWithin(t, done, "the producer's end"); err != nil {
		t.Fatalf("producer: %v", err)
	}
	if cli.Err() != nil || srv.Err() != nil {
		t.Fatalf("session ended: %v / %v", cli.Err(), srv.Err())
	}
}

// (3) A slow consumer over QUIC: the producer may never be more than the
// credit it was granted ahead, that is produced ≤ 32 + 16·⌊consumed/16⌋ ≤
// consumed + 32. Checked after every element taken, and exactly at each
// point where the producer parks at zero credit (the Yielder's park hook,
// which fires while the next Yield is blocked, so every earlier Yield has
// returned): having read 10 the producer stops at exactly 32, not 42 (no
// refill before 16 are consumed); at 16 consumed it stops at 48, at 32 at
// 64. Closing the stream then aborts the parked producer.
func TestWebTransportYieldsSlowConsumer(t *testing.T) {
	var produced atomic.Int64 // Yield calls that returned nil
	parked := make(chan int, 1)
	done := make(chan error, 1)
	h := &Handlers{}
	h.Yields("count", func(_ context.Context, _ CallRequest, y *Yielder) error {
		y.parked = parked
		for i := 0; ; i++ {
			if err := y.Yield([]byte(strconv.Itoa(i))); err != nil {
				done <- err
				return err
			}
			produced.Add(1)
		}
	})
	_, cli := wtCallPair(t, h)
	rs, err := cli.CallStream(ctxT(t), "count", []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	consumed := 0
	read := func(upTo int) {
		t.Helper()
		for ; consumed < upTo; consumed++ {
			el, err := rs.Next()
			if err != nil || string(el) != strconv.Itoa(consumed) {
				t.Fatalf("element %d: %q %v", consumed, el, err)
			}
			// Next has sent any credit for this element before returning.
			if p := produced.Load(); p > int64(consumed+1+InitialCallCredit) {
				t.Fatalf("produced %d with %d consumed: more than the window", p, consumed+1)
			}
		}
	}
	stall := func(want int) {
		t.Helper()
		if n := recvWithin(t, parked, "the producer to park at zero credit"); n != want {
			t.Fatalf("parked after %d sent, want %d (consumed %d)", n, want, consumed)
		}
		if p := produced.Load(); p != int64(want) {
			t.Fatalf("parked with %d Yield calls returned, want %d", p, want)
		}
		if want > consumed+InitialCallCredit {
			t.Fatalf("stalled at %d with %d consumed", want, consumed)
		}
	}

	read(10)
	stall(InitialCallCredit) // 32, though consumed + 32 = 42
	read(CallCreditBatch)    // 16 consumed: one CALL_CREDIT {"credit":16}
	stall(InitialCallCredit + CallCreditBatch)
	read(2 * CallCreditBatch)
	stall(InitialCallCredit + 2*CallCreditBatch)
	select {
	case n := <-parked:
		t.Fatalf("parked again at %d without credit", n)
	default:
	}

	// The consumer gives up: the parked producer is aborted.
	rs.Close()
	if err := recvWithin(t, done, "the producer's abort"); err == nil {
		t.Fatal("the producer outlived the cancelled call")
	}
	if p := produced.Load(); p != int64(InitialCallCredit+2*CallCreditBatch) {
		t.Fatalf("produced %d after the cancel", p)
	}
	if cli.Err() != nil {
		t.Fatal(cli.Err())
	}
}

// (4) Closing the session, from either side, aborts the calls in flight on
// both sides: on the responder the returns handler's context ends and the
// parked yields producer's Yield fails; on the initiator the pending Call
// and the ResponseStream reject with the session's error
// (ErrSessionClosed), the stream after at most the 32 elements it was
// granted.
func TestWebTransportSessionCloseAbortsCalls(t *testing.T) {
	for _, closer := range []string{"client", "server"} {
		t.Run(closer+" closes", func(t *testing.T) {
			parked := make(chan int, 1)
			entered := make(chan struct{}, 1)
			yieldEnd := make(chan error, 1)
			returnEnd := make(chan error, 1)
			h := &Handlers{}
			h.Yields("count", func(_ context.Context, _ CallRequest, y *Yielder) error {
				y.parked = parked
				for i := 0; ; i++ {
					if err := y.Yield([]byte(strconv.Itoa(i))); err != nil {
						yieldEnd <- err
						return err
					}
				}
			})
			h.Returns("echo", func(ctx context.Context, _ CallRequest) ([]byte, error) {
				entered <- struct{}{}
				<-ctx.Done() // bounded by the session's close below
				returnEnd <- context.Cause(ctx)
				return nil, ctx.Err()
			})
			srv, cli := wtCallPair(t, h)
			ctx := ctxT(t)

			rs, err := cli.CallStream(ctx, "count", []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			if n := recvWithin(t, parked, "the producer to park"); n != InitialCallCredit {
				t.Fatalf("parked after %d", n)
			}
			callErr := make(chan error, 1)
			go func() {
				_, err := cli.Call(ctx, "echo", []byte(`"wait"`))
				callErr <- err
			}()
			recvWithin(t, entered, "the returns handler to start")
			if n := srv.ActiveCalls(); n != 2 {
				t.Fatalf("server serving %d calls, want 2", n)
			}

			closing, other := cli, srv
			if closer == "server" {
				closing, other = srv, cli
			}
			closing.Close(CloseNoError, "bye")

			// The responder: both handlers aborted.
			if err := recvWithin(t, returnEnd, "the returns handler's abort"); err == nil {
				t.Fatal("returns handler: context ended with no cause")
			}
			if err := recvWithin(t, yieldEnd, "the yields producer's abort"); err == nil {
				t.Fatal("yields producer: Yield did not fail")
			}
			// The initiator: the pending call and the stream reject with
			// the session's error.
			if err := recvWithin(t, callErr, "the pending Call"); !errors.Is(err, ErrSessionClosed) {
				t.Fatalf("pending Call: %v, want ErrSessionClosed", err)
			}
			n := 0
			for {
				_, err := rs.Next()
				if err == nil {
					if n++; n > InitialCallCredit {
						t.Fatalf("more than %d elements without credit", InitialCallCredit)
					}
					continue
				}
				if !errors.Is(err, ErrSessionClosed) {
					t.Fatalf("stream after %d elements: %v, want ErrSessionClosed", n, err)
				}
				break
			}
			// Both sessions end.
			for _, s := range []*Session{closing, other} {
				recvWithin(t, s.Done(), "the session's end")
				if !errors.Is(s.Err(), ErrSessionClosed) {
					t.Fatalf("session error %v", s.Err())
				}
			}
			var se *SessionError
			if !errors.As(closing.Err(), &se) || se.Remote || se.Code != CloseNoError {
				t.Fatalf("closing side: %v", closing.Err())
			}
			// §10.2: the close code and reason reach the other side.
			if !errors.As(other.Err(), &se) || !se.Remote || se.Lost || se.Code != CloseNoError || se.Reason != "bye" {
				t.Fatalf("%s closed: the other side sees %v, want the remote close WT_NO_ERROR \"bye\"", closer, other.Err())
			}
			if n := srv.ActiveCalls(); n != 0 {
				t.Fatalf("server still tracks %d calls", n)
			}
			if _, err := cli.Call(ctx, "echo", []byte(`"x"`)); !errors.Is(err, ErrSessionClosed) {
				t.Fatalf("call after close: %v", err)
			}
		})
	}
}
