package transportio

import (
	"errors"
	"net/http"
	"testing"
)

func TestWebSocketEcho(t *testing.T) {
	s, _ := wsPair(t, &Listener{}, Config{}, echo)
	if err := s.WaitHandshake(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := s.Emit("ahp", []byte(`{"jsonrpc":"2.0","method":"x"}`)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 100; i++ {
		m, err := s.Receive(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		if m.Event != "ahp" || string(m.Payload) != `{"jsonrpc":"2.0","method":"x"}` {
			t.Fatalf("got %+v", m)
		}
	}
}

func TestRefusalBeforeFrameZero(t *testing.T) {
	l := &Listener{Authorize: func(*http.Request) error { return Refuse("expired") }}
	s, _ := wsPair(t, l, Config{}, func(*Session) { t.Error("refused peer was served") })
	err := s.WaitHandshake(ctxT(t))
	var se *SessionError
	if !errors.As(err, &se) || se.Code != CloseUnauthorized || se.Reason != "expired" || !se.Remote {
		t.Fatalf("got %v", err)
	}
}
