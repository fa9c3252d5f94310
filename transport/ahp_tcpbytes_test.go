package transport

import (
	"bytes"
	"context"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// ahpEcho is an /ahp handler (AHPHandler) echoing every message it reads
// until the client closes; the read limit is 1 MiB.
func ahpEcho() http.Handler {
	return AHPHandler(AcceptOptions{Token: "tok", ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
		defer mc.Close(CloseNormal, "")
		for {
			msg, err := mc.ReadMessage(ctx)
			if err != nil {
				return
			}
			if err := mc.WriteMessage(ctx, msg); err != nil {
				return
			}
		}
	})
}

// dialAHP dials srv's /ahp with the sidecar client's DialWebSocket; the
// connection and the context (10 s) end at t's cleanup.
func dialAHP(t *testing.T, srv *httptest.Server) (context.Context, MessageConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	mc, err := DialWebSocket(ctx, wsURL(srv), nil, nil, 1<<20, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close(CloseNormal, "") })
	return ctx, mc
}

func wsURL(srv *httptest.Server) string {
	return "ws" + strings.TrimPrefix(srv.URL, "http") + "/ahp?token=tok"
}

// TestAHPTCPBytes: between the sidecar's /ahp client and host the upgrade
// chooses TCPDataSubprotocol; a tcp/data then crosses as a binary message
// of its stream bytes (what the host reads is about the data's size, not
// its base64's 4/3), and arrives as its exact text both ways; other
// messages, and a tcp/data not in our encoder's form, cross as text.
func TestAHPTCPBytes(t *testing.T) {
	var wire countingConn
	srv := httptest.NewUnstartedServer(ahpEcho())
	srv.Listener = &countingListener{Listener: srv.Listener, c: &wire}
	srv.Start()
	defer srv.Close()
	ctx, mc := dialAHP(t, srv)
	if !mc.(*wsConn).tcpBytes {
		t.Fatal("the subprotocol was not chosen")
	}
	data := bytes.Repeat([]byte("raw-\x00\x01\xff-bytes "), 20000) // 300,000 bytes
	msgs := []string{
		tcpDataText("ahp-tcp:/c1", 12345, data),
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c\"1","offset":0,"data":"SGVsbG8="}}`,
	}
	for i, m := range msgs {
		before := wire.read.Load()
		if err := mc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		got, err := mc.ReadMessage(ctx)
		if err != nil || string(got) != m {
			t.Fatalf("echo %.100q %v, want %.100q", got, err, m)
		}
		n := wire.read.Load() - before
		if i == 0 && (n < int64(len(data)) || n > int64(len(data))+64) {
			t.Errorf("the host read %d bytes for %d stream bytes (%d of text)", n, len(data), len(m))
		}
		if i > 0 && n < int64(len(m)) {
			t.Errorf("message %d: the host read %d bytes for %d of text", i, n, len(m))
		}
	}
	// Read as DataReader: the tcp/data as its bytes, the others as text.
	readAsData(t, ctx, mc, mc, msgs, 12345, data)
}

// TestAHPTCPBytesWire: what a peer that chose TCPDataSubprotocol gets for
// the docs/protocol.md example, and what a peer that did not choose it
// (an AHP client offering nothing, or something else) gets: text.
func TestAHPTCPBytesWire(t *testing.T) {
	srv := httptest.NewServer(ahpEcho())
	defer srv.Close()
	text := `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8="}}`
	const example = "0000000000000000" + "000b" + "6168702d7463703a2f6331" + "48656c6c6f"
	// The library chooses ignoring case and answers with the client's
	// spelling: such an answer is the subprotocol too.
	for _, offer := range [][]string{{TCPDataSubprotocol}, nil, {"ahp"}, {"ahp", TCPDataSubprotocol}, {"AHP-TCP-DATA"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{Subprotocols: offer})
		if err != nil {
			t.Fatal(err)
		}
		chosen := len(offer) > 0 && strings.EqualFold(offer[len(offer)-1], TCPDataSubprotocol)
		if got := c.Subprotocol(); strings.EqualFold(got, TCPDataSubprotocol) != chosen {
			t.Errorf("offer %q: chosen %q", offer, got)
		}
		if chosen {
			// The peer sends the example as bytes; the host reads it as
			// text and echoes it as bytes again.
			p, _ := hex.DecodeString(example)
			if err := c.Write(ctx, websocket.MessageBinary, p); err != nil {
				t.Fatal(err)
			}
			typ, got, err := c.Read(ctx)
			if err != nil || typ != websocket.MessageBinary || hex.EncodeToString(got) != example {
				t.Errorf("offer %q: read %v %x %v, want binary %s", offer, typ, got, err, example)
			}
		} else {
			if err := c.Write(ctx, websocket.MessageText, []byte(text)); err != nil {
				t.Fatal(err)
			}
			typ, got, err := c.Read(ctx)
			if err != nil || typ != websocket.MessageText || string(got) != text {
				t.Errorf("offer %q: read %v %q %v, want the text", offer, typ, got, err)
			}
		}
		_ = c.Close(websocket.StatusNormalClosure, "")
		cancel()
	}
}

// TestAHPTCPBytesMalformed: a binary message that is no TCPDataEvent
// payload (here a channel with a quote), or whose text would be over the
// read limit, closes the connection with 1002 naming it, and ReadMessage
// returns a ViolationError with that code.
func TestAHPTCPBytesMalformed(t *testing.T) {
	big := make([]byte, 10+11+(1<<20)*3/4) // its base64 alone is 1 MiB
	copy(big[8:], "\x00\x0bahp-tcp:/c1")
	for _, p := range [][]byte{[]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\"x"), {1, 2, 3}, big} {
		got := make(chan error, 1)
		srv := httptest.NewServer(AHPHandler(AcceptOptions{Token: "tok", ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
			defer mc.Close(CloseNormal, "")
			_, err := mc.ReadMessage(ctx)
			got <- err
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{Subprotocols: []string{TCPDataSubprotocol}})
		if err != nil {
			t.Fatal(err)
		}
		c.SetReadLimit(4 << 20)
		if err := c.Write(ctx, websocket.MessageBinary, p); err != nil {
			t.Fatal(err)
		}
		_, _, err = c.Read(ctx)
		if websocket.CloseStatus(err) != websocket.StatusProtocolError || !strings.Contains(err.Error(), "ahp-tcp-data") {
			t.Errorf("%d bytes: the peer read %v, want close 1002 naming ahp-tcp-data", len(p), err)
		}
		serr := <-got
		if code, ok := Violation(serr); !ok || code != CloseProtocolError {
			t.Errorf("%d bytes: ReadMessage %v; Violation %d %v", len(p), serr, code, ok)
		}
		cancel()
		srv.Close()
	}
}

// TestAHPTCPBytesOldHost: the sidecar's client against a host that does
// not choose the subprotocol (an older sidecar, another AHP host) sends
// tcp/data as text.
func TestAHPTCPBytesOldHost(t *testing.T) {
	got := make(chan websocket.MessageType, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		typ, _, _ := c.Read(r.Context())
		got <- typ
		_ = c.Close(websocket.StatusNormalClosure, "")
	}))
	defer srv.Close()
	ctx, mc := dialAHP(t, srv)
	if err := mc.WriteMessage(ctx, []byte(tcpDataText("ahp-tcp:/c1", 0, []byte("Hello")))); err != nil {
		t.Fatal(err)
	}
	if typ := <-got; typ != websocket.MessageText {
		t.Fatalf("sent as %v, want text", typ)
	}
}
