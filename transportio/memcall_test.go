package transportio

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
)

// An in-memory CallCarrier for the call tests: the emit lane is a pair of
// io.Pipes (the stdio carrier), the call streams are memStreams that behave
// like QUIC bidirectional streams (FIN, RESET_STREAM and STOP_SENDING with
// one-byte codes), so every frame and every reset is observable and nothing
// depends on timing.

// memPipe is one direction of a memStream.
type memPipe struct {
	mu    sync.Mutex
	buf   []byte
	fin   bool
	reset *ResetCode // RESET_STREAM from the writer
	stop  *ResetCode // STOP_SENDING from the reader
	sig   chan struct{}
	// sendCtx is the writer's send-side context: cancelled by FIN, reset
	// or STOP_SENDING, as quic-go's SendStream.Context.
	sendCtx    context.Context
	sendCancel context.CancelFunc
}

func newMemPipe() *memPipe {
	p := &memPipe{sig: make(chan struct{})}
	p.sendCtx, p.sendCancel = context.WithCancel(context.Background())
	return p
}

func (p *memPipe) signalLocked() {
	close(p.sig)
	p.sig = make(chan struct{})
}

// memStream reads in and writes out.
type memStream struct{ in, out *memPipe }

func memStreamPair() (*memStream, *memStream) {
	a, b := newMemPipe(), newMemPipe()
	return &memStream{in: a, out: b}, &memStream{in: b, out: a}
}

func (s *memStream) Read(b []byte) (int, error) {
	p := s.in
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		switch {
		case p.stop != nil:
			return 0, &StreamResetError{Code: *p.stop}
		case p.reset != nil:
			return 0, &StreamResetError{Code: *p.reset, Remote: true}
		case len(p.buf) > 0:
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			return n, nil
		case p.fin:
			return 0, io.EOF
		}
		sig := p.sig
		p.mu.Unlock()
		<-sig
		p.mu.Lock()
	}
}

func (s *memStream) Write(b []byte) (int, error) {
	p := s.out
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.stop != nil:
		return 0, &StreamResetError{Code: *p.stop, Remote: true}
	case p.reset != nil:
		return 0, &StreamResetError{Code: *p.reset}
	case p.fin:
		return 0, errors.New("write on a closed stream")
	}
	p.buf = append(p.buf, b...)
	p.signalLocked()
	return len(b), nil
}

func (s *memStream) CloseWrite() error {
	p := s.out
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reset == nil {
		p.fin = true
	}
	p.sendCancel()
	p.signalLocked()
	return nil
}

func (s *memStream) CancelWrite(c ResetCode) {
	p := s.out
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reset == nil && !p.fin {
		p.reset = &c
		p.buf = nil
	}
	p.sendCancel()
	p.signalLocked()
}

func (s *memStream) CancelRead(c ResetCode) {
	p := s.in
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop == nil {
		p.stop = &c
	}
	p.sendCancel()
	p.signalLocked()
}

func (s *memStream) Context() context.Context { return s.out.sendCtx }

// stopCode is the STOP_SENDING the peer sent on our send side.
func (s *memStream) stopCode() (ResetCode, bool) {
	s.out.mu.Lock()
	defer s.out.mu.Unlock()
	if s.out.stop == nil {
		return 0, false
	}
	return *s.out.stop, true
}

// memCarrier is one side of an in-memory WebTransport-like session.
type memCarrier struct {
	Carrier
	accept chan CallStream
	peer   *memCarrier
}

func (c *memCarrier) Kind() Kind { return KindWebTransport }

func (c *memCarrier) OpenCall(ctx context.Context) (CallStream, error) {
	a, b := memStreamPair()
	select {
	case c.peer.accept <- b:
		return a, nil
	case <-c.Done():
		return nil, ErrSessionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *memCarrier) AcceptCall(ctx context.Context) (CallStream, error) {
	select {
	case st := <-c.accept:
		return st, nil
	case <-c.Done():
		c.abortPending()
		return nil, ErrSessionClosed
	case <-ctx.Done():
		c.abortPending()
		return nil, ctx.Err()
	}
}

// abortPending resets the streams nobody will accept any more, as the end
// of a real session ends its streams (without it, a call opened just
// before the session closed waited forever: a rare hang of
// TestCall52BeforeHandshake).
func (c *memCarrier) abortPending() {
	for {
		select {
		case st := <-c.accept:
			st.CancelRead(ResetAborted)
			st.CancelWrite(ResetAborted)
		default:
			return
		}
	}
}

// memCarriers returns the two sides of an in-memory session.
func memCarriers() (a, b *memCarrier) {
	r1, w1 := io.Pipe()
	r2, w2 := io.Pipe()
	a = &memCarrier{Carrier: NewStreamCarrier(r1, w2, "b"), accept: make(chan CallStream, 1024)}
	b = &memCarrier{Carrier: NewStreamCarrier(r2, w1, "a"), accept: make(chan CallStream, 1024)}
	a.peer, b.peer = b, a
	return a, b
}

// callPair starts a server and a client session on an in-memory carrier,
// both with the contract c; both are closed and joined at cleanup.
func callPair(t *testing.T, c *Contract, srvCfg Config) (srv, cli *Session) {
	t.Helper()
	a, b := memCarriers()
	srvCfg.Contract = c
	srv = Start(a, srvCfg)
	cli = Start(b, Config{Contract: c, Role: RoleClient})
	t.Cleanup(func() {
		cli.Close(CloseNoError, "")
		srv.Close(CloseNoError, "")
		cli.Wait()
		srv.Wait()
	})
	if err := cli.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// rawCallPeer is a hand-driven peer of a session on an in-memory carrier:
// the test writes its emit stream and opens call streams itself.
type rawCallPeer struct {
	t    *testing.T
	car  *memCarrier
	s    *Session
	emit io.Writer
}

// newRawCallPeer starts a session with cfg against a raw peer. handshake
// says whether the raw peer sends its handshake at once.
func newRawCallPeer(t *testing.T, cfg Config, handshake bool) *rawCallPeer {
	t.Helper()
	a, b := memCarriers()
	if cfg.Contract == nil {
		cfg.Contract = callContract
	}
	s := Start(a, cfg)
	p := &rawCallPeer{t: t, car: b, s: s}
	w, _ := b.OpenEmit(context.Background())
	r, _ := b.AcceptEmit(context.Background())
	drained := make(chan struct{})
	go func() { // read and discard the session's emit stream
		defer close(drained)
		_, _ = io.Copy(io.Discard, r)
	}()
	p.emit = w
	t.Cleanup(func() {
		s.Close(CloseNoError, "")
		s.Wait()
		b.Close(CloseNoError, "")
		<-drained
	})
	if handshake {
		p.handshake()
	}
	return p
}

func (p *rawCallPeer) handshake() {
	p.t.Helper()
	if _, err := p.emit.Write(AppendHandshake(nil, Handshake{Events: p.s.Contract().Table()})); err != nil {
		p.t.Fatal(err)
	}
	if err := p.s.WaitHandshake(ctxT(p.t)); err != nil {
		p.t.Fatal(err)
	}
}

// open opens a raw call stream to the session.
func (p *rawCallPeer) open() *memStream {
	p.t.Helper()
	st, err := p.car.OpenCall(ctxT(p.t))
	if err != nil {
		p.t.Fatal(err)
	}
	return st.(*memStream)
}

// accept takes a call stream the session opened.
func (p *rawCallPeer) accept() *memStream {
	p.t.Helper()
	st, err := p.car.AcceptCall(ctxT(p.t))
	if err != nil {
		p.t.Fatal(err)
	}
	return st.(*memStream)
}
