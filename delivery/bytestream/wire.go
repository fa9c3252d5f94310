package bytestream

import (
	"bytes"
	stdbase64 "encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/segmentio/asm/base64"

	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/internal/bufpool"
	"github.com/sidecar-dev/sidecar/rpc"
)

// DecodedOffset is a position in one direction of a byte stream: the
// number of stream bytes (after base64 decoding) before it. A data message
// carries the offset of its first byte, the end of stream the final offset
// (our extension, docs/protocol.md "TCP channels").
type DecodedOffset uint64

// Encoder builds the data and control messages of one byte-stream channel,
// byte-exactly, with the channel URI escaped once. For the TCP channel
// (rpc.TCPStream):
//
//	{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"ahp-tcp:/t1","offset":0,"data":"SGVsbG8="}}
//	{"jsonrpc":"2.0","method":"tcp/eof","params":{"channel":"ahp-tcp:/t1","offset":5}}
//	{"jsonrpc":"2.0","method":"tcp/reset","params":{"channel":"ahp-tcp:/t1"}}
//
// It is also the delivery.TextForm of the binary forms it builds (Data).
// Safe for concurrent use (it is not modified after NewEncoder).
type Encoder struct {
	methods    rpc.StreamMethods
	channel    string
	dataPrefix []byte // through `"offset":`
	prefixSize delivery.UTF16Bytes
	// binary: the data method has a binary form (rpc.BinaryDataMethod)
	// and the channel URI stands unescaped in the text, so binary form and
	// text map one to one.
	binary bool
}

const (
	dataMid    = `,"data":"`
	dataSuffix = `"}}`
)

// NewEncoder returns the Encoder of channel, a channel whose messages m
// names.
func NewEncoder(m rpc.StreamMethods, channel string) *Encoder {
	ch, _ := rpc.Marshal(channel) // a string always encodes
	method, _ := rpc.Marshal(m.Data)
	prefix := append([]byte(`{"jsonrpc":"2.0","method":`), method...)
	prefix = append(prefix, `,"params":{"channel":`...)
	prefix = append(prefix, ch...)
	prefix = append(prefix, `,"offset":`...)
	// A binary form names the channel as it stands in the text, so only a
	// channel that JSON carries unescaped has one (encoding/json escapes
	// U+2028 and U+2029, which plainJSONString lets through).
	plain := string(ch) == `"`+channel+`"` && plainJSONString([]byte(channel))
	return &Encoder{methods: m, channel: channel, dataPrefix: prefix, prefixSize: delivery.Measure(prefix),
		binary: m.Data == rpc.BinaryDataMethod && len(channel) <= maxBinaryChannel && plain}
}

// Binary reports whether the channel's data messages have a binary form
// (Data with binary true builds it).
func (e *Encoder) Binary() bool { return e.binary }

// Channel returns the channel URI.
func (e *Encoder) Channel() string { return e.channel }

// Methods returns the stream's method names.
func (e *Encoder) Methods() rpc.StreamMethods { return e.methods }

// AppendData appends the data message carrying p (non-empty) at offset
// off to dst: its text.
func (e *Encoder) AppendData(dst []byte, off DecodedOffset, p []byte) []byte {
	dst = append(dst, e.dataPrefix...)
	dst = strconv.AppendUint(dst, uint64(off), 10)
	dst = append(dst, dataMid...)
	dst = appendBase64Encode(dst, p)
	return append(dst, dataSuffix...)
}

// msgBufs recycles the buffers of data messages once the transport
// has written them (delivery.Recycler): a bulk transfer otherwise
// allocates, clears and faults in a fresh buffer of up to a frame for
// every message. At most 8 are kept (bufpool: bounded).
var msgBufs = bufpool.New(8, 4<<10, 1<<20)

// Buffer returns an empty buffer with room for n bytes, recycled when one
// is free.
func Buffer(n int) []byte { return msgBufs.Get(n) }

// Recycle gives a message's buffer back for Buffer (buffers over 1 MiB or
// under 4 KiB are left to the collector). The caller must not use b again.
func Recycle(b []byte) { msgBufs.Put(b) }

// RecycleMessage gives back the buffer of a message Data built: its binary
// form's (from its frame room: Framed), or its text's.
func RecycleMessage(m delivery.Message) {
	if m.Framed != nil {
		Recycle(m.Framed)
		return
	}
	if m.Binary != nil {
		Recycle(m.Binary)
		return
	}
	Recycle(m.Text)
}

// DataSize returns the exact size in UTF-16 bytes of a data message of n
// UTF-8 bytes that AppendData built: the channel, measured once, and 2 for
// each other (ASCII) byte.
func (e *Encoder) DataSize(n int) delivery.UTF16Bytes {
	return e.prefixSize + delivery.UTF16Bytes(2*(n-len(e.dataPrefix)))
}

// DataLen returns the UTF-8 length of the data message AppendData builds
// for n bytes at off (also its UTF-16 size / 2: it is all ASCII
// except for the channel).
func (e *Encoder) DataLen(off DecodedOffset, n int) int {
	return len(e.dataPrefix) + digits(off) + len(dataMid) + base64.StdEncoding.EncodedLen(n) + len(dataSuffix)
}

// MaxPayload returns the most stream bytes one data message at offset off
// can carry and still be at most maxFrame UTF-16 bytes whole (so it
// never needs channel/frame fragments); 0 if not even one byte fits.
func (e *Encoder) MaxPayload(off DecodedOffset, maxFrame delivery.UTF16Bytes) int {
	fixed := e.prefixSize + delivery.UTF16Bytes(2*(digits(off)+len(dataMid)+len(dataSuffix)))
	if maxFrame <= fixed {
		return 0
	}
	chars := int((maxFrame - fixed) / 2) // base64 is ASCII: 2 UTF-16 bytes a character
	return chars / 4 * 3
}

// EOF returns the end of stream (tcp/eof) with the final offset.
func (e *Encoder) EOF(final DecodedOffset) []byte {
	b, _ := rpc.Notification(e.methods.EOF, EOFParams{Channel: e.channel, Offset: &final})
	return b
}

// Reset returns the reset (tcp/reset, a control message: never counted).
func (e *Encoder) Reset() []byte {
	b, _ := rpc.Notification(e.methods.Reset, rpc.ChannelParams{Channel: e.channel})
	return b
}

func digits(off DecodedOffset) int {
	n := 1
	for v := uint64(off); v >= 10; v /= 10 {
		n++
	}
	return n
}

// DataParams is the wire form of a data message's params (tcp/data).
// Offset is our extension: absent, the data follows the previous bytes.
type DataParams struct {
	Channel string         `json:"channel"`
	Offset  *DecodedOffset `json:"offset,omitempty"`
	Data    string         `json:"data"`
}

// EOFParams is the params of the end of stream (tcp/eof); Offset (our
// extension) is the final offset of the sender's direction.
type EOFParams struct {
	Channel string         `json:"channel"`
	Offset  *DecodedOffset `json:"offset,omitempty"`
}

// ParseData decodes a data message's params: data must be non-empty canonical
// padded base64 (RFC 4648 §4, no line breaks, zero pad bits). Errors wrap
// ErrProtocol.
func ParseData(params json.RawMessage) (p DataParams, data []byte, err error) {
	return AppendData(nil, params)
}

// AppendData is ParseData decoding into dst: it appends the data to dst
// and returns the extended slice (the data is out[len(dst):]), so a
// receiver can decode every message into one reused buffer. On error out
// is dst.
func AppendData(dst []byte, params json.RawMessage) (p DataParams, out []byte, err error) {
	// Fastest: the data string found with one IndexByte, its characters
	// left to the strict decoder. A successful decode proves the text had
	// no escapes, control or non-ASCII characters, so the string really
	// ended at that quote; anything else goes the careful way below.
	if fp, raw, ok := scanDataMode(params, true); ok {
		if out, err := appendBase64(dst, raw); err == nil {
			return fp, out, nil
		}
	}
	if fp, raw, ok := scanData(params); ok {
		out, err = appendBase64(dst, raw)
		return fp, out, err
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return p, dst, fmt.Errorf("%w: data params: %v", ErrProtocol, err)
	}
	out, err = appendBase64(dst, []byte(p.Data))
	return p, out, err
}

// AppendMessageData is AppendData for a data notification that came as
// text (params) or in binary form (d, when not nil: its data is copied, so
// the message's buffer can be recycled at once; rpc.Header.Binary).
func AppendMessageData(dst []byte, params json.RawMessage, d *rpc.BinaryData) (DataParams, []byte, error) {
	if d == nil {
		return AppendData(dst, params)
	}
	off := DecodedOffset(d.Offset)
	return DataParams{Offset: &off}, append(dst, d.Data...), nil
}

// DecodeBase64 decodes canonical padded base64, non-empty.
func DecodeBase64(s string) ([]byte, error) { return appendBase64(nil, []byte(s)) }

// AppendBase64Decode appends the decoding of s (non-empty canonical padded
// base64, as a data message's data) to dst; on error (an ErrProtocol) it returns
// dst unchanged.
func AppendBase64Decode(dst, s []byte) ([]byte, error) { return appendBase64(dst, s) }

// appendBase64Encode appends the standard padded base64 of p to dst.
// segmentio/asm encodes with AVX2 where the CPU has it (about 16x
// encoding/base64 on the 2-core benchmark machine), else like the
// standard library.
func appendBase64Encode(dst, p []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(p))
	dst = slices.Grow(dst, n)
	base64.StdEncoding.Encode(dst[len(dst):len(dst)+n], p)
	return dst[:len(dst)+n]
}

var strictBase64 = stdbase64.StdEncoding.Strict()

// appendBase64 appends the decoding of s (non-empty canonical padded
// base64) to dst; on error it returns dst unchanged.
//
// The vector decoder (segmentio/asm) skips CR and LF and does not check
// the pad bits, so canonical form is checked around it: the text must be
// exactly as long as the encoding of what it decoded to (no skipped
// characters), and its last quantum must decode under the strict standard
// decoder (zero pad bits).
func appendBase64(dst, s []byte) ([]byte, error) {
	if len(s) == 0 {
		return dst, fmt.Errorf("%w: data message with empty data", ErrProtocol)
	}
	dl := base64.StdEncoding.DecodedLen(len(s))
	out := slices.Grow(dst, dl)
	n, err := base64.StdEncoding.Decode(out[len(dst):len(dst)+dl], s)
	if err != nil || base64.StdEncoding.EncodedLen(n) != len(s) {
		return dst, errNotCanonical
	}
	if s[len(s)-1] == '=' {
		var q [3]byte
		if _, err := strictBase64.Decode(q[:], s[len(s)-4:]); err != nil {
			return dst, errNotCanonical
		}
	}
	return out[:len(dst)+n], nil
}

var errNotCanonical = fmt.Errorf("%w: data is not canonical padded base64", ErrProtocol)

// ParseEOF decodes the end of stream's params.
func ParseEOF(params json.RawMessage) (EOFParams, error) {
	var p EOFParams
	if err := json.Unmarshal(params, &p); err != nil {
		return p, fmt.Errorf("%w: end of stream params: %v", ErrProtocol, err)
	}
	return p, nil
}

// Trim applies the receiver's duplicate rule to data that starts at off
// (nil means "right after the previous bytes") when the receiver has
// already accepted next bytes: bytes below next are dropped (a resend),
// a start beyond next is a gap (ErrProtocol).
func Trim(off *DecodedOffset, data []byte, next DecodedOffset) ([]byte, error) {
	if off == nil || *off == next {
		return data, nil
	}
	if *off > next {
		return nil, fmt.Errorf("%w: data at offset %d, but only %d bytes arrived before it", ErrProtocol, *off, next)
	}
	dup := uint64(next - *off)
	if dup >= uint64(len(data)) {
		return nil, nil
	}
	return data[dup:], nil
}

// scanData is the fast path of ParseData (p.Data stays empty: data is the
// base64 text, not copied): one pass over params of the
// plain shape every encoder produces ({"channel":S,"offset":N,"data":S} in
// any order, strings without escapes, optional white space). Anything
// else (escapes, other members, nesting) reports false and goes through
// encoding/json.
func scanData(b []byte) (p DataParams, data []byte, ok bool) {
	return scanDataMode(b, false)
}

// scanDataMode is scanData; with loose, the data string ends at the first
// '"' and its characters are not checked (the caller's strict base64
// decode must reject anything but the base64 alphabet and '=').
func scanDataMode(b []byte, loose bool) (p DataParams, data []byte, ok bool) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return p, nil, false
	}
	i++
	var haveData bool
	for {
		i = skipWS(b, i)
		key, j, ok := scanString(b, i)
		if !ok {
			return p, nil, false
		}
		i = skipWS(b, j)
		if i >= len(b) || b[i] != ':' {
			return p, nil, false
		}
		i = skipWS(b, i+1)
		switch string(key) {
		case "data":
			var v []byte
			var j int
			var ok bool
			switch {
			case !loose:
				v, j, ok = scanString(b, i)
			case haveData: // only the decoded string may be scanned loosely
				return p, nil, false
			default:
				v, j, ok = scanLoose(b, i)
			}
			if !ok {
				return p, nil, false
			}
			data, haveData = v, true
			i = j
		case "channel":
			v, j, ok := scanString(b, i)
			if !ok {
				return p, nil, false
			}
			p.Channel = string(v)
			i = j
		case "offset":
			j := i
			var n uint64
			for j < len(b) && b[j] >= '0' && b[j] <= '9' {
				if j-i >= 19 { // larger than any offset we accept: let encoding/json decide
					return p, nil, false
				}
				n = n*10 + uint64(b[j]-'0')
				j++
			}
			if j == i || (b[i] == '0' && j-i > 1) {
				return p, nil, false
			}
			off := DecodedOffset(n)
			p.Offset = &off
			i = j
		default:
			return p, nil, false
		}
		i = skipWS(b, i)
		if i >= len(b) {
			return p, nil, false
		}
		if b[i] == ',' {
			i++
			continue
		}
		if b[i] != '}' || skipWS(b, i+1) != len(b) {
			return p, nil, false
		}
		return p, data, haveData
	}
}

// scanString returns the contents of the JSON string at b[i:] when it has
// no escapes and no control characters, and the index after it.
func scanString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	j := i + 1
	// Eight bytes at a time while none is special ('"', '\\', a control
	// character or non-ASCII): base64 data is all plain.
	for ; j+8 <= len(b); j += 8 {
		v := binary.LittleEndian.Uint64(b[j:])
		if special(v) {
			break
		}
	}
	for ; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80: // escapes, control, non-ASCII: encoding/json
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// scanLoose returns the bytes from the '"' at b[i] to the next '"' and
// the index after it, without looking at them.
func scanLoose(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	k := bytes.IndexByte(b[i+1:], '"')
	if k < 0 {
		return nil, 0, false
	}
	return b[i+1 : i+1+k], i + 2 + k, true
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// special reports whether a word of eight bytes holds '"', '\\', a byte
// below 0x20 or one at or above 0x80 (SWAR: each test sets the top bit of
// the bytes concerned; false positives are impossible for ASCII words).
func special(v uint64) bool {
	hasZero := func(x uint64) uint64 { return (x - lsb) &^ x & msb }
	quote := hasZero(v ^ (lsb * '"'))
	bslash := hasZero(v ^ (lsb * '\\'))
	ctrl := (v - lsb*0x20) &^ v & msb
	return quote|bslash|ctrl|(v&msb) != 0
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
