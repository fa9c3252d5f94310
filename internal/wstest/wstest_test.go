package wstest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"
)

// TestReadClose: the upgrade with permessage-deflate, a text frame
// skipped, then the server's close code and reason.
func TestReadClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionNoContextTakeover})
		if err != nil {
			return
		}
		_ = c.Write(r.Context(), websocket.MessageText, []byte("hello"))
		_ = c.Close(websocket.StatusPolicyViolation, "bye")
	}))
	defer srv.Close()
	p := DialDeflate(t, srv.Listener.Addr().String(), "/")
	if code, reason := p.ReadClose(); code != 1008 || reason != "bye" {
		t.Fatalf("close %d %q, want 1008 \"bye\"", code, reason)
	}
}
