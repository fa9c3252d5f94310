package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-runewidth"
	"golang.org/x/term"

	"github.com/sidecar-dev/sidecar/client"
)

// reconnectLine is what a client command says about a reconnection step
// (without the "sidecar: " prefix), "" for a step it does not show.
func reconnectLine(st client.ReconnectStatus) string {
	switch st.State {
	case client.Retrying:
		if errors.Is(st.Err, client.ErrServerShutdown) {
			return fmt.Sprintf("the server is shutting down; reconnecting (attempt %d, next in %s)", st.Attempt, roughly(st.Next))
		}
		return fmt.Sprintf("connection lost, reconnecting (attempt %d, next in %s)", st.Attempt, roughly(st.Next))
	case client.Connecting:
		return fmt.Sprintf("connection lost, reconnecting (attempt %d, connecting…)", st.Attempt)
	case client.Resumed:
		if st.UnknownFate > 0 {
			return fmt.Sprintf("resumed from a snapshot; %d keystrokes typed during the cut may be lost", st.UnknownFate)
		}
		return "resumed"
	}
	return ""
}

// roughly writes d for a person: "0.3 s" under a second, else whole
// seconds ("4 s").
func roughly(d time.Duration) string {
	if d < 950*time.Millisecond { // "1.0 s" would read as another unit than "1 s"
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d s", int(d.Round(time.Second).Seconds()))
}

// statusOutput is the terminal's output and our status line on one
// screen: output goes through Write, Status shows a line of ours. The
// status line never goes inside an escape sequence or a UTF-8 character
// of the output (Write holds back an unfinished one), and never moves
// what the output drew:
//
//   - On the primary screen it is drawn on the row below the cursor
//     (scrolling up one row first if the cursor is on the last), and the
//     cursor is put back where it was, so the line being written (a
//     half-printed line, a shell's prompt with what was typed) stays whole
//     and the program's next bytes land where it expects. A new status
//     replaces the previous one; the first output after it erases it.
//   - On the alternate screen (a full-screen program) it is drawn over the
//     last row, in reverse video, the cursor put back; the program redraws
//     that row when it next draws it.
//
// Cursor movement is relative (IND, CUU, CUD) and saved with DECSC/DECRC,
// so it holds in raw mode and with the terminal's output processing on
// (run with a piped stdin). width gives the terminal's width in cells, to
// keep the status on one row (nil: 80).
type statusOutput struct {
	mu       sync.Mutex
	out      io.Writer // the program's output
	status   io.Writer // where the status line goes (the same terminal)
	width    func() int
	esc      escState
	csi      []byte // the parameter bytes of the CSI sequence being read (bounded)
	alt      bool   // the output is on the alternate screen
	held     []byte // the output's unfinished sequence or character, not written yet
	pending  string // a status line waiting for the output to leave a long string
	shown    bool   // a status line is on the row below the cursor (primary screen)
	last     string // the status line drawn last (Clear)
	altDrawn bool   // a status line is over the alternate screen's last row, no output since
}

// Status line sequences (ECMA-48, VT100).
const (
	// statusBelow draws the status on the row below the cursor: IND
	// (down one row, scrolling if on the last), CUU (back up), DECSC,
	// CUD, CR, erase the row, the text, DECRC.
	statusBelow = "\x1bD\x1b[1A\x1b7\x1b[1B\r\x1b[2K"
	// statusErase erases the row below the cursor, which holds our
	// status: DECSC, CUD, erase the row, DECRC.
	statusErase = "\x1b7\x1b[1B\x1b[2K\x1b8"
	// statusLastRow draws the status over the last row in reverse video:
	// DECSC, CUP to the last row (999 is clamped), erase it, SGR 7.
	statusLastRow = "\x1b7\x1b[999;1H\x1b[2K\x1b[7m"
	// maxCSIParams bounds what is kept of one CSI sequence's parameters.
	maxCSIParams = 32
	// maxHeld bounds the unfinished tail of the output Write holds back.
	maxHeld = 4096
)

func newStatusOutput(out, status io.Writer, width func() int) *statusOutput {
	return &statusOutput{out: out, status: status, width: width}
}

// termWidth is the width of the terminal on f in cells, 0 if unknown.
func termWidth(f *os.File) func() int {
	return func() int {
		w, _, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return 0
		}
		return w
	}
}

// Write writes p to the terminal, but for an escape sequence or a UTF-8
// character p ends inside: that tail (at most maxHeld bytes) is held and
// written with the next Write, so that between two Writes the terminal
// is never inside one and a status line can be drawn at once.
func (s *statusOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data := p
	if len(s.held) > 0 {
		data = append(s.held, p...)
		s.held = nil
	}
	st, cut := s.esc, 0
	for i, b := range data {
		if st = st.next(b); st == escGround {
			cut = i + 1
		}
	}
	if len(data)-cut > maxHeld { // a long string (OSC, DCS): written through
		cut = len(data)
	}
	if cut > 0 {
		if s.shown {
			_, _ = io.WriteString(s.status, statusErase)
			s.shown = false
		}
		s.altDrawn = false // the program may have drawn over it
		if _, err := s.out.Write(data[:cut]); err != nil {
			return 0, err
		}
		for _, b := range data[:cut] {
			s.track(b)
		}
	}
	s.held = append([]byte(nil), data[cut:]...)
	if s.esc == escGround && s.pending != "" {
		s.print(s.pending)
		s.pending = ""
	}
	return len(p), nil
}

// track follows the output's escape sequences one byte b at a time, and
// notes the switches to and from the alternate screen (DECSET/DECRST
// 1049, 1047 and 47) and a full reset (RIS).
func (s *statusOutput) track(b byte) {
	prev := s.esc
	s.esc = s.esc.next(b)
	switch {
	case prev == escEsc && s.esc == escCSI:
		s.csi = s.csi[:0]
	case prev == escCSI && s.esc == escCSI:
		if len(s.csi) < maxCSIParams {
			s.csi = append(s.csi, b)
		}
	case prev == escCSI && s.esc == escGround && (b == 'h' || b == 'l'):
		if p := string(s.csi); len(p) > 1 && p[0] == '?' {
			for _, mode := range strings.Split(p[1:], ";") {
				if mode == "1049" || mode == "1047" || mode == "47" {
					s.alt = b == 'h'
				}
			}
		}
	case prev == escEsc && b == 'c':
		s.alt = false
	}
}

// Status shows line, at once unless the output is inside a string longer
// than maxHeld (then once the string ends).
func (s *statusOutput) Status(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.esc != escGround {
		s.pending = line
		return
	}
	s.print(line)
}

// Notice shows line for good, in the output's order: on the alternate
// screen over the last row like a status (a full-screen program's screen
// and cursor stay as they are: its next output lands where it expects),
// short there when given (one row is all there is); on the primary
// screen as a line of its own below the output, which scrolls away with
// it. Inside a sequence longer than maxHeld it waits for its end, as
// Status does.
func (s *statusOutput) Notice(line, short string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if short == "" {
		short = line
	}
	if s.esc != escGround || s.alt {
		if s.esc != escGround {
			s.pending = short
			return
		}
		s.print(short)
		return
	}
	if s.shown {
		_, _ = io.WriteString(s.status, statusErase)
		s.shown = false
	}
	fmt.Fprintf(s.status, "\r\nsidecar: %s\r\n", line)
}

func (s *statusOutput) print(line string) {
	w := 80
	if s.width != nil {
		if n := s.width(); n > 0 {
			w = n
		}
	}
	text := "sidecar: " + line
	// One row, never the last column (no pending wrap).
	text = runewidth.Truncate(text, max(w-1, 0), "")
	s.last = line
	if s.alt {
		fmt.Fprintf(s.status, "%s%s\x1b[0m\x1b8", statusLastRow, text)
		s.altDrawn = true
		return
	}
	fmt.Fprintf(s.status, "%s%s\x1b8", statusBelow, text)
	s.shown = true
}

// statusClearLastRow erases the alternate screen's last row: DECSC, CUP
// to the last row, erase it, DECRC.
const statusClearLastRow = "\x1b7\x1b[999;1H\x1b[2K\x1b8"

// Clear takes back a status line that mine recognizes: one waiting is
// dropped, one still shown is erased (on the alternate screen only while
// the program has written nothing since: then the row is blank until it
// redraws it). Another status drawn since, or output that erased it, is
// left as it is.
func (s *statusOutput) Clear(mine func(line string) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending != "" && mine(s.pending) {
		s.pending = ""
	}
	if s.last == "" || !mine(s.last) {
		return
	}
	switch {
	case s.shown:
		_, _ = io.WriteString(s.status, statusErase)
		s.shown = false
	case s.altDrawn && s.alt:
		_, _ = io.WriteString(s.status, statusClearLastRow)
	}
	s.altDrawn = false
}

// escState tracks where a byte stream is in terms of escape sequences
// (ECMA-48: CSI, OSC and the other strings) and UTF-8 characters, so
// that our own lines go in only between them.
type escState int

const (
	escGround    escState = iota
	escEsc                // after ESC
	escCSI                // in ESC [ ... final
	escString             // in OSC/DCS/SOS/PM/APC, up to BEL or ST
	escStringEsc          // ESC inside a string (ST is ESC \)
	escUTF8               // inside a UTF-8 character (one more byte)
	escUTF8x2             // two more
	escUTF8x3             // three more
)

func (e escState) next(b byte) escState {
	switch e {
	case escEsc:
		switch b {
		case '[':
			return escCSI
		case ']', 'P', 'X', '^', '_':
			return escString
		case 0x1b:
			return escEsc
		}
		if b >= 0x20 && b <= 0x2f {
			return escEsc // intermediate bytes (ESC ( B): the final follows
		}
		return escGround
	case escCSI:
		if b >= 0x40 && b <= 0x7e {
			return escGround
		}
		return escCSI
	case escString:
		switch b {
		case 0x07:
			return escGround
		case 0x1b:
			return escStringEsc
		}
		return escString
	case escStringEsc:
		if b == '\\' {
			return escGround
		}
		return escString
	case escUTF8, escUTF8x2, escUTF8x3:
		if b&0xc0 != 0x80 {
			return escGround.next(b) // not a continuation: a new start
		}
		switch e {
		case escUTF8x3:
			return escUTF8x2
		case escUTF8x2:
			return escUTF8
		}
		return escGround
	}
	switch {
	case b == 0x1b:
		return escEsc
	case b&0xe0 == 0xc0:
		return escUTF8
	case b&0xf0 == 0xe0:
		return escUTF8x2
	case b&0xf8 == 0xf0:
		return escUTF8x3
	}
	return escGround
}
