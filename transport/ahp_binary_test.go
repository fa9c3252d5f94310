package transport

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sidecar-dev/sidecar/auth"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/rpc"
)

// ahpEcho is an /ahp handler (AHPHandler) echoing every message it reads,
// in the form it came (a binary form as one), until the client closes;
// the read limit is 1 MiB.
func ahpEcho() http.Handler {
	return AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
		defer mc.Close(CloseNormal, "")
		for {
			msg, binary, err := ReadMessageOrBinary(ctx, mc)
			if err != nil {
				return
			}
			if binary {
				err = mc.(BinaryConn).WriteBinary(ctx, msg)
			} else {
				err = mc.WriteMessage(ctx, msg)
			}
			if err != nil {
				return
			}
		}
	})
}

// binaryForm is the binary form of tcp/data carrying data at off on
// channel, and the text it stands for.
func binaryForm(channel string, off uint64, data []byte) (payload, text []byte) {
	e := bytestream.NewEncoder(rpc.TCPStream, channel)
	return e.Data(bytestream.DecodedOffset(off), data, true).Binary, e.AppendData(nil, bytestream.DecodedOffset(off), data)
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

// TestAHPBinary: between the sidecar's /ahp client and host the upgrade
// chooses BinarySubprotocol; a binary form then crosses as one binary
// message of its bytes (what the host reads is about the data's size, not
// its base64's 4/3), arrives as those bytes (ReadMessageOrBinary) or as
// its exact text (ReadMessage); text messages cross as text.
func TestAHPBinary(t *testing.T) {
	var wire countingConn
	srv := httptest.NewUnstartedServer(ahpEcho())
	srv.Listener = &countingListener{Listener: srv.Listener, c: &wire}
	srv.Start()
	defer srv.Close()
	ctx, mc := dialAHP(t, srv)
	bc := mc.(BinaryConn)
	if !bc.CarriesBinary() {
		t.Fatal("the subprotocol was not chosen")
	}
	data := bytes.Repeat([]byte("raw-\x00\x01\xff-bytes "), 20000) // 300,000 bytes
	payload, text := binaryForm("ahp-tcp:/c1", 12345, data)
	before := wire.read.Load()
	if err := bc.WriteBinary(ctx, payload); err != nil {
		t.Fatal(err)
	}
	got, err := mc.ReadMessage(ctx)
	if err != nil || !bytes.Equal(got, text) {
		t.Fatalf("echo %.100q %v, want the text %.100q", got, err, text)
	}
	if n := wire.read.Load() - before; n < int64(len(data)) || n > int64(len(data))+64 {
		t.Errorf("the host read %d bytes for %d stream bytes (%d of text)", n, len(data), len(text))
	}
	if err := bc.WriteBinary(ctx, payload); err != nil {
		t.Fatal(err)
	}
	b, binary, err := bc.ReadMessageOrBinary(ctx)
	if err != nil || !binary || !bytes.Equal(b, payload) {
		t.Fatalf("read %d bytes, binary %v, %v: want the payload", len(b), binary, err)
	}
	for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"ping"}`, string(text)} {
		before := wire.read.Load()
		if err := mc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		b, binary, err := bc.ReadMessageOrBinary(ctx)
		if err != nil || binary || string(b) != m {
			t.Fatalf("echo %.100q binary %v %v, want the text %.100q", b, binary, err, m)
		}
		if n := wire.read.Load() - before; n < int64(len(m)) {
			t.Errorf("the host read %d bytes for %d of text", n, len(m))
		}
	}
}

// TestAHPBinaryWire: what a peer that chose BinarySubprotocol gets for
// the docs/protocol.md example, and what a peer that did not choose it
// (an AHP client offering nothing, or something else) gets: text.
func TestAHPBinaryWire(t *testing.T) {
	srv := httptest.NewServer(ahpEcho())
	defer srv.Close()
	text := `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8="}}`
	const example = "0000000000000000" + "000b" + "6168702d7463703a2f6331" + "48656c6c6f"
	// The library chooses ignoring case and answers with the client's
	// spelling: such an answer is the subprotocol too.
	for _, offer := range [][]string{{BinarySubprotocol}, nil, {"ahp"}, {"ahp", BinarySubprotocol}, {"AHP-TCP-DATA"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{Subprotocols: offer})
		if err != nil {
			t.Fatal(err)
		}
		chosen := len(offer) > 0 && strings.EqualFold(offer[len(offer)-1], BinarySubprotocol)
		if got := c.Subprotocol(); strings.EqualFold(got, BinarySubprotocol) != chosen {
			t.Errorf("offer %q: chosen %q", offer, got)
		}
		if chosen {
			// The peer sends the example as bytes; the host reads it as
			// a binary form and echoes it as one.
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

// TestAHPBinaryMalformed: a binary message that is no binary form (here a channel with a quote), or whose text would be over the
// read limit, closes the connection with 1002 naming it, and ReadMessage
// returns a ViolationError with that code.
func TestAHPBinaryMalformed(t *testing.T) {
	big := make([]byte, 10+11+(1<<20)*3/4) // its base64 alone is 1 MiB
	copy(big[8:], "\x00\x0bahp-tcp:/c1")
	for _, p := range [][]byte{[]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\"x"), {1, 2, 3}, big} {
		got := make(chan error, 1)
		srv := httptest.NewServer(AHPHandler(AcceptOptions{Auth: auth.NewStatic("tok"), ReadLimit: 1 << 20}, func(ctx context.Context, mc MessageConn) {
			defer mc.Close(CloseNormal, "")
			_, err := mc.ReadMessage(ctx)
			got <- err
		}))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, wsURL(srv), &websocket.DialOptions{Subprotocols: []string{BinarySubprotocol}})
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

// TestAHPBinaryOldHost: the sidecar's client against a host that does not
// choose the subprotocol (an older sidecar, another AHP host) carries no
// binary forms: WriteBinary refuses and writes nothing.
func TestAHPBinaryOldHost(t *testing.T) {
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
	payload, text := binaryForm("ahp-tcp:/c1", 0, []byte("Hello"))
	if CarriesBinary(mc) {
		t.Fatal("CarriesBinary with a host that chose no subprotocol")
	}
	if err := mc.(BinaryConn).WriteBinary(ctx, payload); !errors.Is(err, errNoBinary) {
		t.Fatalf("WriteBinary: %v, want errNoBinary", err)
	}
	if err := mc.WriteMessage(ctx, text); err != nil {
		t.Fatal(err)
	}
	if typ := <-got; typ != websocket.MessageText {
		t.Fatalf("the host read %v first, want the text", typ)
	}
}
