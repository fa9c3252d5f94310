package transport

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/delivery/bytestream"
	"github.com/sidecar-dev/sidecar/internal/tiopipe"
	"github.com/sidecar-dev/sidecar/rpc"
	"github.com/sidecar-dev/sidecar/transportio"
)

// oldContract is a peer's from before rpc.EventBinaryData.
var oldContract = transportio.MustContract(transportio.Event{Name: rpc.EventAHP})

// tioPair starts a client and a server session over pipes with the given
// contracts; tap records what the client writes.
func tioPair(t *testing.T, client, server *transportio.Contract) (c, s *transportio.Session, tap *tiopipe.Recorder) {
	t.Helper()
	tap = &tiopipe.Recorder{}
	c, s = tiopipe.Pair(t, client, server, tap.Tap)
	return c, s, tap
}

// TestTIOBinaryNegotiated: between two peers that list
// rpc.EventBinaryData a binary form crosses as its raw bytes and arrives
// as those bytes (ReadMessageOrBinary) or as its exact text (ReadMessage);
// text messages cross as text on "ahp".
func TestTIOBinaryNegotiated(t *testing.T) {
	c, s, tap := tioPair(t, Contract, Contract)
	cc, sc := newTIOConn(c, false), newTIOConn(s, false)
	if !cc.CarriesBinary() || !sc.CarriesBinary() {
		t.Fatal("binary forms not negotiated")
	}
	data := bytes.Repeat([]byte("raw-\x00\x01\xff-bytes "), 1000)
	payload, text := binaryForm("ahp-tcp:/c1", 12345, data)
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.WriteBinary(ctx, payload); err != nil {
		t.Fatal(err)
	}
	if got, err := sc.ReadMessage(ctx); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("received %.100q %v, want the text %.100q", got, err, text)
	}
	for _, m := range [][]byte{payload, []byte(ping)} {
		var err error
		if m[0] == '{' {
			err = cc.WriteMessage(ctx, m)
		} else {
			err = cc.WriteBinary(ctx, m)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, binary, err := sc.ReadMessageOrBinary(ctx)
		if err != nil || !bytes.Equal(b, m) || binary != (m[0] != '{') {
			t.Fatalf("received %.100q binary %v %v, want %.100q", b, binary, err, m)
		}
		sc.RecycleRead(b)
	}
	wire := tap.Bytes()
	if !bytes.Contains(wire, data) || bytes.Contains(wire, []byte(base64.StdEncoding.EncodeToString(data[:300]))) {
		t.Fatal("the binary form did not cross as raw bytes")
	}
	if !bytes.Contains(wire, []byte(ping)) {
		t.Fatal("the text did not cross as text")
	}
}

// TestTIOBinaryOldPeer: a peer whose handshake does not list
// rpc.EventBinaryData carries no binary forms: WriteBinary refuses, and
// the peer never gets an EMIT of an event it does not know.
func TestTIOBinaryOldPeer(t *testing.T) {
	c, s, _ := tioPair(t, Contract, oldContract)
	cc := newTIOConn(c, false)
	if cc.CarriesBinary() {
		t.Fatal("CarriesBinary with a peer that does not list the event")
	}
	payload, text := binaryForm("ahp-tcp:/c1", 0, []byte("Hello, old peer"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.WriteBinary(ctx, payload); !errors.Is(err, errNoBinary) {
		t.Fatalf("WriteBinary: %v, want errNoBinary", err)
	}
	if err := cc.WriteMessage(ctx, text); err != nil {
		t.Fatal(err)
	}
	got, err := s.Receive(ctx)
	if err != nil || got.Event != rpc.EventAHP || !bytes.Equal(got.Payload, text) {
		t.Fatalf("received %s %q %v, want ahp %q", got.Event, got.Payload, err, text)
	}
	if st := s.Stats(); st.UnknownDropped != 0 {
		t.Fatalf("the old peer dropped %d unknown events", st.UnknownDropped)
	}
}

// TestTIOBinaryMalformedCloses: a malformed binary form read as text
// closes the session as a protocol error (1004) naming the event.
func TestTIOBinaryMalformedCloses(t *testing.T) {
	c, s, _ := tioPair(t, Contract, Contract)
	sc := NewTIOConn(s)
	if err := c.Emit(rpc.EventBinaryData, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, '"', 'x'}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := sc.ReadMessage(ctx)
	var ce *TIOCloseError
	if !errors.As(err, &ce) || ce.Code != transportio.CloseProtocolError || !strings.Contains(ce.Reason, "ahp-tcp-data") {
		t.Fatalf("ReadMessage: %v, want a 1004 close naming the event", err)
	}
}

// TestBinaryDocExample: the frame docs/protocol.md shows.
func TestBinaryDocExample(t *testing.T) {
	payload, text := binaryForm("ahp-tcp:/c1", 0, []byte("Hello"))
	if string(text) != `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8="}}` {
		t.Fatalf("text %s", text)
	}
	ev, _ := Contract.Lookup(rpc.EventBinaryData)
	f := transportio.AppendFrame(nil, transportio.Frame{Type: transportio.FrameEmit, Codec: ev.Payload, EventID: ev.ID, Payload: payload})
	const want = "00000022" + "02020000" + "6065e6ad" + "0000000000000000" + "000b" +
		"6168702d7463703a2f6331" + "48656c6c6f"
	if got := hex.EncodeToString(f); got != want || ev.ID != 1617290925 {
		t.Fatalf("frame %s, id %d", got, ev.ID)
	}
	hs := transportio.AppendHandshake(nil, transportio.Handshake{V: transportio.Version, Feat: []string{}, Events: Contract.Table()})
	if table := `"events":[["ahp",95909084,"reliable"],["ahp-tcp-data",1617290925,"reliable"]]`; !bytes.Contains(hs, []byte(table)) {
		t.Fatalf("handshake %s, want the table %s", hs[transportio.FrameHeaderLen:], table)
	}
}

// TestTIOWriteFramed: WriteFramed puts on the wire exactly the EMIT that
// WriteBinary puts there for the same binary form (the header written
// into the message's frame room; a large form written from its buffer, a
// small one copied), and the peer reads the form back as it was built.
func TestTIOWriteFramed(t *testing.T) {
	ev, _ := Contract.Lookup(rpc.EventBinaryData)
	for _, n := range []int{100, 64 << 10} {
		c, s, tap := tioPair(t, Contract, Contract)
		cc, sc := newTIOConn(c, false), newTIOConn(s, false)
		e := bytestream.NewEncoder(rpc.TCPStream, "ahp-tcp:/c1")
		m := e.Data(777, bytes.Repeat([]byte("framed\x00\xff"), n/8), true)
		if len(m.Framed) != delivery.FrameRoom+len(m.Binary) {
			t.Fatalf("a binary form with %d bytes of frame room, want %d", len(m.Framed)-len(m.Binary), delivery.FrameRoom)
		}
		form := bytes.Clone(m.Binary)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		before := len(tap.Bytes())
		if err := cc.WriteBinary(ctx, m.Binary); err != nil {
			t.Fatal(err)
		}
		if err := cc.WriteFramed(ctx, m.Framed); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			b, binary, err := sc.ReadMessageOrBinary(ctx)
			if err != nil || !binary || !bytes.Equal(b, form) {
				t.Fatalf("%d bytes: received %d bytes binary %v %v, want the form", n, len(b), binary, err)
			}
		}
		frame := transportio.AppendFrame(nil, transportio.Frame{Type: transportio.FrameEmit, Codec: transportio.CodecBytes, EventID: ev.ID, Payload: form})
		if wire := tap.Bytes()[before:]; !bytes.Equal(wire, append(bytes.Clone(frame), frame...)) {
			t.Fatalf("%d bytes: the wire has %d bytes, want the same EMIT of %d bytes twice", n, len(wire), len(frame))
		}
	}
}
