package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/segmentio/asm/base64"

	"github.com/sidecar-dev/sidecar/adapters/tcp"
	"github.com/sidecar-dev/sidecar/delivery"
	"github.com/sidecar-dev/sidecar/rpc"
)

// TCPDataEvent is the contract's second event: reliable, codec bytes
// (seed 002 §5.3, 0x02). Each EMIT carries one tcp/data notification
// without its base64, the stream bytes as they are (docs/protocol.md
// "transport-io"). It is sent only to a peer whose handshake lists it
// (§4.3: an event known to one side only is legal, and one sent to a peer
// that does not know it would be dropped as WT_UNKNOWN_EVENT); to any other
// peer the same notification goes as JSON text on "ahp".
//
// Its payload is
//
//	Offset (64) | Channel Length (16) | Channel (Channel Length bytes) | Data (1 or more bytes)
//
// big-endian (§1): the notification's decoded-byte offset, the channel URI
// exactly as it stands between the quotes of its JSON text (UTF-8 with no
// '"', '\' or control characters: a URI that JSON would escape is sent as
// text), and the data decoded. The receiver rebuilds the exact text
//
//	{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"CHANNEL","offset":OFFSET,"data":"BASE64"}}
//
// (canonical padded base64 of Data, OFFSET in decimal without leading
// zeros) and handles it as if it had arrived on "ahp": windows, credit and
// frame limits count the UTF-16 bytes of that text (seed 000), so a peer's
// accounting is the same whichever event carried the message.
const TCPDataEvent = "ahp-tcp-data"

const (
	tcpDataHead   = `{"jsonrpc":"2.0","method":"tcp/data","params":{"channel":"`
	tcpDataOffset = `","offset":`
	tcpDataMid    = `,"data":"`
	tcpDataTail   = `"}}`
	// tcpBytesFixed is the payload's fixed part: offset and channel length.
	tcpBytesFixed = 8 + 2
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

// tcpDataToBytes appends to dst the TCPDataEvent payload of text when text
// is a tcp/data notification in the exact form our encoders build (see
// TCPDataEvent); ok is false for anything else (other messages, an
// escaped channel, no offset, data that is not canonical base64), which
// then goes as text.
func tcpDataToBytes(dst, text []byte) (out []byte, ok bool) {
	if len(text) < len(tcpDataHead)+len(tcpDataOffset)+1+len(tcpDataMid)+4+len(tcpDataTail) ||
		string(text[:len(tcpDataHead)]) != tcpDataHead || string(text[len(text)-len(tcpDataTail):]) != tcpDataTail {
		return dst, false
	}
	rest := text[len(tcpDataHead) : len(text)-len(tcpDataTail)]
	q := bytes.IndexByte(rest, '"')
	if q <= 0 || q > 0xFFFF || !plainJSONString(rest[:q]) {
		return dst, false
	}
	channel := rest[:q]
	rest = rest[q:]
	if !bytes.HasPrefix(rest, []byte(tcpDataOffset)) {
		return dst, false
	}
	rest = rest[len(tcpDataOffset):]
	d := bytes.IndexByte(rest, ',')
	if d <= 0 || d > 20 || (rest[0] == '0' && d > 1) {
		return dst, false
	}
	off, err := strconv.ParseUint(string(rest[:d]), 10, 64)
	if err != nil {
		return dst, false
	}
	rest = rest[d:]
	if !bytes.HasPrefix(rest, []byte(tcpDataMid)) {
		return dst, false
	}
	b64 := rest[len(tcpDataMid):]
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, off)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(channel)))
	dst = append(dst, channel...)
	out, err = tcp.AppendBase64Decode(dst, b64)
	if err != nil {
		return dst[:start], false
	}
	return out, true
}

// errTCPBytes is a TCPDataEvent payload that is not one (a protocol error:
// the session closes with 1004).
var errTCPBytes = errors.New("a malformed 'ahp-tcp-data' payload")

// tcpBytesTextLen returns the length of the text a TCPDataEvent payload
// stands for, or an error when it is malformed or that text would be over
// limit (UTF-8 bytes: the bound of one message of the transport).
func tcpBytesTextLen(p []byte, limit int) (int, error) {
	if len(p) < tcpBytesFixed {
		return 0, fmt.Errorf("%w: %d bytes", errTCPBytes, len(p))
	}
	n := int(binary.BigEndian.Uint16(p[8:10]))
	if n == 0 || len(p) < tcpBytesFixed+n+1 {
		return 0, fmt.Errorf("%w: a channel of %d bytes and %d bytes in all", errTCPBytes, n, len(p))
	}
	if !plainJSONString(p[tcpBytesFixed : tcpBytesFixed+n]) {
		return 0, fmt.Errorf("%w: the channel is not plain JSON string text", errTCPBytes)
	}
	off := binary.BigEndian.Uint64(p)
	data := len(p) - tcpBytesFixed - n
	l := len(tcpDataHead) + n + len(tcpDataOffset) + digits(off) + len(tcpDataMid) +
		base64.StdEncoding.EncodedLen(data) + len(tcpDataTail)
	if l > limit {
		// The bound of a text message holds for the text rebuilt too.
		return 0, fmt.Errorf("%w: its text would be %d bytes, over the %d of a message", errTCPBytes, l, limit)
	}
	return l, nil
}

// tcpBytesHeader returns the header of the tcp/data notification that
// TCPDataEvent payload p stands for, its TCPData a view of p (see
// rpc.TCPData), or the error of tcpBytesTextLen (errTCPBytes) when p is
// malformed or its text would be over limit (UTF-8 bytes).
func tcpBytesHeader(p []byte, limit int) (*rpc.Header, error) {
	l, err := tcpBytesTextLen(p, limit)
	if err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint16(p[8:10]))
	channel := p[tcpBytesFixed : tcpBytesFixed+n]
	// All of the text but the channel is ASCII: 2 UTF-16 bytes a byte.
	chSize := delivery.Measure(channel)
	return &rpc.Header{
		JSONRPC: "2.0",
		Method:  rpc.MethodTCPData,
		Channel: string(channel),
		ASCII:   chSize == delivery.UTF16Bytes(2*n),
		TCPData: &rpc.TCPData{
			Offset:  binary.BigEndian.Uint64(p),
			Data:    p[tcpBytesFixed+n:],
			TextLen: l,
			Size:    delivery.UTF16Bytes(2*(l-n)) + chSize,
		},
	}, nil
}

// AppendTCPDataText appends to dst the text of tcp/data notification h
// that came as bytes (h.TCPData set, see DataReader): the very text its
// sender's encoder built, h.TCPData.TextLen bytes (see TCPDataEvent).
func AppendTCPDataText(dst []byte, h *rpc.Header) []byte {
	d := h.TCPData
	dst = append(dst, tcpDataHead...)
	dst = append(dst, h.Channel...)
	dst = append(dst, tcpDataOffset...)
	dst = strconv.AppendUint(dst, d.Offset, 10)
	dst = append(dst, tcpDataMid...)
	e := base64.StdEncoding.EncodedLen(len(d.Data))
	l := len(dst)
	if cap(dst)-l < e {
		dst = append(dst, make([]byte, e)...)[:l]
	}
	base64.StdEncoding.Encode(dst[l:l+e], d.Data)
	dst = dst[:l+e]
	return append(dst, tcpDataTail...)
}

func digits(v uint64) int {
	n := 1
	for ; v >= 10; v /= 10 {
		n++
	}
	return n
}
