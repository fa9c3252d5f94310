package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	uv "github.com/charmbracelet/ultraviolet"
	"github.com/charmbracelet/x/vt"

	"github.com/sidecar-dev/sidecar/adapters/pty"
)

// fullScreenScript is the reproduction: a program on the
// alternate screen draws a bold title at row 5, then redraws a counter at
// row 20 until its output is far past the scrollback bound, and waits
// (echo off, so the Enter before ~. leaves the screen as it is).
const fullScreenScript = `stty -echo
printf '\033[?1049h\033[H\033[2J\033[5;10H\033[1;4mTITLE at row 5\033[m\033[?2004h'
i=0
while [ $i -lt 60000 ]; do printf '\033[20;1Hcounter %06d' $i; i=$((i+1)); done
printf '\033[20;1H\033[32mcounter done\033[m  '
sleep 600
`

// emulated is what a terminal of 80×24 shows after out (the bytes a
// client wrote to it): a VT emulator (the host's, pty.Screen: its
// answers to queries are dropped) given out.
func emulated(out string) *vt.Emulator {
	s := pty.NewScreen(80, 24, 0)
	_ = s.Write([]byte(out))
	s.Close()
	return s.Emulator()
}

// screenDiff describes how b's visible screen differs from a's: cells
// (characters and attributes), the cursor, the alternate screen; "" when
// they are the same.
func screenDiff(a, b *vt.Emulator) string {
	var d []string
	if a.IsAltScreen() != b.IsAltScreen() {
		d = append(d, fmt.Sprintf("alternate screen %v, want %v", b.IsAltScreen(), a.IsAltScreen()))
	}
	if a.CursorPosition() != b.CursorPosition() {
		d = append(d, fmt.Sprintf("cursor %v, want %v", b.CursorPosition(), a.CursorPosition()))
	}
	blank := func(c *uv.Cell) bool { return c == nil || c.IsZero() || c.Equal(&uv.EmptyCell) }
	for y := range 24 {
		for x := range 80 {
			ca, cb := a.CellAt(x, y), b.CellAt(x, y)
			if (blank(ca) && blank(cb)) || (!blank(ca) && !blank(cb) && ca.Equal(cb)) {
				continue
			}
			d = append(d, fmt.Sprintf("row %d differs at column %d:\n got %q\nwant %q", y+1, x+1, emulatedRow(b, y), emulatedRow(a, y)))
			break
		}
	}
	return strings.Join(d, "\n")
}

func emulatedRow(e *vt.Emulator, y int) string {
	var b strings.Builder
	for x := range 80 {
		if c := e.CellAt(x, y); c != nil {
			b.WriteString(c.Content)
		}
	}
	return strings.TrimRight(b.String(), " ")
}

// TestReattachShowsFullScreen: a full-screen program in a terminal, `~.`,
// and a reattach in a terminal of the same size: the screen after the
// reattach (the client's output written into a fresh 80×24 terminal) is
// the screen before the detach, cell for cell with attributes, cursor
// and alternate screen; the title drawn once, long before the scrollback
// bound was passed, is there. Before the VT emulator the snapshot was
// the scrollback's raw bytes: the title was gone and row 1 showed a
// fragment of an old frame.
func TestReattachShowsFullScreen(t *testing.T) {
	t.Parallel()
	s := startServer(t, "") // scrollback_bytes 1 MiB: the program writes 1.3 MB
	script := filepath.Join(t.TempDir(), "fullscreen.sh")
	if err := os.WriteFile(script, []byte(fullScreenScript), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startInPTY(t, append([]string{"attach", s.url}, s.connArgs()...)...)
	pos := a.out.waitFor(t, "prompt", 0, "XPROMPT> ")
	a.typeText(t, "sh "+script+"\r")
	a.out.waitFor(t, "the counter's end", pos, "counter done")
	// The screen settles once the program sleeps.
	var before *vt.Emulator
	deadline := time.Now().Add(waitTimeout)
	for prev := ""; ; {
		time.Sleep(200 * time.Millisecond)
		cur := a.out.String()
		if cur == prev {
			before = emulated(cur)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("attach's output never settled")
		}
		prev = cur
	}
	if got := emulatedRow(before, 4); got != "         TITLE at row 5" {
		t.Fatalf("before the detach, row 5 is %q", got)
	}
	a.typeText(t, "\r~.")
	if code := a.wait(t); code != 0 {
		t.Fatalf("detach: exit status %d; screen:\n%s", code, tail(a.out.String(), 2000))
	}
	m := reattachHint.FindStringSubmatch(a.out.String())
	if m == nil {
		t.Fatalf("no reattach hint; screen:\n%s", tail(a.out.String(), 2000))
	}

	b := startInPTY(t, append([]string{"attach", s.url, m[1]}, s.connArgs()...)...)
	var diff string
	if _, ok := b.out.waitMatch(waitTimeout, func(out string) bool {
		diff = screenDiff(before, emulated(out))
		return diff == ""
	}); !ok {
		t.Fatalf("the screen after the reattach is not the one before the detach:\n%s", diff)
	}
	b.typeText(t, "\x03")
	b.typeText(t, "\r~.")
	b.wait(t)
}

// settled returns the emulated screen of p's output once it stops
// changing.
func settled(t *testing.T, p *ptyProc) *vt.Emulator {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for prev := ""; ; {
		time.Sleep(200 * time.Millisecond)
		cur := p.out.String()
		if cur == prev {
			return emulated(cur)
		}
		if time.Now().After(deadline) {
			t.Fatal("output never settled")
		}
		prev = cur
	}
}

// TestSharerBehindShowsFullScreen: a client sharing a terminal is cut
// off while the holder's full-screen program writes past the journal:
// it resumes from a snapshot, and its screen (written into a fresh
// terminal) is the holder's, cell for cell.
func TestSharerBehindShowsFullScreen(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	script := filepath.Join(t.TempDir(), "fullscreen.sh")
	if err := os.WriteFile(script, []byte(fullScreenScript), 0o644); err != nil {
		t.Fatal(err)
	}
	a, id := attachNewShell(t, s)
	relay, url := relayed(t, s)
	b := startInPTY(t, append([]string{"attach", url, id}, s.connArgs()...)...)
	bpos := b.out.waitFor(t, "shared notice", 0, "you share it")
	relay.Refuse(true)
	relay.Cut()
	a.typeText(t, "sh "+script+"\r")
	a.out.waitFor(t, "the counter's end", 0, "counter done")
	holder := settled(t, a)
	relay.Refuse(false)
	b.out.waitFor(t, "the resume", bpos, "sidecar: resumed")
	// Compared without attach's own status lines ("sidecar: resumed"),
	// which may land after the redraw, over the program's screen.
	var diff string
	if _, ok := b.out.waitMatch(waitTimeout, func(out string) bool {
		diff = screenDiff(holder, emulated(statusLine.ReplaceAllString(out, "")))
		return diff == ""
	}); !ok {
		t.Fatalf("the sharer's screen after its resume is not the holder's:\n%s", diff)
	}
	if !strings.Contains(s.p.stderr.String(), "ahp-terminal:/"+id+" snapshot") {
		t.Errorf("the host did not resume the sharer from a snapshot")
	}
}
