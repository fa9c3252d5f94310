package pty

import (
	"fmt"
	"io"
	"reflect"
	"strconv"
	"unsafe"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/ansi"
	"github.com/charmbracelet/x/vt"
)

// Screen bounds.
const (
	// maxPushedPerWrite bounds the lines the emulator keeps scrolled off
	// between two drains into the History (one Write of at most
	// ReadChunk bytes, or a resize). A LF scrolls one line per byte, a
	// CSI S or an ED 2 a screenful per sequence; past the bound the
	// oldest of one write are lost, which only a program scrolling
	// blank screenfuls on purpose can cause. Its cost: the emulator
	// drops its oldest line by moving the others (a slice delete), so
	// the bound also caps that move at 24 KiB.
	maxPushedPerWrite = 1024
	// MaxScreenCells bounds the cells of each of a terminal's two
	// emulated screens (a cell is about 112 bytes: 14 MiB a screen at
	// the bound). A terminal may be up to MaxTermSize square, 16 M
	// cells, which would cost gigabytes; one larger than this is
	// emulated with its columns and as many of its rows as fit (its
	// snapshot shows the top of its screen).
	MaxScreenCells = 1 << 17
	// maxSequenceData bounds the data of one OSC, DCS or APC sequence
	// the emulator keeps (a title, a hyperlink's URI, a colour); the
	// rest of a longer one is ignored. vt's own 4 MiB, allocated with
	// every emulator, would be most of a terminal's memory.
	maxSequenceData = 64 << 10
)

// emulatedSize is the size the emulator of a cols×rows terminal has.
func emulatedSize(cols, rows int) (int, int) {
	cols, rows = min(max(cols, 1), MaxTermSize), max(rows, 1)
	return cols, min(rows, MaxScreenCells/cols)
}

// Screen is the terminal's VT emulator (DESIGN.md §5): every byte of
// output goes through it, so it knows the screen a program drew (primary
// and alternate, cursor, modes, attributes, wide characters), and a
// History keeps the lines that scrolled off the primary screen, bounded
// in bytes. Redraw turns it back into VT text. It is not safe for
// concurrent use; Close ends the goroutine that discards the emulator's
// answers to queries.
//
// The emulator is github.com/charmbracelet/x/vt. What its API does not
// show is reached through its layout (vtLayout, checked against the
// types at start, tested in TestVTLayout): the primary screen while the
// alternate one is active; the alternate screen's scrollback, which
// Screen turns off (xterm's alternate screen has none either; vt's would
// keep up to 10000 lines per terminal); and its parser's buffer for
// sequence data (4 MiB allocated per emulator, set to maxSequenceData).
// A panic of the emulator's is recovered (guard).
type Screen struct {
	emu  *vt.Emulator
	hist *History
	// modes are the modes the program set or reset (the emulator's
	// EnableMode/DisableMode callbacks), for Redraw.
	modes map[ansi.Mode]bool
	// stopAnswers ends the goroutine that reads emu's answers.
	stopAnswers func()
	closed      bool
	// faults counts the emulator's panics (Write, Resize).
	faults int
	// params clamps the CSI parameters of the output (see paramClamp);
	// clamped is its output, the emulator's input.
	params  paramClamp
	clamped []byte
	// scratch for drain's line rendering
	line []byte
}

// NewScreen returns the emulator of a cols×rows terminal whose History
// keeps at most historyBytes bytes of VT text.
func NewScreen(cols, rows, historyBytes int) *Screen {
	s := &Screen{hist: NewHistory(historyBytes)}
	s.newEmulator(emulatedSize(cols, rows))
	return s
}

// answersEnd is what Close writes into the emulator's answer pipe to
// end its reader: no answer of the emulator's ends with a NUL.
const answersEnd = 0

// newEmulator starts a blank emulator of cols×rows, configured as Screen
// needs it, with the goroutine that reads its answers.
func (s *Screen) newEmulator(cols, rows int) {
	e := vt.NewEmulator(cols, rows)
	e.SetScrollbackSize(maxPushedPerWrite)
	if alt := vtScreen(e, 1); alt != nil {
		alt.SetScrollback(nil)
	}
	if p := vtParser(e); p != nil {
		p.SetDataSize(maxSequenceData)
	}
	modes := map[ansi.Mode]bool{}
	e.SetCallbacks(vt.Callbacks{
		EnableMode:  func(m ansi.Mode) { modes[m] = true },
		DisableMode: func(m ansi.Mode) { modes[m] = false },
	})
	registerFixes(e, modes, func() {
		s.hist.Clear()
		e.ClearScrollback()
	})
	// The emulator answers queries (cursor position, device attributes,
	// colours) into a synchronous pipe: something must read them or the
	// Write blocks. The real terminal at the client answers them; here
	// they are dropped.
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 256)
		for {
			n, err := e.Read(buf)
			if err != nil || (n > 0 && buf[n-1] == answersEnd) {
				return
			}
		}
	}()
	s.emu, s.modes = e, modes
	s.params = paramClamp{}
	s.stopAnswers = func() {
		_, _ = e.InputPipe().Write([]byte{answersEnd}) // returns once read
		<-done
	}
}

// Close stops the goroutine that reads the emulator's answers; after it
// Write and Resize do nothing (an answer would block them). The screen
// can still be redrawn. Close is idempotent.
func (s *Screen) Close() {
	if !s.closed {
		s.closed = true
		s.stopAnswers()
	}
}

// Write feeds output (the decoded text the clients get) to the emulator.
// It returns an error when the emulator panicked on it: the screen is
// blank again (the history stays) and the next output draws on it.
func (s *Screen) Write(p []byte) error {
	if s.closed || len(p) == 0 {
		return nil
	}
	s.clamped = s.params.append(s.clamped[:0], p)
	err := s.guard(func() {
		_, _ = s.emu.Write(s.clamped)
		s.drain()
	})
	if cap(s.clamped) > 2*ReadChunk {
		s.clamped = nil
	}
	return err
}

// Resize resizes the screens (an error as for Write).
func (s *Screen) Resize(cols, rows int) error {
	cols, rows = emulatedSize(cols, rows)
	if s.closed || (cols == s.emu.Width() && rows == s.emu.Height()) {
		return nil
	}
	return s.guard(func() {
		s.emu.Resize(cols, rows)
		s.drain()
	})
}

// guard runs op and turns a panic of the emulator's into an error (a
// bug of vt's on some input must not take the daemon down: vt v0.1.0
// panics on a delete-line inside a scroll region taller than the screen,
// which a full-screen program sets when it draws for the size it had
// before a resize). The emulator is replaced by a fresh one of the same
// size, given the old one's redraw (the screen as far as it got, its
// modes and cursor; an out-of-range scroll region left out): its state
// after a panic mid-sequence is not to be trusted.
func (s *Screen) guard(op func()) (err error) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		s.faults++
		err = fmt.Errorf("terminal emulator fault (screen redrawn on a new emulator): %v", r)
		cols, rows := s.emu.Width(), s.emu.Height()
		var redraw []byte
		func() {
			defer func() { _ = recover() }()
			redraw = s.appendScreen(nil)
		}()
		s.stopAnswers()
		s.newEmulator(cols, rows)
		func() {
			defer func() { _ = recover() }()
			_, _ = s.emu.Write(redraw)
			s.drain()
		}()
	}()
	op()
	return nil
}

// Faults returns how many times the emulator panicked and was reset.
func (s *Screen) Faults() int { return s.faults }

// ClearHistory drops the scrollback (terminal/cleared); the screen stays.
func (s *Screen) ClearHistory() {
	s.hist.Clear()
	s.emu.ClearScrollback()
}

// History returns the scrollback.
func (s *Screen) History() *History { return s.hist }

// Emulator returns the emulator (for tests: its cells).
func (s *Screen) Emulator() *vt.Emulator { return s.emu }

// drain moves the lines the primary screen scrolled off into the History
// as VT text.
func (s *Screen) drain() {
	sb := s.emu.Scrollback()
	lines := sb.Lines()
	if len(lines) == 0 {
		return
	}
	for _, l := range lines {
		s.line = appendLine(s.line[:0], l)
		s.hist.Push(s.line)
	}
	clear(lines) // the emulator keeps the backing array: let the cells go
	sb.Clear()
	if cap(s.line) > MaxEncodeBuf {
		s.line = nil
	}
}

// appendLine appends the VT text that draws line from its first column
// on a blank line: the cells' characters with their attributes (SGR) and
// hyperlinks (OSC 8), blank runs as spaces or a cursor move, trailing
// blanks left out, the attributes reset at the end.
func appendLine(dst []byte, line uv.Line) []byte {
	var pen uv.Style
	var link uv.Link
	blanks := 0 // blank cells not yet written
	cover := 0  // columns still covered by the last wide character
	for i := range line {
		c := &line[i]
		if cover > 0 {
			cover--
			if c.Width == 0 && c.Content == "" {
				continue
			}
		}
		if c.IsZero() || c.Equal(&uv.EmptyCell) {
			blanks++
			continue
		}
		if blanks > 0 {
			if !pen.IsZero() {
				dst = append(dst, ansi.ResetStyle...)
				pen = uv.Style{}
			}
			if link.URL != "" {
				dst = append(dst, ansi.ResetHyperlink()...)
				link = uv.Link{}
			}
			dst = appendBlanks(dst, blanks)
			blanks = 0
		}
		if !c.Style.Equal(&pen) {
			dst = appendStyle(dst, &pen, &c.Style)
			pen = c.Style
		}
		if c.Link != link {
			if link.URL != "" {
				dst = append(dst, ansi.ResetHyperlink()...)
			}
			if c.Link.URL != "" {
				dst = append(dst, ansi.SetHyperlink(c.Link.URL, c.Link.Params)...)
			}
			link = c.Link
		}
		content := c.Content
		if content == "" {
			content = " "
		}
		dst = append(dst, content...)
		if c.Width > 1 {
			cover = c.Width - 1
		}
	}
	if link.URL != "" {
		dst = append(dst, ansi.ResetHyperlink()...)
	}
	if !pen.IsZero() {
		dst = append(dst, ansi.ResetStyle...)
	}
	return dst
}

// appendBlanks moves the cursor n columns right over blank cells: spaces
// for a short run, a cursor forward (CUF) for a longer one.
func appendBlanks(dst []byte, n int) []byte {
	if n <= 4 {
		return append(dst, "    "[:n]...)
	}
	dst = append(dst, "\x1b["...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, 'C')
}

// appendCUP appends a cursor position (0-based x, y).
func appendCUP(dst []byte, x, y int) []byte {
	dst = append(dst, "\x1b["...)
	dst = strconv.AppendInt(dst, int64(y+1), 10)
	dst = append(dst, ';')
	dst = strconv.AppendInt(dst, int64(x+1), 10)
	return append(dst, 'H')
}

// screenLine returns row y of scr as a line (a copy into buf).
func screenLine(buf uv.Line, scr *vt.Screen, width, y int) uv.Line {
	buf = buf[:0]
	for x := range width {
		if c := scr.CellAt(x, y); c != nil {
			buf = append(buf, *c)
		} else {
			buf = append(buf, uv.Cell{})
		}
	}
	return buf
}

// redrawModes are the modes Redraw sets again when the program set them
// (or reset, where set is the default), in the order written: input
// modes a reattached client needs (cursor keys, keypad, mouse, bracketed
// paste, focus), then the ones that change how later output is drawn.
var redrawModes = []struct {
	mode ansi.Mode
	def  bool
}{
	{ansi.ModeCursorKeys, false},
	{ansi.ModeMouseX10, false},
	{ansi.ModeMouseNormal, false},
	{ansi.ModeMouseHighlight, false},
	{ansi.ModeMouseButtonEvent, false},
	{ansi.ModeMouseAnyEvent, false},
	{ansi.ModeFocusEvent, false},
	{ansi.ModeMouseExtSgr, false},
	{ansi.ModeMouseExtUrxvt, false},
	{ansi.ModeMouseExtSgrPixel, false},
	{ansi.ModeBracketedPaste, false},
	{ansi.ModeInBandResize, false},
	{ansi.ModeAutoWrap, true},
	{ansi.ModeInsertReplace, false},
	{ansi.ModeLineFeedNewLine, false},
}

// Redraw appends VT text that, written to a fresh terminal of the same
// size, reproduces the terminal: the History's lines, then the primary
// screen with its attributes (every row, so the screen ends where the
// terminal's is however much history came before), then the alternate
// screen if active, the cursors DECSC saved, the scroll region, the
// modes the program set, the cursor's position (in the pending wrap
// state when it is: the last column's character printed again),
// visibility and style, and the current attributes. history false
// leaves the History out (a client that only needs the screen).
func (s *Screen) Redraw(dst []byte, history bool) []byte {
	if history {
		dst = s.hist.AppendTo(dst)
	}
	return s.appendScreen(dst)
}

func (s *Screen) appendScreen(dst []byte) []byte {
	e := s.emu
	w, h := e.Width(), e.Height()
	// No attributes to start with: a client's terminal may have any
	// left, and its erases (CSI 2K) would fill with their background.
	dst = append(dst, ansi.ResetStyle...)
	if s.modes[ansi.ModeUnicodeCore] {
		dst = append(dst, "\x1b[?2027h"...) // widths as the program had them
	}
	alt := e.IsAltScreen()
	cur := e.CursorPosition()
	active := vtScreen(e, b2i(alt))
	cursor := vt.Cursor{}
	var region uv.Rectangle
	if active != nil {
		cursor = active.Cursor()
		region = active.ScrollRegion()
	}
	saved := vtSaved(active)
	regionSet := 0 <= region.Min.Y && region.Min.Y < region.Max.Y && region.Max.Y <= h && (region.Min.Y > 0 || region.Max.Y < h)
	// The primary screen, each row erased first (a client's terminal
	// may hold anything there). Every row when lines scrolled off
	// before (the history's lines must end up above the screen) or the
	// screen is placed absolutely (alternate screen, scroll region,
	// origin mode, a saved cursor): the last h lines written are the
	// screen. Else only the rows down to the last one used (or the
	// cursor's), and the cursor is placed relative to them: a client's
	// terminal shows a shell's few lines where its own cursor was, as
	// ssh would, instead of being cleared.
	var primary *vt.Screen // nil: the active screen
	if alt {
		primary = vtScreen(e, 0)
	}
	relative := !alt && !regionSet && !s.modes[ansi.ModeOrigin] && s.hist.Lines() == 0 && isZeroCursor(&saved)
	var line uv.Line
	if !alt || primary != nil {
		last := h - 1
		if relative {
			last = cur.Y
			for y := h - 1; y > cur.Y; y-- {
				if line = currentLine(line, e, w, y); len(appendLine(s.line[:0], line)) > 0 {
					last = y
					break
				}
			}
		}
		for y := range last + 1 {
			if y > 0 {
				dst = append(dst, "\r\n"...)
			}
			dst = append(dst, "\x1b[2K"...)
			if primary != nil {
				line = screenLine(line, primary, w, y)
			} else {
				line = currentLine(line, e, w, y)
			}
			dst = appendLine(dst, line)
		}
		if relative {
			dst = append(dst, '\r')
			if up := last - cur.Y; up > 0 {
				dst = appendCSI(dst, up, 'A')
			}
			if cur.X > 0 {
				dst = appendCSI(dst, cur.X, 'C')
			}
		}
		if primary != nil {
			// Where the program's exit from the alternate screen puts
			// the cursor back: 1049h saves it (DECSC), with the pen.
			// A program that entered with 1047h (or saved elsewhere
			// first) has its own saved cursor: that is saved, and the
			// alternate screen entered without saving.
			pc, ps := primary.Cursor(), vtSaved(primary)
			if ps.Position != pc.Position {
				dst = appendSavedCursor(dst, &ps, w, h)
				dst = appendCUP(dst, min(pc.X, w-1), min(pc.Y, h-1))
				dst = append(dst, "\x1b[?1047h\x1b[2J"...)
			} else {
				dst = appendCUP(dst, min(pc.X, w-1), min(pc.Y, h-1))
				dst = appendStyle(dst, &uv.Style{}, &ps.Pen)
				dst = append(dst, "\x1b[?1049h"...)
				if !ps.Pen.IsZero() {
					dst = append(dst, ansi.ResetStyle...)
				}
			}
		}
	}
	if alt {
		if primary == nil {
			dst = append(dst, "\x1b[?1049h"...)
		}
		for y := range h {
			line = currentLine(line, e, w, y)
			n := len(dst)
			dst = appendCUP(dst, 0, y)
			m := len(dst)
			if dst = appendLine(dst, line); len(dst) == m {
				dst = dst[:n] // a blank row: already blank
			}
		}
	}
	if !isZeroCursor(&saved) {
		// Where a program's DECRC (ESC 8) goes back to.
		dst = appendSavedCursor(dst, &saved, w, h)
	}
	if regionSet {
		dst = append(dst, "\x1b["...)
		dst = strconv.AppendInt(dst, int64(region.Min.Y+1), 10)
		dst = append(dst, ';')
		dst = strconv.AppendInt(dst, int64(region.Max.Y), 10)
		dst = append(dst, 'r')
	}
	for _, m := range redrawModes {
		set, ok := s.modes[m.mode]
		if !ok || set == m.def || m.mode == ansi.ModeInsertReplace {
			continue
		}
		dst = appendMode(dst, m.mode, set)
	}
	if s.modes[ansi.ModeNumericKeypad] {
		dst = append(dst, "\x1b="...) // DECKPAM: application keypad
	}
	if !relative {
		y := cur.Y
		if s.modes[ansi.ModeOrigin] {
			dst = append(dst, "\x1b[?6h"...)
			y -= max(region.Min.Y, 0)
		}
		dst = appendCUP(dst, cur.X, y)
	}
	if vtPendingWrap(e) && s.autowrap() && active != nil {
		// The character at the last column printed again, where the
		// cursor is: the next one wraps, as it would have.
		var c uv.Cell
		if p := active.CellAt(cur.X, cur.Y); p != nil {
			c = *p
		}
		dst = appendStyle(dst, &uv.Style{}, &c.Style)
		if c.Link.URL != "" {
			dst = append(dst, ansi.SetHyperlink(c.Link.URL, c.Link.Params)...)
		}
		if c.Content == "" {
			c.Content = " "
		}
		dst = append(dst, c.Content...)
		if c.Link.URL != "" {
			dst = append(dst, ansi.ResetHyperlink()...)
		}
		if !c.Style.IsZero() {
			dst = append(dst, ansi.ResetStyle...)
		}
	}
	if s.modes[ansi.ModeInsertReplace] {
		// After the character above, which it would have inserted.
		dst = appendMode(dst, ansi.ModeInsertReplace, true)
	}
	if e.CursorHidden() {
		dst = append(dst, "\x1b[?25l"...)
	}
	if style, blink := e.CursorStyle(); style != vt.CursorBlock || !blink {
		// DECSCUSR: 1 blinking block ... 6 steady bar.
		n := 1 + 2*int(style)
		if !blink {
			n++
		}
		dst = appendCSI(dst, n, ' ')
		dst = append(dst, 'q')
	}
	if !cursor.Pen.IsZero() {
		dst = appendStyle(dst, &uv.Style{}, &cursor.Pen)
	}
	return dst
}

// autowrap reports whether autowrap (DECAWM) is on.
func (s *Screen) autowrap() bool {
	set, ok := s.modes[ansi.ModeAutoWrap]
	return set || !ok
}

// isZeroCursor reports whether c is where a fresh terminal's saved
// cursor is: home, no attributes.
func isZeroCursor(c *vt.Cursor) bool {
	return c.Position == (uv.Position{}) && c.Pen.IsZero() && c.Link.IsZero()
}

// appendSavedCursor appends what saves c as the cursor DECRC restores
// (on a w×h screen): it placed with its attributes and link, DECSC,
// then the attributes and link reset. vt's DECRC also restores the
// cursor's visibility, which xterm's does not: a cursor hidden when
// saved is hidden around the DECSC, shown after (the redraw hides it
// again at its end if it is).
func appendSavedCursor(dst []byte, c *vt.Cursor, w, h int) []byte {
	dst = appendCUP(dst, min(c.X, w-1), min(c.Y, h-1))
	dst = appendStyle(dst, &uv.Style{}, &c.Pen)
	if c.Link.URL != "" {
		dst = append(dst, ansi.SetHyperlink(c.Link.URL, c.Link.Params)...)
	}
	if c.Hidden {
		dst = append(dst, "\x1b[?25l\x1b7\x1b[?25h"...)
	} else {
		dst = append(dst, "\x1b7"...)
	}
	if c.Link.URL != "" {
		dst = append(dst, ansi.ResetHyperlink()...)
	}
	if !c.Pen.IsZero() {
		dst = append(dst, ansi.ResetStyle...)
	}
	return dst
}

// appendCSI appends CSI n final.
func appendCSI(dst []byte, n int, final byte) []byte {
	dst = append(dst, "\x1b["...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, final)
}

// Pristine reports whether the terminal shows nothing yet: no history,
// a blank primary screen with the cursor at its top left, no mode or
// attribute set, no cursor saved. Its snapshot content is empty.
func (s *Screen) Pristine() bool {
	e := s.emu
	if s.hist.Lines() > 0 || e.IsAltScreen() || e.CursorPosition() != (uv.Position{}) || e.CursorHidden() {
		return false
	}
	for _, m := range redrawModes {
		if set, ok := s.modes[m.mode]; ok && set != m.def {
			return false
		}
	}
	if scr := vtScreen(e, 0); scr != nil {
		if pen, saved := scr.Cursor().Pen, vtSaved(scr); !pen.IsZero() || !isZeroCursor(&saved) {
			return false
		}
	}
	var line uv.Line
	for y := range e.Height() {
		if line = currentLine(line, e, e.Width(), y); len(appendLine(s.line[:0], line)) > 0 {
			return false
		}
	}
	return true
}

// currentLine returns row y of the active screen.
func currentLine(buf uv.Line, e *vt.Emulator, width, y int) uv.Line {
	buf = buf[:0]
	for x := range width {
		if c := e.CellAt(x, y); c != nil {
			buf = append(buf, *c)
		} else {
			buf = append(buf, uv.Cell{})
		}
	}
	return buf
}

func appendMode(dst []byte, m ansi.Mode, set bool) []byte {
	dst = append(dst, "\x1b["...)
	if _, dec := m.(ansi.DECMode); dec {
		dst = append(dst, '?')
	}
	dst = strconv.AppendInt(dst, int64(m.Mode()), 10)
	if set {
		return append(dst, 'h')
	}
	return append(dst, 'l')
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// vtLayout is where an Emulator keeps what its API does not show: its
// two screens (field scrs [2]vt.Screen: 0 primary, 1 alternate), its
// parser (parser *ansi.Parser), whose buffer for OSC/DCS/APC data vt
// sets to 4 MiB, allocated with each emulator (NewScreen sets it to
// maxSequenceData instead), and whether the cursor is in the pending
// wrap state (atPhantom bool); and where a vt.Screen keeps its cursor
// (cur vt.Cursor: the pen) and the cursor DECSC saved (saved
// vt.Cursor). ok is false when the layout is not the one this was
// written against (another version of vt): then the primary screen is
// not drawn under an active alternate one, the alternate screen keeps
// vt's scrollback, and the pending wrap, saved cursor and overline are
// not redrawn.
var vtLayout = func() (l struct {
	scrs, size, parser, phantom uintptr
	cur, saved                  uintptr
	ok                          bool
}) {
	et, st := reflect.TypeFor[vt.Emulator](), reflect.TypeFor[vt.Screen]()
	ok := true
	field := func(t reflect.Type, name string, want reflect.Type) uintptr {
		f, found := t.FieldByName(name)
		ok = ok && found && f.Type == want
		return f.Offset
	}
	l.scrs = field(et, "scrs", reflect.TypeFor[[2]vt.Screen]())
	l.parser = field(et, "parser", reflect.TypeFor[*ansi.Parser]())
	l.phantom = field(et, "atPhantom", reflect.TypeFor[bool]())
	l.cur = field(st, "cur", reflect.TypeFor[vt.Cursor]())
	l.saved = field(st, "saved", reflect.TypeFor[vt.Cursor]())
	l.size, l.ok = st.Size(), ok
	return l
}()

// vtParser returns e's parser, nil when vtLayout does not know where it
// is.
func vtParser(e *vt.Emulator) *ansi.Parser {
	if !vtLayout.ok {
		return nil
	}
	return *(**ansi.Parser)(unsafe.Add(unsafe.Pointer(e), vtLayout.parser))
}

// vtScreen returns screen i (0 primary, 1 alternate) of e, nil when
// vtLayout does not know where it is.
func vtScreen(e *vt.Emulator, i int) *vt.Screen {
	if !vtLayout.ok || i < 0 || i > 1 {
		return nil
	}
	return (*vt.Screen)(unsafe.Add(unsafe.Pointer(e), vtLayout.scrs+uintptr(i)*vtLayout.size))
}

// vtPendingWrap reports whether e's cursor is in the pending wrap state
// (a character printed at the last column: the next one goes to the
// next line).
func vtPendingWrap(e *vt.Emulator) bool {
	return vtLayout.ok && *(*bool)(unsafe.Add(unsafe.Pointer(e), vtLayout.phantom))
}

// vtCursor returns scr's cursor (its pen can be set), nil for a nil scr.
func vtCursor(scr *vt.Screen) *vt.Cursor {
	if scr == nil {
		return nil
	}
	return (*vt.Cursor)(unsafe.Add(unsafe.Pointer(scr), vtLayout.cur))
}

// vtSaved returns the cursor DECSC saved on scr (the zero Cursor when
// none was, or vtLayout does not know where it is).
func vtSaved(scr *vt.Screen) vt.Cursor {
	if scr == nil {
		return vt.Cursor{}
	}
	return *(*vt.Cursor)(unsafe.Add(unsafe.Pointer(scr), vtLayout.saved))
}

var _ io.Writer = (*vt.Emulator)(nil)
