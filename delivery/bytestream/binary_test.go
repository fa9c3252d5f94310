package bytestream

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"math"
	"strconv"
	"testing"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// maxText is the bound on one message's text the tests parse with (the
// transport-io EMIT payload's, 1 MiB).
const maxText = 1 << 20

func tcpDataText(channel string, off uint64, data []byte) string {
	return `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"` + channel + `","offset":` +
		strconv.FormatUint(off, 10) + `,"data":"` + base64.StdEncoding.EncodeToString(data) + `"}}`
}

// TestBinaryRoundTrip: every data message the encoder builds in binary
// form carries the stream bytes raw (not base64) and stands for the very
// text AppendData builds, of the size Data states; the text comes back
// from it both through the encoder (its delivery.TextForm) and through a
// receiver's parse.
func TestBinaryRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, '"', '\\'}, 40000)
	e := NewEncoder(rpc.TCPStream, "ahp-tcp:/c1")
	if !e.Binary() {
		t.Fatal("ahp-tcp:/c1 has no binary form")
	}
	for _, off := range []uint64{0, 9, 10, 1 << 40, math.MaxUint64} {
		for _, n := range []int{1, 2, 3, 4, 5, 6, 7, len(big)} {
			data := big[:n]
			text := e.AppendData(nil, DecodedOffset(off), data)
			if string(text) != tcpDataText("ahp-tcp:/c1", off, data) {
				t.Fatalf("the encoder's form changed: %.120s", text)
			}
			m := e.Data(DecodedOffset(off), data, true)
			if m.Text != nil || m.Form == nil {
				t.Fatalf("off %d n %d: %d bytes of text, form %v: want the binary form alone", off, n, len(m.Text), m.Form)
			}
			p := m.Binary
			if want := 8 + 2 + len("ahp-tcp:/c1") + n; len(p) != want || !bytes.Equal(p[len(p)-n:], data) {
				t.Fatalf("off %d n %d: payload of %d bytes, want %d ending with the data", off, n, len(p), want)
			}
			if m.Size != delivery.Measure(text) {
				t.Fatalf("off %d n %d: size %d, want the text's %d", off, n, m.Size, delivery.Measure(text))
			}
			l, err := binaryTextLen(p, maxText)
			if err != nil || l != len(text) {
				t.Fatalf("off %d n %d: text length %d %v, want %d", off, n, l, err, len(text))
			}
			if back := m.Form.AppendText(nil, p); !bytes.Equal(back, text) {
				t.Fatalf("off %d n %d: the form rebuilt %.120s, want %.120s", off, n, back, text)
			}
			if back, err := TextOfBinary(nil, p, maxText); err != nil || !bytes.Equal(back, text) {
				t.Fatalf("off %d n %d: parsed back to %.120s %v, want %.120s", off, n, back, err, text)
			}
			if tm := e.Data(DecodedOffset(off), data, false); !bytes.Equal(tm.Text, text) || tm.Binary != nil || tm.Size != m.Size {
				t.Fatalf("off %d n %d: the text form %.80s (%d bytes of binary, size %d)", off, n, tm.Text, len(tm.Binary), tm.Size)
			}
		}
	}
}

// TestBinaryHeader: a binary form read by a receiver gives the header and
// sizes of the very text it stands for (seed 000 "Message Size": windows
// count the text's UTF-16 bytes whichever form carried it), a non-ASCII
// channel included.
func TestBinaryHeader(t *testing.T) {
	for _, ch := range []string{"ahp-tcp:/c1", "ahp-tcp:/café-☕-𝄞"} {
		for _, n := range []int{1, 2, 3, 4, 300000} {
			data := bytes.Repeat([]byte{0xff, 0, '"'}, n)[:n]
			text := tcpDataText(ch, 1<<33+7, data)
			m := NewEncoder(rpc.TCPStream, ch).Data(1<<33+7, data, true)
			h, err := ParseBinary(m.Binary, maxText)
			if err != nil {
				t.Fatal(err)
			}
			d := h.Binary
			if h.Method != "tcp/data" || h.Channel != ch || h.Params != nil || !h.IsNotification() ||
				d.Offset != 1<<33+7 || !bytes.Equal(d.Data, data) {
				t.Fatalf("%s %d: header %+v, data %d bytes", ch, n, h, len(d.Data))
			}
			wantSize := delivery.Measure([]byte(text))
			if d.TextLen != len(text) || d.Size != wantSize || m.Size != wantSize || h.ASCII != (int(wantSize) == 2*len(text)) {
				t.Fatalf("%s %d: text %d bytes, %d UTF-16 bytes (sent as %d), ASCII %v; want %d, %d", ch, n, d.TextLen, d.Size, m.Size, h.ASCII, len(text), wantSize)
			}
		}
	}
}

// TestBinaryNone: a channel whose URI JSON escapes, or a method with no
// binary form, gets text however Data is asked.
func TestBinaryNone(t *testing.T) {
	for _, e := range []*Encoder{
		NewEncoder(rpc.TCPStream, `ahp-tcp:/c"1`),
		NewEncoder(rpc.TCPStream, `ahp-tcp:/c\1`),
		NewEncoder(rpc.TCPStream, "ahp-tcp:/c\n1"),
		NewEncoder(rpc.TCPStream, "ahp-tcp:/c\u20281"), // encoding/json escapes U+2028
		NewEncoder(rpc.StreamMethods{Data: "file/data", EOF: "file/eof", Reset: "file/reset"}, "ahp-file:/f1"),
	} {
		m := e.Data(3, []byte("Hello"), true)
		if e.Binary() || m.Binary != nil || !bytes.Equal(m.Text, e.AppendData(nil, 3, []byte("Hello"))) || m.Size != delivery.Measure(m.Text) {
			t.Errorf("%s: binary %v, message %q %q size %d", e.Channel(), e.Binary(), m.Text, m.Binary, m.Size)
		}
	}
}

// TestBinaryMalformed: a payload that stands for no data message is
// refused with a reason.
func TestBinaryMalformed(t *testing.T) {
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
		"text too big": append(hdr(0, "ahp-tcp:/c1"), make([]byte, maxText*3/4)...),
	} {
		if _, err := ParseBinary(p, maxText); !errors.Is(err, ErrBinary) {
			t.Errorf("%s: %v, want ErrBinary", name, err)
		}
	}
}

// FuzzBinary: any payload is either refused with ErrBinary or stands for
// a text of the announced length, which the encoder of its channel turns
// back into the very same payload.
func FuzzBinary(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0bahp-tcp:/c1Hello"))
	f.Add([]byte("\xff\xff\xff\xff\xff\xff\xff\xff\x00\x01\xe9x"))
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := ParseBinary(p, maxText)
		if err != nil {
			if !errors.Is(err, ErrBinary) {
				t.Fatalf("error %v is not ErrBinary", err)
			}
			return
		}
		text := AppendBinaryText(nil, h)
		if len(text) != h.Binary.TextLen || h.Binary.Size != delivery.Measure(text) {
			t.Fatalf("text of %d bytes (%d UTF-16), announced %d (%d)", len(text), delivery.Measure(text), h.Binary.TextLen, h.Binary.Size)
		}
		e := NewEncoder(rpc.TCPStream, h.Channel)
		if !e.Binary() {
			return // a channel encoding/json escapes (U+2028): sent as text, never in this form
		}
		m := e.Data(DecodedOffset(h.Binary.Offset), h.Binary.Data, true)
		if !bytes.Equal(m.Binary, p) || !bytes.Equal(e.AppendData(nil, DecodedOffset(h.Binary.Offset), h.Binary.Data), text) {
			t.Fatalf("%q: back %q", text, m.Binary)
		}
	})
}

// TestReadPayload: bytes read in place become the very message Data builds
// from them (binary form and text form, same size), read once and no more
// than asked; a short read holds a buffer at most twice its message; an
// empty read holds nothing and returns the reader's error.
func TestReadPayload(t *testing.T) {
	big := bytes.Repeat([]byte{0, 1, 2, 0xff, '"', '\\'}, 40000)
	e := NewEncoder(rpc.TCPStream, "ahp-tcp:/c1")
	for _, binary := range []bool{true, false} {
		for _, c := range []struct{ have, limit, want int }{{1, 4 << 10, 1}, {5000, 4 << 10, 4 << 10}, {len(big), 192 << 10, 192 << 10}, {3000, 192 << 10, 3000}} {
			r := bytes.NewReader(big[:c.have])
			pl, err := e.ReadPayload(r, c.limit, binary)
			if err != nil || pl.Len() != c.want || !bytes.Equal(pl.Bytes(), big[:c.want]) {
				t.Fatalf("binary %v, %d of %d: read %d %v, want the first %d bytes", binary, c.limit, c.have, pl.Len(), err, c.want)
			}
			if r.Len() != c.have-c.want {
				t.Fatalf("binary %v: %d bytes left in the reader, want %d (one read)", binary, r.Len(), c.have-c.want)
			}
			const off = DecodedOffset(1 << 33)
			want := e.Data(off, big[:c.want], binary)
			m := pl.Message(off)
			if !bytes.Equal(m.Binary, want.Binary) || !bytes.Equal(m.Text, want.Text) || m.Size != want.Size || (m.Form == nil) != (want.Form == nil) {
				t.Fatalf("binary %v, %d bytes: message %d+%d bytes size %d, want Data's %d+%d size %d",
					binary, c.want, len(m.Binary), len(m.Text), m.Size, len(want.Binary), len(want.Text), want.Size)
			}
			if binary && cap(m.Framed) > 2*len(m.Framed) {
				t.Fatalf("%d bytes read into a buffer of %d: a short read must not hold a long buffer", len(m.Framed), cap(m.Framed))
			}
			for _, m := range []delivery.Message{m, want} {
				if binary != (m.Framed != nil) {
					t.Fatalf("binary %v: Framed %d bytes", binary, len(m.Framed))
				}
				if binary && (len(m.Framed) != delivery.FrameRoom+len(m.Binary) || &m.Framed[delivery.FrameRoom] != &m.Binary[0]) {
					t.Fatalf("Framed is not the binary form's buffer from FrameRoom bytes before it")
				}
			}
		}
	}
	pl, err := e.ReadPayload(bytes.NewReader(nil), 4<<10, true)
	if err != io.EOF || pl.Len() != 0 || pl.b != nil {
		t.Fatalf("empty read: %d bytes, buffer %d, %v; want none and io.EOF", pl.Len(), cap(pl.b), err)
	}
	pl.Release() // nothing to give back: no panic
}
