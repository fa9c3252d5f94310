package transportio

import (
	"bufio"
	"encoding/binary"
	"io"

	"github.com/sidecar-dev/sidecar/internal/bufpool"
)

// Frame is one stream frame (§5): a type, a codec, an event id and a
// payload of at least one byte.
type Frame struct {
	Type    FrameType
	Codec   Codec
	EventID uint32
	Payload []byte
}

// Header is the fixed 12-byte prefix of a frame.
type Header struct {
	// Length counts every byte after the Length field: 8 header bytes plus
	// the payload (§5.1).
	Length  uint32
	Type    FrameType
	Codec   Codec
	EventID uint32
}

// PayloadLen is the payload length the header announces.
func (h Header) PayloadLen() int { return int(h.Length) - 8 }

// MaxPayloadFor is the payload cap of frame type t (§5.1): 16 MiB for the
// call frames, 1 MiB for every other type.
func MaxPayloadFor(t FrameType) int {
	if t.isCallFrame() {
		return MaxCallPayload
	}
	return MaxPayload
}

// Len is the encoded length of f in bytes.
func (f Frame) Len() int { return FrameHeaderLen + len(f.Payload) }

// AppendFrame appends the encoding of f to b. It does not validate f; use
// Frame.Check first where the fields come from outside.
func AppendFrame(b []byte, f Frame) []byte {
	return append(appendHeader(b, f), f.Payload...)
}

// appendHeader appends the 12-byte header of f (its Length counts
// f.Payload) to b.
func appendHeader(b []byte, f Frame) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(8+len(f.Payload)))
	b = append(b, byte(f.Type), byte(f.Codec), 0, 0)
	return binary.BigEndian.AppendUint32(b, f.EventID)
}

// Check validates f for sending: a defined type, a version 0 codec, and a
// payload of 1 byte up to the type's cap.
func (f Frame) Check() error {
	if !f.Type.Valid() {
		return frameErr("WT_PROTOCOL_ERROR", "frame type %s is reserved", f.Type)
	}
	if !f.Codec.Valid() {
		return frameErr("WT_UNSUPPORTED_CODEC", "codec %s is not defined in version 0", f.Codec)
	}
	if len(f.Payload) == 0 {
		return frameErr("WT_PROTOCOL_ERROR", "a %s frame with an empty payload", f.Type)
	}
	if len(f.Payload) > MaxPayloadFor(f.Type) {
		return frameErr("WT_PAYLOAD_TOO_LARGE", "a %s payload of %d bytes exceeds %d", f.Type, len(f.Payload), MaxPayloadFor(f.Type))
	}
	return nil
}

// ParseHeader parses and validates the 12-byte header at the start of b. It
// returns io.ErrUnexpectedEOF when b is shorter than the header. The cap is
// decided from the type byte, so an oversized frame is refused before a
// payload byte is buffered (§5.1).
func ParseHeader(b []byte) (Header, error) {
	if len(b) < FrameHeaderLen {
		return Header{}, io.ErrUnexpectedEOF
	}
	h := Header{
		Length:  binary.BigEndian.Uint32(b),
		Type:    FrameType(b[4]),
		Codec:   Codec(b[5]),
		EventID: binary.BigEndian.Uint32(b[8:]),
	}
	if h.Length < MinFrameLength {
		return h, frameErr("WT_PROTOCOL_ERROR", "frame length %d is below the minimum of %d", h.Length, MinFrameLength)
	}
	if b[6] != 0 || b[7] != 0 {
		return h, frameErr("WT_PROTOCOL_ERROR", "reserved field is 0x%02x%02x, not zero", b[6], b[7])
	}
	if !h.Type.Valid() {
		return h, frameErr("WT_PROTOCOL_ERROR", "frame type 0x%02x is reserved", uint8(h.Type))
	}
	if !h.Codec.Valid() {
		return h, frameErr("WT_UNSUPPORTED_CODEC", "codec 0x%02x is not defined in version 0", uint8(h.Codec))
	}
	if h.PayloadLen() > MaxPayloadFor(h.Type) {
		return h, frameErr("WT_PAYLOAD_TOO_LARGE", "a %s frame of length %d exceeds the cap of %d", h.Type, h.Length, MaxPayloadFor(h.Type)+8)
	}
	return h, nil
}

// ParseFrame parses one frame at the start of b and returns it with the
// number of bytes consumed. The payload aliases b. A truncated frame
// returns io.ErrUnexpectedEOF.
func ParseFrame(b []byte) (Frame, int, error) {
	h, err := ParseHeader(b)
	if err != nil {
		return Frame{}, 0, err
	}
	n := FrameHeaderLen + h.PayloadLen()
	if len(b) < n {
		return Frame{}, 0, io.ErrUnexpectedEOF
	}
	return Frame{Type: h.Type, Codec: h.Codec, EventID: h.EventID, Payload: b[FrameHeaderLen:n]}, n, nil
}

// Decoder reads frames from a byte stream whose write boundaries carry no
// meaning (§5): a frame split over many reads or many frames in one read
// come out the same. The header is validated before any payload is read.
type Decoder struct {
	r   *bufio.Reader
	hdr [FrameHeaderLen]byte
	// MaxPayload, when non-zero, lowers every cap (never raises it).
	MaxPayload int
}

// NewDecoder returns a Decoder reading r.
func NewDecoder(r io.Reader) *Decoder { return &Decoder{r: bufio.NewReaderSize(r, 32<<10)} }

// Next returns the next frame, its payload in a buffer of its own (from
// a bounded pool: whoever is done with it may give it back with
// RecyclePayload, or simply drop it). At a clean
// end between frames it returns io.EOF; inside a frame io.ErrUnexpectedEOF;
// a violation is a *FrameError.
func (d *Decoder) Next() (Frame, error) {
	if _, err := io.ReadFull(d.r, d.hdr[:]); err != nil {
		return Frame{}, err
	}
	h, err := ParseHeader(d.hdr[:])
	if err != nil {
		return Frame{}, err
	}
	if d.MaxPayload > 0 && h.PayloadLen() > d.MaxPayload {
		return Frame{}, frameErr("WT_PAYLOAD_TOO_LARGE", "a %s payload of %d bytes exceeds this receiver's %d", h.Type, h.PayloadLen(), d.MaxPayload)
	}
	p := payloads.GetFit(h.PayloadLen())[:h.PayloadLen()]
	if _, err := io.ReadFull(d.r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Frame{}, err
	}
	return Frame{Type: h.Type, Codec: h.Codec, EventID: h.EventID, Payload: p}, nil
}

// payloads recycles the buffers Decoder.Next reads payloads into (a bulk
// receiver otherwise allocates and clears one of up to 1 MiB per frame):
// at most 8 are kept (bufpool: bounded).
var payloads = bufpool.New(8, 4<<10, MaxPayload)

// RecyclePayload gives back the payload of a frame or Message received
// from a session once nothing uses it any more (the next frame may be
// read into it). Giving back a buffer that is still in use corrupts data;
// not giving one back costs only an allocation.
func RecyclePayload(b []byte) { payloads.Put(b) }

// PayloadBuffer returns an empty buffer with room for n bytes from the
// pool RecyclePayload feeds (a message a consumer builds from a payload,
// given back the same way).
func PayloadBuffer(n int) []byte { return payloads.GetFit(n) }
