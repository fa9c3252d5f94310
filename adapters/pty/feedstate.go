package pty

import (
	"bytes"
	"strconv"

	"github.com/charmbracelet/x/ansi"
)

// feedState bounds.
const (
	// maxTrackedModes bounds the modes a feedState keeps (the last
	// setting of each); a mode past it is not kept.
	maxTrackedModes = 32
	// maxTrackedScreens bounds the alternate screen switches and scroll
	// regions a feedState keeps in order (a region set after another
	// replaces it, a switch after a switch too); past it the oldest
	// are forgotten.
	maxTrackedScreens = 8
	// maxTrackedSGR bounds the SGR sequences kept since the last reset
	// of the attributes (bytes); past it only the newest sequence is.
	maxTrackedSGR = 128
	// maxTrackedSeq bounds a sequence the scanner reads across two
	// pieces of output; a longer one is not a sequence it keeps.
	maxTrackedSeq = 64
)

// feedState is what output the Feed drops (a flood's middle, when its
// emulator fell too far behind) set, for the rebuild to set it again
// before the newest output: the last setting of each mode (DECSET,
// DECRST, SM, RM, the keypad), the alternate screen switches and
// scroll regions (DECSTBM) in order, the character sets designated to
// G0 and G1, the cursor style (DECSCUSR), the attributes (the SGR
// sequences since their last reset), and whether the terminal was reset
// (RIS) first. It reads only escape sequences (the text between is
// skipped with bytes.IndexByte), keeps no cells, and is bounded (the
// max* constants). Its zero value is ready; it allocates only its SGR
// bytes and partial sequence, once.
type feedState struct {
	ris      bool
	modes    [maxTrackedModes]trackedMode
	nmodes   int
	screens  [maxTrackedScreens]trackedScreen
	nscreens int
	g0, g1   byte // the final byte of the last designation, 0 none
	cursor   int  // DECSCUSR's parameter + 1, 0 none
	sgrSeen  bool
	sgr      []byte
	partial  []byte // a sequence cut by the end of a piece, from its ESC
	inSeq    bool
	pbuf     [16]int // params' scratch
}

type trackedMode struct {
	mode uint16
	dec  bool
	set  bool
}

// trackedScreen is an alternate screen switch (mode > 0) or a scroll
// region (top, bottom as written: 0 the default).
type trackedScreen struct {
	mode        uint16
	set         bool
	top, bottom int
}

func (st *feedState) reset() {
	sgr, partial := st.sgr[:0], st.partial[:0]
	*st = feedState{sgr: sgr, partial: partial}
}

// empty reports whether nothing was tracked.
func (st *feedState) empty() bool {
	return !st.ris && st.nmodes == 0 && st.nscreens == 0 && st.g0 == 0 && st.g1 == 0 && st.cursor == 0 && !st.sgrSeen
}

// scan reads the sequences of p, the output after what it read before.
func (st *feedState) scan(p []byte) {
	for len(p) > 0 {
		if st.inSeq {
			// A sequence cut by the end of the last piece: take bytes
			// until it ends.
			n := seqLen(st.partial, p)
			if n < 0 {
				if len(st.partial)+len(p) > maxTrackedSeq {
					st.inSeq, st.partial = false, st.partial[:0]
					return
				}
				st.partial = append(st.partial, p...)
				return
			}
			st.partial = append(st.partial, p[:n]...)
			st.seq(st.partial)
			st.inSeq, st.partial = false, st.partial[:0]
			p = p[n:]
			continue
		}
		i := bytes.IndexByte(p, esc)
		if i < 0 {
			return
		}
		p = p[i:]
		if len(p) > 2 && p[1] == '[' {
			// The common case, a CSI whole in p, without seqLen.
			j := 2
			for j < len(p) && !csiEnds[p[j]] {
				j++
			}
			if j < len(p) {
				switch p[j] {
				case esc:
					p = p[j:] // cut short by a new sequence
					continue
				case 'm':
					st.sgrSeq(p[:j+1])
				case 'h', 'l', 'r', 'q':
					st.csi(p[2 : j+1])
				}
				p = p[j+1:]
				continue
			}
		}
		n := seqLen(nil, p)
		if n < 0 {
			if len(p) <= maxTrackedSeq {
				st.partial = append(st.partial[:0], p...)
				st.inSeq = true
			}
			return
		}
		st.seq(p[:n])
		p = p[n:]
	}
}

// csiEnds tells the bytes that end a CSI: its final byte (0x40 to 0x7e),
// or ESC, CAN, SUB.
var csiEnds = func() (t [256]bool) {
	for b := 0x40; b <= 0x7e; b++ {
		t[b] = true
	}
	t[esc], t[can], t[sub] = true, true, true
	return t
}()

// seqLen returns how many bytes of p end the sequence that head (from
// its ESC, possibly empty: then p starts with the ESC) begins, -1 when p
// ends first. A sequence that is not one the scanner keeps ends at its
// ESC's next byte (what follows is read as text: an OSC's data has no
// ESC but the one ending it).
func seqLen(head, p []byte) int {
	at := func(i int) (byte, bool) {
		if i < len(head) {
			return head[i], true
		}
		if i-len(head) < len(p) {
			return p[i-len(head)], true
		}
		return 0, false
	}
	b, ok := at(1)
	if !ok {
		return -1
	}
	end := 2
	switch b {
	case '[':
		for i := 2; ; i++ {
			c, ok := at(i)
			if !ok {
				return -1
			}
			if c >= 0x40 && c <= 0x7e || c == esc || c == can || c == sub {
				end = i + 1
				if c == esc {
					end = i // a new sequence begins
				}
				break
			}
		}
	case '(', ')':
		if _, ok := at(2); !ok {
			return -1
		}
		end = 3
	}
	return end - len(head)
}

// seq reads one sequence (from its ESC).
func (st *feedState) seq(s []byte) {
	if len(s) < 2 {
		return
	}
	switch s[1] {
	case 'c':
		st.reset()
		st.ris = true
	case '=', '>':
		st.setMode(66, true, s[1] == '=')
	case '(', ')':
		if len(s) == 3 {
			if s[1] == '(' {
				st.g0 = s[2]
			} else {
				st.g1 = s[2]
			}
		}
	case '[':
		st.csi(s[2:])
	}
}

// csi reads a CSI sequence's parameters, intermediates and final byte.
func (st *feedState) csi(s []byte) {
	if len(s) == 0 {
		return
	}
	final := s[len(s)-1]
	switch final {
	case 'h', 'l', 'r', 'm', 'q':
	default:
		return // most of a flood's sequences (CUP, EL...): nothing kept
	}
	body := s[:len(s)-1]
	prefix := byte(0)
	if len(body) > 0 && body[0] >= '<' && body[0] <= '?' {
		prefix, body = body[0], body[1:]
	}
	inter := byte(0)
	for i, c := range body {
		if c >= 0x20 && c <= 0x2f {
			inter, body = c, body[:i]
			break
		}
	}
	switch {
	case final == 'm' && prefix == 0 && inter == 0:
		st.sgrSeq(append([]byte("\x1b["), s...))
	case (final == 'h' || final == 'l') && inter == 0 && (prefix == 0 || prefix == '?'):
		for _, p := range st.params(body) {
			if p < 0 {
				continue
			}
			if prefix == '?' && (p == 47 || p == 1047 || p == 1049) {
				st.addScreen(trackedScreen{mode: uint16(p), set: final == 'h'})
				continue
			}
			st.setMode(uint16(p), prefix == '?', final == 'h')
		}
	case final == 'r' && prefix == 0 && inter == 0:
		ps := st.params(body)
		sc := trackedScreen{}
		if len(ps) > 0 {
			sc.top = max(ps[0], 0)
		}
		if len(ps) > 1 {
			sc.bottom = max(ps[1], 0)
		}
		st.addScreen(sc)
	case final == 'q' && inter == ' ' && prefix == 0:
		ps := st.params(body)
		st.cursor = 1
		if len(ps) > 0 && ps[0] > 0 {
			st.cursor = min(ps[0], 6) + 1
		}
	}
}

// sgrSeq reads a CSI sequence ending in m (whole, from its ESC): an SGR
// when it has no prefix or intermediate. A parameter empty or 0 at the
// top level resets the attributes: the SGR kept before are dropped (and
// this one too when it only resets).
func (st *feedState) sgrSeq(s []byte) {
	only, reset := true, false
	zero, sub := true, false // the current top-level parameter: no digit but 0 so far
	for _, c := range s[2 : len(s)-1] {
		switch {
		case c == ';':
			reset = reset || zero
			only = only && zero
			zero, sub = true, false
		case c == ':':
			sub = true
		case c >= '1' && c <= '9':
			zero = zero && sub
		case c >= '0' && c <= '9':
		default:
			return // a prefix or an intermediate: not an SGR
		}
	}
	reset = reset || zero
	only = only && zero
	st.sgrSeen = true
	if reset || len(st.sgr)+len(s) > maxTrackedSGR {
		st.sgr = st.sgr[:0]
	}
	if !only && len(s) <= maxTrackedSGR {
		st.sgr = append(st.sgr, s...)
	}
}

// params returns the top-level parameters of body (-1 for an empty
// one; a sub-parameter list counts as its first value), clamped to
// maxParam; the first 16 (in st.pbuf: valid until the next call).
func (st *feedState) params(body []byte) []int {
	out := st.pbuf[:0]
	v, empty, sub := 0, true, false
	for _, c := range body {
		switch {
		case c >= '0' && c <= '9':
			if !sub {
				v, empty = min(v*10+int(c-'0'), maxParam), false
			}
		case c == ':':
			sub = true
		case c == ';':
			if empty {
				v = -1
			}
			if len(out) < cap(out)-1 {
				out = append(out, v)
			}
			v, empty, sub = 0, true, false
		}
	}
	if empty {
		v = -1
	}
	return append(out, v)
}

func (st *feedState) setMode(mode uint16, dec, set bool) {
	for i := range st.nmodes {
		if m := &st.modes[i]; m.mode == mode && m.dec == dec {
			m.set = set
			return
		}
	}
	if st.nmodes < maxTrackedModes {
		st.modes[st.nmodes] = trackedMode{mode: mode, dec: dec, set: set}
		st.nmodes++
	}
}

func (st *feedState) addScreen(sc trackedScreen) {
	if st.nscreens > 0 && (st.screens[st.nscreens-1].mode > 0) == (sc.mode > 0) {
		st.screens[st.nscreens-1] = sc
		return
	}
	if st.nscreens == maxTrackedScreens {
		copy(st.screens[:], st.screens[1:])
		st.nscreens--
	}
	st.screens[st.nscreens] = sc
	st.nscreens++
}

// appendReplay appends the VT text that sets again what st tracked: a
// RIS, the alternate screen switches and scroll regions in order, the
// modes, the character sets, the cursor style; not the attributes
// (appendSGR), which come after the cursor is put back.
func (st *feedState) appendReplay(dst []byte) []byte {
	if st.ris {
		dst = append(dst, "\x1bc"...)
	}
	for _, sc := range st.screens[:st.nscreens] {
		if sc.mode > 0 {
			dst = appendMode(dst, ansi.DECMode(int(sc.mode)), sc.set)
			continue
		}
		dst = append(dst, "\x1b["...)
		if sc.top > 0 {
			dst = strconv.AppendInt(dst, int64(sc.top), 10)
		}
		if sc.bottom > 0 {
			dst = append(dst, ';')
			dst = strconv.AppendInt(dst, int64(sc.bottom), 10)
		}
		dst = append(dst, 'r')
	}
	for _, m := range st.modes[:st.nmodes] {
		switch {
		case m.dec && m.mode == 66:
			if m.set {
				dst = append(dst, "\x1b="...)
			} else {
				dst = append(dst, "\x1b>"...)
			}
		case m.dec:
			dst = appendMode(dst, ansi.DECMode(int(m.mode)), m.set)
		default:
			dst = appendMode(dst, ansi.ANSIMode(int(m.mode)), m.set)
		}
	}
	if st.g0 != 0 {
		dst = append(dst, '\x1b', '(', st.g0)
	}
	if st.g1 != 0 {
		dst = append(dst, '\x1b', ')', st.g1)
	}
	if st.cursor > 0 {
		dst = appendCSI(dst, st.cursor-1, ' ')
		dst = append(dst, 'q')
	}
	return dst
}

// appendSGR appends the attributes st tracked (a reset first), if any
// SGR was seen.
func (st *feedState) appendSGR(dst []byte) []byte {
	if !st.sgrSeen {
		return dst
	}
	return append(append(dst, "\x1b[m"...), st.sgr...)
}
