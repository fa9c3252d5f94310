package delivery

import (
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// The fixed parts of the notifications built here. Texts are compact (no
// whitespace) with members in this order, so sizes are exact.
const (
	frameHead   = `{"jsonrpc":"2.0","method":"channel/frame","params":{"channel":`
	frameData   = `,"data":`
	frameTail   = `}}`
	creditHead  = `{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":`
	creditValue = `,"consumedBytes":`
)

// escUnits[b] is the number of UTF-16 code units that ASCII byte b takes
// inside a JSON string as written by AppendJSONString: 1 for itself, 2 for
// \" \\ \b \f \n \r \t, 6 for another control character (\u00XX).
var escUnits = func() (t [utf8.RuneSelf]uint8) {
	for b := range t {
		switch {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			t[b] = 2
		case b < 0x20:
			t[b] = 6
		default:
			t[b] = 1
		}
	}
	return t
}()

const (
	lsb = 0x0101010101010101
	// bytes of '"' and '\\' in every lane, for the SWAR equality test.
	quotes     = '"' * lsb
	backslashs = '\\' * lsb
)

// hasZero reports whether any byte of v is zero (exact, the classic
// (v − 0x01…) & ^v & 0x80… test).
func hasZero(v uint64) bool { return (v-lsb)&^v&asciiMask != 0 }

// plain reports whether all eight bytes of v are ASCII that JSON strings
// carry as is: not a control character, not '"', not '\\', not >= 0x80.
func plain(v uint64) bool {
	// v-0x20… borrows into the high bit of a lane below 0x20; with the
	// high bits clear (checked first) this is exact.
	return v&asciiMask == 0 && (v-0x20*lsb)&^v&asciiMask == 0 &&
		!hasZero(v^quotes) && !hasZero(v^backslashs)
}

const hexDigits = "0123456789abcdef"

// AppendJSONString appends s as a JSON string, escaped the way JavaScript's
// JSON.stringify does it: '"' and '\\' escaped, \b \f \n \r \t in short
// form, other C0 controls as \u00XX (lowercase hex), nothing else escaped
// (no HTML escaping; U+2028, U+2029 and DEL left as they are; non-ASCII left
// as UTF-8). Each byte that is not valid UTF-8 is written as U+FFFD.
func AppendJSONString(dst []byte, s string) []byte { return appendJSON(dst, s) }

// AppendJSONBytes is AppendJSONString for text in a byte slice.
func AppendJSONBytes(dst []byte, b []byte) []byte { return appendJSON(dst, b) }

func appendJSON[T ~string | ~[]byte](dst []byte, s T) []byte {
	dst = append(dst, '"')
	start := 0 // s[start:i] is waiting to be copied as is
	for i := 0; i < len(s); {
		if i+8 <= len(s) && plain(load64(s, i)) {
			i += 8
			continue
		}
		// Not a plain word: go through up to eight bytes one character at a
		// time before trying a whole word again.
		for end := min(i+8, len(s)); i < end; {
			b := s[i]
			if b < utf8.RuneSelf {
				i++
				if escUnits[b] == 1 {
					continue
				}
				dst = append(dst, s[start:i-1]...)
				start = i
				switch b {
				case '"', '\\':
					dst = append(dst, '\\', b)
				case '\b':
					dst = append(dst, '\\', 'b')
				case '\f':
					dst = append(dst, '\\', 'f')
				case '\n':
					dst = append(dst, '\\', 'n')
				case '\r':
					dst = append(dst, '\\', 'r')
				case '\t':
					dst = append(dst, '\\', 't')
				default:
					dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
				}
				continue
			}
			r, size := decodeRune(s, i)
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, "\uFFFD"...)
				start = i + 1
			}
			i += size
		}
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonStringSize is the size of appendJSON(nil, s), quotes included.
func jsonStringSize[T ~string | ~[]byte](s T) UTF16Bytes {
	units := 2
	for i := 0; i < len(s); {
		c, size := charUnits(s, i)
		units += c
		i += size
	}
	return UTF16Bytes(units) * 2
}

// charUnits returns the UTF-16 code units that the character at s[i] takes
// inside a JSON string written by appendJSON, and its length in bytes.
func charUnits[T ~string | ~[]byte](s T, i int) (units, size int) {
	if b := s[i]; b < utf8.RuneSelf {
		return int(escUnits[b]), 1
	}
	r, size := decodeRune(s, i)
	if r >= 0x10000 {
		return 2, size // a surrogate pair, never divided
	}
	return 1, size // BMP, or an invalid byte written as U+FFFD
}

// AppendFrame appends a channel/frame notification carrying data, a piece of
// a serialized message:
//
//	{"jsonrpc":"2.0","method":"channel/frame","params":{"channel":<channel>,"data":<data>}}
//
// and, when final, {…,"data":<data>,"final":true}}. Its size is
// FrameOverhead(channel, final) plus the escaped size of data.
func AppendFrame(dst []byte, channel string, data []byte, final bool) []byte {
	dst = append(dst, frameHead...)
	dst = appendJSON(dst, channel)
	dst = append(dst, frameData...)
	dst = appendJSON(dst, data)
	if final {
		dst = append(dst, finalMember...)
	}
	return append(dst, frameTail...)
}

// AppendCredit appends a channel/credit notification:
//
//	{"jsonrpc":"2.0","method":"channel/credit","params":{"channel":<channel>,"consumedBytes":N}}
func AppendCredit(dst []byte, channel string, consumedBytes UTF16Bytes) []byte {
	dst = append(dst, creditHead...)
	dst = appendJSON(dst, channel)
	dst = append(dst, creditValue...)
	dst = strconv.AppendInt(dst, int64(consumedBytes), 10)
	return append(dst, frameTail...)
}

// FrameOverhead returns the size of AppendFrame(nil, channel, nil, final):
// the envelope that each fragment adds to its data.
func FrameOverhead(channel string, final bool) UTF16Bytes {
	n := UTF16Bytes(len(frameHead)+len(frameData)+len(`""`)+len(frameTail))*2 + jsonStringSize(channel)
	if final {
		n += UTF16Bytes(len(finalMember)) * 2
	}
	return n
}

// ErrFrameTooSmall is returned by Fragmenter.Next when the budget cannot
// carry even the next character (with the final member, if it is the last
// one). A budget of at least MinFrameBudget(channel) never gets it.
var ErrFrameTooSmall = errors.New("delivery: frame budget cannot carry one character")

// Fragmenter splits one serialized data message, its exact JSON text, into
// channel/frame notifications (seed 000 "Fragments"). Joining the data of
// its frames in order gives the message back (each invalid UTF-8 byte, which
// serialized JSON never has, comes back as U+FFFD). It holds the message and
// a position; it copies nothing until Next writes a frame.
type Fragmenter struct {
	channel  string
	message  []byte
	pos      int
	overhead UTF16Bytes // FrameOverhead(channel, false)
}

// NewFragmenter returns a Fragmenter for message on channel. The message is
// not copied and must not change until Done. An empty message is Done at
// once (a data message is never empty, and data must not be).
func NewFragmenter(channel string, message []byte) *Fragmenter {
	return &Fragmenter{channel: channel, message: message, overhead: FrameOverhead(channel, false)}
}

// Next appends the next fragment to dst and returns it (dst plus the
// notification, like AppendFrame), with the size of the notification alone
// and whether it is the final fragment. The notification is at most budget
// UTF-16 bytes, escaping included, and carries as much of the rest of the
// message as fits: never empty data, never part of a UTF-8 sequence, so never
// half of a surrogate pair. final is set on the fragment that carries the
// end of the message.
//
// The caller picks budget: min(MaximumFrameBytes, max(remaining credit,
// some floor such as MinFrameBudget)). If not even one character fits,
// Next returns ErrFrameTooSmall and the Fragmenter is unchanged. After the
// final fragment, Next returns io.EOF.
//
// Next costs O(bytes carried): one pass to size the piece, one to write it.
func (f *Fragmenter) Next(dst []byte, budget UTF16Bytes) (frame []byte, size UTF16Bytes, final bool, err error) {
	if f.Done() {
		return dst, 0, false, io.EOF
	}
	finalExtra := UTF16Bytes(len(finalMember)) * 2
	availNF := int((budget - f.overhead) / 2) // code units of data in a non-final frame
	availF := int((budget - f.overhead - finalExtra) / 2)
	if availNF < 1 {
		return dst, 0, false, ErrFrameTooSmall
	}
	msg := f.message
	i, units := f.pos, 0
	prev, prevUnits := i, 0 // end and units before the last character taken
	for i < len(msg) {
		if i+8 <= len(msg) && units+8 <= availNF && plain(load64(msg, i)) {
			prev, prevUnits = i+7, units+7
			i += 8
			units += 8
			continue
		}
		// Not a plain word: take up to eight bytes one character at a time
		// before trying a whole word again.
		for end := min(i+8, len(msg)); i < end; {
			c, n := 0, 1
			if b := msg[i]; b < utf8.RuneSelf {
				c = int(escUnits[b])
			} else {
				c, n = charUnits(msg, i)
			}
			if units+c > availNF {
				goto full
			}
			prev, prevUnits = i, units
			i += n
			units += c
		}
	}
full:
	if i == len(msg) {
		if units <= availF {
			final = true
		} else {
			// All of it fits, but not with "final":true: leave the last
			// character for a final fragment of its own.
			i, units = prev, prevUnits
		}
	}
	if i == f.pos {
		return dst, 0, false, ErrFrameTooSmall
	}
	dst = append(dst, frameHead...)
	dst = appendJSON(dst, f.channel)
	dst = append(dst, frameData...)
	dst = appendJSON(dst, msg[f.pos:i])
	size = f.overhead + UTF16Bytes(units)*2
	if final {
		dst = append(dst, finalMember...)
		size += finalExtra
	}
	dst = append(dst, frameTail...)
	f.pos = i
	return dst, size, final, nil
}

// Done reports whether the final fragment has been built.
func (f *Fragmenter) Done() bool { return f.pos >= len(f.message) }

// Remaining returns the number of bytes of the message not yet sent.
func (f *Fragmenter) Remaining() int { return len(f.message) - f.pos }
