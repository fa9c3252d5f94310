package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/transport"
)

// TestHostViolationEndsConn: a host that chose the subprotocol
// ahp-tcp-data and then sends a binary message that is no such payload
// has broken the protocol: the Conn closes with 1002 and ends with an
// error saying so, and does not reconnect (a reconnect would meet the same
// host), although the host offered a resume. Before, it read as a lost
// connection: a silent reconnect loop.
func TestHostViolationEndsConn(t *testing.T) {
	closed := make(chan websocket.StatusCode, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{transport.BinarySubprotocol}})
		if err != nil {
			return
		}
		defer c.CloseNow()
		_, raw, err := c.Read(r.Context())
		var req struct{ ID json.RawMessage }
		if err != nil || json.Unmarshal(raw, &req) != nil {
			return
		}
		res := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"%s","resume":{"token":"t","graceMs":60000}}}`, req.ID, ProtocolVersions[0])
		if c.Write(r.Context(), websocket.MessageText, []byte(res)) != nil || c.Write(r.Context(), websocket.MessageBinary, []byte{1, 2, 3}) != nil {
			return
		}
		_, _, err = c.Read(r.Context())
		closed <- websocket.CloseStatus(err)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mc, err := transport.DialWebSocket(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ahp", nil, nil, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	var redials, lost atomic.Int32
	c := NewConn(mc, Options{ClientID: "violation",
		Dialer: func(context.Context) (transport.MessageConn, error) {
			redials.Add(1)
			return nil, errors.New("no second connection in this test")
		},
		OnReconnect: func(st ReconnectStatus) {
			if st.State == Lost {
				lost.Add(1)
			}
		}})
	defer c.Close()
	if err := c.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-ctx.Done():
		t.Fatal("the Conn did not end")
	}
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "broke the protocol (closed with code 1002)") || !strings.Contains(err.Error(), "ahp-tcp-data") {
		t.Errorf("Err() = %v, want the protocol broken, 1002, naming ahp-tcp-data", err)
	}
	if code := <-closed; code != websocket.StatusProtocolError {
		t.Errorf("the host saw close %d, want 1002", code)
	}
	if n, l := redials.Load(), lost.Load(); n != 0 || l != 0 {
		t.Errorf("%d redials, %d Lost reports; want none", n, l)
	}
}
