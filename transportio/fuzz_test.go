package transportio

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

func goldenBytes(s string) []byte {
	b, _ := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	return b
}

// FuzzFrames: the frame decoder, seeded with the reference bytes. A frame
// that parses re-encodes to the same bytes and length; the stream decoder
// agrees with ParseFrame however the input is split, and never returns a
// payload above its type's cap.
func FuzzFrames(f *testing.F) {
	f.Add(goldenBytes(goldenEmitChat))
	f.Add(append(goldenBytes(goldenHandshakeHdr), goldenHandshakeObj...))
	f.Add(append(goldenBytes(goldenCreditHdr), `{"credit":16}`...))
	f.Add(append(goldenBytes(goldenDatagramWrap), goldenBytes(goldenDatagram)...))
	f.Add(make([]byte, 32))
	f.Add(header(1048585, 2, 1, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		var frames []Frame
		rest := b
		for {
			fr, n, err := ParseFrame(rest)
			if err != nil {
				break
			}
			if fr.Len() != n || len(fr.Payload) > MaxPayloadFor(fr.Type) || len(fr.Payload) == 0 {
				t.Fatalf("frame %+v consumed %d", fr, n)
			}
			if enc := AppendFrame(nil, fr); !bytes.Equal(enc, rest[:n]) {
				t.Fatalf("re-encoded % x, parsed from % x", enc, rest[:n])
			}
			frames = append(frames, fr)
			rest = rest[n:]
		}
		d := NewDecoder(oneByte{bytes.NewReader(b)})
		for i := 0; ; i++ {
			fr, err := d.Next()
			if err != nil {
				if i != len(frames) {
					t.Fatalf("decoder stopped at %d of %d frames: %v", i, len(frames), err)
				}
				return
			}
			if i >= len(frames) || !reflect.DeepEqual(fr, frames[i]) {
				t.Fatalf("decoder frame %d = %+v", i, fr)
			}
		}
	})
}

// FuzzHandshake: the handshake parser never panics; what it accepts
// re-encodes to a handshake it accepts again, equal.
func FuzzHandshake(f *testing.F) {
	f.Add([]byte(goldenHandshakeObj))
	f.Add([]byte(`{"v":0,"feat":["x"],"events":[]}`))
	f.Add([]byte(`{"v":1,"feat":[],"events":[["a",0,"stream"]]}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := ParseHandshake(p)
		if err != nil {
			return
		}
		enc := AppendHandshake(nil, h)
		fr, _, err := ParseFrame(enc)
		if err != nil {
			return // a handshake over 1 MiB cannot be sent
		}
		h2, err := ParseHandshake(fr.Payload)
		if err != nil || !reflect.DeepEqual(h, h2) {
			raw, _ := json.Marshal(h)
			t.Fatalf("round trip of %s: %+v %v", raw, h2, err)
		}
		_, _ = Negotiate(testContract, nil, h)
	})
}

// FuzzDatagram: the datagram decoder never panics, accepts only datagrams
// with an event, a version 0 codec and a payload, and re-encodes them.
func FuzzDatagram(f *testing.F) {
	f.Add(goldenBytes(goldenDatagram))
	f.Add(make([]byte, 13))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok := ParseDatagram(b)
		if !ok {
			return
		}
		if d.EventID == 0 || !d.Codec.Valid() || len(d.Payload) == 0 || d.Len() != len(b) {
			t.Fatalf("accepted %+v", d)
		}
		if !bytes.Equal(AppendDatagram(nil, d), b) {
			t.Fatal("re-encoding differs")
		}
	})
}

var _ = io.EOF

// FuzzCallFrames: a call stream's bytes as either side reads them. The
// initiator's reader ends on anything that is not a CALL_RESPONSE of the
// declared codec or a well-formed CALL_ERROR; the responder accepts only a
// positive integer credit. Neither panics.
func FuzzCallFrames(f *testing.F) {
	f.Add(append(goldenBytes(goldenCreditHdr), `{"credit":16}`...))
	f.Add(AppendFrame(nil, Frame{Type: FrameCallResponse, Codec: CodecJSON, Payload: []byte(`{"a":1}`)}))
	f.Add(AppendFrame(nil, Frame{Type: FrameCallError, Codec: CodecJSON, Payload: []byte(`{"code":"WT_X","message":"m"}`)}))
	f.Add(AppendFrame(nil, Frame{Type: FrameCallCredit, Codec: CodecJSON, Payload: []byte(`{"credit":1.5}`)}))
	ev, _ := MustContract(Event{Name: "count", Shape: ShapeYields}).Lookup("count")
	f.Fuzz(func(t *testing.T, b []byte) {
		d := NewDecoder(bytes.NewReader(b))
		for {
			fr, done, err := readResponse(d, ev)
			if err == nil && !done && (fr.Type != FrameCallResponse || fr.Codec != CodecJSON || !json.Valid(fr.Payload)) {
				t.Fatalf("accepted %+v", fr)
			}
			if done || err != nil {
				break
			}
		}
		if fr, _, err := ParseFrame(b); err == nil {
			if n, ok := parseCredit(fr); ok && (n < 1 || fr.Type != FrameCallCredit) {
				t.Fatalf("credit %d from %+v", n, fr)
			}
		}
	})
}
