package pty

import (
	"bytes"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// vtState is the position of a byte stream relative to escape sequences,
// as far as Scrollback needs it (where a retained text may start).
type vtState uint8

const (
	vtGround vtState = iota
	vtEsc            // after ESC
	vtEscInt         // ESC followed by intermediate bytes (0x20-0x2f)
	vtCSI            // inside ESC [ ...
	vtStr            // inside OSC / DCS / SOS / PM / APC (ESC ] P X ^ _)
	vtStrEsc         // ESC inside a string (maybe ST)
)

// advance returns the state after the bytes p.
func (st vtState) advance(p string) vtState {
	for i := 0; i < len(p); i++ {
		if st == vtGround {
			j := strings.IndexByte(p[i:], esc)
			if j < 0 {
				return vtGround
			}
			i += j
		}
		st = st.step(p[i])
	}
	return st
}

// advanceBytes is advance for a byte slice.
func (st vtState) advanceBytes(p []byte) vtState {
	for i := 0; i < len(p); i++ {
		if st == vtGround {
			j := bytes.IndexByte(p[i:], esc)
			if j < 0 {
				return vtGround
			}
			i += j
		}
		st = st.step(p[i])
	}
	return st
}

func (st vtState) step(c byte) vtState {
	switch st {
	case vtGround:
		if c == esc {
			return vtEsc
		}
		return vtGround
	case vtEsc, vtStrEsc:
		if st == vtStrEsc && c == '\\' {
			return vtGround
		}
		switch {
		case c == '[':
			return vtCSI
		case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
			return vtStr
		case c == esc:
			return vtEsc
		case c == can || c == sub:
			return vtGround
		case c >= 0x20 && c <= 0x2f:
			return vtEscInt
		case c < 0x20:
			return st // C0 controls execute without ending the sequence
		default:
			return vtGround
		}
	case vtEscInt:
		switch {
		case c == esc:
			return vtEsc
		case c >= 0x30 && c <= 0x7e, c == can, c == sub:
			return vtGround
		}
		return vtEscInt
	case vtCSI:
		switch {
		case c == esc:
			return vtEsc
		case c >= 0x40 && c <= 0x7e, c == can, c == sub:
			return vtGround
		}
		return vtCSI
	case vtStr:
		switch c {
		case bel, can, sub:
			return vtGround
		case esc:
			return vtStrEsc
		}
		return vtStr
	}
	return vtGround
}

// Scrollback keeps the newest output text for a snapshot's content. It is
// bounded by a maximum number of UTF-8 bytes. It is not safe for concurrent
// use.
type Scrollback struct {
	max   int
	buf   []byte // len(buf) <= max; a ring once len(buf) == max
	start int    // index of the oldest byte when the ring is full
	head  vtState
	tail  vtState
	// trimmed is set once older output has been dropped: only then can the
	// retained text start mid-line (or mid-character, mid-sequence).
	trimmed bool
}

// NewScrollback returns a Scrollback that retains at most maxBytes UTF-8
// bytes (maxBytes <= 0 retains nothing). Memory grows with use up to about
// maxBytes.
func NewScrollback(maxBytes int) *Scrollback {
	return &Scrollback{max: max(maxBytes, 0)}
}

// Append adds output text (normally OutputDecoder Text) at the end,
// dropping the oldest bytes beyond the bound. Its cost is O(len(text)),
// amortized.
func (s *Scrollback) Append(text string) {
	s.tail = s.tail.advance(text)
	if len(s.buf)+len(text) > s.max {
		s.trimmed = true
	}
	if len(text) >= s.max {
		// Everything retained now comes from text.
		s.head = s.head.advanceBytes(s.buf[s.start:])
		s.head = s.head.advanceBytes(s.buf[:s.start])
		s.head = s.head.advance(text[:len(text)-s.max])
		if s.max == 0 {
			return
		}
		if cap(s.buf) < s.max {
			s.buf = make([]byte, s.max)
		}
		s.buf = s.buf[:s.max]
		copy(s.buf, text[len(text)-s.max:])
		s.start = 0
		return
	}
	if n := min(s.max-len(s.buf), len(text)); n > 0 {
		s.buf = append(s.buf, text[:n]...)
		text = text[n:]
	}
	for len(text) > 0 { // the ring is full: overwrite the oldest bytes
		n := min(len(text), s.max-s.start)
		s.head = s.head.advanceBytes(s.buf[s.start : s.start+n])
		copy(s.buf[s.start:], text[:n])
		s.start = (s.start + n) % s.max
		text = text[n:]
	}
}

// AppendBytes is Append for text in a byte slice (an OutputDecoder
// View's), without converting it: Append reads text only during the call
// and keeps a copy, so the caller may reuse text's buffer afterwards.
func (s *Scrollback) AppendBytes(text []byte) {
	s.Append(unsafe.String(unsafe.SliceData(text), len(text)))
}

// linear returns the retained bytes, oldest first, as one string.
func (s *Scrollback) linear() string {
	if s.start == 0 {
		return string(s.buf)
	}
	var b strings.Builder
	b.Grow(len(s.buf))
	b.Write(s.buf[s.start:])
	b.Write(s.buf[:s.start])
	return b.String()
}

// String returns the retained text. It starts at a UTF-8 boundary; if the
// oldest retained bytes are inside an escape sequence (CSI, OSC or other
// string) that ends within the text, it starts after that sequence; and it
// starts just after the first newline when one lies in the first 1/8 of the
// remaining text, so a snapshot does not begin mid-line. These cuts apply
// only once older output has been dropped; until then the text is returned
// whole, from the first byte. Its length in
// bytes is at most Len.
func (s *Scrollback) String() string {
	t := s.linear()
	if !s.trimmed && s.head == vtGround {
		return t
	}
	i := 0
	if st := s.head; st != vtGround {
		for j := 0; j < len(t); j++ {
			st = st.step(t[j])
			if st == vtGround {
				i = j + 1
				break
			}
		}
	}
	for k := 0; k < utf8.UTFMax-1 && i < len(t) && !utf8.RuneStart(t[i]); k++ {
		i++
	}
	if !s.trimmed {
		return t[i:]
	}
	limit := i + (len(t)-i)/8
	st := vtGround
	for j := i; j < limit; j++ {
		if st == vtGround && t[j] == '\n' {
			i = j + 1
			break
		}
		st = st.step(t[j])
	}
	return t[i:]
}

// Len returns the number of UTF-8 bytes retained (String may return a few
// fewer, see there). It is at most the maxBytes given to NewScrollback.
func (s *Scrollback) Len() int { return len(s.buf) }

// Clear drops all retained text; the stream continues afterwards.
func (s *Scrollback) Clear() {
	s.buf = s.buf[:0]
	s.start = 0
	s.head = s.tail
	s.trimmed = false
}
