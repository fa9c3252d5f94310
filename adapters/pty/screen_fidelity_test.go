package pty

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// emuModes returns the modes e itself acts on (its unexported modes
// map), not the ones Screen keeps from its callbacks.
func emuModes(t *testing.T, e *vt.Emulator) ansi.Modes {
	t.Helper()
	f := reflect.ValueOf(e).Elem().FieldByName("modes")
	if !f.IsValid() || f.Type() != reflect.TypeFor[ansi.Modes]() {
		t.Fatal("vt.Emulator has no modes ansi.Modes field")
	}
	return *(*ansi.Modes)(unsafe.Pointer(f.UnsafeAddr()))
}

// redrawn feeds out to a cols×rows Screen in pieces of at most chunk
// bytes, writes its redraw (history and screen) into a fresh Screen of
// the same size that first got stale (output left on a client's
// terminal before the redraw, "" for none), and returns both.
func redrawn(t *testing.T, cols, rows int, out string, chunk int, stale string) (a, b *Screen) {
	t.Helper()
	a = NewScreen(cols, rows, 1<<16)
	t.Cleanup(a.Close)
	for p := []byte(out); len(p) > 0; {
		n := min(len(p), chunk)
		if err := a.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	b = NewScreen(cols, rows, 1<<16)
	t.Cleanup(b.Close)
	b.Write([]byte(stale))
	b.Write(a.Redraw(nil, true))
	return a, b
}

// sameState fails t where b differs from a in what sameScreens
// compares, or in what a program's next output depends on: the
// emulator's own modes, the pending wrap, the saved cursors.
func sameState(t *testing.T, a, b *Screen) {
	t.Helper()
	sameScreens(t, a, b)
	ea, eb := a.Emulator(), b.Emulator()
	ma, mb := emuModes(t, ea), emuModes(t, eb)
	for _, m := range redrawModes {
		if ma.IsSet(m.mode) != mb.IsSet(m.mode) {
			t.Errorf("emulator mode %d set %v, want %v", m.mode.Mode(), mb.IsSet(m.mode), ma.IsSet(m.mode))
		}
	}
	if wa, wb := vtPendingWrap(ea), vtPendingWrap(eb); wa != wb {
		t.Errorf("pending wrap %v, want %v", wb, wa)
	}
	screens := []int{b2i(ea.IsAltScreen())}
	if ea.IsAltScreen() {
		screens = append(screens, 0)
	}
	for _, i := range screens {
		sa, sb := vtSaved(vtScreen(ea, i)), vtSaved(vtScreen(eb, i))
		if sa.Position != sb.Position || !sa.Pen.Equal(&sb.Pen) || sa.Link != sb.Link {
			t.Errorf("screen %d: saved cursor %v %+v %v, want %v %+v %v", i, sb.Position, sb.Pen, sb.Link, sa.Position, sa.Pen, sa.Link)
		}
	}
}

// probe writes the same output to a and b and compares them again: what
// a program does next after a reattach.
func probe(t *testing.T, a, b *Screen, out string) {
	t.Helper()
	a.Write([]byte(out))
	b.Write([]byte(out))
	sameState(t, a, b)
}

// TestRedrawRISResetsModes: RIS (ESC c) resets every mode, so the redraw
// sets none of the ones set before it (vt resets its own modes map, but
// called back only for the modes it lists: insert mode stayed set in the
// redraw, and a client typing after a reattach inserted).
func TestRedrawRISResetsModes(t *testing.T) {
	a, b := redrawn(t, 20, 5, "\x1b[4h\x1b[20h\x1b[?2004h\x1b[?1015h\x1b[?2048hbefore\x1bcafter", 1<<10, "")
	sameState(t, a, b)
	if got := string(a.Redraw(nil, false)); strings.Contains(got, "\x1b[4h") || strings.Contains(got, "\x1b[20h") || strings.Contains(got, "\x1b[?") {
		t.Errorf("redraw after RIS sets modes: %q", got)
	}
	// Set again after the reset, they are redrawn.
	a, b = redrawn(t, 20, 5, "\x1b[4hbefore\x1bc\x1b[4h\x1b[?2004hafter", 1<<10, "")
	sameState(t, a, b)
	if !emuModes(t, b.Emulator()).IsSet(ansi.ModeInsertReplace) || !emuModes(t, b.Emulator()).IsSet(ansi.ModeBracketedPaste) {
		t.Error("insert mode or bracketed paste set after the RIS not redrawn")
	}
}

// TestRedrawPendingWrap: a line that ends exactly at the last column
// leaves the cursor in the pending wrap state; the redraw does too, so
// the next character wraps to the next line as on the original.
func TestRedrawPendingWrap(t *testing.T) {
	for name, out := range map[string]string{
		"shell line":       "$ 0123456789abcdefgh",
		"attributes":       "\x1b[2;1H\x1b[1;41mred to the end! \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\",
		"after history":    strings.Repeat("line\r\n", 10) + "0123456789abcdefghij",
		"alternate screen": "\x1b[?1049h\x1b[3;11H0123456789",
		"scroll region":    "\x1b[2;4r\x1b[4;1H" + strings.Repeat("x", 20),
		"no autowrap":      "\x1b[?7l0123456789abcdefghij",
		"insert mode":      "\x1b[4h0123456789abcdefghij",
	} {
		t.Run(name, func(t *testing.T) {
			a, b := redrawn(t, 20, 5, out, 1<<10, "")
			sameState(t, a, b)
			if name != "no autowrap" && !vtPendingWrap(a.Emulator()) {
				t.Fatal("the original is not in the pending wrap state")
			}
			probe(t, a, b, "W")
			probe(t, a, b, "rap\r\nnext")
		})
	}
}

// TestParamsClamped: CSI parameters over 65535 act as 65535, as xterm
// reads them (vt's parser overflowed: 4294967297 moved one column, a
// value over 2^31 set the sub-parameter flag), and an extended colour
// out of range is ignored; split anywhere across writes.
func TestParamsClamped(t *testing.T) {
	red := ansi.Red
	for _, tc := range []struct {
		name, out string
		x, y      int       // where 'c' is
		style     *uv.Style // its style
	}{
		{"CUF over 2^32", "ab\x1b[4294967297Cc", 9, 0, &uv.Style{}},
		{"CUF over 2^31", "ab\x1b[2147483648Cc", 9, 0, &uv.Style{}},
		{"CUF of 20 digits", "ab\x1b[99999999999999999999Cc", 9, 0, &uv.Style{}},
		{"CUF 99999999", "ab\x1b[99999999Cc", 9, 0, &uv.Style{}},
		{"CUP", "\x1b[4294967297;4294967299Hc", 9, 3, &uv.Style{}},
		{"CUU", "\x1b[4;3H\x1b[4294967297Ac", 2, 0, &uv.Style{}},
		{"leading zeros", "\x1b[000000000000000000003Cc", 3, 0, &uv.Style{}},
		{"SGR over 2^31", "\x1b[2147483649mc", 0, 0, &uv.Style{}},
		{"SGR over 2^31 then red", "\x1b[2147483649;31mc", 0, 0, &uv.Style{Fg: red}},
		{"indexed colour over 255", "\x1b[31m\x1b[38;5;300mc", 0, 0, &uv.Style{Fg: red}},
		{"indexed colour huge", "\x1b[1;38;5;99999999;4mc", 0, 0, &uv.Style{Attrs: uv.AttrBold, Underline: ansi.UnderlineSingle}},
		{"colon indexed colour", "\x1b[38:5:256;1mc", 0, 0, &uv.Style{Attrs: uv.AttrBold}},
		{"RGB over 255", "\x1b[48;2;300;0;0;31mc", 0, 0, &uv.Style{Fg: red}},
		{"valid colours kept", "\x1b[38;5;200;48;2;1;2;3mc", 0, 0, &uv.Style{Fg: ansi.IndexedColor(200), Bg: ansi.RGBColor{R: 1, G: 2, B: 3}}},
		{"OSC digits untouched", "\x1b]0;99999999999\x07ab\x1b[2Cc", 4, 0, &uv.Style{}},
	} {
		for _, chunk := range []int{1, 3, 1 << 10} {
			a := NewScreen(10, 4, 1<<10)
			for p := []byte(tc.out); len(p) > 0; {
				n := min(len(p), chunk)
				a.Write(p[:n])
				p = p[n:]
			}
			scr := vtScreen(a.Emulator(), 0)
			c := scr.CellAt(tc.x, tc.y)
			if c == nil || c.Content != "c" {
				t.Errorf("%s (pieces of %d): no c at (%d,%d): rows %q %q", tc.name, chunk, tc.x, tc.y, rowText(scr, 0), rowText(scr, 1))
			} else if want := *tc.style; !c.Style.Equal(&want) {
				t.Errorf("%s (pieces of %d): style %+v, want %+v", tc.name, chunk, c.Style, want)
			}
			a.Close()
		}
	}
}

// TestRedrawOverline: SGR 53 (overline) is kept in the cells and the
// pen, and redrawn (uv.Style has no attribute bit for it: vt dropped it).
func TestRedrawOverline(t *testing.T) {
	a, b := redrawn(t, 20, 3, "\x1b[53mover\x1b[55m not \x1b[1;53mboth\x1b[22m\x1b[4m ul\x1b[24m\x1b[0;53m", 1<<10, "")
	sameState(t, a, b)
	for _, s := range []*Screen{a, b} {
		scr := vtScreen(s.Emulator(), 0)
		for x, want := range "oooonnnnnbbbbuuu" {
			c := scr.CellAt(x, 0)
			over := c.Style.Underline&overlineBit != 0
			if over != (want != 'n') {
				t.Errorf("cell %d %q: overline %v", x, c.Content, over)
			}
			if bold := c.Style.Attrs&uv.AttrBold != 0; bold != (want == 'b') {
				t.Errorf("cell %d %q: bold %v", x, c.Content, bold)
			}
			if ul := c.Style.Underline&^overlineBit == ansi.UnderlineSingle; ul != (want == 'u') {
				t.Errorf("cell %d %q: underline %v", x, c.Content, ul)
			}
		}
		if pen := scr.Cursor().Pen; pen.Underline != overlineBit || pen.Attrs != 0 {
			t.Errorf("pen %+v, want overline only", pen)
		}
	}
	probe(t, a, b, "x\x1b[55my")
}

// TestRedrawBackgroundErase: erased cells take the background colour
// of the pen (BCE: vt did not for ED 2), and the redraw gives them that
// colour while the plain blank cells stay plain, even on a client's
// terminal left with a background colour.
func TestRedrawBackgroundErase(t *testing.T) {
	out := "\x1b[41m\x1b[2J\x1b[H\x1b[mplain\x1b[44m\x1b[K\r\n\x1b[m\x1b[2Kx\r\n\x1b[42m  \x1b[m  \x1b[43m  \x1b[m"
	for _, stale := range []string{"", "\x1b[45m"} {
		a, b := redrawn(t, 10, 4, out, 1<<10, stale)
		sameState(t, a, b)
		scr := vtScreen(a.Emulator(), 0)
		for _, tc := range []struct {
			x, y int
			bg   ansi.Color
		}{{9, 3, ansi.Red}, {7, 0, ansi.Blue}, {3, 1, nil}, {1, 2, ansi.Green}, {3, 2, nil}, {5, 2, ansi.Yellow}, {8, 2, ansi.Red}} {
			c := scr.CellAt(tc.x, tc.y)
			var want uv.Style
			if tc.bg != nil {
				want.Bg = tc.bg
			}
			if c == nil || !c.Style.Equal(&want) {
				t.Errorf("cell (%d,%d) %+v, want background %v", tc.x, tc.y, c, tc.bg)
			}
		}
	}
}

// TestRedrawSavedCursor: the cursor a program saved (DECSC, ESC 7, with
// its attributes) is saved again by the redraw, so the program's DECRC
// (ESC 8) after a reattach goes back to it.
func TestRedrawSavedCursor(t *testing.T) {
	for name, out := range map[string]string{
		"primary":                  "\x1b[3;5H\x1b[1;31m\x1b7\x1b[m\x1b[1;1Hhello",
		"primary, no attributes":   "prompt\r\n\x1b7more\r\n$ ",
		"after history":            strings.Repeat("line\r\n", 10) + "\x1b[2;3H\x1b[4m\x1b7\x1b[24m\x1b[5;1H$ ",
		"alternate screen":         "\x1b[?1049h\x1b[2;2Hx\x1b[7m\x1b7\x1b[m\x1b[4;4Hy",
		"primary's under 1049":     "\x1b[2;2Hab\x1b[?1049h\x1b[4;4Hy",
		"primary's under 1047":     "\x1b[2;2H\x1b[32m\x1b7\x1b[m\x1b[3;3H\x1b[?1047hz",
		"scroll region and origin": "\x1b[2;4r\x1b[?6h\x1b[2;2H\x1b7\x1b[1;1Ho",
		"hidden when saved":        "\x1b[?25l\x1b[2;2H\x1b7\x1b[?25h\x1b[Hx",
	} {
		t.Run(name, func(t *testing.T) {
			a, b := redrawn(t, 10, 5, out, 1<<10, "")
			sameState(t, a, b)
			probe(t, a, b, "\x1b8R")
			probe(t, a, b, "\x1b[?1049l\x1b8P")
		})
	}
}

// TestRepeatBounded: REP with a count past a screenful (up to 65535
// after the clamp) gives the screen the characters written out give,
// from printing only a screenful and the rest modulo the width (vt
// printed each: 99999999 took 41 s).
func TestRepeatBounded(t *testing.T) {
	for _, n := range []int{7, 39, 40, 41, 65535, 99999999} {
		for _, start := range []string{"", "\x1b[2;4H", "\x1b[4;10H"} {
			a := NewScreen(10, 4, 1<<20)
			a.Write([]byte(fmt.Sprintf("%sx\x1b[%db", start, n)))
			b := NewScreen(10, 4, 1<<20)
			b.Write([]byte(start + strings.Repeat("x", 1+min(n, maxParam))))
			sameState(t, b, a)
			if n > 40 && a.History().Lines() > 5 {
				t.Errorf("REP %d: %d lines of history, want at most a screenful and a line", n, a.History().Lines())
			}
			a.Close()
			b.Close()
		}
	}
}

// TestEraseSavedLines: ED 3 (CSI 3J, which clear(1) sends after ED 2)
// drops the scrollback and leaves the screen, as xterm does: a reattach
// after `clear` brought back the lines the user had cleared (vt cleared
// its screen and kept the history Screen keeps).
func TestEraseSavedLines(t *testing.T) {
	s := NewScreen(20, 4, 1<<10)
	defer s.Close()
	for i := range 10 {
		_ = s.Write([]byte(fmt.Sprintf("L%d\r\n", i)))
	}
	if s.History().Len() == 0 {
		t.Fatal("no history to clear")
	}
	_ = s.Write([]byte("\x1b[H\x1b[2J\x1b[3Jafter-clear\r\n$ "))
	if n := s.History().Len(); n != 0 {
		t.Errorf("history %d bytes after ED 3, want none: %q", n, s.History().AppendTo(nil))
	}
	redraw := string(s.Redraw(nil, false))
	if strings.Contains(redraw, "L9") || !strings.Contains(redraw, "after-clear\r\n") {
		t.Errorf("redraw %q, want the screen after clear and no old line", redraw)
	}
	// ED 3 alone keeps the screen.
	_ = s.Write([]byte("kept\x1b[3J"))
	if redraw := string(s.Redraw(nil, false)); !strings.Contains(redraw, "$ kept") {
		t.Errorf("redraw %q after ED 3 alone, want the screen kept", redraw)
	}
}
