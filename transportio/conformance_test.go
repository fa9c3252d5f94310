package transportio

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/internal/wstest"
)

// rawPeer is a hand-driven client on the WebSocket mapping.
type rawPeer struct {
	t *testing.T
	c *websocket.Conn
}

func newRawPeer(t *testing.T, l *Listener, serve func(*Session)) *rawPeer {
	t.Helper()
	if l.Session.Contract == nil {
		l.Session.Contract = testContract
	}
	if serve == nil {
		serve = echo
	}
	srv := httptest.NewServer(l.WebSocketHandler(serve))
	t.Cleanup(srv.Close)
	return &rawPeer{t: t, c: rawWS(t, srv, "")}
}

func (p *rawPeer) send(b []byte) {
	p.t.Helper()
	if err := p.c.Write(ctxT(p.t), websocket.MessageBinary, b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *rawPeer) handshake() { p.send(AppendHandshake(nil, Handshake{Events: testContract.Table()})) }

// closed reads until the socket closes and returns the close.
func (p *rawPeer) closed() websocket.CloseError {
	p.t.Helper()
	for {
		_, _, err := p.c.Read(ctxT(p.t))
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) {
				p.t.Fatalf("no close frame: %v", err)
			}
			return ce
		}
	}
}

// frames reads the server's stream until n frames arrived.
func (p *rawPeer) frames(n int) []Frame {
	p.t.Helper()
	pr, pw := io.Pipe()
	go func() {
		for {
			_, b, err := p.c.Read(ctxT(p.t))
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(b); err != nil {
				return
			}
		}
	}()
	d := NewDecoder(pr)
	var fs []Frame
	for len(fs) < n {
		f, err := d.Next()
		if err != nil {
			p.t.Fatal(err)
		}
		fs = append(fs, f)
	}
	pr.Close()
	return fs
}

func emitFrame(name string, codec Codec, payload string) []byte {
	return AppendFrame(nil, Frame{Type: FrameEmit, Codec: codec, EventID: EventID(name), Payload: []byte(payload)})
}

// Checklist 11: the server's frame 0 is its handshake, sent without waiting.
func TestServerFrameZero(t *testing.T) {
	p := newRawPeer(t, &Listener{}, nil)
	f := p.frames(1)[0]
	if f.Type != FrameHandshake || f.Codec != CodecJSON || f.EventID != 0 {
		t.Fatalf("frame 0 = %+v", f)
	}
	h, err := ParseHandshake(f.Payload)
	if err != nil || h.V != 0 || len(h.Events) != 4 || h.Events[0].Name != "ahp" {
		t.Fatalf("handshake %s: %v", f.Payload, err)
	}
}

// Checklist 12.
func TestHandshakeDeadline(t *testing.T) {
	p := newRawPeer(t, &Listener{Session: Config{HandshakeTimeout: 100 * time.Millisecond}}, nil)
	p.send(unhex(t, "00 00 00 83 01")) // a partial frame is no handshake
	ce := p.closed()
	if int(ce.Code) != 4002 || ce.Reason != "no handshake from the peer within 100 ms" {
		t.Fatalf("close %v", ce)
	}
}

// Checklist 13: a handshake in time cancels the deadline.
func TestHandshakeCancelsDeadline(t *testing.T) {
	s, _ := wsPair(t, &Listener{Session: Config{HandshakeTimeout: 100 * time.Millisecond}}, Config{HandshakeTimeout: 100 * time.Millisecond}, echo)
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
		t.Fatalf("closed after the handshake: %v", s.Err())
	case <-time.After(300 * time.Millisecond):
	}
	if err := s.Emit("ahp", []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Receive(ctxT(t)); err != nil || string(m.Payload) != "1" {
		t.Fatalf("echo %v %v", m, err)
	}
}

// Checklist 14–15, 20–23, 37–38, 40–41, 79, 90: violations on the emit
// stream close the session (never reset the stream) with the code on the
// WebSocket mapping and a reason naming the problem.
func TestEmitStreamViolations(t *testing.T) {
	hs := func(p string) []byte {
		return AppendFrame(nil, Frame{Type: FrameHandshake, Codec: CodecJSON, Payload: []byte(p)})
	}
	valid := AppendHandshake(nil, Handshake{Events: testContract.Table()})
	ctl := func(typ FrameType, codec Codec, id uint32, p string) []byte {
		return AppendFrame(nil, Frame{Type: typ, Codec: codec, EventID: id, Payload: []byte(p)})
	}
	cases := []struct {
		name   string
		send   [][]byte
		text   bool
		ws     int
		reason string
	}{
		{"v1", [][]byte{hs(`{"v":1,"feat":[],"events":[]}`)}, false, 4000, "peer speaks protocol v1 and this is v0"},
		{"lane", [][]byte{hs(`{"v":0,"feat":[],"events":[["cursor",1185214141,"reliable"]]}`)}, false, 4001, "event 'cursor' is 'unreliable' here and 'reliable' at the peer"},
		{"malformed", [][]byte{hs(`{"v":0}`)}, false, 4004, "malformed handshake"},
		{"first frame EMIT", [][]byte{emitFrame("ahp", CodecJSON, "1")}, false, 4004, "not HANDSHAKE"},
		{"second HANDSHAKE", [][]byte{valid, valid}, false, 4004, "a second HANDSHAKE"},
		{"HANDSHAKE codec bytes", [][]byte{ctl(FrameHandshake, CodecBytes, 0, `{"v":0,"feat":[],"events":[]}`)}, false, 4004, "codec JSON"},
		{"client JOIN", [][]byte{valid, ctl(FrameJoin, CodecJSON, 0, `{"room":"lobby"}`)}, false, 4004, "rooms are server-authoritative"},
		{"client LEAVE", [][]byte{valid, ctl(FrameLeave, CodecJSON, 0, `{"room":"lobby"}`)}, false, 4004, "rooms are server-authoritative"},
		{"CALL_REQUEST on emit", [][]byte{valid, ctl(FrameCallRequest, CodecJSON, EventID("ahp"), `1`)}, false, 4004, "CALL_REQUEST frame on the emit stream"},
		{"CALL_CREDIT on emit", [][]byte{valid, ctl(FrameCallCredit, CodecJSON, 0, `{"credit":16}`)}, false, 4004, "CALL_CREDIT frame on the emit stream"},
		{"codec mismatch", [][]byte{valid, emitFrame("blob", CodecJSON, `1`)}, false, 4004, "event 'blob' declares bytes for its payload and the frame carries JSON"},
		{"invalid JSON", [][]byte{valid, emitFrame("ahp", CodecJSON, `{`)}, false, 4004, "not valid JSON"},
		{"invalid UTF-8", [][]byte{valid, emitFrame("ahp", CodecJSON, "\"\xff\"")}, false, 4004, "not valid JSON"},
		{"oversized EMIT", [][]byte{valid, header(1048585, 2, 1, 0, EventID("ahp"))}, false, 4004, "WT_PAYLOAD_TOO_LARGE"},
		{"reserved type", [][]byte{valid, header(9, 0x0a, 1, 0, 0), {0}}, false, 4004, "reserved"},
		{"DATAGRAM header codec", [][]byte{valid, ctl(FrameDatagram, CodecBytes, 0, goldenDatagram)}, false, 4004, "DATAGRAM frame header"},
		{"DATAGRAM header id", [][]byte{valid, ctl(FrameDatagram, CodecJSON, 5, goldenDatagram)}, false, 4004, "DATAGRAM frame header"},
		{"text message", nil, true, 4004, "a text message on the emit lane"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newRawPeer(t, &Listener{}, nil)
			for _, b := range c.send {
				p.send(b)
			}
			if c.text {
				_ = p.c.Write(ctxT(t), websocket.MessageText, []byte("{}"))
			}
			ce := p.closed()
			if int(ce.Code) != c.ws || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("close %d %q, want %d containing %q", ce.Code, ce.Reason, c.ws, c.reason)
			}
			// The close code names the error; a reason that repeats it
			// read "WT_PROTOCOL_ERROR: WT_PROTOCOL_ERROR: ..." once worded.
			if strings.HasPrefix(ce.Reason, "WT_PROTOCOL_ERROR") {
				t.Fatalf("close reason %q repeats the code", ce.Reason)
			}
		})
	}
}

// Checklist 36, 80, 81: unknown events are dropped and counted; frames
// split or merged across messages decode as one stream; an empty message
// carries no bytes.
func TestEmitStreamTolerance(t *testing.T) {
	got := make(chan Message, 4)
	var srvSession *Session
	ready := make(chan struct{})
	p := newRawPeer(t, &Listener{}, func(s *Session) {
		srvSession = s
		close(ready)
		for {
			m, err := s.Receive(context.Background())
			if err != nil {
				return
			}
			got <- m
		}
	})
	b := AppendHandshake(nil, Handshake{Events: testContract.Table()})
	b = append(b, AppendFrame(nil, Frame{Type: FrameEmit, Codec: CodecJSON, EventID: 12345, Payload: []byte("1")})...)
	b = append(b, emitFrame("ahp", CodecJSON, `"one"`)...)
	b = append(b, emitFrame("blob", CodecBytes, "\x00\xff")...)
	p.send(b[:5])
	p.send(nil)
	p.send(b[5:40])
	p.send(b[40:])
	if m := <-got; m.Event != "ahp" || string(m.Payload) != `"one"` {
		t.Fatalf("got %+v", m)
	}
	if m := <-got; m.Event != "blob" || string(m.Payload) != "\x00\xff" || m.Codec != CodecBytes {
		t.Fatalf("got %+v", m)
	}
	<-ready
	if st := srvSession.Stats(); st.UnknownDropped != 1 || st.EmitsReceived != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// Checklist 3–4: a reliable-only mapping refuses a contract with an
// undeclared unreliable event before frame 0, and accepts `newest`.
func TestReliabilityRefused(t *testing.T) {
	bad := MustContract(Event{Name: "ahp"}, Event{Name: "pos", Lane: LaneUnreliable})
	p := newRawPeer(t, &Listener{Session: Config{Contract: bad}}, nil)
	_, _, err := p.c.Read(ctxT(t))
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4006 || ce.Reason != "undeclared unreliable event on a fallback transport" {
		t.Fatalf("first read: %v (want close 4006 before frame 0)", err)
	}
}

// Checklist 5, 6, 8, 9: the door. A refusal completes the upgrade and
// closes 4007 before frame 0; a failing backend closes 1000 "authorize
// failed"; authorize sees path, query and peer address.
func TestAuthorize(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		ws     int
		reason string
	}{
		{"null", Refused, 4007, "refused"},
		{"reason", Refuse("expired"), 4007, "expired"},
		{"backend", errors.New("ldap down"), 1000, "authorize failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var seen *http.Request
			l := &Listener{Authorize: func(r *http.Request) error { seen = r; return c.err }}
			p := newRawPeer(t, l, func(*Session) { t.Error("refused peer served") })
			_, _, err := p.c.Read(ctxT(t))
			var ce websocket.CloseError
			if !errors.As(err, &ce) || int(ce.Code) != c.ws || ce.Reason != c.reason {
				t.Fatalf("first read: %v, want close %d %q before frame 0", err, c.ws, c.reason)
			}
			if seen == nil || seen.URL.Path != "/transport-io" || seen.RemoteAddr == "" {
				t.Fatalf("authorize saw %+v", seen)
			}
		})
	}
}

// Checklist 82–83: keepalive after the interval with nothing sent; idle
// close after the deadline with nothing received. The side whose deadline
// passed ends its session as lost (the path went silent): WT_IDLE_TIMEOUT,
// Lost, not remote.
func TestKeepaliveAndIdle(t *testing.T) {
	l := &Listener{WebSocket: WebSocketOptions{Keepalive: 40 * time.Millisecond, Idle: 300 * time.Millisecond}}
	ended := make(chan error, 1)
	p := newRawPeer(t, l, func(s *Session) {
		<-s.Done()
		ended <- s.Err()
	})
	// Before the handshake: the host's idle time runs from its receipt of
	// our handshake, which is after this (taken after it, the close could
	// come a few ms short of 300 ms on our clock).
	start := time.Now()
	p.handshake()
	empties := 0
	for {
		_, b, err := p.c.Read(ctxT(t))
		if err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4005 || ce.Reason != "no message from the peer for 300 ms" {
				t.Fatalf("close %v", err)
			}
			break
		}
		if len(b) == 0 {
			empties++
		}
	}
	if empties < 2 {
		t.Errorf("%d keepalives in %v", empties, time.Since(start))
	}
	if time.Since(start) < 300*time.Millisecond {
		t.Errorf("idle close after %v", time.Since(start))
	}
	var se *SessionError
	if err := <-ended; !errors.As(err, &se) || se.Code != CloseIdleTimeout || !se.Lost || se.Remote ||
		err.Error() != "transportio: connection lost: no message from the peer for 300 ms" {
		t.Errorf("the host's session ended with %#v (%v), want WT_IDLE_TIMEOUT, lost", se, err)
	}
}

// Checklist 86–87: the reason is cut to 123 bytes on a character boundary
// and the closing side is closed at once.
func TestCloseReasonCut(t *testing.T) {
	p := newRawPeer(t, &Listener{}, func(s *Session) {
		s.Close(CloseProtocolError, strings.Repeat("é", 300))
		if s.Err() == nil {
			t.Error("not closed at once")
		}
	})
	p.handshake()
	ce := p.closed()
	if ce.Code != 4004 || ce.Reason != strings.Repeat("é", 61) {
		t.Fatalf("close %d %d bytes", ce.Code, len(ce.Reason))
	}
}

// Checklist 93: a lost connection ends the session as WT_NO_ERROR, lost.
func TestLostConnection(t *testing.T) {
	errc := make(chan error, 1)
	p := newRawPeer(t, &Listener{}, func(s *Session) {
		<-s.Done()
		errc <- s.Err()
	})
	p.handshake()
	p.frames(1)
	_ = p.c.CloseNow()
	var se *SessionError
	if err := <-errc; !errors.As(err, &se) || !se.Lost || se.Code != CloseNoError {
		t.Fatalf("got %v", err)
	}
}

// Checklist 94: close is idempotent; the first code wins.
func TestCloseIdempotent(t *testing.T) {
	s, _ := wsPair(t, &Listener{}, Config{}, echo)
	s.Close(ClosePeerTooSlow, "first")
	s.Close(CloseProtocolError, "second")
	var se *SessionError
	if !errors.As(s.Err(), &se) || se.Code != ClosePeerTooSlow || se.Reason != "first" {
		t.Fatalf("%v", s.Err())
	}
	if err := s.Emit("ahp", []byte("1")); !errors.Is(err, ErrSessionClosed) {
		t.Fatalf("emit after close: %v", err)
	}
}

// stalledPair is a session over net.Pipe whose peer never reads.
func stalledPair(t *testing.T, cfg Config) (*Session, net.Conn) {
	a, b := net.Pipe()
	if cfg.Contract == nil {
		cfg.Contract = testContract
	}
	s := Start(NewStreamCarrier(a, a, "pipe"), cfg)
	t.Cleanup(func() {
		s.Close(CloseNoError, "")
		b.Close()
		s.Wait()
	})
	return s, b
}

// Checklist 45: 256 frames pending (the handshake's write not complete
// counts) and the next emit closes the session as WT_PEER_TOO_SLOW; the
// lane never drops.
func TestEmitBound(t *testing.T) {
	s, _ := stalledPair(t, Config{})
	ok := 0
	for i := 0; i < 300; i++ {
		if err := s.Emit("ahp", []byte("1")); err != nil {
			var se *SessionError
			if !errors.As(err, &se) || se.Code != ClosePeerTooSlow {
				t.Fatalf("emit %d: %v", i, err)
			}
			break
		}
		ok++
	}
	if ok != MaxEmitQueue-1 {
		t.Fatalf("%d emits accepted behind the pending handshake, want %d", ok, MaxEmitQueue-1)
	}
}

// The sidecar's transport queue: EmitWait blocks at the mark, never closes.
func TestEmitWaitMark(t *testing.T) {
	s, _ := stalledPair(t, Config{})
	for i := 0; i < 31; i++ {
		if err := s.EmitWait(ctxT(t), "ahp", []byte("1"), 32); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.EmitWait(ctx, "ahp", []byte("1"), 32); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("33rd pending frame: %v", err)
	}
	if s.Err() != nil || s.EmitQueueLen() != 32 {
		t.Fatalf("err %v queue %d", s.Err(), s.EmitQueueLen())
	}
}

// EmitWaitQueue's bound in bytes: it waits while the pending frames hold
// that many bytes (the handshake's, in flight, included), never closes,
// and lets one frame larger than the bound go once the lane has drained.
func TestEmitWaitQueueBytes(t *testing.T) {
	s, peer := stalledPair(t, Config{})
	pending := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.pendingBytes
	}
	hs := pending() // the handshake, stalled in its write
	p := make([]byte, 600)
	frame := len(AppendFrame(nil, Frame{Type: FrameEmit, Codec: CodecJSON, EventID: 1, Payload: p}))
	bound := hs + frame + 1 // room for one frame behind the handshake, not two
	for i := 0; i < 2; i++ {
		if err := s.EmitWaitQueue(ctxT(t), "ahp", p, 32, bound); err != nil {
			t.Fatal(err)
		}
	}
	if got := pending(); got != hs+2*frame {
		t.Fatalf("%d bytes pending, want %d", got, hs+2*frame)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.EmitWaitQueue(ctx, "ahp", p, 32, bound); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a frame past the bytes bound: %v", err)
	}
	if s.Err() != nil || s.EmitQueueLen() != 3 {
		t.Fatalf("err %v queue %d", s.Err(), s.EmitQueueLen())
	}
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	big := make([]byte, 4*bound)
	for i := 0; i < 2; i++ { // each alone past the bound: the lane drains between
		if err := s.EmitWaitQueue(ctxT(t), "ahp", big, 32, bound); err != nil {
			t.Fatalf("a frame larger than the bound: %v", err)
		}
	}
}

// stdio: a slow reader blocks the writer and is never disconnected.
func TestStdioBlocksNeverDisconnects(t *testing.T) {
	s, peer := stalledPair(t, Config{BlockOnFull: true})
	done := make(chan error, 1)
	go func() {
		for i := 0; i < MaxEmitQueue+10; i++ {
			if err := s.Emit("ahp", []byte("1")); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	d := NewDecoder(peer)
	for i := 0; i < MaxEmitQueue+11; i++ { // the handshake, then every emit
		if _, err := d.Next(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil || s.Err() != nil {
		t.Fatalf("%v %v", err, s.Err())
	}
}

// stdio end to end, both roles, and a close seen by the peer.
func TestStdioPair(t *testing.T) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	srv := Start(NewStreamCarrier(r1, w2, "client"), Config{Contract: testContract, BlockOnFull: true})
	cli := Start(NewStreamCarrier(r2, w1, "server"), Config{Contract: testContract, Role: RoleClient, BlockOnFull: true})
	defer func() { srv.Wait(); cli.Wait() }()
	if err := cli.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := cli.Emit("ahp", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if m, err := srv.Receive(ctxT(t)); err != nil || string(m.Payload) != `{"a":1}` {
		t.Fatalf("%v %v", m, err)
	}
	if err := cli.SendDatagram("cursor", []byte("1")); !errors.Is(err, ErrLaneUnavailable) {
		t.Fatalf("datagram on stdio: %v", err)
	}
	srv.Close(CloseNoError, "bye")
	<-cli.Done()
	var se *SessionError
	if !errors.As(cli.Err(), &se) || !se.Remote || se.Code != CloseNoError {
		t.Fatalf("client saw %v", cli.Err())
	}
}

// Checklist 26, 89, 90: unreliable events travel as DATAGRAM frames on the
// WebSocket mapping and pass the sequence gate.
func TestDatagramFramesOverWebSocket(t *testing.T) {
	got := make(chan Message, 4)
	s, _ := wsPair(t, &Listener{}, Config{}, func(s *Session) {
		for {
			m, err := s.ReceiveDatagram(context.Background())
			if err != nil {
				return
			}
			got <- m
		}
	})
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.SendDatagram("cursor", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	m := <-got
	if m.Event != "cursor" || m.Origin != DefaultClientOrigin || m.Sequence != 1 || string(m.Payload) != `{"x":1}` {
		t.Fatalf("%+v", m)
	}
	if err := s.SendDatagram("cursor", make([]byte, 1012)); !errors.Is(err, ErrDatagramTooLarge) {
		t.Fatalf("1012-byte datagram: %v", err)
	}
	if err := s.SendDatagram("ahp", []byte("1")); !errors.Is(err, ErrWrongShape) {
		t.Fatalf("reliable event as datagram: %v", err)
	}
}

// Checklist 91: unreliable frames wait in the ring and move only below 32
// pending frames: a stalled lane plus 512 datagrams never closes as
// WT_PEER_TOO_SLOW and counts overflow.
func TestDatagramRingOnStalledLane(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	s := Start(&fakeWS{NewStreamCarrier(a, a, "pipe")}, Config{Contract: testContract, DatagramTTL: time.Hour})
	defer s.Wait()
	defer s.Close(CloseNoError, "")
	for i := 0; i < 512; i++ {
		if err := s.SendDatagram("cursor", []byte("1")); err != nil {
			t.Fatal(err)
		}
	}
	// The writer moves at most 31 behind the pending handshake; the rest
	// wait in the ring, where the burst overflows.
	if err := s.Emit("ahp", []byte("1")); err != nil || s.Err() != nil {
		t.Fatalf("%v %v", err, s.Err())
	}
	if st := s.Stats(); st.OverflowDropped == 0 || s.EmitQueueLen() > DatagramLaneMark+1 {
		t.Fatalf("stats %+v queue %d", st, s.EmitQueueLen())
	}
}

// fakeWS presents a stream carrier as the WebSocket mapping.
type fakeWS struct{ Carrier }

func (fakeWS) Kind() Kind { return KindWebSocket }

// With PayloadsChecked (the AHP layer validates every message), an EMIT
// whose JSON payload is not valid JSON reaches the consumer as it is,
// and one that is not UTF-8 still closes the session.
func TestPayloadsChecked(t *testing.T) {
	got := make(chan Message, 2)
	p := newRawPeer(t, &Listener{Session: Config{PayloadsChecked: true}}, func(s *Session) {
		for {
			m, err := s.Receive(context.Background())
			if err != nil {
				return
			}
			got <- m
		}
	})
	p.send(AppendHandshake(nil, Handshake{Events: testContract.Table()}))
	p.send(emitFrame("ahp", CodecJSON, `{"half":`))
	select {
	case m := <-got:
		if m.Event != "ahp" || string(m.Payload) != `{"half":` {
			t.Fatalf("received %+v", m)
		}
	case <-ctxT(t).Done():
		t.Fatal("the payload did not reach the consumer")
	}
	p.send(emitFrame("ahp", CodecJSON, "\"\xff\""))
	if ce := p.closed(); ce.Code != 4004 || !strings.Contains(ce.Reason, "not valid JSON") {
		t.Fatalf("close %d %q, want 4004 for invalid UTF-8", ce.Code, ce.Reason)
	}
}

// TestCorruptCompressedEmit: on a session that negotiated
// permessage-deflate, a compressed message (RSV1) whose data does not
// inflate closes the session as a protocol error (4004, "invalid
// compressed data"), not as a connection lost.
func TestCorruptCompressedEmit(t *testing.T) {
	l := &Listener{Session: Config{Contract: testContract}, Compression: websocket.CompressionNoContextTakeover}
	srv := httptest.NewServer(l.WebSocketHandler(echo))
	t.Cleanup(srv.Close)
	p := wstest.DialDeflate(t, srv.Listener.Addr().String(), "/transport-io")
	p.WriteCompressed(0x2, wstest.CorruptDeflate) // binary
	// (The server may send its HANDSHAKE first: ReadClose skips it.)
	if code, reason := p.ReadClose(); code != 4004 || !strings.Contains(reason, "invalid compressed data") {
		t.Fatalf("close %d %q, want 4004 with \"invalid compressed data\"", code, reason)
	}
}

// TestCutCompressedEmit: a compressed message whose frame the connection's
// end cut short is a connection lost, not a protocol error, however its
// bytes read: coder/websocket hands the inflater a cut frame's bytes
// still masked, and this mask makes them a reserved deflate block
// (BTYPE 11), which does not inflate, before the end is read.
func TestCutCompressedEmit(t *testing.T) {
	ended := make(chan error, 1)
	l := &Listener{Session: Config{Contract: testContract}, Compression: websocket.CompressionNoContextTakeover}
	srv := httptest.NewServer(l.WebSocketHandler(func(s *Session) {
		<-s.Done()
		ended <- s.Err()
	}))
	t.Cleanup(srv.Close)
	p := wstest.DialDeflate(t, srv.Listener.Addr().String(), "/transport-io")
	// A stored block's header, then 100 bytes of it: a deflate prefix
	// that inflates, cut after 20 of its 105 bytes.
	payload := append([]byte{0x00, 100, 0, 0xff - 100, 0xff}, make([]byte, 100)...)
	p.WriteCompressedCut(0x2, payload, [4]byte{0x06, 0, 0, 0}, 20)
	select {
	case err := <-ended:
		var se *SessionError
		if !errors.As(err, &se) || !se.Lost || se.Reason != "the peer's TCP connection ended without a WebSocket close" {
			t.Fatalf("session ended with %v, want a connection lost (its TCP connection ended)", err)
		}
	case <-ctxT(t).Done():
		t.Fatal("the session did not end")
	}
}
