package transportio

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var testContract = MustContract(
	Event{Name: "ahp"},
	Event{Name: "chat"},
	Event{Name: "blob", Payload: CodecBytes},
	Event{Name: "cursor", Lane: LaneUnreliable, Fallback: FallbackNewest},
)

// wsPair runs a Listener on an httptest server and dials it; serve gets the
// server session. Both sessions are closed and joined at cleanup.
func wsPair(t *testing.T, l *Listener, cfg Config, serve func(*Session)) (*Session, *httptest.Server) {
	t.Helper()
	if l.Session.Contract == nil {
		l.Session.Contract = testContract
	}
	if cfg.Contract == nil {
		cfg.Contract = testContract
	}
	srv := httptest.NewServer(l.WebSocketHandler(serve))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/transport-io", nil, cfg, l.WebSocket)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close(CloseNoError, "")
		s.Wait()
		srv.Close()
	})
	return s, srv
}

// echo serves a session by echoing every emit back until it ends.
func echo(s *Session) {
	for {
		m, err := s.Receive(context.Background())
		if err != nil {
			return
		}
		if err := s.Emit(m.Event, m.Payload); err != nil {
			return
		}
	}
}

// rawWS dials the listener as a raw WebSocket, for hand-made bytes.
func rawWS(t *testing.T, srv *httptest.Server, query string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/transport-io"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(8 << 20)
	t.Cleanup(func() { _ = c.CloseNow() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var _ = http.StatusOK
