package transport

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/tiopipe"
	"github.com/sidecar-dev/sidecar/transportio"
)

func tcpDataText(channel string, off uint64, data []byte) string {
	return `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"` + channel + `","offset":` +
		strconv.FormatUint(off, 10) + `,"data":"` + base64.StdEncoding.EncodeToString(data) + `"}}`
}

// textOf is the text payload p (valid) stands for, in a buffer of its
// exact length.
func textOf(t testing.TB, p []byte) []byte {
	t.Helper()
	h, err := tcpBytesHeader(p, transportio.MaxPayload)
	if err != nil {
		t.Fatal(err)
	}
	return AppendTCPDataText(make([]byte, 0, h.TCPData.TextLen), h)
}

// TestTCPBytesRoundTrip: every tcp/data our encoder builds becomes bytes
// (the data raw, not base64) and back into the very same text.
func TestTCPBytesRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, '"', '\\'}, 40000)
	for _, off := range []uint64{0, 9, 10, 1 << 40, math.MaxUint64} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, len(big)} {
			data := big[:n]
			e := tcp.NewEncoder("ahp-tcp:/c1")
			text := e.AppendData(nil, tcp.DecodedOffset(off), data)
			if string(text) != tcpDataText("ahp-tcp:/c1", off, data) {
				t.Fatalf("the encoder's form changed: %.120s", text)
			}
			p, ok := tcpDataToBytes(nil, text)
			if !ok {
				t.Fatalf("off %d n %d: not turned into bytes", off, n)
			}
			if want := 8 + 2 + len("ahp-tcp:/c1") + n; len(p) != want || !bytes.Equal(p[len(p)-n:], data) {
				t.Fatalf("off %d n %d: payload of %d bytes, want %d ending with the data", off, n, len(p), want)
			}
			l, err := tcpBytesTextLen(p, transportio.MaxPayload)
			if err != nil || l != len(text) {
				t.Fatalf("off %d n %d: text length %d %v, want %d", off, n, l, err, len(text))
			}
			if back := textOf(t, p); !bytes.Equal(back, text) || cap(back) != l {
				t.Fatalf("off %d n %d: rebuilt %.120s, want %.120s", off, n, back, text)
			}
		}
	}
}

// TestTCPBytesHeader: a payload read as bytes gives the header and sizes
// of the very text it stands for (seed 000 "Message Size": windows count
// the text's UTF-16 bytes whichever form carried it), a non-ASCII channel
// included.
func TestTCPBytesHeader(t *testing.T) {
	for _, ch := range []string{"ahp-tcp:/c1", "ahp-tcp:/café-☕-𝄞"} {
		for _, n := range []int{1, 2, 3, 4, 300000} {
			data := bytes.Repeat([]byte{0xff, 0, '"'}, n)[:n]
			text := tcpDataText(ch, 1<<33+7, data)
			p, ok := tcpDataToBytes(nil, []byte(text))
			if !ok {
				t.Fatalf("%s %d: not turned into bytes", ch, n)
			}
			h, err := tcpBytesHeader(p, transportio.MaxPayload)
			if err != nil {
				t.Fatal(err)
			}
			d := h.TCPData
			if h.Method != "tcp/data" || h.Channel != ch || h.Params != nil || !h.IsNotification() ||
				d.Offset != 1<<33+7 || !bytes.Equal(d.Data, data) {
				t.Fatalf("%s %d: header %+v, data %d bytes", ch, n, h, len(d.Data))
			}
			wantSize := delivery.Measure([]byte(text))
			if d.TextLen != len(text) || d.Size != wantSize || h.ASCII != (int(wantSize) == 2*len(text)) {
				t.Fatalf("%s %d: text %d bytes, %d UTF-16 bytes, ASCII %v; want %d, %d", ch, n, d.TextLen, d.Size, h.ASCII, len(text), wantSize)
			}
		}
	}
	if _, err := tcpBytesHeader([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, '"', 'x'}, transportio.MaxPayload); !errors.Is(err, errTCPBytes) {
		t.Fatalf("malformed: %v", err)
	}
}

// readAsData writes each of msgs on w and reads it on r as DataReader:
// msgs[0], a tcp/data of data at off, as its bytes, the others as their
// text.
func readAsData(t *testing.T, ctx context.Context, w, r MessageConn, msgs []string, off uint64, data []byte) {
	t.Helper()
	for i, m := range msgs {
		if err := w.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		b, h, err := r.(DataReader).ReadMessageOrData(ctx)
		switch {
		case err != nil:
			t.Fatal(err)
		case i == 0 && (h == nil || h.TCPData.Offset != off || !bytes.Equal(h.TCPData.Data, data) || h.TCPData.TextLen != len(m)):
			t.Fatalf("tcp/data read as %+v, %d bytes", h, len(b))
		case i > 0 && (h != nil || string(b) != m):
			t.Fatalf("message %d read as %+v %.100q, want the text %.100q", i, h, b, m)
		}
		RecycleRead(r, b)
	}
}

// TestTCPBytesTextStays: messages that are not tcp/data in the exact form
// stay text.
func TestTCPBytesTextStays(t *testing.T) {
	for _, m := range []string{
		`{"jsonrpc":"2.0","method":"tcp/eof","params":{"channel":"ahp-tcp:/c1","offset":5}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c\"1","offset":0,"data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c\\u00e91","offset":0,"data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"","offset":0,"data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":00,"data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":18446744073709551616,"data":"SGVsbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG9="}}`, // pad bits
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8"}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":""}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVs\nbG8="}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8=","x":1}}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"offset":0,"channel":"ahp-tcp:/c1","data":"SGVsbG8="}}`,
	} {
		if p, ok := tcpDataToBytes([]byte("keep"), []byte(m)); ok || string(p) != "keep" {
			t.Errorf("%s: turned into bytes (%q)", m, p)
		}
	}
}

// TestTCPBytesMalformed: a payload that stands for no tcp/data is refused
// with a reason.
func TestTCPBytesMalformed(t *testing.T) {
	hdr := func(off uint64, ch string) []byte {
		b := []byte{byte(off >> 56), byte(off >> 48), byte(off >> 40), byte(off >> 32), byte(off >> 24), byte(off >> 16), byte(off >> 8), byte(off)}
		return append(append(b, byte(len(ch)>>8), byte(len(ch))), ch...)
	}
	for name, p := range map[string][]byte{
		"short":        {0, 0, 0},
		"no channel":   append(hdr(0, ""), 'x'),
		"no data":      hdr(0, "ahp-tcp:/c1"),
		"cut channel":  append(hdr(0, "ahp-tcp:/c1")[:12], 'x'),
		"quote":        append(hdr(0, `a"b`), 'x'),
		"backslash":    append(hdr(0, `a\b`), 'x'),
		"control":      append(hdr(0, "a\nb"), 'x'),
		"not UTF-8":    append(hdr(0, "a\xffb"), 'x'),
		"text too big": append(hdr(0, "ahp-tcp:/c1"), make([]byte, transportio.MaxPayload*3/4)...),
	} {
		if _, err := tcpBytesTextLen(p, transportio.MaxPayload); !errors.Is(err, errTCPBytes) {
			t.Errorf("%s: %v, want errTCPBytes", name, err)
		}
	}
}

// oldContract is a peer's from before TCPDataEvent.
var oldContract = transportio.MustContract(transportio.Event{Name: AHPEvent})

// tioPair starts a client and a server session over pipes with the given
// contracts; tap records what the client writes.
func tioPair(t *testing.T, client, server *transportio.Contract) (c, s *transportio.Session, tap *tiopipe.Recorder) {
	t.Helper()
	tap = &tiopipe.Recorder{}
	c, s = tiopipe.Pair(t, client, server, tap.Tap)
	return c, s, tap
}

// TestTCPBytesNegotiated: between two peers that list TCPDataEvent a
// tcp/data crosses as raw bytes and arrives as its exact text; other
// messages (and a tcp/data not in our form) cross as text on "ahp".
func TestTCPBytesNegotiated(t *testing.T) {
	c, s, tap := tioPair(t, Contract, Contract)
	cc, sc := newTIOConn(c, false), NewTIOConn(s)
	data := bytes.Repeat([]byte("raw-\x00\x01\xff-bytes "), 1000)
	msgs := []string{
		tcpDataText("ahp-tcp:/c1", 12345, data),
		`{"jsonrpc":"2.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c\"1","offset":0,"data":"SGVsbG8="}}`,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range msgs {
		if err := cc.WriteMessage(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
		got, err := sc.ReadMessage(ctx)
		if err != nil || string(got) != m {
			t.Fatalf("received %.100q %v, want %.100q", got, err, m)
		}
	}
	// The same, read as DataReader: the tcp/data as its bytes, the others
	// as text.
	readAsData(t, ctx, cc, sc, msgs, 12345, data)
	wire := tap.Bytes()
	if !bytes.Contains(wire, data) || bytes.Contains(wire, []byte(base64.StdEncoding.EncodeToString(data[:300]))) {
		t.Fatal("the tcp/data did not cross as raw bytes")
	}
	if !bytes.Contains(wire, []byte(msgs[1])) || !bytes.Contains(wire, []byte(msgs[2])) {
		t.Fatal("the other messages did not cross as text")
	}
}

// TestTCPBytesOldPeer: a peer whose handshake does not list TCPDataEvent
// gets tcp/data as text on "ahp", byte for byte what we were given, and
// never an EMIT of an event it does not know.
func TestTCPBytesOldPeer(t *testing.T) {
	c, s, tap := tioPair(t, Contract, oldContract)
	cc := newTIOConn(c, false)
	data := []byte("Hello, old peer")
	m := tcpDataText("ahp-tcp:/c1", 0, data)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cc.WriteMessage(ctx, []byte(m)); err != nil {
		t.Fatal(err)
	}
	got, err := s.Receive(ctx)
	if err != nil || got.Event != AHPEvent || string(got.Payload) != m {
		t.Fatalf("received %s %q %v, want ahp %q", got.Event, got.Payload, err, m)
	}
	if st := s.Stats(); st.UnknownDropped != 0 {
		t.Fatalf("the old peer dropped %d unknown events", st.UnknownDropped)
	}
	if !bytes.Contains(tap.Bytes(), []byte(m)) {
		t.Fatal("not sent as text")
	}
}

// TestTCPBytesMalformedCloses: a malformed TCPDataEvent payload closes the
// session as a protocol error (1004) naming it.
func TestTCPBytesMalformedCloses(t *testing.T) {
	c, s, _ := tioPair(t, Contract, Contract)
	sc := NewTIOConn(s)
	if err := c.Emit(TCPDataEvent, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, '"', 'x'}); err != nil {
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

// TestTCPBytesDocExample: the frame docs/protocol.md shows.
func TestTCPBytesDocExample(t *testing.T) {
	text := `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/c1","offset":0,"data":"SGVsbG8="}}`
	p, ok := tcpDataToBytes(nil, []byte(text))
	if !ok {
		t.Fatal("not turned into bytes")
	}
	ev, _ := Contract.Lookup(TCPDataEvent)
	f := transportio.AppendFrame(nil, transportio.Frame{Type: transportio.FrameEmit, Codec: ev.Payload, EventID: ev.ID, Payload: p})
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

// FuzzTCPBytes: any payload is either refused with errTCPBytes or stands
// for a text of the announced length that turns back into the very same
// payload.
func FuzzTCPBytes(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0bahp-tcp:/c1Hello"))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\x00\x01\xe9x"))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		n, err := tcpBytesTextLen(p, transportio.MaxPayload)
		if err != nil {
			if !errors.Is(err, errTCPBytes) {
				t.Fatalf("error %v is not errTCPBytes", err)
			}
			return
		}
		text := textOf(t, p)
		if len(text) != n {
			t.Fatalf("text of %d bytes, announced %d", len(text), n)
		}
		back, ok := tcpDataToBytes(nil, text)
		if !ok || !bytes.Equal(back, p) {
			t.Fatalf("%q: back %q %v", text, back, ok)
		}
		h, err := tcpBytesHeader(p, transportio.MaxPayload)
		if err != nil || h.TCPData.TextLen != n || h.TCPData.Size != delivery.Measure(text) {
			t.Fatalf("%q: header %+v %v", text, h, err)
		}
	})
}
