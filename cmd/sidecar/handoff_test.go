package main

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestHandoff: a session's listener takes connections; closing it ends its
// Accept and leaves the port open, and the next session's listener takes
// the connections that arrive meanwhile; closing the handoff closes the
// port.
func TestHandoff(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := newHandoff(l)
	addr := l.Addr().String()
	dial := func() net.Conn {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	accept := func(s net.Listener, from net.Conn) {
		t.Helper()
		c, err := s.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.RemoteAddr().String() != from.LocalAddr().String() {
			t.Fatalf("accepted %v, want %v", c.RemoteAddr(), from.LocalAddr())
		}
	}

	first := h.Listen()
	if first.Addr().String() != addr {
		t.Fatalf("session listener address %v, want %v", first.Addr(), addr)
	}
	accept(first, dial())
	ended := make(chan error, 1)
	go func() { _, err := first.Accept(); ended <- err }()
	_ = first.Close()
	select {
	case err := <-ended:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept did not end at Close")
	}

	// Between sessions the port stays open: a connection now is taken by
	// the next session.
	between := dial()
	second := h.Listen()
	accept(second, between)

	_ = h.Close()
	if _, err := second.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after the handoff closed: %v, want net.ErrClosed", err)
	}
	if c, err := net.DialTimeout("tcp", addr, 5*time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the port still accepts after the handoff closed")
	}
}
