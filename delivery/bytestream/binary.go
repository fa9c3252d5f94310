package bytestream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/segmentio/asm/base64"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// The binary form of a data message (rpc.EventBinaryData: an EMIT of that
// event on transport-io, a binary WebSocket message on /ahp when the
// subprotocol of that name was chosen; docs/protocol.md "transport-io").
// It carries one rpc.BinaryDataMethod notification without its base64:
//
//	Offset (64) | Channel Length (16) | Channel (Channel Length bytes) | Data (1 or more bytes)
//
// big-endian (seed 002 §1): the notification's decoded-byte offset, the
// channel URI exactly as it stands between the quotes of its JSON text
// (UTF-8 with no '"', '\' or control characters: a channel that JSON would
// escape has no binary form), and the stream bytes. It stands for the
// exact text
//
//	{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"CHANNEL","offset":OFFSET,"data":"BASE64"}}
//
// (canonical padded base64 of Data, OFFSET in decimal without leading
// zeros), which windows, credit and frame limits count (seed 000): a
// peer's accounting is the same whichever form carried the message. The
// transports carry the form without looking inside it; the receiver parses
// it with ParseBinary.

const (
	binaryHead   = `{"jsonrpc":"2.0","method":"` + rpc.BinaryDataMethod + `","params":{"channel":"`
	binaryOffset = `","offset":`
	binaryMid    = `,"data":"`
	binaryTail   = `"}}`
	// binaryFixed is the payload's fixed part: offset and channel length.
	binaryFixed = 8 + 2
	// maxBinaryChannel is the longest channel a binary form can name.
	maxBinaryChannel = 0xFFFF
)

// plainJSONString reports whether s can stand between the quotes of a
// JSON string as it is: valid UTF-8 without '"', '\' or control
// characters, so that text and bytes map one to one.
func plainJSONString(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(s)
}

// Data returns the data message carrying p (non-empty) at offset off: its
// binary form when binary is true and the channel has one (Binary), else
// its text; in a buffer from Buffer, and with its exact size (the text's
// UTF-16 bytes, known from the length: nothing is measured). Its Form
// rebuilds the text from the binary form (AppendText). A binary form is
// built behind delivery.FrameRoom bytes of room (Message.Framed).
func (e *Encoder) Data(off DecodedOffset, p []byte, binary bool) delivery.Message {
	textLen := e.DataLen(off, len(p))
	size := e.DataSize(textLen)
	if binary && e.binary {
		b := Buffer(delivery.FrameRoom + binaryFixed + len(e.channel) + len(p))[:delivery.FrameRoom]
		b = appendBinary(b, off, e.channel, p)
		return delivery.Message{Binary: b[delivery.FrameRoom:], Framed: b, Size: size, Form: e}
	}
	return delivery.Message{Text: e.AppendData(Buffer(textLen), off, p), Size: size}
}

// A Payload is stream bytes read in place into the buffer of the data
// message that will carry them (ReadPayload): in the binary form, after
// the room left for its head, so the bytes are never copied between the
// read and the transport's write. Message or Release ends it.
type Payload struct {
	e    *Encoder
	b    []byte // the buffer: head room then the bytes (binary), or the bytes
	head int    // the head room (binary form: frame room and the form's head), or -1 (text form)
}

// ReadPayload reads once from r, at most limit stream bytes (limit >= 1),
// into a Payload that becomes a data message in the binary form when
// binary is true and the channel has one (Data). Its buffer is at most
// twice what it holds (a short read is copied to one that fits). The
// error is r's; a Payload of no bytes holds no buffer.
func (e *Encoder) ReadPayload(r io.Reader, limit int, binary bool) (Payload, error) {
	head := -1
	if binary && e.binary {
		head = delivery.FrameRoom + binaryFixed + len(e.channel)
	}
	room := max(head, 0)
	b := Buffer(room + limit)[:room+limit]
	n, err := r.Read(b[room:])
	if n <= 0 {
		Recycle(b)
		return Payload{}, err
	}
	if room+n <= cap(b)/2 {
		// A short read keeps no buffer sized for long ones: the message
		// may wait in a queue bounded by what it counts, not its buffer.
		short := append(msgBufs.GetFit(room+n), b[:room+n]...)
		Recycle(b)
		b = short
	}
	return Payload{e: e, b: b[:room+n], head: head}, err
}

// Bytes returns the stream bytes read (valid until Message or Release).
func (p Payload) Bytes() []byte { return p.b[max(p.head, 0):] }

// Len returns the count of stream bytes read.
func (p Payload) Len() int { return len(p.b) - max(p.head, 0) }

// Message returns the data message carrying the bytes at offset off
// (their count at most MaxPayload(off, the frame bound)), with the exact
// size Data gives it; it owns the buffer from then on.
func (p Payload) Message(off DecodedOffset) delivery.Message {
	if p.head < 0 {
		m := p.e.Data(off, p.b, false)
		Recycle(p.b)
		return m
	}
	b := appendBinary(p.b[:delivery.FrameRoom], off, p.e.channel, nil)[:len(p.b)]
	return delivery.Message{Binary: b[delivery.FrameRoom:], Framed: b, Size: p.e.DataSize(p.e.DataLen(off, p.Len())), Form: p.e}
}

// Release gives the buffer back without sending it.
func (p Payload) Release() {
	if p.b != nil {
		Recycle(p.b)
	}
}

func appendBinary(dst []byte, off DecodedOffset, channel string, p []byte) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(off))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(channel)))
	dst = append(dst, channel...)
	return append(dst, p...)
}

// AppendText implements delivery.TextForm: the text that b, a binary form
// Data built, stands for.
func (e *Encoder) AppendText(dst, b []byte) []byte {
	n := int(binary.BigEndian.Uint16(b[8:10]))
	return e.AppendData(dst, DecodedOffset(binary.BigEndian.Uint64(b)), b[binaryFixed+n:])
}

// ErrBinary is a binary form that is not one (a protocol error: the
// connection is closed, 1002 on /ahp and 1004 on transport-io).
var ErrBinary = errors.New("a malformed '" + rpc.EventBinaryData + "' payload")

// binaryTextLen returns the length of the text a binary form stands for,
// or an error (ErrBinary) when it is malformed or that text would be over
// limit (UTF-8 bytes: the bound of one message of the transport).
func binaryTextLen(p []byte, limit int) (int, error) {
	if len(p) < binaryFixed {
		return 0, fmt.Errorf("%w: %d bytes", ErrBinary, len(p))
	}
	n := int(binary.BigEndian.Uint16(p[8:10]))
	if n == 0 || len(p) < binaryFixed+n+1 {
		return 0, fmt.Errorf("%w: a channel of %d bytes and %d bytes in all", ErrBinary, n, len(p))
	}
	if !plainJSONString(p[binaryFixed : binaryFixed+n]) {
		return 0, fmt.Errorf("%w: the channel is not plain JSON string text", ErrBinary)
	}
	off := binary.BigEndian.Uint64(p)
	data := len(p) - binaryFixed - n
	l := len(binaryHead) + n + len(binaryOffset) + digits(DecodedOffset(off)) + len(binaryMid) +
		base64.StdEncoding.EncodedLen(data) + len(binaryTail)
	if l > limit {
		// The bound of a text message holds for the text rebuilt too.
		return 0, fmt.Errorf("%w: its text would be %d bytes, over the %d of a message", ErrBinary, l, limit)
	}
	return l, nil
}

// ParseBinary returns the header of the data notification that binary form
// p stands for, its Binary a view of p (see rpc.BinaryData), or an error
// (ErrBinary) when p is malformed or its text would be over limit (UTF-8
// bytes: the transport's bound on one message, transport.ReadLimit).
func ParseBinary(p []byte, limit int) (*rpc.Header, error) {
	l, err := binaryTextLen(p, limit)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(p[8:10]))
	channel := p[binaryFixed : binaryFixed+n]
	// All of the text but the channel is ASCII: 2 UTF-16 bytes a byte.
	chSize := delivery.Measure(channel)
	return &rpc.Header{
		JSONRPC: "2.0",
		Method:  rpc.BinaryDataMethod,
		Channel: string(channel),
		ASCII:   chSize == delivery.UTF16Bytes(2*n),
		Binary: &rpc.BinaryData{
			Offset:  binary.BigEndian.Uint64(p),
			Data:    p[binaryFixed+n:],
			TextLen: l,
			Size:    delivery.UTF16Bytes(2*(l-n)) + chSize,
		},
	}, nil
}

// AppendBinaryText appends to dst the text of data notification h that
// came in binary form (h.Binary set, see ParseBinary): the very text its
// sender's encoder built, h.Binary.TextLen bytes.
func AppendBinaryText(dst []byte, h *rpc.Header) []byte {
	d := h.Binary
	dst = append(dst, binaryHead...)
	dst = append(dst, h.Channel...)
	dst = append(dst, binaryOffset...)
	dst = strconv.AppendUint(dst, d.Offset, 10)
	dst = append(dst, binaryMid...)
	dst = appendBase64Encode(dst, d.Data)
	return append(dst, binaryTail...)
}

// TextOfBinary returns the text binary form p stands for, or ErrBinary
// (limit as ParseBinary's): for a reader that wants every message as text.
func TextOfBinary(dst, p []byte, limit int) ([]byte, error) {
	h, err := ParseBinary(p, limit)
	if err != nil {
		return dst, err
	}
	return AppendBinaryText(dst, h), nil
}
