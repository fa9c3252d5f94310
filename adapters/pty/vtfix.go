package pty

import (
	"bytes"
	"image/color"
	"strconv"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// What vt v0.1.0 does differently from xterm (and tmux), fixed from
// outside through its handler API (a handler registered later runs
// first; returning false hands the sequence on to vt's own):
//
//   - RIS (ESC c) resets vt's modes map but not the modes Screen keeps
//     from the mode callbacks: vt's reset only calls back for the modes
//     it lists, so insert mode (IRM), newline mode, in-band resize,
//     urxvt mouse and unicode core stayed set in the redraw;
//   - SGR 53/55 (overline) is not kept: uv.Style has no room for it
//     (its eight attribute bits are taken). It is kept in the high bit
//     of the cell's Underline (overlineBit), which only Redraw reads;
//   - SGR 38/48/58 with a colour index over 255 (or an RGB component
//     over 255) sets a wrapped colour where xterm ignores it;
//   - ED 2 (CSI 2J) clears with default cells where xterm fills with the
//     current background (BCE), as vt's other erases do;
//   - ED 3 (CSI 3J, which clear(1) sends) clears vt's screen and leaves
//     the history Screen keeps; xterm erases the saved lines only;
//   - CSI parameters are not clamped: the parser's int overflows (a
//     value over 2^31 sets the sub-parameter flag and keeps its low
//     bits), and REP of 99999999 prints that many characters (41 s of
//     the emulator's time); xterm clamps every parameter to 65535 as it
//     reads it (paramClamp), and REP past a screenful is cut to what
//     gives the same screen.
//
// Not fixed: vt does not implement insert mode (characters printed
// under CSI 4 h overwrite instead of inserting), so a program using it
// draws a screen the emulator gets wrong until it redraws.

// overlineBit is where a cell's or pen's overline is kept: the high bit
// of its Underline (vt's underline styles are 0 to 5).
const overlineBit ansi.Underline = 0x80

// maxParam is xterm's bound on a CSI parameter (MAX_I_PARAM), also the
// one the ansi package documents (parser.MaxParam).
const maxParam = 65535

// registerFixes registers on e the handlers that fix what is listed
// above; modes is the map Screen keeps from the mode callbacks;
// clearHistory drops the scrollback (ours and vt's), for ED 3.
func registerFixes(e *vt.Emulator, modes map[ansi.Mode]bool, clearHistory func()) {
	e.RegisterEscHandler('c', func() bool {
		clear(modes) // vt's reset calls back for the modes it resets
		return false
	})
	e.RegisterCsiHandler('m', func(params ansi.Params) bool {
		cur := vtCursor(activeScreen(e))
		if cur == nil {
			return false
		}
		readSGR(params, &cur.Pen)
		return true
	})
	e.RegisterCsiHandler('b', func(params ansi.Params) bool {
		// REP prints the last character n times, one by one (up to
		// 65535: some 27 ms of the emulator's time, for 8 bytes of
		// output). Past a screenful the screen is that character
		// everywhere and only the cursor's column depends on n: a
		// screenful and the rest modulo the width give the same screen
		// (the history gets fewer copies of the line).
		n, _, _ := params.Param(0, 1)
		w, h := e.Width(), e.Height()
		if len(params) == 1 && n > w*h {
			params[0] = ansi.Param(w*h + (n-w*h)%w)
		}
		return false
	})
	e.RegisterCsiHandler('J', func(params ansi.Params) bool {
		n, _, _ := params.Param(0, 0)
		if n == 3 && len(params) == 1 {
			// ED 3 (xterm's "erase saved lines", what clear(1) sends
			// after ED 2): the scrollback goes, the screen stays (vt
			// cleared the screen and kept our history: a reattach
			// brought back what the user had cleared).
			clearHistory()
			return true
		}
		scr := activeScreen(e)
		if n != 2 || scr == nil {
			return false
		}
		bg := scr.Cursor().Pen.Bg
		if bg == nil {
			return false
		}
		scr.ClearWithScrollback()
		c := uv.EmptyCell
		c.Style.Bg = bg
		scr.Fill(&c)
		return true
	})
}

// readSGR applies SGR params to pen as vt does (uv.ReadStyle), with
// overline (SGR 53, 55) kept in overlineBit and extended colours out of
// range ignored, as xterm does.
func readSGR(params ansi.Params, pen *uv.Style) {
	over := pen.Underline & overlineBit
	if len(params) == 0 {
		over = 0
	}
	for i := 0; i < len(params); i++ {
		p, more, _ := params.Param(i, 0)
		switch p {
		case 0:
			over = 0
		case 53:
			over = overlineBit
		case 55:
			over = 0
		case 4:
			if next, _, ok := params.Param(i+1, 0); more && ok && next >= 0 && next <= 5 {
				i++
			}
		case 38, 48, 58:
			var c color.Color
			n := ansi.ReadStyleColor(params[i:], &c)
			if n <= 0 {
				continue
			}
			bad := false
			for j := i + 2; j < i+n; j++ {
				bad = bad || params[j].Param(0) > 255
			}
			if bad {
				// An unknown code each: uv.ReadStyle skips them.
				for j := i; j < i+n; j++ {
					params[j] = maxParam
				}
			}
			i += n - 1
		}
	}
	pen.Underline &^= overlineBit
	uv.ReadStyle(params, pen)
	pen.Underline = pen.Underline&^overlineBit | over
}

// appendStyle appends the SGR that changes the pen from to to (uv's
// StyleDiff, and SGR 53/55 for the overline).
func appendStyle(dst []byte, from, to *uv.Style) []byte {
	f, t := *from, *to
	f.Underline &^= overlineBit
	t.Underline &^= overlineBit
	over := from.Underline&overlineBit != 0
	if !f.Equal(&t) {
		if t.IsZero() {
			dst = append(dst, ansi.ResetStyle...)
			over = false
		} else {
			dst = append(dst, uv.StyleDiff(&f, &t)...)
		}
	}
	if want := to.Underline&overlineBit != 0; want != over {
		if want {
			return append(dst, "\x1b[53m"...)
		}
		return append(dst, "\x1b[55m"...)
	}
	return dst
}

// paramClamp rewrites the output's CSI parameters over maxParam to
// maxParam before the emulator parses them, as xterm reads them. It
// holds the digits of the parameter being read (across writes) and
// writes them when the parameter ends. The zero value is ready.
type paramClamp struct {
	state  uint8 // clampGround, clampEsc, clampParams
	digits bool  // a parameter's digits are held
	value  int   // their value, at most maxParam
}

const (
	clampGround = iota
	clampEsc    // after ESC
	clampParams // in a CSI's parameters
)

// append appends p, its parameters clamped, to dst.
func (c *paramClamp) append(dst, p []byte) []byte {
	for len(p) > 0 {
		if c.state == clampGround {
			i := bytes.IndexByte(p, esc)
			if i < 0 {
				return append(dst, p...)
			}
			dst = append(dst, p[:i+1]...)
			p = p[i+1:]
			c.state = clampEsc
			continue
		}
		b := p[0]
		p = p[1:]
		if c.state == clampEsc {
			switch b {
			case '[':
				c.state = clampParams
			case esc:
			default:
				if b >= 0x20 { // C0 controls are executed within the sequence
					c.state = clampGround
				}
			}
			dst = append(dst, b)
			continue
		}
		// In a CSI's parameters.
		if b >= '0' && b <= '9' {
			c.value = min(c.value*10+int(b-'0'), maxParam)
			c.digits = true
			continue
		}
		if b < 0x20 && b != can && b != sub && b != esc || b == 0x7f {
			dst = append(dst, b) // executed or ignored, the parameter goes on
			continue
		}
		if c.digits {
			dst = strconv.AppendInt(dst, int64(c.value), 10)
			c.digits, c.value = false, 0
		}
		dst = append(dst, b)
		switch {
		case b == esc:
			c.state = clampEsc
		case b >= 0x30 && b <= 0x3f: // ; : < = > ?
		default: // the final byte, an intermediate, CAN, SUB, a non-ASCII byte
			c.state = clampGround
		}
	}
	return dst
}

// activeScreen returns e's active screen (nil when vtLayout does not
// know where it is).
func activeScreen(e *vt.Emulator) *vt.Screen {
	return vtScreen(e, b2i(e.IsAltScreen()))
}
