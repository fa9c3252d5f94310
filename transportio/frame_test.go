package transportio

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Golden bytes from reference/transport-io.md §3.
const (
	goldenEmitChat     = "00 00 00 15 02 01 00 00 31 e0 6f 7d 7b 22 74 65 78 74 22 3a 22 68 69 22 7d"
	goldenHandshakeHdr = "00 00 00 83 01 01 00 00 00 00 00 00"
	goldenHandshakeObj = `{"v":0,"feat":[],"events":[["chat",836792189,"reliable"],["cursor",1185214141,"unreliable"],["save",360565394,"reliable"]]}`
	goldenCreditHdr    = "00 00 00 15 08 01 00 00 00 00 00 00"
	goldenDatagram     = "01 46 a4 ee bd 00 00 00 01 00 00 00 01 7b 22 78 22 3a 31 7d"
	goldenDatagramWrap = "00 00 00 1c 09 01 00 00 00 00 00 00"
)

// Checklist 11, 27, 34 and §3 of the reference notes: exact bytes.
func TestGoldenFrames(t *testing.T) {
	emit := AppendFrame(nil, Frame{Type: FrameEmit, Codec: CodecJSON, EventID: EventID("chat"), Payload: []byte(`{"text":"hi"}`)})
	if !bytes.Equal(emit, unhex(t, goldenEmitChat)) {
		t.Errorf("EMIT chat = % x", emit)
	}
	c := MustContract(Event{Name: "save"}, Event{Name: "chat"}, Event{Name: "cursor", Lane: LaneUnreliable})
	hs := AppendHandshake(nil, Handshake{V: 0, Events: c.Table()})
	want := append(unhex(t, goldenHandshakeHdr), goldenHandshakeObj...)
	if !bytes.Equal(hs, want) {
		t.Errorf("HANDSHAKE =\n%q\nwant\n%q", hs, want)
	}
	credit := AppendFrame(nil, Frame{Type: FrameCallCredit, Codec: CodecJSON, Payload: []byte(`{"credit":16}`)})
	if !bytes.Equal(credit[:12], unhex(t, goldenCreditHdr)) {
		t.Errorf("CALL_CREDIT header = % x", credit[:12])
	}
	dg := AppendDatagram(nil, Datagram{Codec: CodecJSON, EventID: EventID("cursor"), Origin: 1, Sequence: 1, Payload: []byte(`{"x":1}`)})
	if !bytes.Equal(dg, unhex(t, goldenDatagram)) {
		t.Errorf("datagram = % x", dg)
	}
	wrap := AppendFrame(nil, Frame{Type: FrameDatagram, Codec: CodecJSON, Payload: dg})
	if !bytes.Equal(wrap, append(unhex(t, goldenDatagramWrap), dg...)) {
		t.Errorf("DATAGRAM frame = % x", wrap)
	}
	for name, id := range map[string]uint32{"chat": 836792189, "cursor": 1185214141, "save": 360565394} {
		if EventID(name) != id {
			t.Errorf("EventID(%s) = %d, want %d", name, EventID(name), id)
		}
	}
}

func header(length uint32, typ, codec byte, reserved uint16, id uint32) []byte {
	b := []byte{byte(length >> 24), byte(length >> 16), byte(length >> 8), byte(length), typ, codec, byte(reserved >> 8), byte(reserved)}
	return append(b, byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
}

// Checklist 27–33: each header violation, decided from the header alone.
func TestParseHeader(t *testing.T) {
	cases := []struct {
		name string
		b    []byte
		code string // "" = valid
	}{
		{"length 0", header(0, 2, 1, 0, 1), "WT_PROTOCOL_ERROR"},
		{"length 8 (header only)", header(8, 2, 1, 0, 1), "WT_PROTOCOL_ERROR"},
		{"length 9", header(9, 2, 1, 0, 1), ""},
		{"reserved set", header(9, 2, 1, 1, 1), "WT_PROTOCOL_ERROR"},
		{"type 0x00", header(9, 0, 1, 0, 1), "WT_PROTOCOL_ERROR"},
		{"type 0x0A", header(9, 0x0a, 1, 0, 1), "WT_PROTOCOL_ERROR"},
		{"type 0xFF", header(9, 0xff, 1, 0, 1), "WT_PROTOCOL_ERROR"},
		{"codec 0x00", header(9, 2, 0, 0, 1), "WT_UNSUPPORTED_CODEC"},
		{"codec 0x02", header(9, 2, 2, 0, 1), ""},
		{"codec 0x03", header(9, 2, 3, 0, 1), "WT_UNSUPPORTED_CODEC"},
		{"EMIT 1048584", header(1048584, 2, 1, 0, 1), ""},
		{"EMIT 1048585", header(1048585, 2, 1, 0, 1), "WT_PAYLOAD_TOO_LARGE"},
		{"JOIN 1048585", header(1048585, 6, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"LEAVE 1048585", header(1048585, 7, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"HANDSHAKE 1048585", header(1048585, 1, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"CALL_CREDIT 1048585", header(1048585, 8, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"DATAGRAM 1048585", header(1048585, 9, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"CALL_REQUEST 1048585", header(1048585, 3, 1, 0, 1), ""},
		{"CALL_REQUEST 16777224", header(16777224, 3, 1, 0, 1), ""},
		{"CALL_REQUEST 16777225", header(16777225, 3, 1, 0, 1), "WT_PAYLOAD_TOO_LARGE"},
		{"CALL_RESPONSE 16777225", header(16777225, 4, 1, 0, 0), "WT_PAYLOAD_TOO_LARGE"},
		{"CALL_ERROR 16777224", header(16777224, 5, 1, 0, 0), ""},
		{"zero-filled", make([]byte, 32), "WT_PROTOCOL_ERROR"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseHeader(c.b)
			var fe *FrameError
			switch {
			case c.code == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case c.code != "" && (!errors.As(err, &fe) || fe.Code != c.code):
				t.Fatalf("got %v, want %s", err, c.code)
			}
		})
	}
}

// Checklist 34: every truncated prefix is ErrUnexpectedEOF; Len equals the
// bytes written.
func TestParseFrameTruncated(t *testing.T) {
	b := unhex(t, goldenEmitChat)
	for i := 0; i < len(b); i++ {
		if _, _, err := ParseFrame(b[:i]); err != io.ErrUnexpectedEOF {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
	f, n, err := ParseFrame(b)
	if err != nil || n != len(b) || f.Len() != len(b) || string(f.Payload) != `{"text":"hi"}` {
		t.Fatalf("ParseFrame = %+v %d %v", f, n, err)
	}
}

// oneByte yields one byte per Read.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:1]) }

// Checklist 34: frames split one byte at a time, or three in one read.
func TestDecoderSplitAndMerge(t *testing.T) {
	var stream []byte
	for i := 0; i < 3; i++ {
		stream = append(stream, unhex(t, goldenEmitChat)...)
	}
	for name, r := range map[string]io.Reader{"byte by byte": oneByte{bytes.NewReader(stream)}, "one read": bytes.NewReader(stream)} {
		d := NewDecoder(r)
		for i := 0; i < 3; i++ {
			f, err := d.Next()
			if err != nil || f.Type != FrameEmit || string(f.Payload) != `{"text":"hi"}` {
				t.Fatalf("%s: frame %d = %+v %v", name, i, f, err)
			}
		}
		if _, err := d.Next(); err != io.EOF {
			t.Fatalf("%s: after the last frame: %v", name, err)
		}
	}
}

// countingReader fails the test if more than max bytes are read.
type countingReader struct {
	r   io.Reader
	n   int
	max int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if len(p) > c.max-c.n {
		p = p[:c.max-c.n]
	}
	if len(p) == 0 {
		return 0, io.EOF
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// Checklist 31: an oversized EMIT is refused from its header, before a
// payload byte is buffered (the reader offers only the header).
func TestDecoderCapFromHeader(t *testing.T) {
	b := header(1048585, 2, 1, 0, 1)
	d := NewDecoder(&countingReader{r: bytes.NewReader(append(b, make([]byte, 64)...)), max: len(b)})
	_, err := d.Next()
	var fe *FrameError
	if !errors.As(err, &fe) || fe.Code != "WT_PAYLOAD_TOO_LARGE" {
		t.Fatalf("got %v", err)
	}
}

func TestFrameCheck(t *testing.T) {
	if err := (Frame{Type: FrameEmit, Codec: CodecJSON, EventID: 1}).Check(); err == nil {
		t.Error("empty payload accepted for sending")
	}
	if err := (Frame{Type: FrameEmit, Codec: CodecJSON, EventID: 1, Payload: make([]byte, MaxPayload+1)}).Check(); err == nil {
		t.Error("oversized EMIT accepted for sending")
	}
	if err := (Frame{Type: FrameCallResponse, Codec: CodecBytes, Payload: make([]byte, MaxPayload+1)}).Check(); err != nil {
		t.Errorf("CALL_RESPONSE of 1 MiB+1: %v", err)
	}
}
