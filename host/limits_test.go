package host_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sidecar-dev/sidecar/host"
	"github.com/sidecar-dev/sidecar/transport"
)

// TestConnectionLimit: 1024 connections are served at once; the next one
// is closed at once with 1013 and the others are unaffected.
func TestConnectionLimit(t *testing.T) {
	srv := newServer(t, nil)
	conns := make([]*hostConn, 0, 1024)
	for range 1024 {
		conns = append(conns, connect(t, srv))
	}
	// Every one is being served: a ping round trip on each proves it was
	// registered (ServeConn registers before it reads).
	for i, c := range conns {
		c.send(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}`)
		if m, err := c.read(); err != nil || string(m.Raw) != `{"id":1,"result":null,"jsonrpc":"2.0"}` {
			t.Fatalf("ping on connection %d: %v %v", i+1, m, err)
		}
	}
	a, b := transport.Pipe(4)
	err := srv.ServeConn(context.Background(), b)
	if !errors.Is(err, host.ErrTooManyConnections) {
		t.Fatalf("connection 1025: %v, want ErrTooManyConnections", err)
	}
	_, rerr := a.ReadMessage(context.Background())
	if code := transport.CloseStatus(rerr); code != transport.CloseTryAgainLater {
		t.Fatalf("connection 1025 closed with %v (%v), want 1013", code, rerr)
	}
}
