package main

import (
	"errors"
	"net"
	"sync"
)

// handoff keeps a local listener across forward's sessions: one goroutine
// accepts on it for as long as forward runs and hands each connection to
// the session's Forwarder through a listener of that session (Listen),
// whose Close ends only the session's Accept. Between sessions the
// accepted connection waits in hand and later ones in the kernel's
// backlog, so none is refused while a new session starts.
type handoff struct {
	l       net.Listener
	results chan accepted // unbuffered: one accepted connection in hand at most
	stop    chan struct{}
	once    sync.Once
}

type accepted struct {
	c   net.Conn
	err error
}

func newHandoff(l net.Listener) *handoff {
	h := &handoff{l: l, results: make(chan accepted), stop: make(chan struct{})}
	go h.accept()
	return h
}

// accept passes every Accept result on, failures too (the session's
// retrying listener backs off on them), until the listener is closed.
func (h *handoff) accept() {
	for {
		c, err := h.l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		select {
		case h.results <- accepted{c, err}:
		case <-h.stop:
			if c != nil {
				_ = c.Close()
			}
			return
		}
	}
}

// Close closes the listener for good: the connection in hand, if any, is
// closed.
func (h *handoff) Close() error {
	h.once.Do(func() { close(h.stop) })
	return h.l.Close()
}

// Listen is the listener for one session: its Accept takes the next
// connection; its Close ends its Accept and leaves the socket open.
func (h *handoff) Listen() net.Listener {
	return &sessionListener{h: h, closed: make(chan struct{})}
}

type sessionListener struct {
	h      *handoff
	closed chan struct{}
	once   sync.Once
}

func (s *sessionListener) Accept() (net.Conn, error) {
	select {
	case <-s.closed:
		return nil, net.ErrClosed
	default:
	}
	select {
	case r := <-s.h.results:
		return r.c, r.err
	case <-s.closed:
		return nil, net.ErrClosed
	case <-s.h.stop:
		return nil, net.ErrClosed
	}
}

func (s *sessionListener) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func (s *sessionListener) Addr() net.Addr { return s.h.l.Addr() }
